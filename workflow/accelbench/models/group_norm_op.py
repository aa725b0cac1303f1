"""The custom operator ``accelbench::group_norm_act`` behind :func:`accelbench.models.fused_groupnorm.group_norm_act`:
its forward and backward (the Triton kernels of :mod:`accelbench.models.group_norm_kernels` where they run, else the
same formulas as torch operations), its fake implementation and its autograd formula (``torch.compile`` keeps it in
the graph, no host synchronisation); the plain reference (:func:`group_norm_act_reference`: ``F.group_norm`` then
``F.silu``, the fallback); the checks of the arguments and the layout glue (strides of x viewed as (B, C, S), Chan's
combination of partial statistics). Shapes: x (B, C, *spatial), weight and bias (C,), residual x's shape or (B, C).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

# the kernels are launched as kernels._stats_kernel etc.: their names are the kernel names profiles record
from accelbench.models import group_norm_kernels as kernels

ACTIVATIONS = (None, "silu")


# --------------------------------------------------------------------------- reference (the CPU fallback)
def group_norm_act_reference(
    x: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    activation: str | None = "silu",
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """``act(F.group_norm(x + residual))`` as plain torch operations (the fallback; what ``nn.GroupNorm`` then
    ``F.silu`` compute). Shapes: ``x`` (B, C, *spatial), ``residual`` x's shape or (B, C) -> x's shape."""
    if residual is not None:
        x = x + _broadcastable(residual, x)
    y = F.group_norm(x, num_groups, weight, bias, eps)
    return F.silu(y) if activation == "silu" else y


def check_args(x: torch.Tensor, num_groups: int, activation: str | None, residual: torch.Tensor | None) -> None:
    """Refuse arguments :func:`accelbench.models.fused_groupnorm.group_norm_act` cannot compute.

    Raises:
        ValueError: x not (B, C, *spatial), C not divisible by ``num_groups``, an unknown activation, a residual
            neither x's shape nor (B, C)."""
    if x.dim() < 3:
        raise ValueError(f"group_norm_act: x of shape {tuple(x.shape)}; expected (B, C, *spatial)")
    c = x.shape[1]
    if num_groups < 1 or c % num_groups:
        raise ValueError(f"group_norm_act: {c} channels do not split into {num_groups} groups")
    if activation not in ACTIVATIONS:
        raise ValueError(f"group_norm_act: activation {activation!r} is not one of {ACTIVATIONS}")
    if residual is not None:
        _broadcastable(residual, x)


