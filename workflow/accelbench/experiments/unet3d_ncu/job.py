"""Study A at the hardware-counter level: Nsight Compute metrics of one training step per configuration.

For each Study A configuration, ``ncu`` replays the kernels of one training step of the Med-DDPM U-Net
(the same :class:`~accelbench.experiments.unet3d.workload.Workload`, after warm-up, inside the NVTX range
``accelbench_step``) with the clocks left alone (``--clock-control none``), and records raw per-kernel
counters (:mod:`accelbench.measure.ncu`) in two passes (see :func:`profile_counters`): a coverage pass with a reduced
metric set over every kernel of the step (SM-cycle and instruction totals as measured), and a detail pass with every
counter on the kernels that make up most of the step's device time in the torch.profiler kernel table of the same
configuration (``coverage``/``max_kernels``/``launch_count``). The result records the share of the step's device time
each pass covers.

Where ``ncu`` is missing, the system is not an NVIDIA GPU, or the counters cannot be read (e.g. a
virtualised GPU without profiling permission), the result is ``unsupported`` with the reason.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from accelbench import backends
from accelbench.core import files
from accelbench.core.launcher import accelbench_command
from accelbench.core.outcome import Outcome
from accelbench.errors import DataError
from accelbench.experiments.unet3d.configs import VARIANTS
from accelbench.experiments.unet3d.settings import unsupported_reason
from accelbench.measure import ncu
from accelbench.measure.kernel_classes import MAX_KERNEL_TABLE_BYTES, classify_kernel

EXPERIMENT = "unet3d_ncu"


def _table_rows(kernel_table: str | Path) -> list[dict]:
    """The rows of a ``kernels.csv`` as text (:func:`accelbench.core.files.read_csv`: a plain file of bounded size,
    one line naming it otherwise)."""
    return files.read_csv(kernel_table, "kernel table", MAX_KERNEL_TABLE_BYTES, DataError)


def select_kernels(kernel_table: str | Path, coverage: float, max_kernels: int) -> tuple[list[str], float]:
    """Function base names of the top kernels (by device time) of a torch.profiler kernel table
    (``kernels.csv``) until ``coverage`` of the device time or ``max_kernels`` names; and the share covered."""
    rows = sorted(_table_rows(kernel_table), key=lambda r: -float(r["device_time_us"]))
    total = sum(float(r["device_time_us"]) for r in rows) or 1.0
    names: dict[str, None] = {}
    covered = 0.0
    for r in rows:
        if covered / total >= coverage or len(names) >= max_kernels:
            break
        if r["class"] == "memory":  # memcpy/memset are not kernels ncu replays
            continue
        names[ncu.kernel_base_name(r["name"])] = None
        covered += float(r["device_time_us"])
    # every kernel sharing a selected base name is replayed: recount the covered share by base name
    share = sum(float(r["device_time_us"]) for r in rows if ncu.kernel_base_name(r["name"]) in names) / total
    return list(names), share


@dataclass(frozen=True)
class NcuSettings:
    """How ncu profiles the step (config ``unet3d_ncu`` without its ``configurations``; the schema's defaults filled
    in). The detail pass replays the top kernels covering ``coverage`` of the step's device time, at most
    ``max_kernels`` names and ``launch_count`` launches; the step runs ``warmup`` untimed steps first; everything
    gives up after ``timeout_s`` (s). The coverage pass (``coverage_pass``) goes over every kernel (at most
    ``coverage_launch_count`` launches, None = all), split into passes of ``coverage_pass_launches`` launches (None:
    one pass), each with at most ``coverage_pass_timeout_s`` (s; None: what is left of its budget)."""

    coverage: float
    max_kernels: int
    launch_count: int
    warmup: int
    timeout_s: int
    coverage_pass: bool = True
    coverage_launch_count: int | None = None
    coverage_pass_launches: int | None = None
    coverage_pass_timeout_s: int | None = None


def profile_counters(
    spec: dict,
    system,
    image: str,
    mask: str,
    kernel_table: str | None,
    s: NcuSettings,
    spec_file: str | None = None,
) -> dict:
    """Profile one configuration under ncu, as ``s`` says. Returns ``{"status", "reason", "measurements"}``.

    Two passes over the same step (each a fresh process: ``unet3d-step`` under ncu):

    1. **coverage pass** (``s.coverage_pass``): the reduced metric set :data:`accelbench.measure.ncu.COVERAGE_COUNTERS`
       (SM cycles, executed instructions, duration, IPC, tensor-pipe utilisation; a few replay passes per kernel)
       over *every* kernel launched
       in the NVTX range (at most ``s.coverage_launch_count``, None = all). Step totals of SM cycles and
       instructions, the two rates, and so the ratios to baseline, are then measured over the whole step, not
       extrapolated. With ``s.coverage_pass_launches`` the pass is split into bounded passes of that many launches
       (``--launch-skip``/``--launch-count``, :func:`accelbench.measure.ncu.plan_coverage_passes`), each a fresh process
       with at most ``s.coverage_pass_timeout_s``; their kernels are joined in launch order, and each pass's
       launches, kernels, wall time and error are recorded (``coverage.coverage.passes``). A failed pass leaves
       the others: the share of the step's device time they cover says what the totals and rates hold.
    2. **detail pass**: every counter of :data:`accelbench.measure.ncu.COUNTERS` (stalls, hit rates, pipes: many
       replay passes) on the top kernels only (``s.coverage``/``s.max_kernels``/``s.launch_count``).

    ``measurements["coverage"]`` gives the share of the step's device time (torch.profiler's kernel table)
    each pass covers; the target for the counter table is at least 80%.

    Args:
        spec: the ``unet3d-step`` spec (system, model, configuration, presets, scales, run.seed).
        kernel_table: the configuration's ``kernels.csv`` from ``unet3d_profile`` (None: it did not run).
        s: the ncu settings (:class:`NcuSettings`, config ``unet3d_ncu``).
        spec_file: the job's spec file, passed to the replayed ``unet3d-step`` (None: ``spec`` inline, for tests).
    """
    reason = known_unsupported_reason(spec, system, kernel_table)
    if reason:
        return _unsupported(reason)
    exe = ncu.ncu_path()
    import torch

    cc = "{}.{}".format(*torch.cuda.get_device_capability(0))
    arch = ncu.architecture(cc)
    try:
        available = ncu.query_metrics(exe)
    except (OSError, subprocess.SubprocessError) as exc:
        return _unsupported(f"ncu --query-metrics failed: {exc}")
    metrics = ncu.choose_metrics(arch, available)
    names, share = select_kernels(kernel_table, s.coverage, s.max_kernels)
    program = accelbench_command(
        ["unet3d-step", "--spec", spec_file or json.dumps(spec), "--image", image, "--mask", mask]
        + ["--warmup", str(s.warmup)]
    )
    table_rows = _table_rows(kernel_table)
    commands: dict[str, str] = {}
    t_start = time.monotonic()
    coverage = _coverage_passes(exe, metrics, program, table_rows, s, t_start, commands) if s.coverage_pass else None
    left = int(s.timeout_s - (time.monotonic() - t_start))
    cmd, detail, err = _ncu_pass(exe, metrics, program, names, s.launch_count, max(left, 1))
    commands["detail"] = " ".join(cmd[: cmd.index("--")])
    if err:
        return _unsupported(f"detail pass: {err}" if s.coverage_pass else err)
    reduced = ncu.reduce(detail, classify_kernel)
    cov = _coverage_record(table_rows, detail, share, metrics, coverage)
    every_kernel = coverage.kernels if coverage is not None else None  # the coverage passes' kernels, joined
    if every_kernel is not None:
        reduced = ncu.merge_coverage(reduced, every_kernel, classify_kernel)
    return {
        "status": "ok",
        "reason": None,
        "measurements": {
            "architecture": arch,
            "compute_capability": cc,
            "ncu_version": ncu.ncu_version(exe),
            "metrics": metrics,
            "command": commands["detail"],
            "commands": commands,
            "kernel_selection": {
                "function_names": names,
                "device_time_share": share,
                "coverage_target": s.coverage,
                "max_kernels": s.max_kernels,
                "launch_count": s.launch_count,
            },
            "coverage": cov,
            "wall_s": time.monotonic() - t_start,
            "profiled_kernels": len(every_kernel if every_kernel is not None else detail),
            "detail_kernels": len(detail),
            **reduced,
            "per_kernel": [{"name": k.name, **k.values} for k in detail[:2000]],
        },
    }


@dataclass(frozen=True)
class _Coverage:
    """What the coverage passes gave: their kernels joined in launch order (None: no pass measured any), each pass's
    record and the failed passes' errors joined in one line (None: none failed)."""

    kernels: list | None
    passes: list[dict]
    error: str | None


