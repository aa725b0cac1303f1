"""Shared helpers of the Study B LoRA tests (``tests/test_lora_*.py``)."""

import torch


def tiny_llama(**config):
    """A randomly initialised 2-layer Llama (hidden 64); ``config`` overrides LlamaConfig keys (e.g.
    ``tie_word_embeddings``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(
        LlamaConfig(
            **{
                "hidden_size": 64,
                "intermediate_size": 96,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 100,
                **config,
            }
        )
    )


def system(backend="cpu", devices=1, precisions=("fp32", "bf16"), memory=None):
    from accelbench.core.systems import System

    return System(
        name=backend,
        backend=backend,
        devices=devices,
        precisions=tuple(precisions),
        image="cuda",
        scale="small",
        device_memory_gib=memory,
    )


def run_job(spec: dict, system, out="results/x/lora_finetune/m/a/s/n1/result.json"):
    """The LoRA job through its harness contract (Settings.from_spec, run(settings, ctx)), without the lock and the
    result writing: returns the Outcome."""
    from pathlib import Path

    from accelbench.core import harness, registry
    from accelbench.experiments.lora.job import Settings, run

    ctx = harness.JobContext(registry.get("lora_finetune"), spec, "spec.json", None, system, Path(out))
    return run(Settings.from_spec(spec, system), ctx)


def config_parts(series: str = "ours") -> dict:
    """A spec's ``data``, ``series`` and ``series_options`` as the rules write them from the validated default config
    (every key with a schema default present): for specs a test builds by hand."""
    from accelbench.experiments.lora.series import series_options
    from conftest import _validated

    section = _validated()["lora_finetune"]
    return {"data": dict(section["data"]), "series": series, "series_options": series_options(series, section)}


class CrcTokenizer:
    """Whitespace tokenizer into a fixed vocabulary of 100 (crc32 of the word; 0 = EOS)."""

    eos_token_id = 0
    eos_token = "<eos>"
    pad_token = None

    def __call__(self, text, add_special_tokens=False):
        import zlib

        return {"input_ids": [zlib.crc32(w.encode()) % 99 + 1 for w in text.split()]}
