"""Study B (arXiv 2607.05400): LoRA fine-tuning with and without flash attention; single device, DDP, FSDP, ZeRO-3.

Reproduces Study B's fine-tuning runtime study (``study_b_finetune_runtime.csv``, the authors' ``Fig2``):
optimum-habana ``run_lora_clm.py``-style LoRA on a causal LM, timed per optimizer step.

Workload (Study B's settings, all from the config):
  * LoRA rank 64, alpha 64, dropout 0.05 on ``q_proj`` and ``v_proj`` (peft ``LoraConfig``); bf16 where the system
    supports it (``Trainer(bf16=True)`` = autocast, base weights stored in bf16 on accelerators).
  * lr 3e-4 constant after a linear warm-up of ratio 0.03 (``constant_with_warmup``), max grad norm 0.3,
    per-device batch 2, gradient accumulation 2, sequence length 512 with dataset concatenation (all examples
    tokenised, joined with EOS and cut into blocks; labels = inputs, nothing masked, as in ``run_lora_clm.py``).
  * Data: instruction/response pairs (prompt format of ``run_lora_clm.py``); embedded default built from
    ``pydoc_data.topics`` (see :func:`build_pairs`); a site's JSON/JSONL/parquet instruction set through the config.
  * Attention (``attention`` axis): ``eager`` = the model's plain matmul-softmax attention; ``flash`` =
    PyTorch SDPA on CUDA/CPU (FlashAttention-2 kernels on Ampere and newer in bf16; ``flash_attention_2`` when the
    ``flash-attn`` package is installed), and on Gaudi optimum-habana's fused SDPA
    (<= 1.19: ``use_flash_attention`` + ``flash_attention_causal_mask``; >= 1.20: ``attn_implementation=gaudi_fused_sdpa``).
  * Strategy: ``single`` (one device), ``ddp`` (torchrun, NCCL / gloo on CPU / HCCL on Gaudi), ``fsdp`` (FULL_SHARD,
    one FSDP unit per decoder layer), ``zero3`` (DeepSpeed ZeRO stage 3; needs ``deepspeed``).
    On the ``cpu`` backend a "device" is one gloo process owning ``threads / N`` cores; FSDP is recorded
    ``unsupported`` there (accelerate would silently run DDP, see :data:`FSDP_CPU_REASON`). After the first step
    every multi-device run checks that Trainer really wrapped the model as the strategy says (:data:`WRAPPER`).

Measurements: optimizer-step time after warm-up steps (CUDA events / synchronize + host clock, per rank, median and
spread), samples/s and tokens/s, peak device memory per rank (host peak RSS on CPU), MFU from the named FLOP formula
(:func:`flops_per_token`) against the system's peak, the per-step loss curve plus held-out loss before/after training,
and the projected wall time of Study B's epoch (a projection, labelled so).

Example::

    accelbench lora-finetune --spec "$(cat spec.json)" --out results/cpu/lora_finetune/smollm2_135m/flash/ddp/n2/result.json
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import resource
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import ConfigError, DataError
from ..models.llm import parameter_count
# data preparation and FLOP accounting live in their own modules; re-exported here (public names of this module)
from .lora_data import (PROMPT, BlockDataset, build_datasets, build_pairs, concat_blocks,  # noqa: F401
                        format_pair, split_pairs)
from .lora_flops import flops_per_token, lora_flop_counts  # noqa: F401

EXPERIMENT = "lora_finetune"
STRATEGIES = ("single", "ddp", "fsdp", "zero3")
ATTENTIONS = ("eager", "flash")
DIST_BACKEND = {"cpu": "gloo", "cuda": "nccl", "hpu": "hccl"}
# What Trainer must have wrapped the model in for each multi-device strategy (checked after the first step)
WRAPPER = {"ddp": "DistributedDataParallel", "fsdp": "FullyShardedDataParallel", "zero3": "DeepSpeedEngine"}
# Found by running it (accelerate 1.15, transformers 5.24): AcceleratorState turns FSDP on only for accelerator
# distributed types (MULTI_GPU/HPU/XPU/...); with CPU processes (MULTI_CPU, gloo) the FSDP request is dropped and
# Trainer wraps the model in DDP instead, so a CPU "FSDP" run would be a mislabelled DDP run.
FSDP_CPU_REASON = ("FSDP through transformers' Trainer needs an accelerator: accelerate {accelerate} enables FSDP only "
                   "for GPU/HPU/XPU process groups; with CPU (gloo) processes it silently trains with DDP instead")


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class LoraSettings:
    """Study B's LoRA and trainer settings (defaults = the paper's; see config/config.schema.yaml)."""

    r: int = 64
    alpha: int = 64
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lr: float = 3e-4
    lr_scheduler: str = "constant_with_warmup"
    warmup_ratio: float = 0.03
    max_grad_norm: float = 0.3
    per_device_batch: int = 2
    grad_accum: int = 2
    seq_len: int = 512
    precision: str = "bf16"  # bf16 | fp32 (bf16 falls back to fp32 where the system lacks it)
    warmup_steps: int = 2    # untimed optimizer steps
    timed_steps: int = 10    # timed optimizer steps
    eval_blocks: int = 8     # held-out blocks for the loss before/after training
    seed: int = 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target_modules"] = list(self.target_modules)
        return d


def resolve_settings(base: dict, scale: str, scales: dict | None) -> LoraSettings:
    """Merge the config's LoRA/training section with its scale override (``scales[scale]``).

    Raises:
        ConfigError: an unknown key (named).
    """
    d = dict(base)
    d.update((scales or {}).get(scale) or {})
    known = {f for f in LoraSettings.__dataclass_fields__}
    bad = sorted(set(d) - known)
    if bad:
        raise ConfigError(f"lora_finetune.train: unknown key(s) {bad}; allowed: {sorted(known)}")
    if "target_modules" in d:
        d["target_modules"] = tuple(d["target_modules"])
    return LoraSettings(**d)


@dataclass(frozen=True)
class Plan:
    """What one run will do, decided before any model is loaded (see :func:`plan_run`)."""

    strategy: str
    devices: int
    attention: str
    attn_implementation: str | None
    precision: str
    status: str = "ok"
    reason: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def available_devices(backend: str, system_devices: int) -> int:
    """Devices one run may use: the system's count, capped by what is visible (CPU: cores, one gloo process each)."""
    if backend == "cpu":
        return os.cpu_count() or 1
    if backend == "cuda":
        import torch

        return min(system_devices, torch.cuda.device_count())
    return system_devices


