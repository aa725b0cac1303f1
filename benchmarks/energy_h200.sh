#!/usr/bin/env bash
# Energy per step on one H200, about 4 minutes of device time, run through benchmarks/device_run.sh:
#   ACCELBENCH_GIT_COMMIT=<sha> benchmarks/device_run.sh bash benchmarks/energy_h200.sh OUT_DIR
# 1. the product's rules (config/examples/energy_h200.yaml): Study A bf16, SR3 bf16 on one device, LoRA single, each
#    with measurements.energy (NVML board energy), and the energy table and figure (rule energy_aggregate);
# 2. benchmarks/energy_overhead.py on each result: the product step with the meter off and on, alternated over 3
#    rounds (LoRA: 2; step time on/off; J per step over the rounds with the meter on: repeatability).
# Writes OUT_DIR/log.txt, OUT_DIR/energy_overhead_h200.csv and OUT_DIR/results.tgz (results, energy tables, logs).
set -uo pipefail
out=${1:?usage: energy_h200.sh OUT_DIR}
mkdir -p "$out"
log="$out/log.txt"
R=results/h200
SA=$R/unet3d_profile/whole_head/bf16/result.json
SR3=$R/sr3_scaling/bf16/devices_1/result.json
LORA=$R/lora_finetune/llama_energy_random/flash/single/n1/result.json
cfg=(--configfile config/examples/energy_h200.yaml --config system=h200)
export PYTHONUNBUFFERED=1
nvidia-smi -L 2>&1 | tee -a "$log"
python3 -c "import pynvml; pynvml.nvmlInit(); print('NVML', pynvml.nvmlSystemGetDriverVersion())" 2>&1 | tee -a "$log"
echo "=== ${SECONDS}s: product rules" | tee -a "$log"
python3 -m snakemake "$SA" "$SR3" "$LORA" results/energy/energy.csv --cores all "${cfg[@]}" > "$out/snakemake.log" 2>&1 \
  || { echo "snakemake failed"; tail -40 "$out/snakemake.log"; } | tee -a "$log"
for f in "$SA" "$SR3" "$LORA"; do
  [ -f "$f" ] && python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['measurements'].get('energy',{}); \
print(sys.argv[1], e.get('status'), e.get('j_per_step'), e.get('power_w'), e.get('reliable'), e.get('per_unit'), \
e.get('reason'))" "$f" | tee -a "$log"
done
echo "=== ${SECONDS}s: meter off vs on" | tee -a "$log"
bench() { python3 benchmarks/energy_overhead.py --csv "$out/energy_overhead_h200.csv" "$@" >> "$log" 2>&1 \
  || echo "FAILED: energy_overhead $*" | tee -a "$log"; }
[ -f "$SA" ] && bench --result "$SA" --image resources/mri/whole_head_paper/image.nii.gz \
  --mask resources/mri/whole_head_paper/mask.nii.gz
[ -f "$SR3" ] && bench --result "$SR3" --data resources/sky/sr3_paper.npz
[ -f "$LORA" ] && bench --result "$LORA" --rounds 2  # a whole Trainer run per phase
echo "=== ${SECONDS}s: done" | tee -a "$log"
tar czf "$out/results.tgz" results/h200 results/energy logs 2>/dev/null
