"""The measurements of one quantized model (:func:`.methods.run_method`): perplexity and its evaluation time, the
forward benchmark, sizes and compression, the accuracy tasks, board energy and peak device memory; and the tokenized
text they run on (:class:`MethodText`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from accelbench.backends.device import Device
from accelbench.experiments.llm_quant.accuracy import accuracy_tasks
from accelbench.experiments.llm_quant.evaluate import Evaluator, throughput
from accelbench.experiments.llm_quant.layers import decoder_layers, layer_linears, model_sizes
from accelbench.measure import clocks, energy


@dataclass(frozen=True)
class MethodText:
    """The tokenized text one method job measures on.

    ``vocab_size``: the tokenizer's vocabulary (the forward benchmark draws random token ids below it);
    ``test_chunks``: ``[chunks, chunk_len]`` int64 token ids (the perplexity); ``calib_chunks``: the same for INC
    FP8's calibration, or None; ``tokenizer``: the tokenizer (the accuracy tasks; None: none run).
    """

    vocab_size: int
    test_chunks: torch.Tensor
    calib_chunks: torch.Tensor | None = None
    tokenizer: object = None


def autocast_context(device: Device, dtype: str | None):
    """``torch.autocast`` on the job's device in ``dtype`` (Study B's real INT8 run: FP16), or a no-op."""
    import contextlib

    if not dtype:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.torch_device.type, dtype=getattr(torch, dtype))


def unquantized_sizes(model) -> dict:
    """Sizes before quantization: ``{"before": model_sizes(model), "decoder_linear_bytes_fp32", "param_bytes_fp32"}``
    (bytes; FP32 = 4 bytes per element)."""
    return {
        "before": model_sizes(model),
        "decoder_linear_bytes_fp32": 4
        * sum(m.weight.numel() for layer in decoder_layers(model) for m in layer_linears(layer).values()),
        "param_bytes_fp32": 4 * sum(p.numel() for p in model.parameters()),
    }


def measure_quantized(model, text: MethodText, run, device: Device, unquantized: dict, applied: dict) -> dict:
    """The measurements of ``model`` once quantized per ``run`` (:class:`.methods.MethodRun`): perplexity on
    ``text.test_chunks``, the forward benchmark and the accuracy tasks (under ``run.autocast``), sizes against
    ``unquantized`` (:func:`unquantized_sizes`), ``applied`` (what the method did; its byte counts move to ``size``),
    energy and the device's peak memory (GiB)."""
    size_after = model_sizes(model)
    ev = Evaluator(model, text.test_chunks, device, batch_size=run.eval_batch)
    with autocast_context(device, run.autocast):
        ppl, eval_s = ev.timed_perplexity()
        tp = throughput(model, device, text.vocab_size, seed=run.seed, **run.throughput)
        forward_energy, forward_clocks = tp.pop("energy"), tp.pop("clocks")
        accuracy = (
            accuracy_tasks(model, text.tokenizer, run.accuracy, device, seed=run.seed)
            if run.accuracy and run.accuracy.get("tasks") and text.tokenizer is not None
            else {}
        )
    if run.autocast:
        applied["autocast"] = run.autocast
    m = {
        "perplexity": {
            "value": ppl,
            "unit": "ppl",
            "tokens": ev.tokens,
            "chunks": int(text.test_chunks.shape[0]),
            "chunk_len": int(text.test_chunks.shape[1]),
        },
        "eval_time": {"value": eval_s, "unit": "s"},
        "eval_tokens_per_s": {
            "value": ev.tokens / eval_s if eval_s else None,
            "unit": "tokens/s",
            "of": "predicted tokens / evaluation wall time (Study B's throughput)",
        },
        "forward_benchmark": {
            **tp,
            "unit": "tokens/s",
            "of": "forward passes on random token ids (batch x seq_len), not Study B's throughput",
        },
        **_size_measurements(run.method, unquantized, size_after, applied),
        "applied": {k: v for k, v in applied.items() if not k.startswith("decoder_linear_bytes")},
        "accuracy": accuracy,
        "energy": _energy(ev, eval_s, forward_energy, tp),
        # SM clock, clock-event reasons: the forward benchmark's steps, the evaluation (accelbench.measure.clocks)
        "clocks": clocks.report({"forward": forward_clocks, "evaluation": ev.clocks}, "forward"),
    }
    device_peak = device.peak_memory_bytes()
    if device_peak is not None:
        m["peak_mem_gib"] = device_peak / 2**30
    return m


def _size_measurements(method: str, unquantized: dict, size_after: dict, applied: dict) -> dict:
    """``size``, ``compression_x`` (decoder linear weights vs. FP32) and ``model_compression_x`` (all parameters vs.
    FP32): simulated storage for ``fake`` (unchanged parameters + packed decoder weights), else bytes in memory."""
    lin_fp32, all_fp32 = unquantized["decoder_linear_bytes_fp32"], unquantized["param_bytes_fp32"]
    lin_after = applied.get("decoder_linear_bytes_after", size_after["decoder_linear_bytes"])
    # simulated: stored size = unchanged parameters + packed decoder weights; real: bytes in memory
    model_after = size_after["param_bytes"] - size_after["decoder_linear_bytes"] + lin_after
    return {
        "size": {
            "unit": "bytes",
            "before": unquantized["before"],
            "after": size_after,
            "decoder_linear_bytes_fp32": lin_fp32,
            "decoder_linear_bytes_after": lin_after,
            "how": (
                "packed codes + FP16 scales (simulated storage)"
                if method == "fake"
                else "bytes of the quantized tensors in memory (tensor subclasses flattened)"
            ),
        },
        "compression_x": {
            "value": lin_fp32 / lin_after if lin_after else None,
            "unit": "x",
            "of": "decoder-layer linear weights vs. their FP32 bytes (Study B's compression)",
        },
        "model_compression_x": {
            "value": all_fp32 / model_after,
            "unit": "x",
            "of": "all parameters vs. FP32 (embeddings, lm_head, norms kept in the model dtype)",
        },
    }


def _energy(ev: Evaluator, eval_s: float, forward_energy, tp: dict) -> dict:
    """Board energy (:mod:`accelbench.measure.energy`): J per 1k evaluated tokens (the evaluation: one window) and
    per 1k forward-benchmark tokens, tokens/s/W of the evaluation."""
    return energy.report(
        {"evaluation": ev.energy, "forward": forward_energy},
        "evaluation",
        {
            "per_1k_eval_tokens": ("evaluation", ev.tokens, "J/1k evaluated tokens", 1000, "measured"),
            "per_1k_forward_tokens": ("forward", tp["tokens_per_step"], "J/1k tokens (forward)", 1000, "measured"),
        },
        {"eval_tokens_per_s_per_w": (ev.tokens / eval_s if eval_s else None, "evaluation", "tokens/s/W")},
        step_ms=eval_s * 1e3,
    )
