"""Host load around a measurement, and the ``noisy`` flag of a result.

A timing taken while other processes compete for the cores (or for the GPU) is not the number the code would give
on a quiet machine: the same LoRA step measured 647 ms on a quiet 2-core host and 26,516 ms under background load.
Every measurement job therefore records what else ran while it ran, and flags itself:

* :func:`snapshot` (psutil, and the backends' device load: NVML through ``pynvml``/``nvidia-ml-py`` when present,
  :mod:`accelbench.backends.cuda`): load average, system-wide busy CPU time, the CPU time of this job's process tree
  (the process that started the job and every descendant, torchrun ranks included), and per GPU the job may use
  (``CUDA_VISIBLE_DEVICES``) the other processes on it and its SM clock against its maximum.
* :func:`host_load` turns a start and an end snapshot into ``cpu_other_fraction``: the share of all cores' time used
  by processes outside the job's tree (0 = quiet, 1 = every core busy with something else).
* :func:`assess` adds the spread of the job's timings (p90 / median, the largest over the result's timings) and
  compares both with the thresholds of the config (``noise:``; defaults: ``config/config.schema.yaml``); verdict:
  ``measurements.noise.noisy`` with the reasons in ``measurements.noise.why``. The GPU clocks DURING the timed steps
  (``measurements.clocks``, :mod:`accelbench.measure.clocks`; the snapshots' ``sm_clock_mhz`` is taken after the work,
  at idle) add a reason where their median is below ``clock_ratio_min`` x the maximum SM clock or a power/thermal
  clock-event reason was active in more than ``clock_reason_fraction_max`` of the samples.

The start snapshot is taken once per job by the first ``accelbench`` process (the job harness, which also writes the
result) and handed to its children (torchrun ranks) in the environment variable ``ACCELBENCH_LOAD_START``, so that
any process of the job that assesses the load measures the whole job.
"""

from __future__ import annotations

import json
import os
import time

from accelbench.measure import clocks

START_ENV = "ACCELBENCH_LOAD_START"
# Defaults of config `noise:` (config/config.schema.yaml documents them).
DEFAULT_THRESHOLDS = {
    "cpu_other_max": 0.10,
    "spread_max": 1.5,
    "gpu_other_processes_max": 0,
    "clock_ratio_min": 0.9,
    "clock_reason_fraction_max": 0.5,
}


