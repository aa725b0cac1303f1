"""The summary of a timed phase's samples (:class:`Timing`) and the progress lines of a long loop: the bottom of the
measurement floor, imported by :mod:`accelbench.measure.phase` (the trackers and the one timed phase) and
:mod:`accelbench.measure.timing` (the step clock, ``time_steps``, ``merge_ranks``), which re-exports both."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

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
    clocks: dict | None = field(default=None, repr=False)  # measurements.clocks of the phase (not in to_dict)

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

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative spread of the samples (0 for a median of 0)."""
        return (self.p90 - self.p10) / self.median if self.median else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("energy")
        d.pop("clocks")
        return d


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
