"""Study B LoRA: the two runtime series of one training setting.

* ``faithful``: the distributed runtime as Study B's job files ran it (amitashnanda/Voyager_Gaudi_Benchmarks
  ``fine-tuning_llm/mc*.sh`` with optimum-habana v1.18.1 ``examples/language-modeling/run_lora_clm.py``):

  ============================  ===========================================================================
  setting                       job files
  ============================  ===========================================================================
  LR scheduler                  ``--lr_scheduler_type constant`` (``--warmup_ratio 0.03`` then has no effect)
  logging                       ``--logging_steps 1`` (Trainer's own host step: loss ``.item()`` and NaN filter)
  throughput                    ``--throughput_warmup_steps 3``: ``train_runtime`` from the 4th step on
  ZeRO-3                        ``deepspeed_zero3_config_grad_0.3.json`` unchanged (``authors/``)
  FSDP                          ``--fsdp auto_wrap --fsdp_config fsdp_config_<model>.json`` (FULL_SHARD,
                                BACKWARD_PRE, sync_module_states, use_orig_params, cpu_ram_efficient_loading)
                                plus peft's ``fsdp_auto_wrap_policy`` (run_lora_clm.py l. 959)
  adapters                      ``lora_model.to(torch.bfloat16)`` under ``--bf16`` (run_lora_clm.py l. 930)
  optimizer                     ``GaudiConfig(use_fused_adam, use_fused_clip_norm)``; CUDA: fused AdamW
  Gaudi execution mode          :func:`gaudi_mode` (lazy, or compile with ``hpu_backend``, per job file)
  flash flags                   :func:`job_flash_flags` (set on every sharded job and Gemma DDP 2-8 cards)
  ============================  ===========================================================================

* ``ours``: the same model, data and hyper-parameters (the same ``constant`` schedule) with the fastest honest
  step: no per-step host syncs (:data:`.trainer.NO_STEP_SYNC_ARGS`), Trainer's host step trimmed, non-blocking
  batch copies, ``torch.compile`` (Liger kernels only where ``lora_finetune.ours.liger`` asks), FSDP with
  ``BACKWARD_PRE`` and ZeRO-3 with overlapped communication; where ``fold_grad_accum`` asks, the optimizer step's
  micro-batches folded into one (:func:`fold_grad_accum`). The aggregation keeps an ``ours`` number only where
  its loss curve stays within the recorded tolerance of the faithful series over the same steps.

Two 70B ZeRO-3 job sets exist upstream: ``2026-03`` (``*_DSLikeFSDP.sh``, March 2026: batch 2 x 2, 512 tokens,
max grad norm 0.3, compile mode) and ``2025-11`` (``*_withDSBoltMonkeyParquet_gaudi2.sh``, November 2025: batch
1 x 1, 1,024 tokens, max grad norm 1.0, lazy mode, ``PT_HPU_MAX_COMPOUND_OP_SIZE=10``). The figure most likely used
``2026-03`` (the default): its hyper-parameters are those the paper states for every run, its files were written
together with the FSDP and DDP files of the same comparison (the Gemma ``*_DDP_LikeDSAndFSDP.sh`` files say "the
same input as fsdp and deepspeed"), and the paper's 70B FSDP rows need the March set's FSDP files. ``2025-11`` stays
selectable (``lora_finetune.faithful.job_set``).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from accelbench.errors import ConfigError

SERIES = ("faithful", "ours")
JOB_SETS = ("2026-03", "2025-11")
AUTHORS = Path(__file__).parent / "authors"  # the authors' JSON files, unchanged (see authors/README.md)
SOURCE = "amitashnanda/Voyager_Gaudi_Benchmarks@550860c fine-tuning_llm/ + optimum-habana v1.18.1 run_lora_clm.py"
THROUGHPUT_WARMUP_STEPS = 3  # --throughput_warmup_steps 3 (every job file)
# hyper-parameters of the older 70B ZeRO-3 job set (November 2025), over Study B's
OLD_70B_ZERO3 = {"per_device_batch": 1, "grad_accum": 1, "seq_len": 1024, "max_grad_norm": 1.0}


def _read(name: str) -> dict:
    return json.loads((AUTHORS / name).read_text())


def faithful_zero3_config() -> dict:
    """``deepspeed_zero3_config_grad_0.3.json`` as the job files pass it (``--deepspeed``): stage 3,
    ``overlap_comm: false``, ``contiguous_gradients: false``, clipping 0.3, bf16 on, batch sizes ``auto``."""
    return _read("deepspeed_zero3_config_grad_0.3.json")


def faithful_fsdp_config(family: str, layer_cls: str | None) -> dict:
    """The authors' FSDP config for the model family (Llama or Gemma-2 file), wrapping ``layer_cls`` (the decoder
    layer class of the model built here: the files name optimum-habana's ``Gaudi*DecoderLayer``), FSDP version 1
    (transformers 4.49-4.51 of optimum-habana 1.18 knows only FSDP1; transformers 5 defaults to FSDP2, which drops
    ``backward_prefetch``, ``sync_module_states`` and ``use_orig_params``)."""
    cfg = _read("fsdp_config_gemma2.json" if "gemma" in family.lower() else "fsdp_config_llama.json")
    cfg["authors_layer_cls"] = cfg.pop("transformer_layer_cls_to_wrap")
    cfg["transformer_layer_cls_to_wrap"] = [layer_cls] if layer_cls else None
    cfg["version"] = 1
    return cfg


def gaudi_mode(family: str, strategy: str, devices: int, job_set: str = "2026-03") -> dict:
    """Gaudi execution mode of the job file for (model family, strategy, devices), as the job files choose it.

    Compile mode (``PT_HPU_LAZY_MODE=0``, ``--use_lazy_mode False``, ``--torch_compile --torch_compile_backend
    hpu_backend``, ``--use_fused_rope False``, ``--pipelining_fwd_bwd False``): every FSDP and ZeRO-3 job
    (``*_fsdp.sh``, ``*_DSLikeFSDP.sh``) and Gemma-2-27B DDP on 2-8 cards (``*_DDP_LikeDSAndFSDP.sh``). Lazy mode
    (``--use_lazy_mode``, nothing else set): Gemma-2-27B on 1 card and every Llama-3.1-8B job (both Gaudi2 sets);
    the older 70B ZeRO-3 set (``job_set="2025-11"``) is lazy with ``PT_HPU_MAX_COMPOUND_OP_SIZE=10``,
    ``DEEPSPEED_HPU_ZERO3_SYNC_MARK_STEP_REQUIRED=1``, ``--pipelining_fwd_bwd`` and ``--attn_softmax_bf16``.
    Keys a job file does not set are absent (the library default applies).
    """
    if job_set not in JOB_SETS:
        raise ConfigError(f"lora_finetune.faithful.job_set {job_set!r} unknown; allowed: {', '.join(JOB_SETS)}")
    fam = family.lower()
    if strategy == "zero3" and job_set == "2025-11" and "70b" in fam:
        return {
            "mode": "lazy",
            "job_files": "mcLlama3.3-70b_LORA64_*HPUs_withDSBoltMonkeyParquet_gaudi2.sh",
            "env": {
                "PT_HPU_LAZY_MODE": "1",
                "PT_HPU_MAX_COMPOUND_OP_SIZE": "10",
                "DEEPSPEED_HPU_ZERO3_SYNC_MARK_STEP_REQUIRED": "1",
            },
            "args": {"use_lazy_mode": True, "pipelining_fwd_bwd": True, "attn_softmax_bf16": True},
        }
    compile_mode = strategy in ("fsdp", "zero3") or (strategy == "ddp" and devices >= 2 and "gemma" in fam)
    if compile_mode:
        kind = {"fsdp": "fsdp", "zero3": "DSLikeFSDP", "ddp": "DDP_LikeDSAndFSDP"}[strategy]
        return {
            "mode": "compile",
            "job_files": f"mc*_LORA64_*HPUs_withBoltMonkeyParquet_gaudi2_{kind}.sh",
            "env": {"PT_HPU_LAZY_MODE": "0"},
            "args": {
                "use_lazy_mode": False,
                "torch_compile": True,
                "torch_compile_backend": "hpu_backend",
                "use_fused_rope": False,
                "pipelining_fwd_bwd": False,
            },
        }
    return {
        "mode": "lazy",
        "job_files": "mcLlama3.1-8b_*.sh / mcGemma2-27b_LORA64_1HPU_*.sh",
        "env": {},
        "args": {"use_lazy_mode": True},
    }


def job_flash_flags(family: str, strategy: str, devices: int) -> dict:
    """Whether the job file sets ``--use_flash_attention True --flash_attention_causal_mask True``, and whether
    they act: optimum-habana 1.18/1.19 reads them for ``model_type == "llama"`` only (run_lora_clm.py l. 702), so
    they are inert for Gemma-2. Set on every sharded job and on Gemma DDP 2-8 cards; Llama-3.1-8B has a job set
    with (``*_FA.sh``) and one without, so both attentions are the job files' there."""
    fam = family.lower()
    sharded = strategy in ("fsdp", "zero3") or (strategy == "ddp" and devices >= 2 and "gemma" in fam)
    if sharded:
        active = "llama" in fam
        return {"set": True, "active": active, "attention": "flash" if active else "eager"}
    return {"set": None, "active": None, "attention": None}  # both variants exist (8B) or none is set (Gemma 1 card)


