"""Runtime device operations for one backend (cpu, cuda, hpu), used by :mod:`accelbench.measure`.

Gaudi support imports ``habana_frameworks`` only when the backend is ``hpu``; lazy mode is the
default there (``PT_HPU_LAZY_MODE=1``), so :meth:`Device.mark_step` must be called where a graph
should be cut (after backward, after the optimizer step).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch


@dataclass
class Device:
    """A torch device plus the backend-specific calls measurement needs."""

    backend: str  # cpu | cuda | hpu
    index: int = 0

    def __post_init__(self) -> None:
        if self.backend == "hpu":
            os.environ.setdefault("PT_HPU_LAZY_MODE", "1")
            import habana_frameworks.torch.core as htcore  # noqa: F401  (gated: hpu only)

            self._htcore = htcore

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cpu") if self.backend == "cpu" else torch.device(self.backend, self.index)

    def synchronize(self) -> None:
        """Wait for all queued device work (no-op on CPU)."""
        if self.backend == "cuda":
            torch.cuda.synchronize(self.index)
        elif self.backend == "hpu":
            torch.hpu.synchronize()

    def mark_step(self) -> None:
        """Cut the lazy-mode graph on Gaudi; no-op elsewhere."""
        if self.backend == "hpu":
            self._htcore.mark_step()

    def reset_peak_memory(self) -> None:
        if self.backend == "cuda":
            torch.cuda.reset_peak_memory_stats(self.index)
        elif self.backend == "hpu":
            torch.hpu.reset_peak_memory_stats()

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated on the device since the last reset; None on CPU (not tracked)."""
        if self.backend == "cuda":
            return int(torch.cuda.max_memory_allocated(self.index))
        if self.backend == "hpu":
            return int(torch.hpu.max_memory_allocated())
        return None

    def empty_cache(self) -> None:
        if self.backend == "cuda":
            torch.cuda.empty_cache()

    def profiler_activities(self) -> list:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.backend == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        elif self.backend == "hpu":
            acts.append(torch.profiler.ProfilerActivity.HPU)
        return acts

    def autocast(self, dtype: torch.dtype | None):
        """``torch.autocast`` for this backend, or a null context when ``dtype`` is None."""
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.backend, dtype=dtype)

    @staticmethod
    def out_of_memory_errors() -> tuple[type[BaseException], ...]:
        return (torch.OutOfMemoryError,)
