"""The timed parts of the LoRA Trainer step and the bare loop (the attribution table of :mod:`.host_overhead`), the
wrappers that time them and the table's rows (:func:`append_attribution`)."""

from __future__ import annotations

import time

from accelbench.measure import overhead

ATTRIBUTION_FIELDS = [
    "layers",
    "fast_host_step",
    "part",
    "trainer_ms_per_step",
    "bare_ms_per_step",
    "extra_ms_per_step",
    "trainer_calls_per_step",
    "where",
    "note",
]


def step_parts() -> list[tuple[str, object, str, str, str]]:
    """The timed parts of a step: ``(label, owner, attribute, side, note)``; side ``both`` (the same function runs in
    the Trainer step and the bare loop), ``trainer`` or ``bare``. Indented labels are inside the part above them."""
    import torch
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer
    from accelerate.utils.operations import ConvertOutputsToFp32
    from peft import PeftModelForCausalLM
    from torch.optim.lr_scheduler import LRScheduler
    from transformers import Trainer
    from transformers.trainer_callback import CallbackHandler

    from accelbench.experiments.lora.trainer import LossCurveMixin

    return [
        (
            "get_batch_samples (dataloader, collator, device placement, token count)",
            Trainer,
            "get_batch_samples",
            "trainer",
            "before on_step_begin: outside the product's step window",
        ),
        (
            "  _get_num_items_in_batch",
            Trainer,
            "_get_num_items_in_batch",
            "trainer",
            "labels[..., 1:].ne(-100).sum() per micro-batch",
        ),
        (
            "training_step x grad_accum",
            Trainer,
            "training_step",
            "trainer",
            "forward + backward and Trainer's wrapping",
        ),
        (
            "  model.train() (Module.train, outermost calls)",
            torch.nn.Module,
            "train",
            "trainer",
            "Trainer: before every micro-batch, a walk over every module",
        ),
        ("  _prepare_inputs", Trainer, "_prepare_inputs", "trainer", ".to(device) of the batch"),
        ("  compute_loss", Trainer, "compute_loss", "trainer", "incl. the forward"),
        (
            "    accelerate forward wrapper (autocast, outputs to fp32)",
            ConvertOutputsToFp32,
            "__call__",
            "trainer",
            "incl. the model forward; converts the logits to fp32",
        ),
        (
            "    model forward (PeftModelForCausalLM.forward)",
            PeftModelForCausalLM,
            "forward",
            "both",
            "bare: under torch.autocast",
        ),
        ("  accelerator.backward", Accelerator, "backward", "trainer", "incl. autograd"),
        ("    autograd backward (torch.autograd.backward)", torch.autograd, "backward", "both", ""),
        ("floating_point_ops (LossCurveMixin)", LossCurveMixin, "floating_point_ops", "trainer", "state.total_flos"),
        (
            "_clip_grad_norm (LossCurveMixin, then Trainer's)",
            LossCurveMixin,
            "_clip_grad_norm",
            "trainer",
            "fast_host_step: the parameters that require gradients; else model.parameters() (frozen ones too)",
        ),
        ("  torch.nn.utils.clip_grad_norm_", torch.nn.utils, "clip_grad_norm_", "both", "bare: adapter parameters"),
        ("_get_grad_norm", Trainer, "_get_grad_norm", "trainer", ""),
        ("optimizer.step (AcceleratedOptimizer)", AcceleratedOptimizer, "step", "trainer", "incl. the torch optimizer"),
        ("  AdamW step (torch.optim.AdamW.step)", torch.optim.AdamW, "step", "both", "fused AdamW on both sides"),
        ("_get_learning_rate", Trainer, "_get_learning_rate", "trainer", ""),
        ("lr_scheduler.step", LRScheduler, "step", "trainer", "constant_with_warmup (LambdaLR)"),
        (
            "model.zero_grad (Module.zero_grad)",
            torch.nn.Module,
            "zero_grad",
            "trainer",
            "Trainer: a walk over every parameter; fast_host_step: a cached list (not timed here, ~0.03 ms)",
        ),
        ("optimizer.zero_grad (bare)", torch.optim.Optimizer, "zero_grad", "bare", "adapter parameters"),
        (
            "callbacks (CallbackHandler.call_event)",
            CallbackHandler,
            "call_event",
            "trainer",
            "StepTimer, DefaultFlowCallback, ProgressCallback (tqdm)",
        ),
        ("_maybe_log_save_evaluate", Trainer, "_maybe_log_save_evaluate", "trainer", "log/save/eval checks"),
    ]


class PartTimers:
    """Thread-CPU time and calls of each part of :func:`step_parts` while enabled (wrappers set on the owners'
    attributes, outermost calls only; about 1 us per call). ``enable``/``disable`` as a ``cProfile.Profile``;
    ``restore`` puts the originals back."""

    def __init__(self, parts):
        self.on = False
        self.ms = {p[0]: 0.0 for p in parts}
        self.calls = {p[0]: 0 for p in parts}
        self._saved = []
        for label, owner, attr, _side, _note in parts:
            orig = owner.__dict__.get(attr) or getattr(owner, attr)  # own or inherited (optimizers: hooked)
            self._saved.append((owner, attr, orig))
            setattr(owner, attr, self._wrap(label, orig))

    def _wrap(self, label, orig):
        import functools

        depth = [0]
        timers = self

        @functools.wraps(orig)
        def wrapped(*a, **k):
            if not timers.on or depth[0]:
                depth[0] += 1
                try:
                    return orig(*a, **k)
                finally:
                    depth[0] -= 1
            depth[0] += 1
            t0 = time.thread_time()
            try:
                return orig(*a, **k)
            finally:
                timers.ms[label] += (time.thread_time() - t0) * 1e3
                timers.calls[label] += 1
                depth[0] -= 1

        return wrapped

    def enable(self):
        self.on = True

    def disable(self):
        self.on = False

    def restore(self):
        for owner, attr, orig in reversed(self._saved):
            setattr(owner, attr, orig)


def append_attribution(csv: str, layers: int, fast_host_step: bool, rows: list[tuple], steps: int) -> None:
    """Append the attribution ``rows`` (``(part, trainer ms, bare ms, trainer calls, where, note)`` per step, of one run
    of ``steps`` timed steps per side) to ``csv`` (:data:`ATTRIBUTION_FIELDS`)."""
    for label, tm, bm, calls, where, note in rows:
        overhead.append(
            csv,
            fields=ATTRIBUTION_FIELDS,
            row={
                "layers": layers,
                "fast_host_step": fast_host_step,
                "part": label,
                "trainer_ms_per_step": round(tm, 3) if tm is not None else None,
                "bare_ms_per_step": round(bm, 3) if bm is not None else None,
                "extra_ms_per_step": round((tm or 0.0) - (bm or 0.0), 3),
                "trainer_calls_per_step": round(calls, 2) if calls is not None else None,
                "where": where,
                "note": "; ".join(x for x in (note, f"thread CPU ms per step, {steps} steps of one run") if x),
            },
        )
