"""Study B quantization: quantizer, byte counts, sensitivity, allocation, methods on a tiny random Llama."""

import math

import sys

import pytest
import torch

from accelbench.devices import Device
from accelbench.errors import ConfigError, DataError
from accelbench.experiments import llm_quant as q


@pytest.fixture(scope="module")
def tiny_llama():
    """A randomly initialised 4-layer Llama (hidden 64: rows shorter than a 128-group)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def chunks():
    g = torch.Generator().manual_seed(1)
    return q.token_chunks(torch.randint(0, 256, (200,), generator=g), chunk_len=32, max_tokens=96)


# --------------------------------------------------------------------------- quantizer
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("shape", [(8, 256), (5, 200), (3, 64)])
def test_quantizer_round_trip_within_error_bound(bits, shape):
    torch.manual_seed(0)
    w = torch.randn(shape) * 0.05
    w[0, :3] = torch.tensor([1.0, -1.0, 0.0])  # outliers and an exact zero
    qt = q.quantize_groupwise(w, bits, group_size=128)
    back = q.dequantize(qt)
    assert back.shape == w.shape
    scale = qt.scales.float().repeat_interleave(128, dim=1)[:, : shape[1]]
    err = (w - back).abs()
    # |w - deq| <= scale/2, plus the FP16 rounding of the scale (relative 2^-11) times the largest code
    assert torch.all(err <= scale / 2 + w.abs() * 2**-10 + 1e-8)
    codes_max = q.qmax(bits)
    assert err.max() <= w.abs().max() / codes_max  # and never more than one step
    assert back[0, 2] == 0.0


def test_quantizer_rejects_unknown_bits():
    with pytest.raises(ValueError, match="4 or 8"):
        q.quantize_groupwise(torch.randn(2, 8), 3)


@pytest.mark.parametrize("bits,group,shape,expected", [
    (8, 128, (256, 256), 256 * 256 + 256 * 2 * 2),
    (4, 128, (256, 256), 256 * 256 // 2 + 256 * 2 * 2),
    (4, 64, (256, 256), 256 * 256 // 2 + 256 * 4 * 2),
    (4, 128, (10, 576), 10 * 576 // 2 + 10 * 5 * 2),  # 576 = 4.5 groups -> 5 scales per row
    (8, 128, (3, 100), 300 + 3 * 1 * 2),
])
def test_byte_counts_from_the_stored_tensors(bits, group, shape, expected):
    qt = q.quantize_groupwise(torch.randn(shape), bits, group)
    assert qt.nbytes() == expected == q.expected_nbytes(shape, bits, group)


def test_fake_quantize_16_and_32_bits():
    w = torch.randn(4, 8)
    w16, b16 = q.fake_quantize(w, 16)
    assert b16 == 4 * 8 * 2 and torch.equal(w16, w.half().float())
    w32, b32 = q.fake_quantize(w, 32)
    assert b32 == 4 * 8 * 4 and torch.equal(w32, w)


# --------------------------------------------------------------------------- sensitivity
def test_prefix_reuse_is_exact_and_untouched_layer_has_zero_sensitivity(tiny_llama, chunks):
    ev = q.Evaluator(tiny_llama, chunks, Device("cpu"), reuse_prefix=True)
    ev.cache_prefix()
    base = ev.perplexity()
    for i in range(4):
        assert ev.perplexity(start_layer=i) == base
    sens = q.sensitivity_map(tiny_llama, ev, ["prune", "quant4"], prune_amount=0.0, group_size=128, submodules="none")
    # pruning 0% leaves every layer untouched: exactly zero change
    assert [r["prune"] for r in sens["layers"]] == [0.0] * 4


def test_sensitivity_restores_weights_and_sees_changes(tiny_llama, chunks):
    before = {k: v.clone() for k, v in tiny_llama.state_dict().items()}
    ev = q.Evaluator(tiny_llama, chunks, Device("cpu"), reuse_prefix=True)
    sens = q.sensitivity_map(tiny_llama, ev, ["prune", "quant4"], 0.3, 128, "per_type")
    after = tiny_llama.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(r["prune"] != 0.0 for r in sens["layers"])
    assert {r["module"] for r in sens["submodules"]} == set(q.SUBMODULES)
    # the cached-prefix result equals a full forward pass with the same layer pruned
    layer = q.decoder_layers(tiny_llama)[2]
    params = dict(layer.named_parameters())
    full = q.Evaluator(tiny_llama, chunks, Device("cpu"), reuse_prefix=False)
    with q.perturbed(params):
        q.prune_(params, 0.3)
        assert math.isclose(full.perplexity(), sens["layers"][2]["prune_ppl"], rel_tol=1e-6)


def test_prune_zeroes_the_smallest_fraction():
    p = torch.nn.Parameter(torch.arange(1.0, 11.0))
    q.prune_({"p": p}, 0.3)
    assert p.tolist() == [0, 0, 0, 4, 5, 6, 7, 8, 9, 10]


# --------------------------------------------------------------------------- allocation
@pytest.mark.parametrize("method", q.CLUSTERINGS)
def test_allocation_is_deterministic_and_ranked(method):
    scores = [0.1, 5.0, 0.2, 0.15, 2.0, 9.0, 0.05, 2.5, 0.3]
    a, b = q.cluster_sensitivities(scores, method), q.cluster_sensitivities(list(scores), method)
    assert a == b and set(a) == {0, 1, 2}
    assert a[5] == 2 and a[6] == 0  # most / least sensitive
    means = [sum(s for s, r in zip(scores, a) if r == k) / a.count(k) for k in range(3)]
    assert means == sorted(means)


def test_percentile_buckets_are_equal_sized():
    ranks = q.cluster_sensitivities(list(range(9)), "percentile")
    assert ranks == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_assign_bits_and_bitsets():
    assert q.assign_bits([2, 1, 0, 0], [16, 8, 4]) == [16, 8, 4, 4]
    assert q.assign_bits([2, 1, 0], [8, 4, 4]) == [8, 4, 4]
    assert q.assign_bits([1, 0], [16, 8, 4]) == [16, 4]
    assert q.parse_bitset("16_8_4") == [16, 8, 4]
    with pytest.raises(ConfigError, match="16, 8 or 4"):
        q.parse_bitset("4_8_16")
    with pytest.raises(ConfigError):
        q.cluster_sensitivities([1, 2, 3], "dbscan")


def test_fewer_distinct_values_than_clusters():
    assert q.cluster_sensitivities([1.0, 1.0, 1.0], "kmeans") == [0, 0, 0]


# --------------------------------------------------------------------------- methods (tiny random Llama, end to end)
def _sens(model, chunks, submodules="none"):
    ev = q.Evaluator(model, chunks, Device("cpu"), reuse_prefix=True)
    s = q.sensitivity_map(model, ev, ["prune"], 0.3, 128, submodules)
    s["allocation"] = q.allocations(s["layers"], ["prune"])
    return s


@pytest.mark.parametrize("method,bitset", [("fp32", "none"), ("fake", "16_8_4"), ("fake", "8_4_4"), ("torchao", "16_8_8")])
def test_methods_on_tiny_llama(tiny_llama, chunks, method, bitset):
    import copy

    model = copy.deepcopy(tiny_llama)
    sens = _sens(model, chunks)
    run = q.MethodRun(method=method, bitset=bitset, chunk_len=32, eval_tokens=96, group_size=128,
                      clustering="percentile", metric="prune", throughput={"batch": 1, "seq_len": 16, "warmup": 1, "repeat": 2})
    out = q.run_method(model, 256, chunks, None, sens, run, Device("cpu"))
    assert out["status"] == "ok", out["reason"]
    m = out["measurements"]
    assert m["perplexity"]["tokens"] == 3 * 31 and m["perplexity"]["value"] > 1
    assert m["forward_benchmark"]["forward_step"]["count"] == 2 and m["forward_benchmark"]["tokens_per_s"] > 0
    assert m["eval_tokens_per_s"]["value"] == pytest.approx(m["perplexity"]["tokens"] / m["eval_time"]["value"])
    layers = q.decoder_layers(model)
    if method == "fp32":
        assert m["compression_x"]["value"] == 1.0
    elif method == "fake":
        bits = out["allocation"]["layer_bits"]
        assert set(bits) == set(q.parse_bitset(bitset))
        expected = sum(q.expected_nbytes(tuple(lin.weight.shape), b, 128)
                       for layer, b in zip(layers, bits) for lin in q.layer_linears(layer).values())
        assert m["size"]["decoder_linear_bytes_after"] == expected
        assert m["compression_x"]["value"] == pytest.approx(m["size"]["decoder_linear_bytes_fp32"] / expected)
    else:
        bits = out["allocation"]["layer_bits"]
        n8 = sum(lin.weight.numel() for layer, b in zip(layers, bits) if b == 8 for lin in q.layer_linears(layer).values())
        assert n8 > 0 and m["compression_x"]["value"] > 1.0  # int8 codes replaced FP32 weights
        w = q.layer_linears(layers[bits.index(8)])["q_proj"].weight
        assert hasattr(w, "__tensor_flatten__") and type(w) not in (torch.Tensor, torch.nn.Parameter)  # torchao tensor


def test_torchao_int4_reports_unsupported_on_cpu(tiny_llama, chunks):
    import copy

    if q.torchao_probe(4, Device("cpu"), torch.float32, 128) is None:  # pragma: no cover - a torchao with CPU int4
        pytest.skip("this torchao runs int4 on CPU")
    model = copy.deepcopy(tiny_llama)
    run = q.MethodRun(method="torchao", bitset="8_4_4", chunk_len=32, eval_tokens=96, group_size=128,
                      clustering="kmeans", metric="prune", throughput={"batch": 1, "seq_len": 8, "warmup": 0, "repeat": 1})
    out = q.run_method(model, 256, chunks, None, _sens(model, chunks), run, Device("cpu"))
    assert out["status"] == "unsupported" and "int4" in out["reason"] and "torchao" in out["reason"]


def test_fp8_split_is_half_of_the_mlp_modules(tiny_llama, chunks):
    sens = _sens(tiny_llama, chunks, "per_layer")
    names = q.fp8_modules(sens, 4)
    assert len(names) == 6 and all(".mlp." in n for n in names)
    low = sorted((r["prune"], r["layer"], r["module"]) for r in sens["submodules"] if r["module"] in q.MLP_SUBMODULES)
    assert set(names) == {f"model.layers.{i}.mlp.{m}" for _, i, m in low[:6]}


# --------------------------------------------------------------------------- data and errors
def test_pydoc_splits_are_deterministic_and_disjoint():
    text, info = q.load_text({"source": "pydoc"})
    again, _ = q.load_text({"source": "pydoc"})
    assert text == again and set(text) == {"calibration", "validation", "test"}
    assert len(set(info["fingerprints"].values())) == 3 and all(len(t) > 50_000 for t in text.values())


def test_missing_wikitext_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="WikiText-2 not found at"):
        q.load_text({"source": "wikitext2", "path": str(tmp_path / "nowhere")})
    with pytest.raises(DataError, match="llm_quant.data.path"):
        q.load_text({"source": "wikitext2", "path": None})


def test_token_chunks():
    c = q.token_chunks(list(range(100)), 32, None)
    assert c.shape == (3, 32) and c[1, 0] == 32
    assert q.token_chunks(list(range(100)), 512, 40).shape == (1, 40)
    with pytest.raises(DataError, match="too short"):
        q.token_chunks([1, 2], 8, None)


def test_reference_table_parses_published_numbers():
    from accelbench.aggregate.study_b_quant import read_reference

    ref, source = read_reference("resources/reference/study_b_quantization.csv")
    assert "Voyager_Gaudi_Benchmarks" in source and len(ref) == 10
    row = ref[(ref.system == "a100") & (ref.method == "fake") & (ref.bitset == "8_4_4")].iloc[0]
    assert row.perplexity == 12.94 and row.compression_x == 5.93


# --------------------------------------------------------------------------- accuracy tasks (lm-evaluation-harness)
ENDINGS = [["boils the water", "eats the pot", "flies away", "sings a song"],
           ["opens the door", "reads the map", "paints the wall", "climbs the tree"],
           ["rides the bike", "cuts the bread", "drinks the tea", "plays the drum"],
           ["jumps the fence", "writes the note", "cleans the floor", "throws the ball"]]


@pytest.fixture(scope="module")
def word_tokenizer():
    """A word-level tokenizer (256 ids, tiny_llama's vocabulary size) over the words of the HellaSwag-format set."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for e in ENDINGS for s in e for w in s.split()} |
                   {"Cooking", "Sports", "A", "man", "woman", "pours", "water", "into", "pot", "then", "He", "She",
                    "walks", "to", "the", "park", "and", "Then", ":", ".", "he", "she"})
    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", "[EOS]"] + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")


