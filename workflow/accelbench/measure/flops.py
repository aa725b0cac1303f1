"""FLOPs and MFU, in one module with their sources.

* :func:`count_flops`: FLOPs of one call counted by ``torch.utils.flop_counter.FlopCounterMode`` (Study A's U-Net
  step, SR3's training step): matmul/convolution/attention FLOPs, 2 per multiply-add, forward and backward;
  elementwise operations are not counted, as is usual for MFU.
* :func:`throughput_and_mfu`: achieved TFLOP/s and MFU against the system file's dense datasheet peak.
* :func:`forward_flops_per_token`: inference FLOPs per token of a decoder LM (PaLM, Chowdhery et al. 2022, App. B:
  ``2 N + 4 L d S``), for the quantization study's throughput.
* :func:`lora_flop_counts` and :func:`flops_per_token`: a LoRA training step, by PaLM's ``6 N + 12 L d S`` (an upper
  bound for LoRA) and by the matmuls a LoRA step executes (checked against ``FlopCounterMode`` in the tests).
"""

from __future__ import annotations

from collections.abc import Callable


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of one call of ``fn`` counted by ``torch.utils.flop_counter.FlopCounterMode``.

    Counts matmul/convolution/attention FLOPs (2 per multiply-add) for forward and backward;
    elementwise operations are not counted, as is usual for MFU.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def throughput_and_mfu(flops: int | None, step_ms: float, peak_tflops: float | None) -> dict:
    """Achieved TFLOP/s = flops / step time; MFU = achieved / peak (dense datasheet peak of the
    math mode in use, from the system file). Either is None when its inputs are unknown."""
    if not flops or step_ms <= 0:
        return {"tflop_per_s": None, "mfu": None, "peak_tflops": peak_tflops}
    achieved = flops / (step_ms * 1e-3) / 1e12
    return {"tflop_per_s": achieved, "mfu": achieved / peak_tflops if peak_tflops else None, "peak_tflops": peak_tflops}


def forward_flops_per_token(n_params: int, layers: int, hidden: int, seq_len: int) -> dict:
    """Inference (forward) FLOPs per token of a decoder LM at sequence length ``seq_len``: ``2 N + 4 L d S``, a third
    of PaLM's training count ``6 N + 12 L d S`` (Chowdhery et al. 2022, App. B; nanoGPT ``estimate_mfu``): 2 FLOPs
    per weight, and the attention scores and values (``QK^T``, ``PV``) at full, not causal-halved, length.

    Returns:
        ``{"value", "formula"}`` (FLOPs per token).
    """
    return {"value": 2 * n_params + 4 * layers * hidden * seq_len, "formula": "2*N + 4*L*d*S (PaLM App. B, forward)"}


def lora_flop_counts(model) -> dict:
    """Matmul sizes of a LoRA-wrapped causal LM that :func:`flops_per_token` needs (read from module attributes, so
    also valid for sharded FSDP/ZeRO-3 parameters). Per token, in multiply-adds:

    * ``frozen_matmul``: ``in x out`` of every frozen ``nn.Linear`` (projections, MLP, LM head). Embedding lookups
      are not matmuls (0 FLOPs) and norms are left out.
    * ``frozen_first_layer_qkv``: the first decoder layer's q/k/v projections, whose input (the frozen embedding
      output) needs no gradient: forward only.
    * ``adapter``: LoRA's ``r x (in + out)`` per adapted module; ``adapter_first_layer_a``: ``r x in`` of the first
      layer's adapters (their input needs no gradient).
    * ``layers``, ``attention_width`` (heads x head dim) and which of q/k/v the first layer adapts (for the
      attention gradients that layer skips).
    """
    import torch

    counts = {"frozen_matmul": 0, "frozen_first_layer_qkv": 0, "adapter": 0, "adapter_first_layer_a": 0}
    first = ".layers.0."
    qkv = ("q_proj", "k_proj", "v_proj")
    adapted_first = set()
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        mm = mod.in_features * mod.out_features
        if ".lora_A." in name or ".lora_B." in name:
            counts["adapter"] += mm
            owner = name.split(".lora_")[0].split(".")[-1]
            if first in name and owner in qkv:
                adapted_first.add(owner)
                if ".lora_A." in name:
                    counts["adapter_first_layer_a"] += mm
            continue
        if any(p.requires_grad for p in mod.parameters(recurse=False)):
            continue  # a trainable base layer is not LoRA's case (counted nowhere: 6N covers it)
        counts["frozen_matmul"] += mm
        owner = name.removesuffix(".base_layer").split(".")[-1]
        if first in name and owner in qkv:
            counts["frozen_first_layer_qkv"] += mm
    cfg = model.config
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    counts.update(
        layers=cfg.num_hidden_layers, attention_width=heads * head_dim, first_layer_adapted=sorted(adapted_first)
    )
    return counts


