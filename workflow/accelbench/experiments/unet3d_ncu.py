"""Study A at the hardware-counter level: Nsight Compute metrics of one training step per configuration.

For each Study A configuration, ``ncu`` replays the kernels of one training step of the Med-DDPM U-Net
(the same :class:`~accelbench.experiments.unet3d_profile.Workload`, after warm-up, inside the NVTX range
``accelbench_step``) with the clocks left alone (``--clock-control none``), and records raw per-kernel
counters (:mod:`accelbench.ncu`). To bound the replay time only the kernels that make up most of the
step's device time in the torch.profiler kernel table of the same configuration are replayed
(``coverage``/``max_kernels``/``launch_count``); the result records the share of device time they cover.

Where ``ncu`` is missing, the system is not an NVIDIA GPU, or the counters cannot be read (e.g. a
virtualised GPU without profiling permission), the result is ``unsupported`` with the reason.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import measure, ncu
from .unet3d_profile import VARIANTS, unsupported_reason

EXPERIMENT = "unet3d_ncu"


def select_kernels(kernel_table: str | Path, coverage: float, max_kernels: int) -> tuple[list[str], float]:
    """Function base names of the top kernels (by device time) of a torch.profiler kernel table
    (``kernels.csv``) until ``coverage`` of the device time or ``max_kernels`` names; and the share covered."""
    with open(kernel_table) as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: -float(r["device_time_us"]))
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


def run(spec: dict, system, image: str, mask: str, kernel_table: str | None, *, coverage: float, max_kernels: int,
        launch_count: int, warmup: int, timeout_s: int) -> dict:
    """Profile one configuration under ncu. Returns ``{"status", "reason", "measurements"}``.

    Args:
        spec: the ``unet3d-step`` spec (system, model, configuration, presets, scales, run.seed).
        kernel_table: the configuration's ``kernels.csv`` from ``unet3d_profile`` (None: it did not run).
    """
    variant = VARIANTS[spec["configuration"]]
    if system.backend != "cuda":
        return _unsupported(f"Nsight Compute profiles NVIDIA GPUs; system {system.name!r} has backend {system.backend!r}")
    reason = unsupported_reason(variant, system)
    if reason:
        return _unsupported(reason)
    if kernel_table is None or not Path(kernel_table).exists():
        return _unsupported("the configuration has no torch.profiler kernel table (its unet3d_profile result is not ok)")
    exe = ncu.ncu_path()
    if exe is None:
        return _unsupported("ncu (Nsight Compute) not found on PATH")
    import torch

    cc = "{}.{}".format(*torch.cuda.get_device_capability(0))
    arch = ncu.architecture(cc)
    try:
        available = ncu.query_metrics(exe)
    except (OSError, subprocess.SubprocessError) as exc:
        return _unsupported(f"ncu --query-metrics failed: {exc}")
    metrics = ncu.choose_metrics(arch, available)
    names, share = select_kernels(kernel_table, coverage, max_kernels)
    with tempfile.TemporaryDirectory() as tmp:
        log_file = str(Path(tmp) / "ncu.csv")
        program = [sys.executable, "-m", "accelbench", "unet3d-step", "--spec", json.dumps(spec),
                   "--image", image, "--mask", mask, "--warmup", str(warmup)]
        cmd = ncu.command(exe, sorted(set(metrics.values())), program, log_file, kernel_names=names,
                          launch_count=launch_count)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return _unsupported(f"ncu did not finish within {timeout_s} s (lower coverage/launch_count)")
        text = Path(log_file).read_text() if Path(log_file).exists() else proc.stdout
    tail = (proc.stdout + proc.stderr)[-1500:]
    if "ERR_NVGPUCTRPERM" in tail or "LibraryNotLoaded" in tail or "Failed to initialize the profiler" in tail:
        return _unsupported(f"ncu cannot read the GPU's performance counters here: {tail.strip().splitlines()[-1]}")
    if proc.returncode != 0:
        return _unsupported(f"ncu exited with status {proc.returncode}: {tail.strip()[-500:]}")
    try:
        kernels = ncu.parse_csv(text, metrics)
    except ValueError as exc:
        return _unsupported(f"no kernel was profiled ({exc}); ncu said: {tail.strip()[-300:]}")
    if not kernels:
        return _unsupported(f"ncu profiled no kernel in the NVTX range; ncu said: {tail.strip()[-300:]}")
    reduced = ncu.reduce(kernels, measure.classify_kernel)
    return {"status": "ok", "reason": None, "measurements": {
        "architecture": arch, "compute_capability": cc, "ncu_version": ncu.ncu_version(exe),
        "metrics": metrics, "command": " ".join(cmd[: cmd.index("--")]),
        "kernel_selection": {"function_names": names, "device_time_share": share, "coverage_target": coverage,
                             "max_kernels": max_kernels, "launch_count": launch_count},
        "profiled_kernels": len(kernels), **reduced,
        "per_kernel": [{"name": k.name, **k.values} for k in kernels[:2000]],
    }}


def _unsupported(reason: str) -> dict:
    return {"status": "unsupported", "reason": reason, "measurements": {}}
