#!/usr/bin/env python3
"""Study A "ours" probe: where the bf16 + torch.compile training step of Med-DDPM's 3D U-Net spends its
time on one GPU, and which options cut it.

Standalone measurement script (no product change). It builds the product's network
(:func:`accelbench.experiments.unet3d.configs.build_network` -> :class:`accelbench.models.med_ddpm_unet.MedDDPMUNet`,
whole-head preset: 128^3, 3 in / 1 out, base 64, mult (1, 1, 2, 3, 4), attention at level 3 + middle) and runs the
product's training step of ``bf16_compile_cudagraphs_autotuned`` (``Workload.train_step`` in
``experiments/unet3d/workload.py``): 2 micro-batches of (noise, cosine-schedule ``add_noise``, ``cat([x_t, mask])``,
bf16 autocast forward, L1 on epsilon / 2, backward), then one Adam step (lr 1e-5, PyTorch's default foreach Adam),
cuDNN autotuning on, TF32 off, ``.grad`` kept as zeros outside the CUDA-graph pool when CUDA graphs run.

Each variant changes only how the same parameters are laid out or how the same arithmetic is expressed:

- ``layout``: ``ncdhw`` (the product) or ``cl`` (model and inputs in ``torch.channels_last_3d``);
- ``attn``: ``orig`` (the product's ``SpatialAttention``: reshape to (B, C, N), 1x1 Conv1d q/k/v and output, einsum),
  ``tokens`` (the same arithmetic on a (B, N, C) token view of the NDHWC map: GroupNorm on the 5-D map, the Conv1d
  weights applied with ``F.linear``, q*s @ (k*s)^T, fp32 softmax, @ v, identical rounding points) or ``sdpa``
  (the tokens version with ``F.scaled_dot_product_attention``: same scale ch^-1/2, scores kept in fp32 inside the
  kernel instead of rounded to bf16 before the softmax);
- ``ckpt``: the attention block gradient-checkpointed (Med-DDPM, the product) or not;
- ``up``: ``orig`` (``F.interpolate(trilinear)``), ``sep`` (the same x2 trilinear interpolation, align_corners=False,
  written as three separable 1-D passes 0.25/0.75 with edge clamping, computed in fp32 and rounded once to the input
  dtype: pointwise forward and backward, no index_put), ``rt`` (``F.interpolate`` on a contiguous copy, result back
  to channels_last_3d);
- ``gradcl``: every Conv3d output passes through an identity whose backward makes the gradient channels_last_3d;
- ``mode``: torch.compile mode (``reduce-overhead`` = CUDA graphs, ``default``, ``max-autotune``, ...);
- ``adam``: ``foreach`` (product) or ``fused``.

Per variant: compile + warm-up steps, ``--repeat`` timed steps (CUDA events, synchronised per step, like the
product's ``measure.timing.time_steps``): median / p10 / p90; peak memory; numerics: the predicted noise of the first
micro-batch of the first step (fixed input x_t at t = 125, same weights) against the bf16 compile reference variant
(``ref_ncdhw_cg``) and against an fp32 eager forward (TF32 off, the product's quality reference; tolerance 0.05);
one profiled step (torch.profiler): kernel classes, the top kernels with counts, and, where the step is not a CUDA
graph, which operator launched each ATen same-dtype copy kernel.

Outputs (``--out``, default ``$OUT``): ``study_a_ours_h200.csv`` (one row per variant), ``study_a_ours_kernels.csv``
(top kernels per variant), ``study_a_ours_copies.csv`` (copy kernels by launching operator), ``study_a_ours.json``.

    PYTHONPATH=workflow python3 reference_runs/h200x1-2026-12-02/notes/study_a_ours_probe.py --variants ref_ncdhw_cg,cl_fix_cg
    PYTHONPATH=workflow python3 reference_runs/h200x1-2026-12-02/notes/study_a_ours_probe.py --device cpu --tiny --variants ...   # smoke test
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from accelbench.experiments.unet3d.configs import ModelSettings  # noqa: E402
from accelbench.experiments.unet3d.networks import build_network  # noqa: E402
from accelbench.models import med_ddpm_unet as mdu  # noqa: E402

AUTOTUNED_BASELINE_MS = 1726.5  # baseline_autotuned, H200 reference run
FLOP_PER_STEP = 33.2e12  # one 2-micro-batch training step at 128^3
PEAK_BF16 = 989.4e12  # H200 bf16 dense peak
CL = torch.channels_last_3d

# whole-head preset (config/config.yaml unet3d_profile.presets.whole_head, scale "paper")
WHOLE_HEAD = ModelSettings(
    preset="whole_head",
    scale="paper",
    volume=(128, 128, 128),
    spacing_mm=(1.5, 1.5, 1.5),
    base_channels=64,
    channel_mult=(1, 1, 2, 3, 4),
    num_res_blocks=1,
    attention_resolutions=(16,),
    num_heads=1,
    image_channels=1,
    mask_channels=2,
    out_channels=1,
    norm_groups=32,
    timesteps=250,
    schedule="cosine",
    lr=1e-5,
    batch_size=1,
    network="med_ddpm",
    micro_batches=2,
)
# CPU smoke test: 16^3, width 16, attention at level 3 (2^3 voxels) + middle, like the 128^3 network's level 3
TINY = dataclasses.replace(
    WHOLE_HEAD, scale="tiny", volume=(16, 16, 16), base_channels=16, norm_groups=8, attention_resolutions=(2,)
)


# --------------------------------------------------------------------------- variants
@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    layout: str = "ncdhw"  # ncdhw | cl
    attn: str = "orig"  # orig | tokens | sdpa
    ckpt: bool = True  # attention gradient-checkpointed
    up: str = "orig"  # orig | sep | rt
    gradcl: bool = False
    gn: str = "native"  # native (nn.GroupNorm) | cl (var_mean on a grouped view) | clsum (per-channel sums)
    mode: str = "reduce-overhead"  # torch.compile mode; "default" = mode None; "eager" = no compile
    options: tuple = ()  # extra inductor options ((key, value), ...): compiled with options= instead of mode=
    adam: str = "foreach"  # foreach | fused
    note: str = ""

    @property
    def cuda_graphs(self) -> bool:
        return self.mode in ("reduce-overhead", "max-autotune") or dict(self.options).get("triton.cudagraphs", False)


MODE_OPTIONS = {
    "default": {},
    "reduce-overhead": {"triton.cudagraphs": True},
    "max-autotune": {"max_autotune": True, "triton.cudagraphs": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}

_V = [
    Variant("ref_ncdhw_cg", note="product bf16_compile_cudagraphs_autotuned (the reference)"),
    Variant("ref_ncdhw_default", mode="default", note="product layout, no CUDA graphs"),
    Variant("cl_naive_default", layout="cl", mode="default", note="channels_last_3d as is, no CUDA graphs"),
    Variant("cl_naive_cg", layout="cl", note="channels_last_3d as is"),
    Variant("cl_sep_default", layout="cl", up="sep", mode="default", note="channels_last_3d + separable upsample"),
    Variant(
        "cl_tok_default", layout="cl", attn="tokens", mode="default", note="channels_last_3d + token-layout attention"
    ),
    Variant(
        "cl_fix_default",
        layout="cl",
        attn="tokens",
        up="sep",
        mode="default",
        note="(a) channels_last_3d + token attention + separable upsample, no CUDA graphs",
    ),
    Variant("cl_fix_cg", layout="cl", attn="tokens", up="sep", note="(a) + CUDA graphs"),
    Variant("cl_fix_rt_cg", layout="cl", attn="tokens", up="rt", note="(a) with contiguous round-trip upsample"),
    Variant("cl_fix_nockpt_cg", layout="cl", attn="tokens", up="sep", ckpt=False, note="(a)+(b)"),
    Variant("cl_fix_sdpa_cg", layout="cl", attn="sdpa", up="sep", note="(a)+(c), attention checkpointed"),
    Variant("cl_fix_nockpt_sdpa_cg", layout="cl", attn="sdpa", up="sep", ckpt=False, note="(a)+(b)+(c)"),
    Variant(
        "cl_fix_nockpt_sdpa_default",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        mode="default",
        note="(a)+(b)+(c) without CUDA graphs",
    ),
    Variant(
        "cl_fix_nockpt_sdpa_gradcl_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gradcl=True,
        note="(a)+(b)+(c) + channels-last gradients at every conv",
    ),
    Variant(
        "cl_fix_nockpt_sdpa_gradcl_default",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gradcl=True,
        mode="default",
        note="as above, no CUDA graphs",
    ),
    Variant(
        "cl_fix_nockpt_sdpa_fused_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        adam="fused",
        note="(a)+(b)+(c) + fused Adam",
    ),
    Variant(
        "cl_fix_nockpt_sdpa_maxat",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        mode="max-autotune",
        note="(a)+(b)+(c)+(d) max-autotune (CUDA graphs included)",
    ),
    Variant(
        "cl_fix_nockpt_sdpa_maxat_atenconv",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        mode="max-autotune",
        options=(("max_autotune", True), ("triton.cudagraphs", True), ("max_autotune_conv_backends", "ATEN")),
        note="max-autotune with convolutions left to cuDNN (GEMM/pointwise tuned)",
    ),
    Variant(
        "cl_fixgn_nockpt_sdpa_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="cl",
        note="(a incl. layout-preserving GroupNorm)+(b)+(c)",
    ),
    Variant(
        "cl_fixgn_nockpt_sdpa_fused_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="cl",
        adam="fused",
        note="(a incl. GroupNorm)+(b)+(c) + fused Adam",
    ),
    Variant(
        "cl_fixgn_cg",
        layout="cl",
        attn="tokens",
        up="sep",
        gn="cl",
        note="(a incl. GroupNorm), attention checkpointed, einsum-equivalent",
    ),
    Variant(
        "cl_fixgn_nockpt_cg", layout="cl", attn="tokens", up="sep", ckpt=False, gn="cl", note="(a incl. GroupNorm)+(b)"
    ),
    Variant(
        "cl_fixgn_nockpt_sdpa_default",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="cl",
        mode="default",
        note="(a incl. GroupNorm)+(b)+(c), no CUDA graphs",
    ),
    Variant(
        "cl_fixgn_nockpt_sdpa_gradcl_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="cl",
        gradcl=True,
        note="(a incl. GroupNorm)+(b)+(c) + channels-last gradients at every conv",
    ),
    Variant(
        "cl_fixgn_nockpt_sdpa_maxat",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="cl",
        mode="max-autotune",
        note="(a incl. GroupNorm)+(b)+(c)+(d) max-autotune (CUDA graphs included)",
    ),
    Variant(
        "cl_gnsum_nockpt_sdpa_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="clsum",
        note="(a with GroupNorm from per-channel sums)+(b)+(c)",
    ),
    Variant(
        "cl_gnsum_nockpt_sdpa_fused_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="clsum",
        adam="fused",
        note="(a with GroupNorm from per-channel sums)+(b)+(c) + fused Adam",
    ),
    Variant(
        "cl_gnsum_cg",
        layout="cl",
        attn="tokens",
        up="sep",
        gn="clsum",
        note="(a with GroupNorm from per-channel sums), attention checkpointed, einsum-equivalent",
    ),
    Variant(
        "cl_gnsum_nockpt_sdpa_gradcl_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="clsum",
        gradcl=True,
        note="(a with GroupNorm from per-channel sums)+(b)+(c) + channels-last gradients at every conv",
    ),
    Variant(
        "cl_gnsum_nockpt_sdpa_gradcl_fused_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="clsum",
        gradcl=True,
        adam="fused",
        note="(a with GroupNorm from per-channel sums)+(b)+(c) + channels-last gradients + fused Adam",
    ),
    Variant(
        "cl_gnsum_nockpt_sdpa_fused_cdt_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="clsum",
        adam="fused",
        options=(("triton.cudagraphs", True), ("coordinate_descent_tuning", True)),
        note="(a with GroupNorm from per-channel sums)+(b)+(c) + fused Adam + Inductor coordinate-descent tuning",
    ),
    Variant(
        "cl_gnsum_nockpt_sdpa_gradcl_fused_cdt_cg",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="clsum",
        gradcl=True,
        adam="fused",
        options=(("triton.cudagraphs", True), ("coordinate_descent_tuning", True)),
        note="the product's NDHWC configuration (channels-last gradients, fused Adam) + coordinate-descent tuning",
    ),
    Variant(
        "cl_gnsum_nockpt_sdpa_fused_maxat",
        layout="cl",
        attn="sdpa",
        up="sep",
        ckpt=False,
        gn="clsum",
        adam="fused",
        options=(("triton.cudagraphs", True), ("max_autotune", True), ("max_autotune_conv_backends", "ATEN")),
        note="(a with GroupNorm from per-channel sums)+(b)+(c) + fused Adam + max-autotune, convolutions left to cuDNN",
    ),
    Variant(
        "ncdhw_fix_nockpt_sdpa_cg",
        attn="sdpa",
        up="sep",
        ckpt=False,
        note="(b)+(c)+separable upsample in the product layout",
    ),
]
VARIANTS = {v.name: v for v in _V}
REFERENCE = "ref_ncdhw_cg"


# --------------------------------------------------------------------------- network rewrites (same parameters)
class TokenAttention(nn.Module):
    """The product's :class:`SpatialAttention` (same GroupNorm / Conv1d modules and parameters) computed on a
    (B, N, C) token view: for a channels_last_3d map the view and the way back are free."""

    def __init__(self, orig: mdu.SpatialAttention, sdpa: bool, checkpointed: bool):
        super().__init__()
        self.heads, self.norm, self.qkv, self.proj = orig.heads, orig.norm, orig.qkv, orig.proj
        self.sdpa, self.checkpointed = sdpa, checkpointed

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        b, c, d, h, w = x.shape
        n = d * h * w
        tok = x.permute(0, 2, 3, 4, 1).reshape(b, n, c)
        hn = self.norm(x).permute(0, 2, 3, 4, 1).reshape(b, n, c)  # GroupNorm over (C/G, D, H, W) = on (B, C, N)
        qkv = F.linear(hn, self.qkv.weight.squeeze(-1), self.qkv.bias)  # the 1x1 Conv1d: (B, N, 3C)
        width = c // self.heads
        qkv = qkv.reshape(b, n, self.heads, 3 * width).permute(0, 2, 1, 3)  # heads split before q/k/v, as legacy
        q, k, v = qkv.split(width, dim=-1)
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v)  # scale width^-1/2 = (width^-1/4)^2
        else:
            s = width**-0.25
            wts = (q * s) @ (k * s).transpose(-1, -2)
            wts = torch.softmax(wts.float(), dim=-1).to(wts.dtype)
            out = wts @ v
        out = out.permute(0, 2, 1, 3).reshape(b, n, c)
        y = tok + F.linear(out, self.proj.weight.squeeze(-1), self.proj.bias)
        return y.reshape(b, d, h, w, c).permute(0, 4, 1, 2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.checkpointed and torch.is_grad_enabled():
            return checkpoint(self._attend, x, use_reentrant=False)
        return self._attend(x)


def _up2(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x2 linear interpolation along ``dim`` (align_corners=False): out[2i] = .75 x[i] + .25 x[max(i-1, 0)],
    out[2i+1] = .75 x[i] + .25 x[min(i+1, n-1)]."""
    n = x.shape[dim]
    prev = torch.cat([x.narrow(dim, 0, 1), x.narrow(dim, 0, n - 1)], dim)
    nxt = torch.cat([x.narrow(dim, 1, n - 1), x.narrow(dim, n - 1, 1)], dim)
    return torch.stack([0.75 * x + 0.25 * prev, 0.75 * x + 0.25 * nxt], dim + 1).flatten(dim, dim + 1)


