"""Study B LoRA: one rank's fine-tuning run (:func:`train_rank`; the whole run for ``single``)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import resource
import time

from accelbench.errors import DataError
from accelbench.experiments.lora.data import build_datasets
from accelbench.experiments.lora.model import (
    apply_lora,
    count_parameters,
    random_init_place,
    set_attention,
    weights_gib,
)
from accelbench.experiments.lora.series import (
    SOURCE,
    gaudi_mode,
    job_flash_flags,
    runtime_for,
    settings_of,
    train_runtime,
)
from accelbench.experiments.lora.settings import Plan, hpu_lazy_mode
from accelbench.experiments.lora.timer import make_step_timer
from accelbench.experiments.lora.trainer import ddp_options_for, loss_curve_trainer, training_arguments_kwargs
from accelbench.measure.flops import lora_flop_counts

# What Trainer must have wrapped the model in for each multi-device strategy (checked after the first step)
WRAPPER = {"ddp": "DistributedDataParallel", "fsdp": "FullyShardedDataParallel", "zero3": "DeepSpeedEngine"}


def _host_peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # ru_maxrss is in KiB on Linux


def train_rank(spec: dict, system, plan: Plan, threads: int = 0, placement: dict | None = None) -> dict:
    """Run the LoRA fine-tuning of one rank (the whole run when ``plan.strategy == 'single'``).

    Called once per process; under torchrun the ranks come from ``RANK``/``WORLD_SIZE`` and ``placement`` is the
    rank's thread/CPU placement (already applied; recorded). Without it, ``threads`` (0 = torch's default) is set.

    Returns:
        ``{"status", "reason", "rank", "measurements"}`` of this rank: step times (ms), loss curve, held-out loss
        before/after, peak memory (GiB), model/data summaries. An out-of-memory error becomes status ``oom``.
    """
    import tempfile

    import torch

    from accelbench import backends
    from accelbench.backends.device import Device
    from accelbench.models.llm import load_causal_lm

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    s = settings_of(spec)
    series = spec.get("series", "ours")
    family = spec.get("family", "")
    if placement is None and threads:
        torch.set_num_threads(max(1, threads // world))
    ops = backends.get(system.backend)
    runtime = runtime_for(
        series,
        spec.get("series_options"),
        ops.accelerator,
        backend_has_compile=ops.accelerator and not ops.optimum_habana,
    )
    gmode = gaudi_mode(family, plan.strategy, plan.devices, runtime.job_set) if series == "faithful" else None
    if ops.lazy_mode:
        if gmode:
            for k, v in {"PT_HPU_LAZY_MODE": "1", **gmode["env"]}.items():
                os.environ.setdefault(k, v)
        os.environ.setdefault("PT_HPU_LAZY_MODE", hpu_lazy_mode(plan.strategy))
    device = Device(system.backend, index=ops.device_index(local))
    ops.set_device(local)
    m: dict = {
        "rank": rank,
        "world_size": world,
        "threads": torch.get_num_threads(),
        "placement": placement,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }
    scratch = tempfile.TemporaryDirectory(prefix="accelbench_lora_")  # the Trainer's output_dir; removed below
    tmp = scratch.name
    max_steps = s.warmup_steps + s.timed_steps
    phases = m["setup_s"] = {}  # wall seconds of each set-up phase of this rank, logged as it ends

    def phase_done(name: str, since: float, note: str = "") -> float:
        now = time.perf_counter()
        phases[name] = round(now - since, 3)
        logging.getLogger("accelbench").info(
            "rank %d: %s%s took %.1f s", rank, name.replace("_", " "), note, now - since
        )
        return now

    t_phase = time.perf_counter()
    try:
        gaudi = ops.optimum_habana
        if gaudi:  # gated: only on Gaudi systems
            from optimum.habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments
            from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

            adapt_transformers_to_gaudi()
        from transformers import Trainer, TrainingArguments, default_data_collator

        model_spec = dict(spec["model"])
        weight_dtype = "bfloat16" if plan.precision == "bf16" and ops.accelerator else "float32"
        # ZeRO-3 must see its config before the model is built (zero.Init partitions at load time)
        pre_args = None
        if plan.strategy == "zero3":
            pre_args = TrainingArguments(
                **training_arguments_kwargs(plan, s, system.backend, tmp, max_steps, None, s.eval_blocks)
            )
        device.reset_peak_memory()
        free = ops.free_memory_bytes(device.index)
        free_gib = free / 2**30 if free is not None else None
        n_config = (
            count_parameters(model_spec) if model_spec.get("source") == "random" and plan.strategy == "fsdp" else None
        )
        place = random_init_place(
            model_spec,
            system.backend,
            plan.strategy,
            weights_gib(n_config, plan.precision) if n_config else None,
            free_gib,
            rank=rank,
        )
        build_on = {"device": device.torch_device, "device_then_host": device.torch_device, "meta": "meta"}.get(place)
        with torch.device(build_on) if build_on else contextlib.nullcontext():
            by_module = {"init_device": device.torch_device} if place == "device_by_module" else {}
            lm = load_causal_lm(model_spec, dtype=weight_dtype, **by_module)
        if place == "device_then_host":  # FSDP shards from the host copy, as with loaded weights
            lm.model.to("cpu")
            device.empty_cache()
        t_phase = phase_done("model_build", t_phase, f" ({place.replace('_', ' ')})")
        m["model_built_on"] = place
        if model_spec.get("source") == "path":  # a folder written by `accelbench lora-model-export` says its origin
            from accelbench.models.export import exported_info

            origin = exported_info(model_spec["path"])
            if origin:
                lm.info.update(name=origin["name"], origin=origin["source"], weights=origin["weights"])
        model, tokenizer = lm.model, lm.tokenizer
        if tokenizer is None:
            raise DataError(f"model {lm.info['name']}: no tokenizer (set lora_finetune.models.<name>.tokenizer)")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        m["attn_implementation"] = set_attention(model, plan)
        model.config.use_cache = False
        layer_cls = type(model.model.layers[0]).__name__ if hasattr(getattr(model, "model", None), "layers") else None
        torch.manual_seed(s.seed)  # LoRA A matrices: the same initialisation on every rank
        model, lora_counts = apply_lora(model, s)
        if plan.precision == "bf16" and ops.accelerator and plan.strategy != "zero3":
            model = model.to(torch.bfloat16)  # run_lora_clm.py: lora_model.to(torch.bfloat16) under --bf16 (ZeRO-3:
            # DeepSpeed's bf16 section casts the partitioned model itself)
        m["flop_counts"] = lora_flop_counts(model)
        need = s.per_device_batch * s.grad_accum * world * max_steps
        per_eval = s.per_device_batch * world  # whole eval batches on every rank (drop_last)
        n_eval = math.ceil(s.eval_blocks / per_eval) * per_eval
        # Gaudi keeps the mask (optimum-habana's models build their causal mask from it; not tried without)
        with_mask = ops.optimum_habana
        train_ds, eval_ds, data_summary = build_datasets(tokenizer, spec["data"], s.seq_len, need, n_eval, with_mask)
        kw = training_arguments_kwargs(
            plan, s, system.backend, tmp, max_steps, layer_cls, len(eval_ds), runtime, family
        )
        ddp_options = ddp_options_for(plan, spec.get("ddp"), s.grad_accum)
        m["series"] = {
            **runtime.to_dict(),
            "source": SOURCE,
            # the job file's Gaudi mode (faithful; applied on Gaudi). Ours on Gaudi: lazy mode except FSDP
            "gaudi_mode": gmode,
            "job_flash_flags": job_flash_flags(family, plan.strategy, plan.devices),
            # whether this run's attention is the one the job files ran (None: both exist, or none set)
            "attention_as_job_files": _as_job_files(family, plan),
            "adapters_cast_to": "bfloat16" if plan.precision == "bf16" and ops.accelerator else None,
        }
        m["trainer_settings"] = {
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
        if gaudi:
            mode_args = dict(gmode["args"]) if gmode else {"use_lazy_mode": plan.strategy != "fsdp"}
            fused_rope = mode_args.pop("use_fused_rope", None)
            llama = getattr(model.config, "model_type", None) == "llama"  # run_lora_clm.py sets these for llama only
            if mode_args.pop("attn_softmax_bf16", False) and llama:
                model.generation_config.attn_softmax_bf16 = True
            if fused_rope is False and llama:  # run_lora_clm.py: model.generation_config.use_fused_rope = False
                model.generation_config.use_fused_rope = False
            args = GaudiTrainingArguments(**kw, **mode_args, use_habana=True, distribution_strategy="ddp")
            gcfg = GaudiConfig(
                use_fused_adam=True, use_fused_clip_norm=True, use_torch_autocast=plan.precision == "bf16"
            )
            trainer_cls, extra = GaudiTrainer, {"gaudi_config": gcfg}
        else:
            args = pre_args or TrainingArguments(**kw)
            trainer_cls, extra = Trainer, {}
            if plan.strategy == "single" and args.n_gpu > 1:
                # A non-distributed Trainer wraps the model in nn.DataParallel over every visible GPU; `single`
                # means one device (seen on a 2-GPU H200 node: the "single" runs were DataParallel over 2 GPUs).
                args._n_gpu = 1
        # the values TrainingArguments holds (defaults included: the faithful series leaves most at Trainer's)
        m["trainer_settings"].update({k: _plain(getattr(args, k, None)) for k in TRAINER_FIELDS})
        t_phase = phase_done("lora_and_data", t_phase)
        timer = make_step_timer(device, world)
        timer.meter_energy(s.warmup_steps, s.timed_steps)
        trainer_cls = loss_curve_trainer(trainer_cls, ddp_options, runtime.fast_host_step)
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
        fsdp_cfg = kw.get("fsdp_config") or {}
        # TrainingArguments strips the "fsdp_" prefixes of the authors' keys in place
        wrap = fsdp_cfg.get("fsdp_auto_wrap_policy", fsdp_cfg.get("auto_wrap_policy"))
        if series == "faithful" and plan.strategy == "fsdp" and wrap == "TRANSFORMER_BASED_WRAP":
            from peft.utils.other import fsdp_auto_wrap_policy  # run_lora_clm.py l. 959-960

            trainer.accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)
            m["trainer_settings"]["fsdp_auto_wrap_policy"] = "peft.utils.other.fsdp_auto_wrap_policy"
        phase_done("trainer_init", t_phase)
        device.reset_peak_memory()
        t0 = time.perf_counter()
        trainer.train()
        device.synchronize()
        train_s = time.perf_counter() - t0
        phase_done("train", t0, " (wrapping, evaluations and every step)")
        samples, method = timer.finish()
        m["train_runtime"] = train_runtime(
            timer.step_end_s, timer.step_begin_s, s.warmup_steps, s.per_device_batch * s.grad_accum * world
        )
        m["energy"] = timer.clock.energy()  # this rank's device over the timed steps (accelbench.measure.energy)
        losses = trainer.loss_curve()
        peak = device.peak_memory_bytes()
        evals = [h["eval_loss"] for h in trainer.state.log_history if "eval_loss" in h]
        eval_before, eval_after = (evals[0], evals[-1]) if len(evals) >= 2 else (None, None)
        m["wrapped_as"] = timer.wrapped_as
        m["distributed"] = timer.distributed
        timer.trainer = None
    except device.out_of_memory_errors() as exc:
        peak = device.peak_memory_bytes()
        msg = str(exc).splitlines()[0]
        return {
            "status": "oom",
            "reason": f"out of device memory on rank {rank}: {msg}",
            "rank": rank,
            "measurements": {
                **m,
                "peak_mem_gib_before_oom": peak / 2**30 if peak else None,
                "requested": _requested_from_message(msg),
            },
        }
    finally:
        scratch.cleanup()  # every way out (19 /tmp/accelbench_lora_* folders were left behind before)
    if plan.strategy in WRAPPER and WRAPPER[plan.strategy] not in (m["wrapped_as"] or ""):
        return {
            "status": "unsupported",
            "rank": rank,
            "measurements": m,
            "reason": f"{plan.strategy} requested, but Trainer trained the model wrapped as {m['wrapped_as']} "
            f"(distributed type {(m['distributed'] or {}).get('distributed_type')})",
        }
    m.update(
        {
            "model": lm.info,
            "lora_parameters": lora_counts,
            "data": data_summary,
            "step_samples_ms": samples,
            "timing_method": method,
            "train_wall_s": train_s,
            "loss_curve": losses,
            "loss_curve_method": "per optimizer step: sum of the micro-batch losses kept on the "
            "device, mean over ranks, read after training",
            "eval_loss_before": eval_before,
            "eval_loss_after": eval_after,
            "peak_mem_gib": peak / 2**30 if peak is not None else None,
            "peak_mem_kind": "device max_memory_allocated" if peak is not None else "host peak RSS (CPU)",
            "host_peak_rss_gib": _host_peak_rss_gib(),
            "layer_cls": layer_cls,
        }
    )
    return {"status": "ok", "reason": None, "rank": rank, "measurements": m}


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