def _hellaswag_records(labels):
    """Records in HellaSwag's format (Rowan/hellaswag: ind, activity_label, ctx_a, ctx_b, ctx, endings, label as str)."""
    recs = []
    for i, label in enumerate(labels):
        ctx_a, ctx_b = ("A man pours water into the pot.", "he") if i % 2 else ("A woman walks to the park.", "then she")
        recs.append({"ind": i, "activity_label": "Cooking" if i % 2 else "Sports", "ctx_a": ctx_a, "ctx_b": ctx_b,
                     "ctx": f"{ctx_a} {ctx_b}", "endings": ENDINGS[i % 4], "source_id": f"test~{i}", "split": "val",
                     "split_type": "indomain", "label": str(label)})
    return recs


def _own_choice(model, tok, rec):
    """Argmax of the summed log-likelihood of each ending (lm-eval's `acc`), computed here without lm-eval."""
    query = f"{rec['activity_label']}: {rec['ctx_a']} {rec['ctx_b'].capitalize()}"
    ctx = tok(query, add_special_tokens=False)["input_ids"]
    scores = []
    for ending in rec["endings"]:
        whole = tok(query + " " + ending, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([whole])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids[:, :-1]).logits.float(), -1)[0]
        scores.append(sum(float(logp[p - 1, whole[p]]) for p in range(len(ctx), len(whole))))
    return max(range(len(scores)), key=scores.__getitem__)


