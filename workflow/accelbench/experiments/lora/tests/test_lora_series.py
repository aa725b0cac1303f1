"""Study B LoRA series (:mod:`accelbench.experiments.lora.series`): every faithful setting of the authors' job files
reaches the Trainer / DeepSpeed / FSDP config; the Gaudi mode is chosen as the job files choose it; ``ours`` keeps
its settings apart."""

import json

import pytest

from accelbench.errors import ConfigError
from accelbench.experiments.lora import series
from accelbench.experiments.lora.settings import LoraSettings, Plan
from accelbench.experiments.lora.trainer import WrapTarget, training_arguments_kwargs


@pytest.fixture
def lora(default_config) -> dict:
    """The validated default config's ``lora_finetune`` section: every series option present, as in a spec."""
    return default_config["lora_finetune"]


def _kw(strategy, opts, backend="cuda", name="faithful", family="llama-3.3-70b"):
    rt = series.runtime_for(name, opts, backend != "cpu")
    return training_arguments_kwargs(
        Plan(strategy, 2 if strategy != "single" else 1, "flash", "sdpa", "bf16"),
        LoraSettings(),
        backend,
        "trainer-output",  # output_dir: passed through to the kwargs, never written
        13,
        WrapTarget("LlamaDecoderLayer", family),
        0,
        rt,
    )


