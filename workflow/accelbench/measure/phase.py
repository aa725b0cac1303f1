"""One timed phase: warm-up (the first, compiling iteration timed on its own), then the timed loop with composable
trackers entered together around it (:func:`timed_phase`).

Each tracker is a small object with one protocol (:class:`Tracker`): ``start()`` before the loop, ``step_begin()`` /
``step_end()`` around each timed step, ``stop() -> dict`` after it (its numbers, under its own keys). They are entered
like nested context managers: started in the order given, each step begun in that order and ended in the reverse one,
stopped in the reverse one (the outermost tracker sees the inner ones' own work: the host-synchronisation count
includes the latency tracker's read of its events, as a ``with`` around the loop would). A tracker whose
``spans_warmup`` is true is started before the warm-up instead (peak memory, the whole phase's wall time).

* :class:`Latency`: each step's time, ms: device events where the backend times with them
  (``device.ops.uses_device_events``: CUDA events, recorded around the step and read once after the loop, so the
  host may queue the next step as in a plain training loop), else ``synchronize`` (after ``mark_step``: the HPU lazy
  graph) and ``time.perf_counter`` around the step; ``stop()`` gives ``{"latency": Timing}`` (median, p10, p90,
  stdev, min, max and the raw samples; :attr:`~accelbench.measure.timing.Timing.spread`).
* :class:`Energy`: the device's energy counter around windows of timed steps (:class:`accelbench.measure.energy.
  EnergyMeter`); ``{"energy": measurements.energy of the phase}`` (``off`` when ``energy.enabled`` is false).
* :class:`Clocks`: the device's SM clock, temperature and clock-event reasons sampled between timed steps, at most
  once per :data:`accelbench.measure.clocks.SAMPLE_INTERVAL_S` of host time and without synchronizing
  (:class:`accelbench.measure.clocks.ClockSampler`); ``{"clocks": the phase's clock record}`` (``unsupported`` with
  the reason where the backend reports no clocks).
* :class:`PeakMemory`: the device's peak allocated memory, bytes, from ``start()`` (warm-up included);
  ``{"peak_memory_bytes": int | None}``.
* :class:`HostSyncs`: host synchronisations of the timed loop where the backend reports them (CUDA's sync debug
  mode); ``{"host_syncs": {count, where, method}}`` (``{}`` elsewhere).
* :class:`WallClock`: the phase's wall time, s, warm-up included; ``{"wall_s": float}``.

Why not ``torch.utils.benchmark.Timer``: it runs a statement it owns a fixed number of times and summarises blocks of
runs, with no hook for a step that must run exactly once per iteration with side effects (an optimizer update,
``cudagraph_mark_step_begin`` of a CUDA-graph step, a DataLoader's next batch), no energy window or sync counter in
the same loop, and no record of the first (compiling) iteration; it synchronizes around each block rather than
timing each step with device events.

Usage::

    result = timed_phase(step, device, warmup=3, steps=20, trackers=(Latency(device), Energy(device, 20)))
    result.timing.median, result.first_iteration_s, result.values["energy"]
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tqdm.auto import tqdm

from accelbench.measure import clocks as _clocks
from accelbench.measure import energy as _energy
from accelbench.measure.samples import Timing, progress


class Tracker(Protocol):
    """What :func:`timed_phase` calls on each tracker (see the module docstring)."""

    spans_warmup: bool

    def start(self) -> None: ...
    def step_begin(self) -> None: ...
    def step_end(self) -> None: ...
    def stop(self) -> dict: ...


class _Tracker:
    """Defaults of the protocol: nothing per step, timed loop only."""

    spans_warmup = False

    def start(self) -> None:
        pass

    def step_begin(self) -> None:
        pass

    def step_end(self) -> None:
        pass


class Latency(_Tracker):
    """Per-step time, ms (see the module docstring). ``wall=True`` takes synchronize + ``perf_counter`` on every
    backend; ``make_event``: a factory of device events (default ``torch.cuda.Event(enable_timing=True)``; tests: a
    fake whose ``elapsed_time`` is known). ``warmup``: the untimed steps before the loop, recorded in the Timing."""

    def __init__(self, device, wall: bool = False, make_event: Callable | None = None, warmup: int = 0):
        self.device, self.warmup = device, warmup
        self.events = bool(device.ops.uses_device_events) and not wall
        self.method = "cuda_events" if self.events else "synchronize+perf_counter"
        self.make_event = make_event
        self._pairs: list = []
        self._samples: list[float] = []
        self._t0 = 0.0

    def _event(self):
        if self.make_event is not None:
            return self.make_event()
        import torch

        return torch.cuda.Event(enable_timing=True)

    def step_begin(self) -> None:
        if self.events:
            ev = self._event()
            ev.record()
            self._pairs.append([ev, None])
        else:
            self.device.synchronize()
            self._t0 = time.perf_counter()

    def step_end(self) -> None:
        if self.events:
            ev = self._event()
            ev.record()
            self._pairs[-1][1] = ev
        else:
            self.device.mark_step()
            self.device.synchronize()
            self._samples.append((time.perf_counter() - self._t0) * 1e3)

    def samples(self) -> list[float]:
        """The steps timed so far, ms (device events: waits for the device once)."""
        if self.events:
            self.device.synchronize()
            return [a.elapsed_time(b) for a, b in self._pairs if b is not None]
        return list(self._samples)

    def stop(self) -> dict:
        """``{"latency": Timing}``. Raises ValueError where no step was timed."""
        return {"latency": Timing.from_samples(self.samples(), warmup=self.warmup, method=self.method)}


class Energy(_Tracker):
    """The device's energy over the timed steps (:class:`accelbench.measure.energy.EnergyMeter`, ``steps``: the
    phase's steps to meter after ``skip`` unmetered ones; ``counter``/``config``: as the meter's, for tests). Off
    (``energy.enabled`` false, or ``config.enabled`` false): ``{"energy": {"status": "off", ...}}`` and no counter
    opened."""

    def __init__(self, device, steps: int | None, skip: int = 0, counter=None, config: _energy.Settings | None = None):
        on = (config or _energy.settings()).enabled
        self.meter = _energy.EnergyMeter(device, steps, skip, counter=counter, config=config) if on else None

    def step_begin(self) -> None:
        if self.meter is not None:
            self.meter.before_step()

    def step_end(self) -> None:
        if self.meter is not None:
            self.meter.after_step()

    def stop(self) -> dict:
        return {"energy": self.meter.result() if self.meter is not None else _energy.off()}


class Clocks(_Tracker):
    """The device's clocks over the timed steps (:class:`accelbench.measure.clocks.ClockSampler`; ``steps``/``skip``
    as :class:`Energy`'s; ``reader``/``interval_s``: the sampler's, for tests). Samples after a step ends, never
    synchronizing; entered inside :class:`Energy` and outside :class:`Latency` (:func:`train_phase`), so a sample
    falls before an energy window's closing synchronize and outside a step's timing window."""

    def __init__(self, device, steps: int | None = None, skip: int = 0, reader=None, interval_s: float | None = None):
        self.sampler = _clocks.ClockSampler(device, steps, skip, reader=reader, interval_s=interval_s)

    def step_end(self) -> None:
        self.sampler.after_step()

    def stop(self) -> dict:
        return {"clocks": self.sampler.result()}


class PeakMemory(_Tracker):
    """Peak device memory, bytes, from the phase's start (warm-up included: ``spans_warmup``); None where the
    backend has no counter."""

    spans_warmup = True

    def __init__(self, device):
        self.device = device

    def start(self) -> None:
        self.device.reset_peak_memory()

    def stop(self) -> dict:
        return {"peak_memory_bytes": self.device.peak_memory_bytes()}


class WallClock(_Tracker):
    """The phase's wall time, s, warm-up included (``spans_warmup``): synchronize + ``perf_counter`` at start,
    ``mark_step`` + synchronize + ``perf_counter`` at stop (after every inner tracker's stop)."""

    spans_warmup = True

    def __init__(self, device):
        self.device = device
        self._t0 = 0.0

    def start(self) -> None:
        self.device.synchronize()
        self._t0 = time.perf_counter()

    def stop(self) -> dict:
        self.device.mark_step()
        self.device.synchronize()
        return {"wall_s": time.perf_counter() - self._t0}


class Untimed(_Tracker):
    """Work around each timed step but outside its timing window (entered outermost): ``before()`` at step begin,
    ``after()`` at step end (e.g. the Trainer's batch fetch and logging reads that the product's timer leaves out).
    ``{}`` at stop."""

    def __init__(self, before: Callable[[], object] | None = None, after: Callable[[], object] | None = None):
        self.before, self.after = before or (lambda: None), after or (lambda: None)

    def step_begin(self) -> None:
        self.before()

    def step_end(self) -> None:
        self.after()

    def stop(self) -> dict:
        return {}


SYNC_METHOD = (
    "torch.cuda.set_sync_debug_mode('warn') over the code it wraps (the rule: the timed "
    "iterations, after the warm-up ones, which compile; the measurement's own reads of its "
    "events included); where: file:line -> count"
)


class HostSyncs(_Tracker):
    """Host synchronisations of the timed loop (and of the trackers inside it: their event reads, energy windows):
    CUDA's sync debug mode ``warn`` (each synchronising call warns; recorded, not shown) on a backend with the
    ``sync_debug_mode`` capability; elsewhere ``{"host_syncs": {}}`` (not counted). ``set_mode``: the runtime's
    switch (default ``torch.cuda.set_sync_debug_mode``; tests: a fake)."""

    def __init__(self, device, set_mode: Callable[[str], None] | None = None):
        self.on = bool(device.ops.sync_debug_mode)
        self.set_mode = set_mode
        self._log: list | None = None
        self._catch: contextlib.AbstractContextManager | None = None

    def _mode(self, mode: str) -> None:
        if self.set_mode is not None:
            return self.set_mode(mode)
        import torch

        torch.cuda.set_sync_debug_mode(mode)

    def start(self) -> None:
        if not self.on:
            return
        self._catch = warnings.catch_warnings(record=True)
        self._log = self._catch.__enter__()
        warnings.simplefilter("always")
        self._mode("warn")

    def stop(self) -> dict:
        if not self.on or self._catch is None:
            return {"host_syncs": {}}
        try:
            self._mode("default")
        finally:
            self._catch.__exit__(None, None, None)
        syncs = Counter(f"{w.filename}:{w.lineno}" for w in self._log if "synchronizing" in str(w.message))
        return {
            "host_syncs": {
                "count": sum(syncs.values()),
                "where": dict(syncs.most_common(5)),
                "method": SYNC_METHOD,
            }
        }


@dataclass
class PhaseResult:
    """What :func:`timed_phase` measured: ``timing`` (the :class:`Latency` tracker's :class:`Timing`, ms, its
    ``energy`` and ``clocks`` set from an :class:`Energy` and a :class:`Clocks` tracker's), ``first_iteration_s``
    (the first warm-up step alone, s, synchronize + host clock; None with no warm-up), ``warmup`` (untimed steps) and
    ``values`` (every tracker's ``stop()`` dict, merged)."""

    timing: Timing | None
    first_iteration_s: float | None
    warmup: int
    values: dict = field(default_factory=dict)


def _steps(n: int, desc: str, what: str):
    return progress(tqdm(range(n), desc=f"{desc} {what}", leave=False, disable=n == 0), n, f"{desc} {what}")


def _warm_up(step: Callable[[], object], device, warmup: int, desc: str) -> float | None:
    """Run ``step`` ``warmup`` times untimed; the first alone timed (s), as the cold start (compile, graphs)."""
    first = None
    for i in _steps(warmup, desc, "warm-up"):
        if i == 0:
            device.synchronize()
            t0 = time.perf_counter()
        step()
        if i == 0:
            device.mark_step()
            device.synchronize()
            first = time.perf_counter() - t0
    return first


def timed_phase(
    step: Callable[[], object],
    device,
    warmup: int,
    steps: int,
    trackers: Sequence[Tracker] = (),
    after_warmup: Callable[[], object] | None = None,
    desc: str = "",
) -> PhaseResult:
    """The one timed phase: ``warmup`` untimed calls of ``step`` (the first timed alone: ``first_iteration_s``),
    ``after_warmup()`` (e.g. a check that the warm-up compiled), then ``steps`` timed calls with ``trackers`` entered
    together (module docstring: order, ``spans_warmup``). ``device``: an :class:`accelbench.backends.device.Device`.
    The device is synchronized after the timed trackers start and before the first timed step (as the loop always
    did: counted by a :class:`HostSyncs` tracker).

    Returns:
        :class:`PhaseResult`.

    Raises:
        ValueError: ``steps`` < 1 with a :class:`Latency` tracker (no timing sample).
    """
    spanning = [t for t in trackers if t.spans_warmup]
    timed = [t for t in trackers if not t.spans_warmup]
    for t in spanning:
        t.start()
    first = _warm_up(step, device, warmup, desc)
    if after_warmup is not None:
        after_warmup()
    for t in timed:
        t.start()
    device.synchronize()
    for _ in _steps(steps, desc, "timed"):
        for t in timed:
            t.step_begin()
        step()
        for t in reversed(timed):
            t.step_end()
    values: dict = {}
    for t in reversed(timed):
        values.update(t.stop())
    for t in reversed(spanning):
        values.update(t.stop())
    timing = values.get("latency")
    if timing is not None:
        timing.warmup = warmup
        timing.energy = values.get("energy")
        timing.clocks = values.get("clocks")
    return PhaseResult(timing, first, warmup, values)


def train_phase(
    step: Callable[[], object],
    device,
    warmup: int,
    steps: int,
    *,
    energy: bool = True,
    extra: Sequence[Tracker] = (),
    after_warmup: Callable[[], object] | None = None,
    desc: str = "",
) -> PhaseResult:
    """:func:`timed_phase` with the trackers of a training step: :class:`Latency`, and with ``energy`` the device
    meters :class:`Clocks` and :class:`Energy` innermost (a bare loop, ``energy=False``, runs neither); ``extra``
    entered around them (e.g. :class:`HostSyncs`, :class:`PeakMemory`, :class:`WallClock`)."""
    inner = (Energy(device, steps), Clocks(device, steps)) if energy else ()
    trackers = (*extra, *inner, Latency(device))
    return timed_phase(step, device, warmup, steps, trackers, after_warmup=after_warmup, desc=desc)
