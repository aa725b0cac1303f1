"""GroupNorm + affine + optional SiLU (+ an optional residual added to the input) in one kernel family, forward and
backward, for the diffusion U-Nets' channels-last activations (NHWC, NDHWC; contiguous NCHW/NCDHW accepted too).

``y = act(GroupNorm(x + residual))``, ``act`` = SiLU or none, statistics over (C/G channels x all spatial positions)
of each (sample, group) in fp32, the output in ``x``'s dtype (bf16 in, bf16 out: one rounding, where autocast's
``group_norm`` writes fp32 and SiLU and the next convolution's cast read and write it again). ``residual`` is either
``x``'s shape or (B, C) / (B, C, 1, ...) broadcast over space (Med-DDPM's and MONAI's time-embedding add before the
second GroupNorm of each residual block).

Why our own kernel: liger-kernel's ``LigerGroupNorm`` (Triton, forward and backward) takes (B, C, *) contiguous only
(``ensure_contiguous``, one program per (sample, group): 32 programs for a batch-1 3-D volume), fuses no activation;
apex's ``contrib.group_norm`` (NHWC, fused Swish) is a CUDA extension built from source with a fixed list of channel
counts and no 3-D entry; FlagGems' ``group_norm`` loads a whole group per program. None fits NDHWC at 128^3 x 64.

Layout of the work, for x as (B, C, S) with S the flattened spatial positions (channels-last: channel stride 1;
contiguous: spatial stride 1; both read through strides, no copy):

1. ``_stats_kernel``, grid (B, chunks): per chunk of S and per channel the count, mean and sum of squared deviations
   (Welford/Chan merges of [BLOCK_S, C] tiles, fp32) -> (B, chunks, C); combined per group with Chan's formula by a
   few small torch ops (no host synchronisation, shapes fixed by x's shape: CUDA-graph safe).
2. ``_apply_kernel``, grid (B, S / BLOCK_S): ``y = act(x * a + b)`` with per-(sample, channel) ``a = rstd w``,
   ``b = bias - mean rstd w``.
3. backward ``_bwd_reduce_kernel``: per chunk and channel the sums of ``dz`` and ``dz xhat`` (``dz``: the gradient
   at the affine output, through SiLU's derivative recomputed from x) -> ``dweight``, ``dbias`` and the per-group
   terms; ``_bwd_apply_kernel``: ``dx = rstd (w dz - mean_g(w dz) - xhat mean_g(w dz xhat))``; the residual's
   gradient is ``dx`` summed to its shape.

Where it runs: :func:`group_norm_act` with ``impl="auto"`` uses the Triton kernels on CUDA when Triton imports, and
elsewhere (CPU: the embedded default; Gaudi) the plain ``F.group_norm`` + ``F.silu`` composition
(:func:`group_norm_act_reference`). The fused path is the custom operator ``accelbench::group_norm_act`` (a fake
implementation and an autograd formula registered: ``torch.compile`` keeps it in the graph without a graph break; no
host synchronisation); without Triton (or off CUDA, unless ``TRITON_INTERPRET=1``) the operator computes the same
formulas with torch operations, which is what the fp64 gradient checks test
(``tests/experiments/test_fused_groupnorm.py``).

Benchmark on a GPU node (fused vs eager vs ``torch.compile``'d reference, forward + backward, bf16, the SR3 and Study A
shapes)::

    python -m accelbench.models.fused_groupnorm --bench
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn

try:  # Triton ships with torch on the CUDA nodes; the CPU venv may lack it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None

ACTIVATIONS = (None, "silu")
IMPLS = ("auto", "fused", "reference")
TILE = 4096  # elements of one [BLOCK_S, BLOCK_C] tile
TARGET_PROGRAMS = 1024  # (sample, chunk) programs of the two reductions, about 8 per SM of an H100


def has_triton() -> bool:
    """Whether the Triton kernels can run here: Triton imports (on CUDA, or on the CPU under ``TRITON_INTERPRET=1``)."""
    return triton is not None


def _triton_on(x: torch.Tensor) -> bool:
    return triton is not None and (x.is_cuda or (x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"))


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


def _check(x: torch.Tensor, num_groups: int, activation: str | None, residual: torch.Tensor | None) -> None:
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
def _dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` if it is channels-last or contiguous (read through strides), else a contiguous copy."""
    return x if _strides(x) is not None else x.contiguous()


