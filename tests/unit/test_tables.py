"""Tables: fixed decimals per unit, a reason column, one line instead of a header-only table, claims that treat a
noisy result as not measured reliably, honest labels in gains.md."""

import json

import pandas as pd
import pytest
from test_aggregate import CLAIMS, _fake
from test_figures import _lora, _ncu, capture  # noqa: F401 (fixture)

from accelbench.aggregate.common import column_format, write_table
from accelbench.experiments.lora import tables as study_b_lora
from accelbench.experiments.unet3d import tables as study_a
from accelbench.experiments.unet3d_ncu import tables as study_a_ncu


def _mark_noisy(path, noisy=True):
    r = json.loads(path.read_text())
    r["measurements"]["noise"] = {"noisy": noisy, "why": ["other processes used 60% of the CPU time"] if noisy else []}
    path.write_text(json.dumps(r))
    return path


def test_fixed_decimals_per_unit_and_no_scientific_notation(tmp_path):
    df = pd.DataFrame(
        {
            "train_step_ms": [5950.123, 12.0],
            "share_gemm": [0.12345, 0.5],
            "peak_mem_gib": [1.234, 2.0],
            "kernel_count": [1234.0, 5.0],
            "speedup_vs_baseline": [7.4321, 1.0],
        }
    )
    write_table(df, tmp_path / "t", "caption")
    md = (tmp_path / "t.md").read_text()
    assert "5950.1" in md and "e+" not in md and "0.123" in md and "1.23" in md and "1234" in md and "7.43" in md
    assert column_format("throughput_tok_per_s") == "{:.1f}" and column_format("sm_cycles") == "{:,.0f}"
    # the ratios of counts are ratios: 0.172 once showed as "0" in the H200 counters table
    assert column_format("sm_cycles_ratio") == column_format("instructions_ratio") == "{:.2f}"
    assert column_format("instructions_step_est") == "{:,.0f}"


def test_long_reasons_become_footnotes_csv_is_rounded_and_html_is_a_fragment(tmp_path):
    oom = (
        "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which "
        "1.2 GiB is free"
    )
    df = pd.DataFrame(
        {
            "hardware": ["NVIDIA H200"] * 3,
            "step_ms": [3933.3540019999873, None, None],
            "kernel_count": [1234567891.0, None, None],
            "status": ["ok", "oom", "oom"],
            "reason": [None, oom, oom],
            "note": ["short", "short", "<b>x</b>"],
        }
    )
    write_table(df, tmp_path / "t", "caption", title="Runs")
    md = (tmp_path / "t.md").read_text()
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert max(map(len, table)) < 120 and oom not in "\n".join(table)  # narrow: the message once, as a footnote
    assert md.count(oom) == 1 and md.count("| [1]") == 2 and f"[1] {oom}" in md
    csv = (tmp_path / "t.csv").read_text()
    assert "3933.354," in csv and "3933.3540" not in csv and "1234567891" in csv  # rounded, counts whole
    html = (tmp_path / "t.html").read_text()
    assert html.startswith('<div class="accelbench-table">') and "<html" not in html and "<h3>Runs</h3>" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html  # escaped
    assert html.count(oom) == 1  # repeated on two rows: a footnote there too
    assert "footnotesize" in (tmp_path / "t.tex").read_text()


def test_header_only_table_becomes_one_line_why(tmp_path):
    write_table(pd.DataFrame(columns=["a", "b"]), tmp_path / "t", "caption", empty="Nothing measured: no ncu here.")
    md = (tmp_path / "t.md").read_text()
    assert "Nothing measured: no ncu here." in md and "| a" not in md


def test_study_a_table_reason_noise_and_claims(tmp_path):
    paths = [
        _fake(tmp_path, "cpu", "baseline", step=5950.0, hw="AMD EPYC"),
        _mark_noisy(_fake(tmp_path, "cpu", "bf16", step=800.0, hw="AMD EPYC")),
        _fake(tmp_path, "cpu", "tf32", status="unsupported", hw="AMD EPYC"),
        _fake(tmp_path, "h100", "baseline", step=100.0, hw="NVIDIA H100 80GB HBM3"),
        _fake(tmp_path, "h100", "tf32", step=25.0, hw="NVIDIA H100 80GB HBM3"),
    ]
    out = tmp_path / "agg"
    study_a.aggregate(paths, CLAIMS, out)
    md = (out / "table.md").read_text()
    assert "5950.0" in md and "e+03" not in md
    t = pd.read_csv(out / "table.csv")
    unsupported = t[t["configuration"] == "tf32"].iloc[0]
    assert unsupported["reason"] and unsupported["status"] == "unsupported"
    assert t.set_index("configuration").loc["bf16", "noise"] == "noisy"
    claims = pd.read_csv(out / "claims_vs_measured.csv")
    cpu = claims[claims["system"] == "cpu"]
    assert not cpu["same_gpu"].any()  # a CPU is never the GPU a claim was made on
    assert claims[(claims["system"] == "h100") & (claims["claim_id"] == "a1")]["same_gpu"].all()
    a1 = claims[(claims["claim_id"] == "a1") & (claims["system"] == "h100")].iloc[0]["measured"]
    assert a1.count("convolution") == 1  # no repetition
    bf16 = claims[(claims["system"] == "cpu") & (claims["configuration"] == "bf16")]
    if not bf16.empty:
        assert (bf16["measured"] == study_a.NOT_RELIABLE).all()
    tf32_cpu = claims[(claims["system"] == "cpu") & (claims["configuration"] == "tf32")]
    assert (tf32_cpu["measured"] == "unsupported").all()


