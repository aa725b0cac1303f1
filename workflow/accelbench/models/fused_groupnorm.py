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
   (shifted sums, x minus the chunk's first position, accumulated element-wise over [BLOCK_S, C] tiles in fp32 and
   reduced once per chunk) -> (B, chunks, C); ``_stats_combine_kernel``, grid (B, G):
   Chan's formula per group -> mean, rstd (B, G) and the per-channel ``a``, ``b`` below (no host synchronisation, no
   torch operation between the launches: CUDA-graph safe).
2. ``_apply_kernel``, grid (B, S / BLOCK_S): ``y = act(x * a + b)`` with per-(sample, channel) ``a = rstd w``,
   ``b = bias - mean rstd w``.
3. backward ``_bwd_reduce_kernel``: per chunk and channel the sums of ``dz`` and ``dz xhat`` (``dz``: the gradient
   at the affine output, through SiLU's derivative recomputed from x); ``_bwd_combine_kernel``, grid (G,): summed over
   chunks and samples -> ``dweight``, ``dbias`` and the per-group terms; ``_bwd_apply_kernel``:
   ``dx = rstd (w dz - mean_g(w dz) - xhat mean_g(w dz xhat))``; the residual's gradient is ``dx`` summed to its
   shape. One forward + backward: 6 launches and no other device work
   (``tests/experiments/test_fused_groupnorm_graph.py``).

Where it runs: :func:`group_norm_act` with ``impl="auto"`` uses the Triton kernels on CUDA when Triton imports, and
elsewhere (CPU: the embedded default; Gaudi) the plain ``F.group_norm`` + ``F.silu`` composition
(:func:`group_norm_act_reference`). The fused path is a custom operator, registered twice with the same kernels:
``accelbench::group_norm_act_fixed`` (torch's fixed stride order: the default, Study A's channels-last network) and
``accelbench::group_norm_act`` (tagged ``flexible_layout``: where Inductor's layout optimization is forced, SR3's
``layout_opt`` configurations; :mod:`accelbench.models.group_norm_op` says why both), each with a fake
implementation and an autograd formula registered (``torch.compile`` keeps it in the graph without a graph break; no
host synchronisation); without Triton (or off CUDA, unless ``TRITON_INTERPRET=1``) the operator computes the same
formulas with torch operations, which is what the fp64 gradient checks test
(``tests/experiments/test_fused_groupnorm.py``).

The module is split by what each part does: the Triton kernels and their launch geometry are
:mod:`accelbench.models.group_norm_kernels`; the operator (forward, backward, fake implementation, autograd formula),
the reference and the layout glue :mod:`accelbench.models.group_norm_op`; here the public function, the module and the
benchmark.

Benchmark on a GPU node (fused vs eager vs ``torch.compile``'d reference, forward + backward, bf16, the SR3 and Study A
shapes)::

    python -m accelbench.models.fused_groupnorm --bench --csv fused_groupnorm_bench.csv

Each row has the eager loop's ms (host + device: the Python dispatch and launches included) and, per function, the ms
of one replay of it captured in a CUDA graph (device only), so host overhead and device time separate.
"""

from __future__ import annotations

import argparse
import contextlib

import torch
from torch import nn

from accelbench.models import group_norm_kernels as kernels
from accelbench.models.group_norm_kernels import has_triton
from accelbench.models.group_norm_op import (  # noqa: F401 (group_norm_act_reference: offered here, as always)
    ACTIVATIONS,
    check_args,
    dense,
    group_norm_act_fixed_op,
    group_norm_act_op,
    group_norm_act_reference,
)

IMPLS = ("auto", "fused", "reference")


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

    ``impl``: ``auto`` (the fused operator on CUDA when Triton imports, else the reference), ``fused`` (the
    operator ``accelbench::group_norm_act_fixed``, fixed stride order, anywhere: Triton kernels on CUDA or under
    ``TRITON_INTERPRET=1``, else the same formulas in torch operations), ``reference``.

    Raises:
        ValueError: C not divisible by ``num_groups``, an unknown activation or impl, a residual of another shape.
    """
    return _group_norm_act(x, num_groups, (weight, bias), eps, activation, residual, impl, group_norm_act_fixed_op)


def path(device: torch.device) -> str:
    """Which implementation :func:`group_norm_act` (``impl="auto"``) takes for tensors on ``device``, for a result to
    record: ``"triton"`` (the fused kernels: CUDA with Triton importable) or ``"torch"`` (``F.group_norm`` +
    ``F.silu``, :func:`group_norm_act_reference`: the CPU fallback the embedded default runs, and Gaudi's)."""
    return "triton" if torch.device(device).type == "cuda" and has_triton() else "torch"  # _group_norm_act's test


def _group_norm_act(x, num_groups, affine, eps, activation, residual, impl, op) -> torch.Tensor:
    """:func:`group_norm_act` with ``affine`` = (weight, bias) and the registration ``op`` of the operator that the
    fused path calls (``group_norm_op.group_norm_act_op``, tagged ``flexible_layout``, or
    ``group_norm_act_fixed_op``: group_norm_op says which suits which compiled graph)."""
    check_args(x, num_groups, activation, residual)
    if impl not in IMPLS:
        raise ValueError(f"group_norm_act: impl {impl!r} is not one of {IMPLS}")
    weight, bias = affine
    if impl == "reference" or (impl == "auto" and not (x.is_cuda and has_triton())):  # path(x.device) == "torch"
        return group_norm_act_reference(x, num_groups, weight, bias, eps, activation, residual)
    if residual is not None and residual.shape != x.shape:
        residual = residual.reshape(x.shape[0], x.shape[1])
    y, _, _ = op(dense(x), weight, bias, residual, num_groups, float(eps), activation == "silu")
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
        # the fused operator's registration: False = fixed stride order (a channels-last eager network, Inductor's
        # layout optimization off: Study A), True = flexible_layout (layout optimization forced on an NCHW network:
        # SR3's layout_opt configurations); accelbench.models.group_norm_op says why
        self.flexible_layout = False

    @classmethod
    def of(cls, gn: nn.GroupNorm, activation: str | None = None) -> FusedGroupNorm:
        """A FusedGroupNorm holding ``gn``'s own parameter tensors (not copies)."""
        new = cls(gn.num_groups, gn.num_channels, gn.eps, gn.affine, device="meta", activation=activation)
        new.weight, new.bias = gn.weight, gn.bias
        new.train(gn.training)
        return new

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        op = group_norm_act_op if self.flexible_layout else group_norm_act_fixed_op
        return _group_norm_act(
            x, self.num_groups, (self.weight, self.bias), self.eps, self.activation, residual, self.impl, op
        )

    def extra_repr(self) -> str:
        layout = ", flexible_layout=True" if self.flexible_layout else ""
        return f"{super().extra_repr()}, activation={self.activation}{layout}"


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
    """Mean ms of ``fn()`` called ``iters`` times from Python after 3 warm-up calls (device and host time)."""
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


def _graph_ms(fn, iters: int = 20) -> float:
    """Mean ms of one replay of ``fn`` captured in a CUDA graph (after 3 warm-up calls on a side stream): the device
    time without the host's Python and launch overhead."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return _time_ms(graph.replay, iters)


def _bench_shape(name: str, shape: tuple[int, ...], groups: int, residual: bool, fused_only: bool = False) -> dict:
    """One row of :func:`bench`: ``<impl>_ms`` from the eager loop, ``<impl>_graph_ms`` from CUDA-graph replays
    (``fused_only``: the fused operator's columns only), and ``fused_gb_per_s``: the bytes the fused forward +
    backward must move at least (x read twice and y written once forward; x and dy read twice and dx written once
    backward: 8 activation-sized passes, the (B, C) residual and the per-channel terms left out) over its CUDA-graph
    time, in GB/s (10^9 bytes), to set against the device's memory bandwidth."""
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

    row = {"shape": name, "dims": "x".join(map(str, shape)), "residual": residual, "tile": kernels.TILE}
    row["warps"] = " ".join(f"{k}={v}" for k, v in kernels.WARPS.items())  # the tile kernels' launch settings
    impls = (("fused", fused),) if fused_only else (("fused", fused), ("eager", ref), ("compiled", torch.compile(ref)))
    try:
        for label, f in impls:
            row[f"{label}_ms"] = round(_time_ms(lambda f=f: torch.autograd.backward(f(x, w, bi, r), dy)), 3)
            try:  # torch.autograd.grad: fresh gradients from the graph's pool, no .grad accumulated in the capture
                step = lambda f=f: torch.autograd.grad(f(x, w, bi, r), (x, w, bi), dy)  # noqa: E731
                row[f"{label}_graph_ms"] = round(_graph_ms(step), 3)
            except RuntimeError as e:  # a capture that fails is recorded with its reason, the row goes on
                row[f"{label}_graph_ms"] = None
                row[f"{label}_graph_error"] = str(e).splitlines()[0]
        if row.get("fused_graph_ms"):
            row["fused_gb_per_s"] = round(8 * x.numel() * x.element_size() / (row["fused_graph_ms"] * 1e6), 1)
        with torch.no_grad():
            exact = group_norm_act_reference(x.float(), groups, w, bi, 1e-5, "silu", r)
            row["max_abs_diff_vs_fp32"] = float((fused(x, w, bi, r).float() - exact).abs().max())
    except torch.OutOfMemoryError as e:
        row["error"] = f"out of memory: {e}".splitlines()[0]
    return row


def bench(
    shapes=BENCH_SHAPES, residual: bool = False, tiles: tuple[int, ...] = (), warps: tuple[int, ...] = ()
) -> list[dict]:
    """Forward + backward ms of ``SiLU(GroupNorm(x))`` in bf16 channels-last on the CUDA device, per shape: the fused
    operator, the eager reference under bf16 autocast (``nn.GroupNorm`` then ``F.silu``: what the networks run), and
    that reference through ``torch.compile``, each from an eager loop (``*_ms``: host + device) and from CUDA-graph
    replays (``*_graph_ms``: device only); also the fused output's largest difference from the fp32 reference.
    ``tiles``: further rows of the fused operator alone with the kernels' tile size
    (:data:`~accelbench.models.group_norm_kernels.TILE`, elements of one [BLOCK_S, BLOCK_C] tile) set to each, the
    ``tile`` column saying which (the sweep that chooses it). ``warps``: further rows of the fused operator alone
    with one tile kernel at a time launched with each count (:data:`~accelbench.models.group_norm_kernels.WARPS`),
    the ``warps`` column naming every kernel's. Each setting is put back after its row, also when the row fails.
    Prints one dict per row as it goes."""
    rows = []
    for name, shape, groups in shapes:
        rows.append(_bench_shape(name, shape, groups, residual))
        print(rows[-1], flush=True)
        settings = [(vars(kernels), "TILE", t) for t in tiles if t != kernels.TILE]
        settings += [(kernels.WARPS, k, w) for w in warps for k, v in kernels.WARPS.items() if v != w]
        for table, key, value in settings:
            with _setting(table, key, value):
                rows.append(_bench_shape(name, shape, groups, residual, fused_only=True))
            print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    return rows


@contextlib.contextmanager
def _setting(table: dict, key: str, value: int):
    """``table[key]`` set to ``value`` for the ``with`` block, put back afterwards (``table``: the kernels module's
    namespace for ``TILE``, or its ``WARPS``)."""
    saved = table[key]
    table[key] = value
    try:
        yield
    finally:
        table[key] = saved


def environment() -> dict:
    """The columns every CSV row carries: device name, torch and Triton versions."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:  # pragma: no cover - the bench needs Triton; the columns say so where it is absent
        triton_version = "none"
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {"device": device, "torch": torch.__version__, "triton": triton_version}


def write_csv(rows: list[dict], path, env: dict) -> None:
    """``rows`` (:func:`bench`'s) with ``env``'s columns first, to ``path``: one header, the union of the rows'
    keys in first-seen order, empty cells where a row lacks a key (an out-of-memory row, a failed capture)."""
    import csv

    rows = [{**env, **r} for r in rows]
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=fields)
        out.writeheader()
        out.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m accelbench.models.fused_groupnorm", description=__doc__.split("\n")[0])
    p.add_argument("--bench", action="store_true", help="time fused vs eager vs compiled on the CUDA device")
    p.add_argument("--residual", action="store_true", help="with a (B, C) residual (the time-embedding add)")
    p.add_argument("--csv", metavar="PATH", help="also write the rows (device, torch, triton, shape, ms) to PATH")
    p.add_argument(
        "--tiles",
        default="",
        help="comma-separated tile sizes (elements of one [BLOCK_S, BLOCK_C] tile, powers of two): the fused operator "
        f"again with each, beside the default {kernels.TILE}",
    )
    p.add_argument(
        "--warps",
        default="",
        help="comma-separated warp counts (powers of two, at most 32): the fused operator again with each tile kernel "
        f"in turn launched with each, beside the defaults ({', '.join(f'{k} {v}' for k, v in kernels.WARPS.items())})",
    )
    a = p.parse_args(argv)
    if not a.bench:
        p.print_help()
        return 0
    parts = [t.strip() for t in a.tiles.split(",") if t.strip()]
    if not all(p.isdigit() and int(p) > 0 and int(p) & (int(p) - 1) == 0 for p in parts):
        print(f"fused_groupnorm --tiles: {a.tiles!r}: each tile must be a power of two")
        return 2
    tiles = tuple(int(p) for p in parts)
    wparts = [w.strip() for w in a.warps.split(",") if w.strip()]
    if not all(w.isdigit() and 0 < int(w) <= 32 and int(w) & (int(w) - 1) == 0 for w in wparts):
        print(f"fused_groupnorm --warps: {a.warps!r}: each count must be a power of two from 1 to 32")
        return 2
    if not (torch.cuda.is_available() and has_triton()):
        print("fused_groupnorm --bench: needs a CUDA device and Triton")
        return 2
    rows = bench(residual=a.residual, tiles=tiles, warps=tuple(int(w) for w in wparts))
    if a.csv:
        write_csv(rows, a.csv, environment())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
