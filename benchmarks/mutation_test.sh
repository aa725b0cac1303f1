#!/usr/bin/env bash
# Bounded mutation testing (mutmut 3; pip install -e '.[mutation]') of the measurement core, outside CI: does every small change to the code
# make a test fail? Mutates workflow/accelbench/measure/{timing,kernels,kernel_classes,ncu}.py and, with MUTATE_QUALITY=1,
# also experiments/unet3d/numerics.py (math mode, IEEE-FP32 check, quality check; slow: its tests build U-Nets), and runs
# only the tests that exercise them. Prints mutmut's results and the surviving count.
#   pip install 'mutmut>=3.8,<4' && nice benchmarks/mutation_test.sh [WORKDIR]
# mutmut expects the code under ./src: the script stages a copy (src/accelbench, tests, conftest.py, config, resources) in
# WORKDIR (default: a new temporary folder) and never touches the checkout.
case ${1:-} in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
command -v mutmut >/dev/null || { echo "mutmut not found: pip install -e '.[mutation]'" >&2; exit 2; }
work=${1:-$(mktemp -d -t accelbench-mutmut.XXXXXX)}
mkdir -p "$work/src"
rm -rf "$work/src/accelbench" "$work/tests" "$work/mutants"
cp -r "$here/workflow/accelbench" "$work/src/accelbench"
cp -r "$here/tests" "$here/conftest.py" "$here/config" "$here/resources" "$work/"
only='src/accelbench/measure/timing.py","src/accelbench/measure/kernels.py","src/accelbench/measure/kernel_classes.py","src/accelbench/measure/ncu.py'
tests='"tests/unit/test_measure.py","tests/unit/test_ncu.py"'
if [ "${MUTATE_QUALITY:-0}" = 1 ]; then
  only="$only\",\"src/accelbench/experiments/unet3d/numerics.py"
  tests="$tests,\"src/accelbench/experiments/unet3d/tests/test_unet3d_profile.py\",\"-k\",\"math or ieee or rejects or tolerance or variants\""
fi
cat > "$work/pyproject.toml" <<TOML
[project]
name = "accelbench-mutants"
version = "0"
[tool.pytest.ini_options]
testpaths = ["tests"]
markers = ["unit", "experiments", "workflow", "system"]
[tool.mutmut]
source_paths = ["src"]
only_mutate = ["$only"]
also_copy = ["config", "resources"]
pytest_add_cli_args_test_selection = [$tests]
pytest_add_cli_args = ["-x", "-q", "-p", "no:cacheprovider", "-m", "not workflow and not system"]
process_isolation = "forkserver"
TOML
cd "$work"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1  # torch's thread pools and fork do not mix
mutmut run --max-children "${MUTMUT_CHILDREN:-1}" || true
mutmut results --all true > results.txt
[ -s results.txt ] || { echo "mutmut produced no results (see above)" >&2; exit 1; }
echo "mutants by status:"; awk -F': ' 'NF>1 {print $NF}' results.txt | sort | uniq -c
echo "survived: $(grep -c ': survived' results.txt || true)  (details: cd $work && mutmut show <name>)"