def test_noisy_result_is_not_measured_reliably_in_claims(tmp_path):
    paths = [
        _fake(tmp_path, "h100", "baseline", step=100.0, hw="NVIDIA H100"),
        _mark_noisy(_fake(tmp_path, "h100", "tf32", step=25.0, hw="NVIDIA H100")),
    ]
    study_a.aggregate(paths, CLAIMS, tmp_path / "agg")
    claims = pd.read_csv(tmp_path / "agg" / "claims_vs_measured.csv")
    tf32 = claims[claims["configuration"] == "tf32"]
    assert len(tf32) and (tf32["measured"] == study_a.NOT_RELIABLE).all()
    assert tf32["how"].str.contains("other processes").all()


def test_counter_tables_reason_column_and_empty_by_class_line(tmp_path):
    paths = [_ncu(tmp_path, "cpu", c, status="unsupported", hw="AMD EPYC", backend="cpu") for c in ("baseline", "tf32")]
    study_a_ncu.aggregate(paths, CLAIMS, tmp_path / "agg")
    t = pd.read_csv(tmp_path / "agg" / "counters.csv")
    assert t["reason"].str.contains("Nsight Compute needs").all() and t["top_stalls"].isna().all()
    md = (tmp_path / "agg" / "counters_by_class.md").read_text()
    assert "Nothing measured" in md and "Nsight Compute needs" in md and "| hardware" not in md


def test_gains_label_single_device_runs_as_single(tmp_path):
    paths = [_lora(tmp_path, "eager", "single", 1, 700.0), _lora(tmp_path, "flash", "single", 1, 650.0)]
    study_b_lora.aggregate(paths, "resources/reference/study_b_finetune_runtime.csv", tmp_path / "agg")
    g = pd.read_csv(tmp_path / "agg" / "gains.csv")
    ours = g[g["source"].str.startswith("ours")]  # fake results without a series: "ours (until 2026-11-30)"
    assert list(ours["strategy"]) == ["single"] and list(ours["metric"]) == ["flash_gain"]
    head = (tmp_path / "agg" / "gains.md").read_text().splitlines()[0]
    assert not head.endswith("):)") and not head.endswith(":")


def test_noisy_bar_is_marked_in_the_speedup_figure(tmp_path, capture):
    paths = [
        _fake(tmp_path, "h100", "baseline", step=100.0, hw="NVIDIA H100"),
        _mark_noisy(_fake(tmp_path, "h100", "tf32", step=25.0, hw="NVIDIA H100")),
    ]
    study_a.aggregate(paths, CLAIMS, tmp_path / "agg")
    fig, problems = capture["fig_speedup.png"]
    assert problems == [] and not fig.axes[0].texts  # nothing written over a bar: hatched, and said in the legend
    assert any(p.get_hatch() == "xx" for p in fig.axes[0].patches)
    assert any(t.get_text().startswith("noisy (hatched)") for leg in fig.legends for t in leg.get_texts())


def _h100_lora(attention, strategy, devices, step_ms, visible, **measured):
    """A fake H100 LoRA result (tests/fake_results.py) on a node showing ``visible`` GPUs, with measurements
    overridden by ``measured`` (``model``: merged into measurements.model)."""
    import fake_results as fr

    r = fr.lora("h100", attention, strategy, devices, step_ms)
    r["environment"]["hardware"]["device_count"] = visible
    r["measurements"]["model"].update(measured.pop("model", {}))
    r["measurements"].update(measured)
    return r


