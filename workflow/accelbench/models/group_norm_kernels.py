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
COMBINE_TILE = 2048  # elements of one [BLOCK_K, BLOCK_CPG] tile of the combine kernels
# warps of the four tile kernels (statistics, apply, backward reduction, backward apply) at TILE = 4,096 elements:
# ptxas for sm_90 (Triton 3.6, bf16, C = 64; compiled without a GPU) gives the two backward kernels 255 registers
# with 304 and 152-212 bytes of spills at Triton's default of 4 warps, and none at 8 (183-190 registers; statistics
# and apply 98-100)
TILE_WARPS = 8
# the warps each of the four tile kernels launches with (keys: the kernel's name without ``_`` and ``_kernel``), each
# TILE_WARPS unless a measurement chose otherwise; ``python -m accelbench.models.fused_groupnorm --bench --warps``
# times each kernel at other counts, one kernel at a time
WARPS = {"stats": TILE_WARPS, "apply": TILE_WARPS, "bwd_reduce": TILE_WARPS, "bwd_apply": TILE_WARPS}


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
        X, R, MEAN_P, M2_P, C, S, K, sxb, sxc, sxs, srb, src, srs,
        HAS_RES: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr, CHUNK_TILES: tl.constexpr,
    ):  # fmt: skip
        """Per (sample, chunk) program: each channel's mean and sum of squared deviations over the chunk's positions
        (shifted sums: every element's x - shift, shift = the chunk's first position, accumulated element-wise in
        [BLOCK_S, BLOCK_C] registers and reduced once at the end, so the loop only loads and adds; the variance keeps
        its precision where the shift is near the mean, as a sample of the same channel is)."""
        b = tl.program_id(0).to(tl.int64)
        k = tl.program_id(1)
        offs_c = tl.arange(0, BLOCK_C)
        mc = offs_c < C
        s0 = k * (CHUNK_TILES * BLOCK_S)
        s_end = tl.minimum(s0 + CHUNK_TILES * BLOCK_S, S)
        first = s0 + tl.arange(0, BLOCK_S)
        shift = _load_tile(X, R, b, first, offs_c, (first == s0)[:, None] & mc[None, :], sxb, sxc, sxs, srb, src, srs,
                           HAS_RES)  # fmt: skip
        shift = tl.sum(shift, axis=0)[None, :]  # the first row (the others were masked to 0)
        acc1 = tl.zeros([BLOCK_S, BLOCK_C], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_S, BLOCK_C], dtype=tl.float32)
        # a constexpr trip count (under the interpreter a loop bound that is an argument fails with NumPy >= 2.3);
        # the last chunk's tiles past S are fully masked and add nothing
        for i in range(CHUNK_TILES):
            offs_s = s0 + i * BLOCK_S + tl.arange(0, BLOCK_S)
            mask = (offs_s < s_end)[:, None] & mc[None, :]
            x = _load_tile(X, R, b, offs_s, offs_c, mask, sxb, sxc, sxs, srb, src, srs, HAS_RES)
            d = tl.where(mask, x - shift, 0.0)
            acc1 += d
            acc2 += d * d
        n = (s_end - s0).to(tl.float32)  # at least 1: every chunk starts below S
        s1 = tl.sum(acc1, axis=0)
        mean = tl.sum(shift, axis=0) + s1 / n
        m2 = tl.maximum(tl.sum(acc2, axis=0) - s1 * s1 / n, 0.0)
        out = (b * K + k) * C + offs_c
        tl.store(MEAN_P + out, mean, mask=mc)
        tl.store(M2_P + out, m2, mask=mc)

    @triton.jit
    def _load_affine(W, offs, mask, HAS: tl.constexpr, DEFAULT: tl.constexpr, BLOCK: tl.constexpr):
        if HAS:
            return tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
        return tl.full([BLOCK], DEFAULT, tl.float32)

    @triton.jit
    def _stats_combine_kernel(
        MEAN_P, M2_P, W, BIAS, MEAN, RSTD, A, BSH, C, S, K, CHUNK, G, CPG, eps,
        HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_CPG: tl.constexpr,
        K_TILES: tl.constexpr,
    ):  # fmt: skip
        """Per (sample, group) program: Chan's combination of the (chunk, channel) partials of ``_stats_kernel``
        -> MEAN, RSTD (B, G); per channel of the group A = rstd w, BSH = bias - mean rstd w (B, C)."""
        b = tl.program_id(0).to(tl.int64)
        g = tl.program_id(1)
        offs_j = tl.arange(0, BLOCK_CPG)
        mj = offs_j < CPG
        ch = g * CPG + offs_j
        n = S * CPG * 1.0  # (an int 1 argument is a constexpr: no .to)
        total = tl.zeros([BLOCK_K, BLOCK_CPG], dtype=tl.float32)
        for i in range(K_TILES):  # pass 1: the group's mean
            offs_k = i * BLOCK_K + tl.arange(0, BLOCK_K)
            mk = offs_k < K
            n_k = tl.where(mk, tl.minimum(S - offs_k * CHUNK, CHUNK), 0).to(tl.float32)[:, None]
            ptr = (b * K + offs_k[:, None]) * C + ch[None, :]
            total += n_k * tl.load(MEAN_P + ptr, mask=mk[:, None] & mj[None, :], other=0.0)
        mean = tl.sum(tl.sum(total, axis=1), axis=0) / n
        total = tl.zeros([BLOCK_K, BLOCK_CPG], dtype=tl.float32)
        for i in range(K_TILES):  # pass 2: the sum of squared deviations from it
            offs_k = i * BLOCK_K + tl.arange(0, BLOCK_K)
            mk = offs_k < K
            n_k = tl.where(mk, tl.minimum(S - offs_k * CHUNK, CHUNK), 0).to(tl.float32)[:, None]
            ptr = (b * K + offs_k[:, None]) * C + ch[None, :]
            m = mk[:, None] & mj[None, :]
            d = tl.load(MEAN_P + ptr, mask=m, other=0.0) - mean
            total += tl.load(M2_P + ptr, mask=m, other=0.0) + tl.where(m, n_k * d * d, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(tl.sum(total, axis=1), axis=0) / n + eps)
        tl.store(MEAN + b * G + g, mean)
        tl.store(RSTD + b * G + g, rstd)
        a = rstd * _load_affine(W, ch, mj, HAS_W, 1.0, BLOCK_CPG)
        tl.store(A + b * C + ch, a, mask=mj)
        tl.store(BSH + b * C + ch, _load_affine(BIAS, ch, mj, HAS_B, 0.0, BLOCK_CPG) - mean * a, mask=mj)

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
    def _group_terms(
        MEAN, RSTD, W, BIAS, b, G, CPG, offs_c, mc, HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_C: tl.constexpr,
    ):  # fmt: skip
        """Per channel (as [1, BLOCK_C]): rstd and -mean rstd of its group, weight and bias (fp32)."""
        grp = b * G + offs_c // CPG
        r = tl.load(RSTD + grp, mask=mc, other=0.0).to(tl.float32)
        nmr = -tl.load(MEAN + grp, mask=mc, other=0.0).to(tl.float32) * r
        w = _load_affine(W, offs_c, mc, HAS_W, 1.0, BLOCK_C)
        bi = _load_affine(BIAS, offs_c, mc, HAS_B, 0.0, BLOCK_C)
        return r[None, :], nmr[None, :], w[None, :], bi[None, :]

    @triton.jit
    def _bwd_reduce_kernel(
        X, R, DY, MEAN, RSTD, W, BIAS, SDZ_P, SDZX_P, C, S, K, G, CPG, sxb, sxc, sxs, srb, src, srs,
        HAS_RES: tl.constexpr, SILU: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr,
        CHUNK_TILES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0).to(tl.int64)
        k = tl.program_id(1)
        offs_c = tl.arange(0, BLOCK_C)
        mc = offs_c < C
        r, nmr, w, bi = _group_terms(MEAN, RSTD, W, BIAS, b, G, CPG, offs_c, mc, HAS_W, HAS_B, BLOCK_C)
        s0 = k * (CHUNK_TILES * BLOCK_S)
        s_end = tl.minimum(s0 + CHUNK_TILES * BLOCK_S, S)
        # element-wise accumulators, reduced once after the loop (as in _stats_kernel)
        sdz = tl.zeros([BLOCK_S, BLOCK_C], dtype=tl.float32)
        sdzx = tl.zeros([BLOCK_S, BLOCK_C], dtype=tl.float32)
        for i in range(CHUNK_TILES):  # a constexpr trip count, as in _stats_kernel
            offs_s = s0 + i * BLOCK_S + tl.arange(0, BLOCK_S)
            mask = (offs_s < s_end)[:, None] & mc[None, :]
            x = _load_tile(X, R, b, offs_s, offs_c, mask, sxb, sxc, sxs, srb, src, srs, HAS_RES)
            s64 = offs_s.to(tl.int64)[:, None]
            dy = tl.load(DY + b * sxb + s64 * sxs + offs_c.to(tl.int64)[None, :] * sxc, mask=mask, other=0.0)
            dz = dy.to(tl.float32)
            xhat = x * r + nmr
            if SILU:
                dz = _silu_grad(xhat * w + bi, dz)
            dz = tl.where(mask, dz, 0.0)
            sdz += dz
            sdzx += dz * xhat
        out = (b * K + k) * C + offs_c
        tl.store(SDZ_P + out, tl.sum(sdz, axis=0), mask=mc)
        tl.store(SDZX_P + out, tl.sum(sdzx, axis=0), mask=mc)

    @triton.jit
    def _bwd_combine_kernel(
        SDZ_P, SDZX_P, W, AG, BG, DW, DB, C, S, K, G, CPG,
        HAS_W: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_CPG: tl.constexpr, K_TILES: tl.constexpr,
        B: tl.constexpr,
    ):  # fmt: skip
        """Per group program, over the batch: the (chunk, channel) partial sums of ``_bwd_reduce_kernel`` -> per
        (sample, group) AG = mean_g(w dz), BG = mean_g(w dz xhat) (B, G); per channel of the group
        DW = sum(dz xhat), DB = sum(dz) (C,)."""
        g = tl.program_id(0)
        offs_j = tl.arange(0, BLOCK_CPG)
        mj = offs_j < CPG
        ch = g * CPG + offs_j
        w = _load_affine(W, ch, mj, HAS_W, 1.0, BLOCK_CPG)
        n = S * CPG * 1.0  # (an int 1 argument is a constexpr: no .to)
        dw = tl.zeros([BLOCK_CPG], dtype=tl.float32)
        db = tl.zeros([BLOCK_CPG], dtype=tl.float32)
        for b in range(B):
            sdz = tl.zeros([BLOCK_CPG], dtype=tl.float32)
            sdzx = tl.zeros([BLOCK_CPG], dtype=tl.float32)
            for i in range(K_TILES):
                offs_k = i * BLOCK_K + tl.arange(0, BLOCK_K)
                m = (offs_k < K)[:, None] & mj[None, :]
                ptr = (b * K + offs_k[:, None].to(tl.int64)) * C + ch[None, :]
                sdz += tl.sum(tl.load(SDZ_P + ptr, mask=m, other=0.0), axis=0)
                sdzx += tl.sum(tl.load(SDZX_P + ptr, mask=m, other=0.0), axis=0)
            tl.store(AG + b * G + g, tl.sum(sdz * w, axis=0) / n)
            tl.store(BG + b * G + g, tl.sum(sdzx * w, axis=0) / n)
            db += sdz
            dw += sdzx
        tl.store(DW + ch, dw, mask=mj)
        tl.store(DB + ch, db, mask=mj)

    @triton.jit
    def _bwd_apply_kernel(
        X, R, DY, DX, MEAN, RSTD, W, BIAS, AG, BG, C, S, G, CPG, sxb, sxc, sxs, srb, src, srs,
        HAS_RES: tl.constexpr, SILU: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr,
        HAS_W: tl.constexpr, HAS_B: tl.constexpr,
    ):  # fmt: skip
        """dx = rstd (w dz - AG - xhat BG) per (sample, group)."""
        b = tl.program_id(1).to(tl.int64)  # the grid's y dimension (at most 65,535): the batch
        offs_s = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)  # x (2^31 - 1): 128^3 x 128 needs 65,536
        offs_c = tl.arange(0, BLOCK_C)
        mc = offs_c < C
        mask = (offs_s < S)[:, None] & mc[None, :]
        x = _load_tile(X, R, b, offs_s, offs_c, mask, sxb, sxc, sxs, srb, src, srs, HAS_RES)
        s64 = offs_s.to(tl.int64)[:, None]
        ptr = b * sxb + s64 * sxs + offs_c.to(tl.int64)[None, :] * sxc
        dz = tl.load(DY + ptr, mask=mask, other=0.0).to(tl.float32)
        r, nmr, w, bi = _group_terms(MEAN, RSTD, W, BIAS, b, G, CPG, offs_c, mc, HAS_W, HAS_B, BLOCK_C)
        xhat = x * r + nmr
        if SILU:
            dz = _silu_grad(xhat * w + bi, dz)
        grp = b * G + offs_c // CPG
        ag = tl.load(AG + grp, mask=mc, other=0.0)[None, :]
        bg = tl.load(BG + grp, mask=mc, other=0.0)[None, :]
        dx = r * (w * dz - ag - xhat * bg)
        tl.store(DX + ptr, dx.to(DX.dtype.element_ty), mask=mask)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive integers (the launch geometry, computed without Triton)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (>= 1)."""
    return 1 << max(0, n - 1).bit_length()


def blocks(c: int, s: int, b: int) -> tuple[int, int, int, int]:
    """(BLOCK_C, BLOCK_S, tiles per chunk, chunks) for x of C channels and S spatial positions, batch B: chunks of
    whole [BLOCK_S, BLOCK_C] tiles, about :data:`TARGET_PROGRAMS` (sample, chunk) programs in all."""
    block_c = next_power_of_2(c)
    block_s = max(1, min(TILE // block_c, next_power_of_2(s)))
    chunks = max(1, min(cdiv(s, block_s), cdiv(TARGET_PROGRAMS, b)))
    tiles = cdiv(cdiv(s, chunks), block_s)
    return block_c, block_s, tiles, cdiv(s, tiles * block_s)


def combine_blocks(k: int, cpg: int) -> tuple[int, int, int]:
    """(BLOCK_K, BLOCK_CPG, K tiles) of the combine kernels: [BLOCK_K, BLOCK_CPG] tiles of at most
    :data:`COMBINE_TILE` elements over ``k`` chunks and ``cpg`` channels per group."""
    block_cpg = next_power_of_2(cpg)
    block_k = max(1, min(COMBINE_TILE // block_cpg, next_power_of_2(k)))
    return block_k, block_cpg, cdiv(k, block_k)
