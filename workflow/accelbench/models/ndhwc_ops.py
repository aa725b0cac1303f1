"""Three rewrites of Med-DDPM's U-Net modules (:mod:`~accelbench.experiments.unet3d.med_ddpm_unet`) that keep their
parameters and their arithmetic but stay in the channels-last (NDHWC) memory format, so that a
``torch.channels_last_3d`` network runs cuDNN's bf16 NDHWC convolutions without layout transposes or same-dtype copies
around them.

Measured on one H200 (``reference_runs/h200x1-2026-12-02/notes/study_a_ours_probe.py``, variant
``cl_gnsum_nockpt_sdpa_fused_cg``): with the model and inputs in ``channels_last_3d``, bf16 autocast,
``torch.compile(mode="reduce-overhead")``, cuDNN autotuning and fused Adam, the 2-micro-batch step of the whole-head
network took 123.4 ms against 156.9 ms for ``bf16_compile_cudagraphs_autotuned``, same weights (relative L2 of the
predicted noise against fp32 eager 0.0162, that configuration 0.0165). Through the product's rule
(``reference_runs/h200x1-2026-12-02``, all four rewrites): 116.38 ms against 153.96 ms on the same node, 14.83x
``baseline_autotuned``, MFU 0.288; the rule against its bare loop 0.98
(``reference_runs/h200x1-2026-12-03/notes/harness_overhead_h200.csv``). Without them, channels_last_3d made the compiled
step slower (188.6 ms): the attention's (B, C, N) reshapes and Conv1d projections, the NDHWC backward of
``F.interpolate(trilinear)`` (an ``index_put``) and ``native_group_norm`` (which returns NCDHW) forced copies back and
forth.

- :func:`tokens_sdpa_attention` (``attention="tokens_sdpa"``): the attention block on a (B, N, C) token view;
- :func:`trilinear_up2` (``upsample="separable"``): the x2 trilinear interpolation as three separable 1-D passes;
  :func:`trilinear_up2_channels_last` (``upsample="separable_channels_last"``) the same passes over the (B, D, H, W, C)
  view of a channels_last_3d input, channels innermost throughout (no transpose at the end);
- :class:`ChannelSumGroupNorm` (``norm="channel_sums"``): GroupNorm from per-channel sums, one pointwise affine;
- :func:`channels_last_grad` (``conv_grad="channels_last_3d"``): a forward hook on each Conv3d whose backward makes the
  gradient flowing into the convolution channels_last_3d (an identity forward). Probe call 4: the same-dtype copies
  per step 46 -> 20 (4.75 -> 2.46 ms), the step 123.4 -> 121.1 ms.

Each is checked against the module it replaces in fp64, forward and gradient (``tests/experiments/test_ndhwc_ops.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# the implementations MedDDPMUNet accepts (the first of each: Med-DDPM's, the default)
ATTENTION_IMPLS = ("conv1d_einsum", "tokens_sdpa")
UPSAMPLE_IMPLS = ("interpolate", "separable", "separable_channels_last")
NORM_IMPLS = ("group_norm", "channel_sums", "fused")
CONV_GRAD_LAYOUTS = ("as_computed", "channels_last_3d")

_HALF = (torch.float16, torch.bfloat16)
CL = torch.channels_last_3d


def tokens_sdpa_attention(
    x: torch.Tensor, norm: nn.Module, qkv: nn.Conv1d, proj: nn.Conv1d, heads: int
) -> torch.Tensor:
    """Med-DDPM's attention block (``SpatialAttention._attend``: GroupNorm, 1x1 Conv1d q/k/v, heads split before
    q/k/v, softmax(q k^T / sqrt(ch)) v, 1x1 Conv1d output projection, residual) on a (B, N, C) token view.

    Shapes: ``x`` (B, C, D, H, W) -> (B, C, D, H, W), N = D H W, ch = C / heads. The GroupNorm runs on the 5-D map
    (the same groups over (C/G, D, H, W) as over (C/G, N)); the Conv1d weights (3C, C, 1) and (C, C, 1) are applied as
    ``F.linear`` on (B, N, C); the attention is ``F.scaled_dot_product_attention`` on (B, heads, N, ch) with its
    default scale ch^-1/2 = (ch^-1/4)^2, Med-DDPM's scale on q and k. Same parameters and arithmetic; under bf16
    autocast the scores stay fp32 inside the kernel instead of being rounded to bf16 before the fp32 softmax. For a
    channels_last_3d ``x`` the token view and the way back are views (no copy), and the result is channels_last_3d.
    """
    b, c, d, h, w = x.shape
    n = d * h * w
    tok = x.permute(0, 2, 3, 4, 1).reshape(b, n, c)
    hn = norm(x).permute(0, 2, 3, 4, 1).reshape(b, n, c)
    t = F.linear(hn, qkv.weight.squeeze(-1), qkv.bias)  # (B, N, 3C)
    width = c // heads
    q, k, v = t.reshape(b, n, heads, 3 * width).permute(0, 2, 1, 3).split(width, dim=-1)  # heads before q/k/v
    out = F.scaled_dot_product_attention(q, k, v).permute(0, 2, 1, 3).reshape(b, n, c)
    y = tok + F.linear(out, proj.weight.squeeze(-1), proj.bias)
    return y.reshape(b, d, h, w, c).permute(0, 4, 1, 2, 3)


def _up2(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x2 linear interpolation along ``dim`` (``align_corners=False``, edges clamped): out[2i] = 0.75 x[i] +
    0.25 x[max(i-1, 0)], out[2i+1] = 0.75 x[i] + 0.25 x[min(i+1, n-1)]."""
    n = x.shape[dim]
    prev = torch.cat([x.narrow(dim, 0, 1), x.narrow(dim, 0, n - 1)], dim)
    nxt = torch.cat([x.narrow(dim, 1, n - 1), x.narrow(dim, n - 1, 1)], dim)
    return torch.stack([0.75 * x + 0.25 * prev, 0.75 * x + 0.25 * nxt], dim + 1).flatten(dim, dim + 1)


