"""Study B LoRA: the per-optimizer-step timer of a Trainer run (a ``TrainerCallback``)."""

from __future__ import annotations

import time


def make_step_timer(device, world: int):
    """A ``TrainerCallback`` timing each optimizer step (all micro-batches, clipping, optimizer, scheduler):
    CUDA events on CUDA (read after training), else ``synchronize`` + ``time.perf_counter``. Times in ms."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.samples_ms: list[float] = []
            self.trainer = None  # set after the Trainer is built
            self.wrapped_as: str | None = None
            self.distributed: dict | None = None
            self._events: list = []
            self._t0 = None

        def on_step_begin(self, args, state, control, **kw):
            if device.ops.uses_device_events:
                import torch

                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self._events.append([ev, None])
            else:
                device.synchronize()
                self._t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if self.wrapped_as is None and self.trainer is not None:  # Trainer unwraps the model after training
                import torch.distributed as dist

                t = self.trainer
                self.wrapped_as = type(t.model_wrapped).__name__
                w = t.model_wrapped
                self.distributed = {"distributed_type": str(t.accelerator.distributed_type),
                                    "ddp": {"static_graph": getattr(w, "static_graph", None),
                                            "gradient_as_bucket_view": getattr(w, "gradient_as_bucket_view", None),
                                            "bucket_cap_mb": getattr(w, "bucket_bytes_cap", 0) / 2**20 or None}
                                    if type(w).__name__ == "DistributedDataParallel" else None,
                                    "args_world_size": t.args.world_size,
                                    "process_group": dist.get_backend() if dist.is_initialized() else None,
                                    "process_group_size": dist.get_world_size() if dist.is_initialized() else 1}
            if device.ops.uses_device_events:
                import torch

                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self._events[-1][1] = ev
            else:
                device.mark_step()
                device.synchronize()
                self.samples_ms.append((time.perf_counter() - self._t0) * 1e3)

        def finish(self) -> tuple[list[float], str]:
            if device.ops.uses_device_events:
                import torch

                torch.cuda.synchronize()
                return [a.elapsed_time(b) for a, b in self._events if b is not None], "cuda_events"
            return self.samples_ms, "synchronize+perf_counter"

    return StepTimer()

