"""Study B SR3: the plan of one job, known before any rank starts (torch-free): the iterations of strong scaling per
device (:func:`split_iterations`, :func:`iteration_plan`) and why a device count or precision cannot run on a system
(:func:`unsupported_reason`)."""

from __future__ import annotations

import os

from accelbench import backends
from accelbench.errors import ConfigError

PRECISIONS = ("fp32", "bf16")  # of the configurations (configs.CONFIGURATIONS)


def split_iterations(workload_iterations: int, devices: int) -> int:
    """Iterations per device under strong scaling: ``workload_iterations / devices`` (Study B: 40,000 / N).

    Raises:
        ConfigError: the split is not exact (the total work would change with the device count).
    """
    if devices < 1 or workload_iterations % devices:
        raise ConfigError(
            f"sr3_scaling.workload_iterations {workload_iterations} does not split exactly over "
            f"{devices} devices; choose a multiple of every device count in sr3_scaling.devices"
        )
    return workload_iterations // devices


def max_devices(system) -> int:
    """How many DDP ranks ``system`` can run: its ``devices`` (GPU/Gaudi cards), or the usable cores on ``cpu``."""
    if not backends.get(system.backend).accelerator:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return system.devices


def unsupported_reason(system, devices: int, precision: str, visible: int | None = None) -> str | None:
    """Why ``(devices, precision)`` cannot run on ``system`` (None if it can). ``visible`` = devices present now.
    Counts above ``devices_per_node`` run on several nodes (:func:`accelbench.cluster.multinode.node_plan`).

    Raises:
        ConfigError: a multi-node count that does not divide by ``devices_per_node``.
    """
    if precision not in PRECISIONS:
        return f"precision {precision!r} is not one of {PRECISIONS}"
    if not system.supports(precision):
        return f"{system.name} has no native {precision} (supported precisions: {', '.join(system.precisions)})"
    from accelbench.cluster.multinode import job_limit_reason, node_plan

    plan = node_plan(system, devices, "sr3_scaling.devices")
    if plan.nodes > 1:  # ranks per node against what one node has; the allocation is checked by the launcher
        if visible is not None and plan.per_node > visible:
            return (
                f"{devices} devices = {plan.nodes} nodes x {plan.per_node}; only {visible} {system.backend} "
                f"device(s) are visible on this node"
            )
        return job_limit_reason(system, plan)
    limit = max_devices(system)
    if devices > limit:
        what = (
            "devices in its system file"
            if backends.get(system.backend).accelerator
            else "usable CPU cores (one gloo process each)"
        )
        return f"{devices} devices requested; {system.name} has {limit} {what}"
    if visible is not None and devices > visible:
        return f"{devices} devices requested; only {visible} {system.backend} device(s) are visible on this node"
    return None


def iteration_plan(devices: int, workload_iterations: int, max_iterations: int, warmup: int) -> tuple[int, int, int]:
    """``(iterations per device, iterations run, untimed warm-up iterations)`` of one job: strong scaling's
    ``workload_iterations / devices`` (:func:`split_iterations`), capped at ``max_iterations``; the warm-up leaves
    at least one timed iteration."""
    iters = split_iterations(workload_iterations, devices)
    run_iters = min(iters, max_iterations)
    return iters, run_iters, min(warmup, run_iters - 1)