def attention_implementation(attention: str, backend: str, optimum_habana_version: str | None = None) -> str | None:
    """The model setting that realises ``attention`` (``eager`` or ``flash``) on ``backend``.

    Returns the ``attn_implementation`` string (``eager``, ``sdpa``, ``flash_attention_2``, ``gaudi_fused_sdpa``),
    or None on Gaudi with optimum-habana <= 1.19, where flash attention is switched on by generation-config flags
    (``use_flash_attention``, ``flash_attention_causal_mask``) instead.
    """
    if attention not in ATTENTIONS:
        raise ConfigError(f"lora_finetune attention {attention!r} unknown; allowed: {', '.join(ATTENTIONS)}")
    if attention == "eager":
        return "eager"
    if backend == "hpu":
        from packaging.version import Version

        if optimum_habana_version and Version(optimum_habana_version) >= Version("1.20"):
            return "gaudi_fused_sdpa"
        return None
    if backend == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def plan_run(strategy: str, devices: int, attention: str, system, settings: LoraSettings,
             available: int | None = None) -> Plan:
    """Decide whether a (strategy, devices, attention) case can run on ``system``; unsupported cases get a reason.

    Rules: ``single`` needs exactly 1 device, the others at least 2; ``devices`` must not exceed the devices
    available (:func:`available_devices`); ``fsdp`` needs an accelerator (:data:`FSDP_CPU_REASON`); ``zero3`` needs
    ``deepspeed``; bf16 falls back to fp32 on systems without it (noted).
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"lora_finetune strategy {strategy!r} unknown; allowed: {', '.join(STRATEGIES)}")
    ohv = _version("optimum-habana") if system.backend == "hpu" else None
    impl = attention_implementation(attention, system.backend, ohv)
    notes = []
    precision = settings.precision
    if precision == "bf16" and not system.supports("bf16"):
        precision = "fp32"
        notes.append(f"{system.name} has no native bf16: fp32 used")
    base = dict(strategy=strategy, devices=devices, attention=attention, attn_implementation=impl,
                precision=precision, notes=notes)
    from ..multinode import job_limit_reason, node_plan

    nodes = node_plan(system, devices, "lora_finetune.runs devices")
    if nodes.nodes > 1:  # several nodes: ranks per node against one node, the total against the system's `devices`
        reason = job_limit_reason(system, nodes)
        if reason:
            return Plan(**base, status="unsupported", reason=reason)
        per_node = available_devices(system.backend, nodes.per_node) if available is None else available
        available = devices if per_node >= nodes.per_node else per_node
    available = available_devices(system.backend, system.devices) if available is None else available
    if strategy == "single" and devices != 1:
        return Plan(**base, status="unsupported", reason="strategy 'single' runs on exactly 1 device")
    if strategy != "single" and devices < 2:
        return Plan(**base, status="unsupported", reason=f"strategy {strategy!r} needs at least 2 devices")
    if devices > available:
        what = "CPU cores (one gloo process each)" if system.backend == "cpu" else f"{system.backend} devices"
        return Plan(**base, status="unsupported", reason=f"{devices} devices requested, {system.name} has {available} {what}")
    if strategy == "fsdp" and system.backend == "cpu":
        return Plan(**base, status="unsupported", reason=FSDP_CPU_REASON.format(accelerate=_version("accelerate")))
    if strategy == "zero3" and importlib.util.find_spec("deepspeed") is None:
        return Plan(**base, status="unsupported", reason="deepspeed not installed")
    if system.backend == "hpu" and importlib.util.find_spec("optimum") is None:
        return Plan(**base, status="unsupported", reason="optimum-habana not installed")
    return Plan(**base)


# --------------------------------------------------------------------------- model
def lora_config(s: LoraSettings):
    """peft ``LoraConfig`` of Study B (rank, alpha, dropout, q_proj/v_proj, no bias, causal LM)."""
    from peft import LoraConfig

    return LoraConfig(r=s.r, lora_alpha=s.alpha, lora_dropout=s.dropout, target_modules=list(s.target_modules),
                      bias="none", task_type="CAUSAL_LM")


def expected_lora_parameters(model, s: LoraSettings) -> int:
    """Trainable parameters LoRA must add: ``r * (in + out)`` for every module named by ``target_modules`` that peft
    wraps with a LoRA layer: ``nn.Linear``, transformers' ``Conv1D`` (GPT-2 family: ``c_attn``, ``c_proj``, ``c_fc``;
    weight (in, out)) and ``nn.Embedding`` (``r * (num_embeddings + embedding_dim)``)."""
    import torch
    from transformers.pytorch_utils import Conv1D

    n = 0
    for name, mod in model.named_modules():
        if name.split(".")[-1] not in s.target_modules:
            continue
        if isinstance(mod, torch.nn.Linear):
            n += s.r * (mod.in_features + mod.out_features)
        elif isinstance(mod, Conv1D):
            shape = getattr(mod.weight, "ds_shape", None) or mod.weight.shape  # ZeRO-3: the full shape
            n += s.r * (shape[0] + shape[1])
        elif isinstance(mod, torch.nn.Embedding):
            n += s.r * (mod.num_embeddings + mod.embedding_dim)
    return n


def apply_lora(model, s: LoraSettings):
    """Wrap ``model`` with LoRA adapters; returns ``(peft_model, {"trainable", "total", "expected"})``.

    Raises:
        ConfigError: the target modules are absent or the trainable count differs from :func:`expected_lora_parameters`.
    """
    from peft import get_peft_model

    expected = expected_lora_parameters(model, s)
    if expected == 0:
        raise ConfigError(f"lora_finetune.train.target_modules: no nn.Linear, Conv1D or nn.Embedding named "
                          f"{list(s.target_modules)} in {type(model).__name__}")
    pm = get_peft_model(model, lora_config(s))
    # full sizes: under ZeRO-3 the frozen weights are partitioned at build time (numel 0, full size in ds_numel)
    trainable = parameter_count(p for p in pm.parameters() if p.requires_grad)
    total = parameter_count(pm.parameters())
    if trainable != expected:
        raise ConfigError(f"LoRA trains {trainable} parameters, expected {expected} (targets {list(s.target_modules)})")
    return pm, {"trainable": trainable, "total": total, "expected": expected}


def set_attention(model, plan: Plan) -> str:
    """Apply the plan's attention implementation to a loaded model; returns what the model reports afterwards."""
    if plan.attn_implementation is None:  # Gaudi, optimum-habana <= 1.19: generation-config flags
        model.generation_config.use_flash_attention = plan.attention == "flash"
        model.generation_config.flash_attention_causal_mask = plan.attention == "flash"
        return "gaudi flags: use_flash_attention + flash_attention_causal_mask"
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(plan.attn_implementation)
    else:  # older transformers
        model.config._attn_implementation = plan.attn_implementation
    return model.config._attn_implementation