@dataclass(frozen=True)
class Runtime:
    """How a series runs the training step (what reaches TrainingArguments and the Trainer; recorded)."""

    series: str
    logging_steps: int | None  # 1 = Trainer logs every step (faithful); None = logging off (ours)
    no_step_sync: bool  # ours: NO_STEP_SYNC_ARGS
    fast_host_step: bool  # ours: Trainer's per-step module walks removed (LossCurveMixin)
    non_blocking_copies: bool  # ours: batches copied without a host wait
    throughput_warmup_steps: int  # steps before the train_runtime window (faithful: 3)
    adapter_dtype: str  # "bf16": lora_model.to(bfloat16) under bf16, as run_lora_clm.py
    compile: bool  # torch.compile of the model (TrainingArguments.torch_compile)
    liger: bool  # Liger kernels (TrainingArguments.use_liger_kernel)
    job_set: str = "2026-03"
    loss_tolerance: float | None = None  # ours: relative loss-curve tolerance against faithful (recorded)
    liger_kernels: list | None = None  # the Liger kernels applied (None: Liger's defaults for the model type)
    compile_mode: str | None = None  # torch.compile mode (TrainingArguments.torch_compile_mode; None: torch's default)
    fold_grad_accum: bool = False  # ours: one micro-batch of batch x accumulation per optimizer step (fold_grad_accum)
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def is_ours(series: str) -> bool:
    """``ours`` or one of its measured variants (``ours_<name>``, options in ``lora_finetune.ours_variants``)."""
    return series == "ours" or (series.startswith("ours_") and len(series) > 5)


