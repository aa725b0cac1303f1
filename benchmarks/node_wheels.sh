#!/usr/bin/env bash
# Prepare, on a machine with internet, the wheels that an air-gapped GPU node's image lacks (step 1 of 2).
#
#   benchmarks/node_wheels.sh [DEST] [PKG[==VER] ...]      # default: DEST=.whl, PKG = this project's dependencies
#
# The node's image already holds the packages listed in node-image-packages.txt beside this script (one
# distribution name a line: torch, transformers, peft, pandas, ...; edit it to match your image, e.g. from
# `pip list --format=freeze` run on the node); those are never downloaded. Everything else in the
# dependency closure is fetched as a wheel for the node's Python (NODE_PYTHON, default 3.12) on x86_64 into
# DEST. Step 2 (on the node): benchmarks/device_run.sh installs them into /tmp/site and runs the DAG.
case ${1:-} in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-"$here/../.whl"}; [ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- "$here/.."   # this project and its dependencies (its own wheel is built here)
py=${NODE_PYTHON:-3.12}; abi=cp${py/./}
mkdir -p "$dest"
plat=(--python-version "$py" --implementation cp --abi "$abi" --abi abi3 --abi none --only-binary=:all:)
for n in 17 24 27 28 31 34; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
report=$(mktemp)
# Resolve the closure from package metadata only (no large downloads), with this machine's Python.
python3 -m pip install -q --dry-run --ignore-installed --report "$report" "$@"
python3 - "$report" "$here/node-image-packages.txt" > "$report.want" <<'EOF2'
import json, re, sys
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
have = {norm(l.strip()) for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")}
have.add("accelbench")  # the node runs this checkout itself (device_run.sh puts workflow/ on PYTHONPATH)
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if norm(meta["name"]) not in have:
        print(f'{meta["name"]}=={meta["version"]}')
EOF2
echo "fetching: $(tr '\n' ' ' < "$report.want")"
while read -r req; do
  # A binary wheel for the GPU machine; a pure-Python package published only as source is built here.
  python3 -m pip download -q --no-deps -d "$dest" "${plat[@]}" "$req" 2>/dev/null \
    || python3 -m pip wheel -q --no-deps -w "$dest" "$req"
done < "$report.want"
rm -f "$report" "$report.want"
du -sh "$dest"
