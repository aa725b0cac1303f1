"""Study B LoRA job entry point (:mod:`accelbench.experiments.lora.job`): memory pre-checks recorded as OOM before
any rank starts."""

from accelbench.experiments.lora import settings as lora_settings
from accelbench.experiments.lora.model import host_memory_precheck, memory_precheck
from accelbench.experiments.lora.settings import LoraSettings, Plan
from lora_helpers import run_job, system


# Llama-3.3-70B's architecture, random init (the shape that does not fit one device)
LLAMA33_70B_RANDOM = {"source": "random",
                      "config": {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
                                 "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
                                 "vocab_size": 128256}}


def test_memory_precheck_and_oom_recorded(monkeypatch):
    p = Plan("single", 1, "flash", "sdpa", "bf16")
    assert "weights alone need" in memory_precheck(70_000_000_000, p, 80)  # 130 GiB in bf16
    assert memory_precheck(8_000_000_000, p, 141) is None
    assert memory_precheck(70_000_000_000, Plan("fsdp", 4, "flash", "sdpa", "bf16"), 96) is None
    # a run whose weights cannot fit is recorded as oom, not raised
    spec = {"settings": LoraSettings().to_dict(), "strategy": "single", "devices": 1, "attention": "flash",
            "model": LLAMA33_70B_RANDOM}
    monkeypatch.setattr(lora_settings, "available_devices", lambda backend, n: 1)  # where plan_run looks it up
    out = run_job(spec, system("cuda", devices=1, memory=80))
    assert out.status == "oom" and "GiB" in out.reason and out.measurements["weights_gib_needed"] > 130
    assert out.config["plan"]["strategy"] == "single"


def test_fsdp_host_copies_that_cannot_fit_are_recorded_oom(monkeypatch):
    """Llama-3.3-70B FSDP on a 2x H200 node (256 GiB): each rank's host copy of the weights (131 GiB) would not fit
    twice; recorded as oom with the host memory it saw, before any rank starts."""
    import psutil

    f = Plan("fsdp", 2, "eager", "eager", "bf16")
    assert "262.8 GiB in all, more than the 250.0 GiB" in host_memory_precheck(70_553_706_496, f, 2, 250.0)
    assert host_memory_precheck(70_553_706_496, f, 1, 250.0) is None                     # one rank per node fits
    assert host_memory_precheck(70_553_706_496, Plan("zero3", 2, "eager", "eager", "bf16"), 2, 250.0) is None
    assert host_memory_precheck(8_030_261_248, f, 2, 250.0) is None
    spec = {"settings": LoraSettings().to_dict(), "strategy": "fsdp", "devices": 2, "attention": "eager",
            "model": LLAMA33_70B_RANDOM}
    monkeypatch.setattr(lora_settings, "available_devices", lambda backend, n: 2)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"available": 250 * 2**30})())
    out = run_job(spec, system("cuda", devices=2, memory=139.8))
    assert out.status == "oom" and out.reason.startswith("host memory: under fsdp each of the 2 ranks")
    assert out.measurements["host_available_gib"] == 250.0 and out.measurements["ranks_per_node"] == 2
