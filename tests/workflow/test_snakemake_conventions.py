"""Snakemake's own conventions (the snakemake-workflows layout): `snakefmt --check` on the Snakefile and every rule
file, `snakemake --lint` clean, and `.test/config/config.yaml` run end to end as a user would run it:

    snakemake --cores 2 --configfile .test/config/config.yaml

(on a copy of the repository's tracked workflow files in a temporary folder, so the checkout gets no results/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TEST_CONFIG = REPO / ".test/config/config.yaml"
# what a run reads: the Snakefile, the package and rules, configs, schemas, references, the profile, the images' files
WORKFLOW_FILES = ("Snakefile", "workflow", "config", "resources", "profiles", "containers", ".test")


def rule_files() -> list[Path]:
    return [REPO / "Snakefile", *sorted((REPO / "workflow").rglob("*.smk"))]


def copy_workflow(dest: Path) -> Path:
    """The tracked files a run reads, copied under ``dest`` (no results, no .snakemake of the checkout)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", *WORKFLOW_FILES], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def test_snakefmt_check_passes():
    assert shutil.which("snakefmt") or (Path(sys.executable).parent / "snakefmt").exists(), "pip install snakefmt"
    snakefmt = shutil.which("snakefmt") or str(Path(sys.executable).parent / "snakefmt")
    done = subprocess.run([snakefmt, "--check", *map(str, rule_files())], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, f"snakefmt {' '.join(map(str, rule_files()))}\n{done.stderr[-3000:]}"


def test_snakemake_lint_is_clean(tmp_path):
    root = copy_workflow(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "Lints for" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-4000:]


def test_test_config_is_tiny_yaml_for_its_experiments():
    """.test/config/config.yaml restates config/examples/tiny.yaml's blocks for the experiments it runs, unchanged."""
    test_config = yaml.safe_load(TEST_CONFIG.read_text())
    tiny = yaml.safe_load((REPO / "config/examples/tiny.yaml").read_text())
    assert test_config["experiments"], "experiments: the list the .test run makes"
    for key, value in test_config.items():
        if key != "experiments":
            assert value == tiny[key], f".test/config/config.yaml: {key} differs from config/examples/tiny.yaml"


@pytest.mark.timeout(300)
def test_test_config_runs_end_to_end(tmp_path):
    root = copy_workflow(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", ".test/config/config.yaml"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=290,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    experiments = yaml.safe_load(TEST_CONFIG.read_text())["experiments"]
    for experiment in experiments:
        results = list((root / "results/cpu" / experiment).rglob("result.json"))
        assert results, f"no result of {experiment}"
    assert (root / "results/claims/claims.md").is_file()
