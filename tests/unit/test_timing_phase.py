"""The one timed phase (accelbench.measure.phase): each tracker's numbers on a planted step (a scripted host clock, a
fake backend whose device events return known times, a scripted energy counter, planted allocations and synchronising
calls), the warm-up with its first iteration, and the order the trackers are entered in."""

from __future__ import annotations

import time
import warnings
from types import SimpleNamespace

import pytest

from accelbench.backends.device import Device
from accelbench.backends.energy_counter import Counter
from accelbench.measure import energy, phase


class Clock:
    """The host clock (time.perf_counter) and the device's, advanced by the planted steps."""

    def __init__(self):
        self.t = 50.0

    def __call__(self):
        return self.t


class FakeDevice:
    """What the trackers use of a Device: synchronize (counted), mark_step, peak memory, ``ops`` capabilities."""

    index = 0

    def __init__(self, events=False, sync_debug=False):
        self.ops = SimpleNamespace(uses_device_events=events, sync_debug_mode=sync_debug, name="fake")
        self.syncs, self.allocated, self.peak, self.resets = 0, 0, 0, 0

    def synchronize(self):
        self.syncs += 1

    def mark_step(self):
        pass

    def reset_peak_memory(self):
        self.resets += 1
        self.peak = self.allocated

    def peak_memory_bytes(self):
        return self.peak

    def allocate(self, n):  # a planted transient allocation of n bytes
        self.peak = max(self.peak, self.allocated + n)


class FakeEvent:
    """A device event stamped with the device clock when recorded; ``elapsed_time`` in ms, as CUDA's."""

    def __init__(self, clock):
        self.clock, self.at = clock, None

    def record(self):
        self.at = self.clock.t

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(phase.time, "perf_counter", c)
    monkeypatch.setattr(energy.time, "perf_counter", c)
    return c


def planted(clock, seconds):
    """A step taking ``seconds[i]`` on call i (the last value repeats)."""
    calls = []

    def step():
        clock.t += seconds[min(len(calls), len(seconds) - 1)]
        calls.append(1)

    step.calls = calls
    return step


def test_latency_on_the_host_clock_gives_each_step_and_the_first_iteration(clock):
    dev = FakeDevice()
    # warm-up: a 2 s compiling first step, then 0.1 s; timed: 10, 20, ..., 100 ms
    step = planted(clock, [2.0, 0.1] + [k / 100 for k in range(1, 11)])
    r = phase.timed_phase(step, dev, warmup=2, steps=10, trackers=(phase.Latency(dev),))
    t = r.timing
    assert len(step.calls) == 12 and r.warmup == 2 and t.warmup == 2
    assert r.first_iteration_s == pytest.approx(2.0)
    assert t.samples == pytest.approx([10.0 * k for k in range(1, 11)])
    assert t.method == "synchronize+perf_counter" and t.unit == "ms"
    assert t.median == pytest.approx(55.0) and t.p10 == pytest.approx(19.0) and t.p90 == pytest.approx(91.0)
    assert t.spread == pytest.approx((91.0 - 19.0) / 55.0)
    assert phase.timed_phase(step, dev, 0, 1, (phase.Latency(dev),)).first_iteration_s is None


def test_latency_with_device_events_reads_the_events_once_after_the_loop(clock):
    dev = FakeDevice(events=True)
    step = planted(clock, [0.004, 0.006, 0.005])
    lat = phase.Latency(dev, make_event=lambda: FakeEvent(clock))
    r = phase.timed_phase(step, dev, warmup=0, steps=3, trackers=(lat,))
    assert r.timing.method == "cuda_events" and r.timing.samples == pytest.approx([4.0, 6.0, 5.0])
    # no synchronize per step: one before the loop, one to read the events
    assert dev.syncs == 2
    wall = phase.Latency(dev, wall=True)
    assert wall.method == "synchronize+perf_counter"


