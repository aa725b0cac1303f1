import json
from pathlib import Path

import pandas as pd
import pytest

from accelbench.core import provenance, results
from accelbench.errors import ResultError
from accelbench.experiments.unet3d import tables as study_a

CLAIMS = "resources/reference/study_a_claims.csv"


def _fake(tmp_path, system, conf, status="ok", step=100.0, hw="NVIDIA H200"):
    env = provenance.collect("cpu")
    env["hardware"].update(backend="cuda", device_name=hw, device_count=1, device_memory_gib=139.8)
    cfg = {
        "system": {"name": system, "scale": "paper"},
        "model": "whole_head",
        "configuration": conf,
        "settings": {"scale": "paper", "volume": [128, 128, 128]},
    }
    timing = {"median": step, "p10": step * 0.9, "p90": step * 1.1, "count": 5}
    shares = {c: 0.0 for c in study_a.CLASSES}
    shares["convolution"] = 0.7
    shares["layout_conversion"] = 0.1 if "channels_last" in conf else 0.0
    shares["elementwise"] = 0.3 - shares["layout_conversion"]
    m = (
        {}
        if status != "ok"
        else {
            "train_step": timing,
            "sample_step": timing,
            "sample_projection": {"seconds": step * 0.25, "steps": 1000},
            "kernels": {
                "kernel_count": 900,
                "layout_conversion_count": 40 if "channels_last" in conf else 0,
                "cast_copy_count": 25 if "channels_last" in conf else 10,
                "source": "device_kernel",
                "class_share": shares,
                "tensor_core_share": 0.6 if "tf32" in conf else 0.0,
                "idle_fraction": 0.1,
            },
            "peak_mem_gib": 30.0,
            "train_throughput": {"tflop_per_s": 50.0, "mfu": 0.1},
            "quality": {
                "predicted_noise": {"rel_l2": 1e-3, "psnr_db": 70.0, "ssim": 0.999},
                "sample": {"psnr_db": 60.0, "ssim": 1.0},
                "holds": True,
            },
        }
    )
    r = results.make_result("unet3d_profile", status, cfg, env, m, None if status == "ok" else "out of device memory")
    path = tmp_path / system / "unet3d_profile" / "whole_head" / conf / "result.json"
    results.write_result(r, path)
    return path


def test_aggregate_tables_figures_and_claims(tmp_path):
    paths = [
        _fake(tmp_path, "h200", "baseline", step=100.0),
        _fake(tmp_path, "h200", "tf32", step=25.0),
        _fake(tmp_path, "h200", "tf32_channels_last_3d", step=20.0),
        _fake(tmp_path, "h200", "channels_last_3d", status="oom"),
        _fake(tmp_path, "a100", "baseline", step=300.0, hw="NVIDIA A100-SXM4-80GB"),
        _fake(tmp_path, "a100", "tf32", step=60.0, hw="NVIDIA A100-SXM4-80GB"),
    ]
    out = tmp_path / "agg"
    study_a.aggregate(paths, CLAIMS, out)
    df = pd.read_csv(out / "table.csv")
    h = df[df["hardware"].str.startswith("NVIDIA H200")].set_index("configuration")
    assert h.loc["tf32", "speedup_vs_baseline"] == pytest.approx(4.0)
    assert h.loc["channels_last_3d", "train_step_ms"] == "OOM"  # explicit cell, not dropped
    a = df[df["hardware"].str.startswith("NVIDIA A100")].set_index("configuration")
    assert a.loc["tf32", "speedup_vs_baseline"] == pytest.approx(5.0)
    md = (out / "table.md").read_text()
    assert "NVIDIA H200 (1x, 139.8 GiB)" in md and "OOM" in md  # labels from provenance
    assert "\\begin{table}" in (out / "table.tex").read_text()
    claims = pd.read_csv(out / "claims_vs_measured.csv")
    a12 = claims[(claims["claim_id"] == "a12") & (claims["system"] == "h200")].iloc[0]
    assert a12["measured"].startswith("5.00x") and a12["published"] == "3 to 5"
    assert "40 layout-conversion kernels/step (+25 cast/copy kernels, counted apart)" in a12["measured"]
    assert h.loc["tf32_channels_last_3d", "cast_copy_kernels"] == 25
    a7 = claims[(claims["claim_id"] == "a7") & (claims["system"] == "a100")].iloc[0]
    assert a7["measured"] == "0.20" and "proxy" in a7["how"]
    assert "x 1000 (the configured timesteps" in md and "x 250" not in md  # from the results, not hard-coded
    assert "quality_psnr_db_noise" in df and "quality_psnr_db_sample" not in df
    a6 = claims[(claims["claim_id"] == "a6") & (claims["system"] == "h200")].iloc[0]
    assert a6["how"].startswith("proxy") and "trained checkpoint" in a6["how"]
    for fig in ("fig_speedup.png", "fig_kernel_breakdown.png", "fig_kernel_counts.png"):
        assert (out / fig).stat().st_size > 10_000


