"""Measurement: the step clock of every timed phase (:class:`StepClock`), :func:`time_steps`, :func:`merge_ranks` and
the :class:`Timing` summary.

Timing follows the usual rules for asynchronous devices: untimed warm-up steps first; then each
step is timed with CUDA events on CUDA, or with a host clock read after a device synchronize
elsewhere; the median and spread (p10/p90, stdev, min/max) of all repeats are reported together
with the raw samples. Kernel traces and kernel classes are in :mod:`accelbench.measure.kernels`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from tqdm.auto import tqdm

from accelbench.backends.device import Device
from accelbench.measure import energy as _energy
from accelbench.terminal_fd import terminal


@dataclass
class Timing:
    """Summary of repeated timings. All times in ``unit`` (milliseconds)."""

    unit: str
    count: int
    warmup: int
    median: float
    mean: float
    stdev: float
    p10: float
    p90: float
    min: float
    max: float
    method: str
    samples: list[float] = field(default_factory=list)
    energy: dict | None = field(default=None, repr=False)  # measurements.energy of the phase (not in to_dict)

    @classmethod
    def from_samples(cls, samples: list[float], warmup: int, method: str, unit: str = "ms") -> Timing:
        """Summarise ``samples`` (already in ``unit``). Raises ValueError on an empty list."""
        if not samples:
            raise ValueError("no timing samples")
        s = sorted(samples)
        q = statistics.quantiles(s, n=10, method="inclusive") if len(s) > 1 else [s[0]] * 9
        return cls(
            unit=unit,
            count=len(s),
            warmup=warmup,
            median=statistics.median(s),
            mean=statistics.fmean(s),
            stdev=statistics.stdev(s) if len(s) > 1 else 0.0,
            p10=q[0],
            p90=q[-1],
            min=s[0],
            max=s[-1],
            method=method,
            samples=list(samples),
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("energy")
        return d


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
    :meth:`energy` gives ``measurements.energy``.

    Usage::

        clock = StepClock(device)
        for batch in batches:
            clock.start(); step(batch); clock.stop()
        timing = clock.timing(warmup=0)
        seconds = clock.seconds()           # the last step, in s
    """

    def __init__(self, device: Device, wall: bool = False, energy_steps: int | None = None, energy_skip: int = 0):
        self.device = device
        self.events = device.ops.uses_device_events and not wall
        self.method = "cuda_events" if self.events else "synchronize+perf_counter"
        self._pairs: list = []
        self._samples: list[float] = []
        self._t0: float | None = None
        on = energy_steps is not None and _energy.settings().enabled
        self.meter = _energy.EnergyMeter(device, energy_steps, energy_skip) if on else None
        self._energy_asked = energy_steps is not None

    def start(self) -> None:
        if self.meter is not None:
            self.meter.before_step()
        if self.events:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._pairs.append([ev, None])
        else:
            self.device.synchronize()
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self.events:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._pairs[-1][1] = ev
        else:
            self.device.mark_step()
            self.device.synchronize()
            self._samples.append((time.perf_counter() - self._t0) * 1e3)
        if self.meter is not None:
            self.meter.after_step()

    def samples(self) -> list[float]:
        """The steps timed so far, in ms (CUDA: waits for the device once)."""
        if self.events:
            import torch

            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self._pairs if b is not None]
        return list(self._samples)

    def energy(self) -> dict | None:
        """``measurements.energy`` of the metered steps (:meth:`accelbench.measure.energy.EnergyMeter.result`);
        ``off`` when ``energy.enabled`` is false; None when this clock was not asked to meter (no ``energy_steps``)."""
        if self.meter is not None:
            return self.meter.result()
        return _energy.off() if self._energy_asked else None

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
        return t


PROGRESS_S = 30.0  # seconds between the progress lines a long loop prints on the run's terminal


def progress(bar, total: int, what: str, every_s: float = PROGRESS_S):
    """The items of ``bar`` (a tqdm bar: the job's log), and every ``every_s`` seconds one line on the run's terminal
    (:func:`accelbench.terminal_fd.terminal`): ``what``, steps done of ``total``, time elapsed and about how long is
    left."""
    start = last = time.monotonic()
    for done, item in enumerate(bar, 1):
        yield item
        now = time.monotonic()
        if now - last >= every_s and done < total:
            last = now
            left = (now - start) / done * (total - done)
            terminal(f"accelbench: {what}: {done}/{total} done in {now - start:.0f} s, about {left:.0f} s left")


def time_steps(
    step: Callable[[], object], device: Device, warmup: int, repeat: int, desc: str = "", energy: bool = True
) -> Timing:
    """Run ``step`` ``warmup`` times untimed, then ``repeat`` times timed with a :class:`StepClock` (``energy``:
    metering the timed steps too, see :class:`StepClock`).

    Returns:
        :class:`Timing` in milliseconds; its ``energy`` holds ``measurements.energy`` of the timed steps.
    """
    for _ in progress(
        tqdm(range(warmup), desc=f"{desc} warm-up", leave=False, disable=warmup == 0), warmup, f"{desc} warm-up"
    ):
        step()
    device.synchronize()
    clock = StepClock(device, energy_steps=repeat if energy else None)
    for _ in progress(tqdm(range(repeat), desc=f"{desc} timed", leave=False), repeat, f"{desc} timed"):
        clock.start()
        step()
        clock.stop()
    return clock.timing(warmup)


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
