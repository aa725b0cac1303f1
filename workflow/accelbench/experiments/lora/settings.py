"""Study B LoRA: the settings (:class:`LoraSettings`) and the plan of one run (:func:`plan_run`), decided before any
model is loaded."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import asdict, dataclass, field

from accelbench import backends
from accelbench.core import precisions
from accelbench.errors import ConfigError

STRATEGIES = ("single", "ddp", "fsdp", "zero3")
ATTENTIONS = ("eager", "flash")
# Found by running it (accelerate 1.15, transformers 5.24): AcceleratorState turns FSDP on only for accelerator
# distributed types (MULTI_GPU/HPU/XPU/...); with CPU processes (MULTI_CPU, gloo) the FSDP request is dropped and
# Trainer wraps the model in DDP instead, so a CPU "FSDP" run would be a mislabelled DDP run.
FSDP_CPU_REASON = (
    "FSDP through transformers' Trainer needs an accelerator: accelerate {accelerate} enables FSDP only "
    "for GPU/HPU/XPU process groups; with CPU (gloo) processes it silently trains with DDP instead"
)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


@dataclass(frozen=True)
class LoraSettings:
    """Study B's LoRA and trainer settings (defaults = the paper's; see config/config.schema.yaml)."""

    r: int = 64
    alpha: int = 64
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lr: float = 3e-4
    lr_scheduler: str = "constant"  # the job files: --lr_scheduler_type constant (the warm-up ratio has no effect)
    warmup_ratio: float = 0.03
    max_grad_norm: float = 0.3
    per_device_batch: int = 2
    grad_accum: int = 2
    seq_len: int = 512
    precision: str = "bf16"  # bf16 | fp32 (bf16 falls back to fp32 where the system lacks it)
    warmup_steps: int = 2  # untimed optimizer steps
    timed_steps: int = 10  # timed optimizer steps
    eval_blocks: int = 8  # held-out blocks for the loss before/after training
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
    b = backends.get(backend)
    if not b.accelerator:
        return os.cpu_count() or 1
    return b.visible_device_count(system_devices)


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
    return backends.get(backend).flash_attention(optimum_habana_version)


def plan_run(
    strategy: str,
    devices: int,
    attention: str,
    system,
    settings: LoraSettings,
    available: int | None = None,
    run_emulated: tuple[str, ...] = (),
    probe: bool = True,
) -> Plan:
    """Decide whether a (strategy, devices, attention) case can run on ``system``; unsupported cases get a reason.

    Rules: ``single`` needs exactly 1 device, the others at least 2; ``devices`` must not exceed the devices
    available (:func:`available_devices`); ``fsdp`` needs an accelerator (:data:`FSDP_CPU_REASON`); ``zero3`` needs
    ``deepspeed``; bf16 falls back to fp32 on systems without it, and where this host only emulates it, slowly
    (a CPU without AVX512-BF16/AMX: :func:`accelbench.core.precisions.emulated_reason`), unless ``run_emulated`` (config
    ``run_emulated_precisions``) lists it (noted). ``probe`` False (torch-free: :func:`.verdicts.known_unsupported`)
    leaves that probe out, noted: the plan then only says whether the case can run.
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"lora_finetune strategy {strategy!r} unknown; allowed: {', '.join(STRATEGIES)}")
    ops = backends.get(system.backend)
    ohv = _version("optimum-habana") if ops.optimum_habana else None
    impl = attention_implementation(attention, system.backend, ohv)
    notes = []
    precision = settings.precision
    if precision == "bf16" and not system.supports("bf16"):
        precision = "fp32"
        notes.append(f"{system.name} has no native bf16: fp32 used")
    emulated = precisions.emulated_reason(system, precision, tuple(run_emulated)) if probe else None
    if not probe and precision != "fp32":
        notes.append(f"{precision}: whether this host only emulates it was not probed")
    if emulated:
        precision = "fp32"
        notes.append(f"fp32 used: {emulated}")
    base = dict(
        strategy=strategy,
        devices=devices,
        attention=attention,
        attn_implementation=impl,
        precision=precision,
        notes=notes,
    )
    from accelbench.cluster.multinode import job_limit_reason, node_plan

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
        what = f"{system.backend} devices" if ops.accelerator else "CPU cores (one gloo process each)"
        return Plan(
            **base, status="unsupported", reason=f"{devices} devices requested, {system.name} has {available} {what}"
        )
    if strategy == "fsdp" and not ops.accelerator:
        return Plan(**base, status="unsupported", reason=FSDP_CPU_REASON.format(accelerate=_version("accelerate")))
    if strategy == "zero3" and importlib.util.find_spec("deepspeed") is None:
        return Plan(**base, status="unsupported", reason="deepspeed not installed")
    if ops.optimum_habana and importlib.util.find_spec("optimum") is None:
        return Plan(**base, status="unsupported", reason="optimum-habana not installed")
    return Plan(**base)


def hpu_lazy_mode(strategy: str) -> str:
    """``PT_HPU_LAZY_MODE`` for a strategy: Study B ran Gaudi in lazy mode (1) except FSDP (0, eager/compile).
    Must be set before ``habana_frameworks`` is imported."""
    return "0" if strategy == "fsdp" else "1"
