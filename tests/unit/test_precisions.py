"""Precisions this CPU only emulates: the CPU backend's report, the probe, and the experiments' hooks on a
CPU that reports no native bf16 (capability and flags monkeypatched), down to Study A's table and claims."""

import json
from pathlib import Path

import pandas as pd
import pytest

from accelbench.backends import cpu
from accelbench.core import harness, precisions, provenance, registry
from accelbench.experiments.lora.settings import LoraSettings, plan_run
from lora_helpers import system

REASON = (
    "bf16 is emulated on this CPU (AVX2, no AVX512-BF16/AMX): a probe measured it 6.7x the fp32 time; "
    "set `run_emulated_precisions: [bf16]` to run it anyway"
)


@pytest.fixture
def avx2_cpu(monkeypatch):
    """An x86 CPU whose torch capability is AVX2, without AVX512-BF16/AMX; the probe answers 6.7x (counted)."""
    calls = []
    monkeypatch.setattr(cpu, "_family", lambda: "x86")
    monkeypatch.setattr(cpu, "cpu_flags", lambda path=cpu.CPUINFO: {"avx", "avx2", "fma"})
    monkeypatch.setattr(cpu, "cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(cpu, "probe_slowdown", lambda precision, size=24: calls.append(precision) or 6.7)
    monkeypatch.setattr(cpu, "_SLOWDOWN", {})
    for var in (cpu.PROBE_ENV, *cpu.ISA_CAPS):
        monkeypatch.delenv(var, raising=False)
    return calls


def test_support_from_flags_capability_and_isa_caps():
    avx2 = cpu.precision_support({"avx2"}, "AVX2", {}, "x86")
    assert avx2["native"] == ["fp32"] and avx2["emulated"]["bf16"] == "AVX2, no AVX512-BF16/AMX"
    assert avx2["emulated"]["fp16"] == "AVX2, no AVX512-FP16/AMX-FP16"
    zen4 = cpu.precision_support({"avx512f", "avx512_bf16", "sse"}, "AVX512", {}, "x86")
    assert zen4["native"] == ["fp32", "bf16"] and zen4["flags"] == ["avx512f", "avx512_bf16"]
    assert zen4["emulated"] == {"fp16": "AVX512, no AVX512-FP16/AMX-FP16"}
    spr = cpu.precision_support({"avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16"}, "AVX512", {}, "x86")
    assert spr["native"] == ["fp32", "bf16", "fp16"] and not spr["emulated"]
    # the caps of torch (ATEN_CPU_CAPABILITY) and oneDNN (ONEDNN_MAX_CPU_ISA) count, each named
    capped = cpu.precision_support(
        {"avx512_bf16"}, "AVX2", {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, "x86"
    )
    assert capped["native"] == ["fp32"] and capped["isa_caps"] == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }
    assert capped["emulated"]["bf16"] == (
        "AVX2, AVX512-BF16/AMX capped by ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2"
    )
    onednn = cpu.precision_support({"avx512_bf16"}, "AVX512", {"ONEDNN_MAX_CPU_ISA": "avx512_core_bf16"}, "x86")
    assert onednn["native"] == ["fp32", "bf16"]
    assert cpu.precision_support({"avx512_bf16"}, "AVX512", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, "x86")["native"] == [
        "fp32"
    ]
    graviton3 = cpu.precision_support({"asimd", "asimdhp", "bf16", "sve"}, "SVE256", {}, "arm")
    assert graviton3["native"] == ["fp32", "bf16", "fp16"] and graviton3["flags"] == ["asimd", "sve", "bf16", "asimdhp"]
    assert cpu.precision_support({"asimd"}, "DEFAULT", {}, "arm")["emulated"]["bf16"] == "DEFAULT, no BF16"


def test_cpu_flags_reads_x86_flags_and_arm_features(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\nflags\t\t: other\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd asimdhp bf16\n")
    assert cpu.cpu_flags(x86) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu.cpu_flags(arm) == {"fp", "asimd", "asimdhp", "bf16"}
    assert cpu.cpu_flags(tmp_path / "absent") == set()


def test_probe_runs_once_per_process_and_reaches_ranks_and_provenance(avx2_cpu, monkeypatch):
    ops = cpu.CpuBackend()
    assert ops.emulation_slowdown("bf16") == ops.emulation_slowdown("bf16") == 6.7 and avx2_cpu == ["bf16"]
    assert ops.emulation_slowdown("fp32") == 1.0
    handed = json.loads(cpu.os.environ[cpu.PROBE_ENV])  # a job's ranks take it from the job, without probing
    assert handed["bf16"] == 6.7
    monkeypatch.setattr(cpu, "_SLOWDOWN", {})
    assert ops.emulation_slowdown("bf16") == 6.7 and avx2_cpu == ["bf16"]
    hw = provenance.hardware_info("cpu")["precision_support"]
    assert hw["native"] == ["fp32"] and hw["capability"] == "AVX2" and hw["slowdown"] == {"bf16": 6.7}


def test_the_real_probe_is_short_and_leaves_the_random_state():
    import time

    import torch

    torch.manual_seed(1)
    before = torch.random.get_rng_state()
    t0 = time.perf_counter()
    ratio = cpu.probe_slowdown("bf16", size=12)
    assert ratio > 0 and time.perf_counter() - t0 < 30
    assert torch.equal(torch.random.get_rng_state(), before)


def test_emulated_reason_only_where_listed_emulated_slow_and_not_asked_for(avx2_cpu, monkeypatch, systems):
    assert precisions.emulated_reason(systems["cpu"], "bf16") == REASON
    assert precisions.emulated_reason(systems["cpu"], "bf16", ("bf16",)) is None  # run_emulated_precisions: [bf16]
    assert precisions.emulated_reason(systems["cpu"], "fp32") is None
    assert precisions.emulated_reason(systems["cpu"], None) is None
    assert precisions.emulated_reason(systems["cpu"], "fp16") is None  # not in the system file: its own reason
    assert precisions.emulated_reason(systems["h100"], "bf16") is None  # accelerators report nothing: never probed
    monkeypatch.setattr(cpu, "probe_slowdown", lambda precision, size=24: 1.2)
    monkeypatch.setattr(cpu, "_SLOWDOWN", {})
    monkeypatch.delenv(cpu.PROBE_ENV)
    assert precisions.emulated_reason(systems["cpu"], "bf16") is None  # emulated but not slow: it runs
    assert precisions.spec_entry({"run_emulated_precisions": ["bf16"]}, "bf16") == {"run_emulated_precisions": ["bf16"]}
    assert precisions.spec_entry({"run_emulated_precisions": ["bf16"]}, None) == {}
    assert precisions.spec_entry({}, "bf16") == {}


def unet3d_spec(default_config, system, configuration, **extra):
    """A Study A job's spec as common.smk writes it."""
    u = default_config["unet3d_profile"]
    run = {k: u[k] for k in ("warmup", "repeat", "profile_steps", "quality_sample_steps", "quality_rel_l2_max", "seed")}
    return {
        "system": system.to_dict(),
        "noise": default_config["noise"],
        "energy": default_config["energy"],
        "model": "whole_head",
        "configuration": configuration,
        "network": u["network"],
        "micro_batches": u["micro_batches"],
        "presets": {"whole_head": u["presets"]["whole_head"]},
        "scales": u["scales"],
        "data": default_config["data"]["mri"],
        "run": run,
        **extra,
    }


def test_study_a_bf16_is_unsupported_with_the_reason_and_tabled(avx2_cpu, default_config, systems, tmp_path):
    """The hook (written by the harness without the device lock), then Study A's table and claims read it."""
    from test_aggregate import CLAIMS, _fake

    from accelbench.experiments.unet3d import job as exp
    from accelbench.experiments.unet3d import tables as study_a

    cpu_system = systems["cpu"]
    exp_entry = registry.get("unet3d_profile")
    for conf in ("baseline", "channels_last_3d"):  # fp32 configurations run as before
        spec = unet3d_spec(default_config, cpu_system, conf)
        assert exp.unsupported_outcome(exp.Settings.from_spec(spec, cpu_system), _ctx(spec, cpu_system)) is None
    asked = unet3d_spec(default_config, cpu_system, "bf16", run_emulated_precisions=["bf16"])
    assert exp.unsupported_outcome(exp.Settings.from_spec(asked, cpu_system), _ctx(asked, cpu_system)) is None

    spec = unet3d_spec(default_config, cpu_system, "bf16")
    out = tmp_path / "cpu" / "unet3d_profile" / "whole_head" / "bf16" / "result.json"
    ctx = harness.JobContext(exp_entry, spec, "spec.json", None, cpu_system, out)
    result = harness.run_job(ctx)  # unsupported_outcome -> written without the lock (no module.run)
    assert result["status"] == "unsupported" and result["reason"] == REASON
    written = json.loads(out.read_text())
    assert written["reason"] == REASON and written["config"]["settings"]["scale"] == "small"
    assert written["environment"]["hardware"]["precision_support"]["emulated"]["bf16"] == "AVX2, no AVX512-BF16/AMX"
    assert written["environment"]["hardware"]["precision_support"]["slowdown"] == {"bf16": 6.7}
    assert avx2_cpu == ["bf16"]

    study_a.aggregate([_fake(tmp_path, "cpu", "baseline", step=3600.0, hw="AMD EPYC"), out], CLAIMS, tmp_path / "agg")
    table = pd.read_csv(tmp_path / "agg" / "table.csv").set_index("configuration")
    assert table.loc["bf16", "train_step_ms"] == "unsupported" and table.loc["bf16", "reason"] == REASON
    assert REASON in (tmp_path / "agg" / "table.md").read_text()  # as a footnote
    # no claim of Study A reads bf16 (its claims are TF32 and channels-last): the claims are built from the rest
    claims = pd.read_csv(tmp_path / "agg" / "claims_vs_measured.csv")
    assert len(claims) and "bf16" not in set(claims["configuration"])


def _ctx(spec, system):
    return harness.JobContext(registry.get("unet3d_profile"), spec, "spec.json", None, system, Path("unused.json"))


def test_sr3_bf16_is_unsupported_and_faithful_runs(avx2_cpu, default_config, systems):
    from accelbench.experiments.sr3 import job as exp

    u = default_config["sr3_scaling"]
    cpu_system = systems["cpu"]

    def hook(configuration, **extra):
        spec = {
            "system": cpu_system.to_dict(),
            "devices": 2,
            "configuration": configuration,
            "preset": u["preset"],
            "scales": u["scales"],
            "run": {},
            **extra,
        }
        ctx = harness.JobContext(registry.get("sr3_scaling"), spec, "spec.json", None, cpu_system, Path("r.json"))
        return exp.unsupported_outcome(exp.Settings.from_spec(spec, cpu_system), ctx)

    bf16 = hook("bf16")
    assert bf16.status == "unsupported" and bf16.reason == REASON
    assert bf16.measurements == {"devices": 2, "precision": "bf16"} and bf16.config["configuration"] == "bf16"
    assert hook("faithful") is None and hook("bf16", run_emulated_precisions=["bf16"]) is None


def test_lora_trains_in_fp32_with_the_reason(avx2_cpu):
    s = LoraSettings()
    plan = plan_run("single", 1, "flash", system(), s, available=1)
    assert plan.status == "ok" and plan.precision == "fp32" and plan.notes == [f"fp32 used: {REASON}"]
    asked = plan_run("single", 1, "flash", system(), s, available=1, run_emulated=("bf16",))
    assert asked.precision == "bf16" and not asked.notes


def test_native_bf16_cpu_is_not_probed(monkeypatch, systems):
    monkeypatch.setattr(cpu, "_family", lambda: "x86")
    monkeypatch.setattr(cpu, "cpu_flags", lambda path=cpu.CPUINFO: {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(cpu, "cpu_capability", lambda: "AVX512")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(cpu, "probe_slowdown", lambda *a, **k: pytest.fail("probed a native precision"))
    assert precisions.emulated_reason(systems["cpu"], "bf16") is None
    assert plan_run("single", 1, "flash", system(), LoraSettings(), available=1).precision == "bf16"