def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and all its descendants, reaped children included."""
    import psutil

    try:
        proc = psutil.Process(root)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
        if p.pid == root:  # finished children already waited for (earlier torchrun ranks, subprocesses)
            total += getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    return total


def _device_load(root: int) -> list[dict] | None:
    """Per device the job may use, what else runs on it, as the first backend that can tell reports it
    (:meth:`accelbench.backends.base.Backend.device_load`; NVIDIA through NVML: other processes, SM clock / max SM
    clock); None where none can (no NVML)."""
    import psutil

    from accelbench import backends

    try:
        ours = {root, *(p.pid for p in psutil.Process(root).children(recursive=True))}
    except psutil.Error:
        ours = {root}
    for backend in backends.all_backends():
        found = backend.device_load(ours)
        if found is not None:
            return found
    return None


def snapshot(root: int | None = None) -> dict:
    """The host's state now: ``time`` (s, monotonic wall clock), ``loadavg`` (1/5/15 min), ``cpus``,
    ``busy_s`` (system-wide busy CPU seconds since boot), ``tree_cpu_s`` (CPU seconds of the job's process tree),
    ``gpus`` (see :func:`_device_load`; None without NVML)."""
    import psutil

    root = root or os.getpid()
    t = psutil.cpu_times()
    busy = (
        t.user
        + t.system
        + getattr(t, "nice", 0.0)
        + getattr(t, "irq", 0.0)
        + getattr(t, "softirq", 0.0)
        + getattr(t, "steal", 0.0)
    )
    return {
        "time": time.time(),
        "root": root,
        "loadavg": list(os.getloadavg()),
        "cpus": psutil.cpu_count(),
        "busy_s": busy,
        "tree_cpu_s": _tree_cpu_seconds(root),
        "gpus": _device_load(root),
    }


def _is_ancestor(pid) -> bool:
    """Whether ``pid`` is this process or one of its ancestors."""
    import psutil

    if not isinstance(pid, int):
        return False
    me = psutil.Process()
    return pid == me.pid or any(p.pid == pid for p in me.parents())


def start_job() -> dict:
    """Take the job's start snapshot once (the first accelbench process of a job) and hand it to children."""
    if os.environ.get(START_ENV):
        try:
            inherited = json.loads(os.environ[START_ENV])
            if _is_ancestor(inherited.get("root")):  # a snapshot of this job, not a stale one from elsewhere
                return inherited
        except (json.JSONDecodeError, AttributeError):
            pass
    snap = snapshot()
    os.environ[START_ENV] = json.dumps(snap)
    return snap


def host_load(start: dict, end: dict) -> dict:
    """What else ran between two snapshots. Fractions are of all cores' time over the interval.

    Returns ``wall_s``, ``loadavg_start``/``loadavg_end`` (1, 5, 15 min), ``loadavg_1min_per_core`` (the larger
    of start and end, divided by the cores), ``cpu_busy_fraction`` (everything), ``cpu_job_fraction`` (this job's
    process tree), ``cpu_other_fraction`` (the rest, >= 0), ``gpus`` (end snapshot, with ``other_processes``
    and ``sm_clock_mhz``/``sm_clock_max_mhz``) and ``method``.
    """
    wall = max(end["time"] - start["time"], 1e-9)
    cpus = end.get("cpus") or 1
    busy = (end["busy_s"] - start["busy_s"]) / (wall * cpus)
    job = (end["tree_cpu_s"] - start["tree_cpu_s"]) / (wall * cpus)
    return {
        "wall_s": wall,
        "cpus": cpus,
        "loadavg_start": start["loadavg"],
        "loadavg_end": end["loadavg"],
        "loadavg_1min_per_core": max(start["loadavg"][0], end["loadavg"][0]) / cpus,
        "cpu_busy_fraction": min(max(busy, 0.0), 1.0),
        "cpu_job_fraction": min(max(job, 0.0), 1.0),
        "cpu_other_fraction": min(max(busy - job, 0.0), 1.0),
        "gpus": end.get("gpus"),
        "method": "psutil: system busy CPU time minus the job's process tree, over the job's wall time"
        + ("; NVML per GPU" if end.get("gpus") is not None else "; no NVML"),
    }


def _timings(obj, path: str = ""):
    """Every timing summary (a dict with ``median``, ``p90`` and ``samples``) inside ``measurements``."""
    if isinstance(obj, dict):
        if {"median", "p90", "samples"} <= set(obj) and obj.get("median"):
            yield path or "timing", obj
        for k, v in obj.items():
            if isinstance(v, (dict, list)):
                yield from _timings(v, f"{path}.{k}" if path else str(k))


def assess(measurements: dict, load: dict | None, thresholds: dict | None = None) -> dict:
    """The ``noise`` block of a result: host load, the largest timing spread (p90/median) and the verdict.

    Args:
        measurements: the result's measurements (timing summaries are found inside, see :class:`measure.Timing`).
        load: :func:`host_load` over the job, or None where it could not be taken.
        thresholds: ``cpu_other_max`` (fraction of all cores used by other processes), ``spread_max`` (p90 / median),
            ``gpu_other_processes_max`` (processes of others on a GPU), ``clock_ratio_min`` (median SM clock over the
            timed steps / its maximum), ``clock_reason_fraction_max`` (share of clock samples with a power or
            thermal clock-event reason); missing keys take :data:`DEFAULT_THRESHOLDS`.

    Returns:
        ``{"noisy": bool, "why": [str], "spread_p90_over_median": float | None, "spread_of": str | None,
        "host": load, "thresholds": {...}, "cautions": [str]}``. ``noisy`` means "not measured reliably": a claims
        check treats it so; ``cautions`` (the device's clocks held below ``clock_ratio_min`` of their maximum, or a
        power or thermal limit active in more than ``clock_reason_fraction_max`` of the samples) are recorded beside
        the numbers and do not make them noisy.
    """
    th = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    spreads = [(t["p90"] / t["median"], name) for name, t in _timings(measurements) if t["median"] > 0]
    spread, spread_of = max(spreads) if spreads else (None, None)
    why = []
    if spread is not None and spread > th["spread_max"]:
        why.append(f"timing spread p90/median {spread:.2f} > {th['spread_max']} ({spread_of})")
    # Clock limits are what the device does under this load (an H100 at full load may sit at its power cap), not
    # interference from elsewhere: recorded as cautions beside the numbers, never as "not measured reliably".
    cautions = clocks.cautions(measurements.get("clocks"), th["clock_ratio_min"], th["clock_reason_fraction_max"])
    if load is not None:
        if load["cpu_other_fraction"] > th["cpu_other_max"]:
            why.append(
                f"other processes used {load['cpu_other_fraction']:.0%} of the CPU time "
                f"(> {th['cpu_other_max']:.0%}; load average {load['loadavg_1min_per_core']:.2f} per core)"
            )
        for g in load.get("gpus") or []:
            if len(g["other_processes"]) > th["gpu_other_processes_max"]:
                why.append(
                    f"GPU {g['index']}: {len(g['other_processes'])} other process(es) {g['other_processes'][:5]}"
                )
    return {
        "noisy": bool(why),
        "why": why,
        "cautions": cautions,
        "spread_p90_over_median": spread,
        "spread_of": spread_of,
        "host": load,
        "thresholds": th,
    }


# Environment variables that change what the timings mean (recorded in environment.software.variables too): a
# caution beside the numbers where one is set so. name -> (the value that cautions, or None for any, what it does)
VARIABLE_CAUTIONS = {
    "CUDA_LAUNCH_BLOCKING": ("1", "every CUDA launch synchronous: the times include the host waiting on each kernel"),
    "PYTORCH_NO_CUDA_MEMORY_CACHING": ("1", "PyTorch's CUDA caching allocator off: every allocation a cudaMalloc"),
    "NVIDIA_TF32_OVERRIDE": (None, "TF32 forced by the driver, whatever the configuration's torch flags say"),
}


def variable_cautions(environ: dict | None = None) -> list[str]:
    """The cautions of :data:`VARIABLE_CAUTIONS` that ``environ`` (default ``os.environ``) triggers, one line each."""
    env = os.environ if environ is None else environ
    out = []
    for name, (value, what) in VARIABLE_CAUTIONS.items():
        if name in env and (value is None or env[name].strip() == value):
            out.append(f"{name}={env[name]}: {what}")
    return out


def job_noise(measurements: dict, thresholds: dict | None = None) -> dict:
    """:func:`assess` over this job: from the start snapshot (:func:`start_job`) to now; the cautions also name the
    variables of :data:`VARIABLE_CAUTIONS` set in the job's environment."""
    try:
        start = start_job()
        load = host_load(start, snapshot(start.get("root")))
    except Exception as exc:  # psutil missing or /proc unreadable: say so rather than guess
        out = {**assess(measurements, None, thresholds), "host_error": repr(exc)}
    else:
        out = assess(measurements, load, thresholds)
    out["cautions"] = out["cautions"] + variable_cautions()
    return out
