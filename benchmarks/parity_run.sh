#!/usr/bin/env bash
# The bare-loop parity run on an accelerator (one 2-GPU node, 10-minute window): the product's own rules on
# config/examples/gpu_parity.yaml, each followed by benchmarks/harness_overhead.py on its results (and its
# ddp-profile of the bare loops), in priority order (LoRA, SR3, Study A); a step that would not fit the time left is
# skipped and says so. Run through device_run.sh:
#   benchmarks/device_run.sh benchmarks/parity_run.sh OUT_DIR [extra --configfile] [seconds]
# Writes OUT_DIR/harness_overhead_h200.csv, OUT_DIR/ddp_profile_h200.csv (harness_overhead.py ddp-profile),
# OUT_DIR/log.txt and OUT_DIR/results.tgz (result.json files and logs).
case ${1:-} in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac  # the header above
set -uo pipefail
out=${1:?usage: parity_run.sh OUT_DIR [extra_configfile] [seconds]}
extra=${2:-}
limit=${3:-540}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
csv="$out/harness_overhead_h200.csv"
log="$out/log.txt"
R=results/h200
cfgs=(--configfile config/examples/gpu_parity.yaml)
[ -n "$extra" ] && cfgs+=("$extra")

step() {  # step SECONDS_NEEDED command...
  local need=$1; shift
  if (( SECONDS + need > limit )); then echo "SKIPPED (time, ${SECONDS}s used): $*" | tee -a "$log"; return 0; fi
  echo "=== ${SECONDS}s: $*" | tee -a "$log"
  timeout $((limit - SECONDS)) "$@" >> "$log" 2>&1 || echo "FAILED (rc $?): $*" | tee -a "$log"
}
product() { step "$1" python3 -m snakemake "${@:2}" --cores all --keep-going "${cfgs[@]}" --config system=h200; }
bench() { step "$1" python3 benchmarks/harness_overhead.py "${@:2}" --csv "$csv"; }

nvidia-smi -L | tee -a "$log"
sr3=$R/sr3_scaling/fp32
lora=$R/lora_finetune/llama31_8b/flash
profile() { step "$1" python3 benchmarks/harness_overhead.py ddp-profile "${@:2}" --csv "$out/ddp_profile_h200.csv"; }
# LoRA first (Trainer step vs bare loop, then the DDP profile of the bare loop), then SR3's DDP profile and benchmark
product 100 $lora/single/n1/result.json $lora/ddp/n2/result.json
bench 50 lora --result $lora/single/n1/result.json
bench 60 lora --result $lora/ddp/n2/result.json
profile 120 --experiment lora --result $lora/ddp/n2/result.json --nprocs 1,2 --warmup 3 --repeat 10
product 90 $sr3/devices_1/result.json $sr3/devices_2/result.json
profile 60 --experiment sr3 --result $sr3/devices_2/result.json --data resources/sky/sr3_paper.npz --nprocs 1,2 \
  --warmup 3 --repeat 10
bench 45 sr3 --result $sr3/devices_2/result.json --data resources/sky/sr3_paper.npz --warmup 5 --repeat 15
bench 40 sr3 --result $sr3/devices_1/result.json --data resources/sky/sr3_paper.npz --warmup 5 --repeat 15
sa=$R/unet3d_profile/whole_head
mri=(--image resources/mri/whole_head_paper/image.nii.gz --mask resources/mri/whole_head_paper/mask.nii.gz)
product 90 $sa/baseline_autotuned/result.json $sa/bf16_autotuned/result.json
bench 30 study-a --result $sa/bf16_autotuned/result.json "${mri[@]}" --warmup 3 --repeat 10
bench 40 study-a --result $sa/baseline_autotuned/result.json "${mri[@]}" --warmup 3 --repeat 10
product 150 $sa/bf16_compile_autotuned/result.json
product 60 $sa/baseline/result.json
python3 benchmarks/harness_overhead.py efficiency --csv "$csv" >> "$log" 2>&1
tar czf "$out/results.tgz" --exclude='*.gz' --exclude='*.npz' results logs 2>/dev/null
echo "done in ${SECONDS}s" | tee -a "$log"