def count_parameters(model_spec: dict) -> int | None:
    """Parameters of a model spec's architecture, counted on the meta device (no weights loaded); None if the
    architecture cannot be read offline (the run then reports the loaded count)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        if model_spec.get("source") == "random" and model_spec.get("config"):
            cfg = AutoConfig.for_model(**model_spec["config"])
        else:
            cfg = AutoConfig.from_pretrained(model_spec.get("config_from") or model_spec["path"], local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        return parameter_count(model.parameters())
    except (OSError, ValueError, KeyError):
        return None


def random_init_place(model_spec: dict, backend: str, strategy: str, weights_gib_full: float | None,
                      free_gib: float | None, share: float = 0.8) -> str:
    """Where a model is built: ``"device"``, ``"device_then_host"``, ``"device_by_module"``, ``"zero3_init"`` or
    ``"host"``.

    Random-init weights are drawn on the accelerator where possible: PyTorch draws ``normal_`` on the CPU in one thread
    (measured: 137 s per 8 B parameters), and at Gemma-2-27B shape the host init alone outlasted a 410 s window on an
    H200 node. Single/DDP keep the model there (``"device"``). FSDP builds it there when the full weights fit in
    ``share`` of the free device memory and then moves it to the host (``"device_then_host"``), so FSDP shards from a
    host copy as it does with loaded weights and the measured peak memory is FSDP's own. ZeRO-3 builds under
    DeepSpeed's ``zero.Init``, which draws each parameter on the rank's device and partitions it as it is built
    (``"zero3_init"``; Llama-3.3-70B on 2 H200s: 13.5 s). Where FSDP's full weights do not fit (Llama-3.3-70B: 131 GiB),
    they are drawn on the device one module at a time and kept on the host (``"device_by_module"``,
    :func:`accelbench.models.llm.init_module_by_module`). Weights read from disk and non-CUDA backends otherwise build
    on the host.

    Args:
        weights_gib_full: the unsharded weights in GiB (None: unknown; FSDP then draws them module by module).
        free_gib: free device memory in GiB (None: unknown).
    """
    if strategy == "zero3":
        return "zero3_init"
    if model_spec.get("source") != "random" or backend != "cuda":
        return "host"
    if strategy in ("single", "ddp"):
        return "device"
    if strategy == "fsdp":
        if weights_gib_full is not None and free_gib is not None and weights_gib_full <= share * free_gib:
            return "device_then_host"
        return "device_by_module"
    return "host"


def weights_gib(n_params: int, precision: str) -> float:
    return n_params * (2 if precision == "bf16" else 4) / 2**30


def memory_precheck(n_params_config: int | None, plan: Plan, device_memory_gib: float | None) -> str | None:
    """OOM reason when the frozen weights alone cannot fit on one device under the plan (None otherwise).

    Single/DDP hold the full weights on every device; FSDP/ZeRO-3 hold 1/N of them. Only this certain lower bound
    is used: anything else is left to the run itself, which records a real OOM if it happens.
    """
    if not n_params_config or not device_memory_gib:
        return None
    need = weights_gib(n_params_config, plan.precision)
    if plan.strategy in ("fsdp", "zero3"):
        need /= plan.devices
    if need > device_memory_gib:
        return (f"the {plan.precision} weights alone need {need:.1f} GiB per device under {plan.strategy} on "
                f"{plan.devices} device(s), more than the {device_memory_gib} GiB of one device")
    return None


def host_memory_precheck(n_params_config: int | None, plan: Plan, ranks_per_node: int,
                         host_available_gib: float | None) -> str | None:
    """OOM reason when FSDP's per-rank host copies of the full weights cannot fit the node's memory (None otherwise).

    Under FSDP every rank of a node builds (or loads) the full model on the host before FSDP shards it to the devices,
    so a node needs ``ranks_per_node`` x the full weights of free host memory: Llama-3.3-70B in bf16 on 2 ranks of a
    2x H200 node needs 262.8 GiB of its 256 GiB. Other strategies build on the device (or partition under zero.Init).
    """
    if plan.strategy != "fsdp" or not n_params_config or not host_available_gib:
        return None
    per_rank = weights_gib(n_params_config, plan.precision)
    need = ranks_per_node * per_rank
    if need > host_available_gib:
        return (f"host memory: under fsdp each of the {ranks_per_node} ranks of a node holds the full {plan.precision} "
                f"weights ({per_rank:.1f} GiB) on the host before sharding them, "
                f"{need:.1f} GiB in all, more than the {host_available_gib:.1f} GiB available")
    return None


# --------------------------------------------------------------------------- trainer
# TrainingArguments that keep host synchronisations out of every optimizer step (found in transformers 5.24's
# training loop; issue 12: the Trainer step was 1.12x a bare loop of the same work on an H200):
# * logging_nan_inf_filter: `torch.isnan(loss) or torch.isinf(loss)` after every micro-batch is a host sync;
# * logging_strategy "no" (was logging_steps=1): each log does `.item()` on the all-gathered loss and the grad norm;
#   the per-step loss curve comes from :class:`LossCurveMixin` instead (device tensors, read after training);
# * include_num_input_tokens_seen: `.item()` of an all-gathered token count per micro-batch when on;
# * average_tokens_across_devices: an all-gather of the label-token count before every optimizer step. Off, each rank
#   divides by its own count; with concatenated full blocks (no padding, nothing masked) every rank has the same
#   count, so the gradients are the same.
# The held-out losses (eval on start and at the last step) are logged by evaluate(), outside the timed steps.
NO_STEP_SYNC_ARGS = {"logging_strategy": "no", "logging_nan_inf_filter": False,
                     "include_num_input_tokens_seen": False, "average_tokens_across_devices": False}


def training_arguments_kwargs(plan: Plan, s: LoraSettings, backend: str, out_dir: str, max_steps: int,
                              layer_cls: str | None, eval_blocks: int = 0) -> dict:
    """Keyword arguments of ``TrainingArguments`` (or ``GaudiTrainingArguments``) for the plan.

    ``fsdp``: FULL_SHARD with auto-wrap of ``layer_cls`` (one unit per decoder layer); ``zero3``: a DeepSpeed
    stage-3 config dict with ``auto`` batch/clip values filled by the Trainer; ``ddp``/``fsdp`` backends: NCCL,
    gloo (CPU), HCCL (Gaudi).
    """
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    # transformers >= 5 takes the warm-up ratio as a float warmup_steps; 4.x (optimum-habana's) has warmup_ratio
    warmup = {"warmup_steps": s.warmup_ratio} if "warmup_ratio" not in fields else {"warmup_ratio": s.warmup_ratio}
    kw = dict(output_dir=out_dir, per_device_train_batch_size=s.per_device_batch,
              per_device_eval_batch_size=s.per_device_batch, gradient_accumulation_steps=s.grad_accum,
              learning_rate=s.lr, lr_scheduler_type=s.lr_scheduler, **warmup,
              max_grad_norm=s.max_grad_norm, max_steps=max_steps, save_strategy="no",
              report_to=[], seed=s.seed, bf16=plan.precision == "bf16",
              dataloader_drop_last=True, disable_tqdm=False, use_cpu=backend == "cpu")
    kw.update(NO_STEP_SYNC_ARGS)
    if backend == "cuda":  # fused AdamW, as the bare loop and transformers 5.x's default (4.x defaults to the
        kw["optim"] = "adamw_torch_fused"  # per-tensor loop, whose `step` counter is read on the host)
        # batches copied to the device without waiting for it (accelerate's default copy blocks the host until the
        # GPU has drained its queue, once per batch tensor of each micro-batch); the DataLoader pins them
        kw.update(accelerator_config={"non_blocking": True}, dataloader_pin_memory=True)
    if "average_tokens_across_devices" not in fields:  # transformers < 4.46: no such option (nothing gathered)
        kw.pop("average_tokens_across_devices")
    # held-out loss before the first and after the last step, inside the training loop (on the wrapped model, outside
    # the timed window). Note: a Trainer.evaluate() call before train() would leave the model unwrapped (no DDP).
    if eval_blocks:
        kw.update(eval_strategy="steps", eval_steps=max_steps, eval_on_start=True)
    else:
        kw["eval_strategy"] = "no"
    if plan.strategy != "single":
        kw["ddp_backend"] = DIST_BACKEND[backend]
        kw["ddp_find_unused_parameters"] = False
    if plan.strategy == "fsdp":
        kw["fsdp"] = "full_shard auto_wrap"
        # sync_module_states broadcasts rank 0's weights; accelerate supports it only on accelerators (every
        # rank loads the same weights and seeds LoRA identically, so it is not needed on CPU)
        kw["fsdp_config"] = {"transformer_layer_cls_to_wrap": [layer_cls] if layer_cls else None,
                             "use_orig_params": True, "version": 1, "sync_module_states": backend != "cpu"}
    if plan.strategy == "zero3":
        kw["deepspeed"] = {"zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                                                 "stage3_gather_16bit_weights_on_model_save": True},
                           "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
                           "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
                           "train_batch_size": "auto"}
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
    """

    ddp_options: dict = {}
    # Host work per optimizer step that a bare loop does not do, removed with the same effect (issue 12; measured by
    # `benchmarks/harness_overhead.py host-overhead`: 32 decoder layers with LoRA = 1065 modules, 419 parameters):
    # * Trainer calls `model.train()` before every micro-batch: a recursive walk over every module (2.5 ms of host
    #   time per call on the CPU); skipped when every module is already in training mode and none overrides train();
    # * `model.zero_grad()` after every step walks every parameter (1.9 ms): the same loop over a cached list;
    # * `_clip_grad_norm` hands `model.parameters()` (frozen weights too) to accelerate (2.3 ms against 0.6 ms): the
    #   parameters that require gradients instead (frozen ones never have a gradient, so the norm is the same).
    # Only for plain and DDP models (FSDP/DeepSpeed own these methods; FSDP swaps its parameters).
    fast_host_step: bool = True

    def _fast_host_ok(self, model) -> bool:
        import torch

        return (self.fast_host_step and isinstance(model, torch.nn.Module)
                and not getattr(self, "is_fsdp_enabled", False) and not getattr(self, "is_deepspeed_enabled", False))

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
                "modules": modules, "params": params, "trainable": [p for p in params if p.requires_grad],
                "plain_train": all(type(m).train in plain_train for m in modules),
                "plain_zero_grad": type(model).zero_grad is torch.nn.Module.zero_grad,
            }
        return cache[id(model)]

    def training_step(self, model, *args, **kwargs):
        skip_train = False
        if self._fast_host_ok(model):
            c = self._host_cache(model)
            if c["plain_zero_grad"] and "zero_grad" not in model.__dict__:
                model.__dict__["zero_grad"] = _cached_zero_grad(model, c["params"])
            skip_train = c["plain_train"] and all(m.training for m in c["modules"])
        if skip_train:  # Trainer's `model.train()` would change nothing: every module is in training mode
            model.__dict__["train"] = _already_training(model)
        try:
            loss = super().training_step(model, *args, **kwargs)
        finally:
            model.__dict__.pop("train", None)
        self.__dict__.setdefault("_step_losses", {}).setdefault(self.state.global_step, []).append(loss.detach())
        return loss

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
        if main not in inputs:
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


