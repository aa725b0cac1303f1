"""The fused GroupNorm + SiLU (+ residual) of accelbench.models.fused_groupnorm against ``nn.GroupNorm`` + ``F.silu``:
the operator's own forward and backward formulas in fp64 (``gradcheck``, and values against the plain modules to
1e-12), 2-D and 3-D, channels-last and contiguous; the Triton kernels under ``TRITON_INTERPRET=1`` where Triton imports
(fp32, tolerances below); the drop-in module's state dict; ``torch.compile``; and the configurations that build it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accelbench.models import fused_groupnorm as fg
from accelbench.models import group_norm_kernels as kernels

CASES = [  # (shape, memory format, groups)
    ((2, 6, 3, 4, 2), torch.channels_last_3d, 3),
    ((2, 6, 3, 4, 2), torch.contiguous_format, 2),
    ((2, 8, 5, 3), torch.channels_last, 4),
    ((2, 8, 5, 3), torch.contiguous_format, 2),
]
RESIDUALS = (None, "per_channel", "full")  # none; (B, C) broadcast over space (the time-embedding add); x's shape


def _inputs(shape, fmt, residual, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    x = (torch.randn(shape, generator=g, dtype=dtype) * 2 + 0.5).contiguous(memory_format=fmt).requires_grad_()
    w = torch.randn(c, generator=g, dtype=dtype).requires_grad_()
    b = torch.randn(c, generator=g, dtype=dtype).requires_grad_()
    r = {
        None: None,
        "per_channel": torch.randn(shape[:2], generator=g, dtype=dtype),
        "full": torch.randn(shape, generator=g, dtype=dtype),
    }[residual]
    return x, w, b, (r.requires_grad_() if r is not None else None)


def _modules_reference(x, w, b, r, groups, activation="silu"):
    """``nn.GroupNorm`` then ``nn.SiLU`` with the given parameters, on x + r: what the networks compute unfused."""
    gn = nn.GroupNorm(groups, x.shape[1]).to(x.dtype)
    if r is not None:
        x = x + (r if r.shape == x.shape else r[(...,) + (None,) * (x.dim() - 2)])
    y = torch.func.functional_call(gn, {"weight": w, "bias": b}, (x,))  # the module, with w and b in the graph
    return F.silu(y) if activation == "silu" else y


@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("shape,fmt,groups", CASES)
def test_operator_formulas_pass_fp64_gradcheck_and_match_group_norm_silu(
    monkeypatch, shape, fmt, groups, residual, activation
):
    """The custom operator's forward and hand-written backward as torch formulas (the Triton kernels compute the
    same in fp32: tested below), fp64: gradcheck on x, weight, bias and the residual; output and gradients equal to
    nn.GroupNorm + SiLU's to 1e-12 / 1e-10, in x's layout."""
    monkeypatch.setattr(kernels, "triton_on", lambda x: False)
    x, w, b, r = _inputs(shape, fmt, residual)
    ins = (x, w, b) + ((r,) if r is not None else ())

    def fused(*a):
        return fg.group_norm_act(a[0], groups, a[1], a[2], 1e-5, activation, a[3] if len(a) > 3 else None, "fused")

    assert torch.autograd.gradcheck(fused, ins)
    y = fused(*ins)
    ref = _modules_reference(x, w, b, r, groups, activation)
    assert (y - ref).abs().max() <= 1e-12 * max(1.0, ref.abs().max())
    assert y.stride() == x.stride()
    # gradients of a weighted sum against the plain modules' (fp64)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype)
    got = torch.autograd.grad(y, ins, gy)
    want = torch.autograd.grad(ref, ins, gy)
    for a, e in zip(got, want):
        assert (a - e).abs().max() <= 1e-10 * max(1.0, e.abs().max())


def test_the_reference_path_is_group_norm_then_silu_and_passes_gradcheck():
    """The CPU fallback (impl "reference", what "auto" runs on the CPU) is F.group_norm + F.silu: fp64 gradcheck,
    and it is what FusedGroupNorm runs here."""
    x, w, b, r = _inputs((2, 6, 3, 4, 2), torch.channels_last_3d, "per_channel")
    assert torch.autograd.gradcheck(lambda *a: fg.group_norm_act(*a[:1], 3, *a[1:3], 1e-5, "silu", a[3]), (x, w, b, r))
    m = fg.FusedGroupNorm(3, 6, activation="silu").double()
    with torch.no_grad():
        m.weight.copy_(w)
        m.bias.copy_(b)
    assert torch.equal(m(x, r), F.silu(F.group_norm(x + r[..., None, None, None], 3, w, b, 1e-5)))


def test_groups_that_do_not_divide_the_channels_are_refused_with_one_line():
    with pytest.raises(ValueError, match=r"^group_norm_act: 6 channels do not split into 4 groups$"):
        fg.group_norm_act(torch.randn(1, 6, 4, 4), 4)
    with pytest.raises(ValueError, match=r"num_channels \(6\) must be divisible by num_groups \(4\)"):
        fg.FusedGroupNorm(4, 6)
    with pytest.raises(ValueError, match=r"residual of shape \(1, 5\) is neither"):
        fg.group_norm_act(torch.randn(1, 6, 4, 4), 3, residual=torch.randn(1, 5))


def test_state_dict_is_nn_group_norms_both_ways():
    """FusedGroupNorm loads an nn.GroupNorm's state dict and the reverse (same keys, shapes, values), and ``of``
    holds the same parameter tensors."""
    gn = nn.GroupNorm(4, 12)
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()
    fused = fg.FusedGroupNorm(4, 12, activation="silu")
    fused.load_state_dict(gn.state_dict())
    assert list(fused.state_dict()) == list(gn.state_dict()) == ["weight", "bias"]
    back = nn.GroupNorm(4, 12)
    back.load_state_dict(fused.state_dict())
    assert all(torch.equal(back.state_dict()[k], gn.state_dict()[k]) for k in gn.state_dict())
    held = fg.FusedGroupNorm.of(gn, "silu")
    assert held.weight is gn.weight and held.bias is gn.bias
    x = torch.randn(2, 12, 5, 5).contiguous(memory_format=torch.channels_last)
    assert torch.allclose(held(x), F.silu(gn(x)), atol=1e-6)


def test_under_torch_compile_on_the_cpu_the_module_gives_the_same_output():
    """The module (the fallback on the CPU) through Inductor, and the fused operator through Dynamo and AOTAutograd
    with ``fullgraph=True`` (no graph break: the fake implementation and the autograd formula are registered)."""
    torch._dynamo.reset()
    m = fg.FusedGroupNorm(2, 8, activation="silu")
    x = torch.randn(2, 8, 3, 4, 5).contiguous(memory_format=torch.channels_last_3d)
    r = torch.randn(2, 8)
    assert torch.allclose(torch.compile(m)(x, r), m(x, r), atol=1e-5)
    m.impl = "fused"
    xg = x.clone().requires_grad_()
    y = torch.compile(m, backend="aot_eager", fullgraph=True)(xg, r)
    y.sum().backward()
    xe = x.clone().requires_grad_()
    ye = fg.group_norm_act_reference(xe, 2, m.weight, m.bias, m.eps, "silu", r)
    ye.sum().backward()
    assert torch.allclose(y, ye, atol=1e-5) and torch.allclose(xg.grad, xe.grad, atol=1e-5)


# --------------------------------------------------------------------------- Inductor's layout copies around the op
_OP_CALL = re.compile(
    r"^\s*(\w+) = torch\.ops\.accelbench\.(group_norm_act(?:_backward)?)(?:_fixed)?\.default\((.*)\)\s*$"
)
_KERNEL_CALL = re.compile(r"^\s*(?:cpp_fused_\w+|triton_\w+(?:\.run)?)\((.*)\)\s*$")
# the activation-shaped arguments of each operator (x; dy and x), by position
_OP_ACTIVATIONS = {"group_norm_act": 1, "group_norm_act_backward": 2}


def _layout_copies_around_the_op(code: str) -> tuple[int, int]:
    """(operator calls, activation tensors copied for them) in one Inductor wrapper: an activation argument of
    ``accelbench::group_norm_act(_backward)`` that a generated kernel (``cpp_fused_*``, ``triton_*``) wrote before the
    call, or its first output (y, dx) that one reads after it. In a conv -> op -> conv graph every such kernel is a
    layout copy (nothing else computes between the convolutions and the op)."""
    lines = code.splitlines()
    calls, copies = 0, 0
    for i, line in enumerate(lines):
        m = _OP_CALL.match(line)
        if not m:
            continue
        calls += 1
        result, op, args = m.groups()
        inputs = [a.strip() for a in args.split(",")[: _OP_ACTIVATIONS[op]]]
        kernels_before = [set(map(str.strip, k.group(1).split(","))) for k in map(_KERNEL_CALL.match, lines[:i]) if k]
        copies += sum(any(a in k for k in kernels_before) for a in inputs)
        out = next((o.group(1) for o in (re.match(rf"^\s*(\w+) = {result}\[0\]$", x) for x in lines[i:]) if o), None)
        kernels_after = [set(map(str.strip, k.group(1).split(","))) for k in map(_KERNEL_CALL.match, lines[i:]) if k]
        copies += any(out in k for k in kernels_after)
    return calls, copies


@pytest.mark.parametrize("layout", ["layout_optimization", "channels_last"])
def test_inductor_passes_channels_last_through_the_op(layout):
    """SR3's ``bf16_compile_layout_opt_fused_gn_cudagraphs`` compiles an NCHW network with Inductor's layout
    optimization forced (the options of ``sr3.model.compile_options``): the convolutions' activations are
    channels-last in the compiled graph. The operator is tagged ``flexible_layout`` and reads both layouts, so
    Inductor hands it the convolution's channels-last output and its output straight to the next convolution, forward
    and backward: no layout copy around it. With torch's default for custom operators (needs_fixed_stride_order: the
    eager graph's NCHW order) the CPU wrappers of this conv -> GroupNorm + SiLU (+ the time-embedding add) -> conv
    block had five: x before the forward, y after it, dy and x before the backward, dx after it (torch 2.13).
    Caches off: the FX graph cache key of torch 2.13 leaves out the custom operator's tags, so a cached compile of
    the old operator would be replayed unchanged. ``channels_last``: Study A's way (channels-last tensors and
    weights in eager, no layout optimization) with the fixed-stride registration (``accelbench::group_norm_act_fixed``:
    the flexible one failed Inductor's stride check there on the GPUs, group_norm_op says how): no copy either,
    since the eager order is channels-last (it fails on a fake that allocates contiguous outputs)."""
    from torch._inductor.utils import run_and_get_code

    from accelbench.experiments.sr3.model import compile_options

    class Block(nn.Module):
        def __init__(self, c=64, groups=32):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
            self.norm = fg.FusedGroupNorm(groups, c, activation="silu")
            self.norm.impl = "fused"  # the operator here (its torch formulas), not the CPU's reference

        def forward(self, x, temb):
            return self.conv2(self.norm(self.conv1(x), temb))

    torch.manual_seed(0)
    block = Block()
    block.norm.flexible_layout = layout == "layout_optimization"  # as sr3.network.set_norm chooses
    x, temb = torch.randn(2, 64, 32, 32, requires_grad=True), torch.randn(2, 64)
    options = compile_options(None, layout_optimization=layout == "layout_optimization").get("options", {})
    assert options.get("force_layout_optimization", False) == (layout == "layout_optimization")
    if layout == "channels_last":
        block = block.to(memory_format=torch.channels_last)
        x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    torch._dynamo.reset()
    compiled = torch.compile(block, options=options)

    def step():
        y = compiled(x, temb)
        (gx,) = torch.autograd.grad(y, x, torch.ones_like(y))
        return y, gx

    with torch.compiler.config.patch(force_disable_caches=True):
        (y, gx), codes = run_and_get_code(step)
    torch._dynamo.reset()
    counts = [_layout_copies_around_the_op(code) for code in codes]
    assert [calls for calls, _ in counts] == [1, 1]  # the forward and the backward operator, one wrapper each
    fixed = ["group_norm_act_fixed" in code or "group_norm_act_backward_fixed" in code for code in codes]
    assert fixed == [layout == "channels_last"] * 2  # the registration set_norm's rule picks
    assert sum(copies for _, copies in counts) == 0
    block.norm.impl = "reference"
    ye = block(x, temb)
    (gxe,) = torch.autograd.grad(ye, x, torch.ones_like(ye))
    assert torch.allclose(y, ye, atol=1e-4) and torch.allclose(gx, gxe, atol=1e-4)


def _op_reads_any_layout(dtype, rtol):
    """Under ``flexible_layout`` Inductor may pass the operator any strides: dense channels-last and contiguous x are
    read in place and y, dx come back in their layout; anything else (a channel slice: each sample dense, a gap
    between samples; a permuted dense layout) is copied contiguous first. Values against ``F.group_norm`` + SiLU and
    its autograd gradient (within ``rtol`` of the largest value); the fake implementations give the real strides
    (Inductor asserts them in the compiled code)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = torch.Generator().manual_seed(0)
    base = torch.randn(3, 16, 5, 6, generator=g, dtype=dtype)
    inputs = {
        "contiguous": base[:, :8].contiguous(),
        "channels_last": base[:, :8].contiguous(memory_format=torch.channels_last),
        "channel_slice": base[:, 8:],
        "channels_last_slice": base.contiguous(memory_format=torch.channels_last)[:, 8:],
        "permuted": base[:, :8].permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3),
    }
    w, b = torch.randn(8, generator=g, dtype=dtype), torch.randn(8, generator=g, dtype=dtype)
    for name, x in inputs.items():
        want = x.stride() if name in ("contiguous", "channels_last") else x.contiguous().stride()
        y, mean, rstd = torch.ops.accelbench.group_norm_act(x, w, b, None, 4, 1e-5, True)
        xr = x.detach().clone().requires_grad_()
        ref = F.silu(F.group_norm(xr, 4, w, b, 1e-5))
        dy = torch.randn(x.shape, generator=g, dtype=dtype)
        dx, _, _ = torch.ops.accelbench.group_norm_act_backward(dy, x, w, b, None, mean, rstd, 4, True)
        (dx_ref,) = torch.autograd.grad(ref, xr, dy)
        assert y.stride() == want and dx.stride() == want, name
        assert (y - ref).abs().max() <= rtol * ref.abs().max(), name
        assert (dx - dx_ref).abs().max() <= rtol * dx_ref.abs().max(), name
        with FakeTensorMode() as mode:
            fx, fw, fb, fdy = (mode.from_tensor(t) for t in (x, w, b, dy))
            fy, fmean, frstd = torch.ops.accelbench.group_norm_act(fx, fw, fb, None, 4, 1e-5, True)
            fdx, _, _ = torch.ops.accelbench.group_norm_act_backward(fdy, fx, fw, fb, None, fmean, frstd, 4, True)
        assert fy.stride() == y.stride() and fdx.stride() == dx.stride(), name