def test_faithful_settings_reach_trainer_deepspeed_and_fsdp(tmp_path, lora):
    from transformers import TrainingArguments

    single = _kw("single", lora["faithful"])
    # --lr_scheduler_type constant, --logging_steps 1 with Trainer's defaults (NaN/Inf filter stays on)
    assert single["lr_scheduler_type"] == "constant" and single["logging_steps"] == 1
    assert single["logging_strategy"] == "steps" and "logging_nan_inf_filter" not in single
    assert "accelerator_config" not in single and "torch_compile" not in single  # accelerate's blocking copy
    args = TrainingArguments(**{**single, "output_dir": str(tmp_path), "use_cpu": True, "bf16": False})
    assert args.logging_steps == 1 and args.logging_nan_inf_filter and args.lr_scheduler_type == "constant"
    # ZeRO-3: the authors' JSON, unchanged
    ds = _kw("zero3", lora["faithful"])["deepspeed"]
    assert ds == json.loads((series.AUTHORS / "deepspeed_zero3_config_grad_0.3.json").read_text())
    z = ds["zero_optimization"]
    assert z["overlap_comm"] is False and z["contiguous_gradients"] is False and ds["gradient_clipping"] == 0.3
    assert ds["bf16"]["enabled"] is True
    # FSDP: --fsdp auto_wrap + the authors' config; what accelerate's plugin receives
    fsdp = _kw("fsdp", lora["faithful"])
    assert fsdp["fsdp"] == "auto_wrap"
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, fsdp=fsdp["fsdp"], fsdp_config=fsdp["fsdp_config"])
    p = args.fsdp_plugin_args
    assert p["fsdp_version"] == 1 and p["reshard_after_forward"] == "full_shard"  # FULL_SHARD
    assert p["backward_prefetch"] == "BACKWARD_PRE" and p["sync_module_states"] is True
    assert p["use_orig_params"] is True and p["cpu_ram_efficient_loading"] is True
    assert (
        p["transformer_cls_names_to_wrap"] == "LlamaDecoderLayer" and p["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    )
    assert fsdp["fsdp_config"]["authors_layer_cls"] == "GaudiLlamaDecoderLayer"
    assert series.faithful_fsdp_config("gemma-2-27b", "X")["authors_layer_cls"] == "GaudiGemma2DecoderLayer"


def test_ours_is_apart_and_checked(lora):
    eager_liger_off = {**lora["ours"], "compile": True, "liger": False}
    ours = _kw("zero3", eager_liger_off, name="ours")
    assert ours["lr_scheduler_type"] == "constant" and ours["logging_strategy"] == "no"
    assert ours["logging_nan_inf_filter"] is False and "torch_compile" not in ours  # sharded: not measured, eager
    assert _kw("single", eager_liger_off, name="ours")["torch_compile"] is True
    assert ours["deepspeed"]["zero_optimization"]["overlap_comm"] is True
    fsdp = _kw("fsdp", {**lora["ours"], "liger": False}, name="ours")["fsdp_config"]
    assert fsdp["backward_prefetch"] == "BACKWARD_PRE" and fsdp["cpu_ram_efficient_loading"] is True
    cpu = series.runtime_for("ours", lora["ours"], accelerator=False)
    assert cpu.compile is False and cpu.liger is False and cpu.notes  # CPU stays eager, and says so
    with pytest.raises(ConfigError, match="lora_finetune.ours: unknown key"):
        series.runtime_for("ours", {"graphs": True}, True)
    with pytest.raises(ConfigError, match="job_set"):
        series.runtime_for("faithful", {"job_set": "2024"}, True)
    # measured variants of ours: ours_<name> = ours updated by ours_variants.<name>
    section = {"ours": {**lora["ours"], "liger": False}, "ours_variants": {"eager": {"compile": False}}}
    assert series.series_options("ours_eager", section) == {**lora["ours"], "compile": False, "liger": False}
    assert series.runtime_for("ours_eager", series.series_options("ours_eager", section), True).compile is False
    with pytest.raises(ConfigError, match="no lora_finetune.ours_variants.fast"):
        series.series_options("ours_fast", section)
    with pytest.raises(ConfigError, match="series 'mine' unknown"):
        series.runtime_for("mine", {}, True)


def test_ours_liger_kernels_and_compile_mode_reach_the_trainer(lora, monkeypatch):
    """``liger_kernels`` names the Liger kernels the Trainer applies (the rest off; absent: Liger's defaults) and
    ``compile_mode`` torch.compile's mode (absent: torch's default), both recorded as TrainingArguments settings."""
    monkeypatch.setattr(series, "liger_available", lambda: True)
    opts = {**lora["ours"], "liger": True, "liger_kernels": ["rope", "rms_norm"], "compile_mode": "reduce-overhead"}
    kw = _kw("single", opts, name="ours")
    assert kw["use_liger_kernel"] is True and kw["torch_compile_mode"] == "reduce-overhead"
    assert kw["liger_kernel_config"] == {
        "rope": True,
        "rms_norm": True,
        "swiglu": False,
        "fused_linear_cross_entropy": False,
        "cross_entropy": False,
    }
    default = _kw("single", {**lora["ours"], "liger": True}, name="ours")
    assert "liger_kernel_config" not in default and "torch_compile_mode" not in default
    off = series.runtime_for("ours", {**opts, "liger": False}, True)
    assert off.liger_kernels is None and off.compile_mode == "reduce-overhead"  # no kernels where Liger is off
    assert series.runtime_for("ours", opts, False).compile_mode is None  # the CPU stays eager
    with pytest.raises(ConfigError, match=r"unknown \['geglu'\]"):
        series.runtime_for("ours", {**opts, "liger_kernels": ["geglu"]}, True)
    with pytest.raises(ConfigError, match="exclude each other"):
        series.runtime_for("ours", {**opts, "liger_kernels": ["cross_entropy", "fused_linear_cross_entropy"]}, True)


@pytest.mark.parametrize(
    "family,strategy,devices,mode",
    [
        ("llama-3.1-8b", "single", 1, "lazy"),
        ("llama-3.1-8b", "ddp", 8, "lazy"),  # mcLlama3.1-8b_*.sh
        ("gemma-2-27b", "single", 1, "lazy"),  # ..._1HPU_...
        ("gemma-2-27b", "ddp", 2, "compile"),
        ("gemma-2-27b", "ddp", 8, "compile"),  # DDP_LikeDSAndFSDP
        ("gemma-2-27b", "fsdp", 4, "compile"),
        ("gemma-2-27b", "zero3", 6, "compile"),
        ("llama-3.3-70b", "fsdp", 4, "compile"),
        ("llama-3.3-70b", "zero3", 8, "compile"),
    ],
)
def test_gaudi_mode_as_the_job_files_choose_it(family, strategy, devices, mode):
    g = series.gaudi_mode(family, strategy, devices)
    assert g["mode"] == mode
    if mode == "compile":
        assert g["env"] == {"PT_HPU_LAZY_MODE": "0"}
        assert g["args"] == {
            "use_lazy_mode": False,
            "torch_compile": True,
            "torch_compile_backend": "hpu_backend",
            "use_fused_rope": False,
            "pipelining_fwd_bwd": False,
        }
    else:
        assert g["args"] == {"use_lazy_mode": True} and "PT_HPU_LAZY_MODE" not in g["env"]
    flags = series.job_flash_flags(family, strategy, devices)
    assert flags["set"] is (True if mode == "compile" else None)
    if mode == "compile":  # inert for Gemma-2 in optimum-habana 1.18/1.19 (its flash path is Llama's only)
        assert flags["attention"] == ("flash" if "llama" in family else "eager")


def test_older_70b_zero3_job_set_is_selectable(lora):
    old = series.gaudi_mode("llama-3.3-70b", "zero3", 4, "2025-11")
    assert old["mode"] == "lazy" and old["env"]["PT_HPU_MAX_COMPOUND_OP_SIZE"] == "10"
    spec = {
        "settings": LoraSettings(warmup_steps=1).to_dict(),
        "series": "faithful",
        "family": "llama-3.3-70b",
        "strategy": "zero3",
        "series_options": {"job_set": "2025-11"},
    }
    s = series.settings_of(spec)
    assert (s.per_device_batch, s.grad_accum, s.seq_len, s.max_grad_norm) == (1, 1, 1024, 1.0)
    assert s.warmup_steps == 3  # --throughput_warmup_steps 3
    s = series.settings_of({**spec, "series_options": lora["faithful"]})  # the default job set
    assert (s.per_device_batch, s.grad_accum, s.seq_len, s.max_grad_norm) == (2, 2, 512, 0.3)
    assert series.settings_of({**spec, "series": "ours"}).warmup_steps == 1


def _fold_specs(lora) -> dict:
    """Specs (settings, series, series options as the rules write them) of faithful, ours and the variant
    ``ours_fold`` (``fold_grad_accum: true``), Study B's 2 x 2 x 512 setting."""
    section = {**lora, "ours_variants": {"fold": {"fold_grad_accum": True}}}
    base = {"settings": LoraSettings().to_dict(), "family": "llama-3.1-8b", "strategy": "single", "devices": 1}
    return {
        name: {**base, "series": name, "series_options": series.series_options(name, section)}
        for name in ("faithful", "ours", "ours_fold")
    }


def test_fold_grad_accum_folds_the_ours_variant_only(lora):
    """``fold_grad_accum`` makes ``settings_of`` (what the job's summary, every rank, the plan and the bare loop take)
    one micro-batch of 4 x 1 per optimizer step for the ours variant that sets it (the same 2,048 tokens per step);
    ours without it and faithful keep the setting's 2 x 2. The runtime records it, and the rank's runtime notes say
    what ran against the setting's batch."""
    from accelbench.experiments.lora.job import Settings
    from accelbench.experiments.lora.rank_setup import join
    from lora_helpers import system

    specs = _fold_specs(lora)
    assert specs["ours_fold"]["series_options"]["fold_grad_accum"] is True
    assert "fold_grad_accum" not in specs["ours"]["series_options"]  # no schema default: ours' spec is unchanged
    folded = series.settings_of(specs["ours_fold"])
    assert (folded.per_device_batch, folded.grad_accum, folded.seq_len) == (4, 1, 512)
    for name in ("ours", "faithful"):
        s = series.settings_of(specs[name])
        assert (s.per_device_batch, s.grad_accum) == (2, 2), name
    rt = series.runtime_for("ours_fold", specs["ours_fold"]["series_options"], True)
    assert rt.fold_grad_accum is True and rt.to_dict()["fold_grad_accum"] is True
    assert series.runtime_for("ours", specs["ours"]["series_options"], True).fold_grad_accum is False
    assert series.fold_note(specs["ours_fold"]) == (
        "gradient accumulation folded (fold_grad_accum): micro-batch 4 x 1 per optimizer step (the setting's 2 x 2): "
        "same samples and loss per optimizer step"
    )
    assert series.fold_note(specs["ours"]) is None and series.fold_note(specs["faithful"]) is None
    # faithful never folds: the option is not one of its keys
    with pytest.raises(ConfigError, match=r"lora_finetune.faithful: unknown key\(s\) \['fold_grad_accum'\]"):
        series.runtime_for("faithful", {**lora["faithful"], "fold_grad_accum": True}, True)
    # downstream: the job's settings (summary: samples/tokens per step, MFU; the plan) and a rank's context
    cpu = system()
    spec = {**specs["ours_fold"], "attention": "flash", "system": cpu.to_dict()}
    job = Settings.from_spec(spec, cpu)
    assert (job.lora.per_device_batch, job.lora.grad_accum) == (4, 1)
    plan = job.plan
    ctx = join(spec, cpu, plan, 0, None)
    assert (ctx.settings.per_device_batch, ctx.settings.grad_accum) == (4, 1) and ctx.runtime.fold_grad_accum
    assert series.fold_note(spec) in ctx.runtime.notes
    plain = join({**specs["ours"], "attention": "flash", "system": cpu.to_dict()}, cpu, plan, 0, None)
    assert not any("folded" in n for n in plain.runtime.notes)


def test_fold_grad_accum_typo_is_one_clear_config_error(lora):
    """A misspelt option of a variant stops the run with one line naming the key, at config validation (the schema)
    and where the rules and ranks resolve the series (``runtime_for``)."""
    from pathlib import Path

    import yaml

    from accelbench.core.config import deep_merge, validate_config

    repo = Path(__file__).resolve().parents[5]
    config = yaml.safe_load((repo / "config/config.yaml").read_text())
    config = deep_merge(config, {"lora_finetune": {"ours_variants": {"fold": {"fold_grad_acum": True}}}})
    with pytest.raises(ConfigError) as err:
        validate_config(config, repo / "config/config.schema.yaml")
    lines = [line for line in str(err.value).splitlines() if "lora_finetune" in line]
    assert len(lines) == 1 and "'lora_finetune.ours_variants.fold'" in lines[0] and "fold_grad_acum" in lines[0]
    assert "fold_grad_accum" in lines[0]  # the allowed keys name the right spelling
    with pytest.raises(ConfigError, match=r"lora_finetune.ours: unknown key\(s\) \['fold_grad_acum'\]"):
        series.runtime_for("ours_fold", {**lora["ours"], "fold_grad_acum": True}, True)
    # the valid spelling passes the schema
    ok = deep_merge(
        yaml.safe_load((repo / "config/config.yaml").read_text()),
        {"lora_finetune": {"ours_variants": {"fold": {"fold_grad_accum": True}}}},
    )
    assert validate_config(ok, repo / "config/config.schema.yaml")["lora_finetune"]["ours_variants"]["fold"] == {
        "fold_grad_accum": True
    }


def test_train_runtime_is_optimum_habanas_window():
    begin = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    end = [0.9, 1.9, 2.9, 3.9, 4.9, 6.5]
    r = series.train_runtime(end, begin, 3, 4)
    assert r["train_runtime_s"] == pytest.approx(3.5) and r["steps"] == 3
    assert r["train_samples_per_second"] == pytest.approx(12 / 3.5)
    assert series.train_runtime(end[:3], begin[:3], 3, 4)["train_runtime_s"] is None
