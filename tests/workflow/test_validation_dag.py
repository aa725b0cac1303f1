"""The DAG validates every result before a table: a copied-in invalid result stops it, naming file and field."""

from __future__ import annotations

import json

import fake_results as fr


def test_dag_refuses_a_copied_in_invalid_result_naming_file_and_field(tmp_path, tiny_config):
    """Merging machines = copying results/<system>/ folders: a bad copied-in file stops the DAG before any table."""
    from dag import snakemake, write_config

    write_config(tmp_path, tiny_config, ["unet3d_profile"])  # sr3 not run here: only the copied-in results
    good = fr.sr3("h100", 1, 100.0)
    bad = fr.mutate(fr.sr3("h100", 2, 120.0), "measurements.iteration.samples", [])
    for n, r in ((1, good), (2, bad)):
        p = tmp_path / f"results/h100/sr3_scaling/fp32/devices_{n}/result.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(r))
    proc = snakemake(tmp_path, "results/validation/sr3_scaling.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "results/h100/sr3_scaling/fp32/devices_2/result.json: measurements.iteration.samples" in out, out[-3000:]
    assert "devices_1/result.json:" not in out
    assert (tmp_path / "results/h100/sr3_scaling/fp32/devices_2/result.json").exists()  # nothing deleted
    # every aggregation waits for the validation of what it reads
    for table in (
        "study_a/table.csv",
        "study_a/counters.csv",
        "study_b_sr3/scaling.csv",
        "study_b_quant/table.csv",
        "study_b_lora/runs.csv",
        "claims/claims.csv",
    ):
        plan = snakemake(tmp_path, f"results/{table}", "-n", "--forceall", "--quiet", "rules")
        assert plan.returncode == 0, plan.stderr[-2000:]
        assert "validate_results" in plan.stdout, (table, plan.stdout)
