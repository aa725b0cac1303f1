"""llm_quant.methods: fp32 / fake / torchao on a tiny random Llama end to end, and which torchao errors read as
``unsupported`` (a bug must fail the job)."""

import math

import pytest
import torch

from accelbench.backends.device import Device
from accelbench.experiments.llm_quant import methods
from accelbench.experiments.llm_quant.evaluate import Evaluator, token_chunks
from accelbench.experiments.llm_quant.layers import decoder_layers, layer_linears
from accelbench.experiments.llm_quant.methods import (
    MethodRun,
    MethodText,
    run_method,
    torchao_probe,
    torchao_unsupported_reason,
)
from accelbench.experiments.llm_quant.quantize import expected_nbytes
from accelbench.experiments.llm_quant.sensitivity import parse_bitset
from llm_quant_helpers import chunks, sensitivity_result, tiny_llama  # noqa: F401 (module-scoped fixtures)


@pytest.mark.parametrize(
    "method,bitset", [("fp32", "none"), ("fake", "16_8_4"), ("fake", "8_4_4"), ("torchao", "16_8_8")]
)
def test_methods_on_tiny_llama(tiny_llama, chunks, method, bitset):
    import copy

    model = copy.deepcopy(tiny_llama)
    sens = sensitivity_result(model, chunks)
    run = MethodRun(
        method=method,
        bitset=bitset,
        chunk_len=32,
        eval_tokens=96,
        group_size=128,
        clustering="percentile",
        metric="prune",
        throughput={"batch": 1, "seq_len": 16, "warmup": 1, "repeat": 2},
    )
    out = run_method(model, MethodText(256, chunks), sens, run, Device("cpu"))
    assert out["status"] == "ok", out["reason"]
    m = out["measurements"]
    assert m["perplexity"]["tokens"] == 3 * 31 and m["perplexity"]["value"] > 1
    assert m["forward_benchmark"]["forward_step"]["count"] == 2 and m["forward_benchmark"]["tokens_per_s"] > 0
    assert m["eval_tokens_per_s"]["value"] == pytest.approx(m["perplexity"]["tokens"] / m["eval_time"]["value"])
    layers = decoder_layers(model)
    if method == "fp32":
        assert m["compression_x"]["value"] == 1.0
    elif method == "fake":
        bits = out["allocation"]["layer_bits"]
        assert set(bits) == set(parse_bitset(bitset))
        expected = sum(
            expected_nbytes(tuple(lin.weight.shape), b, 128)
            for layer, b in zip(layers, bits)
            for lin in layer_linears(layer).values()
        )
        assert m["size"]["decoder_linear_bytes_after"] == expected
        assert m["compression_x"]["value"] == pytest.approx(m["size"]["decoder_linear_bytes_fp32"] / expected)
    else:
        bits = out["allocation"]["layer_bits"]
        n8 = sum(
            lin.weight.numel() for layer, b in zip(layers, bits) if b == 8 for lin in layer_linears(layer).values()
        )
        assert n8 > 0 and m["compression_x"]["value"] > 1.0  # int8 codes replaced FP32 weights
        w = layer_linears(layers[bits.index(8)])["q_proj"].weight
        assert hasattr(w, "__tensor_flatten__") and type(w) not in (torch.Tensor, torch.nn.Parameter)  # torchao tensor


