"""Study B LoRA: the transformers ``Trainer`` as a run uses it: its ``TrainingArguments`` per strategy, and
:class:`LossCurveMixin` (per-step loss curve without host syncs, a lighter host step, the DDP options, a step that
holds no CUDA-graph output past the next replay)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from accelbench import backends
from accelbench.errors import ConfigError
from accelbench.experiments.lora.series import Runtime
from accelbench.experiments.lora.settings import LoraSettings, Plan

# TrainingArguments that keep host synchronisations out of every optimizer step (found in transformers 5.24's
# training loop; before them the Trainer step was 1.12x a bare loop of the same work on an H200):
# * logging_nan_inf_filter: `torch.isnan(loss) or torch.isinf(loss)` after every micro-batch is a host sync;
# * logging_strategy "no" (was logging_steps=1): each log does `.item()` on the all-gathered loss and the grad norm;
#   the per-step loss curve comes from :class:`LossCurveMixin` instead (device tensors, read after training);
# * include_num_input_tokens_seen: `.item()` of an all-gathered token count per micro-batch when on;
# * average_tokens_across_devices: an all-gather of the label-token count before every optimizer step. Off, each rank
#   divides by its own count; with concatenated full blocks (no padding, nothing masked) every rank has the same
#   count, so the gradients are the same.
# The held-out losses (eval on start and at the last step) are logged by evaluate(), outside the timed steps.
# ours compiles the model (TrainingArguments.torch_compile) where it was tried: one device and DDP. FSDP1 and ZeRO-3
# under Trainer's compile are not measured yet, so they stay eager (recorded: trainer_settings.torch_compile)
COMPILED_STRATEGIES = ("single", "ddp")
NO_STEP_SYNC_ARGS = {
    "logging_strategy": "no",
    "logging_nan_inf_filter": False,
    "include_num_input_tokens_seen": False,
    "average_tokens_across_devices": False,
}


@dataclass(frozen=True)
class WrapTarget:
    """What FSDP wraps: ``layer_cls``, the class name of the model's decoder layer (``transformer_layer_cls_to_wrap``;
    None: not found), and the model ``family`` (which of the authors' FSDP configs the faithful series passes)."""

    layer_cls: str | None = None
    family: str = ""


def training_arguments_kwargs(
    plan: Plan,
    s: LoraSettings,
    backend: str,
    out_dir: str,
    max_steps: int,
    wrap: WrapTarget | None = None,
    eval_blocks: int = 0,
    runtime: Runtime | None = None,
) -> dict:
    """Keyword arguments of ``TrainingArguments`` (or ``GaudiTrainingArguments``) for the plan and series; ``wrap``:
    what FSDP wraps (None: no decoder layer class, no family).

    ``runtime`` (:func:`.series.runtime_for`; None = ``ours`` with its defaults) decides the series' settings:
    ``faithful`` logs every step with Trainer's defaults, passes the authors' ZeRO-3 JSON unchanged and their FSDP
    config (:func:`.series.faithful_fsdp_config`, ``fsdp="auto_wrap"``); ``ours`` keeps host syncs out of the step
    (:data:`NO_STEP_SYNC_ARGS`), copies batches without waiting, FSDP FULL_SHARD with ``BACKWARD_PRE`` and
    ZeRO-3 with overlapped communication, and ``torch_compile`` / ``use_liger_kernel`` as the runtime says.
    ``ddp``/``fsdp`` backends: NCCL, gloo (CPU), HCCL (Gaudi).
    """
    from transformers import TrainingArguments

    from accelbench.experiments.lora.series import (
        faithful_fsdp_config,
        faithful_zero3_config,
        liger_kernel_config,
        runtime_for,
    )

    wrap = wrap or WrapTarget()
    ops = backends.get(backend)
    rt = runtime or runtime_for("ours", {"compile": False, "liger": False, "loss_tolerance": None}, ops.accelerator)
    fields = TrainingArguments.__dataclass_fields__
    # transformers >= 5 takes the warm-up ratio as a float warmup_steps; 4.x (optimum-habana's) has warmup_ratio
    warmup = {"warmup_steps": s.warmup_ratio} if "warmup_ratio" not in fields else {"warmup_ratio": s.warmup_ratio}
    kw = dict(
        output_dir=out_dir,
        per_device_train_batch_size=s.per_device_batch,
        per_device_eval_batch_size=s.per_device_batch,
        gradient_accumulation_steps=s.grad_accum,
        learning_rate=s.lr,
        lr_scheduler_type=s.lr_scheduler,
        **warmup,
        max_grad_norm=s.max_grad_norm,
        max_steps=max_steps,
        save_strategy="no",
        report_to=[],
        seed=s.seed,
        bf16=plan.precision == "bf16",
        dataloader_drop_last=True,
        disable_tqdm=False,
        use_cpu=not ops.accelerator,
    )
    if rt.no_step_sync:
        kw.update(NO_STEP_SYNC_ARGS)
    else:  # --logging_steps 1; Trainer's defaults for the rest (NaN/Inf filter on, as optimum-habana 1.18)
        kw.update(logging_strategy="steps", logging_steps=rt.logging_steps or 1)
    if rt.compile and plan.strategy in COMPILED_STRATEGIES:
        kw["torch_compile"] = True
        if rt.compile_mode:  # lora_finetune.ours.compile_mode (e.g. reduce-overhead: CUDA graphs)
            kw["torch_compile_mode"] = rt.compile_mode
    if rt.liger:
        kw["use_liger_kernel"] = True
        if rt.liger_kernels is not None:  # the kernels named (lora_finetune.ours.liger_kernels); else Liger's defaults
            kw["liger_kernel_config"] = liger_kernel_config(rt.liger_kernels)
    if ops.fused_adamw:  # fused AdamW, as the bare loop and transformers 5.x's default (4.x defaults to the
        kw["optim"] = "adamw_torch_fused"  # per-tensor loop, whose `step` counter is read on the host)
    if ops.non_blocking_copies and rt.non_blocking_copies:
        # batches copied to the device without waiting for it (accelerate's default copy blocks the host until the
        # GPU has drained its queue, once per batch tensor of each micro-batch); the DataLoader pins them
        kw.update(accelerator_config={"non_blocking": True}, dataloader_pin_memory=True)
    if "average_tokens_across_devices" not in fields:  # transformers < 4.46: no such option (nothing gathered)
        kw.pop("average_tokens_across_devices", None)
    # held-out loss before the first and after the last step, inside the training loop (on the wrapped model, outside
    # the timed window). Note: a Trainer.evaluate() call before train() would leave the model unwrapped (no DDP).
    if eval_blocks:
        kw.update(eval_strategy="steps", eval_steps=max_steps, eval_on_start=True)
    else:
        kw["eval_strategy"] = "no"
    if plan.strategy != "single":
        kw["ddp_backend"] = ops.collective
        kw["ddp_find_unused_parameters"] = False
    if plan.strategy == "fsdp" and rt.series == "faithful":  # --fsdp auto_wrap --fsdp_config fsdp_config_*.json
        kw["fsdp"] = "auto_wrap"
        kw["fsdp_config"] = faithful_fsdp_config(wrap.family, wrap.layer_cls)
    elif plan.strategy == "fsdp":
        kw["fsdp"] = "full_shard auto_wrap"
        # sync_module_states broadcasts rank 0's weights; accelerate supports it only on accelerators (every
        # rank loads the same weights and seeds LoRA identically, so it is not needed on CPU). BACKWARD_PRE:
        # the next unit's all-gather overlaps this unit's backward (FSDP1 without it: no prefetch at all)
        kw["fsdp_config"] = {
            "transformer_layer_cls_to_wrap": [wrap.layer_cls] if wrap.layer_cls else None,
            "use_orig_params": True,
            "version": 1,
            "sync_module_states": ops.accelerator,
            "backward_prefetch": "BACKWARD_PRE",
            "cpu_ram_efficient_loading": ops.accelerator,
        }
    if plan.strategy == "zero3" and rt.series == "faithful":  # --deepspeed deepspeed_zero3_config_grad_0.3.json
        kw["deepspeed"] = faithful_zero3_config()
    elif plan.strategy == "zero3":
        kw["deepspeed"] = {
            "zero_optimization": {
                "stage": 3,
                "overlap_comm": True,
                "contiguous_gradients": True,
                "stage3_gather_16bit_weights_on_model_save": True,
            },
            "bf16": {"enabled": "auto"},
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto",
            "train_batch_size": "auto",
        }
    return kw


class LossCurveMixin:
    """Mixin for ``transformers.Trainer`` / optimum-habana's ``GaudiTrainer`` (4.x and 5.x): the per-step loss curve
    without a host synchronisation inside the training loop, and the DDP options of ``lora_finetune.ddp``.

    ``training_step`` keeps each micro-batch's detached loss tensor on the device, keyed by the optimizer step it
    belongs to (``state.global_step`` while its micro-batches run). :meth:`loss_curve` sums them per step (the value
    Trainer would log with ``logging_steps=1``: its losses are already divided over the accumulated micro-batches),
    averages over ranks (as Trainer's log does) and reads them once, after training.

    ``ddp_options`` (``static_graph``, ``gradient_as_bucket_view``, ``bucket_cap_mb``; None = DDP's default) are set on
    accelerate's ``DistributedDataParallelKwargs`` after Trainer made it (transformers 5.x at init, 4.x in
    ``_wrap_model``), just before the model is wrapped.

    ``cuda_graphs`` (the model compiled into CUDA graphs, :func:`.cuda_graphs.compiles_with_cuda_graphs`): CUDA-graph
    trees replay each graph into the same memory, and once a new generation starts (the next micro-batch's forward, its
    previous backward having run) every output of the previous one may be overwritten; reading one then raises
    "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run" (H200, torch 2.11, the
    ours_cudagraphs rule). Two such outputs outlive the replay in a Trainer step: the micro-batch's loss
    (``training_step`` returns it detached, an alias of the graph's output, which Trainer holds in ``tr_loss_step`` and
    this mixin keeps until :meth:`loss_curve`), and, with gradient accumulation, the first micro-batch's gradients
    (autograd makes the compiled backward's output the ``.grad`` itself, and the next backward adds into it). So each
    micro-batch starts a new generation explicitly (``torch.compiler.cudagraph_mark_step_begin()``), its loss is cloned
    before it is returned, and with ``grad_accum > 1`` the trainable parameters' ``.grad`` are zeros allocated outside
    the graphs' pool before the first micro-batch and zeroed in place after each step (as Study A's ``Workload``;
    torch's own message advises it). The eval loop needs nothing: it runs the uncompiled model. Cost per step: one clone
    per micro-batch, and with accumulation one in-place add per adapter in the first micro-batch and one zeroing.
    """

    ddp_options: dict = {}
    # Host work per optimizer step that a bare loop does not do, removed with the same effect (measured by
    # `benchmarks/harness_overhead.py host-overhead`: 32 decoder layers with LoRA = 1065 modules, 419 parameters):
    # * Trainer calls `model.train()` before every micro-batch: a recursive walk over every module (2.5 ms of host
    #   time per call on the CPU); skipped when every module is already in training mode and none overrides train();
    # * `model.zero_grad()` after every step walks every parameter (1.9 ms): the same loop over a cached list;
    # * `_clip_grad_norm` hands `model.parameters()` (frozen weights too) to accelerate (2.3 ms against 0.6 ms): the
    #   parameters that require gradients instead (frozen ones never have a gradient, so the norm is the same).
    # Only for plain and DDP models (FSDP/DeepSpeed own these methods; FSDP swaps its parameters).
    fast_host_step: bool = True
    cuda_graphs: bool = False  # the model replays CUDA graphs (class docstring)

    def _keeps_grad_buffers(self) -> bool:
        """Whether the trainable parameters' ``.grad`` stay allocated buffers, zeroed in place (class docstring)."""
        return self.cuda_graphs and self.args.gradient_accumulation_steps > 1

    def _fast_host_ok(self, model) -> bool:
        import torch

        return (
            self.fast_host_step
            and isinstance(model, torch.nn.Module)
            and not getattr(self, "is_fsdp_enabled", False)
            and not getattr(self, "is_deepspeed_enabled", False)
        )

    def _host_cache(self, model) -> dict:
        """Modules and parameters of ``model`` (read once per wrapped model; the module tree does not change while
        training), and whether plain ``nn.Module.train``/``zero_grad`` semantics hold for it."""
        import torch

        cache = self.__dict__.setdefault("_host_caches", {})
        if id(model) not in cache:
            # trains() that only set the modules' mode: PreTrainedModel's does more only on a change, DDP's returns self
            plain_train = (torch.nn.Module.train, torch.nn.parallel.DistributedDataParallel.train)
            with contextlib.suppress(ImportError):
                from transformers import PreTrainedModel

                plain_train += (PreTrainedModel.train,)
            modules = list(model.modules())
            params = list(model.parameters())
            cache[id(model)] = {
                "modules": modules,
                "params": params,
                "trainable": [p for p in params if p.requires_grad],
                "plain_train": all(type(m).train in plain_train for m in modules),
                "plain_zero_grad": type(model).zero_grad is torch.nn.Module.zero_grad,
            }
        return cache[id(model)]

    def training_step(self, model, *args, **kwargs):
        skip_train = False
        if self._fast_host_ok(model):
            c = self._host_cache(model)
            if c["plain_zero_grad"] and "zero_grad" not in model.__dict__:
                model.__dict__["zero_grad"] = _cached_zero_grad(model, c["params"], self._keeps_grad_buffers())
            skip_train = c["plain_train"] and all(m.training for m in c["modules"])
        if skip_train:  # Trainer's `model.train()` would change nothing: every module is in training mode
            model.__dict__["train"] = _already_training(model)
        if self.cuda_graphs:
            self._before_replay(model)
        try:
            loss = super().training_step(model, *args, **kwargs)
        finally:
            model.__dict__.pop("train", None)
        if self.cuda_graphs:  # out of the graphs' memory before the next replay overwrites it
            loss = loss.clone()
        self.__dict__.setdefault("_step_losses", {}).setdefault(self.state.global_step, []).append(loss.detach())
        return loss

    def _before_replay(self, model) -> None:
        """Before a micro-batch's compiled forward (CUDA graphs): a new CUDA-graph generation, and where
        :meth:`_keeps_grad_buffers`, a zero ``.grad`` for each trainable parameter that has none (allocated here,
        outside the graphs' pool: after Trainer's ``zero_grad`` at the start, or each step where Trainer's own
        ``zero_grad`` sets them to None)."""
        import torch

        torch.compiler.cudagraph_mark_step_begin()
        if self._keeps_grad_buffers():
            for p in self._host_cache(model)["trainable"]:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:  # the models leave with their own zero_grad again
            for c in self.__dict__.pop("_host_caches", {}).values():
                c["modules"][0].__dict__.pop("zero_grad", None)

    def _clip_grad_norm(self, model):
        """transformers 5.x: accelerate's ``clip_grad_norm_`` over the parameters that require gradients (the same
        norm and clipping as over ``model.parameters()``: the others never have a gradient)."""
        if not self._fast_host_ok(model) or (self.args.max_grad_norm or 0) <= 0:
            return super()._clip_grad_norm(model)
        mixed = getattr(self, "_has_mixed_mesh_grads", None)
        if mixed is not None and mixed(model):
            return super()._clip_grad_norm(model)
        return self.accelerator.clip_grad_norm_(self._host_cache(model)["trainable"], self.args.max_grad_norm)

    def floating_point_ops(self, inputs) -> int:
        """Trainer's FLOP estimate for ``state.total_flos`` (6 x input tokens x non-embedding parameters; this module
        reports its own FLOPs, :func:`flops_per_token`), with the parameters counted once: Trainer's own method walks
        every module and parameter after each micro-batch (about 2 ms of host time per call for an 8B model)."""
        main = getattr(self.model, "main_input_name", "input_ids")
        if main not in inputs or not self.fast_host_step:  # faithful: Trainer's own walk
            return super().floating_point_ops(inputs)
        if "_flops_per_input" not in self.__dict__:
            self._flops_per_input = super().floating_point_ops(inputs) / max(1, inputs[main].numel())
        return int(self._flops_per_input * inputs[main].numel())

    def _wrap_model(self, *args, **kwargs):
        out = super()._wrap_model(*args, **kwargs)
        handler = getattr(self.accelerator, "ddp_handler", None)
        if handler is not None:
            for k, v in self.ddp_options.items():
                if v is not None:
                    setattr(handler, k, v)
        return out

    def loss_curve(self) -> list[float]:
        """Loss of each optimizer step (mean over ranks), in step order; one host read."""
        import torch
        import torch.distributed as dist

        losses = self.__dict__.get("_step_losses", {})
        if not losses:
            return []
        per_step = torch.stack([torch.stack(losses[k]).float().sum() for k in sorted(losses)])
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(per_step)
            per_step /= dist.get_world_size()
        return per_step.tolist()


def _already_training(model):
    """A ``train`` for a model whose modules are all in training mode: ``train(True)`` changes nothing (returns the
    model), any other mode goes to ``nn.Module.train``."""

    def train(mode: bool = True):
        return model if mode else type(model).train(model, mode)

    return train


def _cached_zero_grad(model, params: list, in_place: bool = False):
    """``nn.Module.zero_grad`` of ``model`` over its parameters listed once (``params``) instead of a module walk per
    call; ``set_to_none=False`` goes to ``nn.Module.zero_grad``. ``in_place``: the gradients are zeroed in place
    whatever ``set_to_none`` says (buffers kept for CUDA graphs, :class:`LossCurveMixin`)."""
    import torch

    def zero_grad(set_to_none: bool = True) -> None:
        if in_place:
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                torch._foreach_zero_(grads)
            return None
        if not set_to_none:
            return type(model).zero_grad(model, False)
        for p in params:
            if p.grad is not None:
                p.grad = None

    return zero_grad


DDP_OPTIONS = ("static_graph", "gradient_as_bucket_view", "bucket_cap_mb")


def check_ddp_options(ddp: dict | None, grad_accum: int) -> dict:
    """``lora_finetune.ddp`` without unset (None) entries.

    Raises:
        ConfigError: an unknown option, or ``static_graph`` with gradient accumulation (found on CPU/gloo, torch 2.13:
            DDP's reducer fails its ``expect_autograd_hooks_`` assertion on the step after a ``no_sync`` micro-batch).
    """
    d = {k: v for k, v in (ddp or {}).items() if v is not None}
    bad = sorted(set(d) - set(DDP_OPTIONS))
    if bad:
        raise ConfigError(f"lora_finetune.ddp: unknown option(s) {bad}; allowed: {list(DDP_OPTIONS)}")
    if d.get("static_graph") and grad_accum > 1:
        raise ConfigError(
            f"lora_finetune.ddp.static_graph needs lora_finetune.train.grad_accum 1 (is {grad_accum}): "
            "DDP's static graph fails with no_sync gradient accumulation"
        )
    return d


def ddp_options_for(plan: Plan, ddp: dict | None, grad_accum: int = 1) -> dict:
    """The ``lora_finetune.ddp`` options that apply to the plan (DDP only; unset = DDP's default, not recorded)."""
    if plan.strategy != "ddp":
        return {}
    return check_ddp_options(ddp, grad_accum)


def loss_curve_trainer(
    base: type, ddp_options: dict | None = None, fast_host_step: bool = True, cuda_graphs: bool = False
) -> type:
    """``base`` (Trainer or GaudiTrainer) with :class:`LossCurveMixin`, the given DDP options and host step
    (``fast_host_step=False``: Trainer's own per-step walks, as the faithful series); ``cuda_graphs``: the model
    replays CUDA graphs (:func:`.cuda_graphs.compiles_with_cuda_graphs`), handled as the mixin says."""
    return type(
        f"LossCurve{base.__name__}",
        (LossCurveMixin, base),
        {"ddp_options": dict(ddp_options or {}), "fast_host_step": fast_host_step, "cuda_graphs": cuda_graphs},
    )
