"""Study B LoRA job entry point (:mod:`accelbench.experiments.lora.job`): memory pre-checks recorded as OOM before
any rank starts."""

from pathlib import Path

import pytest

from accelbench.experiments.lora import settings as lora_settings
from accelbench.experiments.lora.model import host_memory_precheck, memory_precheck
from accelbench.experiments.lora.settings import LoraSettings, Plan
from lora_helpers import run_job, system

REPO = Path(__file__).resolve().parents[5]

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


def _cgroup(tmp_path, monkeypatch, version: int, limit_gib: float, used_gib: float) -> str:
    """A fake cgroup of this process (v2: ``0::/job``; v1: ``4:memory:/job``) with a memory limit, as a container, a
    Slurm job or ``systemd-run -p MemoryMax=`` sets; returns its limit file."""
    from accelbench.cluster import processes

    root = tmp_path / "cgroup"
    job = root / "job" if version == 2 else root / "memory/job"
    job.mkdir(parents=True)
    names = ("memory.max", "memory.current") if version == 2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    (job / names[0]).write_text(f"{int(limit_gib * 2**30)}\n")
    (job / names[1]).write_text(f"{int(used_gib * 2**30)}\n")
    (job.parent / names[0]).write_text("max\n" if version == 2 else "9223372036854771712\n")
    (job.parent / names[1]).write_text("1\n")
    (tmp_path / "self_cgroup").write_text("0::/job\n" if version == 2 else "4:memory:/job\n0::/\n")
    monkeypatch.setattr(processes, "CGROUP_ROOT", root)
    monkeypatch.setattr(processes, "PROC_CGROUP", tmp_path / "self_cgroup")
    return str(job / names[0])


@pytest.mark.parametrize("limit", ["cgroup_v2", "cgroup_v1", "memavailable"])
def test_8b_preset_on_a_cpu_that_cannot_hold_it_is_recorded_oom_before_loading(
    tmp_path, monkeypatch, default_config, systems, limit
):
    """The `llama31_8b` preset on the `cpu` system in a 4 GiB limit was killed by the kernel after
    32 s (empty log, no result). Host memory is now checked on a CPU as device memory is on GPUs: `oom` with the
    estimate, before any weight is loaded."""
    import psutil

    from accelbench.core import launcher
    from accelbench.core.config import validate_config
    from accelbench.core.rule_context import RuleContext
    from accelbench.experiments.lora import rules

    class Wildcards(dict):
        __getattr__ = dict.__getitem__

    rc = RuleContext(validate_config(default_config, REPO / "config/config.schema.yaml"), systems["cpu"], "r", REPO)
    spec = rules.spec(rc, Wildcards(model="llama31_8b", attention="eager", strategy="single", devices="1"))
    if limit == "memavailable":
        monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"available": 4 * 2**30})())
        monkeypatch.setattr("accelbench.cluster.processes.PROC_CGROUP", tmp_path / "none")
        bound = "MemAvailable"
    else:
        bound = _cgroup(tmp_path, monkeypatch, int(limit[-1]), 4.0, 0.25)

    def loads(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(launcher, "in_process", loads)
    out = run_job(spec, systems["cpu"])
    assert out.status == "oom", out.reason
    assert out.reason.startswith("host memory: the ") and f"this job may still take ({bound})" in out.reason
    assert out.measurements["parameters"] > 8e9 and out.measurements["weights_gib_needed"] > 14.9
    assert out.measurements["host_memory_bound"] == bound
    assert out.measurements["host_available_gib"] == pytest.approx(4.0 if limit == "memavailable" else 3.75, abs=0.01)
    assert out.measurements["estimate"] == "frozen weights only (lower bound); not run"


def test_small_preset_on_a_cpu_passes_the_host_memory_check(tmp_path, monkeypatch):
    from accelbench.experiments.lora.model import cpu_memory_precheck

    _cgroup(tmp_path, monkeypatch, 2, 4.0, 0.25)
    from accelbench.cluster.processes import host_memory_available

    available, bound = host_memory_available()
    assert available == pytest.approx(3.75) and bound.endswith("job/memory.max")
    assert cpu_memory_precheck(134_515_008, Plan("single", 1, "eager", "eager", "fp32"), available) is None
    assert "2 copies of 0.5 GiB under ddp" in cpu_memory_precheck(
        134_515_008, Plan("ddp", 2, "eager", "eager", "fp32"), 0.8
    )
