"""Study B LoRA: the per-optimizer-step timer of a Trainer run, a ``TrainerCallback`` built on the package's one step
clock (:class:`accelbench.measure.timing.StepClock`)."""

from __future__ import annotations

import time

from accelbench.measure.timing import StepClock


def make_step_timer(device, world: int):
    """A ``TrainerCallback`` timing each optimizer step (all micro-batches, clipping, optimizer, scheduler) with a
    :class:`~accelbench.measure.timing.StepClock`: CUDA events on CUDA (read after training), else ``mark_step`` +
    ``synchronize`` + ``time.perf_counter``. Times in ms. After the first step it also records which wrapper and
    distributed set-up Trainer used (``wrapped_as``, ``distributed``), and host clock readings at each step's start and
    end (the last one after a device synchronize) for optimum-habana's ``train_runtime``. After
    ``meter_energy(warmup, timed)`` the clock also meters the board energy of the timed steps
    (:mod:`accelbench.measure.energy`; ``clock.energy()``)."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.clock = StepClock(device)
            self.trainer = None  # set after the Trainer is built
            self.wrapped_as: str | None = None
            self.step_begin_s: list[float] = []  # host clock per step (train_runtime, series.train_runtime)
            self.step_end_s: list[float] = []
            self.distributed: dict | None = None

        def meter_energy(self, warmup_steps: int, timed_steps: int) -> None:
            """Meter the ``timed_steps`` after ``warmup_steps`` (call before training: a fresh clock)."""
            self.clock = StepClock(device, energy_steps=timed_steps, energy_skip=warmup_steps)

        def on_step_begin(self, args, state, control, **kw):
            self.step_begin_s.append(time.perf_counter())  # a host clock reading (no sync): train_runtime's start
            self.clock.start()

        def on_step_end(self, args, state, control, **kw):
            if self.wrapped_as is None and self.trainer is not None:  # Trainer unwraps the model after training
                import torch.distributed as dist

                t = self.trainer
                w = t.model_wrapped
                self.wrapped_as = type(w).__name__
                if hasattr(w, "_orig_mod"):  # torch.compile around the wrapper (Trainer compiles the DDP model)
                    w = w._orig_mod
                    self.wrapped_as += f"({type(w).__name__})"
                self.distributed = {
                    "distributed_type": str(t.accelerator.distributed_type),
                    "ddp": {
                        "static_graph": getattr(w, "static_graph", None),
                        "gradient_as_bucket_view": getattr(w, "gradient_as_bucket_view", None),
                        "bucket_cap_mb": getattr(w, "bucket_bytes_cap", 0) / 2**20 or None,
                    }
                    if type(w).__name__ == "DistributedDataParallel"
                    else None,
                    "args_world_size": t.args.world_size,
                    "process_group": dist.get_backend() if dist.is_initialized() else None,
                    "process_group_size": dist.get_world_size() if dist.is_initialized() else 1,
                }
            self.clock.stop()
            if state.global_step >= state.max_steps:  # train_runtime's end: the last step done on the device
                device.synchronize()
            self.step_end_s.append(time.perf_counter())

        def finish(self) -> tuple[list[float], str]:
            """Every step's time in ms (warm-up steps included: the summary drops them) and the clock's method."""
            return self.clock.samples(), self.clock.method

    return StepTimer()