def test_latency_on_a_real_sleeping_step():
    r = phase.timed_phase(lambda: time.sleep(0.02), Device("cpu"), 1, 3, (phase.Latency(Device("cpu")),))
    assert 20.0 <= r.timing.median < 500.0 and r.first_iteration_s >= 0.02


class ScriptedCounter(Counter):
    """``watts`` x the host clock's elapsed time, cumulative (J)."""

    source, api, resolution_j, update_period_s, wrap_j, identity = "scripted", "test", 1e-3, None, None, "s"

    def __init__(self, clock, watts):
        self.clock, self.watts, self.t0 = clock, watts, clock.t

    def read_j(self):
        return self.watts * (self.clock.t - self.t0)


def test_energy_gives_joules_per_timed_step_and_leaves_the_warm_up_out(clock):
    dev = FakeDevice()
    step = planted(clock, [5.0, 0.25])  # a 5 s warm-up step at 100 W would add 500 J if metered
    cfg = energy.Settings(window_s=1.0, min_windows=3)
    tracker = phase.Energy(dev, 12, counter=ScriptedCounter(clock, 100.0), config=cfg)
    r = phase.timed_phase(step, dev, 1, 12, (tracker, phase.Latency(dev)))
    e = r.values["energy"]
    assert e is r.timing.energy and e["status"] == "ok" and e["reliable"]
    assert e["per_step"]["median"] == pytest.approx(25.0) and e["power_w"]["median"] == pytest.approx(100.0)
    assert e["steps_metered"] == 12 and e["windows_used"] == 3
    off = phase.Energy(dev, 3, counter=ScriptedCounter(clock, 100.0), config=energy.Settings(enabled=False))
    assert phase.timed_phase(step, dev, 0, 3, (off,)).values["energy"]["status"] == "off"


def test_peak_memory_spans_the_warm_up(clock):
    dev = FakeDevice()
    dev.peak = 10**9  # a peak from before the phase: reset away
    sizes = iter([300, 100, 100, 100])
    r = phase.timed_phase(lambda: dev.allocate(next(sizes)), dev, 1, 3, (phase.PeakMemory(dev),))
    assert r.values["peak_memory_bytes"] == 300 and dev.resets == 1


class WarningDevice(FakeDevice):
    """A device whose synchronize warns as CUDA's sync debug mode does (the warning counts only while it is on)."""

    def synchronize(self):
        super().synchronize()
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)


@pytest.mark.filterwarnings("ignore:called a synchronizing:UserWarning", "ignore:something else:UserWarning")
def test_host_syncs_counts_the_timed_steps_only_and_restores_the_mode(clock):
    dev = WarningDevice(sync_debug=True)
    modes = []

    def step():
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)

    syncs = phase.HostSyncs(dev, set_mode=modes.append)
    r = phase.timed_phase(step, dev, 3, 4, (syncs,)).values["host_syncs"]
    # 2 per timed step, and the phase's own synchronize before the first timed step (counted, as on CUDA)
    assert r["count"] == 9 and sum(r["where"].values()) == 9 and modes == ["warn", "default"]
    assert r["method"] == phase.SYNC_METHOD
    quiet = phase.timed_phase(step, FakeDevice(), 0, 2, (phase.HostSyncs(FakeDevice()),))
    assert quiet.values["host_syncs"] == {}  # a backend that cannot count: not counted, not 0


class QueuedDevice(FakeDevice):
    """A device whose steps queue work: the host clock reaches it only at a synchronize (as CUDA's queue)."""

    def __init__(self, clock):
        super().__init__()
        self.clock, self.pending = clock, 0.0

    def synchronize(self):
        super().synchronize()
        self.clock.t += self.pending
        self.pending = 0.0


def test_wall_clock_spans_warm_up_and_timed_steps_and_waits_for_the_device(clock):
    dev = QueuedDevice(clock)
    work = iter([3.0] + [0.5] * 5)

    def step():
        dev.pending += next(work)

    r = phase.timed_phase(step, dev, 2, 4, (phase.WallClock(dev),))
    assert r.values["wall_s"] == pytest.approx(3.0 + 5 * 0.5) and r.first_iteration_s == pytest.approx(3.0)


