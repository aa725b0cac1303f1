"""Nsight Compute (``ncu``) hardware counters: metric choice per GPU architecture, command line, CSV parsing
and reduction. Used by :mod:`accelbench.experiments.unet3d.ncu` (Study A's counter-level analysis).

Study A (arXiv 2606.19365) compares SM cycles, executed instructions, IPC, tensor-pipe utilisation, DRAM
throughput, L1/L2 hit rates and warp-stall reasons across configurations and GPU generations. Metric names
differ between Volta, Ampere and Hopper; :func:`choose_metrics` picks, per counter, the first candidate that
the installed ``ncu`` offers for the device (``ncu --query-metrics``), and records which were used.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from dataclasses import dataclass

# counter -> candidate metric names, most specific first. "sum"-type counters add over kernels; the others are
# averaged over kernels weighted by each kernel's SM cycles.
COUNTERS: dict[str, dict] = {
    "sm_cycles": {"agg": "sum", "candidates": {"all": ["sm__cycles_elapsed.max"]}},
    "instructions": {"agg": "sum", "candidates": {"all": ["smsp__inst_executed.sum"]}},
    "ipc": {"agg": "weighted", "candidates": {"all": ["sm__inst_executed.avg.per_cycle_active"]}},
    "tensor_pipe_pct": {
        "agg": "weighted",
        "candidates": {
            "hopper": [
                "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            ],
            "ampere": ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"],
            "volta": ["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"],
        },
    },
    "tensor_pipe_hmma_pct": {
        "agg": "weighted",
        "candidates": {"hopper": ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]},
    },
    "dram_throughput_pct": {
        "agg": "weighted",
        "candidates": {
            "all": [
                "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
            ]
        },
    },
    "dram_bytes": {"agg": "sum", "candidates": {"all": ["dram__bytes.sum"]}},
    "l1_hit_pct": {"agg": "weighted", "candidates": {"all": ["l1tex__t_sector_hit_rate.pct"]}},
    "l2_hit_pct": {"agg": "weighted", "candidates": {"all": ["lts__t_sector_hit_rate.pct"]}},
    "duration_ns": {"agg": "sum", "candidates": {"all": ["gpu__time_duration.sum"]}},
}
STALL_REASONS = [
    "long_scoreboard",
    "short_scoreboard",
    "barrier",
    "math_pipe_throttle",
    "mio_throttle",
    "lg_throttle",
    "wait",
    "not_selected",
    "selected",
    "no_instruction",
    "dispatch_stall",
    "membar",
    "tex_throttle",
    "drain",
    "sleeping",
    "branch_resolving",
    "imc_miss",
    "misc",
]
for _r in STALL_REASONS:
    COUNTERS[f"stall_{_r}"] = {
        "agg": "weighted",
        "candidates": {"all": [f"smsp__average_warps_issue_stalled_{_r}_per_issue_active.ratio"]},
    }


# The reduced metric set of the coverage pass (a few replay passes per kernel): the step totals of SM cycles and
# executed instructions, the device time each kernel took, and the two rates Study A's claims compare (IPC and the
# tensor-pipe utilisation), over every kernel of the NVTX range.
COVERAGE_COUNTERS = ("sm_cycles", "instructions", "duration_ns", "ipc", "tensor_pipe_pct")


def architecture(compute_capability: str) -> str:
    """``volta`` (7.x), ``ampere`` (8.x, Ada included) or ``hopper`` (9.x and newer) from e.g. ``"9.0"``."""
    major = int(str(compute_capability).split(".")[0])
    return "volta" if major <= 7 else "ampere" if major == 8 else "hopper"


def base_name(metric: str) -> str:
    """``sm__cycles_elapsed.max`` -> ``sm__cycles_elapsed`` (what ``--query-metrics`` lists)."""
    return metric.split(".", 1)[0]


def choose_metrics(arch: str, available: set[str] | None) -> dict[str, str]:
    """Per counter, the first candidate for ``arch`` whose base name is in ``available`` (all candidates'
    first entries when ``available`` is None). Counters with no available metric are left out."""
    chosen = {}
    for counter, spec in COUNTERS.items():
        cands = spec["candidates"].get(arch, []) + spec["candidates"].get("all", [])
        for m in cands:
            if available is None or base_name(m) in available:
                chosen[counter] = m
                break
    return chosen


def ncu_path() -> str | None:
    return shutil.which("ncu")


def query_metrics(ncu: str, timeout: int = 120) -> set[str]:
    """Base metric names the installed ``ncu`` offers for device 0 (``ncu --query-metrics``)."""
    out = subprocess.run(
        [ncu, "--query-metrics", "--devices", "0"], capture_output=True, text=True, timeout=timeout, check=True
    ).stdout
    return {line.split()[0] for line in out.splitlines() if re.match(r"^[a-z0-9_]+__\w+", line.strip())}


def ncu_version(ncu: str) -> str | None:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[-1] if out.strip() else None


def kernel_base_name(name: str) -> str:
    """The function's own name from a demangled kernel name, as ncu's ``--kernel-name-base function`` sees it:
    ``void at::native::(anon)::RowwiseMomentsCUDAKernel<float>(long, ...)`` -> ``RowwiseMomentsCUDAKernel``."""
    s = re.sub(r"^void\s+", "", name.strip()).replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # strip the parameter list and template arguments
        if ch in "<(":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif ch in ">)":
            depth -= 1
    s = s[:cut]
    return s.split("::")[-1].strip()


def command(
    ncu: str,
    metrics: list[str],
    program: list[str],
    log_file: str,
    *,
    nvtx_range: str = "accelbench_step",
    kernel_names: list[str] | None = None,
    launch_count: int | None = None,
    launch_skip: int = 0,
) -> list[str]:
    """The ``ncu`` command line: only kernels launched inside the NVTX range ``nvtx_range`` (the measured
    step), clocks left as they are (``--clock-control none``), raw per-kernel metrics as CSV into ``log_file``.
    ``kernel_names`` (function base names) and ``launch_count`` bound the replay time.

    The range may be a process-wide start/end range (``nvtx_range``, what ``unet3d-step`` emits, so kernels
    launched from autograd's backward thread count) or a thread-local push/pop range (``nvtx_range/``); both
    filters are given, and ncu profiles a kernel inside either. ``launch_skip`` skips that many of the kernels
    matching the filters (the NVTX range included) before profiling starts: one bounded pass of
    :func:`plan_coverage_passes`."""
    cmd = [
        ncu,
        "--nvtx",
        "--nvtx-include",
        nvtx_range,
        "--nvtx-include",
        f"{nvtx_range}/",
        "--clock-control",
        "none",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--metrics",
        ",".join(metrics),
        "--log-file",
        log_file,
    ]
    if kernel_names:
        names = "|".join(sorted({re.escape(n) for n in kernel_names if n}))
        cmd += ["--kernel-name-base", "function", "--kernel-name", f"regex:^({names})$"]
    if launch_skip:
        cmd += ["--launch-skip", str(int(launch_skip))]
    if launch_count:
        cmd += ["--launch-count", str(launch_count)]
    return cmd + ["--"] + program


@dataclass(frozen=True)
class PassPlan:
    """One bounded coverage pass: ncu profiles ``launch_count`` kernels (None: all) after skipping ``launch_skip``."""

    index: int
    launch_skip: int
    launch_count: int | None


def plan_coverage_passes(launches_in_step: int, per_pass: int | None) -> list[PassPlan]:
    """Split the coverage pass over the ``launches_in_step`` kernel launches of the step (torch.profiler's count of the
    same configuration) into passes of at most ``per_pass`` launches each, so that each pass (a fresh process: set-up,
    warm-up and the replay of its kernels) stays within a time limit. ``per_pass`` None (or not smaller than the
    step) gives one pass over every kernel. ncu may count a few more launches than the profiler: the caller runs
    further passes while the last one came back full (:func:`next_pass`).

    Raises:
        ValueError: ``per_pass`` below 1.
    """
    if per_pass is not None and per_pass < 1:
        raise ValueError(f"unet3d_ncu.coverage_pass_launches: {per_pass!r} must be at least 1 (or null: one pass)")
    if not per_pass or per_pass >= launches_in_step:
        return [PassPlan(0, 0, None)]
    n = -(-int(launches_in_step) // per_pass)
    return [PassPlan(i, i * per_pass, per_pass) for i in range(n)]


def next_pass(plan: list[PassPlan], done: list[int | None]) -> PassPlan | None:
    """The pass to run after ``done`` (kernels each finished pass returned; None = the pass failed): the next planned
    one; past the plan, one more while the last pass came back full (the range holds more launches than the profiler
    counted); None when the range is exhausted (a pass came back short) or the plan is done."""
    if not done:
        return plan[0]
    last, per = done[-1], plan[-1].launch_count
    if per is None:
        return None
    if last is not None and last < per:  # the range ended inside this pass
        return None
    i = len(done)
    if i < len(plan):
        return plan[i]
    return PassPlan(i, i * per, per) if last == per else None


def merge_passes(passes: list[list[KernelCounters]]) -> list[KernelCounters]:
    """The kernels of consecutive bounded passes, in launch order (pass by pass)."""
    return [k for kernels in passes for k in kernels]


@dataclass
class KernelCounters:
    name: str
    values: dict[str, float]


def parse_csv(text: str, metrics: dict[str, str]) -> list[KernelCounters]:
    """Parse ``ncu --csv --page raw --print-units base`` output (one row per profiled kernel, a units row
    after the header). ``metrics`` maps counter -> metric name. Lines before the header (ncu's own
    ``==PROF==`` messages) are skipped.

    Raises:
        ValueError: no CSV header with a ``Kernel Name`` column.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or '"Kernel Name"' in line), None)
    if start is None:
        raise ValueError('no ncu CSV header ("Kernel Name" column) in the output')
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    body = [r for r in rows[1:] if len(r) == len(header)]
    if body and not body[0][header.index("ID")].strip().isdigit():
        body = body[1:]  # units row
    out = []
    for r in body:
        rec = dict(zip(header, r))
        vals = {}
        for counter, metric in metrics.items():
            raw = rec.get(metric, "").replace(",", "").strip()
            try:
                vals[counter] = float(raw)
            except ValueError:
                continue  # n/a for this kernel
        out.append(KernelCounters(rec["Kernel Name"], vals))
    return out


