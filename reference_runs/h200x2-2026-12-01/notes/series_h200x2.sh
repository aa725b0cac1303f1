#!/usr/bin/env bash
# The faithful and ours series of every experiment on a lent 2x H200 node, in three parts that each fit one 10-minute
# call, the node kept warm between them (run through device_run.sh, which installs the carried wheels):
#   ACCELBENCH_GIT_COMMIT=<sha> benchmarks/device_run.sh bash reference_runs/h200x2-2026-12-01/notes/series_h200x2.sh PART OUT_DIR SECONDS
# Settings: gpu_paper.yaml + reference_h200_study_a_faithful.yaml + h200_quant_faithful.yaml + series_h200x2.yaml
# (one settings set for all parts). Single-GPU work runs as two streams, one per GPU (CUDA_VISIBLE_DEVICES=0 / =1,
# half the cores each, `snakemake --nolock` on disjoint targets, each stream in priority order inside the window);
# two-GPU work runs on both afterwards. Part 1 carries .whl/; part 2 the SmolLM2 GGUF's first part and the
# HellaSwag/BoolQ export (resources/study_b_eval); part 3 the GGUF's second part (benchmarks/smollm2_parts.sh
# .gpu_smollm2 46). Writes OUT_DIR/log.txt, OUT_DIR/results.tgz (new result.json, kernel tables, logs) and the
# benchmark CSVs.
#   1: SR3 faithful/bf16/bf16_compile/bf16_compile_cudagraphs on 1 GPU, then the overhead benchmark of the first two |
#      Study A's faithful series on Med-DDPM's network (profile + Nsight Compute coverage)
#   2: SR3 on 2 GPUs, the overhead benchmark and SR3's DDP profile (bf16), LoRA Llama-3.1-8B DDP and FSDP, 2 GPUs
#   3: quantization as Study B's scripts ran it: SmolLM2-135M (full HellaSwag/BoolQ) | the TinyLlama-1.1B
#      architecture; then the energy meter off vs on (SR3 bf16, 1 GPU, 3 rounds)
# Parts 4-6 (the next lease, a fresh node: part 4 carries .whl/, parts 5 and 6 the GGUF's parts and the HellaSwag/BoolQ
# export as above) run what parts 1-3 left, starting from the committed results of reference_runs/h200x2-2026-12-01:
#   4: Study A's Nsight Compute baseline (a4/a5), then the channels_last_3d configurations | SR3's overhead benchmark
#      on 1 GPU (faithful, bf16; half the cores each); then SR3's DDP profile (bf16, 1 and 2 ranks) and the faithful
#      overhead benchmark on 2 GPUs
#   5: LoRA Llama-3.1-8B DDP and FSDP, faithful and ours (energy per token), the overhead benchmark of ours DDP
#   6: SmolLM2-135M's other quantization runs | the energy meter off vs on for Study A (bf16); then Gemma-2-27B FSDP
# Parts 7-9 are for a one-GPU node (nvidia-h200; part 7 carries .whl/, the node keeps it for 8 and 9), the same
# settings, every core to the one stream:
#   7: Study A's Nsight Compute baseline (a4/a5), the channels_last_3d pair, their Nsight Compute passes
#   8: what 7 left; Study A ours on Med-DDPM's network (autotuned baseline, bf16 + compile + CUDA graphs with and
#      without channels_last_3d); the energy meter off vs on for Study A tf32 (a GPU-bound step)
#   9: LoRA Llama-3.1-8B single GPU, faithful and ours (energy per token), the overhead benchmark of ours; SR3's
#      overhead benchmark on 1 GPU (faithful, bf16, every core) and its profile (host vs device time, 1 rank)
# Parts 11-13 are for a second one-GPU lease (part 11 carries .whl/ and builds the inputs; results go to a reference run
# of their own, reference_runs/h200x1-2026-12-01, so that every 1-GPU number and its bare loop come from one node):
#   11: SR3 on 1 GPU, every configuration of the faithful and ours series again on this node (faithful with the
#       authors' data path; bf16_compile_channels_last and bf16_compile_channels_last_cudagraphs new)
#   12: SR3's overhead benchmark on 1 GPU for each of them (the rule's median against the bare loop, same node) and
#       the profile of the compiled steps (host vs device time, kernel time by class)
#   13: LoRA Llama-3.1-8B ours on 1 GPU again and its overhead benchmark; the energy meter off vs on for SR3's fastest
#       configuration (3 rounds: repeatability); Study A's CUDA-graph configuration with 2 micro-batches
#   (Parts 11-13 ran on 2026-12-01 at 88a41ff: 537, 555 and 468 s. Each SR3 rule took about 110 s, each overhead
#   benchmark of a compiled configuration about 230 s (it compiles twice), of faithful 72 s; LoRA's rule 130 s and its
#   benchmark 134 s. They found that the rule's compiled SR3 configurations ran eager, fixed in 24b583c.)
#   14: (the next one-GPU lease, a fresh node: carries .whl/, builds the inputs, starts from
#       reference_runs/h200x1-2026-12-01) SR3 bf16_compile_cudagraphs again with the fix and its overhead benchmark
#       (the fixed rule's median against the bare loop), then bf16 (eager) remade on this node and its benchmark
#   15: SR3's profile of the compiled step (host vs device time, kernel time by class), then bf16_compile again and
#       its overhead benchmark
#   (Parts 14-15 ran on 2026-12-01 at 3a78b6f, 480 and 318 s: reference_runs/h200x1b-2026-12-01. The fixed rule's
#   CUDA-graph step took 78.27 ms, its bare loop 78.33; its first iteration compiled for 181 s with a cold cache.)
# Parts 16-17 and 23 are for the next 2-GPU lease (nvidia-h200-x2; part 16 carries .whl/ and builds the inputs;
# starts from reference_runs/h200x2-2026-12-01, then h200x1c, h200x1b and h200x1), SR3 ours' fastest configuration
# (bf16_compile_layout_opt_cudagraphs: 65.18 ms on 1 GPU, reference_runs/h200x1c-2026-12-01) as the fixed rule runs it:
#   16: on 2 GPUs (DDP) and its overhead benchmark (the rule's median against the bare loop)
#   17: on 1 GPU remade on this node (so that the efficiency compares one node) and its overhead benchmark; faithful on
#       2 GPUs remade on this node
#   23: the faithful 2-GPU overhead benchmark; the profile of the compiled step on 1 and 2 ranks
#   then parts 5 and 6 (LoRA DDP/FSDP faithful and ours with energy; Gemma-2-27B FSDP), then
#   20: LoRA Llama-3.1-8B ZeRO-3 on 2 GPUs, faithful (the authors' DeepSpeed config) and ours. DeepSpeed is not in the
#       node's image: carry its wheels as a second folder, made on a machine with internet by
#       `benchmarks/node_wheels.sh .whl_ds deepspeed==0.19.8` (4.8 MB; device_run.sh installs every .whl_*/ folder)
# A step's budget only decides whether it starts (a running step is stopped at the call's limit); the budgets below
# count a cold Inductor cache on a fresh node (the fixed rule's first SR3 iteration compiled for 181 s) and a warm one
# after the rule compiled the same graph (the overhead benchmark of a compiled configuration then took 81 s).
# Parts 18-19 are for the next one-GPU lease (part 18 on a fresh node: carries .whl/, builds the inputs, starts from
# reference_runs/h200x1b-2026-12-01, then h200x1): where the CUDA-graph step's 22 ms of layout conversions come from
#   18: bf16_compile_channels_last_cudagraphs with the fixed rule, then its profile (kernel time by class, the top
#       kernels by name: reference_runs/h200x1-2026-12-03/notes/ddp_profile_h200.csv; the compiled graph is then in the cache)
#   19: the profile of bf16_compile_cudagraphs (compiles afresh), then the overhead benchmark of the channels_last one
#   (Parts 18-19 ran on 2026-12-01 at d406c1c, 371 and 297 s: the 22 ms are cuDNN's nchwToNhwc/nhwcToNchw transposes
#   around each bf16 convolution, 910 kernels; channels_last removes them but adds 154 eager copies, 10.8 ms)
#   21: (the next one-GPU call, a fresh node: carries .whl/, builds the inputs, starts from
#       reference_runs/h200x1b-2026-12-01) bf16_compile_layout_opt_cudagraphs (Inductor's layout optimization
#       forced in the NCHW network), its profile, then its overhead benchmark
#   22: (a fresh node, 260 s of device time left: no input but the SR3 patches) the profile of
#       bf16_compile_layout_opt_cudagraphs from reference_runs/h200x1c-2026-12-01, its bare loop compiled as the rule's
#       Trainer compiles it
# A call carries at most 64 MiB with the tracked tree (about 12 MiB): parts that score no HellaSwag/BoolQ (4, 5, 7-9)
# can leave lm_eval's wheel (9 MB) out of .whl/ (the node keeps what an earlier call installed).
set -uo pipefail
part=${1:?usage: series_h200x2.sh PART OUT_DIR SECONDS}
out=${2:?OUT_DIR}
limit=${3:?SECONDS}
cfg=(--configfile config/examples/gpu_paper.yaml config/examples/reference_h200_study_a_faithful.yaml
     config/examples/h200_quant_faithful.yaml config/examples/series_h200x2.yaml --config system=h200)