def _coverage_passes(exe, metrics, program, table_rows, s: NcuSettings, t_start: float, commands: dict) -> _Coverage:
    """Run the coverage passes (reduced metric set, every kernel of the step) within 60% of ``s.timeout_s`` from
    ``t_start``; the first pass's command goes into ``commands["coverage"]``."""
    cov_metrics = {c: metrics[c] for c in ncu.COVERAGE_COUNTERS if c in metrics}
    launches = sum(int(float(r["calls"])) for r in table_rows if r.get("class") != "memory")
    plan = ncu.plan_coverage_passes(launches, s.coverage_pass_launches)
    budget = 0.6 * s.timeout_s  # the coverage passes get at most 60% of the time; the detail pass the rest
    done: list[int | None] = []
    got: list[list] = []
    pass_log: list[dict] = []
    while (p := ncu.next_pass(plan, done)) is not None:
        left = int(budget - (time.monotonic() - t_start))
        if left < 1:
            pass_log.append(
                {
                    "index": p.index,
                    "launch_skip": p.launch_skip,
                    "launch_count": p.launch_count,
                    "kernels": None,
                    "error": f"not run: the coverage passes' {int(budget)} s were spent",
                }
            )
            break
        limit = min(left, s.coverage_pass_timeout_s) if s.coverage_pass_timeout_s else left
        count = p.launch_count if p.launch_count is not None else s.coverage_launch_count
        t0 = time.monotonic()
        cmd, kernels, err = _ncu_pass(exe, cov_metrics, program, None, count, limit, launch_skip=p.launch_skip)
        commands.setdefault("coverage", " ".join(cmd[: cmd.index("--")]))
        pass_log.append(
            {
                "index": p.index,
                "launch_skip": p.launch_skip,
                "launch_count": count,
                "kernels": len(kernels) if kernels else None,
                "error": err,
                "wall_s": time.monotonic() - t0,
            }
        )
        done.append(len(kernels) if kernels else None)
        if kernels:
            got.append(kernels)
    # e.g. out of time: the detail pass goes on; the totals then cover what the passes measured
    failed = [f"pass {e['index']}: {e['error']}" for e in pass_log if e["error"]]
    return _Coverage(ncu.merge_passes(got) if got else None, pass_log, "; ".join(failed) if failed else None)