def test_the_op_formulas_read_any_layout_and_the_fake_allocates_like_them(monkeypatch):
    monkeypatch.setattr(kernels, "triton_on", lambda x: False)
    _op_reads_any_layout(torch.float64, 1e-12)


# --------------------------------------------------------------------------- the Triton kernels, interpreted
@pytest.fixture
def interpreted():
    """The module, where its Triton kernels run on the CPU: Triton imports and ``TRITON_INTERPRET=1`` was set before
    it loaded (Triton reads it when the kernels are defined)::

        TRITON_INTERPRET=1 python -m pytest tests/experiments/test_fused_groupnorm.py
    """
    if not (fg.has_triton() and kernels.triton_on(torch.empty(0))):
        pytest.skip("needs Triton and TRITON_INTERPRET=1 in the environment")
    return fg


# fp32 kernels against the fp32 reference: relative to the largest value of each tensor
TRITON_RTOL = 2e-5


def _fused_matches_reference(fg_module, shape, fmt, groups, residual):
    x, w, b, r = _inputs(shape, fmt, residual, dtype=torch.float32)
    assert kernels.triton_on(x)
    ins = (x, w, b) + ((r,) if r is not None else ())
    out = {}
    for impl in ("fused", "reference"):
        y = fg_module.group_norm_act(x, groups, w, b, 1e-5, "silu", r, impl)
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
        out[impl] = (y, *torch.autograd.grad(y, ins, gy))
    assert out["fused"][0].stride() == x.stride()
    for a, e in zip(out["fused"], out["reference"]):
        assert (a - e).abs().max() <= TRITON_RTOL * e.abs().max()


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize(
    "shape,fmt,groups",
    CASES + [((1, 12, 37, 41), torch.channels_last, 4), ((1, 24, 9, 10, 11), torch.channels_last_3d, 8)],
)
def test_triton_kernels_match_the_reference_in_fp32(interpreted, monkeypatch, shape, fmt, groups, residual):
    """Under TRITON_INTERPRET=1 (small shapes; channel counts not powers of two; several chunks, each of several
    tiles, through TARGET_PROGRAMS=2; the combine kernels over several [BLOCK_K, BLOCK_CPG] tiles, through
    COMBINE_TILE=2): output and every gradient within 2e-5 of the largest value of the reference's."""
    monkeypatch.setattr(kernels, "TARGET_PROGRAMS", 2)  # chunks of several tiles: the chunk partials, Chan's merge
    monkeypatch.setattr(kernels, "COMBINE_TILE", 2)  # one chunk per combine tile: the loops over K
    _fused_matches_reference(interpreted, shape, fmt, groups, residual)


