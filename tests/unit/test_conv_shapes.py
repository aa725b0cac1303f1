"""benchmarks/conv_shapes.py on a CPU: the convolutions it captures from the product's two diffusion networks (counted
here from the networks' structure), its FLOP formula, and a ``--device cpu`` smoke run writing every CSV column."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPS = ("fwd", "dgrad", "wgrad")
TOOL = REPO / "benchmarks" / "conv_shapes.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("conv_shapes", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cfg(tool):
    return tool.load_settings(REPO / "config" / "config.yaml")


def unet_conv_count(channels, num_res_blocks: int) -> int:
    """Convolutions of one forward of a diffusion U-Net laid out as MONAI's DiffusionModelUNet and Med-DDPM's U-Net
    (resampling by convolution, no resnet up/down blocks): a stem and an output convolution; per level down,
    ``num_res_blocks`` resnet blocks of 2 convolutions plus a 1x1 skip convolution where the channels change, and a
    strided downsampling convolution below every level but the last; the middle block's two resnet blocks; per
    level up, ``num_res_blocks + 1`` resnet blocks fed the concatenated skip (so always a 1x1 skip convolution: 3
    each) and an upsampling convolution above every level but the first."""
    levels = len(channels)
    down = sum(2 * num_res_blocks + (channels[max(i - 1, 0)] != channels[i]) for i in range(levels)) + levels - 1
    up = levels * (num_res_blocks + 1) * 3 + levels - 1
    return 2 + down + 2 * 2 + up


def test_study_a_and_sr3_convolution_calls_per_forward(tool, cfg):
    """Paper scale: Study A (Med-DDPM's U-Net, whole_head: 5 levels, 1 resnet block) has 57 Conv3d calls; with
    Med-DDPM's own attention (``baseline``) 2 Conv1d projections more per attention block (1 down + 2 up at the
    16^3 level + the middle one = 4); SR3 (MONAI 2-D, 6 levels, 3 resnet blocks) 127 Conv2d calls. Every call
    comes from a hooked conv module (none ``(functional)``)."""
    ours = cfg["unet3d_profile"]["presets"]["whole_head"]
    _, calls = tool.network_calls(
        "study_a", cfg, "paper", "whole_head", "bf16_channels_last_3d_ndhwc_compile_cudagraphs", ""
    )
    channels = [ours["base_channels"] * m for m in ours["channel_mult"]]
    assert len(calls) == unet_conv_count(channels, ours["num_res_blocks"]) == 57
    assert {len(c["weight_shape"]) for c in calls} == {5}
    _, base = tool.network_calls("study_a", cfg, "paper", "whole_head", "baseline", "")
    assert len(base) == 57 + 2 * 4 and sum(len(c["weight_shape"]) == 3 for c in base) == 8

    sr3 = cfg["sr3_scaling"]["preset"]
    _, sr3_calls = tool.network_calls("sr3", cfg, "paper", "", "", "faithful")
    channels = [sr3["inner_channels"] * m for m in sr3["channel_mult"]]
    assert len(sr3_calls) == unet_conv_count(channels, sr3["num_res_blocks"]) == 127
    assert sr3_calls[0]["input_shape"] == (sr3["batch_size"], 2, sr3["hr_size"], sr3["hr_size"])
    for c in calls + base + sr3_calls:
        assert c["module"] != "(functional)", c
    # only the stem's input (the data) needs no gradient: its dgrad is not part of a step
    assert [c["input_needs_grad"] for c in calls].count(False) == 1 and not calls[0]["input_needs_grad"]

    shapes = tool.distinct_shapes("sr3", sr3_calls)
    assert sum(s["calls"] for s in shapes) == 127 and len(shapes) == len({tool.shape_key(c) for c in sr3_calls})
    assert sum(s["flop_share"] for s in shapes) == pytest.approx(1.0)


def test_conv_flops_formula(tool):
    """2 x output elements x C_in/groups x kernel volume, by hand and against torch's FlopCounterMode (forward,
    meta device) on strided, dilated and grouped shapes."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    # Study A's widest convolution: 64 -> 64 channels, 3^3, at 128^3
    assert tool.conv_flops((1, 64, 128, 128, 128), (64, 64, 3, 3, 3), (1,) * 3, (1,) * 3, (1,) * 3, 1) == (
        2 * 64 * 128**3 * 64 * 27
    )
    cases = [
        ((1, 64, 128, 128, 128), (64, 64, 3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), 1),
        ((4, 256, 64, 64), (512, 256, 1, 1), (1, 1), (0, 0), (1, 1), 1),
        ((2, 32, 30, 31), (16, 8, 3, 5), (2, 1), (0, 2), (2, 1), 4),
    ]
    for x, w, s, p, d, g in cases:
        with FlopCounterMode(display=False) as counter:
            torch.ops.aten.convolution(
                torch.empty(x, device="meta"), torch.empty(w, device="meta"), None, s, p, d, False, [0] * len(s), g
            )
        assert tool.conv_flops(x, w, s, p, d, g) == counter.get_total_flops(), (x, w)


