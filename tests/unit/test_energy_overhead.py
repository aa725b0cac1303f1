"""benchmarks/energy_overhead.py on the CPU: the product clock timed with the meter off and on, alternated, through
the benchmark's own phase (measure.timing.time_steps + energy.configure), with a scripted energy counter."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest

from accelbench.backends import energy_counter
from accelbench.backends.device import Device
from accelbench.measure import energy
from conftest import REPO


def _load():
    spec = importlib.util.spec_from_file_location("energy_overhead", REPO / "benchmarks/energy_overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Counter(energy_counter.Counter):
    source, update_period_s, identity = "scripted", None, "scripted"

    def __init__(self):
        self.j = 0.0

    def read_j(self):
        self.j += 5.0  # 5 J between two reads: one window of the phase
        return self.j


def test_meter_off_and_on_alternate_and_the_summary_states_ratio_and_spread(tmp_path, monkeypatch):
    from accelbench.backends.cpu import CpuBackend

    bench = _load()
    monkeypatch.setattr(CpuBackend, "energy_counter", lambda self, index=0: Counter())
    monkeypatch.setattr(energy, "_settings", energy.Settings(window_s=60.0))  # one window per phase
    calls = []

    def build(result, args):
        device = Device("cpu")
        return "baseline", lambda on: calls.append(on) or bench._phase(lambda: None, device, 1, 4, on)

    monkeypatch.setattr(bench, "study_a", build)
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"experiment": "unet3d_profile", "status": "ok", "config": {}}))
    out = tmp_path / "overhead.csv"
    bench.main(["--result", str(result), "--rounds", "2", "--csv", str(out)])
    assert calls == [False, True, False, True]
    df = pd.read_csv(out)
    rows, summary = df[df["round"] != "summary"], df[df["round"] == "summary"].iloc[0]
    assert list(rows["meter"]) == ["off", "on", "off", "on"] and set(rows["steps"]) == {4}
    assert list(rows[rows["meter"] == "off"]["j_per_step"]) == ["off", "off"]  # the meter read nothing
    assert list(rows[rows["meter"] == "on"]["j_per_step"].astype(float)) == [1.25, 1.25]  # 5 J / 4 steps
    assert summary["on_over_off"] > 0 and summary["j_spread"] == 0.0
    assert summary["off_spread"] >= 0 and summary["paired_on_over_off"] > 0
    assert bench._steps(250.0, 4.0, 10) == 16 and bench._steps(None, 4.0, 10) == 10


def test_summary_states_the_noise_floor_and_the_paired_ratio():
    """The committed 2x H200 rounds (SR3 bf16): off 176.2, 163.6, 162.1 ms, on 177.6, 184.2, 141.8 ms. The ratio of
    medians reads 1.086, the same-round ratios' median 1.008, and the off rounds alone spread 8.6%: a 1% meter cost
    cannot be told from that jitter."""
    ratio, off_spread, paired = _load().summary([176.2253, 163.6193, 162.1132], [177.6459, 184.1875, 141.8344])
    assert ratio == pytest.approx(1.0857, abs=1e-4) and off_spread == pytest.approx(0.0862, abs=1e-4)
    assert paired == pytest.approx(1.0081, abs=1e-4)


def test_refuses_a_result_it_cannot_rebuild(tmp_path):
    bench = _load()
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"experiment": "llm_quant", "status": "ok", "config": {}}))
    with pytest.raises(SystemExit, match="an ok unet3d_profile"):
        bench.main(["--result", str(result), "--csv", str(tmp_path / "x.csv")])
