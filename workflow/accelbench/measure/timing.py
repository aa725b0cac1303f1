"""Measurement: the step clock of every timed phase (:class:`StepClock`), :func:`time_steps`, :func:`merge_ranks` and
the :class:`Timing` summary.

Timing follows the usual rules for asynchronous devices: untimed warm-up steps first; then each
step is timed with CUDA events on CUDA, or with a host clock read after a device synchronize
elsewhere; the median and spread (p10/p90, stdev, min/max) of all repeats are reported together
with the raw samples. Kernel traces and kernel classes are in :mod:`accelbench.measure.kernels`.
"""

from __future__ import annotations

from collections.abc import Callable

from accelbench.backends.device import Device
from accelbench.measure.samples import PROGRESS_S, Timing, progress  # noqa: F401 (where callers find them)


class StepClock:
    """The one clock of every timed phase: training steps, LoRA's optimizer steps (a Trainer callback built on it),
    perplexity and accuracy batches, the all-reduce calls of the network test.

    CUDA: a pair of CUDA events around each step, read at :meth:`timing` (device time; no host sync inside the
    loop, so the host may queue the next step as in a plain training loop). CPU/HPU: ``synchronize`` (HPU: after
    ``mark_step``, which cuts the lazy graph) then ``time.perf_counter`` around each step. ``wall=True`` takes the
    second way on every backend: for whole phases with much host work (a perplexity pass, an lm-eval task), whose
    time is wall time. Times in ms.

    Energy (:mod:`accelbench.measure.energy`): with ``energy_steps`` (the phase's steps to meter, after
    ``energy_skip`` untimed-for-energy steps) and the process's ``energy.enabled``, an
    :class:`~accelbench.measure.energy.EnergyMeter` reads the device's energy counter around windows of >= ``window_s``
    of these steps (one synchronize and one read per window boundary, between steps; none inside a window);
    :meth:`energy` gives ``measurements.energy``. The same steps' SM clock, temperature and clock-event reasons
    (:mod:`accelbench.measure.clocks`, sampled without synchronizing): :meth:`clocks`.

    Usage::

        clock = StepClock(device)
        for batch in batches:
            clock.start(); step(batch); clock.stop()
        timing = clock.timing(warmup=0)
        seconds = clock.seconds()           # the last step, in s
    """

    def __init__(self, device: Device, wall: bool = False, energy_steps: int | None = None, energy_skip: int = 0):
        from accelbench.measure.phase import Clocks, Energy, Latency  # the trackers of the one timed phase

        self.device = device
        self.latency = Latency(device, wall=wall)
        self.events, self.method = self.latency.events, self.latency.method
        self._energy = Energy(device, energy_steps, skip=energy_skip) if energy_steps is not None else None
        self.meter = self._energy.meter if self._energy is not None else None
        self._clocks = Clocks(device, energy_steps, skip=energy_skip) if energy_steps is not None else None

    def start(self) -> None:
        if self._energy is not None:
            self._energy.step_begin()
        self.latency.step_begin()

    def stop(self) -> None:
        self.latency.step_end()
        if self._clocks is not None:
            self._clocks.step_end()
        if self._energy is not None:
            self._energy.step_end()

    def samples(self) -> list[float]:
        """The steps timed so far, in ms (CUDA: waits for the device once)."""
        return self.latency.samples()

    def energy(self) -> dict | None:
        """``measurements.energy`` of the metered steps (:meth:`accelbench.measure.energy.EnergyMeter.result`);
        ``off`` when ``energy.enabled`` is false; None when this clock was not asked to meter (no ``energy_steps``)."""
        return self._energy.stop()["energy"] if self._energy is not None else None

    def clocks(self) -> dict | None:
        """``measurements.clocks`` of the metered steps (:meth:`accelbench.measure.clocks.ClockSampler.result`);
        None when this clock was not asked to meter (no ``energy_steps``)."""
        return self._clocks.stop()["clocks"] if self._clocks is not None else None

    def seconds(self) -> float:
        """The last timed step, in seconds."""
        return self.samples()[-1] / 1e3

    def timing(self, warmup: int = 0) -> Timing:
        """:class:`Timing` of the steps timed so far (``warmup``: untimed steps before them, recorded).

        Raises:
            ValueError: no step was timed.
        """
        t = Timing.from_samples(self.samples(), warmup=warmup, method=self.method)
        t.energy = self.energy()
        t.clocks = self.clocks()
        return t


def time_steps(
    step: Callable[[], object], device: Device, warmup: int, repeat: int, desc: str = "", energy: bool = True
) -> Timing:
    """Run ``step`` ``warmup`` times untimed, then ``repeat`` times timed: the one timed phase
    (:func:`accelbench.measure.phase.train_phase`: per-step latency and, with ``energy``, the energy meter).

    Returns:
        :class:`Timing` in milliseconds; its ``energy`` holds ``measurements.energy`` of the timed steps.
    """
    from accelbench.measure.phase import train_phase

    return train_phase(step, device, warmup, repeat, energy=energy, desc=desc).timing


def merge_ranks(samples_per_rank: list[list[float]], warmup: int, method: str) -> Timing:
    """Step time of a synchronous multi-rank job, stated once for every experiment: the slowest rank sets the pace
    of each step, so step ``i`` takes ``max`` over ranks of their step ``i`` (SR3 DDP, LoRA DDP/FSDP/ZeRO-3,
    net_smoke's all-reduce calls).

    Args:
        samples_per_rank: each rank's per-step times (same unit, same step count; extra steps of a longer list are
            dropped).
        warmup: untimed steps before them (recorded).
        method: how each rank timed its steps (``Timing.method``); ``", max over N ranks"`` is appended.

    Raises:
        ValueError: no rank or no step.
    """
    if not samples_per_rank or not all(samples_per_rank):
        raise ValueError("no rank timings to merge")
    steps = min(len(s) for s in samples_per_rank)
    merged = [max(s[i] for s in samples_per_rank) for i in range(steps)]
    return Timing.from_samples(merged, warmup=warmup, method=f"{method}, max over {len(samples_per_rank)} ranks")