def test_corrupt_result_stops_aggregation_with_the_file_named(tmp_path):
    good = _fake(tmp_path, "h200", "baseline")
    bad = tmp_path / "bad" / "result.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"status": "ok"}))
    with pytest.raises(ResultError, match=str(bad)):
        study_a.aggregate([good, bad], CLAIMS, tmp_path / "agg")
    assert not (tmp_path / "agg" / "table.csv").exists()


def test_aggregate_command_reads_a_results_file_like_the_results_option(tmp_path, capsys):
    """The rules pass `--results-file` (a short shell line however many results); `--results` by hand still works."""
    from accelbench import cli

    paths = [str(_fake(tmp_path, "h200", "baseline", step=100.0)), str(_fake(tmp_path, "h200", "tf32", step=25.0))]
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps({"results": paths}))
    by_file, by_hand = tmp_path / "by_file", tmp_path / "by_hand"
    assert (
        cli.main(["study-a-aggregate", "--results-file", str(listing), "--claims", CLAIMS, "--out-dir", str(by_file)])
        == 0
    )
    assert cli.main(["study-a-aggregate", "--results", *paths, "--claims", CLAIMS, "--out-dir", str(by_hand)]) == 0
    assert (by_file / "table.csv").read_text() == (by_hand / "table.csv").read_text()
    assert len(pd.read_csv(by_file / "table.csv")) == 2
    assert cli.main(["study-a-aggregate", "--claims", CLAIMS, "--out-dir", str(tmp_path / "none")]) == 2
    assert "no result files given" in capsys.readouterr().err


def test_two_networks_on_one_system_stay_apart_and_are_compared(tmp_path):
    """The MONAI stand-in (a committed reference run: no config.network) and Med-DDPM's network (measured
    here, 2 micro-batches) on one system: speedups and claims inside each network's own series, never across; the
    comparison table pairs them per configuration, layout conversions also per micro-batch."""
    loaded = []
    monai = {"baseline": 100.0, "tf32": 25.0, "channels_last_3d": 90.0}
    med_ddpm = {"baseline": 300.0, "tf32": 100.0, "channels_last_3d": 250.0}
    for run, network, steps in (("reference run (H200, 2026-11-30)", None, monai), ("measured", "med_ddpm", med_ddpm)):
        for conf, step in steps.items():
            path = _fake(tmp_path / run.split()[0], "h200", conf, step=step)
            r = json.loads(path.read_text())
            if network:
                r["config"]["network"] = network
                r["measurements"]["micro_batches"] = 2
            r.update(_path=str(path), _hardware=f"{run}: NVIDIA H200", _software="torch", _series=run)
            loaded.append(r)
    df = study_a.result_rows(loaded)
    speed = df.set_index(["network", "configuration"])["speedup_vs_baseline"]
    assert speed[("monai", "tf32")] == pytest.approx(4.0) and speed[("med_ddpm", "tf32")] == pytest.approx(3.0)
    comp = study_a.network_comparison(df, study_a.study_a_ncu.counter_rows([]))
    assert set(comp["network"]) == {"Med-DDPM network", "MONAI stand-in"} and len(comp) == 6
    cl3d = comp[comp["configuration"] == "channels_last_3d"].set_index("network")
    assert cl3d.loc["Med-DDPM network", "layout_conversion_per_micro_batch"] == pytest.approx(20.0)
    assert cl3d.loc["MONAI stand-in", "layout_conversion_per_micro_batch"] == pytest.approx(40.0)
    claims = study_a.claims_table(study_a.read_claims(CLAIMS), df, loaded)
    a11 = claims[claims["claim_id"] == "a11"]
    assert sorted(a11["network"]) == ["med_ddpm", "monai"]
    assert study_a.network_comparison(df[df["network"] == "med_ddpm"], pd.DataFrame()).empty  # one network: nothing


