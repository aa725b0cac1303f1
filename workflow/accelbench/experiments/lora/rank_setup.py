"""Study B LoRA: what one rank sets up before it trains (:func:`.train.train_rank`): its place among the ranks and
its device (:func:`join`, :class:`RankContext`), the causal LM (:func:`load_model`, :func:`name_and_pad`) and its
LoRA adapters (:func:`add_adapters`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass

from accelbench.errors import DataError
from accelbench.experiments.lora.model import apply_lora, count_parameters, random_init_place, weights_gib
from accelbench.experiments.lora.series import fold_note, gaudi_mode, runtime_for, settings_of
from accelbench.experiments.lora.settings import Plan, hpu_lazy_mode


@dataclass(frozen=True)
class RankContext:
    """Where one rank runs: its place among the ranks, the resolved settings and series runtime, its device.

    Attributes:
        rank, world: this process's rank and the number of ranks (``RANK``/``WORLD_SIZE``; 0 and 1 unset).
        settings: the LoRA settings of the spec (:func:`.series.settings_of`).
        series: ``ours`` or ``faithful``; family: the model family of the job files (``""`` unset).
        ops: the backend's module (:func:`accelbench.backends.get`).
        runtime: the series' runtime options (:func:`.series.runtime_for`).
        gaudi_mode: the job file's Gaudi mode (faithful series; else None).
        device: this rank's device.
    """

    rank: int
    world: int
    settings: object
    series: str
    family: str
    ops: object
    runtime: object
    gaudi_mode: dict | None
    device: object


def join(spec: dict, system, plan: Plan, threads: int, placement: dict | None) -> RankContext:
    """This rank's context (:class:`RankContext`): its rank from torchrun's environment, its thread count (``threads``
    over the ranks, where no placement set it), the series' runtime (with the folded batch's note where the series
    folds its gradient accumulation, :func:`.series.fold_note`) and Gaudi mode (the HPU lazy-mode environment set
    where the backend has one), its device made current."""
    import torch

    from accelbench import backends
    from accelbench.backends.device import Device

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    series = spec.get("series", "ours")
    family = spec.get("family", "")
    settings = settings_of(spec)
    if placement is None and threads:
        torch.set_num_threads(max(1, threads // world))
    ops = backends.get(system.backend)
    runtime = runtime_for(
        series,
        spec.get("series_options"),
        ops.accelerator,
        backend_has_compile=ops.accelerator and not ops.optimum_habana,
    )
    folded = fold_note(spec)
    if folded:  # the result says what ran: the folded micro-batch against the setting's
        runtime = dataclasses.replace(runtime, notes=[*runtime.notes, folded])
    gmode = gaudi_mode(family, plan.strategy, plan.devices, runtime.job_set) if series == "faithful" else None
    if ops.lazy_mode:
        if gmode:
            for k, v in {"PT_HPU_LAZY_MODE": "1", **gmode["env"]}.items():
                os.environ.setdefault(k, v)
        os.environ.setdefault("PT_HPU_LAZY_MODE", hpu_lazy_mode(plan.strategy))
    device = Device(system.backend, index=ops.device_index(local))
    ops.set_device(local)
    return RankContext(rank, world, settings, series, family, ops, runtime, gmode, device)


def load_model(spec: dict, system, plan: Plan, ctx: RankContext):
    """The causal LM of ``spec["model"]`` (:func:`accelbench.models.llm.load_causal_lm`) in the plan's weight dtype,
    built where :func:`.model.random_init_place` says (returned with it)."""
    import torch

    from accelbench.models.llm import load_causal_lm

    ops, device = ctx.ops, ctx.device
    model_spec = dict(spec["model"])
    weight_dtype = "bfloat16" if plan.precision == "bf16" and ops.accelerator else "float32"
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
        rank=ctx.rank,
    )
    build_on = {"device": device.torch_device, "device_then_host": device.torch_device, "meta": "meta"}.get(place)
    with torch.device(build_on) if build_on else contextlib.nullcontext():
        by_module = {"init_device": device.torch_device} if place == "device_by_module" else {}
        lm = load_causal_lm(model_spec, dtype=weight_dtype, **by_module)
    if place == "device_then_host":  # FSDP shards from the host copy, as with loaded weights
        lm.model.to("cpu")
        device.empty_cache()
    return lm, place


def name_and_pad(lm, model_spec: dict) -> None:
    """Name ``lm`` by the origin an exported folder records, and pad its tokenizer with EOS where it has no pad.

    Raises:
        DataError: the model has no tokenizer.
    """
    if model_spec.get("source") == "path":  # a folder written by `accelbench lora-model-export` says its origin
        from accelbench.models.export import exported_info

        origin = exported_info(model_spec["path"])
        if origin:
            lm.info.update(name=origin["name"], origin=origin["source"], weights=origin["weights"])
    if lm.tokenizer is None:
        raise DataError(f"model {lm.info['name']}: no tokenizer (set lora_finetune.models.<name>.tokenizer)")
    if lm.tokenizer.pad_token is None:
        lm.tokenizer.pad_token = lm.tokenizer.eos_token


def add_adapters(model, plan: Plan, ctx: RankContext):
    """``model`` with its LoRA adapters (:func:`.model.apply_lora`, seeded alike on every rank), cast to bf16 as
    ``run_lora_clm.py`` does under ``--bf16`` on an accelerator; returns it and the parameter counts."""
    import torch

    torch.manual_seed(ctx.settings.seed)  # LoRA A matrices: the same initialisation on every rank
    model, lora_counts = apply_lora(model, ctx.settings)
    if plan.precision == "bf16" and ctx.ops.accelerator and plan.strategy != "zero3":
        model = model.to(torch.bfloat16)  # run_lora_clm.py: lora_model.to(torch.bfloat16) under --bf16 (ZeRO-3:
        # DeepSpeed's bf16 section casts the partitioned model itself)
    return model, lora_counts


# torch's legacy fp32 matmul setting (torch.set_float32_matmul_precision) for each per-backend CUDA matmul setting
_LEGACY_MATMUL = {"ieee": "highest", "tf32": "high", "bf16": "medium"}


def settle_fp32_matmul_precision() -> dict:
    """Make torch's two fp32-matmul-precision APIs agree again after ``TrainingArguments`` set TF32, and say so.

    transformers (>= 4.57 with torch >= 2.9) turns TF32 on for a compiled bf16 run through the per-backend API
    (``torch.backends.fp32_precision = "tf32"``). Inductor's autotune cache (``mode="max-autotune*"``) still reads the
    legacy getter ``torch.get_float32_matmul_precision()``, which then raises "mix of the legacy and new APIs"
    (pytorch/pytorch#196728; on an H100, ``ours_fold_max_autotune`` failed at its first step). The legacy setter
    writes both APIs, so the same choice stated through it (TF32 -> ``"high"``) leaves the matmuls as they were and
    lets the getter answer.

    Returns: ``{"cuda_matmul": <per-backend setting>, "legacy": <legacy setting>, "resynced": bool}`` for the
    result's ``trainer_settings.fp32_matmul_precision`` (the setting the matmuls ran with).
    Raises: nothing of its own; a per-backend setting with no legacy equivalent is left as it is
    (``resynced: False``, ``legacy: None``).
    """
    import torch

    cuda_matmul = getattr(getattr(torch.backends.cuda, "matmul", None), "fp32_precision", None)
    try:
        return {"cuda_matmul": cuda_matmul, "legacy": torch.get_float32_matmul_precision(), "resynced": False}
    except RuntimeError:  # the two APIs disagree
        legacy = _LEGACY_MATMUL.get(cuda_matmul)
        if legacy is None:
            return {"cuda_matmul": cuda_matmul, "legacy": None, "resynced": False}
        torch.set_float32_matmul_precision(legacy)
        return {"cuda_matmul": cuda_matmul, "legacy": legacy, "resynced": True}
