"""The energy meter (accelbench.measure.energy) with a scripted counter and a scripted host clock: windows, J/step, W,
wrap-around, a counter that is not supported, windows shorter than the counter's update period, ranks."""

from __future__ import annotations

import pytest

from accelbench.backends.cpu import RaplCounter
from accelbench.backends.device import Device
from accelbench.backends.energy_counter import Counter, CounterUnavailable
from accelbench.measure import energy
from accelbench.measure import timing as measure
from accelbench.measure.energy import EnergyMeter, Settings


class Clock:
    """The host clock the meter reads (time.perf_counter), advanced by the scripted steps."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class ScriptedCounter(Counter):
    """A counter driven by the scripted clock: ``watts`` x elapsed time, read as a cumulative value that wraps at
    ``wrap_j`` (if set), updated only every ``update_period_s`` (like NVML's ~100 ms; 1/8 s here: exact in binary)."""

    source, api, resolution_j = "scripted", "test", 1e-3

    def __init__(self, clock, watts=100.0, wrap_j=None, update_period_s=0.125, start_j=0.0, backwards_at=None):
        self.clock, self.watts, self.wrap_j, self.update_period_s = clock, watts, wrap_j, update_period_s
        self.t0, self.start_j, self.reads, self.backwards_at = clock.t, start_j, 0, backwards_at
        self.identity = f"scripted-{id(self)}"

    def read_j(self):
        self.reads += 1
        if self.backwards_at is not None and self.reads == self.backwards_at:
            return 0.0  # a driver reload: the counter restarts from 0
        elapsed = self.clock.t - self.t0
        if self.update_period_s:
            elapsed = (elapsed // self.update_period_s) * self.update_period_s
        value = self.start_j + self.watts * elapsed
        return value % self.wrap_j if self.wrap_j else value


class FakeDevice:
    """What the meter uses of a Device: synchronize (counted), mark_step, index, ops."""

    index = 0

    def __init__(self):
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1

    def mark_step(self):
        pass


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(energy.time, "perf_counter", c)
    return c


def run(meter, clock, steps, step_s):
    for _ in range(steps):
        meter.before_step()
        clock.t += step_s
        meter.after_step()
    return meter.result()


def test_windows_of_at_least_window_s_give_joules_per_step_and_watts(clock):
    dev = FakeDevice()
    meter = EnergyMeter(dev, steps=12, counter=ScriptedCounter(clock, watts=250.0), config=Settings(window_s=1.0))
    e = run(meter, clock, 12, 0.25)  # 3 windows of 4 steps, 1 s each
    assert e["status"] == "ok" and e["source"] == "scripted" and e["label"] == energy.LABEL
    assert [w["steps"] for w in e["windows"]] == [4, 4, 4] and e["windows_used"] == 3
    assert e["per_step"]["median"] == pytest.approx(62.5) and e["per_step"]["unit"] == "J"
    assert e["power_w"]["median"] == pytest.approx(250.0) and e["step_ms_metered"]["median"] == pytest.approx(250.0)
    assert e["reliable"] and e["short_windows"] == 0 and e["staleness_bound"] == pytest.approx(0.125)
    assert "cooling" in e["not_counted"] and e["window_s"] == 1.0
    assert dev.syncs == 2 * 3  # one synchronize at each window boundary, none inside a window


def test_the_last_metered_step_closes_a_short_window_and_later_steps_are_not_metered(clock):
    meter = EnergyMeter(FakeDevice(), steps=10, skip=2, counter=ScriptedCounter(clock), config=Settings(window_s=1.0))
    e = run(meter, clock, 14, 0.25)  # 2 skipped (warm-up), 10 metered: 4 + 4 + 2 (short), 2 after the phase
    assert [w["steps"] for w in e["windows"]] == [4, 4, 2] and e["windows"][2]["flags"] == ["short"]
    assert e["windows_used"] == 2 and e["short_windows"] == 1 and e["steps_metered"] == 8
    assert not e["reliable"]  # 2 full windows < min_windows 3
    assert e["per_step"]["median"] == pytest.approx(25.0)


def test_counter_wrap_around_is_unwrapped(clock):
    # the counter wraps at 1000 J and starts at 900 J: the first window (250 J) crosses the wrap
    meter = EnergyMeter(
        FakeDevice(),
        steps=8,
        config=Settings(window_s=1.0),
        counter=ScriptedCounter(clock, watts=250.0, wrap_j=1000.0, start_j=900.0),
    )
    e = run(meter, clock, 8, 0.5)
    assert [w["joules"] for w in e["windows"]] == pytest.approx([250.0] * 4)
    assert energy.counter_delta(990.0, 10.0, 1000.0) == pytest.approx(20.0)
    assert energy.counter_delta(990.0, 10.0, None) is None


def test_counter_going_backwards_without_a_wrap_is_flagged_not_used(clock):
    c = ScriptedCounter(clock, start_j=500.0, backwards_at=2)  # the 2nd read (end of the first window) restarted from 0
    e = run(EnergyMeter(FakeDevice(), steps=8, counter=c, config=Settings(window_s=1.0)), clock, 8, 0.5)
    assert e["windows"][0]["joules"] is None and "counter_went_backwards" in e["windows"][0]["flags"]
    assert e["windows_used"] == 3 and e["power_w"]["median"] == pytest.approx(100.0)
    c = ScriptedCounter(clock, start_j=500.0, backwards_at=2)
    e = run(EnergyMeter(FakeDevice(), steps=2, counter=c, config=Settings(window_s=1.0)), clock, 2, 0.5)
    assert e["status"] == "unsupported" and "went backwards" in e["reason"]


def test_windows_shorter_than_the_update_period_are_flagged(clock):
    e = run(
        EnergyMeter(FakeDevice(), steps=4, counter=ScriptedCounter(clock), config=Settings(window_s=1.0)),
        clock,
        4,
        0.01,
    )  # the whole phase: 40 ms
    assert e["status"] == "ok" and e["windows"][0]["flags"] == ["short", "below_update_period"]
    assert e["below_update_period"] == 1 and not e["reliable"] and "too short" in e["note"]
    assert e["staleness_bound"] == pytest.approx(3.125)  # 125 ms update period / 40 ms window


class _Ops:
    name = "fake"

    def __init__(self, outcome):
        self.outcome = outcome

    def energy_counter(self, index):
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


@pytest.mark.parametrize(
    "outcome,reason",
    [
        (
            CounterUnavailable("NVML energy counter not readable: NotSupported"),
            "NVML energy counter not readable: NotSupported",
        ),
        (None, "no energy counter for backend fake"),
    ],
)
def test_counter_not_supported_is_unsupported_with_the_reason(outcome, reason, clock):
    dev = FakeDevice()
    dev.ops = _Ops(outcome)
    meter = EnergyMeter(dev, steps=4)
    e = run(meter, clock, 4, 0.5)
    assert e == {"status": "unsupported", "reason": reason, "label": energy.LABEL}
    assert dev.syncs == 0  # nothing read, nothing synchronized


def test_step_clock_meters_only_when_asked_and_leaves_the_timing_unchanged(monkeypatch):
    from accelbench.backends.cpu import CpuBackend

    scripted = []
    monkeypatch.setattr(
        CpuBackend,
        "energy_counter",
        lambda self, index=0: scripted.append(ScriptedCounter(Clock(), watts=10.0)) or scripted[-1],
    )
    dev = Device("cpu")
    t = measure.time_steps(lambda: None, dev, warmup=1, repeat=5)
    assert t.count == 5 and t.energy["status"] == "ok" and "energy" not in t.to_dict()
    assert sum(w["steps"] for w in t.energy["windows"]) == 5
    assert measure.time_steps(lambda: None, dev, 0, 3, energy=False).energy is None
    clock = measure.StepClock(dev)  # not asked: no meter, no counter opened
    clock.start()
    clock.stop()
    assert clock.energy() is None and len(scripted) == 1
    monkeypatch.setattr(energy, "_settings", Settings(enabled=False))
    assert measure.time_steps(lambda: None, dev, 0, 3).energy["status"] == "off" and len(scripted) == 1


def test_rapl_sums_package_zones_and_unwraps_each(tmp_path):
    for zone, value, rng in (("intel-rapl:0", 999_000_000, 1_000_000_000), ("intel-rapl:1", 5_000_000, 10**9)):
        (tmp_path / zone).mkdir()
        (tmp_path / zone / "energy_uj").write_text(f"{value}\n")
        (tmp_path / zone / "max_energy_range_uj").write_text(f"{rng}\n")
    (tmp_path / "intel-rapl:0:0").mkdir()  # a subzone (core): inside package 0, not counted again
    c = RaplCounter(tmp_path)
    assert c.identity == "rapl:intel-rapl:0,intel-rapl:1" and c.read_j() == 0.0
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("2000000\n")  # wrapped: +3 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("6000000\n")  # +1 J
    assert c.read_j() == pytest.approx(4.0)
    with pytest.raises(CounterUnavailable, match="no RAPL package zone"):
        RaplCounter(tmp_path / "absent")


def test_merge_ranks_sums_devices_and_counts_a_shared_counter_once():
    def rank(counter, j, w):
        return {
            "status": "ok",
            "counter": counter,
            "source": "nvml",
            "reliable": True,
            "staleness_bound": 0.05,
            "per_step": {"median": j, "p10": j - 1, "p90": j + 1},
            "power_w": {"median": w},
        }

    m = energy.merge_ranks([rank("GPU-a", 10.0, 300.0), rank("GPU-b", 12.0, 320.0)])
    assert m["per_step"]["median"] == pytest.approx(22.0) and m["power_w"]["median"] == pytest.approx(620.0)
    assert m["devices_counted"] == 2 and m["ranks"] == 2 and m["per_step"]["p10"] == pytest.approx(20.0)
    shared = energy.merge_ranks([rank("rapl:intel-rapl:0", 5.0, 50.0), rank("rapl:intel-rapl:0", 5.5, 52.0)])
    assert shared["devices_counted"] == 1 and shared["per_step"]["median"] == 5.0
    bad = energy.merge_ranks([rank("GPU-a", 1.0, 1.0), {"status": "unsupported", "reason": "no NVML"}])
    assert bad["status"] == "unsupported" and bad["reason"] == "no NVML"


def test_per_unit_and_per_watt():
    e = {"status": "ok", "per_step": {"median": 50.0}, "power_w": {"median": 400.0}}
    assert energy.per_unit(e, 4, "J/image")["value"] == pytest.approx(12.5)
    assert energy.per_unit(e, 2048, "J/1k tokens", scale=1000)["value"] == pytest.approx(50 * 1000 / 2048)
    assert energy.per_watt(80.0, e) == pytest.approx(0.2)
    assert energy.per_unit({"status": "unsupported"}, 4, "J") is None and energy.per_watt(1.0, None) is None


def test_settings_from_spec():
    assert energy.Settings.from_spec(None) == Settings()
    assert energy.Settings.from_spec({"enabled": False, "window_s": 2.0}) == Settings(False, 2.0, 3)
