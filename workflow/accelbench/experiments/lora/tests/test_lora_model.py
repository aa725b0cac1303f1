"""Study B LoRA, the model side (:mod:`accelbench.experiments.lora.model`): LoRA targeting and parameter counts, where
a random-init model is built."""

import pytest
import torch

from accelbench.errors import ConfigError
from accelbench.experiments.lora.model import apply_lora, random_init_place
from accelbench.experiments.lora.settings import LoraSettings
from lora_helpers import tiny_llama


def test_lora_touches_only_q_and_v():
    s = LoraSettings(r=8, alpha=8)
    model, counts = apply_lora(tiny_llama(), s)
    # q_proj 64->64, v_proj 64->32 (2 kv heads of 16): r * (in + out) per module, 2 layers
    assert counts["trainable"] == counts["expected"] == 2 * 8 * ((64 + 64) + (64 + 32))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(("q_proj" in n or "v_proj" in n) and "lora_" in n for n in trainable)
    with pytest.raises(ConfigError, match="no nn.Linear"):
        apply_lora(tiny_llama(), LoraSettings(target_modules=("nonexistent",)))


def _partition_like_zero3(model):
    """What DeepSpeed's ``zero.Init`` leaves on a rank: every parameter's storage emptied (``numel() == 0``), its full
    element count in ``ds_numel`` and full shape in ``ds_shape``."""
    for p in model.parameters():
        p.ds_numel, p.ds_shape = p.numel(), p.shape
        p.data = torch.empty(0, dtype=p.dtype)
    return model


def test_parameter_counts_see_through_zero3_partitioning(monkeypatch):
    """ZeRO-3 reference results recorded ``model.parameters: 0`` (numel of partitioned parameters), making 6N and
    MFU-6N ~1000x too small: counts use DeepSpeed's ``ds_numel`` where present."""
    import transformers

    from accelbench.models import llm

    class Fake:  # a partitioned parameter: no local elements, the full size in ds_numel
        ds_numel = 4096

        def numel(self):
            return 0

    class Plain:
        def numel(self):
            return 7

    assert llm.numel_full(Fake()) == 4096 and llm.parameter_count([Fake(), Plain()]) == 4103
    full = sum(p.numel() for p in tiny_llama().parameters())
    model, counts = apply_lora(_partition_like_zero3(tiny_llama()), LoraSettings(r=8, alpha=8))
    assert counts["trainable"] == counts["expected"] == 2 * 8 * ((64 + 64) + (64 + 32))
    assert counts["total"] == full + counts["trainable"]
    # load_causal_lm's info["parameters"] (the N of 6N) for a model built partitioned
    build = transformers.AutoModelForCausalLM.from_config
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_config", lambda *a, **kw: _partition_like_zero3(build(*a, **kw))
    )
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
    }
    info = llm.load_causal_lm({"source": "random", "config": config}, dtype="float32").info
    assert info["parameters"] == full > 0


def test_random_init_is_drawn_on_the_device_where_it_fits():
    """FSDP at Gemma-2-27B shape spent its whole 410 s window in the host's one-threaded random init: FSDP now draws the
    weights on the device when they fit and moves them to the host (its peak memory stays FSDP's own)."""
    rnd, disk = {"source": "random"}, {"source": "path"}
    place = random_init_place
    assert place(rnd, "cuda", "single", None, None) == place(rnd, "cuda", "ddp", 150.0, 139.0) == "device"
    assert place(rnd, "cuda", "fsdp", 50.4, 139.0) == "device_then_host"  # Gemma-2-27B bf16 on an H200
    # Llama-3.3-70B bf16 does not fit: drawn on the device module by module, kept on the host (its host init would
    # take about 19 minutes, longer than any 10-minute call)
    assert place(rnd, "cuda", "fsdp", 131.5, 139.0) == "device_by_module"
    assert place(rnd, "cuda", "fsdp", None, 139.0) == place(rnd, "cuda", "fsdp", 10.0, None) == "device_by_module"
    # zero.Init draws and partitions each parameter on the device as it is built (70B on 2 H200s: 13.5 s), whatever
    # the source; it was once recorded as "host"
    assert place(rnd, "cuda", "zero3", 10.0, 139.0) == place(disk, "hpu", "zero3", None, None) == "zero3_init"
    assert place(rnd, "cpu", "single", 1.0, None) == place(rnd, "hpu", "fsdp", 1.0, 90.0) == "host"
    assert place(disk, "cuda", "single", 1.0, 139.0) == "host"


@pytest.mark.parametrize("model_type,tied", [("llama", True), ("gemma2", False)])
def test_module_by_module_init_draws_the_same_distributions(model_type, tied):
    """``load_causal_lm(init_device=...)`` (FSDP's random init where the full weights do not fit one device) gives the
    distributions of a plain ``from_config`` per parameter, the same buffers, ties kept, and a finite loss. Run with
    the CPU as the init device here: the path is the same on an accelerator, only the storage's device differs."""
    import torch

    from accelbench.models.llm import load_causal_lm

    config = {
        "model_type": model_type,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 512,
        "head_dim": 16,
        "tie_word_embeddings": tied,
    }
    spec = {"source": "random", "config": config}
    plain = load_causal_lm(spec, dtype="float32").model
    by_module = load_causal_lm(spec, dtype="float32", init_device=torch.device("cpu")).model
    for (name, a), (_, b) in zip(plain.named_parameters(), by_module.named_parameters()):
        assert b.device.type == "cpu" and b.dtype == a.dtype and bool(torch.isfinite(b).all()), name
        a, b = a.detach(), b.detach()
        assert abs(float(a.std()) - float(b.std())) <= 0.25 * float(a.std()) + 1e-6, name  # N(0, 0.02) or constant
        assert abs(float(a.mean()) - float(b.mean())) <= 0.01, name
        if float(a.std()) > 0:  # drawn, not copied from the uninitialised host memory
            assert not torch.equal(b, torch.zeros_like(b)), name
    for (name, a), (_, b) in zip(plain.named_buffers(), by_module.named_buffers()):
        assert torch.equal(a, b), name
    assert (by_module.lm_head.weight is by_module.get_input_embeddings().weight) == tied
    ids = torch.randint(0, 512, (2, 8))
    assert torch.isfinite(by_module(input_ids=ids, labels=ids).loss)
