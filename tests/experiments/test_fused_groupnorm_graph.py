"""The fused GroupNorm operator of accelbench.models.fused_groupnorm as the device sees it, checked on the CPU: how
many launches one forward + backward costs (the Triton kernels mocked, the torch operations around them counted by
``torch.profiler``); and the benchmark's CSV."""

from __future__ import annotations

import collections

import pytest
import torch

from accelbench.models import fused_groupnorm as fg
from accelbench.models import group_norm_kernels as kernels

KERNELS = (
    "_stats_kernel",
    "_stats_combine_kernel",
    "_apply_kernel",
    "_bwd_reduce_kernel",
    "_bwd_combine_kernel",
    "_bwd_apply_kernel",
)
# aten operations that launch nothing on a device: allocations, views, metadata
NO_LAUNCH = {
    "empty", "empty_like", "empty_strided", "new_empty", "view", "_unsafe_view", "as_strided", "permute", "t",
    "expand", "detach", "alias", "slice", "select", "unsqueeze", "squeeze", "reshape", "_reshape_alias",
}  # fmt: skip


class _Launches:
    """Stands for a Triton kernel: ``kernel[grid](*args)`` records its name and computes nothing."""

    def __init__(self, name: str, log: list[str]):
        self.name, self.log = name, log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append(self.name)


def _outermost(event) -> bool:
    p = event.cpu_parent
    while p is not None:
        if p.name.startswith("aten::"):
            return False
        p = p.cpu_parent
    return True