def trilinear_up2(x: torch.Tensor) -> torch.Tensor:
    """``F.interpolate(x, scale_factor=2, mode="trilinear")`` (``align_corners=False``) as three separable 1-D passes
    over D, H and W: (B, C, D, H, W) -> (B, C, 2D, 2H, 2W). bf16/fp16 inputs are computed in fp32 and rounded once at
    the end, like the CUDA kernel's fp32 accumulation. Forward and backward are pointwise and concatenations (no
    ``index_put`` in the backward). A channels_last_3d input gives a channels_last_3d result: the last pass's
    rounding writes it so (the probe left it in the passes' contiguous layout, which the next convolution then
    transposed)."""
    y = _up2_passes(x, (2, 3, 4))
    return y.contiguous(memory_format=CL) if x.dim() == 5 and x.is_contiguous(memory_format=CL) else y


def _up2_passes(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """:func:`_up2` along each of ``dims`` in turn, in fp32 for bf16/fp16 ``x``, rounded once to ``x``'s dtype."""
    y = x.float() if x.dtype in _HALF else x
    for dim in dims:
        y = _up2(y, dim)
    return y.to(x.dtype)


def trilinear_up2_channels_last(x: torch.Tensor) -> torch.Tensor:
    """:func:`trilinear_up2` (same passes, same fp32 arithmetic and one rounding) computed on the (B, D, H, W, C) view
    of a 5-D input, so that every intermediate and the result keep the channels innermost: (B, C, D, H, W) ->
    (B, C, 2D, 2H, 2W) in channels_last_3d, whatever the input's layout (a contiguous input is read through the view).

    Why: :func:`trilinear_up2` runs its passes in the contiguous layout and transposes once at the end. At one volume
    per pass Inductor tiles that transpose in 2-D (coalesced reads and writes); at two volumes it emitted a 1-D
    pointwise kernel instead, and the last upsampling's took 13.37 ms for one call against 0.35 ms a call at one
    volume (H100, reference_runs/h100x1d-2026-12-06; the trace's launch grids are 2-D, e.g. [1024, 6], at one volume
    and 1-D, e.g. [12288], at two). Here the passes never transpose, so each kernel reads and writes with the channels
    contiguous at any batch."""
    # the passes on (B, D, H, W, C), a view (contiguous for a channels_last_3d input); the result back as
    # (B, C, 2D, 2H, 2W) with channels_last_3d strides
    return _up2_passes(x.permute(0, 2, 3, 4, 1), (1, 2, 3)).permute(0, 4, 1, 2, 3)


class ChannelSumGroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` (same parameters ``weight``/``bias`` of shape (C,), same ``num_groups`` G and ``eps``) from
    per-channel sums: the fp32 sum and sum of squares of x (B, C, *spatial) over the spatial axes -> (B, C) (on a
    channels_last_3d map a reduction over the outer axes, channels contiguous), added per group -> (B, G);
    mean = S1 / n, var = S2 / n - mean^2 (clamped at 0; n = C/G x voxels), and one pointwise ``x * scale + shift``
    with per-(sample, channel) scale = weight / sqrt(var + eps) and shift = bias - mean * scale. The output is fp32
    (as ``group_norm`` under autocast) and keeps the input's memory format (``native_group_norm`` returns NCDHW)."""

    @classmethod
    def of(cls, gn: nn.GroupNorm) -> ChannelSumGroupNorm:
        """A ChannelSumGroupNorm holding ``gn``'s own parameter tensors (not copies)."""
        new = cls(gn.num_groups, gn.num_channels, gn.eps, gn.affine, device="meta")
        new.weight, new.bias = gn.weight, gn.bias
        new.train(gn.training)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape[:2]
        g = self.num_groups
        xf = x.float() if x.dtype in _HALF else x
        dims = tuple(range(2, x.dim()))
        n = (x.numel() // (b * c)) * (c // g)
        s1 = xf.sum(dims).view(b, g, -1).sum(-1)  # (B, G)
        s2 = (xf * xf).sum(dims).view(b, g, -1).sum(-1)
        mean = s1 / n
        rstd = torch.rsqrt((s2 / n - mean * mean).clamp_min(0) + self.eps)
        scale = rstd.repeat_interleave(c // g, 1)  # (B, C)
        if self.weight is not None:
            scale = scale * self.weight
        shift = -mean.repeat_interleave(c // g, 1) * scale
        if self.bias is not None:
            shift = self.bias + shift
        shape = (b, c) + (1,) * (x.dim() - 2)
        return xf * scale.view(shape) + shift.view(shape)


def plain_group_norm(gn: nn.GroupNorm) -> nn.GroupNorm:
    """An ``nn.GroupNorm`` holding ``gn``'s own parameter tensors (the way back from :class:`ChannelSumGroupNorm`)."""
    new = nn.GroupNorm(gn.num_groups, gn.num_channels, gn.eps, gn.affine, device="meta")
    new.weight, new.bias = gn.weight, gn.bias
    new.train(gn.training)
    return new


def set_group_norms(model: nn.Module, norm: str) -> nn.Module:
    """Every ``nn.GroupNorm`` of ``model`` computed as ``norm`` (one of :data:`NORM_IMPLS`) says, in place:
    ``channel_sums`` swaps each for a :class:`ChannelSumGroupNorm`, ``fused`` for a
    :class:`accelbench.models.fused_groupnorm.FusedGroupNorm` (no activation: the network fuses its SiLU where it
    follows), ``group_norm`` each back (:func:`plain_group_norm`); the parameter tensors stay the same (same state
    dict). Call it before ``torch.compile``. The caller checks ``norm``."""
    from accelbench.models.fused_groupnorm import FusedGroupNorm

    cls, swap = {
        "channel_sums": (ChannelSumGroupNorm, ChannelSumGroupNorm.of),
        "fused": (FusedGroupNorm, FusedGroupNorm.of),
    }.get(norm, (nn.GroupNorm, plain_group_norm))
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.GroupNorm) and type(child) is not cls:
                setattr(parent, name, swap(child))
    return model


class _ChannelsLastGrad(torch.autograd.Function):
    """Identity forward (a view); backward returns the incoming gradient in channels_last_3d (a copy only where it
    was not: the values are unchanged)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        return g.contiguous(memory_format=CL)


def channels_last_grad(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
    """Forward hook for an ``nn.Conv3d`` (``conv_grad="channels_last_3d"``): the output (B, C, D, H, W) unchanged, its
    gradient made channels_last_3d before it reaches the convolution's backward, so cuDNN's NDHWC dgrad/wgrad kernels
    get their layout instead of a gradient left NCDHW by a pointwise op (which Inductor then copies). 4-D or
    non-5-D outputs pass through untouched."""
    return _ChannelsLastGrad.apply(output) if output.dim() == 5 else output
