"""Study B LoRA FLOP accounting (:mod:`accelbench.measure.flops`)."""

import pytest
import torch

from accelbench.experiments.lora.model import apply_lora
from accelbench.experiments.lora.settings import LoraSettings
from accelbench.measure.flops import flops_per_token, lora_flop_counts


def test_flops_formula():
    f = flops_per_token(n_params=1000, n_trainable=10, layers=2, hidden=8, seq_len=4)
    assert f["6n"] == 6 * 1000 + 12 * 2 * 8 * 4
    assert f["lora"] == 4 * 990 + 6 * 10 + 12 * 2 * 8 * 4 and "approximation" in f["formula_lora"]


@pytest.mark.parametrize("targets,tied", [(("q_proj", "v_proj"), True), (("k_proj", "o_proj", "down_proj"), False)])
def test_lora_flops_match_flop_counter(targets, tied):
    """The LoRA formula equals what FlopCounterMode counts for one forward + backward of a tiny LoRA Llama
    (eager attention), and 6N overstates it."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        tie_word_embeddings=tied,
        attn_implementation="eager",
    )
    model, counts = apply_lora(LlamaForCausalLM(cfg), LoraSettings(r=4, alpha=4, target_modules=targets))
    batch, seq = 2, 24
    ids = torch.randint(0, 100, (batch, seq))
    with FlopCounterMode(display=False) as fc:
        model(input_ids=ids, labels=ids).loss.backward()
    measured = fc.get_total_flops() / (batch * seq)
    n = sum(p.numel() for p in model.parameters())
    f = flops_per_token(n, counts["trainable"], 3, 64, seq, lora_flop_counts(model))
    # equal up to transformers' rotary-embedding matmul (inv_freq @ positions: 2 x head_dim/2 x seq per sequence), which
    # FlopCounterMode counts in transformers < 4.56 (2e-5 of the total here) and later versions compute without a matmul
    assert f["lora"] == pytest.approx(measured, rel=1e-4), (f["lora_terms"], measured)
    assert f["6n"] > 1.2 * measured  # the conventional 6N is an upper bound for LoRA


def test_forward_flops_and_the_quantization_eval_mfu():
    """Inference FLOPs per token are a third of PaLM's training count; the evaluation's MFU uses them per second."""
    from accelbench.experiments.llm_quant.stages import eval_mfu
    from accelbench.measure.flops import forward_flops_per_token

    f = forward_flops_per_token(n_params=1000, layers=2, hidden=8, seq_len=4)
    assert f["value"] == 2 * 1000 + 4 * 2 * 8 * 4 and "PaLM" in f["formula"]
    assert 3 * f["value"] == flops_per_token(1000, 10, 2, 8, 4)["6n"]
    info = {"parameters": 1000, "layers": 2, "hidden_size": 8}
    m = eval_mfu(info, 4, 1e9, 10.0)  # 1e9 tokens/s x 2256 FLOPs = 2.256 TFLOP/s of a 10 TFLOP/s peak
    assert m["tflop_per_s"] == pytest.approx(2.256) and m["mfu"] == pytest.approx(0.2256)
    assert m["flops_per_token"]["value"] == 2256
    assert eval_mfu(info, 4, 1e9, None)["mfu"] is None and eval_mfu({}, 4, 1e9, 10.0)["tflop_per_s"] is None