def trilinear_up2(x: torch.Tensor) -> torch.Tensor:
    """``F.interpolate(x, scale_factor=2, mode="trilinear")`` as three separable passes (bf16/fp16 in fp32, rounded
    once at the end, as the CUDA kernel's fp32 accumulation)."""
    y = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    for dim in (2, 3, 4):
        y = _up2(y, dim)
    return y.to(x.dtype)


class SepUpsample(nn.Module):
    def __init__(self, orig: mdu.Upsample, how: str):
        super().__init__()
        self.conv, self.how = orig.conv, how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "sep":
            return self.conv(trilinear_up2(x))
        up = F.interpolate(x.contiguous(), scale_factor=2, mode="trilinear")  # "rt": contiguous round trip
        return self.conv(up.contiguous(memory_format=CL))


class CLGroupNorm(nn.Module):
    """``nn.GroupNorm`` (same parameters) as fp32 ``var_mean`` over a (B, G, C/G, ...) view and a pointwise
    normalisation: elementwise ops keep the input's memory format, so a channels_last_3d map stays channels_last_3d
    (ATen's and Inductor's ``native_group_norm`` make the input contiguous and return NCDHW). fp32 like the product's
    GroupNorm under autocast."""

    def __init__(self, gn: nn.GroupNorm):
        super().__init__()
        self.num_groups, self.eps, self.weight, self.bias = gn.num_groups, gn.eps, gn.weight, gn.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        xg = (x.float() if x.dtype in (torch.float16, torch.bfloat16) else x).unflatten(1, (self.num_groups, -1))
        var, mean = torch.var_mean(xg, dim=tuple(range(2, xg.dim())), correction=0, keepdim=True)
        y = ((xg - mean) * torch.rsqrt(var + self.eps)).flatten(1, 2)
        shape = (1, c) + (1,) * (x.dim() - 2)
        return y * self.weight.view(shape) + self.bias.view(shape)


