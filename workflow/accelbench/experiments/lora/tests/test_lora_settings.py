"""Study B LoRA settings and plan (:mod:`accelbench.experiments.lora.settings`): attention mapping, strategy rules."""

import pytest

from accelbench.errors import ConfigError
from accelbench.experiments.lora.settings import LoraSettings, attention_implementation, hpu_lazy_mode, plan_run
from lora_helpers import system


def test_attention_mapping():
    assert attention_implementation("eager", "cpu") == "eager"
    assert attention_implementation("flash", "cpu") == "sdpa"
    assert attention_implementation("flash", "hpu", "1.18.1") is None  # flags use_flash_attention + causal mask
    assert attention_implementation("flash", "hpu", "1.20.0") == "gaudi_fused_sdpa"
    assert attention_implementation("eager", "hpu", "1.20.0") == "eager"
    with pytest.raises(ConfigError):
        attention_implementation("flashy", "cpu")
    assert hpu_lazy_mode("ddp") == "1" and hpu_lazy_mode("fsdp") == "0"  # Study B: lazy except FSDP


def test_plan_rules():
    s = LoraSettings()
    cpu = system()
    assert plan_run("single", 1, "flash", cpu, s, available=2).status == "ok"
    assert plan_run("ddp", 2, "flash", cpu, s, available=2).status == "ok"
    big = plan_run("ddp", 8, "flash", cpu, s, available=2)
    assert big.status == "unsupported" and "8 devices requested" in big.reason
    assert plan_run("single", 2, "eager", cpu, s, available=2).status == "unsupported"
    assert plan_run("fsdp", 1, "eager", cpu, s, available=2).status == "unsupported"
    f = plan_run("fsdp", 2, "flash", cpu, s, available=2)
    assert f.status == "unsupported" and "silently trains with DDP" in f.reason
    assert plan_run("fsdp", 2, "flash", system("cuda", devices=2), s, available=2).status == "ok"
    z = plan_run("zero3", 2, "flash", cpu, s, available=2)
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        assert z.status == "unsupported" and z.reason == "deepspeed not installed"
    fp32_only = plan_run("single", 1, "eager", system(precisions=("fp32",)), s, available=1)
    assert fp32_only.precision == "fp32" and fp32_only.notes
    with pytest.raises(ConfigError):
        plan_run("tp", 2, "flash", cpu, s, available=2)


def test_zero3_on_gaudi2_plans_with_the_images_deepspeed(systems, monkeypatch):
    """Study B's Gaudi ZeRO-3 rows: where DeepSpeed imports (the Habana image installs HabanaAI's fork, pinned in
    containers/versions.yaml and checked by tests/system/test_image_pins.py) the plan on gaudi2.yaml runs; without it,
    the reason says so."""
    import importlib.machinery
    import importlib.util

    gaudi2 = systems["gaudi2"]
    real = importlib.util.find_spec

    def with_deepspeed(name, *args):  # the image's packages: DeepSpeed (HabanaAI's fork) and optimum-habana
        return importlib.machinery.ModuleSpec(name, None) if name in ("deepspeed", "optimum") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", with_deepspeed)
    plan = plan_run("zero3", 8, "flash", gaudi2, LoraSettings(), available=8)
    assert plan.status == "ok", plan.reason
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else with_deepspeed(name, *a)
    )
    plan = plan_run("zero3", 8, "flash", gaudi2, LoraSettings(), available=8)
    assert plan.status == "unsupported" and plan.reason == "deepspeed not installed"
