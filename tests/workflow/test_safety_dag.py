"""End to end, as the CI user (root in containers): no path or config value runs as a command, and a settings change
followed by a failing rerun never loses a finished result."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

from dag import REPO
from dag import write_config as _write_config


def _snakemake(snakefile: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(snakefile),
            "--cores",
            "2",
            *args,
            "-d",
            str(workdir),
            "--configfile",
            str(workdir / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )


def _study_a_one_job(config: dict) -> dict:
    config["unet3d_profile"].update(models=["whole_head"], configurations=["baseline"])
    return config


def test_config_value_with_shell_code_fails_cleanly_and_runs_nothing(tmp_path, tiny_config):
    marker = tmp_path / "pwned"
    _write_config(tmp_path, _study_a_one_job(tiny_config), ["unet3d_profile"])
    proc = _snakemake(REPO / "Snakefile", tmp_path, "--config", f"results_dir=r;touch {marker};y")
    assert proc.returncode != 0
    assert "config key 'results_dir'" in proc.stderr and "does not match" in proc.stderr
    assert not marker.exists() and not (tmp_path / "r").exists()


def test_hostile_paths_run_no_command_and_settings_change_loses_no_result(tmp_path, tiny_config):
    """One DAG in a folder with a space, from a clone path with a space, with a copied results folder named like
    shell code; then a settings change whose rerun fails (old result back in place), and one that succeeds (old
    result under results/cpu/.superseded/)."""
    clone = tmp_path / "my work" / "repo"  # a clone path with a space (a link to this checkout)
    clone.parent.mkdir()
    clone.symlink_to(REPO, target_is_directory=True)
    work = tmp_path / "run dir; $(x)"
    work.mkdir()
    marker = tmp_path / "pwned"
    config = _study_a_one_job(tiny_config)
    _write_config(work, config, ["unet3d_profile"])
    result = work / "results/cpu/unet3d_profile/whole_head/baseline/result.json"

    first = _snakemake(clone / "Snakefile", work, str(result.relative_to(work)))
    assert first.returncode == 0, first.stderr[-3000:]
    old = json.loads(result.read_text())
    assert old["spec_sha256"] and (result.parent / "kernels.csv").exists()
    assert result.stat().st_mode & 0o044 == 0o044  # group/others can read it like every other output
    assert "--spec .snakemake/accelbench/spec/" in first.stdout + first.stderr  # short shell lines, no JSON

    # results of another machine copied in, in a folder named like shell code (the README's merge recipe)
    evil = f"lab||touch $(echo {base64.b64encode(str(marker).encode()).decode()} | base64 -d)||x"
    lab = work / "results" / evil / "unet3d_profile/whole_head/baseline/result.json"
    lab.parent.mkdir(parents=True)
    env = old["environment"]
    lab_result = dict(
        old,
        config={**old["config"], "system": {**old["config"]["system"], "name": "lab"}},
        environment={**env, "hardware": {**env["hardware"], "device_name": "lab CPU"}},
    )
    lab.write_text(json.dumps(lab_result))
    agg = _snakemake(clone / "Snakefile", work)
    assert agg.returncode == 0, agg.stderr[-3000:]
    assert not marker.exists()
    table = pd.read_csv(work / "results/study_a/table.csv")
    # read, as data, and labelled as copied in (another system's folder merged into this run)
    assert len(table) == 2 and table["hardware"].str.startswith("copied in (lab, host ").sum() == 1
    assert table["hardware"].str.contains("CPU: lab CPU").sum() == 1

    # a settings change: the dry run says what would be superseded; the rerun fails (unreadable input)
    config["unet3d_profile"]["repeat"] = 3
    _write_config(work, config, ["unet3d_profile"])
    dry = _snakemake(clone / "Snakefile", work, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert (
        "first moves each (with its side files) to results/cpu/.superseded/" in dry.stderr
        and str(result.relative_to(work)) in dry.stderr
    )
    image = work / "resources/mri/whole_head_small/image.nii.gz"
    good_image = image.read_bytes()
    image.write_bytes(b"not a NIfTI")
    failed = _snakemake(clone / "Snakefile", work)
    assert failed.returncode != 0
    assert json.loads(result.read_text()) == old  # intact, in place
    assert (result.parent / "kernels.csv").exists() and (result.parent / "trace.json.gz").exists()
    assert not list((work / "results/cpu").glob(".superseded/*/unet3d_profile/**/result.json"))

    # the rerun succeeds: the new result in place, the old one (and its side files) findable under .superseded/
    image.write_bytes(good_image)
    rerun = _snakemake(clone / "Snakefile", work)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    new = json.loads(result.read_text())
    assert new["config"]["run"]["repeat"] == 3 and new["spec_sha256"] != old["spec_sha256"]
    moved = list((work / "results/cpu").glob(".superseded/*/unet3d_profile/whole_head/baseline/result.json"))
    assert len(moved) == 1 and json.loads(moved[0].read_text()) == old
    assert (moved[0].parent / "kernels.csv").exists() and (moved[0].parent / "trace.json.gz").exists()
    assert not marker.exists()


def test_shell_lines_carry_spec_files_not_json_and_fit_a_screen(tmp_path, default_config):
    """Every job of the embedded default, printed by a dry run: settings travel as a short spec-file path."""
    _write_config(tmp_path, default_config, default_config["experiments"])
    proc = _snakemake(REPO / "Snakefile", tmp_path, "-n", "-p")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("Shell command:")]
    with_spec = [ln for ln in lines if "--spec" in ln]
    assert len(with_spec) >= 10
    assert all("--spec .snakemake/accelbench/spec/" in ln and '"system"' not in ln for ln in with_spec)
    assert max(map(len, lines)) <= 80 * 24, max(lines, key=len)


def test_shell_lines_do_not_grow_with_copied_in_and_reference_results(tmp_path, tiny_config):
    """Every experiment, the committed reference runs drawn in, and 60 machines' results copied in (300 files): the
    dry run's shell lines still fit a screen and name no result file; each rule that reads results gets them as one
    `--results-file` list (a spec file) that holds every one of them."""
    config = dict(tiny_config, reference_runs=True)
    _write_config(tmp_path, config, config["experiments"])
    reference = sorted(str(p) for p in (REPO / "reference_runs").glob("*/results/*/*/**/result.json"))
    assert reference  # the committed reference runs are part of this plan
    text = Path(reference[0]).read_text()
    copied = []
    for i in range(60):
        for rel in (
            "unet3d_profile/whole_head/baseline",
            "unet3d_ncu/whole_head/tf32",
            "sr3_scaling/fp32/devices_1",
            "llm_quant/smollm2_135m/fake/8_4_4",
            "lora_finetune/smollm2_135m/flash/ddp/n1",
        ):
            p = tmp_path / f"results/lab_{i:02d}/{rel}/result.json"
            p.parent.mkdir(parents=True)
            p.write_text(text)
            copied.append(str(p.relative_to(tmp_path)))
    proc = _snakemake(REPO / "Snakefile", tmp_path, "-n", "-p")
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = (proc.stdout + proc.stderr).splitlines()
    lines = [ln for ln in printed if ln.startswith("Shell command:")]
    assert max(map(len, lines)) <= 80 * 24, max(lines, key=len)[:3000]
    assert not [ln for ln in lines if "results/lab_" in ln or "reference_runs/" in ln]  # their own outputs only
    # every printed line, the jobs' `input:` and `reason:` too: copied and reference results come as one manifest
    assert max(map(len, printed)) <= 80 * 24, max(printed, key=len)[:3000]
    assert not [ln for ln in printed if "results/lab_" in ln or "reference_runs/" in ln]
    energy = [ln for ln in lines if "accelbench energy-aggregate " in ln]  # reads the validation stamps' lists
    assert energy and all("--results-file results/validation/" in ln for ln in energy), energy
    with_list = [ln for ln in lines if "--results-file" in ln and ln not in energy]
    assert {ln.split()[3] for ln in with_list} == {  # validate-results for each experiment, and every aggregation
        "validate-results",
        "study-a-aggregate",
        "study-a-ncu-aggregate",
        "study-b-sr3-aggregate",
        "study-b-quant-aggregate",
        "study-b-lora-aggregate",
    }, with_list
    assert all("--results-file .snakemake/accelbench/spec/" in ln for ln in with_list)
    listed = set()
    for ln in with_list:
        spec = ln.split("--results-file ")[1].split()[0]
        listed |= set(json.loads((tmp_path / spec).read_text())["results"])
    assert set(copied) <= listed and set(reference) <= listed


def test_result_not_current_is_redone_whatever_snakemake_recorded(tmp_path, tiny_config):
    """A result whose recorded settings differ from the config's (e.g. put back by an interrupted
    redo after Snakemake recorded the new settings), whose redo was killed (journal beside it), or that records no
    spec at all (nothing shows which settings made it), is redone; the dry run changes none of them."""
    _write_config(tmp_path, _study_a_one_job(tiny_config), ["unet3d_profile"])
    for name in ("image", "mask"):  # inputs in place, older than the result: Snakemake alone would see nothing to do
        f = tmp_path / f"resources/mri/whole_head_small/{name}.nii.gz"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x")
        os.utime(f, (1000, 1000))
    result = tmp_path / "results/cpu/unet3d_profile/whole_head/baseline/result.json"
    result.parent.mkdir(parents=True)
    target = str(result.relative_to(tmp_path))
    for content, journal, redone in (
        ({}, False, True),
        ({"spec_sha256": "0" * 64}, False, True),
        ({}, True, True),
    ):
        result.write_text(json.dumps(content))
        (result.parent / ".redo.json").unlink(missing_ok=True)
        if journal:
            (result.parent / ".redo.json").write_text("{}")
        dry = _snakemake(REPO / "Snakefile", tmp_path, target, "-n")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert ("Nothing to be done" not in dry.stdout + dry.stderr) == redone, (content, journal, dry.stdout[-2000:])
        assert ("1 finished result(s) are not current" in dry.stderr) == redone
        assert json.loads(result.read_text()) == content  # never touched, only re-timed


def test_results_made_with_their_own_rules_spec_are_current(tmp_path, tiny_config):
    """A result recorded with the spec file its own rule passed (`--spec`) is current for every result pattern of
    every experiment, the LoRA faithful series' `{model}/{series}/...` included (on a 2x H200 node a faithful DDP
    result was read with the `ours` spec, called not current by the next invocation and re-timed to 1970)."""
    tiny_config["lora_finetune"]["series"] = ["faithful", "ours"]
    _write_config(tmp_path, tiny_config, ["unet3d_profile", "unet3d_ncu", "sr3_scaling", "llm_quant", "lora_finetune"])
    dry = _snakemake(REPO / "Snakefile", tmp_path, "-n", "-p")
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    made = re.findall(r"--spec (\S+) .*?--out (\S+/result\.json)", dry.stdout)
    assert any("/faithful/" in out for _, out in made if "lora_finetune" in out), dry.stdout[-2000:]
    for spec, out in made:
        result = tmp_path / out
        result.parent.mkdir(parents=True, exist_ok=True)
        result.write_text(json.dumps({"spec_sha256": hashlib.sha256((tmp_path / spec).read_bytes()).hexdigest()}))
    again = _snakemake(REPO / "Snakefile", tmp_path, "-n")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "not current" not in again.stderr, again.stderr[-3000:]
