"""benchmarks/embedded_default.py (README command 1 from a fresh clone, timed): the command it runs is the README's,
split where the install ends, and what it reads back from a run (the estimate line, the per-job times) is parsed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("embedded_default", REPO / "benchmarks/embedded_default.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_it_runs_the_readme_command_1_in_two_parts():
    command = bench.readme_command_1((REPO / "README.md").read_text())
    assert command.startswith("python3 -m venv .venv") and command.endswith("snakemake --cores all")
    install, run = bench.split_install_run(command)
    assert "pip install" in install and "snakemake" not in install
    assert run == ". .venv/bin/activate && snakemake --cores all"
    assert install + " && snakemake --cores all" == command


def test_estimate_line_and_durations():
    out = (
        "Building DAG of jobs...\naccelbench: 50 jobs to run, about 6 min 19 s on this machine (this CPU is 1.37x "
        "faster than the reference; per-job times: x)\naccelbench: 1 of 50 jobs done, about 6 min left\n"
    )
    assert bench.estimate_of(out) == {"jobs": 50, "estimate_s": 379.0, "calibration": 0.73}
    assert (
        bench.estimate_of("accelbench: 1 job to run, about 2 s on this machine (this CPU is 1.10x slower")[
            "calibration"
        ]
        == 1.1
    )
    assert bench.estimate_of("no estimate here") == {}
    assert bench.parse_minutes("1 h 2 min") == 3720.0


def test_per_experiment_sums_the_newest_run(tmp_path):
    rows = [
        {"rule": "sr3_train", "measured_s": 99.0, "run_started": "old"},
        {"rule": "sr3_train", "measured_s": 10.0, "run_started": "new"},
        {"rule": "sr3_train", "measured_s": 5.5, "run_started": "new"},
        {"rule": "claims", "measured_s": None, "run_started": "new"},
        {"rule": "validate_results", "measured_s": 1.0, "run_started": "new"},
    ]
    log = tmp_path / "job_times.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench.per_experiment(log) == {"SR3": 15.5, "data, aggregations, validation, claims": 1.0}
