"""Study B LoRA: one rank's fine-tuning run (:func:`train_rank`; the whole run for ``single``)."""

from __future__ import annotations

import functools
import logging
import math
import resource
import time

from accelbench.experiments.lora.cuda_graphs import compiles_with_cuda_graphs, cuda_graphs_note
from accelbench.experiments.lora.data import build_datasets
from accelbench.experiments.lora.model import set_attention
from accelbench.experiments.lora.rank_setup import (
    RankContext,
    add_adapters,
    join,
    load_model,
    name_and_pad,
    settle_fp32_matmul_precision,
)
from accelbench.experiments.lora.series import SOURCE, job_flash_flags, train_runtime
from accelbench.experiments.lora.settings import Plan
from accelbench.experiments.lora.timer import make_step_timer
from accelbench.experiments.lora.trainer import (
    WrapTarget,
    ddp_options_for,
    loss_curve_trainer,
    training_arguments_kwargs,
)
from accelbench.measure.flops import lora_flop_counts

# What Trainer must have wrapped the model in for each multi-device strategy (checked after the first step)
WRAPPER = {"ddp": "DistributedDataParallel", "fsdp": "FullyShardedDataParallel", "zero3": "DeepSpeedEngine"}


def _host_peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # ru_maxrss is in KiB on Linux