class Recorder(phase._Tracker):
    def __init__(self, name, log, spans=False):
        self.name, self.log, self.spans_warmup = name, log, spans

    def start(self):
        self.log.append(f"{self.name}.start")

    def step_begin(self):
        self.log.append(f"{self.name}.begin")

    def step_end(self):
        self.log.append(f"{self.name}.end")

    def stop(self):
        self.log.append(f"{self.name}.stop")
        return {self.name: True}


def test_trackers_nest_like_context_managers_and_spanning_ones_start_before_the_warm_up(clock):
    log = []
    dev = FakeDevice()
    trackers = (Recorder("outer", log), Recorder("mem", log, spans=True), Recorder("inner", log))
    r = phase.timed_phase(
        lambda: log.append("step"), dev, 1, 1, trackers, after_warmup=lambda: log.append("after_warmup")
    )
    assert log == [
        "mem.start",
        "step",
        "after_warmup",
        "outer.start",
        "inner.start",
        "outer.begin",
        "inner.begin",
        "step",
        "inner.end",
        "outer.end",
        "inner.stop",
        "outer.stop",
        "mem.stop",
    ]
    assert r.values == {"outer": True, "mem": True, "inner": True} and r.timing is None


def test_train_phase_is_what_time_steps_and_step_clock_run(clock):
    from accelbench.measure import timing

    dev = FakeDevice()
    t = timing.time_steps(planted(clock, [0.002]), dev, 1, 4, energy=False)
    assert t.samples == pytest.approx([2.0] * 4) and t.warmup == 1 and t.energy is None
    c = timing.StepClock(dev)
    c.start()
    clock.t += 0.007
    c.stop()
    assert c.samples() == pytest.approx([7.0])


def test_sr3s_checks_time_the_step_through_the_one_phase(monkeypatch):
    """The energy-overhead check and SR3's host-bound check (the rule's Trainer: sr3.rank also calls train_phase)
    run their steps through phase.timed_phase: a change of how a step is timed reaches them all."""
    import importlib.util

    from accelbench.experiments.sr3 import overhead as sr3_overhead
    from conftest import REPO

    spec = importlib.util.spec_from_file_location("energy_overhead", REPO / "benchmarks/energy_overhead.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seen, real = [], phase.timed_phase
    monkeypatch.setattr(phase, "timed_phase", lambda step, *a, **k: seen.append(step) or real(step, *a, **k))
    monkeypatch.setattr(energy, "_settings", energy.Settings())
    dev = Device("cpu")
    steps = []
    t, _ = bench._phase(lambda: steps.append("energy"), dev, 1, 3, False)
    assert t.count == 3 and len(seen) == 1
    tr = SimpleNamespace(train_step=lambda: steps.append("sr3"), next_batch=lambda: None)
    row = sr3_overhead._host_bound_times(tr, dev, 1, 3)
    assert len(seen) == 2 and seen[1] is tr.train_step and row["median_ms"] >= 0


def test_untimed_work_around_each_step_stays_out_of_its_time(clock):
    """measure.overhead.time_loop (the bare loops' timer): ``before``/``after`` run around every call, warm-up ones
    included, outside the step's timing window."""
    from accelbench.measure import overhead

    dev, calls = FakeDevice(), []

    def hook(name, seconds):
        return lambda: calls.append(name) or setattr(clock, "t", clock.t + seconds)

    samples = overhead.time_loop(planted(clock, [0.01]), dev, 2, 3, before=hook("b", 1.0), after=hook("a", 2.0))
    assert samples == pytest.approx([10.0] * 3) and calls == ["b", "a"] * 5
    assert overhead.time_loop(planted(clock, [0.004]), dev, 1, 2) == pytest.approx([4.0] * 2)