def test_cpu_smoke_run_writes_every_column(tmp_path):
    """``--device cpu --limit 2``: each of the first two shapes of SR3 (small scale) under bf16 in both layouts,
    three ops each, the first (the stem, 2 input channels) also padded to 8 input channels, every column in the
    header, every row ``ok`` with a time."""
    out = tmp_path / "conv.csv"
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    argv = [sys.executable, str(TOOL), "--device", "cpu", "--scale", "small", "--networks", "sr3", "--limit", "2"]
    done = subprocess.run(
        [*argv, "--repeat", "3", "--warmup", "1", "--csv", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with out.open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    import importlib.util as iu

    spec = iu.spec_from_file_location("conv_shapes_columns", TOOL)
    module = iu.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert tuple(reader.fieldnames) == module.COLUMNS
    assert len(rows) == (2 + 1) * 2 * 3  # (shapes + the stem padded) x layouts x ops
    assert sorted({r["setting"] for r in rows}) == [
        "bf16/channels_last",
        "bf16/channels_last/pad_cin8",
        "bf16/contiguous",
        "bf16/contiguous/pad_cin8",
    ]
    assert {r["op"] for r in rows} == {"fwd", "dgrad", "wgrad"}
    assert {r["memory_format"] for r in rows} == {"channels_last", "contiguous"}
    for r in rows:
        assert r["status"] == "ok", r
        assert float(r["ms_median"]) > 0 and float(r["ms_p10"]) <= float(r["ms_median"]) <= float(r["ms_p90"])
        assert float(r["tflop_per_s"]) > 0 and r["torch"] and r["utc"] and r["device"] == "cpu"
    assert "keep what wins" in done.stdout and "sr3:" in done.stdout


def test_a_killed_setting_keeps_its_rows_as_errors_and_bad_input_is_one_line(tmp_path):
    """A setting whose process runs past ``--setting-timeout`` leaves one ``error`` row per shape and op, with the
    reason; an unknown dtype is refused in one line naming the option, before anything runs."""
    out = tmp_path / "conv.csv"
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    argv = [sys.executable, str(TOOL), "--device", "cpu", "--scale", "small", "--networks", "sr3", "--limit", "1"]
    done = subprocess.run(
        [*argv, "--layouts", "contiguous", "--setting-timeout", "0.05", "--csv", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with out.open() as f:
        rows = list(csv.DictReader(f))
    # SR3's stem, unpadded and padded to 8 input channels
    assert [(r["setting"], r["op"], r["status"]) for r in rows] == [
        (setting, op, "error") for setting in ("bf16/contiguous", "bf16/contiguous/pad_cin8") for op in OPS
    ]
    assert all("setting-timeout" in r["reason"] for r in rows)
    assert "incomplete" in done.stdout

    bad = subprocess.run(
        [*argv, "--dtypes", "fp16", "--csv", str(tmp_path / "bad.csv")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith("--dtypes: fp16 not one of bf16, fp32")
    assert not (tmp_path / "bad.csv").exists()


def test_skinny_shapes_get_their_paddings(tool, cfg):
    """Paper scale: Study A's skinny convolutions are its stem (3 -> 64: padded to 8 input channels) and its output
    convolution (64 -> 1: padded to 8 and 16 output channels); SR3's its stem (2 input channels) and output (to 1
    or 3 channels); no other shape is skinny."""
    _, calls = tool.network_calls(
        "study_a", cfg, "paper", "whole_head", "bf16_channels_last_3d_ndhwc_compile_cudagraphs", ""
    )
    skinny = {tuple(s["modules"]): tool.shape_pads(s) for s in tool.distinct_shapes("study_a", calls)}
    skinny = {k: v for k, v in skinny.items() if v}
    assert skinny == {("stem",): ["pad_cin8"], ("head.2",): ["pad_cout8", "pad_cout16"]}
    _, sr3_calls = tool.network_calls("sr3", cfg, "paper", "", "", "faithful")
    sr3 = [s for s in tool.distinct_shapes("sr3", sr3_calls) if tool.shape_pads(s)]
    assert [(s["weight_shape"][1], tool.shape_pads(s)) for s in sr3][0] == (2, ["pad_cin8"])
    assert len(sr3) == 2 and sr3[1]["weight_shape"][0] < 8 and tool.shape_pads(sr3[1]) == ["pad_cout8", "pad_cout16"]
    assert tool.shape_pads({"weight_shape": (4, 1, 3, 3), "groups": 4}) == []  # grouped: never padded


@pytest.mark.parametrize("pad", ["pad_cout8", "pad_cout16", "pad_cin8"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_padded_steps_equal_the_plain_convolution(tool, pad, layout):
    """Each padded variant's timed calls (fp64, CPU) give the unpadded convolution's output, input gradient and
    weight gradient, with the real shapes, in the row's layout."""
    import torch

    torch.manual_seed(0)
    w_shape = (1, 6, 3, 3, 3) if pad.startswith("pad_cout") else (5, 3, 3, 3, 3)
    x = tool._layout(torch.randn(2, w_shape[1], 5, 6, 7, dtype=torch.float64), layout)
    w = tool._layout(torch.randn(w_shape, dtype=torch.float64), layout)
    args = ((1, 1, 1), (1, 1, 1), (1, 1, 1), False, [0, 0, 0], 1)
    gy = tool._layout(torch.randn(2, w_shape[0], 5, 6, 7, dtype=torch.float64), layout)
    plain, padded = tool.conv_steps(x, w, gy, args, layout), tool.conv_steps(x, w, gy, args, layout, pad)
    for op in OPS:
        ref, got = plain[op](), padded[op]()
        assert got.shape == ref.shape and (got - ref).abs().max() <= 1e-12 * ref.abs().max(), op
        if layout == "channels_last":
            assert got.is_contiguous(memory_format=torch.channels_last_3d), op


def test_only_skinny_times_the_skinny_shapes_padded(tmp_path):
    """``--only-skinny`` on Study A (small scale, a CPU): only the stem and the output convolution, each unpadded and
    with its paddings, every row ``ok``; the summary compares each padding with the unpadded time."""
    out = tmp_path / "skinny.csv"
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    argv = [sys.executable, str(TOOL), "--device", "cpu", "--scale", "small", "--networks", "study_a"]
    done = subprocess.run(
        [*argv, "--only-skinny", "--layouts", "channels_last", "--repeat", "2", "--warmup", "0", "--csv", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with out.open() as f:
        rows = list(csv.DictReader(f))
    got = sorted({(r["modules"], r["setting"]) for r in rows})
    assert got == [
        ("head.2", "bf16/channels_last"),
        ("head.2", "bf16/channels_last/pad_cout16"),
        ("head.2", "bf16/channels_last/pad_cout8"),
        ("stem", "bf16/channels_last"),
        ("stem", "bf16/channels_last/pad_cin8"),
    ]
    assert len(rows) == 5 * 3 and all(r["status"] == "ok" and float(r["ms_median"]) > 0 for r in rows)
    assert "pad_cout8" in done.stdout and "ms unpadded" in done.stdout
