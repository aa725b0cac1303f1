"""The energy tables and figure (accelbench.aggregate.energy) from results whose measurements.energy is made by the
real producer (accelbench.measure.energy.summarize / merge_ranks / report), and their schema."""

from __future__ import annotations

import pandas as pd
import pytest

import fake_results
from accelbench.aggregate import energy as agg
from accelbench.core import validate
from accelbench.measure import energy
from accelbench.measure.energy import Settings, Window

REFERENCE = "resources/reference"  # every experiment's published numbers (SR3's times among them)
COUNTER = {
    "source": "nvml",
    "api": "nvmlDeviceGetTotalEnergyConsumption",
    "resolution_j": 1e-3,
    "update_period_s": 0.1,
    "wrap_j": None,
    "counter": "GPU-x",
    "covers": "GPU board",
}


def phase(j_per_step: float, step_s: float, windows: int = 3, counter: str = "GPU-x") -> dict:
    steps = max(1, round(1.0 / step_s))
    ws = [Window(steps, steps * step_s, j_per_step * steps) for _ in range(windows)]
    return energy.summarize(ws, {**COUNTER, "counter": counter}, Settings())


def with_energy(result: dict, rep: dict) -> dict:
    result["measurements"]["energy"] = rep
    return result


def test_tables_put_energy_beside_time_for_every_system_and_label_projections(tmp_path):
    sr3_e = energy.report(
        {"iteration": energy.merge_ranks([phase(30.0, 0.05, counter="GPU-a"), phase(32.0, 0.05, counter="GPU-b")])},
        "iteration",
        {
            "image": ("iteration", 8, "J/image", 1, "measured"),
            "study_b_workload": ("iteration", 1, "kJ/Study B workload", 20000 / 1e3, "projection"),
        },
        {"images_per_s_per_w": (160.0, "iteration", "images/s/W")},
        step_ms=50.0,
    )
    objs = [
        with_energy(fake_results.sr3("h100", 2, 50.0), sr3_e),
        with_energy(
            fake_results.unet3d("a100", "bf16"),
            energy.report(
                {"train_step": phase(40.0, 0.1)},
                "train_step",
                {"training_step": ("train_step", 1, "J/training step", 1, "measured")},
                step_ms=100.0,
            ),
        ),
        with_energy(
            fake_results.lora("cpu", "flash", "single", 1),
            energy.report(
                {"step": {"status": "unsupported", "reason": "no RAPL package zone under /sys/class/powercap"}}, "step"
            ),
        ),
        fake_results.quant("h100", "fp32", "none"),  # made before the meter: no measurements.energy
        fake_results.sr3("a100", 1, 80.0, status="oom", reason="out of device memory"),
    ]
    for r in objs:
        assert validate.problems_of(r) == [], r["experiment"]
    out = agg.aggregate(fake_results.write(tmp_path / "results", objs), REFERENCE, tmp_path / "energy")
    df = pd.read_csv(out["table"]).set_index("experiment")
    assert len(df) == 4  # the oom result has no step to meter
    sr3 = df.loc["sr3_scaling"]
    assert sr3["energy"] == "ok" and sr3["j_per_step"] == pytest.approx(62.0)  # two devices summed
    assert sr3["power_w"] == pytest.approx(1240.0) and sr3["step_ms"] == 50.0 and sr3["case"] == "fp32/n2"
    assert sr3["per_unit"] == pytest.approx(62.0 / 8) and sr3["unit"] == "J/image"
    assert sr3["per_watt"] == pytest.approx(160.0 / 1240.0) and sr3["reliable"] == "yes"
    assert df.loc["lora_finetune", "energy"] == "unsupported" and "RAPL" in df.loc["lora_finetune", "reason"]
    assert df.loc["llm_quant", "energy"] == "not recorded" and df.loc["llm_quant", "step_ms"] == 1000.0
    assert df.loc["unet3d_profile", "j_per_step"] == pytest.approx(40.0)
    units = pd.read_csv(out["units"])
    proj = units[units["quantity"] == "study_b_workload"].iloc[0]
    assert proj["label"] == "projection" and proj["value"] == pytest.approx(62.0 * 20)
    md = (tmp_path / "energy" / "energy.md").read_text()
    assert energy.LABEL in md and "cooling" in md
    assert out["figure"].stat().st_size > 0


def test_figure_is_readable_and_shows_published_times_without_energy(tmp_path):
    rows = agg.rows(fake_results_loaded(tmp_path))
    published = agg.published_times(REFERENCE)
    assert set(published["system"]) >= {"gaudi2", "h100"}
    # Study B, one device: 132 min for 40,000 iterations on an H100
    assert published.set_index("system").loc["h100", "step_ms"] == pytest.approx(132 * 60e3 / 40000)
    assert agg.fig_time_vs_energy(rows, published, tmp_path / "fig.png") == []
    empty = agg.rows([])
    assert agg.fig_time_vs_energy(empty, published, tmp_path / "none.png") == []


def fake_results_loaded(tmp_path):
    from accelbench.aggregate.common import load_results

    objs = [
        with_energy(
            fake_results.sr3(s, 1, ms), energy.report({"iteration": phase(j, ms / 1e3)}, "iteration", step_ms=ms)
        )
        for s, ms, j in (("h100", 50.0, 30.0), ("a100", 80.0, 35.0))
    ]
    return load_results(fake_results.write(tmp_path / "r", objs))


def test_case_names_no_experiment():
    r = {"config": {"model": "whole_head", "configuration": "bf16", "devices": 1, "settings": {"a": 1}}}
    assert agg._case(r) == "whole_head/bf16/n1"
