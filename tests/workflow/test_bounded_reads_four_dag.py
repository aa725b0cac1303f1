"""Unbounded reads end to end: `ACCELBENCH_SLURM_SITE` at a FIFO hung even a local `snakemake -n` (the Slurm site
file is read on every DAG build, unbounded). Now the plan stops in one line naming the file."""

from __future__ import annotations

import os

from dag import snakemake, write_config


def test_slurm_site_file_fifo_fails_a_dry_run_with_one_line(tmp_path, tiny_config, monkeypatch):
    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    site = tmp_path / "site.yaml"
    os.mkfifo(site)
    monkeypatch.setenv("ACCELBENCH_SLURM_SITE", str(site))
    proc = snakemake(tmp_path, "-n", timeout=300)  # before: blocked for ever opening the FIFO
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"Slurm site file {site}: not a plain file" in out, out[-3000:]
