"""The Study B quantization table (accelbench.experiments.llm_quant.tables) from llm_quant results: published numbers,
accuracy columns, the throughput column and the labelling of a quantized-file baseline."""

import pytest

from accelbench.experiments.llm_quant.job import EXPERIMENT


def test_reference_table_parses_published_numbers():
    from accelbench.experiments.llm_quant.tables_rows import read_reference

    ref, source = read_reference("resources/reference/study_b_quantization.csv")
    assert "Voyager_Gaudi_Benchmarks" in source and len(ref) == 10
    row = ref[(ref.system == "a100") & (ref.method == "fake") & (ref.bitset == "8_4_4")].iloc[0]
    assert row.perplexity == 12.94 and row.compression_x == 5.93


def test_accuracy_flows_into_the_quantization_table(tmp_path):
    """Measured accuracy (and `unsupported` with its reason) and the published HellaSwag/BoolQ numbers reach the
    table."""

    import pandas as pd

    from accelbench.experiments.llm_quant import tables as study_b_quant

    acc = {
        "hellaswag": {"status": "ok", "metric": "acc_norm", "value": 0.375, "samples": 8},
        "boolq": {"status": "unsupported", "reason": "boolq: no local data (Hugging Face datasets cache (offline))"},
    }
    m = {
        "perplexity": {"value": 20.0, "tokens": 93},
        "compression_x": {"value": 1.0},
        "model_compression_x": {"value": 1.0},
        "throughput": {"tokens_per_s": 100.0},
        "eval_tokens_per_s": {"value": 100.0},
        "eval_time": {"value": 1.0},
        "model": {"weights": "random init"},
        "accuracy": acc,
    }
    from accelbench.core import provenance, results

    env = provenance.collect("cpu")
    paths = []
    for method, bitset, status in (
        ("fp32", "none", "ok"),
        ("fake", "8_4_4", "ok"),
        ("torchao", "8_4_4", "unsupported"),
    ):
        cfg = {"system": {"name": "cpu"}, "model": "tiny", "method": method, "bitset": bitset}
        meas = dict(m, accuracy={**acc, "hellaswag": {**acc["hellaswag"], "value": 0.25}}) if method == "fake" else m
        r = results.make_result(
            EXPERIMENT,
            status,
            cfg,
            env,
            meas if status == "ok" else {},
            None if status == "ok" else "torchao int4 needs CUDA",
        )
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
    from accelbench.experiments.llm_quant.tables_rows import read_reference

    ref, _ = read_reference("resources/reference/study_b_quantization.csv")
    tokens = ref["throughput_tok_per_s"].astype(float) * ref["eval_time_s"].astype(float)
    assert ((tokens / 338.4e3 - 1).abs() < 0.01).all(), tokens.tolist()


def _quant_result(tmp_path, method, bitset, info, eval_s=2.0, fwd=999.0):
    from accelbench.core import provenance, results

    env = provenance.collect("cpu")
    cfg = {"system": {"name": "cpu"}, "model": "smollm2_135m", "method": method, "bitset": bitset}
    m = {
        "perplexity": {"value": 20.0, "tokens": 1022, "chunk_len": 512},
        "eval_time": {"value": eval_s},
        "eval_tokens_per_s": {"value": 1022 / eval_s},
        "forward_benchmark": {"tokens_per_s": fwd},
        "compression_x": {"value": 1.0},
        "model_compression_x": {"value": 1.0},
        "model": info,
        "data": {"name": "CPython pydoc_data.topics", "part": "test"},
    }
    path = tmp_path / method / bitset / "result.json"
    results.write_result(results.make_result("llm_quant", "ok", cfg, env, m, None), path)
    return path


def test_quant_table_names_the_q4_baseline_and_uses_eval_throughput(tmp_path):
    """The bundled model's baseline is named for what it is (Q4_1-dequantized, fp32 compute), the throughput
    column is evaluation tokens / evaluation time (not the forward benchmark), and the caption says what the
    Q4_1 baseline does to the comparison."""
    import pandas as pd

    from accelbench.experiments.llm_quant import tables as study_b_quant
    from accelbench.models.llm import SMOLLM2_WEIGHT_FORMAT, model_label

    gguf = {
        "name": "SmolLM2-135M-Instruct",
        "weights": "pretrained",
        "weight_format": SMOLLM2_WEIGHT_FORMAT,
        "quantized_file": "Q4_1",
        "label": model_label("SmolLM2-135M-Instruct", "float32", "Q4_1"),
    }
    paths = [_quant_result(tmp_path, "fp32", "none", gguf), _quant_result(tmp_path, "fake", "8_4_4", gguf, eval_s=4.0)]
    out = tmp_path / "agg"
    study_b_quant.aggregate(paths, "resources/reference/study_b_quantization.csv", out)
    df = pd.read_csv(out / "table.csv")
    ours = df[df["source"] == "measured"].set_index("method")
    assert ours.loc["fp32", "label"] == "SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)"
    assert (ours["model_name"] == "SmolLM2-135M-Instruct (Q4_1-dequantized)").all()
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


def test_study_b_scoring_and_settings_columns():
    """Study B's token-normalised score (same log-likelihoods), the authors'-prompt task and each setting a method
    ran with get their own columns; an unscored Study B task says why."""
    from accelbench.experiments.llm_quant.tables_cells import SETTING_COLUMNS, accuracy_cells

    acc = {
        "hellaswag": {
            "status": "ok",
            "value": 0.4,
            "samples": 50,
            "metrics": {"acc_norm": 0.4, "acc_token_norm": 0.36},
        },
        "hellaswag_study_b": {"status": "ok", "value": 0.38, "samples": 50},
        "boolq_study_b": {"status": "unsupported", "reason": "boolq_study_b: no local data"},
    }
    cells = accuracy_cells(acc)
    assert cells["hellaswag_acc_pct"] == pytest.approx(40.0) and cells["hellaswag_tok_norm_pct"] == pytest.approx(36.0)
    assert cells["hellaswag_study_b_pct"] == pytest.approx(38.0) and cells["hellaswag_n"] == 50
    assert cells["boolq_study_b_pct"] == "unsupported" and "boolq_study_b" in cells["accuracy_reason"]
    assert {"tokenize", "sixteen_bit", "clustering", "autocast", "inc_scale_method"} <= set(SETTING_COLUMNS)