R=results/h200
SA=$R/unet3d_profile/whole_head
NCU=$R/unet3d_ncu/whole_head
S=$R/sr3_scaling
L8=$R/lora_finetune/llama31_8b
Q=$R/llm_quant
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out" results
work=/tmp/accelbench-series-$part
rm -rf "$work" && mkdir -p "$work"
touch "$work/start"
log="$out/log.txt"
half=$(( $(nproc) / 2 ))
cores=$half  # per stream; parts 7 and later (one GPU) give the one stream every core
[ "$part" -ge 7 ] && cores=$(nproc)
echo "part $part, ${limit}s, $(nproc) cores, commit ${ACCELBENCH_GIT_COMMIT:-?}" | tee -a "$log"
nvidia-smi -L 2>/dev/null | tee -a "$log"
smk() { python3 -m snakemake "$@" --cores all "${cfg[@]}"; }
if [ "$part" = 22 ]; then  # the SR3 patches only (every second counts)
  smk resources/sky/sr3_paper.npz > "$work/prelude.log" 2>&1 || { echo "prelude failed"; tail -30 "$work/prelude.log"; } | tee -a "$log"
fi
if [ "$part" = 1 ] || [ "$part" = 4 ] || [ "$part" = 7 ] || [ "$part" = 11 ] || [ "$part" = 14 ] || [ "$part" = 16 ] || [ "$part" = 18 ] || [ "$part" = 21 ]; then  # the inputs (built once; the node keeps them between calls)
  smk resources/mri/whole_head_paper/image.nii.gz resources/sky/sr3_paper.npz > "$work/prelude.log" 2>&1 \
    || { echo "prelude failed"; tail -30 "$work/prelude.log"; } | tee -a "$log"
