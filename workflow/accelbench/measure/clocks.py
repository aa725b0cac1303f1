"""The device's SM clock, temperature and clock-event ("throttle") reasons DURING the timed steps of a phase.

Why: the same SR3 step ran 188 ms on one H100 and 220 ms on another (same driver, code and power limit); the SM clock
that the host-load record took at the job's end (idle, at the maximum) could not tell them apart. A number that
depends on the clocks records them while it is measured.

What is read: the device's backend gives a reader (:meth:`accelbench.backends.base.Backend.clock_reader`, an
:class:`accelbench.backends.clock_reader.ClockReader`; NVIDIA: NVML's SM clock, maximum SM clock, GPU temperature and
the clock-event reason bits). This module knows no vendor.

How (:class:`ClockSampler`, driven by :class:`accelbench.measure.phase.Clocks`): one sample after the phase's first
metered step, then one after each step that ends at least :data:`SAMPLE_INTERVAL_S` of host time after the last
sample, and one at the end where none was taken. Nothing is synchronized: the reader asks the driver, not the
device's queue, so the samples fall while queued steps run. :func:`summarize` gives a phase's record: the SM clock's
median, min and max (MHz) and its sample count, the maximum SM clock, the temperature's median and max, and each
reason seen with the fraction of samples it was active in (``gpu_idle`` apart, under ``gpu_idle_fraction``).
Where the backend has no reader or nothing could be read: ``{"status": "unsupported", "reason": ...}``, every other
number of the phase unchanged.

:func:`cautions` turns a result's ``measurements.clocks`` into the cautions of the noise record
(:func:`accelbench.measure.hostload.assess`; beside the numbers, not "noisy"): a median SM clock below
``clock_ratio_min`` x the maximum, or a power or thermal reason active in more than ``clock_reason_fraction_max`` of
the samples.
"""

from __future__ import annotations

import statistics
import time

SAMPLE_INTERVAL_S = 0.5  # shortest host time between two samples of a phase, s
# Clock-event reasons that lower the clock for power or heat (the noise record names them when mostly active).
POWER_THERMAL_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
)
IDLE_REASON = "gpu_idle"


def unsupported(reason: str) -> dict:
    return {"status": "unsupported", "reason": reason}


class ClockSampler:
    """Samples of one device's clocks over the metered steps of a phase (see the module docstring).

    Args:
        device: an :class:`accelbench.backends.device.Device` (its backend's ``clock_reader`` gives the reader).
        steps: the phase's steps to sample (after ``skip``); None: until :meth:`result`.
        skip: steps not sampled first (LoRA's warm-up optimizer steps, timed by the same clock).
        reader: a reader to use instead of the backend's (tests: a scripted one).
        interval_s: shortest host time between samples, s.
    """

    def __init__(self, device, steps: int | None = None, skip: int = 0, reader=None, interval_s: float | None = None):
        self.steps, self.skip = steps, skip
        self.interval_s = SAMPLE_INTERVAL_S if interval_s is None else interval_s
        self.reader, self.reason = reader, None
        if reader is None:
            try:
                self.reader = device.ops.clock_reader(device.index)
            except Exception as exc:  # a backend's reader must not raise; the phase's numbers stand regardless
                self.reason = f"no clock reader: {type(exc).__name__}: {exc}"
            else:
                if self.reader is None:
                    self.reason = f"no clock reader for backend {device.ops.name}"
        self.samples: list = []
        self._seen = 0
        self._last: float | None = None

    def _sample(self) -> None:
        try:
            got = self.reader.read()
        except Exception as exc:  # a reader must not raise; if one does, the phase's numbers still stand
            self.reader.reason, got = f"clock reader failed: {type(exc).__name__}: {exc}", None
        self._last = time.perf_counter()
        if got is not None:
            self.samples.append(got)

    def after_step(self) -> None:
        if self.reader is None:
            return
        self._seen += 1
        n = self._seen - self.skip
        if n < 1 or (self.steps is not None and n > self.steps):
            return
        if self._last is None or time.perf_counter() - self._last >= self.interval_s:
            self._sample()

    def result(self) -> dict:
        """The phase's clock record (:func:`summarize`); one sample taken now where none was."""
        if self.reader is None:
            return unsupported(self.reason)
        if self._last is None:
            self._sample()
        if not self.samples:
            return unsupported(self.reader.reason or "the clock reader returned no sample")
        return summarize(self.samples, self.reader.describe(), self.interval_s)