def train_rank(spec: dict, system, plan: Plan, threads: int = 0, placement: dict | None = None) -> dict:
    """Run the LoRA fine-tuning of one rank (the whole run when ``plan.strategy == 'single'``).

    Called once per process; under torchrun the ranks come from ``RANK``/``WORLD_SIZE`` and ``placement`` is the
    rank's thread/CPU placement (already applied; recorded). Without it, ``threads`` (0 = torch's default) is set.
    The steps: :func:`.rank_setup.join` (the rank and its device), :func:`.rank_setup.load_model`,
    :func:`.rank_setup.add_adapters`, the data
    (:func:`.data.build_datasets`), :func:`_training_arguments`, :func:`_make_trainer`, :func:`_train`.

    Returns:
        ``{"status", "reason", "rank", "measurements"}`` of this rank: step times (ms), loss curve, held-out loss
        before/after, peak memory (GiB), model/data summaries. An out-of-memory error becomes status ``oom``.
    """
    import tempfile

    import torch

    ctx = join(spec, system, plan, threads, placement)
    s, ops, device, rank, world = ctx.settings, ctx.ops, ctx.device, ctx.rank, ctx.world
    measurements: dict = {
        "rank": rank,
        "world_size": world,
        "threads": torch.get_num_threads(),
        "placement": placement,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }
    scratch = tempfile.TemporaryDirectory(prefix="accelbench_lora_")  # the Trainer's output_dir; removed below
    tmp = scratch.name
    max_steps = s.warmup_steps + s.timed_steps
    phases = measurements["setup_s"] = {}  # wall seconds of each set-up phase of this rank, logged as it ends
    phase_done = functools.partial(_phase_done, phases, rank)
    t_phase = time.perf_counter()
    try:
        if ops.optimum_habana:  # gated: only on Gaudi systems
            from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

            adapt_transformers_to_gaudi()
        from transformers import TrainingArguments

        # ZeRO-3 must see its config before the model is built (zero.Init partitions at load time)
        pre_args = None
        if plan.strategy == "zero3":
            pre_args = TrainingArguments(
                **training_arguments_kwargs(plan, s, system.backend, tmp, max_steps, None, s.eval_blocks)
            )
        lm, place = load_model(spec, system, plan, ctx)
        t_phase = phase_done("model_build", t_phase, f" ({place.replace('_', ' ')})")
        measurements["model_built_on"] = place
        name_and_pad(lm, spec["model"])
        model, tokenizer = lm.model, lm.tokenizer
        measurements["attn_implementation"] = set_attention(model, plan)
        model.config.use_cache = False
        layer_cls = type(model.model.layers[0]).__name__ if hasattr(getattr(model, "model", None), "layers") else None
        model, lora_counts = add_adapters(model, plan, ctx)
        measurements["flop_counts"] = lora_flop_counts(model)
        # Gaudi keeps the mask (optimum-habana's models build their causal mask from it; not tried without)
        with_mask = ops.optimum_habana
        train_ds, eval_ds, data_summary = _datasets(tokenizer, spec["data"], ctx, max_steps, with_mask)
        wrap = WrapTarget(layer_cls, ctx.family)
        kw = training_arguments_kwargs(plan, s, system.backend, tmp, max_steps, wrap, len(eval_ds), ctx.runtime)
        ddp_options = ddp_options_for(plan, spec.get("ddp"), s.grad_accum)
        measurements["series"] = _series_record(plan, ctx)
        cuda_graphs = compiles_with_cuda_graphs(kw)  # the Trainer must not hold graph outputs past a replay
        if cuda_graphs:
            measurements["series"]["notes"].append(cuda_graphs_note(s.grad_accum))
        measurements["trainer_settings"] = _trainer_settings(kw, with_mask, ddp_options, ctx.runtime)
        args, trainer_cls, extra = _training_arguments(model, plan, ctx, kw, pre_args)
        measurements["trainer_settings"]["fp32_matmul_precision"] = settle_fp32_matmul_precision()
        # the values TrainingArguments holds (defaults included: the faithful series leaves most at Trainer's)
        measurements["trainer_settings"].update({k: _plain(getattr(args, k, None)) for k in TRAINER_FIELDS})
        t_phase = phase_done("lora_and_data", t_phase)
        timer = make_step_timer(device, world)
        timer.meter_energy(s.warmup_steps, s.timed_steps)
        trainer_cls = loss_curve_trainer(trainer_cls, ddp_options, ctx.runtime.fast_host_step, cuda_graphs=cuda_graphs)
        trainer = _make_trainer(trainer_cls, model, args, (train_ds, eval_ds), timer, extra)
        # whether Trainer passes num_items_in_batch into the forward (the bare loop mirrors it: lora.bare)
        accepts = getattr(trainer, "model_accepts_loss_kwargs", None)
        measurements["trainer_settings"]["model_accepts_loss_kwargs"] = accepts
        if _peft_wrap_policy(trainer, model, plan, ctx, kw):
            measurements["trainer_settings"]["fsdp_auto_wrap_policy"] = "peft.utils.other.fsdp_auto_wrap_policy"
        phase_done("trainer_init", t_phase)
        trained, after_training = _train(trainer, timer, ctx, phase_done)
        measurements.update(trained)
    except device.out_of_memory_errors() as exc:
        return _oom_result(exc, ctx, measurements)
    finally:
        scratch.cleanup()  # every way out (19 /tmp/accelbench_lora_* folders were left behind before)
    wrapped_as, distributed = measurements["wrapped_as"], measurements["distributed"]
    if plan.strategy in WRAPPER and WRAPPER[plan.strategy] not in (wrapped_as or ""):
        return {
            "status": "unsupported",
            "rank": rank,
            "measurements": measurements,
            "reason": f"{plan.strategy} requested, but Trainer trained the model wrapped as {wrapped_as} "
            f"(distributed type {(distributed or {}).get('distributed_type')})",
        }
    peak = after_training.pop("peak_bytes")
    measurements.update(
        {
            "model": lm.info,
            "lora_parameters": lora_counts,
            "data": data_summary,
            **after_training,
            "peak_mem_gib": peak / 2**30 if peak is not None else None,
            "peak_mem_kind": "device max_memory_allocated" if peak is not None else "host peak RSS (CPU)",
            "host_peak_rss_gib": _host_peak_rss_gib(),
            "layer_cls": layer_cls,
        }
    )
    return {"status": "ok", "reason": None, "rank": rank, "measurements": measurements}


def _oom_result(exc: BaseException, ctx: RankContext, measurements: dict) -> dict:
    """The ``oom`` result of this rank: the measurements so far, the device's peak memory (GiB) before the error and
    the allocation it failed on (from the message)."""
    peak = ctx.device.peak_memory_bytes()
    msg = str(exc).splitlines()[0]
    return {
        "status": "oom",
        "reason": f"out of device memory on rank {ctx.rank}: {msg}",
        "rank": ctx.rank,
        "measurements": {
            **measurements,
            "peak_mem_gib_before_oom": peak / 2**30 if peak else None,
            "requested": _requested_from_message(msg),
        },
    }


def _phase_done(phases: dict, rank: int, name: str, since: float, note: str = "") -> float:
    """Record (in ``phases``, seconds) and log the set-up phase ``name`` of ``rank`` begun at ``since``
    (``time.perf_counter``); returns now, the next phase's start."""
    now = time.perf_counter()
    phases[name] = round(now - since, 3)
    logging.getLogger("accelbench").info("rank %d: %s%s took %.1f s", rank, name.replace("_", " "), note, now - since)
    return now


