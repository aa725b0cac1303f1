"""Errors raised while the Snakefile is read (no ``.snakemake/log`` file exists then) were cut at
200 characters on the terminal, losing their point. Now they are printed whole."""

from __future__ import annotations

import subprocess

from dag import SNAKEMAKE, snakemake, write_config


def test_a_long_results_dir_in_an_os_folder_keeps_its_reason(tmp_path, tiny_config):
    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    value = "/etc/" + "x" * 180 + "/r"
    proc = snakemake(tmp_path, "-n", "--config", f"results_dir={value}", timeout=300)
    assert proc.returncode != 0
    assert "is a folder of the operating system" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_a_duplicate_key_in_a_config_at_a_long_path_is_named(tmp_path, tiny_config):
    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    folder = tmp_path / ("d" * 100) / ("e" * (195 - len(str(tmp_path)) - 100 - 14))
    folder.mkdir(parents=True)
    extra = folder / "config.yaml"
    extra.write_text((tmp_path / "config.yaml").read_text() + "results_dir: results\nresults_dir: results\n")
    assert len(str(extra)) >= 190
    argv = [*SNAKEMAKE, "-n", "-d", str(tmp_path), "--configfile", str(extra)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "key 'results_dir' is given twice" in out and str(extra) in out, out[-3000:]