@pytest.mark.parametrize("residual", RESIDUALS)
def test_triton_kernels_skip_the_fully_masked_tiles_of_the_last_chunk(interpreted, monkeypatch, residual):
    """Chunks are whole numbers of tiles (a constexpr trip count); the last chunk's tiles past S are fully masked and
    must add nothing (no 0/0, no count of them): S = 40 positions in tiles of 4, chunks of 4 tiles, the last
    chunk with 2 tiles of data and 2 empty."""
    monkeypatch.setattr(kernels, "TILE", 32)
    monkeypatch.setattr(kernels, "TARGET_PROGRAMS", 3)
    assert kernels.blocks(8, 40, 1) == (8, 4, 4, 3)  # BLOCK_C, BLOCK_S, tiles per chunk, chunks: 3 x 16 > 40 + 4
    _fused_matches_reference(interpreted, (1, 8, 5, 8), torch.channels_last, 2, residual)


@pytest.mark.parametrize("offset", [1e4, -3e3])
def test_triton_statistics_keep_their_precision_far_from_zero(interpreted, monkeypatch, offset):
    """The statistics kernel sums x - shift (shift: each chunk's first position) element-wise and reduces once: the
    variance of fp32 data of mean ``offset`` and unit spread (a plain sum of squares would lose it to cancellation:
    1e8 against 1 in fp32) stays within the fp32 tolerance, over several chunks of several tiles."""
    monkeypatch.setattr(kernels, "TARGET_PROGRAMS", 2)
    x, w, b, _ = _inputs((2, 8, 9, 10), torch.channels_last, None, dtype=torch.float32)
    x = (x + offset).detach().requires_grad_()
    y = interpreted.group_norm_act(x, 2, w, b, 1e-5, "silu", None, "fused")
    # against fp64 (torch's own fp32 CPU group_norm on channels-last input loses this case: 5,488 off on outputs of 8)
    e = F.silu(F.group_norm(x.double(), 2, w.double(), b.double(), 1e-5))
    assert (y.double() - e).abs().max() <= 1e-3 * e.abs().max()  # fp32 data at 1e4: rounding 1e-3 of the spread