def test_accuracy_tasks_score_the_model_in_memory(tiny_llama, word_tokenizer, tmp_path):
    """lm-eval reads a HellaSwag-format folder and scores the in-memory model: its `acc` equals our own
    log-likelihood argmax (labels = the model's choice on half of the documents, another ending on the rest)."""
    import json

    model = tiny_llama
    n = 8
    first = _hellaswag_records([0] * n)
    own = [_own_choice(model, word_tokenizer, r) for r in first]
    labels = [c if i % 2 == 0 else (c + 1) % 4 for i, c in enumerate(own)]
    folder = tmp_path / "hellaswag"
    folder.mkdir()
    (folder / "validation.jsonl").write_text("\n".join(json.dumps(r) for r in _hellaswag_records(labels)))
    acc = {"tasks": ["hellaswag", "boolq"], "num_fewshot": 0, "limit": None, "batch_size": 3,
           "data": {"hellaswag": str(folder), "boolq": str(tmp_path / "no_boolq_here")}}
    out = q.accuracy_tasks(model, word_tokenizer, acc, Device("cpu"))
    hs = out["hellaswag"]
    assert hs["status"] == "ok" and hs["metric"] == "acc_norm" and hs["samples"] == n and hs["num_fewshot"] == 0
    assert hs["metrics"]["acc"] == pytest.approx(0.5)
    assert 0.0 <= hs["value"] <= 1.0 and "local folder" in hs["data"] and hs["harness"].startswith("lm_eval")
    assert out["boolq"]["status"] == "unsupported" and "no_boolq_here" in out["boolq"]["reason"]


