"""Committed reference runs: folder layout, generated READMEs (checked against the files), labelled series."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from accelbench.aggregate import reference_runs
from accelbench.core import provenance, results
from accelbench.errors import DataError

REPO = Path(__file__).resolve().parents[2]


def test_readme_section_matches_the_committed_reference_runs():
    """The main README's generated block, each run's README, the claims page and ARTIFACT.md's verdicts are current
    (`accelbench reference-runs`)."""
    assert (
        reference_runs.update(
            REPO / "reference_runs",
            REPO / "README.md",
            check=True,
            reference_dir=REPO / "resources/reference",
            claims_doc=REPO / "docs/claims.md",
            artifact=REPO / "ARTIFACT.md",
        )
        == []
    )


def _quant_result(path: Path, system: str, ppl: float) -> Path:
    m = {
        "perplexity": {"value": ppl, "tokens": 93},
        "compression_x": {"value": 1.0},
        "model_compression_x": {"value": 1.0},
        "throughput": {"tokens_per_s": 100.0},
        "eval_time": {"value": 1.0},
        "model": {"weights": "pretrained"},
        "accuracy": {"hellaswag": {"status": "ok", "value": 0.5, "samples": 10}},
    }
    cfg = {"system": {"name": system}, "model": "smollm2_135m", "method": "fp32", "bitset": "none"}
    return results.write_result(results.make_result("llm_quant", "ok", cfg, provenance.collect("cpu"), m), path)


def _run(root: Path, **meta) -> Path:
    d = root / "reference_runs" / "h200-2026-12-01"
    d.mkdir(parents=True)
    meta = {
        "date": "2026-12-01",
        "hardware": "2x NVIDIA H200 SXM 141 GB",
        "short": "H200",
        "commit": "abc123def4567890",
        "commands": ["snakemake --cores all --configfile config/examples/gpu_paper.yaml"],
        **meta,
    }
    (d / "run.yaml").write_text(yaml.safe_dump(meta))
    _quant_result(d / "results/h200/llm_quant/smollm2_135m/fp32/none/result.json", "h200", 14.3)
    return d


def test_generated_readmes_from_fixture_run(tmp_path):
    run_dir = _run(tmp_path, notes=["300 iterations per rank, projected to 40,000"])
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Reference runs\n{reference_runs.BEGIN}\nstale\n{reference_runs.END}\n\n## Next\n")
    changed = reference_runs.update(tmp_path / "reference_runs", readme)
    assert set(changed) == {readme, run_dir / "README.md"}
    text = readme.read_text()
    assert "stale" not in text and text.endswith("## Next\n")
    assert "reference run (H200, 2026-12-01)" in text and "`abc123def456`" in text and "`llm_quant`: 1 ok" in text
    # the commands are in the run's own README, linked; the section stays prose-width (no 5,000-character line)
    assert "gpu_paper.yaml" not in text and "(reference_runs/h200-2026-12-01/README.md)" in text
    assert max(len(line) for line in text.splitlines()) <= 2 * reference_runs.WIDTH
    assert "gpu_paper.yaml" in (run_dir / "README.md").read_text()
    own = (run_dir / "README.md").read_text()
    assert "- When: 2026-12-01" in own and "2x NVIDIA H200" in own and "abc123def4567890" in own and "projected" in own
    assert reference_runs.update(tmp_path / "reference_runs", readme, check=True) == []
    # a new result makes both out of date
    _quant_result(run_dir / "results/h200/llm_quant/smollm2_135m/fake/8_4_4/result.json", "h200", 15.0)
    reference_runs._run_of_folder.cache_clear()
    assert set(reference_runs.update(tmp_path / "reference_runs", readme, check=True)) == {
        readme,
        run_dir / "README.md",
    }


def test_bad_run_yaml_names_the_key(tmp_path):
    d = tmp_path / "reference_runs" / "x"
    d.mkdir(parents=True)
    (d / "run.yaml").write_text(yaml.safe_dump({"date": "2026-12-01", "hardware": "H200", "short": "H200"}))
    with pytest.raises(DataError, match="missing commit, commands"):
        reference_runs.find_runs(tmp_path / "reference_runs")
    (d / "run.yaml").write_text(
        yaml.safe_dump({"date": "Dec 1", "hardware": "H", "short": "H", "commit": "a", "commands": ["x"]})
    )
    with pytest.raises(DataError, match="not YYYY-MM-DD"):
        reference_runs.load_run(d)


def test_reference_run_is_its_own_series_in_the_aggregation(tmp_path):
    """Published, measured here, and the reference run: three labelled series in the quantization table."""
    from accelbench.aggregate.common import load_results
    from accelbench.experiments.llm_quant import tables as study_b_quant

    run_dir = _run(tmp_path)
    ref = run_dir / "results/h200/llm_quant/smollm2_135m/fp32/none/result.json"
    assert reference_runs.result_paths(tmp_path / "reference_runs", "llm_quant") == [str(ref)]
    assert reference_runs.result_paths(tmp_path / "reference_runs", "sr3_scaling") == []
    ours = _quant_result(tmp_path / "results/cpu/llm_quant/smollm2_135m/fp32/none/result.json", "cpu", 14.9)
    loaded = load_results([ours, ref])
    assert loaded[0]["_series"] == "measured" and not loaded[0]["_hardware"].startswith("reference run")
    assert loaded[1]["_series"] == "reference run (H200, 2026-12-01)"
    assert loaded[1]["_hardware"].startswith("reference run (H200, 2026-12-01): ")
    study_b_quant.aggregate([ours, ref], REPO / "resources/reference/study_b_quantization.csv", tmp_path / "agg")
    table = pd.read_csv(tmp_path / "agg" / "table.csv")
    assert {"measured", "published", "reference run (H200, 2026-12-01)"} == set(table["source"])
    row = table[table["source"].str.startswith("reference run")].iloc[0]
    assert row["perplexity"] == 14.3 and row["system"] == "h200" and row["hellaswag_acc_pct"] == 50.0


def test_committed_tables_are_regenerated_from_the_run_alone(tmp_path):
    """`accelbench reference-runs --tables`: a run's tables and claims come from its own result files; the Study A
    table lists every committed configuration as the reference-run series, the claims table judges the run."""
    import shutil

    src = next(
        d
        for d in sorted((REPO / "reference_runs").glob("h200-*"))  # a run with Study A results
        if list(d.glob("results/*/unet3d_profile/**/result.json"))
    )
    dst = tmp_path / "reference_runs" / src.name
    shutil.copytree(src / "results", dst / "results")
    shutil.copy(src / "run.yaml", dst / "run.yaml")
    run = reference_runs.load_run(dst)
    written = reference_runs.write_tables(run, REPO / "resources" / "reference")
    assert dst / "tables" / "claims" in written
    configs = {Path(r).parent.name for r in run["results"] if "/unet3d_profile/" in r}
    table = pd.read_csv(dst / "tables" / "study_a" / "table.csv")
    assert configs and configs <= set(table.astype(str).stack()), "a committed configuration is missing"
    claims = pd.read_csv(dst / "tables" / "claims" / "claims.csv")
    assert (claims["system"] == "h200").any() and set(claims["verdict"]) & {"holds", "does not hold"}


def test_a_fifo_run_yaml_stops_the_dag_in_one_line(tmp_path):
    """A FIFO in place of `reference_runs/<run>/run.yaml`: `snakemake -n` returned 0 (the DAG only globbed the run's
    results) and only the real run failed. Now the DAG's result_paths reads the run.yaml of each run it draws
    results from (bounded: one line naming it), and finds the results without following a link."""
    import os

    from accelbench.core import tree
    from accelbench.errors import AccelbenchError

    run_dir = _run(tmp_path)
    root = tmp_path / "reference_runs"
    assert reference_runs.result_paths(root, "llm_quant") == [
        str(run_dir / "results/h200/llm_quant/smollm2_135m/fp32/none/result.json")
    ]
    (run_dir / "run.yaml").unlink()
    os.mkfifo(run_dir / "run.yaml")
    reference_runs._run_of_folder.cache_clear()
    with pytest.raises(AccelbenchError) as err:
        reference_runs.result_paths(root, "llm_quant")
    assert str(run_dir / "run.yaml") in str(err.value) and "not a plain file" in str(err.value)
    assert "\n" not in str(err.value)
    (run_dir / "run.yaml").unlink()
    (run_dir / "run.yaml").symlink_to(tmp_path / "elsewhere.yaml")  # absent target: not followed for results
    (run_dir / "results/h200/llm_quant/x").symlink_to(tmp_path)
    with pytest.raises(tree.TreeError, match="llm_quant/x is a link"):
        reference_runs.result_paths(root, "llm_quant")


@pytest.mark.parametrize(
    "study,experiments,reference",
    [
        ("study_a", ("unet3d_profile", "unet3d_ncu"), "study_a_claims.csv"),
        ("sr3", ("sr3_scaling",), "study_b_sr3_scaling.csv"),
        ("lora", ("lora_finetune",), "study_b_finetune_runtime.csv"),
        ("quant", ("llm_quant",), "study_b_quantization.csv"),
    ],
)
def test_every_study_aggregates_over_all_committed_reference_runs(tmp_path, study, experiments, reference):
    """What README command 1 does with the committed runs: each study's aggregation draws every reference run's
    results as its own series, under the figure check the aggregation rules run (a page's size, legend entries,
    overlaps). A new reference run that breaks a merged figure fails here, not in command 1 (which stopped at
    study_a_aggregate once h100x1c-2026-12-06 joined: fig_kernel_breakdown.png 1500x1696 px)."""
    import fake_results as fr
    from accelbench.aggregate import figures
    from accelbench.experiments.llm_quant import tables as quant
    from accelbench.experiments.lora import tables as lora
    from accelbench.experiments.sr3 import tables as sr3
    from accelbench.experiments.unet3d import tables as study_a

    aggregate = {"study_a": study_a.aggregate, "sr3": sr3.aggregate, "lora": lora.aggregate, "quant": quant.aggregate}
    paths = [p for e in experiments for p in reference_runs.result_paths(REPO / "reference_runs", e)]
    assert paths, f"no committed reference run has {experiments} results"
    here = {  # the main job's own CPU results beside them ("measured here")
        "study_a": [
            fr.unet3d("cpu", c, 100.0 / (1 + k)) for k, c in enumerate(("baseline", "channels_last_3d", "bf16"))
        ],
        "sr3": [fr.sr3("cpu", n, 100.0 / n, "fp32") for n in (1, 2)],
        "lora": [fr.lora("cpu", a, "single", 1, 700.0) for a in ("eager", "flash")],
        "quant": [fr.quant("cpu", "fp32", "none")],
    }[study]
    paths = fr.write(tmp_path / "results", here) + paths
    with figures.checked():
        aggregate[study](paths, REPO / "resources" / "reference" / reference, tmp_path / "agg")
    assert list((tmp_path / "agg").glob("*.png")), "no figure drawn"