def test_triton_kernels_read_any_layout_and_the_fake_allocates_like_them(interpreted):
    """The kernels read x and write y, dx through x's strides: a channel slice (each sample dense, a gap between
    samples) reached them uncopied and y, allocated contiguous by ``empty_like``, was written at x's sample stride."""
    _op_reads_any_layout(torch.float32, TRITON_RTOL)


def test_launch_geometry_needs_no_triton():
    """The launch geometry is plain Python (the fast tiers have no Triton: these and the torch-formula tests above
    run there; the interpreted kernels need Triton and ``TRITON_INTERPRET=1``: the system tier's
    tests/system/test_triton_interpret.py installs Triton 3.6.0 and runs this file so)."""
    assert kernels.next_power_of_2(1) == 1 and kernels.next_power_of_2(12) == 16 and kernels.next_power_of_2(16) == 16
    assert kernels.cdiv(7, 2) == 4
    # Study A 64 x 128^3, batch 1: 64-channel tiles of 64 positions, 1,024 chunks of 32 tiles
    assert kernels.blocks(64, 128**3, 1) == (64, 64, 32, 1024)
    # 1,024 chunks of 2 channels per group: tiles of 1,024 x 2, one per chunk
    assert kernels.combine_blocks(1024, 2) == (1024, 2, 1)
    assert kernels.combine_blocks(1024, 6) == (256, 8, 4)


