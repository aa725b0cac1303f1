"""The quantization methods of one job and their measurement: ``fp32`` (baseline), ``fake`` (simulated, packed
storage), ``torchao`` (real weight-only int8/int4) and ``inc_fp8`` (Intel Neural Compressor FP8 on Gaudi).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from accelbench import backends
from accelbench.backends.device import Device
from accelbench.errors import ConfigError, DataError
from accelbench.experiments.llm_quant.layers import decoder_layers, layer_linears, tensor_nbytes
from accelbench.experiments.llm_quant.measurements import MethodText, measure_quantized, unquantized_sizes
from accelbench.experiments.llm_quant.quantize import SIXTEEN_BIT, quantize_
from accelbench.experiments.llm_quant.sensitivity import assign_bits, fp8_modules, parse_bitset

METHODS = ("fp32", "fake", "torchao", "int8_dq", "inc_fp8")


def apply_fake(model, layer_bits: list[int], group_size: int, sixteen_bit: str = "fp16") -> dict:
    """Simulated quantization of each decoder layer's linear weights at its bits; bytes before/after
    (``sixteen_bit``: how 16-bit layers are stored, :data:`.quantize.SIXTEEN_BIT`)."""
    before = after = 0
    for layer, bits in tqdm(list(zip(decoder_layers(model), layer_bits)), desc="fake quantization"):
        lin = layer_linears(layer)
        before += sum(tensor_nbytes(m.weight) for m in lin.values())
        after += quantize_(lin, bits, group_size, sixteen_bit)
    return {
        "decoder_linear_bytes_before": before,
        "decoder_linear_bytes_after": after,
        "compression_x": before / after if after else None,
        "sixteen_bit": SIXTEEN_BIT[sixteen_bit],
    }


class DequantLinear(torch.nn.Module):
    """Study B's real INT8 module on the A100 (``RealQuantizedLinearGroupWise`` of the authors' ``PMPQ_*_A100_real``
    scripts, rewritten here): 16-bit layers keep an FP16 weight; 8-bit layers an INT8 weight ``[out, in]`` with
    FP16 scales ``[out, ceil(in / group_size)]`` (symmetric, max|w| / 127 per group of input features). The forward
    dequantizes the weight to the input's dtype, then runs a plain matmul (under FP16 autocast in the job)."""

    def __init__(self, linear: torch.nn.Linear, bits: int, group_size: int):
        super().__init__()
        from accelbench.experiments.llm_quant.quantize import quantize_groupwise

        self.in_features, self.out_features, self.bits, self.group_size = (
            linear.in_features,
            linear.out_features,
            bits,
            group_size,
        )
        w = linear.weight.detach()
        if bits >= 16:
            self.register_buffer("weight_fp16", w.to(torch.float16))
        else:
            qt = quantize_groupwise(w, 8, group_size)
            self.register_buffer("weight_int8", qt.codes.view(torch.int8).reshape(qt.shape))
            self.register_buffer("scales_fp16", qt.scales)
        self.register_buffer("bias_fp16", None if linear.bias is None else linear.bias.detach().to(torch.float16))

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight ``[out, in]`` in ``dtype``."""
        if self.bits >= 16:
            return self.weight_fp16.to(dtype)
        sc = self.scales_fp16.repeat_interleave(self.group_size, dim=1)[:, : self.in_features]
        return (self.weight_int8.to(torch.float16) * sc).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = None if self.bias_fp16 is None else self.bias_fp16.to(x.dtype)
        return torch.nn.functional.linear(x, self.dequantized(x.dtype), b)


def apply_int8_dq(model, layer_bits: list[int], group_size: int) -> dict:
    """Replace each decoder layer's projections by :class:`DequantLinear` at the layer's bits (4 -> 8: the authors'
    real path has FP16 and INT8 only); bytes are those of the new buffers."""
    before = after = 0
    for layer, bits in tqdm(list(zip(decoder_layers(model), layer_bits)), desc="int8 dequantize-then-matmul"):
        for name, mod in list(layer_linears(layer).items()):
            before += tensor_nbytes(mod.weight)
            new = DequantLinear(mod, 16 if bits >= 16 else 8, group_size)
            after += sum(tensor_nbytes(b) for n, b in new.named_buffers() if not n.startswith("bias"))
            parent = next(m for m in layer.modules() if any(c is mod for c in m.children()))
            setattr(parent, name, new)
    return {
        "decoder_linear_bytes_before": before,
        "decoder_linear_bytes_after": after,
        "layer_bits_applied": [16 if b >= 16 else 8 for b in layer_bits],
        "how": "INT8 weights + FP16 per-group scales (FP16 for 16-bit layers), dequantized before the matmul",
    }


# What "unsupported here" looks like when torchao (or the dispatcher under it) lacks a kernel, dtype or backend:
# ImportError (a kernel package such as mslk/fbgemm-gpu missing), NotImplementedError, and RuntimeError/
# AssertionError/ValueError whose message says so (the dispatcher's "Could not run ... with arguments from the
# 'CPU' backend", "not implemented for 'Float'", "only supports bfloat16", "Torch not compiled with CUDA").
# Anything else (TypeError, KeyError, AttributeError, a CUDA error, ...) is a bug here and fails the job.
_UNSUPPORTED_MESSAGE = re.compile(
    r"not implemented for|not supported|unsupported|could not run|no kernel|requires? |only supports?|"
    r"not compiled with|is only available|needs? (cuda|a gpu|bfloat16|bf16)|expected .*dtype",
    re.I,
)


def torchao_unsupported_reason(exc: BaseException, what: str) -> str | None:
    """The reason string if ``exc`` means torchao cannot run ``what`` here (missing kernel, dtype or
    backend), else None (the caller re-raises: a bug must not read as a hardware limitation)."""
    import torchao

    msg = str(exc).splitlines()[0] if str(exc) else ""
    genuine = isinstance(exc, (ImportError, NotImplementedError)) or (
        isinstance(exc, (RuntimeError, AssertionError, ValueError))
        and not isinstance(exc, torch.OutOfMemoryError)
        and bool(_UNSUPPORTED_MESSAGE.search(msg))
    )
    return f"torchao {torchao.__version__} {what}: {type(exc).__name__}: {msg}" if genuine else None


def torchao_probe(bits: int, device: Device, dtype: torch.dtype, group_size: int) -> str | None:
    """None if torchao's ``bits``-bit weight-only quantization runs here, else the reason (its error).

    Raises:
        Exception: any error that does not mean "unsupported here" (:func:`torchao_unsupported_reason`).
    """
    lin = torch.nn.Sequential(torch.nn.Linear(group_size * 2, 64, bias=False)).to(device.torch_device, dtype)
    try:
        from torchao.quantization import quantize_ as ao_quantize_

        ao_quantize_(lin, torchao_config(bits, group_size, device.backend))
        lin(torch.randn(2, group_size * 2, dtype=dtype, device=device.torch_device))
    except Exception as exc:
        reason = torchao_unsupported_reason(exc, f"int{bits} weight-only on {device.backend} with {dtype}")
        if reason is None:
            raise
        return reason
    return None


def torchao_config(bits: int, group_size: int, backend: str):
    """torchao config object for weight-only int8 (per row) or int4 (group-wise, tinygemm layout on CUDA)."""
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig

    if bits == 8:
        return Int8WeightOnlyConfig()
    if bits == 4:
        if backends.get(backend).torchao_int4_tinygemm:
            try:  # torchao >= 0.14 names the tinygemm layout; older versions use it by default
                return Int4WeightOnlyConfig(group_size=group_size, int4_packing_format="tile_packed_to_4d")
            except TypeError:
                pass
        return Int4WeightOnlyConfig(group_size=group_size)
    raise ValueError(f"torchao weight-only: no config for {bits} bits")


def int4_group_size(in_features: int, group_size: int) -> int:
    """torchao int4 needs in_features divisible by the group: the largest of group_size, 64, 32 that divides."""
    for g in (group_size, 64, 32):
        if in_features % g == 0:
            return g
    raise ValueError(f"in_features {in_features} is not divisible by 32")


def apply_torchao(model, layer_bits: list[int], group_size: int, backend: str) -> dict:
    """torchao weight-only quantization per decoder layer (16 = left in the model dtype). Returns the group
    sizes used for int4 (torchao needs in_features divisible by the group)."""
    from torchao.quantization import quantize_ as ao_quantize_

    groups, targets = {}, {}
    for i, (layer, bits) in enumerate(zip(decoder_layers(model), layer_bits)):
        if bits == 16:
            continue
        for name, mod in layer_linears(layer).items():
            g = int4_group_size(mod.in_features, group_size) if bits == 4 else group_size
            if bits == 4 and g != group_size:
                groups[f"{i}.{name}"] = g
            targets.setdefault((bits, g), set()).add(id(mod))
    for (bits, g), ids in tqdm(sorted(targets.items()), desc="torchao"):
        ao_quantize_(model, torchao_config(bits, g, backend), filter_fn=lambda m, fqn, ids=ids: id(m) in ids)
    return {"int4_group_size_fallbacks": groups}


def apply_inc_fp8(
    model, fp8_names: list[str], calib: torch.Tensor, device: Device, stats_dir: str, inc: dict | None = None
) -> dict:
    """Intel Neural Compressor FP8 (E4M3) on Gaudi: measure (maxabs) on calibration chunks, then quantize
    only ``fp8_names`` (Study B's Gaudi2 flow; the rest stays BF16). Imported only on ``hpu``.

    ``inc`` (config ``llm_quant.inc``): ``scale_method`` (ours ``maxabs_hw``; Study B's scripts
    ``maxabs_hw_opt_weight`` with ``input_backoff`` 0.25 and ``weight_backoff`` 0.5)."""
    from neural_compressor.torch.quantization import FP8Config, convert, finalize_calibration, prepare

    inc = inc or {}
    scale_method = inc["scale_method"]
    extra = {}
    if inc.get("input_backoff") is not None or inc.get("weight_backoff") is not None:
        extra["scale_params"] = {
            "input_backoff": float(inc.get("input_backoff", 0.25)),
            "weight_backoff": float(inc.get("weight_backoff", 0.5)),
        }

    common = {
        "fp8_config": "E4M3",
        "allowlist": {"types": [], "names": fp8_names},
        "blocklist": {"types": [], "names": ["lm_head"]},
        "dump_stats_path": stats_dir,
    }
    model = prepare(model, FP8Config(mode="MEASURE", observer="maxabs", **common))
    with torch.inference_mode():
        for ids in calib:
            model(input_ids=ids[None].to(device.torch_device), use_cache=False)
            device.mark_step()
    finalize_calibration(model)
    model = convert(model, FP8Config(mode="QUANTIZE", scale_method=scale_method, **extra, **common))
    return {
        "fp8_modules": fp8_names,
        "calibration_chunks": int(calib.shape[0]),
        "scale_method": scale_method,
        **extra,
        "calibration_split": inc["calibration_split"],
    }


@dataclass
class MethodRun:
    """Settings of one method job (see config/config.schema.yaml, ``llm_quant``)."""

    method: str
    bitset: str
    chunk_len: int
    eval_tokens: int | None
    group_size: int
    clustering: str
    metric: str
    throughput: dict
    eval_batch: int = 1
    calibration_tokens: int | None = None
    seed: int = 0
    accuracy: dict | None = None  # config llm_quant.accuracy (lm-evaluation-harness tasks); None = none
    sixteen_bit: str = "fp16"  # fake: 16-bit layers as FP16 (ours) or int16 + group scales (Study B), SIXTEEN_BIT
    autocast: str | None = None  # int8_dq: compute dtype of the evaluation's autocast (Study B: float16)
    inc: dict | None = None  # inc_fp8: config llm_quant.inc (scale method, backoffs, calibration split)


def run_method(model, text: MethodText, sens: dict, run: MethodRun, device: Device, stats_dir: str = ".") -> dict:
    """Quantize ``model`` (already on ``device``) per ``run`` and measure it on ``text``
    (:func:`.measurements.measure_quantized`): perplexity, throughput, sizes and, with ``run.accuracy`` and a
    ``text.tokenizer``, the accuracy tasks (:func:`.accuracy.accuracy_tasks`) on the quantized model in memory
    (``measurements["accuracy"][task]``). ``sens``: the sensitivity job's measurements; ``stats_dir``: where INC FP8
    writes its calibration statistics.

    Returns:
        ``{"status", "reason", "measurements", "allocation"}``; status ``unsupported`` when the
        method's kernels are not available on this system (reason = the library's error).

    Raises:
        DataError: the sensitivity result has another number of layers than the model.
        ConfigError: an unknown method.
    """
    n_layers = len(decoder_layers(model))
    alloc, layer_bits = _allocation(sens, run, n_layers)
    unquantized = unquantized_sizes(model)
    applied: dict = {}
    if run.method == "fake":
        applied = apply_fake(model, layer_bits, run.group_size, run.sixteen_bit)
    elif run.method == "int8_dq":
        applied = apply_int8_dq(model, layer_bits, run.group_size)
    elif run.method == "torchao":
        applied, unsupported = _torchao_or_unsupported(model, layer_bits, run.group_size, device, alloc)
        if unsupported:
            return unsupported
    elif run.method == "inc_fp8":
        names = fp8_modules(sens, n_layers)
        alloc = {"fp8_modules": names, "bf16_rest": True}
        applied = apply_inc_fp8(model, names, text.calib_chunks, device, stats_dir, run.inc)
    elif run.method != "fp32":
        raise ConfigError(f"llm_quant method {run.method!r} unknown ({' | '.join(METHODS)})")
    m = measure_quantized(model, text, run, device, unquantized, applied)
    return {"status": "ok", "reason": None, "measurements": m, "allocation": alloc}


def _allocation(sens: dict, run: MethodRun, n_layers: int) -> tuple[dict, list[int] | None]:
    """``(allocation, bits per decoder layer)`` of the methods that follow the sensitivity ranking (fake, torchao,
    int8_dq); ``({}, None)`` for the others.

    Raises:
        DataError: the ranking has another number of layers than the model.
    """
    if run.method not in ("fake", "torchao", "int8_dq"):
        return {}, None
    bits = parse_bitset(run.bitset)
    ranks = sens["allocation"][run.metric][run.clustering]
    if len(ranks) != n_layers:
        raise DataError(f"sensitivity result has {len(ranks)} layers, the model {n_layers}")
    layer_bits = assign_bits(ranks, bits)
    alloc = {
        "bits": bits,
        "metric": run.metric,
        "clustering": run.clustering,
        "cluster_rank": ranks,
        "layer_bits": layer_bits,
    }
    return alloc, layer_bits


def _torchao_or_unsupported(model, layer_bits: list[int], group_size: int, device: Device, alloc: dict):
    """``(applied, None)`` after torchao's weight-only quantization of ``model``, or ``({}, the unsupported result)``
    where a kernel, dtype or backend of this torchao build is missing (probed per bit width first); any other error
    is raised."""
    dtype = next(model.parameters()).dtype
    for b in sorted(set(layer_bits) - {16}):
        reason = torchao_probe(b, device, dtype, group_size)
        if reason:
            return {}, {"status": "unsupported", "reason": reason, "measurements": {}, "allocation": alloc}
    try:
        return apply_torchao(model, layer_bits, group_size, device.backend), None
    except Exception as exc:  # only a kernel/dtype/backend this torchao build lacks is "unsupported"
        reason = torchao_unsupported_reason(exc, f"weight-only quantization on {device.backend}")
        if reason is None:
            raise
        return {}, {"status": "unsupported", "measurements": {}, "allocation": alloc, "reason": reason}
