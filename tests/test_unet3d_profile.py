import dataclasses

import pytest
import torch

from accelbench.experiments import unet3d_profile as exp


@pytest.fixture
def tiny_settings(tiny_config):
    u = tiny_config["unet3d_profile"]
    return exp.resolve_settings("whole_head", u["presets"], "small", u["scales"])


def test_paper_settings_map_med_ddpm(default_config):
    u = default_config["unet3d_profile"]
    wh = exp.resolve_settings("whole_head", u["presets"], "paper", u["scales"])
    assert wh.channels == (64, 64, 128, 192, 256) and wh.volume == (128, 128, 128)
    assert wh.attention_levels == (False, False, False, True, False)  # 128 // 16 = 8 = 2**3
    brats = exp.resolve_settings("brats", u["presets"], "paper", u["scales"])
    assert brats.attention_levels == (False,) * 5  # 192 // 16 = 12: middle block only, as in Med-DDPM
    assert brats.image_channels + brats.mask_channels == 8 and brats.out_channels == 4


def test_small_scale_keeps_field_of_view_and_attention_level(default_config):
    u = default_config["unet3d_profile"]
    s = exp.resolve_settings("whole_head", u["presets"], "small", u["scales"])
    assert s.volume == (32, 32, 32) and s.spacing_mm == (6.0, 6.0, 6.0)  # 128 x 1.5 mm = 32 x 6 mm
    assert s.attention_levels == (False, False, False, True, False)


def test_paper_model_size_matches_med_ddpm_order_of_magnitude(default_config):
    u = default_config["unet3d_profile"]
    model = exp.build_unet(exp.resolve_settings("whole_head", u["presets"], "paper", u["scales"]))
    n = sum(p.numel() for p in model.parameters())
    assert 20e6 < n < 60e6  # Med-DDPM whole head: about 40 M parameters


def test_untrained_model_output_is_not_zero(tiny_settings):
    torch.manual_seed(0)
    model = exp.build_unet(tiny_settings)
    out = model(torch.randn(1, 3, 16, 16, 16), torch.tensor([10]))
    assert out.shape == (1, 1, 16, 16, 16) and out.abs().max() > 0


def test_math_mode_restores_flags():
    before = exp.math_flags()
    with exp.math_mode(True):
        flags = exp.math_flags()
        assert "tf32" in str(flags.values()) or True in flags.values()
    assert exp.math_flags() == before


def _run(settings, name, system, tmp_path, **kw):
    image = torch.rand(1, 1, 16, 16, 16) * 2 - 1
    mask = torch.zeros(1, 2, 16, 16, 16)
    mask[:, 0, 4:12, 4:12, 4:12] = 1
    args = dict(warmup=1, repeat=2, profile_steps=1, quality_sample_steps=2, quality_rel_l2_max=0.05, seed=0,
                trace_path=tmp_path / f"{name}.json.gz")
    args.update(kw)
    return exp.run(settings, exp.VARIANTS[name], system, image, mask, **args)


def test_run_baseline_and_bf16(tiny_settings, systems, tmp_path):
    base = _run(tiny_settings, "baseline", systems["cpu"], tmp_path)
    assert base["status"] == "ok"
    m = base["measurements"]
    assert m["train_step"]["count"] == 2 and m["train_step"]["median"] > 0 and m["sample_step"]["median"] > 0
    assert m["quality"]["predicted_noise"]["rel_l2"] == 0 and m["quality"]["holds"]
    assert m["kernels"]["kernel_count"] > 0 and m["kernels"]["class_share"]["convolution"] > 0.2
    assert m["flops"]["train_step"] > 2 * m["flops"]["forward"] > 0
    assert m["sample_projection"]["label"] == "projection"
    assert (tmp_path / "baseline.json.gz").exists()
    bf16 = _run(tiny_settings, "bf16", systems["cpu"], tmp_path)
    q = bf16["measurements"]["quality"]
    assert 0 < q["predicted_noise"]["rel_l2"] < 0.05  # bf16 differs, within tolerance


def test_unsupported_is_recorded_not_raised(tiny_settings, systems, tmp_path):
    out = _run(tiny_settings, "tf32", systems["cpu"], tmp_path)
    assert out["status"] == "unsupported" and "TF32" in out["reason"]
    assert exp.unsupported_reason(exp.VARIANTS["bf16"], systems["v100"])


def test_oom_is_recorded_not_raised(tiny_settings, systems, tmp_path, monkeypatch):
    def boom(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(exp.Workload, "train_step", boom)
    out = _run(tiny_settings, "baseline", systems["cpu"], tmp_path)
    assert out["status"] == "oom" and "80.00 GiB" in out["reason"]


def test_quality_tolerance_is_enforced(tiny_settings, systems, tmp_path):
    out = _run(tiny_settings, "bf16", systems["cpu"], tmp_path, quality_rel_l2_max=1e-9)
    assert out["measurements"]["quality"]["holds"] is False


def test_variants_cover_study_a():
    assert list(exp.VARIANTS)[:4] == ["baseline", "tf32", "channels_last_3d", "tf32_channels_last_3d"]
    assert exp.VARIANTS["tf32_channels_last_3d"].precision == "tf32"
    assert dataclasses.asdict(exp.VARIANTS["bf16"])["autocast"] == "bf16"


def test_cudnn_autotuning_is_a_recorded_axis():
    """Plain names are Study A's series (autotuning off, as Med-DDPM's code); ``_autotuned`` turns it on and is
    compared with its own baseline; math_mode applies and restores it."""
    import torch

    assert exp.VARIANTS["bf16"].cudnn_benchmark is False and exp.VARIANTS["bf16"].baseline == "baseline"
    tuned = exp.VARIANTS["bf16_compile_autotuned"]
    assert tuned.cudnn_benchmark and tuned.compile and tuned.autocast == "bf16" and tuned.baseline == "baseline_autotuned"
    assert {"tf32_compile", "bf16_compile"} <= set(exp.VARIANTS)
    before = torch.backends.cudnn.benchmark
    with exp.math_mode(False, cudnn_benchmark=not before):
        assert torch.backends.cudnn.benchmark is (not before) and exp.math_flags()["cudnn_benchmark"] is (not before)
    assert torch.backends.cudnn.benchmark is before
