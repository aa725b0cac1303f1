#!/usr/bin/env bash
# Run accelbench on an air-gapped GPU node whose image already has torch (never installs torch), step 2 of 2:
# installs the carried wheels (.whl/, prepared by benchmarks/node_wheels.sh on a machine with internet) into
# /tmp/site, puts an `accelbench` command on PATH, then runs the arguments (e.g. a snakemake command line).
#   ACCELBENCH_GIT_COMMIT=$(git rev-parse HEAD) benchmarks/device_run.sh snakemake --cores all --configfile ...
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -d "$here/.whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/.whl/*.whl
fi
export PYTHONPATH="$here/workflow:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p /tmp/bin
printf '#!/bin/sh\nexec python3 -m accelbench "$@"\n' > /tmp/bin/accelbench
chmod +x /tmp/bin/accelbench
export PATH="/tmp/bin:/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1
cd "$here"
"$@"
