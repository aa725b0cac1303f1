#!/usr/bin/env bash
# The committed H200 reference run, in parts that each fit one 10-minute call of a lent 2x H200 node (run through
# device_run.sh, which installs the carried wheels):
#   ACCELBENCH_GIT_COMMIT=<sha> benchmarks/device_run.sh reference_runs/h200-2026-11-30/notes/reference_h200.sh PART OUT_DIR SECONDS
# Settings: config/examples/gpu_paper.yaml + config/examples/reference_h200.yaml. Single-GPU work runs as two
# streams, one per GPU (CUDA_VISIBLE_DEVICES=0 / =1, half the cores each, two `snakemake --nolock` runs on disjoint
# targets; a job's noise check counts only its own GPU), and each stream takes its targets in priority order inside
# the window (benchmarks/reference_run.sh); two-GPU work runs on both afterwards. The results of earlier parts
# (reference_runs/h200-*/results/) are put in place first, so nothing is measured twice and the Nsight Compute jobs
# find the profile results they need. Writes OUT_DIR/log.txt and OUT_DIR/results.tgz (the result.json files and
# logs made by this part). Every part ran on 2026-11-30 (reference_runs/h200-2026-11-30/run.yaml, pieces 3-4, 6-12;
# pieces 13-14 are the single commands that finished the run, listed there).
set -uo pipefail
part=${1:?usage: reference_h200.sh PART OUT_DIR SECONDS}
out=${2:?OUT_DIR}
limit=${3:?SECONDS}
cfg=(--configfile config/examples/gpu_paper.yaml config/examples/reference_h200.yaml --config system=h200)
R=results/h200
SA=$R/unet3d_profile/whole_head
NCU=$R/unet3d_ncu/whole_head
LORA=$R/lora_finetune
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
work=$(mktemp -d)
touch "$work/start"
log="$out/log.txt"
half=$(( $(nproc) / 2 ))
echo "part $part, ${limit}s, $(nproc) cores, commit ${ACCELBENCH_GIT_COMMIT:-?}" | tee -a "$log"
nvidia-smi -L 2>/dev/null | tee -a "$log"
case $part in  # the inputs each part needs first (built once; the MRI volume may also be carried in prepared)
  1|2) pre=(resources/mri/whole_head_paper/image.nii.gz resources/sky/sr3_paper.npz) ;;
  *) pre=() ;;
