"""Untrusted ground end to end (as root, the CI user), on the tiny config with its experiments selected: a FIFO or
a link to /dev/zero at this system's result path, a result.json linked to a file outside, or a linked folder four
levels down among copied-in results. Before, a plain `snakemake -n` returned 0 and said nothing (or, with
`experiments=[]`, printed the line under 7 frames); the linked result was validated and aggregated. Now a dry run stops
in one line naming the path, with a single frame (common.smk's top level), and reads nothing outside."""

from __future__ import annotations

import os

import pytest

from dag import snakemake, write_config

SR3 = "results/cpu/sr3_scaling/faithful/devices_1/result.json"  # tiny.yaml's SR3 result on cpu


@pytest.mark.parametrize(
    "planted, at, line",
    [
        ("fifo", SR3, f"{SR3} is not a plain file (a FIFO) inside the results tree results; refused"),
        ("/dev/zero", SR3, f"{SR3} is a link (to /dev/zero) inside the results tree results; refused"),
        ("victim", SR3, f"{SR3} is a link (to VICTIM) inside the results tree results; refused"),
        (
            "victim folder",
            "results/lab/sr3_scaling/fp32/devices_1/more",
            "results/lab/sr3_scaling/fp32/devices_1/more is a link (to VICTIM_DIR) inside the results tree results",
        ),
    ],
)
def test_untrusted_result_stops_a_dry_run_in_one_line(tmp_path, tiny_config, planted, at, line):
    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    victim = tmp_path / "victim/v1.json"
    victim.parent.mkdir()
    victim.write_text('{"v": "theirs"}')
    path = tmp_path / at
    path.parent.mkdir(parents=True)
    if planted == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to({"/dev/zero": "/dev/zero", "victim": victim, "victim folder": victim.parent}[planted])
    proc = snakemake(tmp_path, "-n", timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    want = line.replace("VICTIM_DIR", str(victim.parent)).replace("VICTIM", str(victim))
    assert len([ln for ln in out.splitlines() if ln.startswith(want)]) == 1, out[-3000:]
    assert len([ln for ln in out.splitlines() if ln.startswith("  File ")]) == 1, out[-3000:]  # was 7
    assert victim.read_text() == '{"v": "theirs"}' and not (tmp_path / "logs").exists()