def test_study_b_int8_dequantize_then_matmul(tiny_llama, chunks):
    """Study B's real A100 path (int8_dq): INT8 codes + FP16 group scales (FP16 weights for 16-bit layers, 4-bit
    layers as INT8), dequantized before a plain matmul under FP16 autocast; bytes from the stored buffers."""
    import copy

    model = copy.deepcopy(tiny_llama)
    sens = sensitivity_result(model, chunks)
    ref = copy.deepcopy(model)
    run = MethodRun(
        method="int8_dq",
        bitset="16_8_4",
        chunk_len=32,
        eval_tokens=96,
        group_size=128,
        clustering="buckets",
        metric="prune",
        throughput={"batch": 1, "seq_len": 8, "warmup": 0, "repeat": 1},
        autocast="float16",
    )
    out = run_method(model, MethodText(256, chunks), sens, run, Device("cpu"))
    assert out["status"] == "ok", out["reason"]
    m, bits = out["measurements"], out["allocation"]["layer_bits"]
    assert m["applied"]["autocast"] == "float16" and m["applied"]["layer_bits_applied"] == [
        16 if b == 16 else 8 for b in bits
    ]
    expected = sum(
        expected_nbytes(tuple(lin.weight.shape), 16 if b == 16 else 8, 128)
        for layer, b in zip(decoder_layers(ref), bits)
        for lin in layer_linears(layer).values()
    )
    assert m["size"]["decoder_linear_bytes_after"] == expected
    i8 = bits.index(8)
    mod = layer_linears(decoder_layers(ref)[i8])["q_proj"]
    dq = methods.DequantLinear(mod, 8, 128)
    assert dq.weight_int8.dtype == torch.int8 and dq.scales_fp16.dtype == torch.float16
    x = torch.randn(3, mod.in_features)
    with torch.no_grad():
        assert torch.allclose(dq(x), mod(x), atol=2e-2 * float(mod.weight.abs().max()) * mod.in_features**0.5)
    assert m["perplexity"]["value"] == pytest.approx(Evaluator(ref, chunks, Device("cpu")).perplexity(), rel=0.05)


def test_torchao_int4_reports_unsupported_on_cpu(tiny_llama, chunks):
    import copy

    if torchao_probe(4, Device("cpu"), torch.float32, 128) is None:  # pragma: no cover - a torchao with CPU int4
        pytest.skip("this torchao runs int4 on CPU")
    model = copy.deepcopy(tiny_llama)
    run = MethodRun(
        method="torchao",
        bitset="8_4_4",
        chunk_len=32,
        eval_tokens=96,
        group_size=128,
        clustering="kmeans",
        metric="prune",
        throughput={"batch": 1, "seq_len": 8, "warmup": 0, "repeat": 1},
    )
    out = run_method(model, MethodText(256, chunks), sensitivity_result(model, chunks), run, Device("cpu"))
    assert out["status"] == "unsupported" and "int4" in out["reason"] and "torchao" in out["reason"]