def series_options(series: str, section: dict) -> dict:
    """The options of ``series`` from the ``lora_finetune`` config section: ``faithful`` -> ``section["faithful"]``,
    ``ours`` -> ``section["ours"]``, ``ours_<name>`` -> ``section["ours"]`` updated by
    ``section["ours_variants"][name]``.

    Raises:
        ConfigError: a variant that ``lora_finetune.ours_variants`` does not define (named).
    """
    if series == "faithful":
        return dict(section.get("faithful") or {})
    base = dict(section.get("ours") or {})
    if series == "ours" or not is_ours(series):
        return base
    variants = section.get("ours_variants") or {}
    name = series[len("ours_") :]
    if name not in variants:
        raise ConfigError(
            f"lora_finetune.series {series!r}: no lora_finetune.ours_variants.{name} "
            f"(defined: {sorted(variants) or 'none'})"
        )
    return {**base, **variants[name]}


def liger_available() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


# the kernels of liger_kernel's apply_liger_kernel_to_<model type>(...) switches (the config's ``liger_kernels``)
LIGER_KERNELS = ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy", "cross_entropy")


def liger_kernel_config(kernels) -> dict | None:
    """``TrainingArguments.liger_kernel_config`` (and the bare loop's ``_apply_liger_kernel_to_instance`` keywords)
    for the Liger ``kernels`` named: each of :data:`LIGER_KERNELS` on where named, off otherwise; None for None
    (Liger's defaults for the model type).

    Raises:
        ConfigError: an unknown kernel, or both cross-entropy kernels (Liger applies one of them).
    """
    if kernels is None:
        return None
    bad = sorted(set(kernels) - set(LIGER_KERNELS))
    if bad:
        raise ConfigError(f"lora_finetune liger_kernels: unknown {bad}; allowed: {', '.join(LIGER_KERNELS)}")
    if {"cross_entropy", "fused_linear_cross_entropy"} <= set(kernels):
        raise ConfigError(
            "lora_finetune liger_kernels: cross_entropy and fused_linear_cross_entropy exclude each other"
        )
    return {k: k in kernels for k in LIGER_KERNELS}