def _strides(x: torch.Tensor) -> tuple[int, int, int] | None:
    """(sample, channel, spatial) strides of x viewed as (B, C, S), or None when the spatial axes do not flatten."""
    b, c = x.shape[:2]
    s = x.numel() // max(b * c, 1)
    if x.permute(0, *range(2, x.dim()), 1).is_contiguous():  # channels-last: (B, *spatial, C) dense
        return x.stride(0), 1, c
    if x[0].is_contiguous():  # (C, *spatial) dense per sample
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


# --------------------------------------------------------------------------- Triton kernels
if triton is not None:

    @triton.jit
    def _silu_grad(z, dy):
        sig = 1.0 / (1.0 + tl.exp(-z))
        return dy * sig * (1.0 + z * (1.0 - sig))

    @triton.jit
    def _load_tile(X, R, b, offs_s, offs_c, mask, sxb, sxc, sxs, srb, src, srs, HAS_RES: tl.constexpr):
        s64 = offs_s.to(tl.int64)[:, None]
        c64 = offs_c.to(tl.int64)[None, :]
        x = tl.load(X + b * sxb + s64 * sxs + c64 * sxc, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            x += tl.load(R + b * srb + s64 * srs + c64 * src, mask=mask, other=0.0).to(tl.float32)
        return x

    @triton.jit
    def _stats_kernel(
        X, R, MEAN_P, M2_P, C, S, CHUNK, K, sxb, sxc, sxs, srb, src, srs,
        HAS_RES: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0).to(tl.int64)
        k = tl.program_id(1)
        offs_c = tl.arange(0, BLOCK_C)
        mc = offs_c < C
        s0 = k * CHUNK
        s_end = tl.minimum(s0 + CHUNK, S)
        cnt = 0.0
        mean = tl.zeros([BLOCK_C], dtype=tl.float32)
        m2 = tl.zeros([BLOCK_C], dtype=tl.float32)
        for start in range(s0, s_end, BLOCK_S):
            offs_s = start + tl.arange(0, BLOCK_S)
            ms = offs_s < s_end
            mask = ms[:, None] & mc[None, :]
            x = _load_tile(X, R, b, offs_s, offs_c, mask, sxb, sxc, sxs, srb, src, srs, HAS_RES)
            n_t = tl.sum(ms.to(tl.float32), axis=0)
            t_mean = tl.sum(x, axis=0) / n_t
            d = tl.where(mask, x - t_mean[None, :], 0.0)
            t_m2 = tl.sum(d * d, axis=0)
            new_cnt = cnt + n_t
            delta = t_mean - mean
            mean += delta * (n_t / new_cnt)
            m2 += t_m2 + delta * delta * (cnt * n_t / new_cnt)
            cnt = new_cnt
        out = (b * K + k) * C + offs_c
        tl.store(MEAN_P + out, mean, mask=mc)
        tl.store(M2_P + out, m2, mask=mc)

    @triton.jit
    def _apply_kernel(
        X, R, Y, A, BSH, C, S, sxb, sxc, sxs, srb, src, srs,
        HAS_RES: tl.constexpr, SILU: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0).to(tl.int64)
        offs_s = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        offs_c = tl.arange(0, BLOCK_C)
        mc = offs_c < C
        mask = (offs_s < S)[:, None] & mc[None, :]
        x = _load_tile(X, R, b, offs_s, offs_c, mask, sxb, sxc, sxs, srb, src, srs, HAS_RES)
        a = tl.load(A + b * C + offs_c, mask=mc, other=0.0)
        sh = tl.load(BSH + b * C + offs_c, mask=mc, other=0.0)
        z = x * a[None, :] + sh[None, :]
        if SILU:
            z = z / (1.0 + tl.exp(-z))
        s64 = offs_s.to(tl.int64)[:, None]
        tl.store(Y + b * sxb + s64 * sxs + offs_c.to(tl.int64)[None, :] * sxc, z.to(Y.dtype.element_ty), mask=mask)

    @triton.jit
    def _bwd_reduce_kernel(
        X, R, DY, RSTD, NMR, W, BIAS, SDZ_P, SDZX_P, C, S, CHUNK, K, sxb, sxc, sxs, srb, src, srs,
        HAS_RES: tl.constexpr, SILU: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0).to(tl.int64)
        k = tl.program_id(1)
        offs_c = tl.arange(0, BLOCK_C)
        mc = offs_c < C
        r = tl.load(RSTD + b * C + offs_c, mask=mc, other=0.0)[None, :]
        nmr = tl.load(NMR + b * C + offs_c, mask=mc, other=0.0)[None, :]
        w = tl.load(W + offs_c, mask=mc, other=0.0)[None, :]
        bi = tl.load(BIAS + offs_c, mask=mc, other=0.0)[None, :]
        s0 = k * CHUNK
        s_end = tl.minimum(s0 + CHUNK, S)
        sdz = tl.zeros([BLOCK_C], dtype=tl.float32)
        sdzx = tl.zeros([BLOCK_C], dtype=tl.float32)
        for start in range(s0, s_end, BLOCK_S):
            offs_s = start + tl.arange(0, BLOCK_S)
            mask = (offs_s < s_end)[:, None] & mc[None, :]
            x = _load_tile(X, R, b, offs_s, offs_c, mask, sxb, sxc, sxs, srb, src, srs, HAS_RES)
            s64 = offs_s.to(tl.int64)[:, None]
            dy = tl.load(DY + b * sxb + s64 * sxs + offs_c.to(tl.int64)[None, :] * sxc, mask=mask, other=0.0)
            dz = dy.to(tl.float32)
            xhat = x * r + nmr
            if SILU:
                dz = _silu_grad(xhat * w + bi, dz)
            dz = tl.where(mask, dz, 0.0)
            sdz += tl.sum(dz, axis=0)
            sdzx += tl.sum(dz * xhat, axis=0)
        out = (b * K + k) * C + offs_c
        tl.store(SDZ_P + out, sdz, mask=mc)
        tl.store(SDZX_P + out, sdzx, mask=mc)

    @triton.jit
    def _bwd_apply_kernel(
        X, R, DY, DX, RSTD, NMR, W, BIAS, P, Q, T, C, S, sxb, sxc, sxs, srb, src, srs,
        HAS_RES: tl.constexpr, SILU: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0).to(tl.int64)
        offs_s = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        offs_c = tl.arange(0, BLOCK_C)
        mc = offs_c < C
        mask = (offs_s < S)[:, None] & mc[None, :]
        x = _load_tile(X, R, b, offs_s, offs_c, mask, sxb, sxc, sxs, srb, src, srs, HAS_RES)
        s64 = offs_s.to(tl.int64)[:, None]
        ptr = b * sxb + s64 * sxs + offs_c.to(tl.int64)[None, :] * sxc
        dz = tl.load(DY + ptr, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(RSTD + b * C + offs_c, mask=mc, other=0.0)[None, :]
        nmr = tl.load(NMR + b * C + offs_c, mask=mc, other=0.0)[None, :]
        xhat = x * r + nmr
        if SILU:
            w = tl.load(W + offs_c, mask=mc, other=0.0)[None, :]
            bi = tl.load(BIAS + offs_c, mask=mc, other=0.0)[None, :]
            dz = _silu_grad(xhat * w + bi, dz)
        p = tl.load(P + b * C + offs_c, mask=mc, other=0.0)[None, :]
        q = tl.load(Q + b * C + offs_c, mask=mc, other=0.0)[None, :]
        t = tl.load(T + b * C + offs_c, mask=mc, other=0.0)[None, :]
        dx = p * dz - q - xhat * t
        tl.store(DX + ptr, dx.to(DX.dtype.element_ty), mask=mask)


def _blocks(c: int, s: int, b: int) -> tuple[int, int, int, int]:
    """(BLOCK_C, BLOCK_S, chunk length, chunks) for x of C channels and S spatial positions, batch B."""
    block_c = triton.next_power_of_2(c)
    block_s = max(1, min(TILE // block_c, triton.next_power_of_2(s)))
    chunks = max(1, min(triton.cdiv(s, block_s), triton.cdiv(TARGET_PROGRAMS, b)))
    chunk = triton.cdiv(triton.cdiv(s, chunks), block_s) * block_s
    return block_c, block_s, chunk, triton.cdiv(s, chunk)


def _chunk_counts(s: int, chunk: int, k: int, device) -> torch.Tensor:
    return (s - torch.arange(k, device=device) * chunk).clamp(max=chunk)


def _views(x, residual):
    """x's (sample, channel, spatial) strides and the residual as the kernels read it (x itself when absent)."""
    sx = _strides(x)
    r, sr = _residual_strides(residual, x) if residual is not None else (x, sx)
    return sx, r, sr


# --------------------------------------------------------------------------- the operator (forward, backward)
def _stats(x, residual, num_groups, eps):
    """(mean, rstd) per (sample, group), fp32 (B, G)."""
    b, c = x.shape[:2]
    s = x.numel() // (b * c)
    if _triton_on(x):
        sx, r, sr = _views(x, residual)
        block_c, block_s, chunk, k = _blocks(c, s, b)
        mean_p = torch.empty(b, k, c, device=x.device, dtype=_cdt(x))
        m2_p = torch.empty_like(mean_p)
        _stats_kernel[(b, k)](
            x, r, mean_p, m2_p, c, s, chunk, k, *sx, *sr,
            HAS_RES=residual is not None, BLOCK_S=block_s, BLOCK_C=block_c,
        )  # fmt: skip
        return _combine(mean_p, m2_p, _chunk_counts(s, chunk, k, x.device), num_groups, eps)
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
    b, c = x.shape[:2]
    mean, rstd = _stats(x, residual, num_groups, eps)
    w, bi = _affine(weight, bias, c, x)
    rstd_c, mean_c = _per_channel(rstd, c), _per_channel(mean, c)
    a = (rstd_c * w).contiguous()
    sh = (bi - mean_c * a).contiguous()
    if _triton_on(x):
        s = x.numel() // (b * c)
        y = torch.empty_like(x)
        sx, r, sr = _views(x, residual)
        block_c, block_s, _, _ = _blocks(c, s, b)
        _apply_kernel[(b, triton.cdiv(s, block_s))](
            x, r, y, a, sh, c, s, *sx, *sr,
            HAS_RES=residual is not None, SILU=silu, BLOCK_S=block_s, BLOCK_C=block_c,
        )  # fmt: skip
        return y, mean, rstd
    shape = (b, c) + (1,) * (x.dim() - 2)
    z = _input(x, residual) * a.view(shape) + sh.view(shape)
    y = F.silu(z) if silu else z
    return torch.empty_like(x).copy_(y), mean, rstd


def _backward(dy, x, weight, bias, residual, mean, rstd, num_groups, silu):
    """(dx, dweight, dbias): dx in x's dtype and layout, dweight/dbias fp32 (C,)."""
    b, c = x.shape[:2]
    s = x.numel() // (b * c)
    w, bi = _affine(weight, bias, c, x)
    rstd_c = _per_channel(rstd, c).contiguous()
    nmr = (-_per_channel(mean, c) * rstd_c).contiguous()
    dy = dy if dy.stride() == x.stride() else torch.empty_like(x, dtype=dy.dtype).copy_(dy)
    on = _triton_on(x)
    if on:
        sx, r, sr = _views(x, residual)
        block_c, block_s, chunk, k = _blocks(c, s, b)
        sdz_p = torch.empty(b, k, c, device=x.device, dtype=_cdt(x))
        sdzx_p = torch.empty_like(sdz_p)
        _bwd_reduce_kernel[(b, k)](
            x, r, dy, rstd_c, nmr, w, bi, sdz_p, sdzx_p, c, s, chunk, k, *sx, *sr,
            HAS_RES=residual is not None, SILU=silu, BLOCK_S=block_s, BLOCK_C=block_c,
        )  # fmt: skip
        sdz, sdzx = sdz_p.sum(1), sdzx_p.sum(1)
    else:
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
    if on:
        dx = torch.empty_like(x)
        _bwd_apply_kernel[(b, triton.cdiv(s, block_s))](
            x, r, dy, dx, rstd_c, nmr, w, bi, p, q, t, c, s, *sx, *sr,
            HAS_RES=residual is not None, SILU=silu, BLOCK_S=block_s, BLOCK_C=block_c,
        )  # fmt: skip
        return dx, dweight, dbias
    dx = p.view(shape) * dz - q.view(shape) - xhat * t.view(shape)
    return torch.empty_like(x).copy_(dx), dweight, dbias


@torch.library.custom_op("accelbench::group_norm_act", mutates_args=())
def _group_norm_act_op(
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


@_group_norm_act_op.register_fake
def _(x, weight, bias, residual, num_groups, eps, silu):
    stat = x.new_empty((x.shape[0], num_groups), dtype=_cdt(x))
    return torch.empty_like(x), stat, torch.empty_like(stat)


@torch.library.custom_op("accelbench::group_norm_act_backward", mutates_args=())
def _group_norm_act_backward_op(
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


@_group_norm_act_backward_op.register_fake
def _(dy, x, weight, bias, residual, mean, rstd, num_groups, silu):
    c = x.new_empty((x.shape[1],), dtype=_cdt(x))
    return torch.empty_like(x), c, torch.empty_like(c)


def _setup_context(ctx, inputs, output):
    x, weight, bias, residual, num_groups, eps, silu = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, bias, residual, mean, rstd)
    ctx.num_groups, ctx.silu = num_groups, silu


def _autograd(ctx, dy, _dmean, _drstd):
    x, weight, bias, residual, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = _group_norm_act_backward_op(
        dy, x, weight, bias, residual, mean, rstd, ctx.num_groups, ctx.silu
    )
    dw = dweight.to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
    db = dbias.to(bias.dtype) if bias is not None and ctx.needs_input_grad[2] else None
    dr = None
    if residual is not None and ctx.needs_input_grad[3]:
        if residual.shape == x.shape:
            dr = dx.to(residual.dtype)
        else:  # broadcast over space: summed over it
            dr = dx.sum(tuple(range(2, x.dim())), dtype=_cdt(x)).to(residual.dtype).view(residual.shape)
    return dx, dw, db, dr, None, None, None


_group_norm_act_op.register_autograd(_autograd, setup_context=_setup_context)


# --------------------------------------------------------------------------- public function and module
def group_norm_act(
    x: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    activation: str | None = "silu",
    residual: torch.Tensor | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """``act(GroupNorm(x + residual))``: x (B, C, *spatial) channels-last or contiguous (other layouts are copied
    contiguous), weight and bias (C,) or None, residual x's shape or (B, C) / (B, C, 1, ...) or None -> x's shape,
    dtype and layout (:func:`group_norm_act_reference`: the fallback's own dtype rules).

    ``impl``: ``auto`` (the fused operator on CUDA when Triton imports, else the reference), ``fused`` (the operator
    ``accelbench::group_norm_act`` anywhere: Triton kernels on CUDA or under ``TRITON_INTERPRET=1``, else the same
    formulas in torch operations), ``reference``.

    Raises:
        ValueError: C not divisible by ``num_groups``, an unknown activation or impl, a residual of another shape.
    """
    _check(x, num_groups, activation, residual)
    if impl not in IMPLS:
        raise ValueError(f"group_norm_act: impl {impl!r} is not one of {IMPLS}")
    if impl == "reference" or (impl == "auto" and not (x.is_cuda and triton is not None)):
        return group_norm_act_reference(x, num_groups, weight, bias, eps, activation, residual)
    if residual is not None and residual.shape != x.shape:
        residual = residual.reshape(x.shape[0], x.shape[1])
    y, _, _ = _group_norm_act_op(_dense(x), weight, bias, residual, num_groups, float(eps), activation == "silu")
    return y


class FusedGroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` (same parameters ``weight``/``bias`` (C,), ``num_groups``, ``eps``: the same state dict) with
    the activation after it (``activation``: ``"silu"`` or None) and an optional residual added to its input, computed
    by :func:`group_norm_act` (one fused kernel family on CUDA, the plain composition elsewhere).
    ``forward(x, residual=None)``: x (B, C, *spatial) -> x's shape.

    Raises:
        ValueError: ``num_channels`` not divisible by ``num_groups`` (``nn.GroupNorm``'s check), an unknown activation.
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, activation=None):
        super().__init__(num_groups, num_channels, eps, affine, device=device, dtype=dtype)
        if activation not in ACTIVATIONS:
            raise ValueError(f"FusedGroupNorm: activation {activation!r} is not one of {ACTIVATIONS}")
        self.activation = activation
        self.impl = "auto"

    @classmethod
    def of(cls, gn: nn.GroupNorm, activation: str | None = None) -> FusedGroupNorm:
        """A FusedGroupNorm holding ``gn``'s own parameter tensors (not copies)."""
        new = cls(gn.num_groups, gn.num_channels, gn.eps, gn.affine, device="meta", activation=activation)
        new.weight, new.bias = gn.weight, gn.bias
        new.train(gn.training)
        return new

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return group_norm_act(
            x, self.num_groups, self.weight, self.bias, self.eps, self.activation, residual, self.impl
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}"


# --------------------------------------------------------------------------- GPU benchmark
# (name, x shape (B, C, *spatial), groups): SR3 256x256 levels; Study A whole-head 128^3 levels (batch 1)
BENCH_SHAPES = (
    ("SR3 b4 64x256x256", (4, 64, 256, 256), 32),
    ("SR3 b16 64x256x256", (16, 64, 256, 256), 32),
    ("SR3 b16 128x128x128", (16, 128, 128, 128), 32),
    ("SR3 b16 256x64x64", (16, 256, 64, 64), 32),
    ("SR3 b16 512x32x32", (16, 512, 32, 32), 32),
    ("Study A 64x128^3", (1, 64, 128, 128, 128), 32),
    ("Study A 128x128^3 (decoder concat)", (1, 128, 128, 128, 128), 32),
    ("Study A 128x64^3", (1, 128, 64, 64, 64), 32),
    ("Study A 192x32^3", (1, 192, 32, 32, 32), 32),
    ("Study A 256x16^3", (1, 256, 16, 16, 16), 32),
)


def _time_ms(fn, iters: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def _bench_shape(name: str, shape: tuple[int, ...], groups: int, residual: bool) -> dict:
    """One row of :func:`bench`."""
    dev = torch.device("cuda")
    fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    x = torch.randn(shape, device=dev, dtype=torch.bfloat16).contiguous(memory_format=fmt).requires_grad_()
    w = torch.randn(shape[1], device=dev).requires_grad_()
    bi = torch.randn(shape[1], device=dev).requires_grad_()
    r = torch.randn(shape[:2], device=dev, dtype=torch.bfloat16) if residual else None
    dy = torch.randn_like(x)

    def ref(x, w, bi, r):
        with torch.autocast("cuda", torch.bfloat16):
            return group_norm_act_reference(x, groups, w, bi, 1e-5, "silu", r).to(torch.bfloat16)

    def fused(x, w, bi, r):
        return group_norm_act(x, groups, w, bi, 1e-5, "silu", r, impl="fused")

    row = {"shape": name, "dims": "x".join(map(str, shape)), "residual": residual}
    try:
        for label, f in (("fused_ms", fused), ("eager_ms", ref), ("compiled_ms", torch.compile(ref))):
            row[label] = round(_time_ms(lambda f=f: torch.autograd.backward(f(x, w, bi, r), dy)), 3)
        with torch.no_grad():
            exact = group_norm_act_reference(x.float(), groups, w, bi, 1e-5, "silu", r)
            row["max_abs_diff_vs_fp32"] = float((fused(x, w, bi, r).float() - exact).abs().max())
    except torch.OutOfMemoryError as e:
        row["error"] = f"out of memory: {e}".splitlines()[0]
    return row


def bench(shapes=BENCH_SHAPES, residual: bool = False) -> list[dict]:
    """Forward + backward ms of ``SiLU(GroupNorm(x))`` in bf16 channels-last on the CUDA device, per shape: the fused
    operator, the eager reference under bf16 autocast (``nn.GroupNorm`` then ``F.silu``: what the networks run), and
    that reference through ``torch.compile``; also the fused output's largest difference from the fp32 reference.
    Prints one dict per shape as it goes."""
    rows = []
    for name, shape, groups in shapes:
        rows.append(_bench_shape(name, shape, groups, residual))
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m accelbench.models.fused_groupnorm", description=__doc__.split("\n")[0])
    p.add_argument("--bench", action="store_true", help="time fused vs eager vs compiled on the CUDA device")
    p.add_argument("--residual", action="store_true", help="with a (B, C) residual (the time-embedding add)")
    a = p.parse_args(argv)
    if not a.bench:
        p.print_help()
        return 0
    if not (torch.cuda.is_available() and has_triton()):
        print("fused_groupnorm --bench: needs a CUDA device and Triton")
        return 2
    bench(residual=a.residual)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