def reduce(kernels: list[KernelCounters], classify) -> dict:
    """Totals (sum counters) and SM-cycle-weighted means (rates, percentages) over all kernels and per
    kernel class (``classify(name) -> class``).

    ``ipc`` is the mean of the per-kernel IPC that ncu reports (``sm__inst_executed.avg.per_cycle_active``,
    instructions per active cycle of one SM), weighted by each kernel's ``sm_cycles``
    (``sm__cycles_elapsed.max``): sum(ipc_k x cycles_k) / sum(cycles_k). It equals instructions / cycles
    of the whole set only when every kernel keeps its SMs active for all of its elapsed cycles; it is not
    recomputed from ``instructions`` (which counts all SMs) and ``sm_cycles`` (one SM). Kernels without
    ``sm_cycles`` get weight 0; when no kernel has a weight, rates are plain means.
    """

    def agg(ks: list[KernelCounters]) -> dict:
        res: dict = {"kernels": len(ks)}
        w = [k.values.get("sm_cycles", 0.0) for k in ks]
        for counter, spec in COUNTERS.items():
            pairs = [(k.values[counter], wi) for k, wi in zip(ks, w) if counter in k.values]
            if not pairs:
                continue
            if spec["agg"] == "sum":
                res[counter] = sum(v for v, _ in pairs)
            else:
                tw = sum(wi for _, wi in pairs)
                res[counter] = sum(v * wi for v, wi in pairs) / tw if tw else sum(v for v, _ in pairs) / len(pairs)
        return res

    classes: dict[str, list[KernelCounters]] = {}
    for k in kernels:
        classes.setdefault(classify(k.name), []).append(k)
    total = agg(kernels)
    stalls = {c[len("stall_") :]: v for c, v in total.items() if c.startswith("stall_")}
    total["top_stalls"] = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
    return {"total": total, "by_class": {c: agg(ks) for c, ks in sorted(classes.items())}}