def flops_per_token(
    n_params: int, n_trainable: int, layers: int, hidden: int, seq_len: int, counts: dict | None = None
) -> dict:
    """Training FLOPs per token (2 FLOPs per multiply-add) by two named formulas.

    * ``6n``: PaLM's model FLOPs (Chowdhery et al. 2022, App. B; nanoGPT ``estimate_mfu``):
      ``6 N + 12 L d S`` (forward 2N, backward 4N, attention scores and values at sequence length S). The
      conventional MFU, an **upper bound** for LoRA: frozen weights never compute weight gradients.
    * ``lora``: the matmuls a LoRA step executes, from :func:`lora_flop_counts` (``counts``)::

          2 M + 2 (M - M_qkv0)            frozen weights: forward + input gradient (none for layer 0's q/k/v)
        + 6 A - 2 A_0                     adapters: forward, weight and input gradient (none into layer 0)
        + 12 L a S - (8 - b_0) a S        attention (QK^T and PV) at sequence length S, forward + backward;
                                          layer 0 computes only the gradients its adapters need (b_0 of 8)

      where M = frozen matmul weights (no embedding lookup), A = adapter weights, a = heads x head dim. Checked
      against ``torch.utils.flop_counter.FlopCounterMode`` on a tiny LoRA Llama (tests). Attention is counted
      full (not causal-halved), as FlopCounterMode counts the eager path. Without ``counts`` (no model at hand)
      the approximation ``4 (N - N_trainable) + 6 N_trainable + 12 L d S`` is used and named so.
    """
    attn = 12 * layers * hidden * seq_len
    out = {"6n": 6 * n_params + attn, "formula_6n": "6*N + 12*L*d*S (PaLM App. B; upper bound for LoRA)"}
    if counts is None:
        out.update(
            lora=4 * (n_params - n_trainable) + 6 * n_trainable + attn,
            formula_lora="4*N_frozen + 6*N_trainable + 12*L*d*S (approximation: no module sizes)",
        )
        return out
    m, m0 = counts["frozen_matmul"], counts["frozen_first_layer_qkv"]
    a, a0 = counts["adapter"], counts["adapter_first_layer_a"]
    width, n_layers = counts["attention_width"], counts["layers"]
    ad = set(counts["first_layer_adapted"])
    b0 = 2 * (("q_proj" in ad) or ("k_proj" in ad)) + 2 * ("q_proj" in ad) + 2 * ("k_proj" in ad) + 2 * ("v_proj" in ad)
    attention = 12 * n_layers * width * seq_len - (8 - b0) * width * seq_len
    out.update(
        lora=2 * m + 2 * (m - m0) + 6 * a - 2 * a0 + attention,
        lora_terms={
            "frozen_forward": 2 * m,
            "frozen_input_grad": 2 * (m - m0),
            "adapters": 6 * a - 2 * a0,
            "attention": attention,
        },
        formula_lora="2*M + 2*(M - M_qkv0) + 6*A - 2*A_0 + 12*L*a*S - (8 - b_0)*a*S "
        "(frozen: forward + input grad; adapters: full; attention at S)",
    )
    return out


PEAK_KEY = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # compute dtype -> system file's peak key


def eval_peak(peaks: dict, dtype: str, autocast: str | None) -> tuple[str, float | None]:
    """(compute dtype, its peak TFLOP/s from the system file's ``peak_tflops``) of an evaluation: the autocast dtype
    where one is set (Study B's INT8 path runs its matmuls under FP16 autocast on an FP32 model: an FP32 peak gave
    it an MFU of 1.24 on the H200), else the model's dtype (torch name, e.g. ``float32``). Peak None if unknown."""
    compute = autocast or dtype
    return compute, peaks.get(PEAK_KEY.get(compute, compute))