def device_work(monkeypatch, shape=(2, 64, 4, 4, 4), groups=32, residual=None):
    """(Triton launches, Counter of torch operations that launch device work) of one fused forward + backward, the
    Triton path taken with its kernels mocked: each outermost aten operation the profiler records, less allocations,
    views and ``to`` calls that copy nothing."""
    log: list[str] = []
    monkeypatch.setattr(kernels, "triton_on", lambda x: True)
    for name in KERNELS:
        monkeypatch.setattr(kernels, name, _Launches(name, log), raising=False)
    fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    x = torch.randn(shape).contiguous(memory_format=fmt).requires_grad_()
    w, b = torch.randn(shape[1], requires_grad=True), torch.randn(shape[1], requires_grad=True)
    dy = torch.randn_like(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        y = fg.group_norm_act(x, groups, w, b, 1e-5, "silu", residual, "fused")
        torch.autograd.backward(y, dy)
    ops = [
        e.name.removeprefix("aten::")
        for e in prof.events()
        if e.name.startswith("aten::") and _outermost(e) and not (e.name == "aten::to" and not e.cpu_children)
    ]
    return log, collections.Counter(o for o in ops if o not in NO_LAUNCH)


def test_one_forward_and_backward_is_six_triton_launches_and_no_torch_operation(monkeypatch):
    """The statistics are combined per group inside Triton (``_stats_combine_kernel``, ``_bwd_combine_kernel``): the
    forward and backward launch 3 kernels each and no torch operation (before: 4 kernels and 46 small torch
    operations: the Chan combine, repeat_interleave per channel, the affine terms, sums over chunks and the zeros
    autograd materialised for the statistics' gradients), so CUDA graphs or not the per-call floor is 6 launches."""
    log, torch_ops = device_work(monkeypatch)
    assert log == list(KERNELS)
    assert torch_ops == collections.Counter()


def test_a_per_channel_residual_adds_only_its_own_gradient_sum(monkeypatch):
    """With a (B, C) residual (the time-embedding add) the only torch work is its gradient, dx summed over space."""
    log, torch_ops = device_work(monkeypatch, residual=torch.randn(2, 64, requires_grad=True))
    assert log == list(KERNELS)
    assert set(torch_ops) <= {"sum", "to"} and torch_ops["sum"] == 1


@pytest.mark.parametrize("shape", [(2, 64, 4, 4, 4), (3, 48, 5, 7)])
def test_the_launch_count_does_not_depend_on_the_shape(monkeypatch, shape):
    log, torch_ops = device_work(monkeypatch, shape=shape, groups=16)
    assert len(log) == 6 and not torch_ops


# --------------------------------------------------------------------------- the benchmark's CSV
def test_bench_csv_has_the_environment_columns_and_every_rows_keys(tmp_path, monkeypatch):
    """``--bench --csv PATH`` writes one row per shape with device, torch and triton first, then the eager-loop and
    CUDA-graph columns; a row lacking a key (out of memory, a failed capture) leaves its cells empty."""
    import csv

    rows = [
        {"shape": "a", "dims": "1x8x4x4", "fused_ms": 1.5, "fused_graph_ms": 0.2},
        {"shape": "b", "dims": "1x8x2x2", "error": "out of memory: x"},
    ]
    monkeypatch.setattr(fg.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fg, "has_triton", lambda: True)
    monkeypatch.setattr(fg, "bench", lambda residual=False, tiles=(), warps=(): rows)
    monkeypatch.setattr(fg, "environment", lambda: {"device": "NVIDIA H100", "torch": "2.x", "triton": "3.x"})
    path = tmp_path / "bench.csv"
    assert fg.main(["--bench", "--csv", str(path)]) == 0
    got = list(csv.DictReader(path.open()))
    assert list(got[0]) == ["device", "torch", "triton", "shape", "dims", "fused_ms", "fused_graph_ms", "error"]
    assert got[0]["device"] == "NVIDIA H100" and got[0]["fused_graph_ms"] == "0.2" and got[0]["error"] == ""
    assert got[1]["shape"] == "b" and got[1]["fused_ms"] == "" and got[1]["error"] == "out of memory: x"


def test_bench_sweeps_the_tile_size_for_the_fused_operator_alone_and_restores_it(monkeypatch, capsys):
    """``--tiles 2048,8192``: per shape, the full row at the default tile, then the fused operator alone at each other
    tile (the kernels' TILE set for that row, put back after it, also when a row fails); a tile that is not a power of
    two is refused with one line before any device work."""
    seen = []

    def shape_row(name, shape, groups, residual, fused_only=False):
        seen.append((name, kernels.TILE, fused_only))
        if kernels.TILE == 8192 and name == "b":
            raise RuntimeError("a failing row")
        return {"shape": name, "tile": kernels.TILE}

    monkeypatch.setattr(fg, "_bench_shape", shape_row)
    default = kernels.TILE
    rows = fg.bench(shapes=(("a", (1, 8, 4, 4), 2),), tiles=(2048, default, 8192))
    assert seen == [("a", default, False), ("a", 2048, True), ("a", 8192, True)] and len(rows) == 3
    with pytest.raises(RuntimeError, match="a failing row"):
        fg.bench(shapes=(("b", (1, 8, 4, 4), 2),), tiles=(8192,))
    assert kernels.TILE == default
    for bad in ("3000", "4096,x", "0"):
        assert fg.main(["--bench", "--tiles", bad]) == 2
        assert "each tile must be a power of two" in capsys.readouterr().out


def test_bench_sweeps_each_kernels_warps_one_at_a_time_and_restores_them(monkeypatch, capsys):
    """``--warps 4``: per shape, the full row at the defaults, then the fused operator alone with one tile kernel at a
    time launched with 4 warps (the others at their defaults, the row's ``warps`` naming all four), every count put
    back after its row, also when a row fails; a count that is not a power of two from 1 to 32 is refused with one
    line before any device work."""
    seen = []
    defaults = dict(kernels.WARPS)

    def shape_row(name, shape, groups, residual, fused_only=False):
        seen.append((name, dict(kernels.WARPS), fused_only))
        if name == "b" and kernels.WARPS["apply"] == 4:
            raise RuntimeError("a failing row")
        return {"shape": name}

    monkeypatch.setattr(fg, "_bench_shape", shape_row)
    rows = fg.bench(shapes=(("a", (1, 8, 4, 4), 2),), warps=(4,))
    changed = [{k for k in w if w[k] != defaults[k]} for _, w, _ in seen]
    assert changed[0] == set() and seen[0][2] is False
    assert changed[1:] == [{k} for k in defaults if defaults[k] != 4] and all(f for _, _, f in seen[1:])
    assert all(w[k] == 4 for (_, w, _), ks in zip(seen[1:], changed[1:]) for k in ks)
    assert len(rows) == len(seen) and kernels.WARPS == defaults
    with pytest.raises(RuntimeError, match="a failing row"):
        fg.bench(shapes=(("b", (1, 8, 4, 4), 2),), warps=(4,))
    assert kernels.WARPS == defaults
    for bad in ("3", "4,x", "0", "64"):
        assert fg.main(["--bench", "--warps", bad]) == 2
        assert "each count must be a power of two from 1 to 32" in capsys.readouterr().out


def test_environment_names_the_device_and_versions():
    env = fg.environment()
    assert set(env) == {"device", "torch", "triton"} and env["torch"] == torch.__version__


def test_path_names_the_implementation_a_device_gets_and_study_a_records_it(monkeypatch):
    """``path``: ``torch`` (the fallback) on the CPU whatever Triton does, ``triton`` on CUDA with Triton, ``torch``
    on CUDA without; Study A's result records it for a fused-GroupNorm configuration only (``norm_path``), so the
    embedded default's ours result says that it ran the fallback."""
    from accelbench.backends.device import Device
    from accelbench.experiments.unet3d import job
    from accelbench.experiments.unet3d.configs import VARIANTS

    for triton_present in (True, False):
        monkeypatch.setattr(fg, "has_triton", lambda t=triton_present: t)
        assert fg.path(torch.device("cpu")) == "torch"
        assert fg.path(torch.device("cuda", 0)) == ("triton" if triton_present else "torch")
    model = torch.nn.Linear(2, 2)
    settings = type("S", (), {"network": "med_ddpm", "micro_batches": 1, "tensor_shape": (1, 3, 8, 8, 8)})()
    monkeypatch.setattr(job, "keeps_grad_buffers", lambda variant, settings: False)
    cpu = Device("cpu")
    fused = job._configuration_record(model, settings, VARIANTS["bf16_channels_last_3d_ndhwc_fused_gn"], cpu)
    plain = job._configuration_record(model, settings, VARIANTS["bf16"], cpu)
    assert fused["norm_path"] == "torch" and plain["norm_path"] is None