def test_local_path_fp32_checkpoint_is_the_paper_faithful_route(tmp_path):
    """``source: path`` with a real fp32 checkpoint on disk (here a tiny random Llama saved with save_pretrained)
    loads the weights exactly as stored, says so, carries no quantized-file label, and its fp32 row is a real
    FP32 baseline (compression 1.0 of real fp32 bytes)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from accelbench.models.llm import load_causal_lm

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
    )
    saved = LlamaForCausalLM(cfg).float().eval()
    saved.save_pretrained(tmp_path / "tiny")
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,")}  # one token per character
    vocab["[UNK]"] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(tmp_path / "tiny")

    lm = load_causal_lm({"source": "path", "path": str(tmp_path / "tiny"), "name": "tiny-llama"}, dtype="float32")
    assert lm.info["weights"] == "pretrained" and "as stored" in lm.info["weight_format"]
    assert lm.info["label"] == "tiny-llama (fp32)" and "quantized_file" not in lm.info
    for (name, p), (_, ref) in zip(lm.model.named_parameters(), saved.named_parameters()):
        assert p.dtype == torch.float32 and torch.equal(p, ref), name
    ids = lm.tokenizer("the quick brown fox jumps over the lazy dog. " * 4)["input_ids"]
    chunks = token_chunks(ids, chunk_len=32, max_tokens=None)
    run = MethodRun(
        method="fp32",
        bitset="none",
        chunk_len=32,
        eval_tokens=None,
        group_size=128,
        clustering="percentile",
        metric="prune",
        throughput={"batch": 1, "seq_len": 16, "warmup": 0, "repeat": 1},
    )
    out = run_method(lm.model, MethodText(len(lm.tokenizer), chunks), {}, run, Device("cpu"))
    m = out["measurements"]
    assert out["status"] == "ok" and m["compression_x"]["value"] == 1.0
    assert m["size"]["decoder_linear_bytes_fp32"] == m["size"]["decoder_linear_bytes_after"]  # real fp32 storage
    assert math.isfinite(m["perplexity"]["value"]) and m["perplexity"]["chunk_len"] == 32


@pytest.mark.parametrize(
    "exc,unsupported",
    [
        (ImportError("Requires mslk >= 1.0.0"), True),  # torchao 0.18 int4 on a CPU
        (NotImplementedError("_weight_int4pack_mm is not implemented for CPU"), True),
        (RuntimeError("Could not run 'aten::_weight_int4pack_mm' with arguments from the 'CPU' backend."), True),
        (AssertionError("Torch not compiled with CUDA enabled"), True),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x64 and 128x64)"), False),
        (TypeError("apply_torchao() got an unexpected keyword argument 'bits'"), False),
        (KeyError("q_proj"), False),
        (AttributeError("'NoneType' object has no attribute 'weight'"), False),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB; requires more memory"), False),
    ],
)
def test_torchao_only_genuine_unsupported_errors(exc, unsupported):
    reason = torchao_unsupported_reason(exc, "int4 weight-only on cpu")
    assert (reason is not None) == unsupported
    if unsupported:
        assert reason.startswith("torchao ") and str(exc).splitlines()[0] in reason  # the library's own reason


def test_sabotage_bug_in_torchao_path_fails_the_job(tiny_llama, chunks, monkeypatch):
    """Sabotage: a bug in our own torchao code (a TypeError) must fail the job, not read as `unsupported`;
    a missing kernel package is `unsupported` with torchao's reason."""
    import copy

    run = MethodRun(
        method="torchao",
        bitset="16_8_8",
        chunk_len=32,
        eval_tokens=96,
        group_size=128,
        clustering="kmeans",
        metric="prune",
        throughput={"batch": 1, "seq_len": 8, "warmup": 0, "repeat": 1},
    )
    model = copy.deepcopy(tiny_llama)
    sens = sensitivity_result(model, chunks)

    def bug(*a, **kw):
        raise TypeError("unexpected keyword argument 'bits'")

    monkeypatch.setattr(methods, "apply_torchao", bug)
    with pytest.raises(TypeError):
        run_method(model, MethodText(256, chunks), sens, run, Device("cpu"))

    def missing(*a, **kw):
        raise ImportError("Requires mslk >= 1.0.0")

    monkeypatch.setattr(methods, "apply_torchao", missing)
    out = run_method(model, MethodText(256, chunks), sens, run, Device("cpu"))
    assert out["status"] == "unsupported" and "Requires mslk" in out["reason"]
    monkeypatch.setattr(methods, "torchao_config", bug)  # a bug inside the probe fails too
    with pytest.raises(TypeError):
        torchao_probe(8, Device("cpu"), torch.float32, 128)


def test_eval_mfu_peak_follows_the_autocast_dtype():
    """int8_dq (Study B's INT8 path) runs under FP16 autocast on an FP32 model: its MFU is against the FP16 peak
    (against FP32's, the H200 run read 1.24); without autocast the model's dtype picks the peak."""
    from accelbench.measure.flops import eval_peak

    peaks = {"fp32": 67.0, "bf16": 989.4, "fp16": 989.4}
    assert eval_peak(peaks, "float32", "float16") == ("float16", 989.4)
    assert eval_peak(peaks, "float32", None) == ("float32", 67.0)
    assert eval_peak(peaks, "bfloat16", None) == ("bfloat16", 989.4)
    assert eval_peak({}, "float32", None) == ("float32", None)


def test_model_sizes_counts_the_bytes_torch_save_writes_without_keeping_them(tiny_llama):
    import io

    from accelbench.experiments.llm_quant.layers import model_sizes

    buf = io.BytesIO()
    torch.save(tiny_llama.state_dict(), buf)
    sizes = model_sizes(tiny_llama)
    assert sizes["serialized_bytes"] == buf.getbuffer().nbytes > sizes["decoder_linear_bytes"] > 0
    assert sizes["param_bytes"] == sum(p.numel() * p.element_size() for p in tiny_llama.parameters())