def summarize(samples: list, reader: dict, interval_s: float) -> dict:
    """A phase's clock record from ``samples`` (:class:`accelbench.backends.clock_reader.ClockSample`, at least one).

    Returns:
        ``{"status": "ok", "samples": n, "interval_s", "sm_clock_mhz": {unit, count, median, min, max},
        "sm_clock_max_mhz" (the largest reported; None where none), "clock_ratio" (median / max SM clock),
        "temperature_c": {unit, median, max} | None, "clock_event_reasons": {reason: fraction of samples},
        "gpu_idle_fraction", "raw": [[sm_clock_mhz, temperature_c, [reasons]], ...], source, api, device}``.
    """
    n = len(samples)
    mhz = [s.sm_clock_mhz for s in samples]
    maxima = [s.sm_clock_max_mhz for s in samples if s.sm_clock_max_mhz]
    temps = [s.temperature_c for s in samples if s.temperature_c is not None]
    seen: dict[str, int] = {}
    for s in samples:
        for r in set(s.reasons):
            seen[r] = seen.get(r, 0) + 1
    idle = seen.pop(IDLE_REASON, 0)
    top = max(maxima) if maxima else None
    median = statistics.median(mhz)
    return {
        "status": "ok",
        **reader,
        "samples": n,
        "interval_s": interval_s,
        "sm_clock_mhz": {"unit": "MHz", "count": n, "median": median, "min": min(mhz), "max": max(mhz)},
        "sm_clock_max_mhz": top,
        "clock_ratio": median / top if top else None,
        "temperature_c": {"unit": "C", "median": statistics.median(temps), "max": max(temps)} if temps else None,
        "clock_event_reasons": {r: c / n for r, c in sorted(seen.items())},
        "gpu_idle_fraction": idle / n,
        "raw": [[s.sm_clock_mhz, s.temperature_c, list(s.reasons)] for s in samples],
    }


def merge_ranks(per_rank: list[dict | None]) -> dict:
    """The job's clocks from each rank's phase record: the rank whose device ran at the lowest median SM clock sets
    the headline (a synchronous job goes at its slowest device's pace), each reason's largest fraction over the ranks;
    every rank's record under ``per_rank``. ``unsupported`` where any rank is."""
    per_rank = [r or unsupported("rank recorded no clocks") for r in per_rank]
    bad = next((r for r in per_rank if r.get("status") != "ok"), None)
    if bad is not None:
        return unsupported(bad.get("reason") or "a rank's clocks are not recorded")
    if len(per_rank) == 1:
        return per_rank[0]
    slowest = min(per_rank, key=lambda r: r["sm_clock_mhz"]["median"])
    reasons: dict[str, float] = {}
    for r in per_rank:
        for name, frac in r["clock_event_reasons"].items():
            reasons[name] = max(reasons.get(name, 0.0), frac)
    return {
        **{k: v for k, v in slowest.items() if k != "raw"},
        "clock_event_reasons": dict(sorted(reasons.items())),
        "gpu_idle_fraction": max(r["gpu_idle_fraction"] for r in per_rank),
        "method": f"the rank of the lowest median SM clock; each reason's largest fraction over {len(per_rank)} ranks",
        "per_rank": per_rank,
    }


def report(phases: dict[str, dict | None], main: str) -> dict:
    """``measurements.clocks`` of an experiment: every sampled phase's record under ``phases``; the ``main`` phase's
    headline (``sm_clock_mhz`` median, ``sm_clock_max_mhz``, ``clock_ratio``, ``clock_event_reasons``);
    ``status`` is the main phase's (``unsupported`` with its reason)."""
    phases = {k: v for k, v in phases.items() if v is not None}
    c = phases.get(main) or unsupported(f"phase {main} not sampled")
    out = {"status": c["status"], "main_phase": main}
    if c["status"] != "ok":
        out["reason"] = c.get("reason")
    else:
        out.update(
            {
                "source": c.get("source"),
                "sm_clock_mhz": c["sm_clock_mhz"]["median"],
                "sm_clock_max_mhz": c["sm_clock_max_mhz"],
                "clock_ratio": c["clock_ratio"],
                "clock_event_reasons": c["clock_event_reasons"],
            }
        )
    out["phases"] = phases
    return out


def cautions(clocks: dict | None, ratio_min: float, reason_fraction_max: float) -> list[str]:
    """The noise record's cautions from ``measurements.clocks`` (:func:`report`): per sampled phase, a median SM
    clock below ``ratio_min`` x its maximum, and each power/thermal reason (:data:`POWER_THERMAL_REASONS`) active in
    more than ``reason_fraction_max`` of the samples. Empty where nothing was sampled."""
    out = []
    phases = (clocks or {}).get("phases") if isinstance(clocks, dict) else None
    for name, c in (phases or {}).items():
        if not isinstance(c, dict) or c.get("status") != "ok":
            continue
        active = {r: f for r, f in c["clock_event_reasons"].items() if r in POWER_THERMAL_REASONS}
        named = ", ".join(f"{r} {f:.0%}" for r, f in sorted(active.items(), key=lambda x: -x[1])) or "none reported"
        ratio = c.get("clock_ratio")
        if ratio is not None and ratio < ratio_min:
            out.append(
                f"SM clock median {c['sm_clock_mhz']['median']:.0f} MHz over the timed steps of {name} is "
                f"{ratio:.2f} of its max {c['sm_clock_max_mhz']:.0f} MHz (< {ratio_min}; power/thermal reasons: "
                f"{named})"
            )
        for r, f in sorted(active.items()):
            if f > reason_fraction_max:
                out.append(
                    f"clock event reason {r} active in {f:.0%} of {c['samples']} clock samples of {name} "
                    f"(> {reason_fraction_max:.0%})"
                )
    return out
