"""Study B LoRA: the model side of a run: peft LoRA adapters, the attention implementation, where a (random-init)
model is built, and the memory pre-checks that record an OOM before anything is loaded."""

from __future__ import annotations

import math
from pathlib import Path

from accelbench import backends
from accelbench.errors import ConfigError
from accelbench.experiments.lora.settings import LoraSettings, Plan
from accelbench.models.llm import parameter_count


def lora_config(s: LoraSettings):
    """peft ``LoraConfig`` of Study B (rank, alpha, dropout, q_proj/v_proj, no bias, causal LM)."""
    from peft import LoraConfig

    return LoraConfig(
        r=s.r,
        lora_alpha=s.alpha,
        lora_dropout=s.dropout,
        target_modules=list(s.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


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
        raise ConfigError(
            f"lora_finetune.train.target_modules: no nn.Linear, Conv1D or nn.Embedding named "
            f"{list(s.target_modules)} in {type(model).__name__}"
        )
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
    """Parameters of a model spec's architecture, no weights loaded: a local checkpoint's from its safetensors
    headers (the shapes of the tensors saved, tied weights once, as ``save_pretrained`` writes them; no import of
    transformers, which takes 5-7 s on 2 cores before a multi-rank job's ranks start), else counted on the meta
    device; None if the architecture cannot be read offline (the run then reports the loaded count)."""
    saved = _saved_parameters(model_spec)
    if saved is not None:
        return saved
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


def _saved_parameters(model_spec: dict) -> int | None:
    """Elements of every tensor in ``<path>/*.safetensors`` (sharded checkpoints: all shards) for a ``path`` spec
    without ``config_from``; None for other specs, a folder without safetensors files or an unreadable header."""
    if model_spec.get("source") == "random" or model_spec.get("config_from") or not model_spec.get("path"):
        return None
    files = sorted(Path(model_spec["path"]).glob("*.safetensors"))
    if not files:
        return None
    from safetensors import SafetensorError, safe_open

    total = 0
    try:
        for file in files:
            with safe_open(str(file), framework="numpy") as fh:
                for name in fh.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    total += math.prod(fh.get_slice(name).get_shape())
    except (OSError, ValueError, SafetensorError):
        return None
    return total


def random_init_place(
    model_spec: dict,
    backend: str,
    strategy: str,
    weights_gib_full: float | None,
    free_gib: float | None,
    share: float = 0.8,
    rank: int = 0,
) -> str:
    """Where a model is built: ``"device"``, ``"device_then_host"``, ``"device_by_module"``, ``"zero3_init"``,
    ``"meta"`` or ``"host"``.

    FSDP on an accelerator builds the model on rank 0 only (Study B's ``fsdp_cpu_ram_efficient_loading: true`` with
    ``fsdp_sync_module_states: true``): every other rank builds it on the meta device (no memory), FSDP materialises
    those ranks' shards with ``to_empty`` (accelerate's ``param_init_fn``) and broadcasts rank 0's weights and
    buffers. So a node holds one host copy, not one per rank (Llama-3.3-70B on a 2x H200 node: 131 GiB, not 263).

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
    if strategy == "fsdp" and rank != 0 and backends.get(backend).accelerator:
        return "meta"
    if model_spec.get("source") != "random" or not backends.get(backend).device_weight_init:
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
        return (
            f"the {plan.precision} weights alone need {need:.1f} GiB per device under {plan.strategy} on "
            f"{plan.devices} device(s), more than the {device_memory_gib} GiB of one device"
        )
    return None


def host_memory_precheck(
    n_params_config: int | None, plan: Plan, ranks_per_node: int, host_available_gib: float | None
) -> str | None:
    """OOM reason when FSDP's per-rank host copies of the full weights cannot fit the node's memory (None otherwise).

    ``ranks_per_node`` is the number of host copies of a node: 1 with rank-0-only building (what the job passes:
    :func:`random_init_place` builds the other ranks on the meta device), the ranks of the node otherwise (before
    rank-0-only building: Llama-3.3-70B in bf16 on 2 ranks of a 2x H200 node needed 262.8 GiB of its 256 GiB).
    Other strategies build on the device (or partition under zero.Init).
    """
    if plan.strategy != "fsdp" or not n_params_config or not host_available_gib:
        return None
    per_rank = weights_gib(n_params_config, plan.precision)
    need = ranks_per_node * per_rank
    if need > host_available_gib:
        return (
            f"host memory: under fsdp a node holds {ranks_per_node} host cop{'y' if ranks_per_node == 1 else 'ies'} "
            f"of the full {plan.precision} weights ({per_rank:.1f} GiB each) before sharding them, "
            f"{need:.1f} GiB in all, more than the {host_available_gib:.1f} GiB available"
        )
    return None


def cpu_memory_precheck(
    n_params_config: int | None, plan: Plan, host_available_gib: float | None, bound: str = "MemAvailable"
) -> str | None:
    """OOM reason when the frozen weights alone of the processes of a CPU run cannot fit the host memory this job may
    still take (None otherwise): ``single`` and DDP hold one full copy per rank on the host (the device is the host).
    The same certain lower bound as :func:`memory_precheck`: the kernel would otherwise kill the job while loading
    (the 8B preset in a 4 GiB limit: killed after 32 s, an empty log, no result)."""
    if not n_params_config or host_available_gib is None:
        return None
    copies = plan.devices if plan.strategy in ("single", "ddp") else 1
    per_rank = weights_gib(n_params_config, plan.precision)
    need = copies * per_rank
    if need > host_available_gib:
        return (
            f"host memory: the {plan.precision} weights alone need {need:.1f} GiB on the CPU ({copies} "
            f"cop{'y' if copies == 1 else 'ies'} of {per_rank:.1f} GiB under {plan.strategy}), more than the "
            f"{host_available_gib:.1f} GiB this job may still take ({bound})"
        )
    return None
