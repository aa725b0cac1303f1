"""Compile the fused GroupNorm's four tile kernels (accelbench.models.group_norm_kernels) for sm_90 without a GPU, at
the warps the operator launches them with (``TILE_WARPS``) and the tile of Study A's 64-channel shapes, and print one
line per kernel: ``name registers spill_bytes`` from Triton's bundled ptxas (``-v``). Run by
tests/system/test_triton_interpret.py (Triton importable, ``TRITON_INTERPRET`` unset)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from accelbench.models import group_norm_kernels as k

BF16 = {"X", "R", "DY", "DX", "Y"}  # activation pointers; the other upper-case pointers are fp32 (stats, affine)
INTS = {"C", "S", "K", "G", "CPG"}


def ptxas_line(fn, constexprs: dict, warps: int) -> str:
    sig = {}
    for n in fn.arg_names:
        if n in constexprs:
            sig[n] = "constexpr"
        elif n in BF16:
            sig[n] = "*bf16"
        elif n.isupper() and n not in INTS:
            sig[n] = "*fp32"
        else:
            sig[n] = "i32"
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(c),): v for c, v in constexprs.items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as fh:
            fh.write(compiled.asm["ptx"])
        out = subprocess.run(
            [ptxas, "-v", "--gpu-name", "sm_90a", path, "-o", os.devnull], capture_output=True, text=True
        )
    regs = re.search(r"Used (\d+) registers", out.stderr)
    spill = re.search(r"(\d+) bytes spill stores", out.stderr)
    if regs is None or spill is None:
        raise SystemExit(f"ptxas said nothing of registers for {fn.fn.__name__}: {out.stderr[-500:]}")
    return f"{fn.fn.__name__} {regs.group(1)} {spill.group(1)}"


def main() -> int:
    warps = int(sys.argv[1]) if len(sys.argv) > 1 else k.TILE_WARPS
    block_c, block_s, tiles, _ = k.blocks(64, 128**3, 1)  # Study A's 64 x 128^3 shape
    tile = {"BLOCK_S": block_s, "BLOCK_C": block_c, "HAS_RES": False}
    affine = {"HAS_W": True, "HAS_B": True}
    kernels = (
        (k._stats_kernel, {**tile, "CHUNK_TILES": tiles}),
        (k._apply_kernel, {**tile, "SILU": True}),
        (k._bwd_reduce_kernel, {**tile, "SILU": True, "CHUNK_TILES": tiles, **affine}),
        (k._bwd_apply_kernel, {**tile, "SILU": True, **affine}),
    )
    for fn, constexprs in kernels:
        print(ptxas_line(fn, constexprs, warps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
