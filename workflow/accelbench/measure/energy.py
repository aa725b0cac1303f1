"""Device energy per step: cumulative energy counters read around windows of timed steps.

What is measured: the board energy of the job's device(s) from the vendor's cumulative counter, which the device's
backend gives (:meth:`accelbench.backends.base.Backend.energy_counter`, an
:class:`accelbench.backends.energy_counter.Counter`; NVIDIA: ``nvmlDeviceGetTotalEnergyConsumption``, mJ since the
driver loaded, Volta and later; Intel Gaudi: ``hlmlDeviceGetTotalEnergyConsumption``, mJ, through ``pyhlml``; host
CPU: RAPL package counters under ``/sys/class/powercap``, uJ, wrapping at ``max_energy_range_uj``). This module
knows no vendor. It is device-level board energy, not MLPerf Power
(which meters whole systems at the wall with an approved analyzer): host CPU (except on the cpu backend, where the
packages are the device), host memory, network, storage, cooling and power-supply losses are not counted.

How (:class:`EnergyMeter`, driven by :class:`accelbench.measure.timing.StepClock`): a window opens before a timed step
(synchronize the device, read the counter, read the host clock) and closes after the first step at which at least
``window_s`` (default 1 s: the counters update about every 100 ms) has passed on the host clock, or after the
phase's last metered step (synchronize, read, read the clock). Nothing is synchronized or read inside a window,
so CUDA steps still queue back to back there; the only added work is one synchronize and one counter read per
window boundary. Windows shorter than ``window_s`` are kept but flagged (``short``); windows shorter than the
counter's update period are flagged too (``below_update_period``: the counter may not have moved). J per step is
the median (and spread) over the full windows (all windows, flagged, when none is full). Each rank meters its own
device; :func:`merge_ranks` sums the ranks' devices (a counter shared by several ranks, e.g. RAPL of one host,
counted once).

Where no counter can be read the result is ``{"status": "unsupported", "reason": ...}`` and every other
measurement is unchanged. The settings (``enabled``, ``window_s``, ``min_windows``: config ``energy``) are set once
per process by the harness (:func:`configure`).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field

from accelbench.backends.energy_counter import Counter, CounterUnavailable

LABEL = "device-level board energy, not MLPerf Power"
NOT_COUNTED = (
    "host CPU and host memory (except where the host CPU is the device: RAPL), network, storage, "
    "cooling, power-supply losses"
)


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Settings:
    """Config ``energy``: ``enabled`` (meter the timed phases), ``window_s`` (shortest window, s),
    ``min_windows`` (full windows for a result counted as ``reliable``)."""

    enabled: bool = True
    window_s: float = 1.0
    min_windows: int = 3

    @classmethod
    def from_spec(cls, value: dict | None) -> Settings:
        return cls(**{k: v for k, v in (value or {}).items() if k in ("enabled", "window_s", "min_windows")})


_settings = Settings()


def configure(value: dict | Settings | None) -> Settings:
    """Set this process's energy settings (the harness: from the job's spec ``energy``). Returns them."""
    global _settings
    _settings = value if isinstance(value, Settings) else Settings.from_spec(value)
    return _settings


def settings() -> Settings:
    return _settings


def off() -> dict:
    """``measurements.energy`` of a phase not metered because config ``energy.enabled`` is false."""
    return {"status": "off", "reason": "energy.enabled is false", "label": LABEL}


# --------------------------------------------------------------------------- the meter
@dataclass
class Window:
    """One window: ``steps`` steps in ``seconds`` (host clock, synchronized ends) using ``joules``."""

    steps: int
    seconds: float
    joules: float | None
    flags: list[str] = field(default_factory=list)


def counter_delta(a: float, b: float, wrap_j: float | None) -> float | None:
    """``b - a`` of a cumulative counter, unwrapped once when it wraps at ``wrap_j``; None when it went backwards
    without a known wrap (driver reloaded, counter reset)."""
    if b >= a:
        return b - a
    if wrap_j:
        return b + wrap_j - a
    return None


class EnergyMeter:
    """Windows of timed steps on one device (see the module docstring). :class:`accelbench.measure.timing.StepClock`
    calls :meth:`before_step` / :meth:`after_step` around each step; :meth:`result` gives ``measurements.energy``.

    Args:
        device: an :class:`accelbench.backends.device.Device` (its backend's ``energy_counter`` gives the counter).
        steps: the phase's steps to meter (after ``skip``); the last one closes the open window. None: until
            :meth:`result` (the open window is then closed there).
        skip: steps not metered first (e.g. LoRA's warm-up optimizer steps, timed by the same clock).
        counter: a counter to use instead of the backend's (tests: a scripted one).
        config: :class:`Settings` (default: this process's, :func:`configure`).
    """

    def __init__(
        self,
        device,
        steps: int | None = None,
        skip: int = 0,
        counter: Counter | None = None,
        config: Settings | None = None,
    ):
        self.device, self.steps, self.skip = device, steps, skip
        self.config = config or _settings
        self.counter, self.reason = counter, None
        if counter is None:
            try:
                self.counter = device.ops.energy_counter(device.index)
                if self.counter is None:
                    self.reason = f"no energy counter for backend {device.ops.name}"
            except CounterUnavailable as exc:
                self.reason = str(exc)
        self.windows: list[Window] = []
        self._seen = 0
        self._open: tuple[float, float, int] | None = None  # (joules at open, host time at open, steps)

    @property
    def active(self) -> bool:
        return self.counter is not None

    def _metered(self) -> bool:
        n = self._seen - self.skip
        return n >= 0 and (self.steps is None or n < self.steps)

    def before_step(self) -> None:
        if not self.active or self._open is not None or not self._metered():
            return
        self.device.synchronize()
        self._open = (self.counter.read_j(), time.perf_counter(), 0)

    def after_step(self) -> None:
        if not self.active:
            return
        self._seen += 1
        if self._open is None:
            return
        j0, t0, n = self._open
        self._open = (j0, t0, n + 1)
        last = self.steps is not None and self._seen - self.skip >= self.steps
        if last or time.perf_counter() - t0 >= self.config.window_s:
            self._close()

    def _close(self) -> None:
        j0, t0, n = self._open
        self.device.mark_step()
        self.device.synchronize()
        j1, t1 = self.counter.read_j(), time.perf_counter()
        self._open = None
        joules = counter_delta(j0, j1, self.counter.wrap_j)
        w = Window(n, t1 - t0, joules)
        if joules is None:
            w.flags.append("counter_went_backwards")
        if w.seconds < self.config.window_s:
            w.flags.append("short")
        if self.counter.update_period_s and w.seconds < self.counter.update_period_s:
            w.flags.append("below_update_period")
        self.windows.append(w)

    def result(self) -> dict:
        """``measurements.energy`` of the phase (closes a window still open)."""
        if self._open is not None:
            self._close()
        if not self.active:
            return {"status": "unsupported", "reason": self.reason, "label": LABEL}
        return summarize(self.windows, self.counter.describe(), self.config)


def _stats(values: list[float], unit: str) -> dict:
    s = sorted(values)
    q = statistics.quantiles(s, n=10, method="inclusive") if len(s) > 1 else [s[0]] * 9
    return {
        "unit": unit,
        "count": len(s),
        "median": statistics.median(s),
        "p10": q[0],
        "p90": q[-1],
        "min": s[0],
        "max": s[-1],
        "stdev": statistics.stdev(s) if len(s) > 1 else 0.0,
    }


def summarize(windows: list[Window], counter: dict, config: Settings) -> dict:
    """J per step and average W over ``windows`` (the full ones; every one, flagged, when none is full).

    Returns:
        ``{"status": "ok", "per_step" (J), "power_w" (W), "step_ms_metered" (window time / steps, ms: the step time
        while metered, beside the clock's own), "windows" [...], "windows_used", "short_windows",
        "below_update_period", "reliable", "staleness_bound" (update period / median window: the largest relative
        error of one window from a counter read up to one update late), counter fields, settings, label,
        not_counted}``; ``unsupported`` when no window holds a usable reading.
    """
    valid = [w for w in windows if w.joules is not None and w.steps > 0]
    if not valid:
        return {
            "status": "unsupported",
            "label": LABEL,
            "windows": [asdict(w) for w in windows],
            "reason": "no window with a usable counter reading (no metered step, or the counter went backwards)",
        }
    full = [w for w in valid if "short" not in w.flags]
    used = full or valid
    median_s = statistics.median(w.seconds for w in used)
    period = counter.get("update_period_s")
    out = {
        "status": "ok",
        "label": LABEL,
        **counter,
        "per_step": _stats([w.joules / w.steps for w in used], "J"),
        "power_w": _stats([w.joules / w.seconds for w in used], "W"),
        "step_ms_metered": _stats([w.seconds / w.steps * 1e3 for w in used], "ms"),
        "steps_metered": sum(w.steps for w in used),
        "windows_used": len(used),
        "short_windows": sum("short" in w.flags for w in valid),
        "below_update_period": sum("below_update_period" in w.flags for w in used),
        "staleness_bound": period / median_s if period and median_s > 0 else None,
        "reliable": bool(full)
        and len(full) >= config.min_windows
        and not any("below_update_period" in w.flags for w in used),
        "window_s": config.window_s,
        "min_windows": config.min_windows,
        "windows": [asdict(w) for w in windows],
        "not_counted": NOT_COUNTED,
    }
    if not full:
        out["note"] = f"every window shorter than window_s={config.window_s} s (the phase is too short)"
    return out


# --------------------------------------------------------------------------- ranks and derived numbers
def merge_ranks(per_rank: list[dict | None]) -> dict:
    """The job's energy from each rank's phase result: J per step and W summed over the ranks' devices (medians;
    a counter several ranks read, e.g. one host's RAPL, counted once); ``unsupported``/``off`` if any rank is."""
    per_rank = [r or {"status": "unsupported", "reason": "rank recorded no energy"} for r in per_rank]
    bad = next((r for r in per_rank if r.get("status") != "ok"), None)
    if bad is not None:
        return {"status": bad.get("status", "unsupported"), "reason": bad.get("reason"), "label": LABEL}
    if len(per_rank) == 1:
        return per_rank[0]
    distinct = {}
    for r in per_rank:
        distinct.setdefault(r.get("counter") or id(r), r)
    rs = list(distinct.values())
    first = rs[0]
    keep = (
        "source",
        "api",
        "resolution_j",
        "update_period_s",
        "wrap_j",
        "covers",
        "window_s",
        "min_windows",
        "not_counted",
    )
    return {
        "status": "ok",
        "label": LABEL,
        **{k: first.get(k) for k in keep},
        "per_step": {
            "unit": "J",
            "median": sum(r["per_step"]["median"] for r in rs),
            "p10": sum(r["per_step"]["p10"] for r in rs),
            "p90": sum(r["per_step"]["p90"] for r in rs),
            "method": "sum over devices of each rank's median (p10, p90 likewise)",
        },
        "power_w": {"unit": "W", "median": sum(r["power_w"]["median"] for r in rs)},
        "devices_counted": len(rs),
        "ranks": len(per_rank),
        "reliable": all(r.get("reliable") for r in rs),
        "staleness_bound": max((r.get("staleness_bound") or 0.0) for r in rs) or None,
        "per_rank": per_rank,
    }


def per_unit(energy: dict | None, units_per_step: float, unit: str, scale: float = 1.0) -> dict | None:
    """Energy per work unit from a phase result: ``scale`` x J/step / ``units_per_step`` (e.g. J per image, J per
    1k tokens with ``scale=1000``). None where the phase has no ``ok`` energy."""
    if not energy or energy.get("status") != "ok" or not units_per_step:
        return None
    j = energy["per_step"]["median"]
    return {
        "value": j * scale / units_per_step,
        "unit": unit,
        "method": f"median J/step x {scale:g} / {units_per_step:g} per step",
    }


def per_watt(rate: float | None, energy: dict | None) -> float | None:
    """``rate`` (items/s) divided by the median power (W): items/s/W, i.e. items per J. None without both."""
    if rate is None or not energy or energy.get("status") != "ok":
        return None
    w = energy["power_w"]["median"]
    return rate / w if w and not math.isclose(w, 0.0) else None


def report(
    phases: dict[str, dict | None],
    main: str,
    per_units: dict | None = None,
    per_watts: dict | None = None,
    step_ms: float | None = None,
) -> dict:
    """``measurements.energy`` of an experiment: every metered phase's result under ``phases``; the headline numbers
    of the ``main`` phase (``j_per_step``, ``power_w``, ``source``, ``reliable``); ``per_unit``: energy per work unit
    (``{name: (phase, units_per_step, unit, scale, label)}``, e.g. J per image, J per 1k tokens; ``label``
    ``measured`` or ``projection``); ``per_watt``: throughput per watt (``{name: (rate, phase, unit)}``, rate in
    items/s over the phase's median W); ``step_ms``: the main phase's step time by its clock (median, ms), which
    the energy tables show beside it. ``status`` is the main phase's (``unsupported``/``off`` with its reason)."""
    phases = {k: v for k, v in phases.items() if v is not None}
    e = phases.get(main) or {"status": "unsupported", "reason": f"phase {main} not metered"}
    out = {"status": e["status"], "label": LABEL, "main_phase": main, "step_ms": step_ms}
    if e["status"] != "ok":
        out["reason"] = e.get("reason")
    else:
        out.update(
            {
                "source": e.get("source"),
                "reliable": e.get("reliable"),
                "j_per_step": e["per_step"]["median"],
                "power_w": e["power_w"]["median"],
                "per_unit": {},
                "per_watt": {},
            }
        )
        for name, (phase, units, unit, scale, label) in (per_units or {}).items():
            value = per_unit(phases.get(phase), units, unit, scale)
            if value is not None:
                out["per_unit"][name] = {**value, "label": label, "phase": phase}
        for name, (rate, phase, unit) in (per_watts or {}).items():
            value = per_watt(rate, phases.get(phase))
            if value is not None:
                out["per_watt"][name] = {"value": value, "unit": unit, "phase": phase}
    out["phases"] = phases
    return out