def _coverage_record(table_rows, detail, share: float, metrics, coverage: _Coverage | None) -> dict:
    """``measurements["coverage"]``: the share of the step's device time each pass covers, where the totals come
    from and whether they meet the 80% target."""
    cov = {
        "target": 0.8,
        "detail": {
            **ncu.time_coverage(table_rows, detail),
            "pass": "detail",
            "metrics": "all counters",
            "kernel_selection_share": share,
        },
    }
    errors = coverage.error if coverage is not None else None
    covered = coverage is not None and coverage.kernels is not None
    if errors:
        cov["coverage_error"] = errors
    if covered:
        cov["coverage"] = {
            **ncu.time_coverage(table_rows, coverage.kernels),
            "pass": "coverage",
            "metrics": sorted(c for c in ncu.COVERAGE_COUNTERS if c in metrics),
            "passes": coverage.passes,
        }
    main = cov["coverage"] if covered else cov["detail"]
    cov["totals_from"] = (
        (
            "coverage passes, some failed (coverage_error): the kernels the others measured, reduced metric set"
            if errors
            else "coverage pass: every kernel of the step, reduced metric set"
        )
        if covered
        else "detail pass: the top kernels only (totals are partial)"
    )
    cov["device_time_share"] = main["device_time_share"]
    cov["meets_target"] = main["device_time_share"] is not None and main["device_time_share"] >= cov["target"]
    return cov


