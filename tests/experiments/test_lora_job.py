"""Study B LoRA job entry point (:mod:`accelbench.experiments.lora.job`): memory pre-checks recorded as OOM before
any rank starts."""

from accelbench.experiments.lora import settings as lora_settings
from accelbench.experiments.lora.model import host_memory_precheck, memory_precheck
from accelbench.experiments.lora.settings import LoraSettings, Plan
from lora_helpers import run_job, system

# Llama-3.3-70B's architecture, random init (the shape that does not fit one device)
LLAMA33_70B_RANDOM = {
    "source": "random",
    "config": {
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
    },
}


def test_memory_precheck_and_oom_recorded(monkeypatch):
    p = Plan("single", 1, "flash", "sdpa", "bf16")
    assert "weights alone need" in memory_precheck(70_000_000_000, p, 80)  # 130 GiB in bf16
    assert memory_precheck(8_000_000_000, p, 141) is None
    assert memory_precheck(70_000_000_000, Plan("fsdp", 4, "flash", "sdpa", "bf16"), 96) is None
    # a run whose weights cannot fit is recorded as oom, not raised
    spec = {
        "settings": LoraSettings().to_dict(),
        "strategy": "single",
        "devices": 1,
        "attention": "flash",
        "model": LLAMA33_70B_RANDOM,
    }
    monkeypatch.setattr(lora_settings, "available_devices", lambda backend, n: 1)  # where plan_run looks it up
    out = run_job(spec, system("cuda", devices=1, memory=80))
    assert out.status == "oom" and "GiB" in out.reason and out.measurements["weights_gib_needed"] > 130
    assert out.config["plan"]["strategy"] == "single"


def test_fsdp_host_copies_that_cannot_fit_are_recorded_oom(monkeypatch):
    """FSDP builds the weights on rank 0 only (cpu_ram_efficient_loading; the other ranks on the meta device), so a
    node holds one host copy: Llama-3.3-70B (131 GiB) fits a 2x H200 node's 250 GiB (when each of its 2 ranks
    held one, 262.8 GiB did not); a node with less than one copy free is recorded oom before any rank starts."""
    import psutil

    from accelbench.experiments.lora.model import random_init_place

    f = Plan("fsdp", 2, "eager", "eager", "bf16")
    assert "262.8 GiB in all, more than the 250.0 GiB" in host_memory_precheck(70_553_706_496, f, 2, 250.0)
    assert host_memory_precheck(70_553_706_496, f, 1, 250.0) is None  # one host copy fits
    assert host_memory_precheck(70_553_706_496, Plan("zero3", 2, "eager", "eager", "bf16"), 2, 250.0) is None
    assert host_memory_precheck(8_030_261_248, f, 2, 250.0) is None
    rand = {"source": "random"}
    assert random_init_place(rand, "cuda", "fsdp", 131.4, 139.0, rank=1) == "meta"  # rank-0-only building
    assert random_init_place(rand, "cuda", "fsdp", 131.4, 139.0, rank=0) == "device_by_module"
    assert random_init_place(rand, "cpu", "fsdp", None, None, rank=1) == "host"
    spec = {
        "settings": LoraSettings().to_dict(),
        "strategy": "fsdp",
        "devices": 2,
        "attention": "eager",
        "model": LLAMA33_70B_RANDOM,
    }
    monkeypatch.setattr(lora_settings, "available_devices", lambda backend, n: 2)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"available": 120 * 2**30})())
    out = run_job(spec, system("cuda", devices=2, memory=139.8))
    assert out.status == "oom" and out.reason.startswith("host memory: under fsdp a node holds 1 host copy")
    assert out.measurements["host_available_gib"] == 120.0 and out.measurements["host_copies_per_node"] == 1