# --------------------------------------------------------------------------- the configurations build it
# a 32 px SR3 U-Net with attention on its 8 px level (workflow/accelbench/experiments/sr3/tests/test_sr3_scaling.py's)
SR3_TINY = dict(
    hr_size=32,
    factor=4,
    inner_channels=8,
    channel_mult=[1, 2, 2],
    num_res_blocks=1,
    attention_resolutions=[8],
    num_heads=1,
    dropout=0.0,
    norm_groups=4,
    timesteps=2000,
    beta_start=1e-6,
    beta_end=1e-2,
    lr=2e-5,
    batch_size=4,
)


def _fused_count(model):
    return sum(isinstance(m, fg.FusedGroupNorm) for m in model.modules())


def test_study_a_fused_configuration_builds_the_fused_module():
    """``bf16_channels_last_3d_ndhwc_fused_gn_compile_cudagraphs(_autotuned)``: norm "fused" reaches Med-DDPM's
    network (every GroupNorm swapped, same state dict, SiLU in the blocks' and the head's norms), the output equals
    the plain network's, and the existing configurations keep their norm."""
    from accelbench.experiments.unet3d.configs import VARIANTS
    from accelbench.experiments.unet3d.med_ddpm_unet import MedDDPMUNet, ResidualBlock
    from accelbench.experiments.unet3d.network import set_implementations

    v = VARIANTS["bf16_channels_last_3d_ndhwc_fused_gn_compile_cudagraphs_autotuned"]
    assert v.norm == "fused" and v.rewrites_network and v.series.startswith("ours")
    assert VARIANTS["bf16_channels_last_3d_ndhwc_compile_cudagraphs_autotuned"].norm == "channel_sums"
    torch.manual_seed(0)
    plain = MedDDPMUNet(3, 1, base_channels=8, norm_groups=4, attention_levels=(False,) * 3 + (True, False))
    net = MedDDPMUNet(3, 1, base_channels=8, norm_groups=4, attention_levels=(False,) * 3 + (True, False))
    net.load_state_dict(plain.state_dict())
    set_implementations(net, v)
    n_gn = sum(isinstance(m, nn.GroupNorm) for m in plain.modules())
    assert _fused_count(net) == n_gn and list(net.state_dict()) == list(plain.state_dict())
    assert all(
        m.norm1.activation == m.norm2.activation == "silu" for m in net.modules() if isinstance(m, ResidualBlock)
    )
    assert net.head[0].activation == "silu" and isinstance(net.head[1], nn.Identity)
    x, t = torch.randn(1, 3, 16, 16, 16), torch.tensor([10])
    with torch.no_grad():
        ref = plain(x, t)
        assert (net(x.contiguous(memory_format=torch.channels_last_3d), t) - ref).abs().max() <= 1e-4 * ref.abs().max()
    net.set_implementations()  # back to Med-DDPM's modules
    assert _fused_count(net) == 0 and isinstance(net.head[1], nn.SiLU)