def runtime_for(series: str, cfg: dict | None, accelerator: bool, backend_has_compile: bool = True) -> Runtime:
    """The :class:`Runtime` of ``series`` from its config section (``lora_finetune.faithful`` / ``.ours``).

    ``ours`` options: ``compile`` (bool), ``liger`` (``auto`` = where ``liger_kernel`` is installed and the device is
    a CUDA accelerator, or bool), ``liger_kernels`` (the Liger kernels applied, :data:`LIGER_KERNELS`; absent: Liger's
    defaults), ``compile_mode`` (``torch.compile``'s mode, e.g. ``reduce-overhead``: CUDA graphs; absent: torch's
    default), ``fold_grad_accum`` (bool, absent = false: the step's micro-batches folded into one,
    :func:`fold_grad_accum`), ``loss_tolerance``. ``faithful``: ``job_set`` (:data:`JOB_SETS`).

    Raises:
        ConfigError: an unknown series, option, or ``liger: true`` without ``liger_kernel`` installed.
    """
    cfg = dict(cfg or {})
    if series == "faithful":
        bad = sorted(set(cfg) - {"job_set"})
        if bad:
            raise ConfigError(f"lora_finetune.faithful: unknown key(s) {bad}; allowed: ['job_set']")
        job_set = cfg["job_set"]
        if job_set not in JOB_SETS:
            raise ConfigError(f"lora_finetune.faithful.job_set {job_set!r} unknown; allowed: {', '.join(JOB_SETS)}")
        return Runtime(
            "faithful",
            logging_steps=1,
            no_step_sync=False,
            fast_host_step=False,
            non_blocking_copies=False,
            throughput_warmup_steps=THROUGHPUT_WARMUP_STEPS,
            adapter_dtype="bf16",
            compile=False,
            liger=False,
            job_set=job_set,
        )
    if not is_ours(series):
        raise ConfigError(f"lora_finetune series {series!r} unknown; allowed: {', '.join(SERIES)}, ours_<variant>")
    allowed = ["compile", "compile_mode", "fold_grad_accum", "liger", "liger_kernels", "loss_tolerance"]
    bad = sorted(set(cfg) - set(allowed))
    if bad:
        raise ConfigError(f"lora_finetune.ours: unknown key(s) {bad}; allowed: {allowed}")
    kernels = cfg.get("liger_kernels")  # optional: no schema default (Liger's own defaults)
    liger_kernel_config(kernels)  # unknown names stop here
    notes = []
    liger = cfg["liger"]
    if liger == "auto":
        liger = accelerator and backend_has_compile and liger_available()
        if not liger:
            notes.append("Liger kernels off: liger_kernel not installed or no CUDA device (liger: auto)")
    elif liger and not liger_available():
        raise ConfigError(
            "lora_finetune.ours.liger: true, but liger_kernel is not installed "
            "(pip install 'accelbench[fast]' or liger-kernel)"
        )
    compile_ = bool(cfg["compile"]) and accelerator and backend_has_compile
    if cfg["compile"] and not compile_:
        notes.append("torch.compile off: not an accelerator with inductor (CPU runs stay eager)")
    return Runtime(
        series,
        logging_steps=None,
        no_step_sync=True,
        fast_host_step=True,
        non_blocking_copies=True,
        throughput_warmup_steps=THROUGHPUT_WARMUP_STEPS,
        adapter_dtype="bf16",
        compile=compile_,
        liger=bool(liger),
        loss_tolerance=None if cfg["loss_tolerance"] is None else float(cfg["loss_tolerance"]),
        liger_kernels=list(kernels) if liger and kernels is not None else None,
        compile_mode=cfg.get("compile_mode") if compile_ else None,  # optional: no schema default (torch's default)
        fold_grad_accum=bool(cfg.get("fold_grad_accum", False)),  # optional: no schema default (specs stay unchanged)
        notes=notes,
    )


def hyperparameter_overrides(runtime: Runtime, family: str, strategy: str) -> dict:
    """Study B settings that the selected job set changes (the older 70B ZeRO-3 set: :data:`OLD_70B_ZERO3`)."""
    if (
        runtime.series == "faithful"
        and runtime.job_set == "2025-11"
        and strategy == "zero3"
        and "70b" in family.lower()
    ):
        return dict(OLD_70B_ZERO3)
    return {}


