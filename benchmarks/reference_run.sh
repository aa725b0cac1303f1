#!/usr/bin/env bash
# A reference run in a bounded window (e.g. a 10-minute GPU lease): one snakemake invocation per group of targets
# (one argument, paths separated by spaces), in the order given (most important first), each only if the time left
# allows; then the result.json files (no traces) and logs
# are packed for reference_runs/. Run through device_run.sh on an air-gapped node:
#   benchmarks/device_run.sh benchmarks/reference_run.sh OUT_DIR SECONDS -- SNAKEMAKE_ARGS... -- TARGET...
# A target that would not fit is skipped and says so; an interrupted target leaves no result (Snakemake's own
# incomplete-output handling), so the next window resumes where this one stopped.
case ${1:-} in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac  # the header above
set -uo pipefail
out=${1:?usage: reference_run.sh OUT_DIR SECONDS -- SNAKEMAKE_ARGS... -- TARGET...}
limit=${2:?seconds}
shift 2
[ "${1:-}" = "--" ] || { echo "reference_run.sh: expected -- before the snakemake arguments" >&2; exit 2; }
shift
args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
shift || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
log="$out/log.txt"
nvidia-smi -L 2>/dev/null | tee -a "$log"
for target in "$@"; do
  left=$(( limit - SECONDS ))
  if (( left < 45 )); then echo "SKIPPED (time, ${SECONDS}s used): $target" | tee -a "$log"; continue; fi
  echo "=== ${SECONDS}s: $target" | tee -a "$log"
  read -ra group <<< "$target"
  timeout -k 20 "$left" python3 -m snakemake "${group[@]}" --cores all "${args[@]}" >> "$log" 2>&1 \
    || echo "FAILED or stopped (rc $?, ${SECONDS}s): $target" | tee -a "$log"
done
find results \( -name result.json -o -name kernels.csv \) > "$out/files.txt" 2>/dev/null
tar czf "$out/results.tgz" -T "$out/files.txt" logs 2>/dev/null
echo "done in ${SECONDS}s" | tee -a "$log"