esac
if (( ${#pre[@]} )); then
  python3 -m snakemake "${pre[@]}" --cores all "${cfg[@]}" > "$work/prelude.log" 2>&1 \
    || { echo "prelude failed"; tail -30 "$work/prelude.log"; } | tee -a "$log"
fi
mkdir -p results
for d in reference_runs/h200-*/results/h200; do [ -d "$d" ] && cp -rn "$d" results/; done
touch "$work/start"   # results newer than this were made by this part

until=$limit  # when the streams of a part end (a part may keep the rest of its window for two-GPU work)
stream() {  # stream NAME GPUS CORES TARGET_GROUP...  (in the background, until $until)
  local name=$1 gpus=$2 cores=$3 secs=$((until - SECONDS)); shift 3
  CUDA_VISIBLE_DEVICES=$gpus timeout -k 10 $((secs + 30)) benchmarks/reference_run.sh "$work/$name" "$secs" -- \
    --nolock --cores "$cores" "${cfg[@]}" -- "$@" > /dev/null 2>&1 &
}
both() {  # both SECONDS_NEEDED command... : on both GPUs, if the time left allows
  local need=$1; shift
  if (( SECONDS + need > limit )); then echo "SKIPPED (time, ${SECONDS}s used): $*" | tee -a "$log"; return 0; fi
  echo "=== ${SECONDS}s: $*" | tee -a "$log"
  timeout -k 20 $((limit - SECONDS)) bash -c "$(declare -p cfg out); $(declare -f smk bench); \"\$@\"" both "$@" \
    >> "$work/both.log" 2>&1 || echo "FAILED or stopped (rc $?): $*" | tee -a "$log"
}
smk() { python3 -m snakemake "$@" --cores all "${cfg[@]}"; }
bench() { python3 benchmarks/harness_overhead.py "$@" --csv "$out/harness_overhead_h200.csv"; }
L8=$LORA/llama31_8b

case $part in
  1)  # Study A: the configurations not yet run, Nsight Compute coverage for the rest; SR3 bf16 on one GPU
    stream g0 0 "$half" "$R/sr3_scaling/bf16/devices_1/result.json" \
      "$SA/tf32_autotuned/result.json" "$SA/channels_last_3d_autotuned/result.json" \
      "$SA/tf32_channels_last_3d_autotuned/result.json" "$SA/tf32_compile_autotuned/result.json" \
      "$SA/bf16_compile/result.json" "$SA/tf32_compile/result.json" "$SA/compile_autotuned/result.json" \
      "$SA/compile/result.json"
    stream g1 1 "$half" "$NCU/baseline/result.json" "$NCU/tf32_channels_last_3d/result.json" \
      "$NCU/channels_last_3d/result.json" "$SA/bf16_compile_fused_adam_autotuned/result.json" \
      "$SA/bf16_compile_cudagraphs_autotuned/result.json" "$SA/bf16_compile_fused_adam/result.json" \
      "$SA/bf16_compile_cudagraphs/result.json"
    wait
    ;;
  2)  # Study A: the compiled configurations not yet run | kernel tables and Nsight Compute coverage for the
      # configurations still without counters; then SR3 bf16 on 2 GPUs and SR3's DDP profile
    # re-measured here: part 1 kept no kernel table (kernels.csv) beside these results, and Nsight Compute's
    # coverage is measured against it
    for c in baseline channels_last_3d tf32_channels_last_3d; do rm -rf "${SA:?}/$c"; done
    until=$(( limit - 130 ))
    stream g0 0 "$half" "$SA/tf32_compile_autotuned/result.json" "$SA/bf16_compile/result.json" \
      "$SA/tf32_compile/result.json" "$SA/compile_autotuned/result.json" "$SA/compile/result.json"
    stream g1 1 "$half" "$SA/baseline/result.json" "$NCU/baseline/result.json" \
      "$SA/tf32_channels_last_3d/result.json" "$NCU/tf32_channels_last_3d/result.json" \
      "$SA/channels_last_3d/result.json" "$NCU/channels_last_3d/result.json"
    wait
    both 80 smk "$R/sr3_scaling/bf16/devices_2/result.json"
    both 45 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$R/sr3_scaling/fp32/devices_2/result.json" --data resources/sky/sr3_paper.npz --nprocs 1,2 \
      --warmup 3 --repeat 10 --csv "$out/ddp_profile_h200.csv"
    ;;
  # What the pieces above could not run, for the next lease (each part one call of a 2x H200 node). Part 4 carries
  # .whl/ (Snakemake, MONAI, nibabel), .whl_b/ (DeepSpeed, torchao), resources/llm/tokenizers/smollm2 (the random-init
  # LLM presets need only this tokenizer) and resources/mri/whole_head_paper; parts 5 and 6 carry the two parts of
  # the SmolLM2 GGUF (benchmarks/smollm2_parts.sh .gpu_smollm2 41,60) back to back on the same warm node.
  4)  # LoRA at Llama-3.1-8B shape: 1 GPU (+ Gemma-2-27B) | the last Study A configurations and Nsight Compute; then
      # the harness-overhead benchmark, DDP (benchmark, profile), FSDP and ZeRO-3 on 2 GPUs
    rm -rf "${SA:?}/channels_last_3d"  # re-measured with its kernel table (part 1 kept none), for Nsight Compute
    until=$(( limit - 250 ))
    stream g0 0 "$half" "$L8/flash/single/n1/result.json" "$R/lora_finetune/gemma2_27b/flash/single/n1/result.json" \
      "$L8/eager/single/n1/result.json"
    stream g1 1 "$half" "$NCU/tf32_channels_last_3d/result.json" "$SA/channels_last_3d/result.json" \
      "$NCU/channels_last_3d/result.json" "$SA/tf32_compile/result.json" "$SA/compile_autotuned/result.json" \
      "$SA/compile/result.json"
    wait
    both 50 bench lora --result "$L8/flash/single/n1/result.json"
    both 70 smk "$L8/flash/ddp/n2/result.json"
    both 50 bench lora --result "$L8/flash/ddp/n2/result.json"
    both 50 python3 benchmarks/harness_overhead.py ddp-profile --experiment lora --result "$L8/flash/ddp/n2/result.json" \
      --nprocs 1,2 --warmup 3 --repeat 10 --csv "$out/ddp_profile_h200.csv"
    both 60 smk "$L8/eager/fsdp/n2/result.json"
    both 70 smk "$L8/eager/zero3/n2/result.json"
    python3 benchmarks/harness_overhead.py efficiency --csv "$out/harness_overhead_h200.csv" >> "$work/both.log" 2>&1
    ;;
  5)  # (GGUF part 1 arrives) the larger shapes on 2 GPUs: Gemma-2-27B DDP/FSDP/ZeRO-3, Llama-3.3-70B (OOM recorded
      # where the weights cannot fit), Llama-3.1-8B eager DDP
    G=$R/lora_finetune/gemma2_27b
    L70=$R/lora_finetune/llama33_70b
    both 90 smk "$G/flash/ddp/n2/result.json"
    both 90 smk "$G/eager/fsdp/n2/result.json"
    both 100 smk "$G/eager/zero3/n2/result.json"
    both 30 smk "$L70/flash/single/n1/result.json" "$L70/flash/ddp/n2/result.json"
    both 120 smk "$L70/eager/fsdp/n2/result.json"
    both 60 smk "$L8/eager/ddp/n2/result.json"
    ;;
  6)  # (GGUF part 2 arrives: SmolLM2 complete) quantization on the full splits | the TinyLlama-1.1B architecture
    Q=$R/llm_quant
    stream g0 0 "$half" "$Q/smollm2_135m/sensitivity/result.json" \
      "$Q/smollm2_135m/fp32/none/result.json $Q/smollm2_135m/fake/16_8_4/result.json $Q/smollm2_135m/torchao/16_8_4/result.json" \
      "$Q/smollm2_135m/fake/8_8_4/result.json $Q/smollm2_135m/fake/8_4_4/result.json $Q/smollm2_135m/torchao/8_8_4/result.json" \
      "$Q/smollm2_135m/torchao/8_4_4/result.json $Q/smollm2_135m/torchao/16_8_8/result.json $Q/smollm2_135m/inc_fp8/bf16_fp8/result.json"
    stream g1 1 "$half" "$Q/tinyllama_arch_random/sensitivity/result.json" \
      "$Q/tinyllama_arch_random/fp32/none/result.json $Q/tinyllama_arch_random/torchao/16_8_4/result.json" \
      "$Q/tinyllama_arch_random/torchao/8_8_4/result.json $Q/tinyllama_arch_random/torchao/8_4_4/result.json" \
      "$Q/tinyllama_arch_random/fake/16_8_4/result.json $Q/tinyllama_arch_random/fake/8_8_4/result.json $Q/tinyllama_arch_random/fake/8_4_4/result.json"
    wait
    ;;
  # Parts 7-9 (pieces 10-12, one lease, the node kept warm between calls): part 7 carries .whl/, .whl_b/, .whl_c/
  # (lm-evaluation-harness and datasets: node_wheels.sh .whl_c "lm_eval>=0.4.13,<0.5" datasets),
  # resources/llm/tokenizers/smollm2 and resources/mri/whole_head_paper; parts 8 and 9 carry the GGUF's two parts.
  # The exported model folders (resources/llm/<model>) are node-local: a fresh node rebuilds them and what depends on
  # them (part 9 re-measured both sensitivity jobs, and its TinyLlama stream ran out of window before the methods).
  7)  # Nsight Compute channels_last_3d, then compile | tf32_compile, compile_autotuned; then LoRA 8B eager DDP and the
      # LoRA benchmark (fast_host_step and the non-blocking batch copies, on a GPU)
    until=$(( limit - 120 ))
    stream g0 0 "$half" "$NCU/channels_last_3d/result.json" "$SA/compile/result.json"
    stream g1 1 "$half" "$SA/tf32_compile/result.json" "$SA/compile_autotuned/result.json"
    wait
    both 60 smk "$L8/eager/ddp/n2/result.json"
    both 50 bench lora --result "$L8/flash/single/n1/result.json"
    ;;
  8)  # (GGUF part 1 arrives) Llama-3.1-8B ZeRO-3 and FSDP, Llama-3.3-70B (OOM recorded where it cannot fit),
      # Gemma-2-27B ZeRO-3
    G=$R/lora_finetune/gemma2_27b
    L70=$R/lora_finetune/llama33_70b
    both 150 smk "$L8/eager/zero3/n2/result.json"
    both 150 smk "$L8/eager/fsdp/n2/result.json"
    both 60 smk "$L70/flash/single/n1/result.json" "$L70/flash/ddp/n2/result.json"
    both 150 smk "$G/eager/zero3/n2/result.json"
    ;;
  9)  # (GGUF part 2 arrives: SmolLM2 complete) the quantization methods (sensitivity kept from part 6) | the
      # TinyLlama-1.1B architecture's; then Gemma-2-27B FSDP
    Q=$R/llm_quant
    G=$R/lora_finetune/gemma2_27b
    until=$(( limit - 200 ))
    stream g0 0 "$half" \
      "$Q/smollm2_135m/fp32/none/result.json $Q/smollm2_135m/fake/16_8_4/result.json $Q/smollm2_135m/torchao/16_8_4/result.json" \
      "$Q/smollm2_135m/fake/8_8_4/result.json $Q/smollm2_135m/fake/8_4_4/result.json $Q/smollm2_135m/torchao/8_8_4/result.json" \
      "$Q/smollm2_135m/torchao/8_4_4/result.json $Q/smollm2_135m/torchao/16_8_8/result.json"
    stream g1 1 "$half" \
      "$Q/tinyllama_arch_random/fp32/none/result.json $Q/tinyllama_arch_random/torchao/16_8_4/result.json" \
      "$Q/tinyllama_arch_random/torchao/8_8_4/result.json $Q/tinyllama_arch_random/torchao/8_4_4/result.json" \
      "$Q/tinyllama_arch_random/fake/16_8_4/result.json $Q/tinyllama_arch_random/fake/8_8_4/result.json $Q/tinyllama_arch_random/fake/8_4_4/result.json"
    wait
    both 150 smk "$G/eager/fsdp/n2/result.json"
    ;;
  *) echo "unknown part $part" | tee -a "$log"; exit 2 ;;
esac
for s in "$work"/g*/log.txt; do [ -f "$s" ] && { echo "--- stream $(basename "$(dirname "$s")")"; cat "$s"; }; done >> "$log"
cat "$work/prelude.log" "$work/both.log" 2>/dev/null > "$out/commands.log"
find results \( -name result.json -o -name kernels.csv \) -newer "$work/start" > "$work/new.txt"
find logs -type f -newer "$work/start" >> "$work/new.txt" 2>/dev/null
tar czf "$out/results.tgz" -T "$work/new.txt" 2>/dev/null
echo "new results: $(grep -c result.json "$work/new.txt"); done in ${SECONDS}s" | tee -a "$log"