def _datasets(tokenizer, data_spec: dict, ctx: RankContext, max_steps: int, with_mask: bool):
    """The (train, eval, summary) of :func:`.data.build_datasets`: blocks for ``max_steps`` optimizer steps of every
    rank, and the held-out blocks rounded up to whole eval batches on every rank (``drop_last``)."""
    s, world = ctx.settings, ctx.world
    need = s.per_device_batch * s.grad_accum * world * max_steps
    per_eval = s.per_device_batch * world  # whole eval batches on every rank (drop_last)
    n_eval = math.ceil(s.eval_blocks / per_eval) * per_eval
    return build_datasets(tokenizer, data_spec, s.seq_len, need, n_eval, with_mask)


def _series_record(plan: Plan, ctx: RankContext) -> dict:
    """The series this run reproduces, as the result records it (``measurements.series``)."""
    return {
        **ctx.runtime.to_dict(),
        "source": SOURCE,
        # the job file's Gaudi mode (faithful; applied on Gaudi). Ours on Gaudi: lazy mode except FSDP
        "gaudi_mode": ctx.gaudi_mode,
        "job_flash_flags": job_flash_flags(ctx.family, plan.strategy, plan.devices),
        # whether this run's attention is the one the job files ran (None: both exist, or none set)
        "attention_as_job_files": _as_job_files(ctx.family, plan),
        "adapters_cast_to": "bfloat16" if plan.precision == "bf16" and ctx.ops.accelerator else None,
    }


def _trainer_settings(kw: dict, with_mask: bool, ddp_options: dict, runtime) -> dict:
    """The Trainer settings this run asked for (``kw``: TrainingArguments' keyword arguments), as recorded in
    ``measurements.trainer_settings``."""
    return {
        **{
            k: kw.get(k)
            for k in (
                "logging_strategy",
                "logging_steps",
                "logging_nan_inf_filter",
                "include_num_input_tokens_seen",
                "average_tokens_across_devices",
                "lr_scheduler_type",
                "torch_compile",
                "use_liger_kernel",
                "liger_kernel_config",
            )
        },
        "fsdp": kw.get("fsdp"),
        "fsdp_config": kw.get("fsdp_config"),
        "deepspeed": kw.get("deepspeed"),
        "optim": kw.get("optim", "TrainingArguments default"),
        "batch_copy": (
            "non_blocking, pinned"
            if (kw.get("accelerator_config") or {}).get("non_blocking")
            else "accelerate default (blocking)"
        ),
        "attention_mask_in_batch": with_mask,
        "ddp_options": ddp_options,
        "loss_curve": "LossCurveMixin (device tensors, read after training)",
        "fast_host_step": runtime.fast_host_step,
    }


def _training_arguments(model, plan: Plan, ctx: RankContext, kw: dict, pre_args):
    """The training arguments, the Trainer class and its extra keyword arguments: Gaudi's (with the job file's
    Gaudi mode, and the generation settings ``run_lora_clm.py`` sets for Llama) or transformers' (``pre_args`` where
    ZeRO-3 made them before the model)."""
    from transformers import Trainer, TrainingArguments

    if ctx.ops.optimum_habana:
        from optimum.habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments

        gmode = ctx.gaudi_mode
        mode_args = dict(gmode["args"]) if gmode else {"use_lazy_mode": plan.strategy != "fsdp"}
        fused_rope = mode_args.pop("use_fused_rope", None)
        llama = getattr(model.config, "model_type", None) == "llama"  # run_lora_clm.py sets these for llama only
        if mode_args.pop("attn_softmax_bf16", False) and llama:
            model.generation_config.attn_softmax_bf16 = True
        if fused_rope is False and llama:  # run_lora_clm.py: model.generation_config.use_fused_rope = False
            model.generation_config.use_fused_rope = False
        args = GaudiTrainingArguments(**kw, **mode_args, use_habana=True, distribution_strategy="ddp")
        gcfg = GaudiConfig(use_fused_adam=True, use_fused_clip_norm=True, use_torch_autocast=plan.precision == "bf16")
        return args, GaudiTrainer, {"gaudi_config": gcfg}
    args = pre_args or TrainingArguments(**kw)
    if plan.strategy == "single" and args.n_gpu > 1:
        # A non-distributed Trainer wraps the model in nn.DataParallel over every visible GPU; `single`
        # means one device (seen on a 2-GPU H200 node: the "single" runs were DataParallel over 2 GPUs).
        args._n_gpu = 1
    return args, Trainer, {}


