"""Hostile inputs end to end (as root, the CI user): a FIFO copied into results/ hung even `snakemake -n`
(`copied_results` hashed every copied-in file unbounded), and `results_dir` through a link to /etc let a job write
/etc/cpu/... Both now stop the plan with one line, touching nothing outside the results tree (the job itself refuses a
result folder in an OS folder too: tests/unit/test_bounds_and_tree.py)."""

from __future__ import annotations

import os
from pathlib import Path

from dag import snakemake, write_config


def test_fifo_copied_into_results_fails_a_dry_run_with_one_line(tmp_path, tiny_config):
    write_config(tmp_path, tiny_config, [])  # merging machines: aggregate what is copied in
    lab = tmp_path / "results/lab/sr3_scaling/fp32/devices_1"
    lab.mkdir(parents=True)
    os.mkfifo(lab / "result.json")
    proc = snakemake(tmp_path, "-n", timeout=300)  # before the fix: blocked for ever on the FIFO
    assert proc.returncode != 0
    line = "copied-in result file results/lab/sr3_scaling/fp32/devices_1/result.json: not a plain file"
    assert line in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_results_dir_through_a_link_to_etc_plans_nothing_and_touches_nothing(tmp_path, tiny_config):
    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    (tmp_path / "results_etc").symlink_to("/etc")
    before = set(os.listdir("/etc"))
    proc = snakemake(tmp_path, "-n", "--config", "results_dir=results_etc", timeout=300)  # a real run stops alike
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key 'results_dir': 'results_etc' (/etc) is a folder of the operating system" in out, out[-3000:]
    assert set(os.listdir("/etc")) == before and not Path("/etc/cpu").exists()
