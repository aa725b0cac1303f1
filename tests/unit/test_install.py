"""Install without surprises: bounds pip resolves at once, a portable CPU torch, opt-in system installs, the plugins
the README uses, and a self-contained air-gapped GPU path."""

import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def _readme_commands():
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Quick start") : text.index("## What you get")]
    return [ln.strip() for ln in block.splitlines() if ln.startswith("python3 -m venv")], block


def _deps():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in meta["dependencies"]], meta["optional-dependencies"]


def test_constraints_pin_versions_inside_the_declared_bounds():
    deps, extras = _deps()
    spec = {r.name.lower(): r.specifier for r in deps + [Requirement(x) for v in extras.values() for x in v]}
    pins = [
        Requirement(ln)
        for ln in (REPO / "constraints.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert any(p.name == "snakemake" for p in pins)
    for p in pins:
        (version,) = [s.version for s in p.specifier]
        if p.name.lower() in spec:
            assert spec[p.name.lower()].contains(version), f"{p} outside pyproject's {spec[p.name.lower()]}"
    snakemake = next(r for r in deps if r.name == "snakemake")
    assert any(s.operator in ("<", "<=") for s in snakemake.specifier)  # a tested upper bound


def test_readme_commands_use_cpu_index_constraints_and_match_ci():
    (cmd1, cmd2), block = _readme_commands()
    for cmd in (cmd1, cmd2):
        assert "pip install --retries 1 torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in cmd
        assert "-c constraints.txt" in cmd
    ci = (REPO / ".ci/run").read_text()
    assert cmd2 in ci  # .ci/run runs exactly command 2
    # the system installs are opt-in: .ci/run exports them, the README's command does not set them
    assert "ACCELBENCH_CI_APT=1" not in cmd2 and "export ACCELBENCH_CI_APT=1" in ci
    said = block[block.index("# 2.") : block.index(cmd2)]
    assert "apt" in said and "ACCELBENCH_CI_APT=1" in said  # said next to command 2


def test_plugins_the_readme_uses_come_with_the_project():
    deps, _ = _deps()
    names = {r.name for r in deps}
    assert {"snakemake-executor-plugin-slurm", "snakemake-logger-plugin-rich", "psutil"} <= names
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    assert "slurm" in ExecutorPluginRegistry().plugins  # `--profile slurm` never ends in a usage dump
    assert "rich" in LoggerPluginRegistry().plugins  # `snakemake --logger rich`


def test_nothing_refers_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for f in files:
        p = REPO / f
        if p.suffix in (".gz", ".png", ".npz") or not p.is_file():
            continue
        text = p.read_text(errors="ignore")
        if re.search(r"\.\./shared|/work/shared", text) and f != "tests/unit/test_install.py":
            offenders.append(f)
    assert offenders == []


def test_air_gapped_scripts_are_self_contained_and_documented():
    for script in ("benchmarks/node_wheels.sh", "benchmarks/device_run.sh"):
        subprocess.run(["bash", "-n", str(REPO / script)], check=True)
    wheels = (REPO / "benchmarks/node_wheels.sh").read_text()
    assert "node-image-packages.txt" in wheels and (REPO / "benchmarks/node-image-packages.txt").exists()
    page = (REPO / "docs/gpu-nodes.md").read_text()
    assert "benchmarks/node_wheels.sh" in page and "benchmarks/device_run.sh" in page
