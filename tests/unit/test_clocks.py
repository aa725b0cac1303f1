"""The device clocks of the timed steps (accelbench.measure.clocks, the Clocks tracker, the CUDA backend's NVML reader)
on a scripted NVML (a fake ``pynvml`` module) and a scripted host clock: the record's numbers, the clock-event reason
bits, NVML absent or failing, the ranks' merge, the noise caution, the result schema."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

import fake_results as fr
from accelbench.backends import cuda
from accelbench.backends.clock_reader import ClockReader, ClockSample
from accelbench.backends.device import Device
from accelbench.measure import clocks, hostload, phase


class Clock:
    """The host clock (time.perf_counter), advanced by the planted steps."""

    def __init__(self):
        self.t = 10.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(phase.time, "perf_counter", c)
    monkeypatch.setattr(clocks.time, "perf_counter", c)
    return c


class FakeNvml(SimpleNamespace):
    """A scripted ``pynvml``: one GPU whose i-th read gives ``mhz[i]``, ``masks[i]`` (clock-event reason bits) and
    ``temps[i]``; ``fail_init`` / ``fail_read`` raise as NVML does (no driver; a GPU fallen off the bus)."""

    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0

    def __init__(self, mhz=(), masks=(), temps=(), max_mhz=1980, fail_init=False, fail_read=False, old_names=False):
        super().__init__()
        self.mhz, self.masks, self.temps, self.max_mhz = list(mhz), list(masks), list(temps), max_mhz
        self.fail_init, self.fail_read, self.reads = fail_init, fail_read, 0
        reasons = "nvmlDeviceGetCurrentClocksThrottleReasons" if old_names else "nvmlDeviceGetCurrentClocksEventReasons"
        setattr(self, reasons, self._reasons)

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetUUID(self, h):
        return b"GPU-0000"

    def nvmlDeviceGetClockInfo(self, h, kind):
        assert kind == self.NVML_CLOCK_SM
        if self.fail_read:
            raise RuntimeError("GPU is lost")
        self.reads += 1
        return self.mhz[min(self.reads - 1, len(self.mhz) - 1)]

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return self.max_mhz

    def _reasons(self, h):
        return self.masks[min(self.reads - 1, len(self.masks) - 1)]

    def nvmlDeviceGetTemperature(self, h, kind):
        return self.temps[min(self.reads - 1, len(self.temps) - 1)]


@pytest.fixture
def nvml(monkeypatch):
    """Install a scripted pynvml (``nvml(**kwargs)``) where the CUDA backend imports it."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def install(**kwargs):
        fake = FakeNvml(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install


class FakeDevice:
    """What the trackers use of a Device (the backend's clock reader comes from ``ops``)."""

    index = 0

    def __init__(self, reader=None):
        self.ops = SimpleNamespace(
            uses_device_events=False, sync_debug_mode=False, name="cuda", clock_reader=lambda i: reader
        )
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1

    def mark_step(self):
        pass


def run_phase(clock, dev, steps, step_s, with_clocks=True):
    def step():
        clock.t += step_s

    trackers = ((phase.Clocks(dev, steps),) if with_clocks else ()) + (phase.Latency(dev),)
    return phase.timed_phase(step, dev, 1, steps, trackers)


# --------------------------------------------------------------------------- the record of a throttled phase
def test_a_power_capped_phase_records_its_clocks_and_the_noise_names_the_cap(clock, nvml):
    # 1980, 1700, 1755 MHz; sw_power_cap (0x4) active in the 2nd and 3rd samples
    fake = nvml(mhz=[1980, 1700, 1755], masks=[0x0, 0x4, 0x4], temps=[60, 71, 74])
    dev = FakeDevice(cuda.CudaBackend().clock_reader(0))
    r = run_phase(clock, dev, 3, 0.6)  # one sample per step: 0.6 s > the 0.5 s interval
    c = r.values["clocks"]
    assert c is r.timing.clocks and c["status"] == "ok" and c["source"] == "nvml" and c["device"] == "GPU-0000"
    bare = FakeDevice()
    run_phase(clock, bare, 3, 0.6, with_clocks=False)
    assert fake.reads == 3 and dev.syncs == bare.syncs  # the sampler added no synchronize
    assert c["sm_clock_mhz"] == {"unit": "MHz", "count": 3, "median": 1755, "min": 1700, "max": 1980}
    assert c["sm_clock_max_mhz"] == 1980 and c["clock_ratio"] == pytest.approx(1755 / 1980)
    assert c["temperature_c"] == {"unit": "C", "median": 71, "max": 74}
    assert c["clock_event_reasons"] == {"sw_power_cap": pytest.approx(2 / 3)} and c["gpu_idle_fraction"] == 0
    m = {"clocks": clocks.report({"iteration": c}, "iteration")}
    assert m["clocks"]["sm_clock_mhz"] == 1755 and m["clocks"]["main_phase"] == "iteration"
    noise = hostload.assess(m, None)
    # a clock limit is a caution beside the numbers, not "not measured reliably" (an H100 at full load may sit at
    # its power cap)
    assert not noise["noisy"] and noise["why"] == [] and noise["thresholds"]["clock_ratio_min"] == 0.9
    assert noise["thresholds"]["clock_reason_fraction_max"] == 0.5
    assert noise["cautions"] == [
        "SM clock median 1755 MHz over the timed steps of iteration is 0.89 of its max 1980 MHz (< 0.9; "
        "power/thermal reasons: sw_power_cap 67%)",
        "clock event reason sw_power_cap active in 67% of 3 clock samples of iteration (> 50%)",
    ]
    assert hostload.assess(m, None, {"clock_ratio_min": 0.85, "clock_reason_fraction_max": 0.7})["cautions"] == []


def test_samples_at_most_once_per_interval_and_at_least_once(clock, nvml):
    nvml(mhz=[1980], masks=[0x1])  # idle: listed apart, not a reason
    reader = cuda.NvmlClockReader(0)
    c = run_phase(clock, FakeDevice(reader), 10, 0.25).values["clocks"]  # after steps 1, 3, 5, 7, 9
    assert c["samples"] == 5 and c["clock_event_reasons"] == {} and c["gpu_idle_fraction"] == 1.0
    none = phase.Clocks(FakeDevice(cuda.NvmlClockReader(0)), 0)  # no timed step: one sample at stop
    assert phase.timed_phase(lambda: None, FakeDevice(), 0, 0, (none,)).values["clocks"]["samples"] == 1


def test_the_step_clock_samples_only_the_steps_after_its_skip(clock):
    class Counting(ClockReader):
        source, reads = "scripted", 0

        def read(self):
            self.reads += 1
            return ClockSample(1500.0 + self.reads, 1980.0)

    reader = Counting()
    sampler = clocks.ClockSampler(FakeDevice(), steps=3, skip=2, reader=reader, interval_s=0.0)
    for _ in range(7):  # 2 warm-up steps, 3 timed, 2 after the metered ones
        sampler.after_step()
    assert reader.reads == 3 and sampler.result()["sm_clock_mhz"]["min"] == 1501


# --------------------------------------------------------------------------- NVML absent or failing
@pytest.mark.parametrize("how", ["init_raises", "read_raises", "not_installed"])
def test_nvml_failing_is_unsupported_and_the_phase_is_unchanged(clock, nvml, monkeypatch, how):
    if how == "not_installed":
        monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    else:
        nvml(mhz=[1980], masks=[0], fail_init=how == "init_raises", fail_read=how == "read_raises")
    reader = cuda.CudaBackend().clock_reader(0)  # never raises
    with_clocks = run_phase(clock, FakeDevice(reader), 4, 0.25)
    without = run_phase(clock, FakeDevice(), 4, 0.25, with_clocks=False)
    c = with_clocks.values["clocks"]
    assert (
        c["status"] == "unsupported"
        and c["reason"]
        == {
            "init_raises": "NVML clocks not readable: RuntimeError: NVML Shared Library Not Found",
            "read_raises": "NVML clocks not readable: RuntimeError: GPU is lost",
            "not_installed": "nvidia-ml-py (pynvml) is not installed",
        }[how]
    )
    assert with_clocks.timing.to_dict() == without.timing.to_dict()
    m = {"clocks": clocks.report({"iteration": c}, "iteration")}
    assert m["clocks"] == {
        "status": "unsupported",
        "main_phase": "iteration",
        "reason": c["reason"],
        "phases": {"iteration": c},
    }
    assert not hostload.assess(m, None)["noisy"]


def test_a_backend_without_clocks_is_unsupported_with_its_name():
    assert Device("cpu").ops.clock_reader() is None
    c = clocks.ClockSampler(Device("cpu")).result()
    assert c == {"status": "unsupported", "reason": "no clock reader for backend cpu"}


# --------------------------------------------------------------------------- the reason bits
def test_reason_bits_decode_by_name_with_an_unknown_remainder():
    assert cuda.decode_clock_event_reasons(0x1FF) == (
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "display_clock_setting",
    )
    assert cuda.decode_clock_event_reasons(0x4 | 0x1000 | 0x4000) == ("sw_power_cap", "0x5000")
    assert cuda.decode_clock_event_reasons(0) == ()
    # pynvml's constants win over the nvml.h defaults (older pynvml: the ...ThrottleReason... names)
    old = SimpleNamespace(nvmlClocksThrottleReasonSwPowerCap=0x400)
    assert cuda.decode_clock_event_reasons(0x400 | 0x4, old) == ("sw_power_cap", "0x4")


def test_an_older_pynvml_reads_the_throttle_reasons(clock, nvml):
    nvml(mhz=[1400], masks=[0x40], temps=[90], old_names=True)
    c = clocks.ClockSampler(FakeDevice(cuda.NvmlClockReader(0))).result()
    assert c["clock_event_reasons"] == {"hw_thermal_slowdown": 1.0} and c["sm_clock_mhz"]["median"] == 1400


# --------------------------------------------------------------------------- ranks, schema
def _record(mhz, reasons):
    return clocks.summarize([ClockSample(m, 1980, None, r) for m, r in zip(mhz, reasons)], {"source": "nvml"}, 0.5)


def test_ranks_merge_to_the_slowest_device_and_each_reasons_largest_share():
    fast = _record([1980, 1980], [(), ()])
    slow = _record([1600, 1700], [("sw_power_cap",), ()])
    m = clocks.merge_ranks([fast, slow])
    assert m["sm_clock_mhz"]["median"] == 1650 and m["clock_event_reasons"] == {"sw_power_cap": 0.5}
    assert m["per_rank"] == [fast, slow] and "raw" not in m
    assert clocks.merge_ranks([fast, None])["status"] == "unsupported"
    assert clocks.merge_ranks([fast]) is fast


def test_the_result_schema_checks_the_clock_record():
    from accelbench.core import validate

    r = fr.sr3("cpu", 1, 641.4)
    r["measurements"]["clocks"] = clocks.report({"iteration": _record([1755], [()])}, "iteration")
    assert validate.problems_of(json.loads(json.dumps(r))) == []
    r["measurements"]["clocks"] = {"status": "unsupported", "main_phase": "iteration", "phases": {}}  # no reason
    assert any(p.startswith("measurements.clocks") for p in validate.problems_of(json.loads(json.dumps(r))))
