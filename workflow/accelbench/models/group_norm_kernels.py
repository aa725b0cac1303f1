"""The Triton kernels of the fused GroupNorm + affine + optional SiLU (+ residual) of
:mod:`accelbench.models.fused_groupnorm` (the formulas and the layout of the work: its module docstring), with their
launch geometry (:func:`blocks`: tiles of :data:`TILE` elements, about :data:`TARGET_PROGRAMS` programs per
reduction) and where they run (:func:`triton_on`). The operator that launches them, with its torch fallback and its
autograd formula, is :mod:`accelbench.models.group_norm_op`.

Without Triton (the CPU venv) the module imports, ``triton`` is None and no kernel is defined.
"""

from __future__ import annotations

import os

import torch

try:  # Triton ships with torch on the CUDA nodes; the CPU venv may lack it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None

TILE = 4096  # elements of one [BLOCK_S, BLOCK_C] tile
TARGET_PROGRAMS = 1024  # (sample, chunk) programs of the two reductions, about 8 per SM of an H100


def has_triton() -> bool:
    """Whether the Triton kernels can run here: Triton imports (on CUDA, or on the CPU under ``TRITON_INTERPRET=1``)."""
    return triton is not None


def triton_on(x: torch.Tensor) -> bool:
    """Whether the kernels run for ``x``: Triton imports and ``x`` is on CUDA (or on the CPU under
    ``TRITON_INTERPRET=1``)."""
    return triton is not None and (x.is_cuda or (x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"))


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
        b = tl.program_id(1).to(tl.int64)  # the grid's y dimension (at most 65,535): the batch
        offs_s = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)  # x (2^31 - 1): 128^3 x 128 needs 65,536
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
        b = tl.program_id(1).to(tl.int64)  # the grid's y dimension (at most 65,535): the batch
        offs_s = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)  # x (2^31 - 1): 128^3 x 128 needs 65,536
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


def blocks(c: int, s: int, b: int) -> tuple[int, int, int, int]:
    """(BLOCK_C, BLOCK_S, chunk length, chunks) for x of C channels and S spatial positions, batch B."""
    block_c = triton.next_power_of_2(c)
    block_s = max(1, min(TILE // block_c, triton.next_power_of_2(s)))
    chunks = max(1, min(triton.cdiv(s, block_s), triton.cdiv(TARGET_PROGRAMS, b)))
    chunk = triton.cdiv(triton.cdiv(s, chunks), block_s) * block_s
    return block_c, block_s, chunk, triton.cdiv(s, chunk)


def chunk_counts(s: int, chunk: int, k: int, device) -> torch.Tensor:
    """(K,) the spatial positions of each of the ``k`` chunks of length ``chunk`` over S = ``s`` (the last shorter)."""
    return (s - torch.arange(k, device=device) * chunk).clamp(max=chunk)