def _broadcastable(r: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``r`` as a tensor that broadcasts to ``x``: x's shape, or (B, C) / (B, C, 1, ...) viewed as (B, C, 1, ...)."""
    if r.shape == x.shape:
        return r
    b, c = x.shape[:2]
    if r.shape[:2] == (b, c) and r.numel() == b * c:
        return r.reshape((b, c) + (1,) * (x.dim() - 2))
    raise ValueError(
        f"group_norm_act: residual of shape {tuple(r.shape)} is neither x's {tuple(x.shape)} nor ({b}, {c})"
    )


# --------------------------------------------------------------------------- layout and small glue (torch)
def dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` if it is dense channels-last or contiguous (read through strides), else a contiguous copy. The operator
    applies it to its own inputs (Inductor may hand it any layout: the operator is tagged ``flexible_layout``) and its
    fake implementations allocate their outputs like ``dense(x)``, so the real and fake strides agree."""
    return x if _strides(x) is not None else x.contiguous()


def _strides(x: torch.Tensor) -> tuple[int, int, int] | None:
    """(sample, channel, spatial) strides of x viewed as (B, C, S), or None unless x is dense channels-last
    (B, *spatial, C) or dense contiguous (B, C, *spatial): the kernels write y and dx, allocated ``empty_like(x)``,
    through x's strides, and ``empty_like`` keeps the strides of dense tensors only (a per-sample dense x with gaps
    between samples, e.g. a channel slice, would get a contiguous y written at x's sample stride)."""
    b, c = x.shape[:2]
    s = x.numel() // max(b * c, 1)
    if x.permute(0, *range(2, x.dim()), 1).is_contiguous():  # channels-last: (B, *spatial, C) dense
        return x.stride(0), 1, c
    if x.is_contiguous():  # (B, C, *spatial) dense
        return x.stride(0), s, 1
    return None


def _residual_strides(r: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """The residual as read by the kernels, with (sample, channel, spatial) strides matching x's flattening."""
    if r.shape != x.shape:  # (B, C, 1, ...): broadcast over space
        r = r.reshape(x.shape[0], x.shape[1]).contiguous()
        return r, (r.stride(0), r.stride(1), 0)
    if r.stride() != x.stride():
        r = torch.empty_like(x, dtype=r.dtype).copy_(r)
    st = _strides(r)
    if st is None or r.stride() != x.stride():  # pragma: no cover - empty_like(x) keeps x's dense layout
        raise ValueError("group_norm_act: the residual's layout differs from x's")
    return r, st


def _combine(mean_p: torch.Tensor, m2_p: torch.Tensor, counts: torch.Tensor, num_groups: int, eps: float):
    """Per-group mean and 1/std (B, G) from per-(chunk, channel) counts, means and squared-deviation sums
    (B, K, C) (Chan's parallel formula, fp32)."""
    b, k, c = mean_p.shape
    n_k = counts.view(1, k, 1, 1).to(mean_p.dtype)
    mean_p = mean_p.view(b, k, num_groups, c // num_groups)
    m2_p = m2_p.view(b, k, num_groups, c // num_groups)
    n = counts.sum().to(mean_p.dtype) * (c // num_groups)
    mean = (mean_p * n_k).sum((1, 3)) / n
    m2 = m2_p.sum((1, 3)) + (n_k * (mean_p - mean[:, None, :, None]) ** 2).sum((1, 3))
    return mean, torch.rsqrt(m2 / n + eps)


def _per_channel(t: torch.Tensor, c: int) -> torch.Tensor:
    """(B, G) -> (B, C), each group's value repeated over its channels."""
    return t.repeat_interleave(c // t.shape[1], dim=1)


def _cdt(x: torch.Tensor) -> torch.dtype:
    """The dtype statistics and gradients of the affine parameters are computed in: fp64 for fp64, else fp32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _affine(weight, bias, c, x):
    dt = _cdt(x)
    w = weight.to(dt) if weight is not None else torch.ones(c, device=x.device, dtype=dt)
    b = bias.to(dt) if bias is not None else torch.zeros(c, device=x.device, dtype=dt)
    return w.contiguous(), b.contiguous()


def _views(x, residual):
    """x's (sample, channel, spatial) strides and the residual as the kernels read it (x itself when absent)."""
    sx = _strides(x)
    r, sr = _residual_strides(residual, x) if residual is not None else (x, sx)
    return sx, r, sr


# --------------------------------------------------------------------------- the operator (forward, backward)
def _launch_forward(x, weight, bias, residual, num_groups, eps, silu):
    """The Triton forward: three launches (``_stats_kernel``, ``_stats_combine_kernel``, ``_apply_kernel``), no torch
    operation on the device (only allocations), no host synchronisation."""
    b, c = x.shape[:2]
    s = x.numel() // (b * c)
    cpg = c // num_groups
    sx, r, sr = _views(x, residual)
    weight, bias = _flat(weight), _flat(bias)
    block_c, block_s, tiles, k = kernels.blocks(c, s, b)
    mean_p = torch.empty(b, k, c, device=x.device, dtype=_cdt(x))
    m2_p = torch.empty_like(mean_p)
    kernels._stats_kernel[(b, k)](
        x, r, mean_p, m2_p, c, s, k, *sx, *sr,
        HAS_RES=residual is not None, BLOCK_S=block_s, BLOCK_C=block_c, CHUNK_TILES=tiles,
        num_warps=kernels.WARPS["stats"],
    )  # fmt: skip
    mean = torch.empty(b, num_groups, device=x.device, dtype=_cdt(x))
    rstd = torch.empty_like(mean)
    a = torch.empty(b, c, device=x.device, dtype=_cdt(x))
    sh = torch.empty_like(a)
    block_k, block_cpg, k_tiles = kernels.combine_blocks(k, cpg)
    kernels._stats_combine_kernel[(b, num_groups)](
        mean_p, m2_p, _or(weight, x), _or(bias, x), mean, rstd, a, sh, c, s, k, tiles * block_s, num_groups, cpg, eps,
        HAS_W=weight is not None, HAS_B=bias is not None, BLOCK_K=block_k, BLOCK_CPG=block_cpg, K_TILES=k_tiles,
    )  # fmt: skip
    y = torch.empty_like(x)
    kernels._apply_kernel[(kernels.cdiv(s, block_s), b)](
        x, r, y, a, sh, c, s, *sx, *sr,
        HAS_RES=residual is not None, SILU=silu, BLOCK_S=block_s, BLOCK_C=block_c,
        num_warps=kernels.WARPS["apply"],
    )  # fmt: skip
    return y, mean, rstd


def _launch_backward(dy, x, weight, bias, residual, stats, num_groups, silu):
    """The Triton backward: three launches (``_bwd_reduce_kernel``, ``_bwd_combine_kernel``, ``_bwd_apply_kernel``),
    no host synchronisation. ``dy`` in x's strides, ``stats`` the forward's (mean, rstd) (B, G)."""
    mean, rstd = map(_flat, stats)
    weight, bias = _flat(weight), _flat(bias)
    b, c = x.shape[:2]
    s = x.numel() // (b * c)
    cpg = c // num_groups
    sx, r, sr = _views(x, residual)
    block_c, block_s, tiles, k = kernels.blocks(c, s, b)
    sdz_p = torch.empty(b, k, c, device=x.device, dtype=_cdt(x))
    sdzx_p = torch.empty_like(sdz_p)
    w, bi = _or(weight, x), _or(bias, x)
    affine = dict(HAS_W=weight is not None, HAS_B=bias is not None)
    kernels._bwd_reduce_kernel[(b, k)](
        x, r, dy, mean, rstd, w, bi, sdz_p, sdzx_p, c, s, k, num_groups, cpg, *sx, *sr,
        HAS_RES=residual is not None, SILU=silu, BLOCK_S=block_s, BLOCK_C=block_c, CHUNK_TILES=tiles, **affine,
        num_warps=kernels.WARPS["bwd_reduce"],
    )  # fmt: skip
    a_g, b_g = torch.empty_like(mean), torch.empty_like(mean)
    dweight = torch.empty(c, device=x.device, dtype=_cdt(x))
    dbias = torch.empty_like(dweight)
    block_k, block_cpg, k_tiles = kernels.combine_blocks(k, cpg)
    kernels._bwd_combine_kernel[(num_groups,)](
        sdz_p, sdzx_p, w, a_g, b_g, dweight, dbias, c, s, k, num_groups, cpg,
        HAS_W=weight is not None, BLOCK_K=block_k, BLOCK_CPG=block_cpg, K_TILES=k_tiles, B=b,
    )  # fmt: skip
    dx = torch.empty_like(x)
    kernels._bwd_apply_kernel[(kernels.cdiv(s, block_s), b)](
        x, r, dy, dx, mean, rstd, w, bi, a_g, b_g, c, s, num_groups, cpg, *sx, *sr,
        HAS_RES=residual is not None, SILU=silu, BLOCK_S=block_s, BLOCK_C=block_c, **affine,
        num_warps=kernels.WARPS["bwd_apply"],
    )  # fmt: skip
    return dx, dweight, dbias


def _flat(t):
    """``t`` contiguous (the kernels index weight and bias as (C,), mean and rstd as (B, G), with unit strides)."""
    return t.contiguous() if t is not None else None


def _or(t, x):
    """``t``, or ``x`` as a placeholder pointer where ``t`` is None (the kernel's HAS_* flag is then off)."""
    return t if t is not None else x


def _stats(x, residual, num_groups, eps):
    """(mean, rstd) per (sample, group), fp32 (B, G): the torch formulas."""
    b, c = x.shape[:2]
    s = x.numel() // (b * c)
    xf = _input(x, residual)
    dims = tuple(range(2, x.dim()))
    mean_c = xf.mean(dims)
    m2_c = ((xf - mean_c.view(b, c, *(1,) * len(dims))) ** 2).sum(dims)
    counts = torch.full((1,), s, device=x.device)
    return _combine(mean_c[:, None], m2_c[:, None], counts, num_groups, eps)


def _input(x, residual):
    """x (+ residual) in fp32 (fp64 stays fp64): what the torch formulas compute on."""
    xf = x.float() if x.dtype != torch.float64 else x
    return xf + _broadcastable(residual, x) if residual is not None else xf


def _forward(x, weight, bias, residual, num_groups, eps, silu):
    x = dense(x)  # Inductor chooses the layout it passes (flexible_layout): other than the two dense ones, copied
    if kernels.triton_on(x):
        return _launch_forward(x, weight, bias, residual, num_groups, eps, silu)
    b, c = x.shape[:2]
    mean, rstd = _stats(x, residual, num_groups, eps)
    w, bi = _affine(weight, bias, c, x)
    rstd_c, mean_c = _per_channel(rstd, c), _per_channel(mean, c)
    a = (rstd_c * w).contiguous()
    sh = (bi - mean_c * a).contiguous()
    shape = (b, c) + (1,) * (x.dim() - 2)
    z = _input(x, residual) * a.view(shape) + sh.view(shape)
    y = F.silu(z) if silu else z
    return torch.empty_like(x).copy_(y), mean, rstd


def _backward(dy, x, weight, bias, residual, mean, rstd, num_groups, silu):
    """(dx, dweight, dbias): dx in x's dtype and layout, dweight/dbias fp32 (C,)."""
    x = dense(x)
    dy = dy if dy.stride() == x.stride() else torch.empty_like(x, dtype=dy.dtype).copy_(dy)
    if kernels.triton_on(x):
        return _launch_backward(dy, x, weight, bias, residual, (mean, rstd), num_groups, silu)
    b, c = x.shape[:2]
    s = x.numel() // (b * c)
    w, bi = _affine(weight, bias, c, x)
    rstd_c = _per_channel(rstd, c).contiguous()
    nmr = (-_per_channel(mean, c) * rstd_c).contiguous()
    shape = (b, c) + (1,) * (x.dim() - 2)
    xhat = _input(x, residual) * rstd_c.view(shape) + nmr.view(shape)
    dz = dy.to(xhat.dtype)
    if silu:
        z = xhat * w.view(1, c, *shape[2:]) + bi.view(1, c, *shape[2:])
        sig = torch.sigmoid(z)
        dz = dz * sig * (1 + z * (1 - sig))
    dims = tuple(range(2, x.dim()))
    sdz, sdzx = dz.sum(dims), (dz * xhat).sum(dims)
    dweight, dbias = sdzx.sum(0), sdz.sum(0)
    n = s * (c // num_groups)
    a_g = (sdz * w).view(b, num_groups, -1).sum(-1) / n  # mean over the group of w dz
    b_g = (sdzx * w).view(b, num_groups, -1).sum(-1) / n  # mean over the group of w dz xhat
    p = (rstd_c * w).contiguous()
    q = (rstd_c * _per_channel(a_g, c)).contiguous()
    t = (rstd_c * _per_channel(b_g, c)).contiguous()
    dx = p.view(shape) * dz - q.view(shape) - xhat * t.view(shape)
    return torch.empty_like(x).copy_(dx), dweight, dbias


# Two registrations of the one operator, which differ only in what Inductor may pass them:
# - ``accelbench::group_norm_act`` (+ ``_backward``), tagged ``flexible_layout``: Inductor passes the inputs in the
#   layout it chose. Where its layout optimization is forced on an NCHW network (SR3's ``layout_opt`` configurations)
#   the convolution activations are channels-last in the compiled graph only; without the tag (torch's default for
#   custom operators since 2.5, needs_fixed_stride_order) it copies them to the eager graph's NCHW order and the
#   outputs back: five activation-sized copies per forward + backward (tests/experiments/test_fused_groupnorm.py
#   counts them). The operator reads any layout (dense() above); its fake implementations allocate like it.
# - ``accelbench::group_norm_act_fixed`` (+ ``_backward_fixed``), torch's default (fixed stride order): for a network
#   that is channels-last in eager with layout optimization off (Study A's NDHWC configurations: Inductor's heuristic
#   turns it off for Med-DDPM's U-Net, whose decoder convolutions halve the channels), where the eager order is
#   channels-last already, so no copy either. There the flexible operator failed on an H100 and an H200 (torch
#   2.11): a later convolution_backward's weight gradient came contiguous where the compiled graph asserted
#   channels_last_3d strides (Inductor's "incorrect fake kernel" check, in the fused-GroupNorm configuration with
#   layout optimization off and in the padded one); the same configuration ran before the tag (122.58 ms per step,
#   H100, reference_runs/h100x1b-2026-12-05).
def _define(suffix: str, tags: tuple):
    """Register ``accelbench::group_norm_act{suffix}`` and its backward operator with ``tags``; the forward op."""

    @torch.library.custom_op(f"accelbench::group_norm_act{suffix}", mutates_args=(), tags=tags)
    def forward_op(
        x: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        residual: torch.Tensor | None,
        num_groups: int,
        eps: float,
        silu: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(y, mean, rstd): y in x's dtype and layout, mean and rstd (B, G) fp32 (fp64 for fp64 x)."""
        return _forward(x, weight, bias, residual, num_groups, eps, silu)

    @forward_op.register_fake
    def _(x, weight, bias, residual, num_groups, eps, silu):
        stat = x.new_empty((x.shape[0], num_groups), dtype=_cdt(x))
        return torch.empty_like(dense(x)), stat, torch.empty_like(stat)

    @torch.library.custom_op(f"accelbench::group_norm_act_backward{suffix}", mutates_args=(), tags=tags)
    def backward_op(
        dy: torch.Tensor,
        x: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        residual: torch.Tensor | None,
        mean: torch.Tensor,
        rstd: torch.Tensor,
        num_groups: int,
        silu: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(dx, dweight, dbias): dx in x's dtype and layout, dweight and dbias (C,) fp32 (fp64 for fp64 x)."""
        return _backward(dy, x, weight, bias, residual, mean, rstd, num_groups, silu)

    @backward_op.register_fake
    def _(dy, x, weight, bias, residual, mean, rstd, num_groups, silu):
        c = x.new_empty((x.shape[1],), dtype=_cdt(x))
        return torch.empty_like(dense(x)), c, torch.empty_like(c)

    forward_op.register_autograd(functools.partial(_autograd, backward_op), setup_context=_setup_context)
    return forward_op


def _setup_context(ctx, inputs, output):
    x, weight, bias, residual, num_groups, eps, silu = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, bias, residual, mean, rstd)
    ctx.num_groups, ctx.silu = num_groups, silu
    ctx.set_materialize_grads(False)  # mean and rstd get no gradient: no zeros launched for them


def _autograd(backward_op, ctx, dy, _dmean, _drstd):
    x, weight, bias, residual, mean, rstd = ctx.saved_tensors
    if dy is None:  # no gradient reached y (grads are not materialised)
        return None, None, None, None, None, None, None
    dx, dweight, dbias = backward_op(dy, x, weight, bias, residual, mean, rstd, ctx.num_groups, ctx.silu)
    dw = dweight.to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
    db = dbias.to(bias.dtype) if bias is not None and ctx.needs_input_grad[2] else None
    dr = None
    if residual is not None and ctx.needs_input_grad[3]:
        if residual.shape == x.shape:
            dr = dx.to(residual.dtype)
        else:  # broadcast over space: summed over it
            dr = dx.sum(tuple(range(2, x.dim())), dtype=_cdt(x)).to(residual.dtype).view(residual.shape)
    return dx, dw, db, dr, None, None, None


group_norm_act_op = _define("", (torch.Tag.flexible_layout,))  # layout optimization forced (SR3's layout_opt)
group_norm_act_fixed_op = _define("_fixed", ())  # a channels-last eager network, layout optimization off
