"""Copied-in and reference-run results enter the validation and aggregation jobs as one manifest file (common.smk
`copied_results`), so that printed job lines stay short; a changed result must still rerun what reads it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def checkout_files(folder: str, names: list[str]) -> set[str]:
    """shutil.copytree's ignore: a user's checkout (the committed reference runs included), without this one's
    outputs, caches and environments."""
    top = Path(folder) == REPO
    return {
        n
        for n in names
        if n in (".git", ".venv", "__pycache__", ".snakemake", "report.html", "build")
        or n.endswith(".egg-info")
        or (top and n in ("results", "logs"))
        or (Path(folder) == REPO / "resources" and n in ("mri", "sky", "llm"))
    }


def test_a_changed_reference_result_reruns_the_jobs_that_read_it(tmp_path):
    root = tmp_path / "accelbench"
    shutil.copytree(REPO, root, ignore=checkout_files)
    target = "results/validation/sr3_scaling.json"  # only the committed reference runs' SR3 results feed it here
    cmd = [sys.executable, "-m", "snakemake", target, "--cores", "1", "--config", "experiments=[unet3d_profile]"]

    def run(*extra: str) -> str:
        proc = subprocess.run([*cmd[:4], *extra, *cmd[4:]], cwd=root, capture_output=True, text=True, timeout=600)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        return out

    first = run()
    assert (root / target).is_file(), first[-2000:]
    assert "reference_runs/" not in first  # the job's printed input names the manifest, not each result
    assert "Nothing to be done" in run("-n")
    ref = sorted(root.glob("reference_runs/*/results/*/sr3_scaling/**/result.json"))[0]
    ref.write_text(ref.read_text() + "\n")  # same data, other bytes: a changed file
    again = run("-n")
    assert "validate_results" in again and "Nothing to be done" not in again, again[-2000:]


def test_a_targeted_run_keeps_this_systems_results_of_other_experiments(tmp_path):
    """`--config experiments=[unet3d_profile]` (a targeted command) still feeds the claims this system's finished
    results of the experiments it does not select: the claims table keeps the verdicts earlier runs judged."""
    import json

    root = tmp_path / "accelbench"
    shutil.copytree(REPO, root, ignore=checkout_files)
    theirs = sorted(root.glob("reference_runs/*/results/*/sr3_scaling/**/result.json"))[0]
    here = root / "results/cpu/sr3_scaling/faithful/devices_1/result.json"  # a finished result of this system
    here.parent.mkdir(parents=True)
    shutil.copy(theirs, here)
    target = "results/validation/sr3_scaling.json"
    cmd = [sys.executable, "-m", "snakemake", target, "--cores", "1", "--config", "experiments=[unet3d_profile]"]
    cmd += ["system=cpu", "reference_runs=false"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    listed = [v["path"] for v in json.loads((root / target).read_text())["validated"]]
    assert listed == ["results/cpu/sr3_scaling/faithful/devices_1/result.json"], listed