def _cached_zero_grad(model, params: list):
    """``nn.Module.zero_grad`` of ``model`` over its parameters listed once (``params``) instead of a module walk per
    call; ``set_to_none=False`` goes to ``nn.Module.zero_grad``."""
    def zero_grad(set_to_none: bool = True) -> None:
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
        raise ConfigError(f"lora_finetune.ddp.static_graph needs lora_finetune.train.grad_accum 1 (is {grad_accum}): "
                          "DDP's static graph fails with no_sync gradient accumulation")
    return d


def ddp_options_for(plan: Plan, ddp: dict | None, grad_accum: int = 1) -> dict:
    """The ``lora_finetune.ddp`` options that apply to the plan (DDP only; unset = DDP's default, not recorded)."""
    if plan.strategy != "ddp":
        return {}
    return check_ddp_options(ddp, grad_accum)


def loss_curve_trainer(base: type, ddp_options: dict | None = None) -> type:
    """``base`` (Trainer or GaudiTrainer) with :class:`LossCurveMixin` and the given DDP options."""
    return type(f"LossCurve{base.__name__}", (LossCurveMixin, base), {"ddp_options": dict(ddp_options or {})})


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
            if device.backend == "cuda":
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
            if device.backend == "cuda":
                import torch

                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self._events[-1][1] = ev
            else:
                device.mark_step()
                device.synchronize()
                self.samples_ms.append((time.perf_counter() - self._t0) * 1e3)

        def finish(self) -> tuple[list[float], str]:
            if device.backend == "cuda":
                import torch

                torch.cuda.synchronize()
                return [a.elapsed_time(b) for a, b in self._events if b is not None], "cuda_events"
            return self.samples_ms, "synchronize+perf_counter"

    return StepTimer()