class CLSumGroupNorm(CLGroupNorm):
    """``nn.GroupNorm`` (same parameters) from per-channel sums: fp32 sum and sum of squares over (D, H, W) per
    (sample, channel) -- on a channels_last_3d map a reduction over the outer axes with channels contiguous -- then
    the (B, C) sums added per group (B, G), var = E[x^2] - E[x]^2 clamped at 0, and one pointwise
    ``x * scale + shift`` with per-(sample, channel) scale and shift, which keeps the input's memory format."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape[:2]
        g = self.num_groups
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        dims = tuple(range(2, x.dim()))
        n = (x.numel() // (b * c)) * (c // g)
        s1 = xf.sum(dims).view(b, g, -1).sum(-1)  # (B, G)
        s2 = (xf * xf).sum(dims).view(b, g, -1).sum(-1)
        mean = s1 / n
        rstd = torch.rsqrt((s2 / n - mean * mean).clamp_min(0) + self.eps)
        scale = rstd.repeat_interleave(c // g, 1) * self.weight  # (B, C)
        shift = self.bias - mean.repeat_interleave(c // g, 1) * scale
        shape = (b, c) + (1,) * (x.dim() - 2)
        return xf * scale.view(shape) + shift.view(shape)


class _CLGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.contiguous(memory_format=CL)


class ConvCLGrad(nn.Module):
    def __init__(self, conv: nn.Conv3d):
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _CLGrad.apply(self.conv(x))


def rewrite(model: nn.Module, v: Variant) -> nn.Module:
    """Swap modules in place per the variant (the parameters stay the same tensors)."""

    def swap(pred, make):
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if pred(child):
                    setattr(parent, name, make(child))

    if v.attn == "orig":
        for m in model.modules():
            if isinstance(m, mdu.SpatialAttention):
                m.checkpointed = v.ckpt
    else:
        swap(lambda m: isinstance(m, mdu.SpatialAttention), lambda m: TokenAttention(m, v.attn == "sdpa", v.ckpt))
    if v.up != "orig":
        swap(lambda m: isinstance(m, mdu.Upsample), lambda m: SepUpsample(m, v.up))
    if v.gn == "cl":
        swap(lambda m: isinstance(m, nn.GroupNorm), CLGroupNorm)
    elif v.gn == "clsum":
        swap(lambda m: isinstance(m, nn.GroupNorm), CLSumGroupNorm)
    if v.gradcl:
        swap(lambda m: isinstance(m, nn.Conv3d), ConvCLGrad)
    return model


# --------------------------------------------------------------------------- the product's training step
def cosine_alphas_cumprod(timesteps: int, s: float = 0.008) -> torch.Tensor:
    steps = torch.arange(timesteps + 1, dtype=torch.float64) / timesteps
    f = torch.cos((steps + s) / (1 + s) * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, 0).float()


def make_data(s: ModelSettings, seed: int):
    """A smooth volume in [-1, 1] and a one-hot (brain sphere, empty tumour channel) mask, (1, C, D, H, W)."""
    g = torch.Generator().manual_seed(seed)
    d = s.volume[0]
    coarse = torch.randn(1, 1, max(d // 8, 2), max(d // 8, 2), max(d // 8, 2), generator=g)
    image = torch.tanh(F.interpolate(coarse, size=s.volume, mode="trilinear"))
    ax = torch.linspace(-1, 1, d)
    r = (ax[:, None, None] ** 2 + ax[None, :, None] ** 2 + ax[None, None, :] ** 2).sqrt()
    brain = (r < 0.7).float()
    mask = torch.stack([brain, torch.zeros_like(brain)])[None]
    probe_noise = torch.randn(1, s.image_channels, *s.volume, generator=g)
    return image, mask, probe_noise


class Work:
    def __init__(self, s: ModelSettings, v: Variant, state: dict, data, dev: torch.device, seed: int):
        self.s, self.v, self.dev = s, v, dev
        torch.manual_seed(seed)
        model = build_network(s)
        model.load_state_dict(state)
        rewrite(model, v)
        self.fmt = CL if v.layout == "cl" else torch.contiguous_format
        self.model = model.to(dev, memory_format=self.fmt)
        if v.mode == "eager":
            self.net = self.model
        elif v.options:
            self.net = torch.compile(self.model, options=dict(v.options))
        else:
            self.net = torch.compile(self.model, mode=None if v.mode == "default" else v.mode)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=s.lr, **({"fused": True} if v.adam == "fused" else {}))
        self.stable = v.cuda_graphs and s.micro_batches > 1 and dev.type == "cuda"
        if self.stable:
            for p in self.model.parameters():
                p.grad = torch.zeros_like(p)
        image, mask, probe_noise = data
        self.image = image.to(dev).contiguous(memory_format=self.fmt)
        self.mask = mask.to(dev).contiguous(memory_format=self.fmt)
        self.probe_noise = probe_noise.to(dev).contiguous(memory_format=self.fmt)
        self.acp = cosine_alphas_cumprod(s.timesteps).to(dev)
        self.gen = torch.Generator(device=dev).manual_seed(seed)

    def add_noise(self, x0, noise, t):
        a = self.acp[t].view(-1, 1, 1, 1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def train_step(self, probe: bool = False):
        n, b = self.s.micro_batches, self.image.shape[0]
        pred0 = None
        for i in range(n):
            if probe and i == 0:
                t = torch.full((b,), self.s.timesteps // 2, device=self.dev, dtype=torch.long)
                noise = self.probe_noise
            else:
                t = torch.randint(0, self.s.timesteps, (b,), device=self.dev, generator=self.gen)
                noise = torch.randn(self.image.shape, device=self.dev, generator=self.gen).contiguous(
                    memory_format=self.fmt
                )
            x_t = self.add_noise(self.image, noise, t)
            inp = torch.cat([x_t, self.mask], dim=1).contiguous(memory_format=self.fmt)
            with torch.autocast(self.dev.type, dtype=torch.bfloat16):
                out = self.net(inp, t).float()
            if probe and i == 0:
                pred0 = out.detach().clone().cpu()
            loss = F.l1_loss(out, noise) / n
            loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=not self.stable)
        return pred0


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_steps(work: Work, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        if work.dev.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            work.train_step()
            e1.record()
            e1.synchronize()
            out.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter()
            work.train_step()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# --------------------------------------------------------------------------- profile analysis
def kclass(name: str) -> str:
    n = name.lower()
    if "nchwtonhwc" in n or "nhwctonchw" in n:
        return "layout_transpose"
    if not n.startswith("triton") and ("direct_copy" in n or "copy_kernel" in n or "copy" in n and "elementwise" in n):
        return "aten_copy"
    if "unsafe_index" in n or "upsample" in n:
        return "upsample"
    if "flash" in n or "fmha" in n or "attention" in n or "sdpa" in n:
        return "attention"
    if not n.startswith("triton") and ("fprop" in n or "dgrad" in n or "wgrad" in n or "conv" in n):
        return "convolution"
    if "gemm" in n or "nvjet" in n or "cutlass" in n or "cublas" in n or "bmm" in n or n.startswith("triton_tem"):
        return "gemm"
    if "group_norm" in n:
        return "normalization"
    if "adam" in n or "multi_tensor" in n:
        return "optimizer"
    if n.startswith("triton"):
        return "triton_other"
    if "memset" in n or "memcpy" in n:
        return "memory"
    return "other"


GENERIC = {
    "aten::copy_",
    "aten::clone",
    "aten::contiguous",
    "aten::to",
    "aten::_to_copy",
    "aten::reshape",
    "aten::_reshape_alias",
    "aten::empty_like",
    "aten::expand",
    "aten::as_strided",
    "aten::view",
    "aten::empty_strided",
    "aten::empty",
    "aten::t",
    "aten::transpose",
    "aten::permute",
}


def analyse_profile(prof, steps: int) -> dict:
    kernels: dict[str, list] = {}
    spans = []
    copies: dict[tuple, list] = {}
    for evt in prof.events():
        dt = getattr(evt, "device_type", None)
        if dt == torch.autograd.DeviceType.CUDA:
            dur = evt.time_range.end - evt.time_range.start
            k = kernels.setdefault(evt.name, [0, 0.0])
            k[0] += 1
            k[1] += dur
            spans.append((evt.time_range.start, evt.time_range.end))
        elif dt == torch.autograd.DeviceType.CPU and getattr(evt, "kernels", None):
            for kern in evt.kernels:
                if kclass(kern.name) != "aten_copy":
                    continue
                chain, p = [], evt
                while p is not None and len(chain) < 8:
                    chain.append(p.name)
                    p = p.cpu_parent
                culprit = next((c for c in chain if c not in GENERIC), chain[-1])
                key = (culprit, " < ".join(chain[:5]))
                c = copies.setdefault(key, [0, 0.0])
                c[0] += 1
                c[1] += kern.duration
    if not kernels:  # no device records: fall back to the kernels each operator launched
        for evt in prof.events():
            for kern in getattr(evt, "kernels", None) or []:
                k = kernels.setdefault(kern.name, [0, 0.0])
                k[0] += 1
                k[1] += kern.duration
    total = sum(v[1] for v in kernels.values())
    span = (max(e for _, e in spans) - min(s for s, _ in spans)) if spans else 0.0
    classes: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, (cnt, us) in kernels.items():
        c = kclass(name)
        classes[c] = classes.get(c, 0.0) + us
        counts[c] = counts.get(c, 0) + cnt
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    return {
        "kernel_count": sum(v[0] for v in kernels.values()) / steps,
        "device_ms": total / 1e3 / steps,
        "span_ms": span / 1e3 / steps,
        "classes_ms": {k: v / 1e3 / steps for k, v in classes.items()},
        "class_counts": {k: v / steps for k, v in counts.items()},
        "top": [(n, c / steps, us / 1e3 / steps, kclass(n)) for n, (c, us) in top[:20]],
        "copies": sorted(
            ((k[0], k[1], c / steps, us / 1e3 / steps) for k, (c, us) in copies.items()), key=lambda r: -r[3]
        ),
    }


def profile_step(work: Work, steps: int = 1) -> dict:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if work.dev.type == "cuda" else [])
    sync(work.dev)
    with profile(activities=acts) as prof:
        for _ in range(steps):
            work.train_step()
        sync(work.dev)
    return analyse_profile(prof, steps)


# --------------------------------------------------------------------------- selftest: rewrites = same numbers
def selftest(dev: torch.device) -> dict:
    torch.manual_seed(0)
    res = {}
    x = torch.randn(2, 8, 5, 6, 7, device=dev, dtype=torch.float64)
    res["upsample_fp64_max_abs"] = float(
        (trilinear_up2(x) - F.interpolate(x, scale_factor=2, mode="trilinear")).abs().max()
    )
    xg = x.clone().requires_grad_(True)
    g = torch.randn(2, 8, 10, 12, 14, device=dev, dtype=torch.float64)
    (F.interpolate(xg, scale_factor=2, mode="trilinear") * g).sum().backward()
    ga = xg.grad.clone()
    xg.grad = None
    (trilinear_up2(xg) * g).sum().backward()
    res["upsample_grad_fp64_max_abs"] = float((xg.grad - ga).abs().max())
    gn = nn.GroupNorm(8, 64).to(dev).double()
    nn.init.normal_(gn.weight)
    nn.init.normal_(gn.bias)
    xn = torch.randn(2, 64, 5, 6, 7, device=dev, dtype=torch.float64).contiguous(memory_format=CL).requires_grad_(True)
    gref = torch.randn(2, 64, 5, 6, 7, device=dev, dtype=torch.float64)
    y_ref = gn(xn)
    (gx_ref,) = torch.autograd.grad((y_ref * gref).sum(), xn)
    y_cl = CLGroupNorm(gn)(xn)
    (gx_cl,) = torch.autograd.grad((y_cl * gref).sum(), xn)
    res["groupnorm_fp64_max_abs"] = float((y_cl - y_ref).detach().abs().max())
    res["groupnorm_grad_fp64_max_abs"] = float((gx_cl - gx_ref).abs().max())
    res["groupnorm_cl_output_is_channels_last"] = bool(y_cl.is_contiguous(memory_format=CL))
    y_cs = CLSumGroupNorm(gn)(xn)
    (gx_cs,) = torch.autograd.grad((y_cs * gref).sum(), xn)
    res["groupnorm_clsum_fp64_max_abs"] = float((y_cs - y_ref).detach().abs().max())
    res["groupnorm_clsum_grad_fp64_max_abs"] = float((gx_cs - gx_ref).abs().max())
    res["groupnorm_clsum_output_is_channels_last"] = bool(y_cs.is_contiguous(memory_format=CL))
    with torch.no_grad():
        for heads in (1, 2):
            a = mdu.SpatialAttention(64, heads, 8, checkpointed=False).to(dev).double()
            for sdpa in (False, True):
                t = TokenAttention(a, sdpa, checkpointed=False)
                xa = torch.randn(2, 64, 3, 4, 5, device=dev, dtype=torch.float64)
                res[f"attention_heads{heads}_{'sdpa' if sdpa else 'tokens'}_fp64_max_abs"] = float(
                    (t(xa.contiguous(memory_format=CL)) - a(xa)).abs().max()
                )
    return res


# --------------------------------------------------------------------------- driver
FIELDS = [
    "variant",
    "status",
    "note",
    "layout",
    "attn",
    "attn_checkpointed",
    "upsample",
    "groupnorm",
    "gradcl",
    "compile_mode",
    "inductor_options",
    "adam",
    "cuda_graphs",
    "first_step_s",
    "steps_timed",
    "ms_median",
    "ms_p10",
    "ms_p90",
    "ms_mean",
    "speedup_vs_autotuned_baseline",
    "speedup_vs_ref_in_run",
    "mfu",
    "rel_l2_vs_bf16_ref",
    "rel_l2_vs_fp32_eager",
    "peak_mem_gib",
    "prof_kernels_per_step",
    "prof_device_ms",
    "prof_span_ms",
    "prof_idle_fraction",
    "conv_ms",
    "layout_transpose_ms",
    "aten_copy_ms",
    "aten_copy_count",
    "upsample_ms",
    "normalization_ms",
    "attention_ms",
    "gemm_ms",
    "triton_other_ms",
    "optimizer_ms",
    "other_ms",
    "error",
]


def write_outputs(out: Path, rows, kernels, copies, meta):
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "study_a_ours_h200.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(out / "study_a_ours_kernels.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "rank", "kernel", "class", "calls_per_step", "ms_per_step"])
        w.writerows(kernels)
    with open(out / "study_a_ours_copies.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "launching_op", "op_chain", "copies_per_step", "ms_per_step"])
        w.writerows(copies)
    (out / "study_a_ours.json").write_text(json.dumps(meta, indent=1, default=str))


def fmt(x, nd=2):
    return "" if x is None or x == "" else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="ref_ncdhw_cg,cl_fix_cg")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="16^3, width 16 (CPU smoke test)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps, the compiling one included")
    ap.add_argument("--repeat", type=int, default=12)
    ap.add_argument("--profile", default="all", help="variants to profile: all | none | comma list")
    ap.add_argument("--budget-s", type=float, default=480.0, help="start no variant past this (estimated)")
    ap.add_argument("--est-variant-s", type=float, default=100.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT", "probe_out"))
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        for v in _V:
            print(f"{v.name:40s} {v.note}")
        return 0
    t_start = time.perf_counter()
    out = Path(a.out)
    dev = torch.device(a.device)
    s = TINY if a.tiny else WHOLE_HEAD
    names = [n for n in a.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; --list shows them")
    prof_names = set(names) if a.profile == "all" else set() if a.profile == "none" else set(a.profile.split(","))
    torch._dynamo.config.cache_size_limit = 64
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 64
    # the product's math mode for bf16 configurations: TF32 off, cuDNN autotuning on
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    meta = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "settings": s.to_dict(),
        "argv": sys.argv,
        "variants": {},
    }
    print(f"# {meta['device']} torch {meta['torch']} cuda {meta['cuda']} cudnn {meta['cudnn']}", flush=True)
    meta["selftest"] = selftest(dev)
    print("# selftest (rewrites vs product modules, fp64):", json.dumps(meta["selftest"]), flush=True)

    torch.manual_seed(a.seed)
    state = {k: v.clone() for k, v in build_network(s).state_dict().items()}
    data = make_data(s, a.seed)
    # fp32 eager reference of the probe's predicted noise (the product's quality reference: baseline, TF32 off)
    torch.backends.cudnn.benchmark = False
    ref_w = Work(s, Variant("fp32_eager", mode="eager"), state, data, dev, a.seed)
    with torch.no_grad():
        t = torch.full((1,), s.timesteps // 2, device=dev, dtype=torch.long)
        x_t = ref_w.add_noise(ref_w.image, ref_w.probe_noise, t)
        pred_fp32 = ref_w.model(torch.cat([x_t, ref_w.mask], 1), t).float().cpu()
    del ref_w
    torch.backends.cudnn.benchmark = True
    print(f"# fp32 eager reference done at {time.perf_counter() - t_start:.0f}s", flush=True)

    rows, kernels, copies = [], [], []
    pred_ref = None
    ref_ms = None
    first_s_seen = []
    for name in names:
        v = VARIANTS[name]
        row = {
            "variant": name,
            "note": v.note,
            "layout": v.layout,
            "attn": v.attn,
            "attn_checkpointed": v.ckpt,
            "upsample": v.up,
            "groupnorm": v.gn,
            "gradcl": v.gradcl,
            "compile_mode": v.mode,
            "inductor_options": json.dumps(dict(v.options)) if v.options else "",
            "adam": v.adam,
            "cuda_graphs": v.cuda_graphs,
        }
        elapsed = time.perf_counter() - t_start
        est = max(first_s_seen + [a.est_variant_s]) if first_s_seen else a.est_variant_s
        if elapsed + est > a.budget_s:
            row["status"] = f"skipped (budget: {elapsed:.0f}s elapsed, ~{est:.0f}s needed)"
            rows.append(row)
            print(f"## {name}: {row['status']}", flush=True)
            write_outputs(out, rows, kernels, copies, meta)
            continue
        print(f"## {name} ({v.note}) at {elapsed:.0f}s", flush=True)
        w = None
        try:
            w = Work(s, v, state, data, dev, a.seed)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            t0 = time.perf_counter()
            pred = w.train_step(probe=True)
            sync(dev)
            row["first_step_s"] = time.perf_counter() - t0
            first_s_seen.append(row["first_step_s"] + 15)
            for _ in range(max(a.warmup - 1, 0)):
                w.train_step()
            sync(dev)
            ms = time_steps(w, a.repeat)
            med = statistics.median(ms)
            row.update(
                status="ok",
                steps_timed=len(ms),
                ms_median=med,
                ms_p10=pct(ms, 0.1),
                ms_p90=pct(ms, 0.9),
                ms_mean=statistics.fmean(ms),
                speedup_vs_autotuned_baseline=AUTOTUNED_BASELINE_MS / med,
                mfu=FLOP_PER_STEP / (med / 1e3) / PEAK_BF16,
            )
            if dev.type == "cuda":
                row["peak_mem_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
            if name == REFERENCE:
                pred_ref, ref_ms = pred, med
            if pred_ref is not None:
                row["rel_l2_vs_bf16_ref"] = rel_l2(pred, pred_ref)
            if ref_ms is not None:
                row["speedup_vs_ref_in_run"] = ref_ms / med
            row["rel_l2_vs_fp32_eager"] = rel_l2(pred, pred_fp32)
            meta["variants"][name] = {"samples_ms": ms}
            if name in prof_names:
                try:
                    p = profile_step(w)
                except Exception as exc:  # noqa: BLE001 - keep the timing row
                    traceback.print_exc()
                    row["error"] = f"profile: {type(exc).__name__}: {str(exc)[:200]}"
                    p = None
            if name in prof_names and p is not None:
                cl = p["classes_ms"]
                row.update(
                    prof_kernels_per_step=p["kernel_count"],
                    prof_device_ms=p["device_ms"],
                    prof_span_ms=p["span_ms"],
                    prof_idle_fraction=1 - p["device_ms"] / p["span_ms"] if p["span_ms"] else None,
                    conv_ms=cl.get("convolution", 0.0),
                    layout_transpose_ms=cl.get("layout_transpose", 0.0),
                    aten_copy_ms=cl.get("aten_copy", 0.0),
                    aten_copy_count=p["class_counts"].get("aten_copy", 0),
                    upsample_ms=cl.get("upsample", 0.0),
                    normalization_ms=cl.get("normalization", 0.0),
                    attention_ms=cl.get("attention", 0.0),
                    gemm_ms=cl.get("gemm", 0.0),
                    triton_other_ms=cl.get("triton_other", 0.0),
                    optimizer_ms=cl.get("optimizer", 0.0),
                    other_ms=cl.get("other", 0.0) + cl.get("memory", 0.0),
                )
                for i, (kn, c, kms, kc) in enumerate(p["top"], 1):
                    kernels.append([name, i, kn[:200], kc, round(c, 2), round(kms, 4)])
                for culprit, chain, c, cms in p["copies"][:25]:
                    copies.append([name, culprit, chain[:300], round(c, 2), round(cms, 4)])
                meta["variants"][name]["profile"] = {k: p[k] for k in ("classes_ms", "class_counts", "kernel_count")}
        except Exception as exc:  # noqa: BLE001 - record and go on with the next variant
            row["status"] = "error"
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            traceback.print_exc()
        finally:
            del w
            gc.collect()
            torch._dynamo.reset()
            if dev.type == "cuda":
                try:
                    from torch._inductor import cudagraph_trees

                    cudagraph_trees.reset_cudagraph_trees()
                except Exception:  # noqa: BLE001
                    pass
                torch.cuda.empty_cache()
        rows.append(row)
        write_outputs(out, rows, kernels, copies, meta)
        print(
            f"## {name}: {row.get('status')} median {fmt(row.get('ms_median'))} ms "
            f"(p10 {fmt(row.get('ms_p10'))}, p90 {fmt(row.get('ms_p90'))}), "
            f"first step {fmt(row.get('first_step_s'), 1)} s, "
            f"rel_l2 vs ref {fmt(row.get('rel_l2_vs_bf16_ref'), 4)}, "
            f"vs fp32 {fmt(row.get('rel_l2_vs_fp32_eager'), 4)}, "
            f"copies {fmt(row.get('aten_copy_count'), 0)} ({fmt(row.get('aten_copy_ms'))} ms), "
            f"t={time.perf_counter() - t_start:.0f}s",
            flush=True,
        )

    print(
        "\n| variant | status | median | p10 | p90 | x autotuned | MFU | rel_l2 ref | rel_l2 fp32 | peak GiB | "
        "conv | transp | copy (n) | upsample | norm | attn | first s |"
    )
    print("|" + "---|" * 17)
    for r in rows:
        print(
            f"| {r['variant']} | {r.get('status')} | {fmt(r.get('ms_median'), 1)} | {fmt(r.get('ms_p10'), 1)} | "
            f"{fmt(r.get('ms_p90'), 1)} | {fmt(r.get('speedup_vs_autotuned_baseline'), 2)} | {fmt(r.get('mfu'), 3)} | "
            f"{fmt(r.get('rel_l2_vs_bf16_ref'), 4)} | {fmt(r.get('rel_l2_vs_fp32_eager'), 4)} | "
            f"{fmt(r.get('peak_mem_gib'), 1)} | {fmt(r.get('conv_ms'), 1)} | {fmt(r.get('layout_transpose_ms'), 1)} | "
            f"{fmt(r.get('aten_copy_ms'), 1)} ({fmt(r.get('aten_copy_count'), 0)}) | {fmt(r.get('upsample_ms'), 1)} | "
            f"{fmt(r.get('normalization_ms'), 1)} | {fmt(r.get('attention_ms'), 1)} | {fmt(r.get('first_step_s'), 0)} |"
        )
    print(f"# total {time.perf_counter() - t_start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