def test_sr3_fused_configurations_build_the_fused_module(monkeypatch):
    """SR3's ``*_fused_gn_cudagraphs``: norm "fused" recorded in the configuration and reaching the Trainer's network
    (every GroupNorm swapped, the resnet blocks' forward fused, same state dict), output equal to MONAI's."""
    from accelbench.backends.device import Device
    from accelbench.experiments.sr3 import configs as sr3_configs
    from accelbench.experiments.sr3 import model as sr3
    from accelbench.experiments.sr3.settings import resolve_settings

    for name in ("bf16_compile_layout_opt_fused_gn_cudagraphs", "bf16_compile_channels_last_fused_gn_cudagraphs"):
        conf = sr3_configs.get(name)
        assert conf.series == "ours" and conf.to_dict()["norm"] == "fused"
    assert sr3_configs.get("bf16_compile_layout_opt_channel_sums_cudagraphs").norm == "channel_sums"
    monkeypatch.setattr(torch, "compile", lambda net, **kw: net)  # no compiler needed to see the module
    s = resolve_settings(SR3_TINY, "small", {})
    plain = sr3.build_unet(s)
    fused = sr3.set_norm(sr3.build_unet(s), "fused")
    fused.load_state_dict(plain.state_dict())
    assert list(fused.state_dict()) == list(plain.state_dict())
    n_gn = sum(type(m) is nn.GroupNorm for m in plain.modules())
    assert n_gn > 0 and _fused_count(fused) == n_gn
    x, t = torch.randn(2, 2, s.hr_size, s.hr_size), torch.tensor([3, 7])
    with torch.no_grad():
        ref = plain(x, t)
        assert (fused(x, t) - ref).abs().max() <= 1e-5 * ref.abs().max()
    data = sr3.PatchSet(np.random.rand(8, 32, 32).astype(np.float32), np.random.rand(8, 8, 8).astype(np.float32), 32)
    conf = sr3_configs.get("bf16_compile_channels_last_fused_gn_cudagraphs")
    tr = sr3.Trainer(s, Device("cpu"), data, dataclasses.replace(conf, precision="fp32"), seed=0)
    assert _fused_count(tr.model) == n_gn
    tr.train_step()  # forward and backward through the fused blocks
    # the operator's registration follows the layout optimization: flexible_layout where it is forced (layout_opt),
    # the fixed stride order in a channels-last eager network (as Study A's)
    assert {m.flexible_layout for m in tr.model.modules() if isinstance(m, fg.FusedGroupNorm)} == {False}
    forced = sr3.Trainer(s, Device("cpu"), data, sr3_configs.get("bf16_compile_layout_opt_fused_gn_cudagraphs"), seed=0)
    assert {m.flexible_layout for m in forced.model.modules() if isinstance(m, fg.FusedGroupNorm)} == {True}