def _make_trainer(trainer_cls, model, args, datasets: tuple, timer, extra: dict):
    """``trainer_cls`` over ``model`` with the (train, eval) ``datasets`` and the step ``timer`` as its callback."""
    from transformers import default_data_collator

    train_ds, eval_ds = datasets
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=default_data_collator,
        callbacks=[timer],
        **extra,
    )
    timer.trainer = trainer
    return trainer


def _peft_wrap_policy(trainer, model, plan: Plan, ctx: RankContext, kw: dict) -> bool:
    """Give FSDP PEFT's auto-wrap policy as ``run_lora_clm.py`` does (faithful series, transformer-based wrapping);
    whether it was given."""
    fsdp_cfg = kw.get("fsdp_config") or {}
    # TrainingArguments strips the "fsdp_" prefixes of the authors' keys in place
    wrap = fsdp_cfg.get("fsdp_auto_wrap_policy", fsdp_cfg.get("auto_wrap_policy"))
    if not (ctx.series == "faithful" and plan.strategy == "fsdp" and wrap == "TRANSFORMER_BASED_WRAP"):
        return False
    from peft.utils.other import fsdp_auto_wrap_policy  # run_lora_clm.py l. 959-960

    trainer.accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)
    return True


def _train(trainer, timer, ctx: RankContext, phase_done) -> tuple[dict, dict]:
    """Train; returns this rank's measurements of it in two parts: Trainer's runtime figures, energy and what the
    model was wrapped in (recorded whatever the wrapping), then the step samples (ms) and how they were timed, the
    loss curve, held-out losses before/after and ``peak_bytes``, the device's peak memory (None on CPU)."""
    s, device = ctx.settings, ctx.device
    device.reset_peak_memory()
    t0 = time.perf_counter()
    trainer.train()
    device.synchronize()
    train_s = time.perf_counter() - t0
    phase_done("train", t0, " (wrapping, evaluations and every step)")
    samples, method = timer.finish()
    record = {
        "train_runtime": train_runtime(
            timer.step_end_s, timer.step_begin_s, s.warmup_steps, s.per_device_batch * s.grad_accum * ctx.world
        ),
        "energy": timer.clock.energy(),  # this rank's device over the timed steps (accelbench.measure.energy)
        "clocks": timer.clock.clocks(),  # its SM clock and clock-event reasons over them (accelbench.measure.clocks)
    }
    losses = trainer.loss_curve()
    peak = device.peak_memory_bytes()
    evals = [h["eval_loss"] for h in trainer.state.log_history if "eval_loss" in h]
    eval_before, eval_after = (evals[0], evals[-1]) if len(evals) >= 2 else (None, None)
    record.update(wrapped_as=timer.wrapped_as, distributed=timer.distributed)
    timer.trainer = None
    return record, {
        "step_samples_ms": samples,
        "timing_method": method,
        "train_wall_s": train_s,
        "loss_curve": losses,
        "loss_curve_method": "per optimizer step: sum of the micro-batch losses kept on the "
        "device, mean over ranks, read after training",
        "eval_loss_before": eval_before,
        "eval_loss_after": eval_after,
        "peak_bytes": peak,
    }


TRAINER_FIELDS = (
    "logging_strategy",
    "logging_steps",
    "logging_nan_inf_filter",
    "include_num_input_tokens_seen",
    "average_tokens_across_devices",
    "lr_scheduler_type",
    "torch_compile",
    "torch_compile_mode",
    "use_liger_kernel",
    "optim",
    "max_grad_norm",
    "learning_rate",
    "gradient_accumulation_steps",
    "per_device_train_batch_size",
)


def _plain(v):
    """A TrainingArguments value as JSON (enums by their value)."""
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(getattr(v, "value", v))


def _as_job_files(family: str, plan: Plan) -> bool | None:
    """Whether ``plan.attention`` is the attention the job files ran for this case (:func:`.series.job_flash_flags`);
    None where both variants exist (Llama-3.1-8B) or no flag is set."""
    ran = job_flash_flags(family, plan.strategy, plan.devices)["attention"]
    return None if ran is None else ran == plan.attention


def _requested_from_message(msg: str) -> str | None:
    """The ``Tried to allocate X GiB`` part of a PyTorch OOM message, if present."""
    import re

    hit = re.search(r"[Tt]ried to allocate ([0-9.]+ ?[KMGT]i?B)", msg)
    return hit.group(1) if hit else None
