"""Toy experiment job: one float32 matmul ``n x n @ n x n`` on the system's device, timed by the measurement core.

``warmup`` untimed matmuls, then ``repeat`` timed ones (:func:`accelbench.measure.timing.time_steps`: synchronize and
host clock on CPU/HPU, CUDA events on CUDA; the device's energy counter read around windows of them where
config ``energy.enabled``); the result holds the timing (median, p10/p90, samples, in ms), the FLOPs of one matmul
(``2 n^3``), the rate at the median time (GFLOP/s) and the energy (:func:`accelbench.measure.energy.report`).
"""

from __future__ import annotations

from dataclasses import dataclass

from accelbench.core.outcome import Outcome

EXPERIMENT = "toy_matmul"


@dataclass(frozen=True)
class Settings:
    """One job: matrices of ``size`` x ``size`` float32; ``warmup`` untimed and ``repeat`` timed matmuls."""

    size: int
    warmup: int
    repeat: int

    @classmethod
    def from_spec(cls, spec: dict, system) -> Settings:
        """From the rule's spec (:func:`accelbench.experiments.toy.rules.spec`): ``{size, warmup, repeat, ...}``."""
        return cls(int(spec["size"]), int(spec["warmup"]), int(spec["repeat"]))


def run(s: Settings, ctx) -> Outcome:
    """Time ``a @ b`` for random float32 ``a``, ``b`` of ``s.size`` x ``s.size`` on the system's device.

    Returns:
        ``ok`` with measurements ``{"matmul": Timing (ms), "flop": 2 n^3, "gflop_per_s": at the median time,
        "dtype": "float32", "energy": J per matmul and per GFLOP, or why not measured}``.
    """
    import torch

    from accelbench.backends.device import Device
    from accelbench.measure import energy
    from accelbench.measure.timing import time_steps

    device = Device(ctx.system.backend)
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s.size, s.size, generator=generator).to(device.torch_device) for _ in range(2))
    timing = time_steps(lambda: a @ b, device, s.warmup, s.repeat, desc=f"matmul n={s.size}")
    flop = 2 * s.size**3
    return Outcome(
        "ok",
        {
            "matmul": timing.to_dict(),
            "flop": flop,
            "gflop_per_s": flop / (timing.median / 1e3) / 1e9,
            "dtype": "float32",
            "energy": energy.report(
                {"matmul": timing.energy},
                "matmul",
                per_units={"j_per_gflop": ("matmul", flop / 1e9, "J/GFLOP", 1.0, "measured")},
                step_ms=timing.median,
            ),
        },
    )
