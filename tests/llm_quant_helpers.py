"""Shared by the llm_quant unit tests: a tiny random Llama, token chunks, and a sensitivity result with its
allocation (import the fixtures into a test module to use them)."""

import pytest
import torch

from accelbench.backends.device import Device
from accelbench.experiments.llm_quant.evaluate import Evaluator, token_chunks
from accelbench.experiments.llm_quant.sensitivity import allocations, sensitivity_map


@pytest.fixture(scope="module")
def tiny_llama():
    """A randomly initialised 4-layer Llama (hidden 64: rows shorter than a 128-group)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def chunks():
    g = torch.Generator().manual_seed(1)
    return token_chunks(torch.randint(0, 256, (200,), generator=g), chunk_len=32, max_tokens=96)


def sensitivity_result(model, chunks, submodules="none"):
    """The sensitivity map (pruning, reused prefix) of ``model`` on ``chunks`` with its cluster allocations."""
    ev = Evaluator(model, chunks, Device("cpu"), reuse_prefix=True)
    s = sensitivity_map(model, ev, ["prune"], 0.3, 128, submodules)
    s["allocation"] = allocations(s["layers"], ["prune"])
    return s
