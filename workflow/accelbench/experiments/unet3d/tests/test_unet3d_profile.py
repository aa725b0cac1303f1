import contextlib
import copy
import dataclasses

import pytest
import torch

from accelbench.backends.device import Device
from accelbench.experiments.unet3d import job as exp


@pytest.fixture
def tiny_settings(tiny_config):
    u = tiny_config["unet3d_profile"]
    return exp.resolve_settings(
        "whole_head", u["presets"], "small", u["scales"], network="monai", micro_batches=u["micro_batches"]
    )


def test_paper_settings_map_med_ddpm(default_config):
    u = default_config["unet3d_profile"]
    wh = exp.resolve_settings(
        "whole_head", u["presets"], "paper", u["scales"], network="monai", micro_batches=u["micro_batches"]
    )
    assert wh.channels == (64, 64, 128, 192, 256) and wh.volume == (128, 128, 128)
    assert wh.attention_levels == (False, False, False, True, False)  # 128 // 16 = 8 = 2**3
    brats = exp.resolve_settings(
        "brats", u["presets"], "paper", u["scales"], network="monai", micro_batches=u["micro_batches"]
    )
    assert brats.attention_levels == (False,) * 5  # 192 // 16 = 12: middle block only, as in Med-DDPM
    assert brats.image_channels + brats.mask_channels == 8 and brats.out_channels == 4


def test_small_scale_keeps_field_of_view_and_attention_level(default_config):
    u = default_config["unet3d_profile"]
    s = exp.resolve_settings(
        "whole_head", u["presets"], "small", u["scales"], network="monai", micro_batches=u["micro_batches"]
    )
    assert s.volume == (32, 32, 32) and s.spacing_mm == (6.0, 6.0, 6.0)  # 128 x 1.5 mm = 32 x 6 mm
    assert s.attention_levels == (False, False, False, True, False)


def test_paper_model_size_matches_med_ddpm_order_of_magnitude(default_config):
    u = default_config["unet3d_profile"]
    model = exp.build_unet(
        exp.resolve_settings(
            "whole_head", u["presets"], "paper", u["scales"], network="monai", micro_batches=u["micro_batches"]
        )
    )
    n = sum(p.numel() for p in model.parameters())
    assert 20e6 < n < 60e6  # Med-DDPM whole head: about 40 M parameters


def test_untrained_model_output_is_not_zero(tiny_settings):
    torch.manual_seed(0)
    model = exp.build_unet(tiny_settings)
    out = model(torch.randn(1, 3, 16, 16, 16), torch.tensor([10]))
    assert out.shape == (1, 1, 16, 16, 16) and out.abs().max() > 0


@pytest.fixture
def cuda_tf32_defaults():
    """PyTorch's CUDA defaults before Study A's baseline switches them: cuDNN convolutions in TF32."""
    before = exp.math_flags()
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    yield
    torch.backends.cuda.matmul.fp32_precision = before["matmul_fp32_precision"]
    torch.backends.cudnn.conv.fp32_precision = before["cudnn_conv_fp32_precision"]


def check_math_mode() -> None:
    """math_mode(False) gives IEEE FP32 (flags and numbers), math_mode(True) TF32, and both restore the flags.
    Raises AssertionError otherwise."""
    before = exp.math_flags()
    with exp.math_mode(False):
        chk = exp.ieee_fp32_check(Device("cpu"))
        assert chk["flags_ieee"] and chk["holds"], chk
        assert chk["matmul_rel_err"] < 1e-6 and chk["conv_rel_err"] < 1e-6
    assert exp.math_flags() == before
    with exp.math_mode(True):
        flags = exp.math_flags()
        assert flags["matmul_fp32_precision"] == flags["cudnn_conv_fp32_precision"] == "tf32"
        assert not exp.ieee_fp32_check(Device("cpu"))["holds"]
    assert exp.math_flags() == before


def test_math_mode_gives_ieee_fp32_baseline(cuda_tf32_defaults):
    check_math_mode()


def test_sabotage_noop_math_mode_is_caught(cuda_tf32_defaults, monkeypatch, tiny_settings, systems, tmp_path):
    """Sabotage: a math_mode that does nothing leaves cuDNN's TF32 default on; the check must fail, and so must
    a baseline run."""
    monkeypatch.setattr(exp, "math_mode", lambda tf32, cudnn_benchmark=False: contextlib.nullcontext())
    with pytest.raises(AssertionError):
        check_math_mode()
    with pytest.raises(RuntimeError, match="IEEE FP32"):
        _run(tiny_settings, "baseline", systems["cpu"], tmp_path)