def train_runtime(step_end_s: list[float], step_start_s: list[float], warmup: int, samples_per_step: int) -> dict:
    """optimum-habana's throughput: ``train_runtime`` = host seconds from the start of step ``warmup + 1`` to the end
    of the last step (GaudiTrainer starts the clock when ``global_step == throughput_warmup_steps``), and
    ``train_samples_per_second`` = samples after the warm-up / ``train_runtime``. ``step_*_s`` are host clock
    readings per optimizer step (the end read after a device synchronize)."""
    n = len(step_end_s)
    if n <= warmup:
        return {"train_runtime_s": None, "train_samples_per_second": None, "steps": 0, "warmup_steps": warmup}
    runtime = step_end_s[-1] - step_start_s[warmup]
    return {
        "train_runtime_s": runtime,
        "train_samples_per_second": (n - warmup) * samples_per_step / runtime,
        "ms_per_step": 1e3 * runtime / (n - warmup),
        "steps": n - warmup,
        "warmup_steps": warmup,
        "method": "host clock from the start of the first step after the throughput warm-up to the end of the "
        "last (device synchronized), as optimum-habana's train_runtime (--throughput_warmup_steps)",
    }


def fold_grad_accum(s):
    """``s`` (:class:`~.settings.LoraSettings`) with the optimizer step's ``grad_accum`` micro-batches of
    ``per_device_batch`` samples folded into one micro-batch of ``per_device_batch x grad_accum`` samples, accumulation
    1 (``lora_finetune.ours.fold_grad_accum``): the same samples per optimizer step in the same order (the sampler's
    order does not depend on the batch size, and a run's blocks fill whole steps), and the same loss and gradients up
    to float rounding. transformers 5.x's Trainer divides each micro-batch's summed token losses by the step's
    label-token count (``num_items_in_batch``); without it (a model that takes no loss kwargs) it averages the
    micro-batches' mean losses, which is the same where every micro-batch has the same label-token count, as the
    concatenated full blocks here have. The GEMMs are ``grad_accum`` times taller, with ``1 / grad_accum`` of the
    kernel launches per step, and the activations of the larger micro-batch held at once."""
    from dataclasses import replace

    return replace(s, per_device_batch=s.per_device_batch * s.grad_accum, grad_accum=1)


def fold_note(spec: dict) -> str | None:
    """The line a run of an ours series with ``fold_grad_accum`` records in its runtime's notes (what ran, against
    the setting's batch); None where the series does not fold."""
    if not _folds(spec):
        return None
    s = _spec_settings(spec)
    f = fold_grad_accum(s)
    return (
        f"gradient accumulation folded (fold_grad_accum): micro-batch {f.per_device_batch} x {f.grad_accum} per "
        f"optimizer step (the setting's {s.per_device_batch} x {s.grad_accum}): same samples and loss per "
        "optimizer step"
    )


def _spec_settings(spec: dict):
    """The spec's :class:`~.settings.LoraSettings` as written (before any series' change)."""
    from accelbench.experiments.lora.settings import LoraSettings

    return LoraSettings(**{**spec["settings"], "target_modules": tuple(spec["settings"]["target_modules"])})


def _folds(spec: dict) -> bool:
    """Whether the spec's series folds its gradient accumulation: an ours series whose options set
    ``fold_grad_accum`` (faithful never folds)."""
    series = spec.get("series", "ours")
    return is_ours(series) and bool((spec.get("series_options") or {}).get("fold_grad_accum"))


def settings_of(spec: dict):
    """The run's :class:`~.settings.LoraSettings`: the spec's, with the selected job set's hyper-parameters
    (:func:`hyperparameter_overrides`) and, for the faithful series, at least the job files' 3 throughput warm-up
    steps before the timed window; an ours series with ``fold_grad_accum``: the step's micro-batches folded into one
    (:func:`fold_grad_accum`). Used by the job (summary), by every rank and by the bare loop that mirrors a result
    alike."""
    from dataclasses import replace

    s = _spec_settings(spec)
    series = spec.get("series", "ours")
    if series != "faithful":
        return fold_grad_accum(s) if _folds(spec) else s
    rt = runtime_for("faithful", spec.get("series_options"), True)
    over = hyperparameter_overrides(rt, spec.get("family", ""), spec.get("strategy", ""))
    return replace(s, **over, warmup_steps=max(s.warmup_steps, rt.throughput_warmup_steps))