def test_accuracy_task_without_local_data_is_unsupported_and_never_fetched(tiny_llama, word_tokenizer, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty_cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_home"))
    out = q.accuracy_tasks(tiny_llama, word_tokenizer, {"tasks": ["boolq", "no_such_task_xyz"], "limit": 2, "data": {}},
                           Device("cpu"))
    assert out["boolq"]["status"] == "unsupported" and "datasets cache" in out["boolq"]["reason"]
    assert "Offline" in out["boolq"]["reason"] or "offline" in out["boolq"]["reason"]
    assert out["no_such_task_xyz"]["status"] == "unsupported" and "no task" in out["no_such_task_xyz"]["reason"]


def test_accuracy_tasks_without_lm_eval_installed_are_unsupported(tiny_llama, word_tokenizer, monkeypatch):
    """An image without lm-eval's dependencies (found on the H200 node: no `datasets`) records each task as
    `unsupported` with the missing module named, instead of failing the method job and losing its perplexity."""
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    out = q.accuracy_tasks(tiny_llama, word_tokenizer, {"tasks": ["hellaswag", "boolq"], "limit": 2}, Device("cpu"))
    assert set(out) == {"hellaswag", "boolq"}
    for task in out.values():
        assert task["status"] == "unsupported" and "datasets" in task["reason"] and "lm-evaluation-harness" in task["reason"]


def test_accuracy_flows_into_the_quantization_table(tmp_path):
    """Measured accuracy (and `unsupported` with its reason) and the published HellaSwag/BoolQ numbers reach the table."""
    import json

    import pandas as pd

    from accelbench.aggregate import study_b_quant
    from accelbench.results import write_result

    acc = {"hellaswag": {"status": "ok", "metric": "acc_norm", "value": 0.375, "samples": 8},
           "boolq": {"status": "unsupported", "reason": "boolq: no local data (Hugging Face datasets cache (offline))"}}
    m = {"perplexity": {"value": 20.0, "tokens": 93}, "compression_x": {"value": 1.0}, "model_compression_x": {"value": 1.0},
         "throughput": {"tokens_per_s": 100.0}, "eval_tokens_per_s": {"value": 100.0}, "eval_time": {"value": 1.0}, "model": {"weights": "random init"},
         "accuracy": acc}
    from accelbench import provenance, results

    env = provenance.collect("cpu")
    paths = []
    for method, bitset, status in (("fp32", "none", "ok"), ("fake", "8_4_4", "ok"), ("torchao", "8_4_4", "unsupported")):
        cfg = {"system": {"name": "cpu"}, "model": "tiny", "method": method, "bitset": bitset}
        meas = dict(m, accuracy={**acc, "hellaswag": {**acc["hellaswag"], "value": 0.25}}) if method == "fake" else m
        r = results.make_result(q.EXPERIMENT, status, cfg, env, meas if status == "ok" else {},
                                None if status == "ok" else "torchao int4 needs CUDA")
        paths.append(results.write_result(r, tmp_path / method / bitset / "result.json"))
    study_b_quant.aggregate(paths, "resources/reference/study_b_quantization.csv", tmp_path / "agg")
    table = pd.read_csv(tmp_path / "agg" / "table.csv")
    ours = table[table["source"] == "measured"].set_index("method")
    assert float(ours.loc["fp32", "hellaswag_acc_pct"]) == pytest.approx(37.5) and ours.loc["fp32", "hellaswag_n"] == 8
    assert float(ours.loc["fake", "hellaswag_acc_pct"]) == pytest.approx(25.0)
    assert ours.loc["fp32", "boolq_acc_pct"] == "unsupported" and "boolq" in ours.loc["fp32", "accuracy_reason"]
    assert pd.isna(ours.loc["torchao", "hellaswag_acc_pct"])  # the method itself did not run (its reason: `reason`)
    pub = table[(table["source"] == "published") & (table["system"] == "a100")].set_index(["method", "bitset"])
    assert float(pub.loc[("fake", "8_4_4"), "hellaswag_acc_pct"]) == 56.45
    assert float(pub.loc[("fake", "8_4_4"), "boolq_acc_pct"]) == 51.87
    assert "HellaSwag acc_norm" in (tmp_path / "agg" / "table.md").read_text()


def test_published_throughput_is_eval_tokens_over_eval_time():
    """Study B's throughput column = evaluation tokens / evaluation time: throughput x eval time is the same
    ~338.4k tokens (WikiText-2's test split) in all ten published columns. Our column must be the same kind."""
    from accelbench.aggregate.study_b_quant import read_reference

    ref, _ = read_reference("resources/reference/study_b_quantization.csv")
    tokens = ref["throughput_tok_per_s"].astype(float) * ref["eval_time_s"].astype(float)
    assert ((tokens / 338.4e3 - 1).abs() < 0.01).all(), tokens.tolist()


def _quant_result(tmp_path, method, bitset, info, eval_s=2.0, fwd=999.0):
    from accelbench import provenance, results

    env = provenance.collect("cpu")
    cfg = {"system": {"name": "cpu"}, "model": "smollm2_135m", "method": method, "bitset": bitset}
    m = {"perplexity": {"value": 20.0, "tokens": 1022, "chunk_len": 512}, "eval_time": {"value": eval_s},
         "eval_tokens_per_s": {"value": 1022 / eval_s}, "forward_benchmark": {"tokens_per_s": fwd},
         "compression_x": {"value": 1.0}, "model_compression_x": {"value": 1.0}, "model": info,
         "data": {"name": "CPython pydoc_data.topics", "part": "test"}}
    path = tmp_path / method / bitset / "result.json"
    results.write_result(results.make_result("llm_quant", "ok", cfg, env, m, None), path)
    return path


def test_quant_table_names_the_q4_baseline_and_uses_eval_throughput(tmp_path):
    """The bundled model's baseline is named for what it is (Q4_1 weights dequantized, fp32 compute), the throughput
    column is evaluation tokens / evaluation time (not the forward benchmark), and the caption says what the
    Q4_1 baseline does to the comparison."""
    import pandas as pd

    from accelbench.aggregate import study_b_quant
    from accelbench.models.llm import SMOLLM2_WEIGHT_FORMAT, model_label

    gguf = {"name": "SmolLM2-135M-Instruct", "weights": "pretrained", "weight_format": SMOLLM2_WEIGHT_FORMAT,
            "quantized_file": "Q4_1", "label": model_label("SmolLM2-135M-Instruct", "float32", "Q4_1")}
    paths = [_quant_result(tmp_path, "fp32", "none", gguf), _quant_result(tmp_path, "fake", "8_4_4", gguf, eval_s=4.0)]
    out = tmp_path / "agg"
    study_b_quant.aggregate(paths, "resources/reference/study_b_quantization.csv", out)
    df = pd.read_csv(out / "table.csv")
    ours = df[df["source"] == "measured"].set_index("method")
    assert ours.loc["fp32", "label"] == "SmolLM2-135M-Instruct (Q4_1 weights dequantized, fp32 compute)"
    assert "FP32 baseline" not in set(ours["label"]) and (ours["weights"] == "pretrained, Q4_1 dequantized").all()
    assert ours.loc["fp32", "throughput_tok_per_s"] == pytest.approx(1022 / 2.0)
    assert ours.loc["fake", "throughput_tok_per_s"] == pytest.approx(1022 / 4.0)
    assert (ours["forward_bench_tok_per_s"] == 999.0).all() and (ours["chunk_len"] == 512).all()
    md = (out / "table.md").read_text()
    assert "already 4-bit representable" in md and "understated" in md
    # each row names the text its perplexity is on (the caption once said "WikiText-2" for every row)
    assert (ours["text"] == "CPython pydoc_data.topics test").all()
    assert set(df[df["source"] == "published"]["text"]) == {"WikiText-2 test"} and "WikiText-2 layout" not in md
    assert model_label("TinyLlama-1.1B", "float32") == "TinyLlama-1.1B (fp32)"


def test_local_path_fp32_checkpoint_is_the_paper_faithful_route(tmp_path):
    """``source: path`` with a real fp32 checkpoint on disk (here a tiny random Llama saved with save_pretrained)
    loads the weights exactly as stored, says so, carries no quantized-file label, and its fp32 row is a real
    FP32 baseline (compression 1.0 of real fp32 bytes)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from accelbench.models.llm import load_causal_lm

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)
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
    chunks = q.token_chunks(ids, chunk_len=32, max_tokens=None)
    run = q.MethodRun(method="fp32", bitset="none", chunk_len=32, eval_tokens=None, group_size=128,
                      clustering="percentile", metric="prune",
                      throughput={"batch": 1, "seq_len": 16, "warmup": 0, "repeat": 1})
    out = q.run_method(lm.model, len(lm.tokenizer), chunks, None, {}, run, Device("cpu"))
    m = out["measurements"]
    assert out["status"] == "ok" and m["compression_x"]["value"] == 1.0
    assert m["size"]["decoder_linear_bytes_fp32"] == m["size"]["decoder_linear_bytes_after"]  # real fp32 storage
    assert math.isfinite(m["perplexity"]["value"]) and m["perplexity"]["chunk_len"] == 32


@pytest.mark.parametrize("exc,unsupported", [
    (ImportError("Requires mslk >= 1.0.0"), True),  # torchao 0.18 int4 on a CPU
    (NotImplementedError("_weight_int4pack_mm is not implemented for CPU"), True),
    (RuntimeError("Could not run 'aten::_weight_int4pack_mm' with arguments from the 'CPU' backend."), True),
    (AssertionError("Torch not compiled with CUDA enabled"), True),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x64 and 128x64)"), False),
    (TypeError("apply_torchao() got an unexpected keyword argument 'bits'"), False),
    (KeyError("q_proj"), False),
    (AttributeError("'NoneType' object has no attribute 'weight'"), False),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB; requires more memory"), False),
])
def test_torchao_only_genuine_unsupported_errors(exc, unsupported):
    reason = q.torchao_unsupported_reason(exc, "int4 weight-only on cpu")
    assert (reason is not None) == unsupported
    if unsupported:
        assert reason.startswith("torchao ") and str(exc).splitlines()[0] in reason  # the library's own reason


def test_sabotage_bug_in_torchao_path_fails_the_job(tiny_llama, chunks, monkeypatch):
    """Sabotage: a bug in our own torchao code (a TypeError) must fail the job, not read as `unsupported`;
    a missing kernel package is `unsupported` with torchao's reason."""
    import copy

    run = q.MethodRun(method="torchao", bitset="16_8_8", chunk_len=32, eval_tokens=96, group_size=128,
                      clustering="kmeans", metric="prune", throughput={"batch": 1, "seq_len": 8, "warmup": 0, "repeat": 1})
    model = copy.deepcopy(tiny_llama)
    sens = _sens(model, chunks)

    def bug(*a, **kw):
        raise TypeError("unexpected keyword argument 'bits'")

    monkeypatch.setattr(q, "apply_torchao", bug)
    with pytest.raises(TypeError):
        q.run_method(model, 256, chunks, None, sens, run, Device("cpu"))

    def missing(*a, **kw):
        raise ImportError("Requires mslk >= 1.0.0")

    monkeypatch.setattr(q, "apply_torchao", missing)
    out = q.run_method(model, 256, chunks, None, sens, run, Device("cpu"))
    assert out["status"] == "unsupported" and "Requires mslk" in out["reason"]
    monkeypatch.setattr(q, "torchao_config", bug)  # a bug inside the probe fails too
    with pytest.raises(TypeError):
        q.torchao_probe(8, Device("cpu"), torch.float32, 128)


def check_perplexity_against_transformers(model, chunks) -> None:
    """Evaluator's perplexity equals exp(mean of transformers' own causal-LM loss, which shifts labels itself), an
    independent computation of the same next-token NLL (equal-length chunks: the mean of chunk means is the mean).
    Raises AssertionError otherwise."""
    with torch.inference_mode():
        losses = [float(model(input_ids=c[None], labels=c[None], use_cache=False).loss) for c in chunks]
    ref = math.exp(sum(losses) / len(losses))
    got = q.Evaluator(model, chunks, Device("cpu")).perplexity()
    assert math.isclose(got, ref, rel_tol=1e-5), (got, ref)


def test_perplexity_matches_transformers_loss(tiny_llama, chunks):
    check_perplexity_against_transformers(tiny_llama, chunks)


@pytest.mark.parametrize("wrong", ["no_shift", "shift_backwards"])
def test_sabotage_wrong_chunk_shift_is_caught(tiny_llama, chunks, monkeypatch, wrong):
    """Sabotage: predicting the token itself (no shift) or the previous one must fail the perplexity check."""
    def nll(logits, ids):
        lg, tg = (logits, ids) if wrong == "no_shift" else (logits[:, 1:], ids[:, :-1])
        return float(torch.nn.functional.cross_entropy(lg.flatten(0, 1).float(), tg.flatten(), reduction="sum")
                     * (ids.shape[1] - 1) / tg.shape[1])

    monkeypatch.setattr(q.Evaluator, "_nll", staticmethod(nll))
    with pytest.raises(AssertionError):
        check_perplexity_against_transformers(tiny_llama, chunks)