def _round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 values to TF32 (10 explicit mantissa bits, round to nearest), as tensor cores do with their inputs."""
    i = x.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)


def test_ieee_check_rejects_tf32_numbers(monkeypatch):
    """The numerical half of the check fails on TF32 arithmetic (emulated here by rounding the inputs as tensor
    cores do), so a device that ignores the flags is caught too."""
    with exp.math_mode(False):
        assert exp.ieee_fp32_check(Device("cpu"))["holds"]
        real_conv3d = exp.F.conv3d
        monkeypatch.setattr(
            exp.F,
            "conv3d",
            lambda x, w, **kw: real_conv3d(
                _round_to_tf32(x) if x.dtype == torch.float32 else x,
                _round_to_tf32(w) if w.dtype == torch.float32 else w,
                **kw,
            ),
        )
        chk = exp.ieee_fp32_check(Device("cpu"))
        assert chk["flags_ieee"] and not chk["holds"] and chk["conv_rel_err"] > 10 * exp.IEEE_FP32_REL_ERR_MAX


def _run(settings, name, system, tmp_path, **kw):
    image = torch.rand(1, 1, 16, 16, 16) * 2 - 1
    mask = torch.zeros(1, 2, 16, 16, 16)
    mask[:, 0, 4:12, 4:12, 4:12] = 1
    params = dict(warmup=1, repeat=2, profile_steps=1, quality_sample_steps=2, quality_rel_l2_max=0.05, seed=0)
    params.update(kw)
    job = exp.Settings(settings, exp.VARIANTS[name], params)
    return exp.profile(job, system, image, mask, tmp_path / f"{name}.json.gz")


def test_run_baseline_and_bf16(tiny_settings, systems, tmp_path):
    base = _run(tiny_settings, "baseline", systems["cpu"], tmp_path)
    assert base["status"] == "ok"
    m = base["measurements"]
    assert m["train_step"]["count"] == 2 and m["train_step"]["median"] > 0 and m["sample_step"]["median"] > 0
    assert m["quality"]["predicted_noise"]["rel_l2"] == 0 and m["quality"]["holds"]
    assert m["ieee_fp32_check"]["holds"] and m["ieee_fp32_check"]["flags_ieee"]
    assert m["kernels"]["kernel_count"] > 0 and m["kernels"]["class_share"]["convolution"] > 0.2
    assert m["flops"]["train_step"] > 2 * m["flops"]["forward"] > 0
    assert m["sample_projection"]["label"] == "projection"
    assert m["clocks"]["status"] == "unsupported" and m["clocks"]["main_phase"] == "train_step"  # cpu: no reader
    assert set(m["clocks"]["phases"]) == {"train_step", "sample_step"}
    assert m["grad_buffers"] == exp.GRAD_BUFFERS["per_step"]  # no CUDA graphs: .grad set to None after each step
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
    assert (
        tuned.cudnn_benchmark and tuned.compile and tuned.autocast == "bf16" and tuned.baseline == "baseline_autotuned"
    )
    assert {"tf32_compile", "bf16_compile"} <= set(exp.VARIANTS)
    before = torch.backends.cudnn.benchmark
    with exp.math_mode(False, cudnn_benchmark=not before):
        assert torch.backends.cudnn.benchmark is (not before) and exp.math_flags()["cudnn_benchmark"] is (not before)
    assert torch.backends.cudnn.benchmark is before


def _probe(settings, model):
    image = torch.rand(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    mask = torch.zeros(1, 2, 16, 16, 16)
    mask[:, 0, 4:12, 4:12, 4:12] = 1
    w = exp.Workload(model, settings, exp.VARIANTS["baseline"], Device("cpu"), image, mask, seed=0)
    return exp.quality_probe(w, steps=2, seed=0)


@pytest.mark.parametrize("sabotage", ["zeroed_convolution", "flipped_output", "zero_noise"])
def test_default_tolerance_rejects_broken_configuration(tiny_settings, default_config, sabotage):
    """Sabotage: the default tolerance (0.05) rejects a broken network: one zeroed convolution, a sign-flipped
    output, a network that predicts zero noise. The sample metrics alone would not (see SAMPLE_NOTE)."""
    tol = default_config["unet3d_profile"]["quality_rel_l2_max"]
    assert tol == 0.05
    torch.manual_seed(0)
    model = exp.build_unet(tiny_settings)
    with exp.math_mode(False):
        ref = _probe(tiny_settings, copy.deepcopy(model))
        broken = copy.deepcopy(model)
        if sabotage == "zeroed_convolution":
            with torch.no_grad():
                broken.down_blocks[1].resnets[0].conv1.conv.weight.zero_()
        else:
            broken.register_forward_hook(lambda m, i, o: -o if sabotage == "flipped_output" else torch.zeros_like(o))
        q = exp.compare_quality(_probe(tiny_settings, broken), ref, tol)
        same = exp.compare_quality(_probe(tiny_settings, copy.deepcopy(model)), ref, tol)
    assert same["holds"] and same["predicted_noise"]["rel_l2"] == 0
    assert not q["holds"] and q["predicted_noise"]["rel_l2"] > 2 * tol
    if sabotage == "zero_noise":  # why the sample is not in the verdict: it cannot see this
        assert q["sample"]["rel_l2"] < tol and "not in the verdict" in q["sample"]["note"]


def test_schema_lists_every_configuration():
    """The config schema's configuration names (unet3d_profile and unet3d_ncu, filled in from the experiment's rules
    module) are exactly VARIANTS, ours beyond the CUDA-graph configuration included."""
    from accelbench.core.config import load_schema
    from conftest import REPO

    props = load_schema(REPO / "config/config.schema.yaml")["properties"]
    for block in ("unet3d_profile", "unet3d_ncu"):
        assert props[block]["properties"]["configurations"]["items"]["enum"] == list(exp.VARIANTS), block
    v = exp.VARIANTS["bf16_channels_last_3d_compile_max_autotune_autotuned"]
    assert v.channels_last_3d and v.autocast == "bf16" and v.compile_mode == "max-autotune" and v.cudnn_benchmark
