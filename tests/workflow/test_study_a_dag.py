"""End to end: the real Snakemake DAG on a tiny config, in a temporary working directory."""

import json
from pathlib import Path

import pandas as pd
import pytest

import result_keys
from dag import snakemake
from dag import write_config as _write_config


def write_config(workdir: Path, config: dict) -> None:
    """Study A only: the Study B experiments have end-to-end tests of their own."""
    _write_config(workdir, config, ["unet3d_profile", "unet3d_ncu"])


def test_bad_config_fails_before_any_rule(tmp_path, tiny_config):
    tiny_config["unet3d_profile"]["configurations"] = ["baseline", "tf33"]
    write_config(tmp_path, tiny_config)
    proc = snakemake(tmp_path)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "unet3d_profile.configurations[1]" in out and "'tf33'" in out and "'channels_last_3d'" in out
    assert not (tmp_path / "results").exists() and not (tmp_path / "resources").exists()


def test_unknown_system_fails_before_any_rule(tmp_path, tiny_config):
    tiny_config["system"] = "h100"
    write_config(tmp_path, tiny_config)
    proc = snakemake(tmp_path)
    out = proc.stdout + proc.stderr
    if proc.returncode == 0:  # pragma: no cover - only on a machine that really has an H100
        pytest.skip("this machine has the backend")
    assert "system 'h100' needs backend 'cuda'" in out
    assert not (tmp_path / "results").exists()


def test_dag_runs_resumes_and_keeps_finished_results(tmp_path, tiny_config):
    write_config(tmp_path, tiny_config)
    res = tmp_path / "results" / "cpu" / "unet3d_profile" / "whole_head"

    # 1. an "interrupted" run: only the baseline finished
    first = snakemake(tmp_path, str(res.relative_to(tmp_path) / "baseline" / "result.json"))
    assert first.returncode == 0, first.stderr[-3000:]
    baseline = res / "baseline" / "result.json"
    stamp = baseline.stat().st_mtime_ns

    # 2. the rerun resumes: the rest is built, the finished result is kept as it was
    full = snakemake(tmp_path)
    assert full.returncode == 0, full.stderr[-3000:]
    longest = max((full.stdout + full.stderr).splitlines(), key=len)  # terminal lines <= 200 characters
    assert len(longest) <= 200, f"{len(longest)} characters: {longest}"
    assert baseline.stat().st_mtime_ns == stamp
    assert baseline.stat().st_mode & 0o222 == 0  # finished results are write-protected

    for conf in tiny_config["unet3d_profile"]["configurations"]:
        r = json.loads((res / conf / "result.json").read_text())
        assert r["status"] in ("ok", "unsupported")
        env = r["environment"]
        assert env["hardware"]["backend"] == "cpu" and env["git"]["commit"] and env["config"]["configuration"] == conf
        if r["status"] == "ok":
            assert (res / conf / "kernels.csv").exists() and (res / conf / "trace.json.gz").exists()
    assert json.loads((res / "tf32" / "result.json").read_text())["status"] == "unsupported"

    agg = tmp_path / "results" / "study_a"
    for name in (
        "table.csv",
        "table.md",
        "table.tex",
        "claims_vs_measured.csv",
        "claims_vs_measured.md",
        "fig_speedup.png",
        "fig_kernel_breakdown.png",
        "fig_kernel_counts.png",
    ):
        assert (agg / name).stat().st_size > 0, name
    ncu = json.loads((tmp_path / "results/cpu/unet3d_ncu/whole_head/baseline/result.json").read_text())
    assert ncu["status"] == "unsupported" and "NVIDIA GPUs" in ncu["reason"]  # recorded, and the DAG went on
    counters = pd.read_csv(agg / "counters.csv")
    assert set(counters["sm_cycles"]) == {"unsupported"}
    assert (agg / "fig_counter_ratios.png").exists() and (agg / "counters_by_class.csv").exists()
    table = pd.read_csv(agg / "table.csv")
    assert set(table["configuration"]) == set(tiny_config["unet3d_profile"]["configurations"])
    assert (table.set_index("configuration").loc["tf32", "train_step_ms"]) == "unsupported"
    assert (tmp_path / "resources" / "mri" / "whole_head_small" / "image.nii.gz").exists()
    assert (tmp_path / "logs" / "cpu" / "unet3d_profile" / "whole_head" / "baseline.log").exists()

    # 3. nothing left to do
    again = snakemake(tmp_path, "--dry-run")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    # the result files keep the keys of the embedded default before the restructuring (tests/result_keys.py)
    assert not result_keys.check(tmp_path / "results"), result_keys.check(tmp_path / "results")


def test_lint_and_dry_run_without_cores(tmp_path, tiny_config):
    """`snakemake --lint` is clean, and a dry run of every experiment needs no --cores (rules ask for the machine
    lazily), as `snakemake -n` and `snakemake --report` are used."""
    import subprocess
    import sys

    import yaml

    from dag import REPO

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config))
    base = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)]
    config = ["--configfile", str(tmp_path / "config.yaml")]
    lint = subprocess.run([*base, "--lint", *config], capture_output=True, text=True, timeout=300)
    assert "Congratulations, your workflow is in a good condition" in lint.stdout + lint.stderr, lint.stderr[-2000:]
    dry = subprocess.run([*base, "-n", *config], capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-2000:]
    for rule in ("unet3d_profile", "sr3_train", "llm_quant_sensitivity", "lora_finetune"):
        assert rule in dry.stdout
    # --report parses every rule without --cores (it then stops here only because nothing has been run yet)
    report = subprocess.run(
        [*base, "--report", str(tmp_path / "report.html"), *config], capture_output=True, text=True, timeout=300
    )
    assert "marked for report but does not exist" in report.stderr, report.stderr[-2000:]
