"""Kernel traces: device kernels (or, on CPU, outermost operators) read from Chrome traces as written by
:mod:`torch.profiler` (the format Perfetto and ``chrome://tracing`` open), reduced to a :class:`KernelSummary`
(per-kernel table, class totals, kernel count, device idle fraction; times in microseconds per step), the per-kernel
table written as ``kernels.csv``, and :func:`profile_steps`, which captures a trace of a few steps.

Kernel classes (:func:`~accelbench.measure.kernel_classes.classify_kernel`) are in
:mod:`accelbench.measure.kernel_classes`; the step clock is in :mod:`accelbench.measure.timing`.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from accelbench.backends.device import Device
from accelbench.measure.kernel_classes import class_totals, classify_kernel, is_tensor_core_kernel


@dataclass(frozen=True)
class KernelRecord:
    """One device kernel (or, on CPU, one outermost operator) from a trace. Times in microseconds."""

    name: str
    start_us: float
    dur_us: float


def load_chrome_trace(path: str | Path) -> dict:
    """Read a Chrome trace (``.json`` or ``.json.gz``) as written by ``torch.profiler``."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


# Wrappers around other operators (torch.compile regions, autograd's per-node wrappers for compiled
# graphs and gradient accumulation): looked through, so that the operators inside them count.
_WRAPPERS = re.compile(
    r"^Torch-Compiled Region|CompiledFunction|^## Call CompiledFxGraph|"
    r"^autograd::engine::evaluate_function: (CompiledFunctionBackward|torch::autograd::)"
)


def _outermost_events(events: list[dict]) -> list[dict]:
    """Events not nested inside another event of the same thread (CPU operator traces).

    On CPU the outermost aten operator (``aten::conv3d``, ``autograd::engine::evaluate_function:
    ConvolutionBackward0``, ...) is the unit that dispatches one fused implementation: it plays the
    role a kernel plays on a GPU, and outermost events never overlap, so times add up. Code that
    torch.compile generates for the CPU is not an ATen operator and does not appear (it counts as idle).
    """
    out = []
    by_tid: dict = {}
    for e in events:
        if _WRAPPERS.search(e.get("name", "")):
            continue
        by_tid.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        end = float("-inf")
        for e in evs:
            if e["ts"] >= end:
                out.append(e)
                end = e["ts"] + e.get("dur", 0)
    return out


def kernel_records_from_trace(trace: dict) -> tuple[list[KernelRecord], str, tuple[float, float] | None]:
    """Device kernels of a Chrome trace, or outermost CPU operators when the trace has no device kernels.

    Returns:
        ``(records, source, step_window)``: ``source`` is ``"device_kernel"`` or ``"cpu_op"`` (outermost CPU operators);
        ``step_window`` is the ``(start_us, end_us)`` span of the ``accelbench_step`` annotations
        (None if absent).
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    steps = [
        e
        for e in events
        if e.get("name", "").startswith("accelbench_step")
        and e.get("cat") in ("user_annotation", "cpu_op", "python_function")
    ]
    window = (min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)) if steps else None
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    source = "device_kernel"
    if not kernels:
        ops = [e for e in events if e.get("cat") == "cpu_op"]
        if window:
            ops = [e for e in ops if window[0] <= e["ts"] <= window[1]]
        kernels, source = _outermost_events(ops), "cpu_op"
    records = [KernelRecord(e["name"], float(e["ts"]), float(e.get("dur", 0.0))) for e in kernels]
    return records, source, window


def busy_union_us(records: Iterable[KernelRecord]) -> float:
    """Total time covered by at least one record (overlaps counted once), in microseconds."""
    total, cur_start, cur_end = 0.0, None, None
    for r in sorted(records, key=lambda r: r.start_us):
        end = r.start_us + r.dur_us
        if cur_end is None or r.start_us > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = r.start_us, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


@dataclass
class KernelSummary:
    """Reduced kernel trace for ``steps`` profiled steps. Times in microseconds per step."""

    source: str
    steps: int
    kernel_count: float
    distinct_kernels: int
    device_time_us: float
    span_us: float
    idle_fraction: float
    class_time_us: dict[str, float]
    class_share: dict[str, float]
    tensor_core_share: float
    layout_conversion_count: float
    cast_copy_count: float
    table: list[dict]

    def to_dict(self, top: int | None = 25) -> dict:
        d = asdict(self)
        d["table"] = self.table[:top] if top else self.table
        return d


def summarize_kernels(
    records: list[KernelRecord], source: str, steps: int = 1, window: tuple[float, float] | None = None
) -> KernelSummary:
    """Per-kernel table, class totals/shares, kernel count and device idle fraction.

    ``idle_fraction`` = 1 - (time with at least one kernel running) / span, where span is the first
    kernel start to the last kernel end (device kernels) or the step annotation window (CPU ops).
    Counts and times are divided by ``steps``. ``layout_conversion_count`` and ``cast_copy_count``
    are kernel launches per step of those two classes.
    """
    if not records:
        raise ValueError("the trace holds no kernels or operators")
    by_name: dict[str, dict] = {}
    for r in records:
        row = by_name.setdefault(r.name, {"name": r.name, "calls": 0, "device_time_us": 0.0})
        row["calls"] += 1
        row["device_time_us"] += r.dur_us
    total = sum(row["device_time_us"] for row in by_name.values())
    table = []
    for row in sorted(by_name.values(), key=lambda r: -r["device_time_us"]):
        table.append(
            {
                "name": row["name"],
                "class": classify_kernel(row["name"]),
                "tensor_core": is_tensor_core_kernel(row["name"]),
                "calls": row["calls"] / steps,
                "device_time_us": row["device_time_us"] / steps,
                "share": row["device_time_us"] / total if total else 0.0,
            }
        )
    if source == "device_kernel" or window is None:
        span = max(r.start_us + r.dur_us for r in records) - min(r.start_us for r in records)
    else:
        span = window[1] - window[0]
    busy = busy_union_us(records)
    return KernelSummary(
        source=source,
        steps=steps,
        kernel_count=len(records) / steps,
        distinct_kernels=len(table),
        device_time_us=total / steps,
        span_us=span / steps,
        idle_fraction=max(0.0, 1.0 - busy / span) if span > 0 else 0.0,
        **class_totals(table),
        table=table,
    )


def write_kernel_table(summary: KernelSummary, path: str | Path) -> None:
    """Write the full per-kernel table as CSV (name, class, tensor_core, calls, device_time_us, share) to ``path``,
    atomically and without following a link at it (:func:`accelbench.core.tree.open_write` in its folder).

    Raises:
        TreeError: ``path`` is a link or a hard-linked file (one line naming it); nothing is written.
    """
    import csv

    from accelbench.core import tree

    path = Path(path)
    with tree.open_write(path.parent, path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["name", "class", "tensor_core", "calls", "device_time_us", "share"])
        writer.writeheader()
        writer.writerows(summary.table)


def profile_steps(step: Callable[[], object], device: Device, steps: int, trace_path: str | Path) -> KernelSummary:
    """Capture ``steps`` calls of ``step`` with torch.profiler, export the trace, reduce it.

    Each step runs inside a ``record_function("accelbench_step")`` range followed by a device
    synchronize, so kernels of one step do not spill into the next.
    """
    import torch

    with torch.profiler.profile(activities=device.profiler_activities()) as prof:
        for _ in range(steps):
            with torch.profiler.record_function("accelbench_step"):
                step()
                device.synchronize()
    prof.export_chrome_trace(str(trace_path))
    records, source, window = kernel_records_from_trace(load_chrome_trace(trace_path))
    return summarize_kernels(records, source, steps=steps, window=window)