fi
if [ "$part" -ge 4 ]; then  # the results parts 1-3 made (inputs of the benchmarks; nothing measured
  # twice), copied after the prelude so that they are newer than the inputs it builds
  runs=(reference_runs/h200x2-2026-12-01)  # parts 14 and later: this node's kind's run first (cp -n: first wins)
  [ "$part" -ge 14 ] && runs=(reference_runs/h200x1-2026-12-01 reference_runs/h200x2-2026-12-01)
  [ "$part" -ge 16 ] && runs=(reference_runs/h200x2-2026-12-01 reference_runs/h200x1b-2026-12-01
                              reference_runs/h200x1-2026-12-01)
  [ "$part" -ge 18 ] && runs=(reference_runs/h200x1b-2026-12-01 reference_runs/h200x1-2026-12-01)
  [ "$part" -ge 22 ] && runs=(reference_runs/h200x1c-2026-12-01 "${runs[@]}")
  [ "$part" = 16 ] || [ "$part" = 17 ] || [ "$part" = 23 ] && runs=(reference_runs/h200x2-2026-12-01
    reference_runs/h200x1c-2026-12-01 reference_runs/h200x1b-2026-12-01 reference_runs/h200x1-2026-12-01)
  for r in "${runs[@]}"; do [ -d "$r/results/h200" ] && cp -rn "$r/results/h200" results/; done
  # parts 11-13 remake on this node the 1-GPU results they compare with their bare loops
  [ "$part" = 11 ] && rm -rf "$R"/sr3_scaling/*/devices_1
  [ "$part" = 13 ] && rm -rf "$R/lora_finetune/llama31_8b/flash/single"
  [ "$part" = 14 ] && rm -rf "$S/bf16/devices_1"
  [ "$part" = 17 ] && rm -rf "$S/bf16_compile_layout_opt_cudagraphs/devices_1" "$S/faithful/devices_2"  # remade here
  touch "$work/start"
fi
until=$limit
stream() {  # stream NAME GPUS TARGET_GROUP...  (in the background, until $until)
  local name=$1 gpus=$2 secs=$((until - SECONDS)); shift 2
  CUDA_VISIBLE_DEVICES=$gpus timeout -k 10 $((secs + 30)) benchmarks/reference_run.sh "$work/$name" "$secs" -- \
    --nolock --cores "$cores" "${cfg[@]}" -- "$@" > /dev/null 2>&1 &
}
step() {  # step SECONDS_NEEDED command... : if the time left allows (on the GPUs the caller set)
  local need=$1; shift
  if (( SECONDS + need > limit )); then echo "SKIPPED (time, ${SECONDS}s used): $*" | tee -a "$log"; return 0; fi
  echo "=== ${SECONDS}s: $*" | tee -a "$log"
  timeout -k 20 $((limit - SECONDS)) bash -c "$(declare -p cfg out); $(declare -f smk bench ebench); \"\$@\"" step "$@" \
    >> "$work/steps.log" 2>&1 || echo "FAILED or stopped (rc $?): $*" | tee -a "$log"
}
bench() { python3 benchmarks/harness_overhead.py "$@" --csv "$out/harness_overhead_h200.csv" --warmup 5 --repeat 20; }
ebench() { python3 benchmarks/energy_overhead.py "$@" --csv "$out/energy_overhead_h200.csv"; }
sky=(--data resources/sky/sr3_paper.npz)

case $part in
  1)
    until=$(( limit - 150 ))
    stream g0 0 "$S/faithful/devices_1/result.json" "$S/bf16/devices_1/result.json" \
      "$S/bf16_compile/devices_1/result.json" "$S/bf16_compile_cudagraphs/devices_1/result.json"
    stream g1 1 "$SA/baseline/result.json $SA/tf32/result.json" "$NCU/tf32/result.json" "$NCU/baseline/result.json" \
      "$SA/channels_last_3d/result.json $SA/tf32_channels_last_3d/result.json"
    wait
    CUDA_VISIBLE_DEVICES=0 step 60 bench sr3 --result "$S/faithful/devices_1/result.json" "${sky[@]}" --threads "$half" &
    CUDA_VISIBLE_DEVICES=1 step 60 bench sr3 --result "$S/bf16/devices_1/result.json" "${sky[@]}" --threads "$half" &
    wait
    ;;
  2)
    step 70 smk "$S/faithful/devices_2/result.json"
    step 70 smk "$S/bf16/devices_2/result.json"
    step 60 bench sr3 --result "$S/bf16/devices_2/result.json" "${sky[@]}"
    step 70 smk "$L8/faithful/flash/ddp/n2/result.json" "$L8/flash/ddp/n2/result.json"
    step 90 smk "$S/bf16_compile/devices_2/result.json" "$S/bf16_compile_cudagraphs/devices_2/result.json"
    step 45 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16/devices_2/result.json" "${sky[@]}" --nprocs 1,2 --warmup 3 --repeat 10 \
      --csv "$out/ddp_profile_h200.csv"
    step 60 bench sr3 --result "$S/faithful/devices_2/result.json" "${sky[@]}"
    step 90 smk "$L8/faithful/flash/fsdp/n2/result.json" "$L8/flash/fsdp/n2/result.json"
    ;;
  3)
    until=$(( limit - 100 ))
    stream g0 0 "$Q/smollm2_135m/sensitivity/result.json" \
      "$Q/smollm2_135m/fp32/none/result.json $Q/smollm2_135m/fake/16_8_4/result.json" \
      "$Q/smollm2_135m/fake/8_8_4/result.json $Q/smollm2_135m/fake/8_4_4/result.json" \
      "$Q/smollm2_135m/int8_dq/16_8_8/result.json"
    stream g1 1 "$Q/tinyllama_arch_random/sensitivity/result.json" \
      "$Q/tinyllama_arch_random/fp32/none/result.json $Q/tinyllama_arch_random/fake/16_8_4/result.json" \
      "$Q/tinyllama_arch_random/int8_dq/16_8_8/result.json" \
      "$Q/tinyllama_arch_random/fake/8_8_4/result.json $Q/tinyllama_arch_random/fake/8_4_4/result.json"
    wait
    export CUDA_VISIBLE_DEVICES=0
    step 80 ebench --result "$S/bf16/devices_1/result.json" "${sky[@]}"
    ;;
  4)
    until=$(( limit - 150 ))
    stream g0 0 "$NCU/baseline/result.json" \
      "$SA/channels_last_3d/result.json $SA/tf32_channels_last_3d/result.json" \
      "$NCU/tf32_channels_last_3d/result.json" "$NCU/channels_last_3d/result.json"
    CUDA_VISIBLE_DEVICES=1 step 90 bench sr3 --result "$S/faithful/devices_1/result.json" "${sky[@]}" --threads "$half"
    CUDA_VISIBLE_DEVICES=1 step 90 bench sr3 --result "$S/bf16/devices_1/result.json" "${sky[@]}" --threads "$half"
    wait
    step 60 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16/devices_2/result.json" "${sky[@]}" --nprocs 1,2 --warmup 3 --repeat 10 \
      --csv "$out/ddp_profile_h200.csv"
    step 70 bench sr3 --result "$S/faithful/devices_2/result.json" "${sky[@]}"
    ;;
  5)
    step 150 smk "$L8/faithful/flash/ddp/n2/result.json" "$L8/flash/ddp/n2/result.json"
    step 60 bench lora --result "$L8/flash/ddp/n2/result.json"
    step 200 smk "$L8/faithful/flash/fsdp/n2/result.json" "$L8/flash/fsdp/n2/result.json"
    ;;
  6)
    until=$(( limit - 200 ))
    stream g0 0 "$Q/smollm2_135m/fake/8_8_4/result.json $Q/smollm2_135m/fake/8_4_4/result.json" \
      "$Q/smollm2_135m/int8_dq/16_8_8/result.json"
    CUDA_VISIBLE_DEVICES=1 step 120 ebench --result "$SA/tf32/result.json" \
      --image resources/mri/whole_head_paper/image.nii.gz --mask resources/mri/whole_head_paper/mask.nii.gz
    wait
    step 190 smk "$R/lora_finetune/gemma2_27b/eager/fsdp/n2/result.json"
    ;;
  7|8)
    until=$(( limit - 10 ))
    [ "$part" = 8 ] && until=$(( limit - 140 ))
    ncu_left=("$NCU/baseline/result.json" "$SA/channels_last_3d/result.json $SA/tf32_channels_last_3d/result.json"
              "$NCU/tf32_channels_last_3d/result.json" "$NCU/channels_last_3d/result.json")
    ours=("$SA/baseline_autotuned/result.json" "$SA/bf16_channels_last_3d_compile_cudagraphs_autotuned/result.json"
          "$SA/bf16_compile_cudagraphs_autotuned/result.json")
    if [ "$part" = 7 ]; then stream g0 0 "${ncu_left[@]}"; else stream g0 0 "${ncu_left[@]}" "${ours[@]}"; fi
    wait
    if [ "$part" = 8 ]; then
      export CUDA_VISIBLE_DEVICES=0
      step 120 ebench --result "$SA/tf32/result.json" \
        --image resources/mri/whole_head_paper/image.nii.gz --mask resources/mri/whole_head_paper/mask.nii.gz
    fi
    ;;
  9)
    export CUDA_VISIBLE_DEVICES=0
    step 200 smk "$L8/faithful/flash/single/n1/result.json" "$L8/flash/single/n1/result.json"
    step 70 bench sr3 --result "$S/faithful/devices_1/result.json" "${sky[@]}"
    step 70 bench sr3 --result "$S/bf16/devices_1/result.json" "${sky[@]}"
    step 60 bench lora --result "$L8/flash/single/n1/result.json"
    step 45 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16/devices_1/result.json" "${sky[@]}" --nprocs 1 --warmup 3 --repeat 10 \
      --csv "$out/ddp_profile_h200.csv"
    ;;
  11)
    export CUDA_VISIBLE_DEVICES=0
    for c in faithful bf16_compile_cudagraphs bf16_compile_channels_last_cudagraphs bf16 bf16_compile \
             bf16_compile_channels_last; do
      step 60 smk "$S/$c/devices_1/result.json"
    done
    ;;
  12)
    export CUDA_VISIBLE_DEVICES=0
    for c in faithful bf16_compile_cudagraphs bf16_compile_channels_last_cudagraphs bf16 bf16_compile \
             bf16_compile_channels_last; do
      step 70 bench sr3 --result "$S/$c/devices_1/result.json" "${sky[@]}"
    done
    for c in bf16_compile_cudagraphs bf16_compile_channels_last_cudagraphs; do
      step 60 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
        --result "$S/$c/devices_1/result.json" "${sky[@]}" --nprocs 1 --warmup 5 --repeat 10 \
        --csv "$out/ddp_profile_h200.csv"
    done
    ;;
  13)
    export CUDA_VISIBLE_DEVICES=0
    step 150 smk "$L8/flash/single/n1/result.json"
    step 70 bench lora --result "$L8/flash/single/n1/result.json"
    step 100 ebench --result "$S/${FASTEST_SR3:-bf16_compile_cudagraphs}/devices_1/result.json" "${sky[@]}"
    step 150 smk "$SA/bf16_compile_cudagraphs_autotuned/result.json"
    ;;
  14)
    export CUDA_VISIBLE_DEVICES=0
    step 120 smk "$S/bf16_compile_cudagraphs/devices_1/result.json"
    step 240 bench sr3 --result "$S/bf16_compile_cudagraphs/devices_1/result.json" "${sky[@]}"
    step 90 smk "$S/bf16/devices_1/result.json"  # remade on this node (removed above), so its bare loop compares
    step 80 bench sr3 --result "$S/bf16/devices_1/result.json" "${sky[@]}"
    ;;
  15)
    export CUDA_VISIBLE_DEVICES=0
    step 150 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16_compile_cudagraphs/devices_1/result.json" "${sky[@]}" --nprocs 1 --warmup 5 --repeat 10 \
      --csv "$out/ddp_profile_h200.csv"
    step 120 smk "$S/bf16_compile/devices_1/result.json"
    step 240 bench sr3 --result "$S/bf16_compile/devices_1/result.json" "${sky[@]}"
    ;;
  16)
    step 330 smk "$S/bf16_compile_layout_opt_cudagraphs/devices_2/result.json"
    step 180 bench sr3 --result "$S/bf16_compile_layout_opt_cudagraphs/devices_2/result.json" "${sky[@]}"
    ;;
  17)
    CUDA_VISIBLE_DEVICES=0 step 260 smk "$S/bf16_compile_layout_opt_cudagraphs/devices_1/result.json"
    CUDA_VISIBLE_DEVICES=0 step 150 bench sr3 --result "$S/bf16_compile_layout_opt_cudagraphs/devices_1/result.json" \
      "${sky[@]}"
    step 100 smk "$S/faithful/devices_2/result.json"
    ;;
  23)  # on the node still warm from parts 16-17 (no inputs step), which remade these results there
    for f in "$S/faithful/devices_2/result.json" "$S/bf16_compile_layout_opt_cudagraphs/devices_1/result.json"; do
      for r in reference_runs/*/"$f"; do
        if [ ! -f "$f" ] || { [ -f "$r" ] && cmp -s "$f" "$r"; }; then
          echo "part 23: $f was not remade on this node by part 17 (run part 17 first, on the same node)" | tee -a "$log"
          exit 3
        fi
      done
    done
    step 100 bench sr3 --result "$S/faithful/devices_2/result.json" "${sky[@]}"
    step 200 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16_compile_layout_opt_cudagraphs/devices_2/result.json" "${sky[@]}" --nprocs 1,2 --warmup 5 \
      --repeat 10 --csv "$out/ddp_profile_h200.csv"
    ;;
  18)
    export CUDA_VISIBLE_DEVICES=0
    step 330 smk "$S/bf16_compile_channels_last_cudagraphs/devices_1/result.json"
    step 120 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16_compile_channels_last_cudagraphs/devices_1/result.json" "${sky[@]}" --nprocs 1 --warmup 5 \
      --repeat 10 --csv "$out/ddp_profile_h200.csv"
    ;;
  19)
    export CUDA_VISIBLE_DEVICES=0
    step 260 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16_compile_cudagraphs/devices_1/result.json" "${sky[@]}" --nprocs 1 --warmup 5 --repeat 10 \
      --csv "$out/ddp_profile_h200.csv"
    step 150 bench sr3 --result "$S/bf16_compile_channels_last_cudagraphs/devices_1/result.json" "${sky[@]}"
    ;;
  21)
    export CUDA_VISIBLE_DEVICES=0
    step 330 smk "$S/bf16_compile_layout_opt_cudagraphs/devices_1/result.json"
    step 110 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16_compile_layout_opt_cudagraphs/devices_1/result.json" "${sky[@]}" --nprocs 1 --warmup 5 \
      --repeat 10 --csv "$out/ddp_profile_h200.csv"
    step 100 bench sr3 --result "$S/bf16_compile_layout_opt_cudagraphs/devices_1/result.json" "${sky[@]}"
    ;;
  22)
    export CUDA_VISIBLE_DEVICES=0
    step 200 python3 benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
      --result "$S/bf16_compile_layout_opt_cudagraphs/devices_1/result.json" "${sky[@]}" --nprocs 1 --warmup 5 \
      --repeat 10 --csv "$out/ddp_profile_h200.csv"
    ;;
  20)
    step 240 smk "$L8/faithful/flash/zero3/n2/result.json"
    step 240 smk "$L8/flash/zero3/n2/result.json"
    ;;
  *) echo "unknown part $part" | tee -a "$log"; exit 2 ;;
esac
for s in "$work"/g*/log.txt; do [ -f "$s" ] && { echo "--- stream $(basename "$(dirname "$s")")"; cat "$s"; }; done >> "$log"
cat "$work/prelude.log" "$work/steps.log" 2>/dev/null > "$out/commands.log"
find results \( -name result.json -o -name kernels.csv \) -newer "$work/start" > "$work/new.txt"
find logs -type f -newer "$work/start" >> "$work/new.txt" 2>/dev/null
tar czf "$out/results.tgz" -T "$work/new.txt" 2>/dev/null
echo "new results: $(grep -c result.json "$work/new.txt"); done in ${SECONDS}s" | tee -a "$log"