def test_study_a_fused_configurations_call_the_fixed_stride_operator():
    """Study A's fused-GroupNorm configurations compile a channels_last_3d network with Inductor's layout optimization
    off (its heuristic turns it off for Med-DDPM's U-Net, and the _no_layout_opt ones turn it off outright): their
    GroupNorms call ``accelbench::group_norm_act_fixed``, whose inputs Inductor keeps in the eager (channels-last)
    stride order. The flexible registration failed Inductor's stride check there (H100 and H200, torch 2.11)."""
    import yaml

    from accelbench.experiments.unet3d import configs as a_configs
    from accelbench.experiments.unet3d.network import build_network, set_implementations

    u = yaml.safe_load((Path(__file__).parents[2] / "config/config.yaml").read_text())["unet3d_profile"]
    s = a_configs.resolve_settings(
        "whole_head", u["presets"], "small", u["scales"], network="med_ddpm", micro_batches=1
    )
    for variant in (a_configs.NDHWC_FUSED_GN, a_configs.PADCONV):
        model = set_implementations(build_network(s), variant)
        fused = [m for m in model.modules() if isinstance(m, fg.FusedGroupNorm)]
        assert fused and not any(m.flexible_layout for m in fused)
    x = torch.randn(1, fused[0].num_channels, 4, 4, 4).contiguous(memory_format=torch.channels_last_3d)
    with torch.no_grad():
        calls = []
        real = fg.group_norm_act_fixed_op
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(fg, "group_norm_act_fixed_op", lambda *a: calls.append(1) or real(*a))
            fused[0].impl = "fused"
            y = fused[0](x)
    assert calls == [1] and y.is_contiguous(memory_format=torch.channels_last_3d)
