"""Runtime device operations for one backend (cpu, cuda, hpu), used by :mod:`accelbench.measure.timing` and
:mod:`accelbench.measure.kernels`.

:class:`Device` is a device index plus its backend object (:mod:`accelbench.backends`), which does the work. Gaudi
imports ``habana_frameworks`` only when the backend is ``hpu``; lazy mode is the default there
(``PT_HPU_LAZY_MODE=1``), so :meth:`Device.mark_step` must be called where a graph should be cut (after backward,
after the optimizer step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accelbench import backends
from accelbench.backends import Backend

if TYPE_CHECKING:
    import torch


@dataclass
class Device:
    """A torch device plus the backend-specific calls measurement needs (delegated to :attr:`ops`)."""

    backend: str  # the backend's name: cpu | cuda | hpu
    index: int = 0
    ops: Backend = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.ops = backends.get(self.backend)
        self.ops.prepare()

    @property
    def torch_device(self) -> torch.device:
        return self.ops.torch_device(self.index)

    def set_device(self) -> None:
        """Make this device the process's current one (cuda: ``torch.cuda.set_device``; no-op elsewhere)."""
        self.ops.set_device(self.index)

    def synchronize(self) -> None:
        """Wait for all queued device work (no-op on CPU)."""
        self.ops.synchronize(self.index)

    def mark_step(self) -> None:
        """Cut the lazy-mode graph on Gaudi; no-op elsewhere."""
        self.ops.mark_step()

    def reset_peak_memory(self) -> None:
        self.ops.reset_peak_memory(self.index)

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated on the device since the last reset; None on CPU (not tracked)."""
        return self.ops.peak_memory_bytes(self.index)

    def empty_cache(self) -> None:
        self.ops.empty_cache(self.index)

    def profiler_activities(self) -> list:
        return self.ops.profiler_activities()

    def autocast(self, dtype: torch.dtype | None):
        """``torch.autocast`` for this backend, or a null context when ``dtype`` is None."""
        return self.ops.autocast(dtype)

    @staticmethod
    def out_of_memory_errors() -> tuple[type[BaseException], ...]:
        # static (core/harness.py calls Device.out_of_memory_errors()); every backend's OOM is torch.OutOfMemoryError
        import torch

        return (torch.OutOfMemoryError,)