def merge_coverage(detail: dict, coverage_kernels: list[KernelCounters], classify) -> dict:
    """Merge a coverage pass (:data:`COVERAGE_COUNTERS` over every kernel of the range) into the reduction of a
    bounded detail pass (all metrics, top kernels only): every counter the coverage pass measured (the sums: SM
    cycles, instructions, device time; and the rates it carries: IPC, tensor-pipe utilisation, SM-cycle-weighted
    over every kernel) comes from the coverage pass, as measured, for the total and for every kernel class; they
    are listed in ``coverage_counters``. The other rates and percentages (hit rates, DRAM, stalls) stay the detail
    pass's SM-cycle-weighted means over its kernels, whose share of the coverage pass's device time is recorded as
    ``rates_time_share``.

    Returns the merged ``{"total", "by_class"}``; ``kernels`` = coverage-pass kernels, ``rate_kernels`` = detail ones.
    """
    cov = reduce(coverage_kernels, classify)
    measured = [c for c in COVERAGE_COUNTERS if any(c in k.values for k in coverage_kernels)]

    def merged(d: dict | None, c: dict | None) -> dict:
        out = {k: v for k, v in (d or {}).items() if k not in measured and k != "kernels"}
        out["kernels"] = (c or {}).get("kernels", 0)
        out["rate_kernels"] = (d or {}).get("kernels", 0)
        out["coverage_counters"] = [k for k in measured if c and k in c]
        for k in measured:
            if c and k in c:
                out[k] = c[k]
        if d and c and d.get("duration_ns") and c.get("duration_ns"):
            out["rates_time_share"] = d["duration_ns"] / c["duration_ns"]
        return out

    classes = sorted(set(detail["by_class"]) | set(cov["by_class"]))
    return {
        "total": merged(detail["total"], cov["total"]),
        "by_class": {k: merged(detail["by_class"].get(k), cov["by_class"].get(k)) for k in classes},
    }


def time_coverage(kernel_table_rows: list[dict], kernels: list[KernelCounters]) -> dict:
    """Share of the step's device time (torch.profiler kernel table of the same configuration, per step) that the
    ncu-profiled ``kernels`` account for: per kernel function base name, the profiler's device time times
    min(1, launches profiled / launches per step). Memory copies/sets (not kernels) are left out of both sides.

    Returns ``{"device_time_share", "kernels_profiled", "kernels_in_step"}``.
    """
    prof: dict[str, list[float]] = {}
    for r in kernel_table_rows:
        if r.get("class") == "memory":
            continue
        e = prof.setdefault(kernel_base_name(r["name"]), [0.0, 0.0])
        e[0] += float(r["calls"])
        e[1] += float(r["device_time_us"])
    seen: dict[str, int] = {}
    for k in kernels:
        b = kernel_base_name(k.name)
        seen[b] = seen.get(b, 0) + 1
    total = sum(t for _, t in prof.values())
    covered = sum(t * min(1.0, seen.get(b, 0) / calls) for b, (calls, t) in prof.items() if calls)
    return {
        "device_time_share": covered / total if total else None,
        "kernels_profiled": len(kernels),
        "kernels_in_step": sum(c for c, _ in prof.values()),
    }