def _ncu_pass(
    exe: str,
    metrics: dict[str, str],
    program: list[str],
    kernel_names: list[str] | None,
    launch_count: int | None,
    timeout_s: int,
    launch_skip: int = 0,
) -> tuple[list[str], list | None, str | None]:
    """One ncu run of ``program``: ``(command, parsed kernels, None)`` or ``(command, None, reason)``."""
    with tempfile.TemporaryDirectory() as tmp:
        log_file = str(Path(tmp) / "ncu.csv")
        cmd = ncu.command(
            exe,
            sorted(set(metrics.values())),
            program,
            log_file,
            kernel_names=kernel_names,
            launch_count=launch_count,
            launch_skip=launch_skip,
        )
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return cmd, None, f"ncu did not finish within {timeout_s} s (lower coverage/launch_count)"
        text = Path(log_file).read_text() if Path(log_file).exists() else proc.stdout
    tail = (proc.stdout + proc.stderr)[-1500:]
    if "ERR_NVGPUCTRPERM" in tail or "LibraryNotLoaded" in tail or "Failed to initialize the profiler" in tail:
        return cmd, None, f"ncu cannot read the GPU's performance counters here: {tail.strip().splitlines()[-1]}"
    if proc.returncode != 0:
        return cmd, None, f"ncu exited with status {proc.returncode}: {tail.strip()[-500:]}"
    try:
        kernels = ncu.parse_csv(text, metrics)
    except ValueError as exc:
        return cmd, None, f"no kernel was profiled ({exc}); ncu said: {tail.strip()[-300:]}"
    if not kernels:
        return cmd, None, f"ncu profiled no kernel in the NVTX range; ncu said: {tail.strip()[-300:]}"
    return cmd, kernels, None


def known_unsupported_reason(spec: dict, system, kernel_table: str | None) -> str | None:
    """Why this configuration cannot be profiled here, known before touching the device (None: try it): no NVIDIA
    backend, a precision the system lacks, no kernel table from unet3d_profile, no ``ncu`` on PATH."""
    if not backends.get(system.backend).nsight_compute:
        return f"Nsight Compute profiles NVIDIA GPUs; system {system.name!r} has backend {system.backend!r}"
    reason = unsupported_reason(VARIANTS[spec["configuration"]], system)
    if reason:
        return reason
    if kernel_table is None or not Path(kernel_table).exists():
        return "the configuration has no torch.profiler kernel table (its unet3d_profile result is not ok)"
    if ncu.ncu_path() is None:
        return "ncu (Nsight Compute) not found on PATH"
    return None


def _unsupported(reason: str) -> dict:
    return {"status": "unsupported", "reason": reason, "measurements": {}}


# --------------------------------------------------------------------------- the job (accelbench.core.harness)
class Settings(dict):
    """One unet3d_ncu job: unet3d_profile's spec plus ``ncu`` (coverage, max_kernels, launch_count, warmup,
    timeout_s, ...: config ``unet3d_ncu``)."""

    @classmethod
    def from_spec(cls, spec: dict, system) -> Settings:
        return cls(spec)


def _kernel_table(ctx) -> str | None:
    table = Path(ctx.inputs["profile_result"]).with_name("kernels.csv")
    return str(table) if table.exists() else None


# cost model of a job (accelbench.core.estimate): Nsight Compute replays each selected kernel once per pass,
# hundreds of times a training step; not fitted (no GPU in the reference runs): a rough figure per job
COST = {"ncu_s": 900.0}


def estimate_s(spec: dict) -> float:
    """Wall seconds of the job: start-up alone where it is known to write ``unsupported`` (any CPU, no ``ncu``),
    else a rough :data:`COST` (a GPU run is not fitted here)."""
    from accelbench.core.estimate import STARTUP_S
    from accelbench.core.harness import system_from

    system = system_from(spec)
    reason = known_unsupported_reason(spec, system, __file__)  # the kernel table is made by an earlier job
    return STARTUP_S if reason else COST["ncu_s"]


def unsupported_outcome(spec: Settings, ctx) -> Outcome | None:
    """The job's ``unsupported`` outcome when it is known without measuring (:func:`known_unsupported_reason`):
    the harness then writes it without taking the machine-wide device lock."""
    reason = known_unsupported_reason(dict(spec), ctx.system, _kernel_table(ctx))
    if reason is None:
        return None
    ctx.artefacts["profile_result"] = str(ctx.inputs["profile_result"])
    return Outcome("unsupported", {}, reason)


def run(spec: Settings, ctx) -> Outcome:
    """Counters of the configuration's step (:func:`profile_counters`), selected from the kernel table beside
    ``ctx.inputs["profile_result"]``."""

    profile = Path(ctx.inputs["profile_result"])
    out = profile_counters(
        dict(spec),
        ctx.system,
        ctx.inputs["image"],
        ctx.inputs["mask"],
        _kernel_table(ctx),
        NcuSettings(**spec["ncu"]),
        spec_file=ctx.spec_path,
    )
    ctx.artefacts["profile_result"] = str(profile)
    return Outcome(out["status"], out["measurements"], out["reason"])
