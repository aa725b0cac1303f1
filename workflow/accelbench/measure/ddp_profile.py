"""The DDP profile of a bare loop (``benchmarks/harness_overhead.py ddp-profile``): step time and torch.profiler device
metrics per rank count (one torchrun job each: :mod:`accelbench.cluster.torchrun_call`), DDP variant and rank. The
interval arithmetic of a trace (busy time, exposed communication), the DDP variants compared, one profiled step and
the loop over variants on one rank are here; each experiment gives its bare loop and its CSV labels (:class:`Case`,
from ``experiments/<name>/overhead.py``)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from accelbench.measure import overhead

# the per-step device metrics of a profiled window (device_metrics), in CSV column order
DEVICE_METRICS = (
    "window_ms",
    "gpu_busy_ms",
    "compute_ms",
    "nccl_ms",
    "exposed_comm_ms",
    "gpu_idle_ms",
    "kernels_per_step",
    "class_ms",
    "top_kernels",
)
PROFILE_FIELDS = [
    "experiment",
    "case",
    "devices",
    "rank",
    "variant",
    "ddp_kwargs",
    "step_ms",
    "step_ms_profiled",
    *DEVICE_METRICS,
    "host_launch_ms",
    "steps",
    "profiled_steps",
    "threads_per_rank",
    "settings",
    "device",
    "note",
    "when",
]
ONE_BUCKET_MB = 100_000  # larger than any model's gradients here: DDP then all-reduces them in one bucket


def union(intervals) -> list[tuple[float, float]]:
    """Merged, sorted union of ``(start, end)`` intervals (any unit; empty or reversed intervals dropped)."""
    out: list[list[float]] = []
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def covered(intervals) -> float:
    """Total length of the union of ``intervals`` (overlaps counted once)."""
    return sum(b - a for a, b in union(intervals))


def overlap(a, b) -> float:
    """Length of the time covered by both interval sets ``a`` and ``b`` (each merged first)."""
    ua, ub = union(a), union(b)
    i = j = 0
    total = 0.0
    while i < len(ua) and j < len(ub):
        lo, hi = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        total += max(0.0, hi - lo)
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return total


def not_overlapped(a, b) -> float:
    """Length of the time covered by ``a`` and not by ``b``: e.g. communication kernels (``a``) not hidden behind
    compute kernels (``b``) = exposed communication."""
    return covered(a) - overlap(a, b)


def device_intervals(trace_events: list[dict]) -> tuple[list, list]:
    """(all device activity, NCCL kernels) as ``(start_us, end_us)`` lists from a Chrome trace's ``traceEvents``
    (torch.profiler/Kineto): kernels, memcpy and memset; NCCL kernels by name (``nccl...``)."""
    busy, comm = [], []
    for e in trace_events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        iv = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        busy.append(iv)
        if e["cat"] == "kernel" and "nccl" in str(e.get("name", "")).lower():
            comm.append(iv)
    return busy, comm


def profile_metrics(trace_events: list[dict], steps: int) -> dict:
    """Per-step device metrics (ms) of ``steps`` back-to-back profiled steps: the device window (first activity's
    start to last activity's end), busy time (union of kernels/copies), compute (non-NCCL) and NCCL kernel time,
    exposed communication (NCCL time not overlapped by compute), device idle within the window, kernel count.
    All None where the trace has no device activity (CPU runs)."""
    busy, comm = device_intervals(trace_events)
    if not busy:
        return {k: None for k in DEVICE_METRICS}
    comm_set = set(comm)
    compute = [iv for iv in busy if iv not in comm_set]
    window = max(b for _, b in busy) - min(a for a, _ in busy)
    per = lambda us: round(us / 1e3 / steps, 4)  # noqa: E731  (µs over all steps -> ms per step)
    n_kernels = sum(1 for e in trace_events if e.get("ph") == "X" and e.get("cat") == "kernel")
    return {
        "class_ms": kernel_classes(trace_events, steps),
        "top_kernels": top_kernels(trace_events, steps),
        "window_ms": per(window),
        "gpu_busy_ms": per(covered(busy)),
        "compute_ms": per(covered(compute)),
        "nccl_ms": per(covered(comm)),
        "exposed_comm_ms": per(not_overlapped(comm, compute)),
        "gpu_idle_ms": per(window - covered(busy)),
        "kernels_per_step": round(n_kernels / steps, 1),
    }


def kernel_classes(trace_events: list[dict], steps: int) -> str:
    """Device kernel time per step by kernel class (:func:`accelbench.measure.kernel_classes.classify_kernel`:
    convolution, GEMM, normalization, elementwise, layout conversion, ...), in ms, largest first, as JSON (the CSV's
    ``class_ms``): where the GPU's time goes once the host no longer sets the pace."""
    from accelbench.measure.kernel_classes import classify_kernel

    per: dict[str, float] = {}
    for e in trace_events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            c = classify_kernel(str(e.get("name", "")))
            per[c] = per.get(c, 0.0) + float(e.get("dur", 0)) / 1e3 / steps
    return json.dumps({c: round(v, 3) for c, v in sorted(per.items(), key=lambda kv: -kv[1])})


TOP_KERNELS = 15  # kernels named in the CSV's top_kernels
KERNEL_NAME_CHARS = 120  # templated CUTLASS/cuDNN names run to thousands of characters


def top_kernels(trace_events: list[dict], steps: int, n: int = TOP_KERNELS) -> str:
    """The ``n`` device kernels that take the most time, as JSON (the CSV's ``top_kernels``): a list of
    ``[name (first 120 characters), ms per step, launches per step, class]``, largest first. What ``class_ms`` adds
    up, by name: which kernels a class such as ``layout_conversion`` is made of."""
    from accelbench.measure.kernel_classes import classify_kernel

    ms: dict[str, float] = {}
    calls: dict[str, int] = {}
    for e in trace_events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            name = str(e.get("name", ""))
            ms[name] = ms.get(name, 0.0) + float(e.get("dur", 0)) / 1e3 / steps
            calls[name] = calls.get(name, 0) + 1
    top = sorted(ms.items(), key=lambda kv: -kv[1])[:n]
    return json.dumps(
        [
            [name[:KERNEL_NAME_CHARS], round(v, 3), round(calls[name] / steps, 1), classify_kernel(name)]
            for name, v in top
        ]
    )


STATIC_GRAPH_NO_SYNC = (
    "not run: DDP static_graph with no_sync gradient accumulation fails in the reducer "
    "(torch 2.13: 'expect_autograd_hooks_ INTERNAL ASSERT FAILED', found on CPU/gloo)"
)


def ddp_variants(world: int, grad_accum: int = 1) -> list[tuple[str, dict, str | None]]:
    """The DDP options compared on the bare loop, as ``(name, DDP kwargs, reason not run)``; on one rank only
    ``no_ddp`` (no wrapper). ``static_graph`` is not run with gradient accumulation (:data:`STATIC_GRAPH_NO_SYNC`)."""
    if world == 1:
        return [("no_ddp", {}, None)]
    return [
        ("default", {}, None),
        ("bucket_view", {"gradient_as_bucket_view": True}, None),
        (
            "static_graph+bucket_view",
            {"static_graph": True, "gradient_as_bucket_view": True},
            STATIC_GRAPH_NO_SYNC if grad_accum > 1 else None,
        ),
        ("one_bucket", {"bucket_cap_mb": ONE_BUCKET_MB}, None),
    ]


def profile_step(step, device, warmup: int, repeat: int, profiled: int) -> dict:
    """Warm up, time ``repeat`` steps (:func:`accelbench.measure.overhead.time_loop`), then profile ``profiled``
    back-to-back steps with torch.profiler (the device's activities: kernels, copies; the host's where the device is
    the host) and return step times, host time per step (the Python call of ``step``, not waiting for the device) and
    :func:`profile_metrics`."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    from accelbench.measure.timing import StepClock

    step_ms = statistics.median(overhead.time_loop(step, device, warmup, repeat))
    acts = [a for a in device.profiler_activities() if a != ProfilerActivity.CPU] or [ProfilerActivity.CPU]
    host = []
    device.synchronize()
    clock = StepClock(device)
    with profile(activities=acts) as prof:
        for _ in range(profiled):
            clock.start()
            t0 = time.perf_counter()
            step()
            host.append((time.perf_counter() - t0) * 1e3)
            clock.stop()
        profiled_ms = clock.samples()  # waits for the device inside the profile: its kernels are recorded
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    return {
        "step_ms": round(step_ms, 3),
        "step_ms_profiled": round(statistics.median(profiled_ms), 3),
        "host_launch_ms": round(statistics.median(host), 3),
        **profile_metrics(events, profiled),
    }


@dataclass
class Case:
    """What an experiment gives the DDP profile on one rank: the CSV's ``experiment``, ``case`` and ``settings``
    labels, its gradient accumulation (``static_graph`` is not run with it), this rank's device and its bare loop
    (``make_step(ddp_kwargs)`` -> ``(step, model)``; the process group exists when the world has more than one
    rank)."""

    experiment: str
    case: str
    settings: str
    grad_accum: int
    device: object  # accelbench.backends.device.Device
    make_step: Callable[[dict], tuple]


def profile_rank(args, case: Case, placement: dict) -> None:
    """The bare loop of ``case`` under each DDP variant (:func:`ddp_variants`) on this torchrun job's ranks; each
    rank's :func:`profile_step` numbers are gathered and rank 0 appends one CSV row per (variant, rank) to
    ``args.csv``."""
    import torch.distributed as dist

    rank, world, _ = overhead.ranks()
    device = case.device
    device.set_device()
    if world > 1:
        device.ops.prepare_collective()
        dist.init_process_group(device.ops.collective)
    rows = []
    for variant, kw, not_run in ddp_variants(world, case.grad_accum):
        row = {
            "experiment": case.experiment,
            "case": case.case,
            "devices": world,
            "rank": rank,
            "variant": variant,
            "ddp_kwargs": json.dumps(kw, sort_keys=True),
            "steps": args.repeat,
            "profiled_steps": args.profiled,
            "threads_per_rank": placement["threads"],
            "settings": case.settings,
            "device": overhead.device_label(device),
        }
        if not_run:
            rows.append({**row, "note": not_run, "when": overhead.now()})
            continue
        step, net = case.make_step(kw)
        if world > 1:
            dist.barrier()
        m = profile_step(step, device, args.warmup, args.repeat, args.profiled)
        rows.append({**row, **m, "when": overhead.now()})
        del step, net
        overhead.empty_cache(device)
    allrows = [rows]
    if world > 1:
        allrows = [None] * world
        dist.all_gather_object(allrows, rows)
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        for i in range(len(rows)):
            for r in allrows:
                overhead.append(args.csv, r[i], PROFILE_FIELDS)