def hpu_lazy_mode(strategy: str) -> str:
    """``PT_HPU_LAZY_MODE`` for a strategy: Study B ran Gaudi in lazy mode (1) except FSDP (0, eager/compile).
    Must be set before ``habana_frameworks`` is imported."""
    return "0" if strategy == "fsdp" else "1"


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

    from ..devices import Device
    from ..models.llm import load_causal_lm

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    s = LoraSettings(**{**spec["settings"], "target_modules": tuple(spec["settings"]["target_modules"])})
    if placement is None and threads:
        torch.set_num_threads(max(1, threads // world))
    if system.backend == "hpu":
        os.environ.setdefault("PT_HPU_LAZY_MODE", hpu_lazy_mode(plan.strategy))
    device = Device(system.backend, index=local if system.backend == "cuda" else 0)
    if system.backend == "cuda":
        torch.cuda.set_device(local)
    m: dict = {"rank": rank, "world_size": world, "threads": torch.get_num_threads(),
               "placement": placement, "cudnn_benchmark": torch.backends.cudnn.benchmark}
    tmp = tempfile.mkdtemp(prefix="accelbench_lora_")
    max_steps = s.warmup_steps + s.timed_steps
    phases = m["setup_s"] = {}  # wall seconds of each set-up phase of this rank, logged as it ends

    def phase_done(name: str, since: float, note: str = "") -> float:
        now = time.perf_counter()
        phases[name] = round(now - since, 3)
        logging.getLogger("accelbench").info("rank %d: %s%s took %.1f s", rank, name.replace("_", " "), note, now - since)
        return now

    t_phase = time.perf_counter()
    try:
        gaudi = system.backend == "hpu"
        if gaudi:  # gated: only on Gaudi systems
            from optimum.habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments
            from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

            adapt_transformers_to_gaudi()
        from transformers import Trainer, TrainingArguments, default_data_collator

        model_spec = dict(spec["model"])
        weight_dtype = "bfloat16" if plan.precision == "bf16" and system.backend != "cpu" else "float32"
        # ZeRO-3 must see its config before the model is built (zero.Init partitions at load time)
        pre_args = None
        if plan.strategy == "zero3":
            pre_args = TrainingArguments(**training_arguments_kwargs(plan, s, system.backend, tmp, max_steps, None,
                                                                     s.eval_blocks))
        device.reset_peak_memory()
        free_gib = torch.cuda.mem_get_info(local)[0] / 2**30 if system.backend == "cuda" else None
        n_config = (count_parameters(model_spec) if model_spec.get("source") == "random" and plan.strategy == "fsdp"
                    else None)
        place = random_init_place(model_spec, system.backend, plan.strategy,
                                  weights_gib(n_config, plan.precision) if n_config else None, free_gib)
        with torch.device(device.torch_device) if place in ("device", "device_then_host") else contextlib.nullcontext():
            by_module = {"init_device": device.torch_device} if place == "device_by_module" else {}
            lm = load_causal_lm(model_spec, dtype=weight_dtype, **by_module)
        if place == "device_then_host":  # FSDP shards from the host copy, as with loaded weights
            lm.model.to("cpu")
            device.empty_cache()
        t_phase = phase_done("model_build", t_phase, f" ({place.replace('_', ' ')})")
        m["model_built_on"] = place
        if model_spec.get("source") == "path":  # a folder written by `accelbench lora-model-export` says its origin
            from ..models.export import exported_info

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
        m["flop_counts"] = lora_flop_counts(model)
        need = s.per_device_batch * s.grad_accum * world * max_steps
        per_eval = s.per_device_batch * world  # whole eval batches on every rank (drop_last)
        n_eval = math.ceil(s.eval_blocks / per_eval) * per_eval
        # Gaudi keeps the mask (optimum-habana's models build their causal mask from it; not tried without)
        with_mask = system.backend == "hpu"
        train_ds, eval_ds, data_summary = build_datasets(tokenizer, spec["data"], s.seq_len, need, n_eval, with_mask)
        kw = training_arguments_kwargs(plan, s, system.backend, tmp, max_steps, layer_cls, len(eval_ds))
        ddp_options = ddp_options_for(plan, spec.get("ddp"), s.grad_accum)
        m["trainer_settings"] = {**{k: v for k, v in kw.items() if k in NO_STEP_SYNC_ARGS},
                                 "optim": kw.get("optim", "TrainingArguments default"),
                                 "batch_copy": ("non_blocking, pinned" if (kw.get("accelerator_config") or {})
                                                .get("non_blocking") else "accelerate default (blocking)"),
                                 "attention_mask_in_batch": with_mask, "ddp_options": ddp_options,
                                 "loss_curve": "LossCurveMixin (device tensors, read after training)",
                                 "fast_host_step": LossCurveMixin.fast_host_step}
        if gaudi:
            args = GaudiTrainingArguments(**kw, use_habana=True, use_lazy_mode=plan.strategy != "fsdp",
                                          distribution_strategy="ddp")
            gcfg = GaudiConfig(use_fused_adam=True, use_fused_clip_norm=True, use_torch_autocast=plan.precision == "bf16")
            trainer_cls, extra = GaudiTrainer, {"gaudi_config": gcfg}
        else:
            args = pre_args or TrainingArguments(**kw)
            trainer_cls, extra = Trainer, {}
            if plan.strategy == "single" and system.backend == "cuda" and args.n_gpu > 1:
                # A non-distributed Trainer wraps the model in nn.DataParallel over every visible GPU; `single`
                # means one device (seen on a 2-GPU H200 node: the "single" runs were DataParallel over 2 GPUs).
                args._n_gpu = 1
        t_phase = phase_done("lora_and_data", t_phase)
        timer = make_step_timer(device, world)
        trainer_cls = loss_curve_trainer(trainer_cls, ddp_options)
        trainer = trainer_cls(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                              data_collator=default_data_collator, callbacks=[timer], **extra)
        timer.trainer = trainer
        phase_done("trainer_init", t_phase)
        device.reset_peak_memory()
        t0 = time.perf_counter()
        trainer.train()
        device.synchronize()
        train_s = time.perf_counter() - t0
        phase_done("train", t0, " (wrapping, evaluations and every step)")
        samples, method = timer.finish()
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
        return {"status": "oom", "reason": f"out of device memory on rank {rank}: {msg}", "rank": rank,
                "measurements": {**m, "peak_mem_gib_before_oom": peak / 2**30 if peak else None,
                                 "requested": _requested_from_message(msg)}}
    if plan.strategy in WRAPPER and WRAPPER[plan.strategy] not in (m["wrapped_as"] or ""):
        return {"status": "unsupported", "rank": rank, "measurements": m,
                "reason": f"{plan.strategy} requested, but Trainer trained the model wrapped as {m['wrapped_as']} "
                          f"(distributed type {(m['distributed'] or {}).get('distributed_type')})"}
    m.update({
        "model": lm.info, "lora_parameters": lora_counts, "data": data_summary,
        "step_samples_ms": samples, "timing_method": method, "train_wall_s": train_s,
        "loss_curve": losses, "loss_curve_method": "per optimizer step: sum of the micro-batch losses kept on the "
                                                  "device, mean over ranks, read after training",
        "eval_loss_before": eval_before, "eval_loss_after": eval_after,
        "peak_mem_gib": peak / 2**30 if peak is not None else None,
        "peak_mem_kind": "device max_memory_allocated" if peak is not None else "host peak RSS (CPU)",
        "host_peak_rss_gib": _host_peak_rss_gib(),
        "layer_cls": layer_cls,
    })
    return {"status": "ok", "reason": None, "rank": rank, "measurements": m}


def _requested_from_message(msg: str) -> str | None:
    """The ``Tried to allocate X GiB`` part of a PyTorch OOM message, if present."""
    import re

    hit = re.search(r"[Tt]ried to allocate ([0-9.]+ ?[KMGT]i?B)", msg)
    return hit.group(1) if hit else None


# --------------------------------------------------------------------------- summary
def summarize(ranks: list[dict], plan: Plan, settings: LoraSettings, system, projection_cfg: dict) -> dict:
    """Combine per-rank measurements into the result's ``measurements``: step time Timing (rank 0 and slowest rank),
    throughput, MFU, memory per rank, loss curve, held-out loss, and the labelled projection of Study B's epoch."""
    from .. import measure

    ranks = sorted(ranks, key=lambda r: r["rank"])
    r0 = ranks[0]["measurements"]
    w = settings.warmup_steps
    per_rank = []
    for r in ranks:
        rm = r["measurements"]
        t = measure.Timing.from_samples(rm["step_samples_ms"][w:], warmup=w, method=rm["timing_method"])
        per_rank.append({"rank": r["rank"], "step_median_ms": t.median, "peak_mem_gib": rm["peak_mem_gib"],
                         "host_peak_rss_gib": rm["host_peak_rss_gib"], "timing": t.to_dict(),
                         "threads": rm.get("threads"), "placement": rm.get("placement"),
                         "setup_s": rm.get("setup_s"), "model_built_on": rm.get("model_built_on")})
    timing = per_rank[0]["timing"]
    slowest = max(p["step_median_ms"] for p in per_rank)
    world = plan.devices
    samples_per_step = settings.per_device_batch * settings.grad_accum * world
    tokens_per_step = samples_per_step * settings.seq_len
    info = r0["model"]
    fpt = flops_per_token(info["parameters"], r0["lora_parameters"]["trainable"], info["layers"] or 0,
                          info["hidden_size"] or 0, settings.seq_len, r0.get("flop_counts"))
    peak = system.peak_tflops.get(plan.precision)
    peak_total = peak * world if peak else None
    step_ms = timing["median"]
    mfu = {k: measure.throughput_and_mfu(fpt[k] * tokens_per_step, step_ms, peak_total) for k in ("6n", "lora")}
    losses = r0["loss_curve"]
    k = max(1, len(losses) // 4)
    loss = {"per_step": losses, "first_mean": sum(losses[:k]) / k, "last_mean": sum(losses[-k:]) / k,
            "eval_before": r0["eval_loss_before"], "eval_after": r0["eval_loss_after"]}
    loss["eval_decreased"] = (loss["eval_after"] < loss["eval_before"]) if loss["eval_before"] is not None else None
    return {
        "strategy": plan.strategy, "devices": world, "attention": plan.attention,
        "attn_implementation": r0["attn_implementation"], "precision": plan.precision,
        "wrapped_as": r0.get("wrapped_as"),  # the model class Trainer trained (DDP/FSDP wrapper or the peft model)
        "distributed": r0.get("distributed"),  # accelerate's distributed type, process group, DDP's options as used
        "model": info, "lora_parameters": r0["lora_parameters"], "data": r0["data"],
        "step": timing, "step_slowest_rank_median_ms": slowest,
        "samples_per_step": samples_per_step, "tokens_per_step": tokens_per_step,
        "samples_per_s": samples_per_step / (step_ms / 1e3), "tokens_per_s": tokens_per_step / (step_ms / 1e3),
        "flops_per_token": fpt, "throughput_6n": mfu["6n"], "throughput_lora": mfu["lora"],
        "peak_tflops_per_device": peak, "per_rank": per_rank,
        "threads_per_rank": [p["threads"] for p in per_rank], "cudnn_benchmark": r0.get("cudnn_benchmark"),
        "trainer_settings": r0.get("trainer_settings"),  # what keeps host syncs out of the step; DDP options
        "peak_mem_gib_max": max((p["peak_mem_gib"] or 0) for p in per_rank) if r0["peak_mem_gib"] is not None else None,
        "host_peak_rss_gib_max": max(p["host_peak_rss_gib"] for p in per_rank),
        "loss": loss, "train_wall_s": r0["train_wall_s"],
        # where the (random-init) model was built, and each set-up phase's wall seconds, slowest rank (per rank above)
        "model_built_on": r0.get("model_built_on"),
        "setup_s": {k: max((p["setup_s"] or {}).get(k, 0.0) for p in per_rank) for k in (r0.get("setup_s") or {})},
        "projection": project_epoch(step_ms, tokens_per_step, settings.seq_len, projection_cfg),
        "notes": plan.notes,
    }


def project_epoch(step_ms: float, tokens_per_step: int, seq_len: int, cfg: dict) -> dict:
    """Projected wall time of one epoch of Study B's dataset at the measured step time. A projection, not a
    measurement: ``steps = ceil(epoch_tokens / tokens_per_step)``; ``minutes = steps * step_ms / 60e3``.
    ``epoch_tokens`` = ``cfg["examples"] * cfg["tokens_per_example"]`` when both are set (else unknown: only
    minutes per million tokens are given)."""
    per_m = 1e6 / tokens_per_step * step_ms / 60e3
    out = {"label": "projection", "dataset": cfg.get("name"), "source": cfg.get("source"),
           "minutes_per_million_tokens": per_m, "seq_len": seq_len}
    ex, tpe = cfg.get("examples"), cfg.get("tokens_per_example")
    if ex and tpe:
        tokens = ex * tpe
        steps = math.ceil(tokens / tokens_per_step)
        out.update({"epoch_tokens": tokens, "steps": steps, "minutes": steps * step_ms / 60e3,
                    "method": "ceil(examples * tokens_per_example / tokens_per_step) x median step time"})
    else:
        out.update({"epoch_tokens": None, "minutes": None,
                    "method": "dataset size unknown (set lora_finetune.projection.examples and tokens_per_example)"})
    return out


# --------------------------------------------------------------------------- one run (all ranks)
def run(spec: dict, system, threads: int = 0, timeout_s: float | None = None) -> dict:
    """Plan, then run one (model, attention, strategy, devices) case on ``system``.

    ``single`` runs in this process; ``ddp``/``fsdp``/``zero3`` launch ``devices`` ranks with
    ``python -m torch.distributed.run --standalone`` running ``accelbench lora-finetune --rank-dir``; every rank
    writes its measurements to ``rank<r>.json`` and this process gathers them.

    Returns:
        ``{"status", "reason", "plan", "measurements"}``. Unsupported cases and out-of-memory (a rank's OOM or the
        weights-alone check of :func:`memory_precheck`) are returned, not raised.

    Raises:
        AccelbenchError: a rank failed for another reason (its log tail in the message).
    """
    import json
    import sys
    import tempfile

    from ..errors import AccelbenchError

    settings = LoraSettings(**{**spec["settings"], "target_modules": tuple(spec["settings"]["target_modules"])})
    plan = plan_run(spec["strategy"], spec["devices"], spec["attention"], system, settings)
    if plan.status == "ok" and system.backend != "cpu":
        n_params = count_parameters(spec["model"])
        reason = memory_precheck(n_params, plan, system.device_memory_gib)
        host = {}
        if not reason and plan.strategy == "fsdp":
            import psutil

            from .. import multinode

            per_node = multinode.node_plan(system, plan.devices, "lora_finetune.runs devices").per_node
            host = {"host_available_gib": psutil.virtual_memory().available / 2**30, "ranks_per_node": per_node}
            reason = host_memory_precheck(n_params, plan, per_node, host["host_available_gib"])
        if reason:
            return {"status": "oom", "reason": reason, "plan": plan.to_dict(),
                    "measurements": {"parameters": n_params, "weights_gib_needed": weights_gib(n_params, plan.precision),
                                     "estimate": "frozen weights only (lower bound); not run", **host}}
    if plan.status != "ok":
        return {"status": plan.status, "reason": plan.reason, "plan": plan.to_dict(), "measurements": {}}
    if plan.strategy == "single":
        ranks = [train_rank(spec, system, plan, threads)]
    else:
        from .. import launch, multinode

        layout = multinode.node_plan(system, plan.devices, "lora_finetune.runs devices")
        alloc = multinode.allocation() if layout.nodes > 1 else None
        if multinode.allocation_reason(layout, alloc):
            return {"status": "unsupported", "reason": multinode.allocation_reason(layout, alloc), "plan": plan.to_dict(),
                    "measurements": {"launch": multinode.launch_record(layout, system.backend, None)}}
        # ranks on other nodes write their rank files too: a shared folder (the run's working directory) then
        with tempfile.TemporaryDirectory(prefix="accelbench_ranks_", dir=Path.cwd() if layout.nodes > 1 else None) as rank_dir:
            worker = ["lora-finetune", "--spec", json.dumps(spec), "--rank-dir", rank_dir, "--threads", str(threads)]
            cmd, rdzv = multinode.launch_command(layout, worker, alloc)
            env = launch.rank_env(threads, layout.per_node)  # threads // ranks per node, each its own CPU block
            if system.backend == "hpu":
                env["PT_HPU_LAZY_MODE"] = hpu_lazy_mode(plan.strategy)
            returncode, output = multinode.run_tee(cmd, env=multinode.launch_env(system.backend, env), timeout=timeout_s)
            proc = subprocess.CompletedProcess(cmd, returncode, stdout=output)
            ranks = [json.loads(p.read_text()) for p in sorted(Path(rank_dir).glob("rank*.json"))]
        failed = [r for r in ranks if r["status"] != "ok"]
        if failed:
            return {"status": failed[0]["status"], "reason": failed[0]["reason"], "plan": plan.to_dict(),
                    "measurements": {"ranks": [r["measurements"] for r in failed]}}
        if proc.returncode != 0 or len(ranks) != plan.devices:
            lines = proc.stdout.splitlines()
            errors = [ln for ln in lines if "Error" in ln and "elastic" not in ln and "errors.html" not in ln]
            tail = "\n".join(errors[-5:] + lines[-10:])
            raise AccelbenchError(f"{plan.strategy} on {plan.devices} ranks failed (exit {proc.returncode}, "
                                  f"{len(ranks)} rank results):\n{tail}")
    if ranks[0]["status"] != "ok":
        return {"status": ranks[0]["status"], "reason": ranks[0]["reason"], "plan": plan.to_dict(),
                "measurements": ranks[0]["measurements"]}
    measurements = summarize(ranks, plan, settings, system, spec.get("projection", {}))
    if plan.strategy == "single":
        from .. import multinode

        measurements["launch"] = multinode.launch_record(multinode.NodePlan(1, 1, 1), system.backend, None)
    else:
        measurements["launch"] = multinode.launch_record(layout, system.backend, rdzv, proc.stdout)
    return {"status": "ok", "reason": None, "plan": plan.to_dict(), "measurements": measurements}


def rank_entry(spec: dict, system, rank_dir: str, threads: int = 0) -> None:
    """Entry point of one torchrun rank: take this rank's threads and CPUs (:func:`accelbench.launch.place_this_rank`,
    also: die with torchrun), train, then write ``<rank_dir>/rank<RANK>.json``."""
    from ..launch import place_this_rank
    from ..results import write_json_atomic

    placement = place_this_rank()
    settings = LoraSettings(**{**spec["settings"], "target_modules": tuple(spec["settings"]["target_modules"])})
    plan = plan_run(spec["strategy"], spec["devices"], spec["attention"], system, settings)
    out = train_rank(spec, system, plan, threads, placement)
    write_json_atomic(out, Path(rank_dir) / f"rank{out['rank']}.json")
    if out["status"] != "ok":  # a failed rank must end the group: torchrun then stops the ranks waiting on it
        os._exit(1)
