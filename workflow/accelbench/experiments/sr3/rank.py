"""Study B SR3: one DDP rank's run (:func:`train_rank`): the Trainer on this rank's device, its FLOPs counted on one
extra untimed step, the warm-up and timed iterations (host synchronisations counted where the backend can), what
TorchDynamo compiled, the replicas compared, and on rank 0 the quality check and the sample panel
(:func:`save_panel`). The job that launches the ranks and merges their records is :mod:`.job`."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np
import torch

from accelbench import backends
from accelbench.backends.device import Device
from accelbench.errors import ConfigError
from accelbench.experiments.sr3.configs import Configuration
from accelbench.experiments.sr3.model import PatchSet, Trainer, replica_spread
from accelbench.experiments.sr3.plan import iteration_plan
from accelbench.experiments.sr3.quality import QualityCheck, quality
from accelbench.measure import flops, phase


def _peak_rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def count_step_flops(tr: Trainer) -> dict:
    """FLOPs of one rank's training step (:func:`accelbench.measure.flops.count_flops`: ``FlopCounterMode``, matmuls and
    convolutions, forward + backward), counted on one extra untimed forward and backward of the plain module before
    the timed run (:meth:`~.model.Trainer.flop_step`: never through ``torch.compile``'s wrapper, which a count
    under the counter's dispatch mode leaves uncompiled for good). A backend whose ops the counter cannot run records
    why instead."""
    try:
        value = flops.count_flops(tr.flop_step)
    except Exception as exc:  # noqa: BLE001  (any failure of the counter: record it, the timed run is unaffected)
        return {"per_device_step": None, "method": f"FlopCounterMode failed: {type(exc).__name__}: {exc}"[:300]}
    return {
        "per_device_step": value,
        "method": "torch FlopCounterMode on one extra untimed forward and backward of the plain (uncompiled, "
        "unwrapped) module",
    }


def check_compiled(conf: Configuration) -> dict | None:
    """:func:`compiled_graphs` for a configuration that asks for ``torch.compile`` (None for one that does not).

    Raises:
        RuntimeError: it asks for ``torch.compile`` and TorchDynamo compiled no graph (every rank compiles the same
            step, so every rank stops).
    """
    if not conf.compile:
        return None
    compiled = compiled_graphs()
    if compiled["unique_graphs"] == 0:
        raise RuntimeError(
            f"configuration {conf.name} asks for torch.compile, but TorchDynamo compiled no graph: the "
            f"step ran eager, so its time is not {conf.name}'s ({compiled})"
        )
    return compiled


def compiled_graphs() -> dict:
    """What TorchDynamo compiled in this process so far (``torch._dynamo.utils.counters``): frames compiled, graphs,
    graph breaks. A configuration that asks for ``torch.compile`` and compiled no graph ran eager: its step time
    would be reported under a name it did not run (:func:`train_rank` stops with the reason)."""
    from torch._dynamo.utils import counters

    return {
        "frames_compiled": int(counters["frames"].get("ok", 0)),
        "unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "method": "torch._dynamo.utils.counters after the timed iterations",
    }


def train_rank(job, system, data: dict[str, np.ndarray], placement: dict | None = None) -> tuple[dict, dict | None]:
    """Train SR3 on this DDP rank (one of ``job.devices`` processes started by torchrun) as ``job`` says (a
    :class:`.job.Settings`: the SR3 settings, the configuration (:mod:`.configs`: precision, autotuning, compilation,
    layout, the authors' host synchronisations), the run parameters ``workload_iterations``, ``max_iterations``,
    ``warmup``, ``quality_images``, ``quality_sample_steps``, ``seed`` and the DDP options) on ``data`` (the patch set)
    and measure it. On CUDA the timed iterations run under ``torch.cuda.set_sync_debug_mode("warn")``: the host
    synchronisations they make are counted and recorded with where they happen (``host_syncs_timed``,
    ``host_syncs_where``; the faithful series makes its loss read and its blocking batch copies per iteration, ours
    none beyond the measurement's own). How batches reach the device (the configuration's ``loader_workers`` capped at
    this rank's cores, pinning, the copy) is recorded as ``data_path``.

    Every rank runs ``min(workload_iterations / devices, max_iterations)`` iterations in the one timed phase
    (:func:`accelbench.measure.phase.timed_phase`): ``warmup`` untimed (the first alone timed as
    ``first_iteration_s``; they compile and are not counted for host synchronisations), the rest timed one by one
    with the latency, energy and host-synchronisation trackers, peak memory and wall time over all of them. Rank 0
    then samples the held-out patches for PSNR/SSIM (after the process group is gone: the other ranks do not wait for
    it).

    Returns:
        ``(record, panel)``: this rank's record (times in ms, wall time in s, memory in GiB; rank 0's also holds
        ``quality``, the loss, the parameter count and the patch counts) and, on rank 0, the sample panel
        (:func:`.quality.quality`; None elsewhere). :func:`.job.merge` turns the records of all ranks into the
        measurements.

    Raises:
        torch.OutOfMemoryError: on the rank that ran out (:func:`accelbench.core.harness.rank_main` records ``oom``).
    """
    import torch.distributed as dist

    from accelbench.cluster.multinode import join_process_group

    p, conf = job.params, job.conf
    rank, world, local, pg = join_process_group(system.backend)
    if world != job.devices:
        raise ConfigError(f"launched with {world} processes but {job.devices} devices were requested")
    device = Device(system.backend, backends.get(system.backend).device_index(local))
    _, run_iters, warm = iteration_plan(job.devices, p["workload_iterations"], p["max_iterations"], p["warmup"])
    torch.backends.cudnn.benchmark = conf.cudnn_benchmark
    ds = PatchSet(data["train_hr"], data["train_lr"], job.sr3.hr_size, min_len=job.devices * job.sr3.batch_size)
    tr = Trainer(job.sr3, device, ds, conf, p["seed"], rank=rank, world=world, ddp=job.ddp)
    step_flops = count_step_flops(tr)  # one extra untimed forward/backward of the plain module, before the clock
    timed = _timed_iterations(tr, device, warm, run_iters - warm, conf, world, rank)
    record = _rank_record(tr, device, timed, conf, rank=rank, world=world, placement=placement)
    record.update(collective_backend=pg if world > 1 else None, flops=step_flops)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank != 0:
        return record, None
    return _quality_record(record, tr, job, data, device)


def _timed_iterations(tr: Trainer, device: Device, warm: int, timed: int, conf: Configuration, world: int, rank: int):
    """The rank's iterations through the one timed phase (:func:`accelbench.measure.phase.train_phase`): compilation
    and CUDA-graph recording happen in the warm-up (checked before the timed ones: :func:`check_compiled`), peak
    memory and wall time span everything, host synchronisations the timed iterations."""
    import torch.distributed as dist

    if world > 1:
        dist.barrier()
    return phase.train_phase(
        lambda: tr.losses.append(tr.train_step()),
        device,
        warm,
        timed,
        extra=(phase.WallClock(device), phase.PeakMemory(device), phase.HostSyncs(device)),
        after_warmup=(lambda: check_compiled(conf)) if warm else None,
        desc=f"rank {rank} SR3 train",
    )


def _rank_record(
    tr: Trainer, device: Device, result, conf: Configuration, *, rank: int, world: int, placement: dict | None
) -> dict:
    """This rank's record from the timed phase's :class:`~accelbench.measure.phase.PhaseResult` (times in ms, wall
    time in s, memory in GiB) and the Trainer's settings."""
    timing, v = result.timing, result.values
    peak, syncs = v["peak_memory_bytes"], v["host_syncs"]
    return {
        "rank": rank,
        "samples_ms": timing.samples,
        "median_ms": timing.median,
        "method": timing.method,
        "energy": timing.energy,  # this rank's device over the timed iterations (accelbench.measure.energy)
        "clocks": timing.clocks,  # its SM clock and clock-event reasons over them (accelbench.measure.clocks)
        "warmup": result.warmup,
        "wall_s": v["wall_s"],
        "first_iteration_s": result.first_iteration_s,
        "peak_mem_gib": peak / 2**30 if peak is not None else None,
        "peak_rss_gib": _peak_rss_gib(),
        "threads": torch.get_num_threads(),
        "node": os.environ.get("SLURMD_NODENAME") or platform.node(),
        "placement": placement,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "replica_max_abs_diff": replica_spread(tr.model) if world > 1 else 0.0,
        "host_syncs_timed": syncs.get("count"),
        "host_syncs_method": syncs.get("method"),
        "host_syncs_where": syncs.get("where"),
        "fused_adam": tr.fused_adam,
        "compiled": check_compiled(conf),
        "data_path": tr.data_path,  # workers (requested, used, the cores that capped them), pinning, copy
        # FP32 convolutions run in TF32 where cuDNN is (PyTorch's default, which Study B's code kept)
        "math_flags": {
            "cudnn_tf32": torch.backends.cudnn.is_available() and torch.backends.cudnn.allow_tf32,
            "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        },
    }


def _quality_record(record: dict, tr: Trainer, job, data: dict[str, np.ndarray], device: Device):
    """Rank 0's record completed with the held-out quality (:func:`.quality.quality`), the loss curve, the parameter
    and patch counts; returns ``(record, panel)``."""
    p = job.params
    check = QualityCheck(p["quality_images"], p["quality_sample_steps"], job.conf.precision, p["seed"])
    q, panel = quality(tr.model, job.sr3, data["heldout_hr"], data["heldout_lr"], check, device)
    curve = [float(v) for v in torch.stack(tr.losses).float().cpu()]
    record.update(
        parameters=sum(x.numel() for x in tr.model.parameters()),
        loss={
            "first": curve[0],
            "last10_mean": float(np.mean(curve[-10:])),
            "rank": 0,
            "curve": curve,
            "mean": float(np.mean(curve)),
        },
        quality=q,
        train_patches=int(len(data["train_hr"])),
        heldout_patches=int(len(data["heldout_hr"])),
    )
    return record, panel


def save_panel(panel: dict[str, np.ndarray], path: str | Path) -> None:
    """Write the low-res / bicubic / SR3 / ground-truth arrays of one held-out patch as ``.npz``."""
    np.savez_compressed(path, **panel)