def test_gains_pair_runs_by_the_devices_used_not_the_devices_visible(tmp_path):
    """A 1-device eager job on a 2-GPU node and a 1-device flash job on a 1-GPU node are the same hardware: the label
    counts the devices the job used (it read '2x' and '1x' before, and the pair was dropped from gains)."""
    import fake_results as fr

    paths = fr.write(
        tmp_path / "results",
        [
            _h100_lora("eager", "single", 1, 700.0, visible=2),
            _h100_lora("flash", "single", 1, 650.0, visible=1),
            _h100_lora("eager", "ddp", 2, 997.4, visible=8),
            _h100_lora("flash", "ddp", 2, 1000.0, visible=2),
        ],
    )
    study_b_lora.aggregate(paths, "resources/reference/study_b_finetune_runtime.csv", tmp_path / "agg")
    runs = pd.read_csv(tmp_path / "agg" / "runs.csv")
    assert set(runs.loc[runs["devices"] == 1, "hardware"]) == {"NVIDIA H100 80GB HBM3 (1x, 79.1 GiB)"}
    assert set(runs.loc[runs["devices"] == 2, "hardware"]) == {"NVIDIA H100 80GB HBM3 (2x, 79.1 GiB)"}
    g = pd.read_csv(tmp_path / "agg" / "gains.csv")
    ours = g[g["source"].str.startswith("ours")].set_index("strategy")
    assert set(ours.index) == {"single", "ddp"}
    assert ours.loc["single", "value"] == pytest.approx(700 / 650 - 1)
    assert ours.loc["ddp", "value"] == pytest.approx(997.4 / 1000 - 1)  # -0.0026: the CSV keeps full precision
    assert ours.loc["ddp", "flash_gain_pct"] == pytest.approx(100 * (997.4 / 1000 - 1))
    # the shown table gives the gain in percent with one decimal: sign and size readable, not "-0.00"
    md = (tmp_path / "agg" / "gains.md").read_text()
    row = next(line for line in md.splitlines() if "| ours" in line and "| ddp" in line)
    assert "| -0.3 " in row and "| 7.7 " in next(line for line in md.splitlines() if "| single" in line)
    pub = g[~g["source"].str.startswith("ours") & (g["metric"] != "flash_gain")]
    assert len(pub) and pub["flash_gain_pct"].isna().all()  # a slowdown has no gain in percent


def test_lora_result_without_parameter_count_shows_no_mfu_6n(tmp_path):
    """ZeRO-3 results recorded ``model.parameters: 0`` (counted after partitioning): their MFU-6N was ~1000x too
    small with status ok. Such a row (0 or absent) shows no MFU-6N and says why; MFU-LoRA and the times stay."""
    import fake_results as fr

    zero = _h100_lora(
        "eager",
        "zero3",
        2,
        900.0,
        visible=2,
        model={"parameters": 0},
        throughput_6n={"tflop_per_s": 1.6, "mfu": 0.0008},
        throughput_lora={"mfu": 0.07},
    )
    absent = _h100_lora("flash", "zero3", 2, 800.0, visible=2, throughput_6n={"tflop_per_s": 1.6, "mfu": 0.0008})
    del absent["measurements"]["model"]["parameters"]
    fine = _h100_lora("eager", "ddp", 2, 500.0, visible=2, throughput_6n={"tflop_per_s": 500.0, "mfu": 0.5})
    paths = fr.write(tmp_path / "results", [zero, absent, fine])
    study_b_lora.aggregate(paths, "resources/reference/study_b_finetune_runtime.csv", tmp_path / "agg")
    runs = pd.read_csv(tmp_path / "agg" / "runs.csv").set_index(["strategy", "attention"])
    for key in (("zero3", "eager"), ("zero3", "flash")):
        assert pd.isna(runs.loc[key, "mfu_6n"]) and runs.loc[key, "status"] == "ok"
        assert "parameters not recorded in the result" in runs.loc[key, "reason"]
        assert runs.loc[key, "step_ms"] in (900.0, 800.0)
    assert runs.loc[("zero3", "eager"), "mfu_lora"] == pytest.approx(0.07)
    assert runs.loc[("ddp", "eager"), "mfu_6n"] == pytest.approx(0.5) and pd.isna(runs.loc[("ddp", "eager"), "reason"])


def test_sr3_labels_count_devices_used_and_curves_span_them(tmp_path):
    """SR3's 1-device fp32 job on a 2-GPU node reads 1x (it read 2x); the scaling series (efficiency table, figure)
    is one per device type, over 1 and 2 devices."""
    import fake_results as fr
    from accelbench.aggregate.common import load_results
    from accelbench.experiments.sr3 import tables as study_b_sr3

    one, two = fr.sr3("h100", 1, 100.0), fr.sr3("h100", 2, 60.0)
    one["environment"]["hardware"]["device_count"] = two["environment"]["hardware"]["device_count"] = 2
    df = study_b_sr3.result_rows(load_results(fr.write(tmp_path / "results", [one, two])))
    assert list(df["hardware"]) == ["NVIDIA H100 80GB HBM3 (1x, 79.1 GiB)", "NVIDIA H100 80GB HBM3 (2x, 79.1 GiB)"]
    ref, _ = study_b_sr3.read_reference("resources/reference/study_b_sr3_scaling.csv")
    eff = study_b_sr3.efficiency_table(df, ref)
    assert set(eff.loc[eff["series"].str.startswith("measured"), "series"]) == {
        "measured here: NVIDIA H100 80GB HBM3 (79.1 GiB) (paper), paper text (attention at 16 px): fp32"
    }