def test_table_shows_the_micro_batches_each_row_was_measured_with(tmp_path):
    """The Study A table's micro_batches column: the result's measurements.micro_batches; a row that did not run
    (no measurements) its resolved settings' or its spec's; a result made before the key existed (the first reference
    run) ran one micro-batch per Adam step."""
    paths = {
        "baseline": _fake(tmp_path, "h200", "baseline", step=100.0),
        "tf32": _fake(tmp_path, "h200", "tf32", step=25.0),
        "bf16": _fake(tmp_path, "h200", "bf16", status="unsupported"),
        "channels_last_3d": _fake(tmp_path, "h200", "channels_last_3d", step=90.0),
    }
    for conf, edit in (
        ("tf32", lambda r: r["measurements"].update(micro_batches=2)),
        ("bf16", lambda r: r["config"]["settings"].update(micro_batches=2)),
        ("channels_last_3d", lambda r: r["config"].update(micro_batches=4)),
    ):
        r = json.loads(paths[conf].read_text())
        edit(r)
        paths[conf].write_text(json.dumps(r))
    study_a.aggregate(list(paths.values()), CLAIMS, tmp_path / "agg")
    df = pd.read_csv(tmp_path / "agg" / "table.csv").set_index("configuration")
    assert df["micro_batches"].to_dict() == {"baseline": 1, "tf32": 2, "channels_last_3d": 4, "bf16": 2}
    assert list(df.columns).index("micro_batches") < list(df.columns).index("train_step_ms")
    assert "micro_batches: forward/backward passes per Adam step" in (tmp_path / "agg" / "table.md").read_text()


# ---------------------------------------------------------------- one result in two files (a copy, a link)
def _study_b(experiment):
    """(fake result object, the aggregation, its reference file) of each study reading ``experiment``."""
    import fake_results as fr
    from accelbench.aggregate import claims_report
    from accelbench.experiments.llm_quant import tables as quant
    from accelbench.experiments.lora import tables as lora
    from accelbench.experiments.sr3 import tables as sr3
    from accelbench.experiments.unet3d_ncu import tables as ncu

    return {
        "sr3_scaling": (fr.sr3("cpu", 1, 100.0), sr3.aggregate, "resources/reference/study_b_sr3_scaling.csv"),
        "lora_finetune": (
            fr.lora("cpu", "eager", "single", 1),
            lora.aggregate,
            "resources/reference/study_b_finetune_runtime.csv",
        ),
        "llm_quant": (fr.quant("cpu", "fp32", "none"), quant.aggregate, "resources/reference/study_b_quantization.csv"),
        "unet3d_ncu": (fr.ncu("h100", "baseline"), ncu.aggregate, CLAIMS),
        "claims": (fr.sr3("cpu", 1, 100.0), claims_report.aggregate, "resources/reference"),
    }[experiment]


def _second_copy(first, how):
    """A second file of the result ``first`` (a path) in a sibling folder ``<folder> (copy)``: a copy, a hard link
    or a symbolic link."""
    import os
    import shutil

    folder = first.parent.with_name(first.parent.name + " (copy)")
    folder.mkdir()
    second = folder / "result.json"
    {"copy": shutil.copy, "hardlink": os.link, "symlink": lambda a, b: os.symlink(a, b)}[how](first, second)
    return second


@pytest.mark.parametrize("how", ["copy", "hardlink", "symlink"])
def test_a_second_file_of_one_result_is_named_in_one_line_not_a_type_error(tmp_path, how):
    """ARTIFACT section 6: merging is copying folders. A copied `baseline (copy)/` (or a link to the result) made two
    rows with one key, and Study A and the claims stopped with `TypeError: float() argument must be ... not 'Series'`
    naming no file; load_results now names both files, for every study."""
    first = tmp_path / "cpu" / "unet3d_profile" / "whole_head" / "baseline" / "result.json"
    paths = [
        _fake(tmp_path, "cpu", "baseline", step=100.0),
        _fake(tmp_path, "cpu", "tf32", step=50.0),
        _second_copy(first, how),
    ]
    with pytest.raises(ResultError) as err:
        study_a.aggregate(paths, CLAIMS, tmp_path / "agg")
    msg = str(err.value)
    assert "\n" not in msg and "baseline (copy)/result.json" in msg
    assert "tf32" not in msg  # only the files that are one result
    # a copy names both files; a link is refused as a link before it is read (it names the link)
    assert (str(first) in msg) if how != "symlink" else ("a link" in msg)


@pytest.mark.parametrize("study", ["sr3_scaling", "lora_finetune", "llm_quant", "unet3d_ncu", "claims"])
def test_every_study_names_a_second_file_of_one_result(tmp_path, study):
    import fake_results as fr

    obj, aggregate, reference = _study_b(study)
    (first,) = fr.write(tmp_path / "results", [obj])
    second = _second_copy(Path(first), "copy")
    with pytest.raises(ResultError, match="one result in several files"):
        aggregate([first, str(second)], reference, tmp_path / "agg")
    aggregate([first], reference, tmp_path / "agg1")  # one file of it: aggregated
