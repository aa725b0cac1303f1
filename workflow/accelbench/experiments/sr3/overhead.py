"""SR3's harness overhead (``benchmarks/harness_overhead.py sr3``, ``ddp-profile --experiment sr3``,
``sr3-host-bound``): the rule's ``sr3_scaling`` Trainer step against the bare DDP loop (:mod:`.bare`), in the
result's configuration. The case is the result's own: its ``config`` (the rule's exact spec) resolved by the job's
:meth:`.job.Settings.from_spec` on the system the job resolved (:func:`accelbench.core.harness.system_from`); results
from before the configurations existed name theirs through :func:`.configs.of_result`.

* ``sr3``: one process per rank (torchrun: :mod:`accelbench.cluster.torchrun_call`); the row's ``settings`` say the
  data path, its ``product_ms`` is the median in the rule's own ``result.json``, and ``product_over_bare`` the number
  that matters: the table's value against the bare loop of the same settings.
* ``ddp-profile``: the bare loop under each DDP variant (:mod:`accelbench.measure.ddp_profile`).
* ``sr3-host-bound``: does the data path cost anything, and what does the step look like when the host, not the
  device, sets the pace? One process, one device; for each result the rule's ``Trainer`` and timer
  (``measure.phase.train_phase``; threads: ``--threads`` or torch's default, no rank placement) in three data paths:
  ``workers=K`` (the configuration's own: ours makes batches in the process, K = 0, pinned, ``non_blocking`` copy;
  faithful: its DataLoader workers and blocking copy), ``device-resident`` (the same Trainer, its batches drawn on the
  device from patches already there: the bare loop's data path) and ``workers=N`` (``--workers``, when it differs
  from K: a new Trainer with N persistent DataLoader workers). Per variant: the step time (median, p10, p90 of
  ``--repeat``), the host's wall time per step with no explicit synchronisation (``host_ms``; once the launch queue is
  full the host waits for the device, so this alone does not tell host-bound from device-bound) and the host time of
  one batch fetch and copy after a synchronize (``next_batch_host_ms``, median). On 1 H200 (2026-12-01) the batch
  fetch took 0.45 ms and batches already on the device changed nothing beyond the spread.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from accelbench.cluster import torchrun_call
from accelbench.core import files
from accelbench.errors import ResultError
from accelbench.measure import overhead, phase
from accelbench.measure.ddp_profile import Case, profile_rank

HOST_BOUND_FIELDS = [
    "experiment",
    "case",
    "variant",
    "median_ms",
    "p10_ms",
    "p90_ms",
    "host_ms",
    "next_batch_host_ms",
    "steps",
    "threads",
    "cudnn_benchmark",
    "settings",
    "device",
    "when",
]


def case_of(result: dict):
    """``(spec, system, job settings)`` of an ``sr3_scaling`` result (its ``result.json`` as a dict)."""
    from accelbench.core.harness import system_from
    from accelbench.experiments.sr3 import configs as sr3_configs
    from accelbench.experiments.sr3.job import Settings

    spec = {**result["config"], "configuration": sr3_configs.of_result(result).name}
    system = system_from(spec)
    return spec, system, Settings.from_spec(spec, system)


def _rank_device(system, local: int):
    """This rank's :class:`~accelbench.backends.device.Device` and the ``device_ids`` DDP is given (None where the
    backend gives none)."""
    from accelbench import backends
    from accelbench.backends.device import Device

    ops = backends.get(system.backend)
    return Device(system.backend, ops.device_index(local)), (local if ops.ddp_device_ids else None)


def sr3(args) -> None:
    """:func:`sr3_rank` on the result's device count of ranks."""
    job = case_of(files.read_json(args.result, "result file", error=ResultError))[2]
    torchrun_call.run(job.devices, sr3_rank, args, args.threads)


def sr3_rank(args) -> None:
    """One rank: the rule's Trainer and timer, then the bare loop, each timed per iteration (the slowest rank's);
    rank 0 appends the row to ``args.csv``."""
    import torch
    import torch.distributed as dist

    from accelbench.cluster import multinode
    from accelbench.cluster import processes as launch
    from accelbench.experiments.sr3 import data as sky
    from accelbench.experiments.sr3 import model as exp
    from accelbench.experiments.sr3.bare import BareRank, data_path_text, result_data_path_differs, sr3_bare

    placement = launch.place_this_rank()
    result = files.read_json(args.result, "result file", error=ResultError)
    spec, system, job = case_of(result)
    conf, s, n, seed = job.conf, job.sr3, job.devices, job.params["seed"]
    torch.backends.cudnn.benchmark = conf.cudnn_benchmark
    rank, world, local, _ = multinode.join_process_group(system.backend)
    device, device_id = _rank_device(system, local)
    data = sky.load(args.data)
    ds = exp.PatchSet(data["train_hr"], data["train_lr"], s.hr_size, min_len=n * s.batch_size)

    def gathered_max(samples: list[float]) -> float:
        allv = [samples]
        if world > 1:
            allv = [None] * world
            dist.all_gather_object(allv, samples)
        return statistics.median([max(r[i] for r in allv) for i in range(len(samples))])

    # harness: the rule's Trainer and timer
    tr = exp.Trainer(s, device, ds, conf, seed, rank=rank, world=world, ddp=job.ddp)
    if world > 1:
        dist.barrier()
    t = phase.train_phase(tr.train_step, device, args.warmup, args.repeat, desc=f"rank {rank} harness").timing
    harness = gathered_max(t.samples)
    data_path = data_path_text(tr.data_path, conf.authors_data_path) + result_data_path_differs(result, tr.data_path)
    del tr
    overhead.empty_cache(device)

    # bare: DDP U-Net, Adam, batches from the same patches already on the device (the authors' data path: through
    # the same kind of DataLoader and copy as the Trainer's)
    where = BareRank(
        device.torch_device, rank, world, device_id, exp.ddp_kwargs(job.ddp), device.ops.non_blocking_copies
    )
    step, _ = sr3_bare(s, ds, where, conf.precision, seed, conf)
    if world > 1:
        dist.barrier()
    bare_t = phase.train_phase(step, device, args.warmup, args.repeat, energy=False, desc=f"rank {rank} bare").timing
    bare = gathered_max(bare_t.samples)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        m = result["measurements"]
        overhead.append(
            args.csv,
            overhead.Row(
                experiment="sr3",
                case=f"{conf.name} ({conf.series})",
                devices=n,
                harness_ms=harness,
                bare_ms=bare,
                product_ms=m["iteration"]["median"] if result["status"] == "ok" else None,
                steps=args.repeat,
                threads_per_rank=placement["threads"],
                cudnn_benchmark=torch.backends.cudnn.benchmark,
                settings=f"{m.get('parameters')} params, batch {s.batch_size}/device, {s.hr_size} px, "
                f"{conf.precision}, {conf.compile_label}, fused Adam "
                f"{conf.fused_adam}, channels_last {conf.channels_last}, host syncs {conf.host_syncs}, "
                f"{data_path}",
            ).cells(device),
        )


def ddp_profile_rank(args) -> None:
    """One rank of ``ddp-profile --experiment sr3``: the bare loop of the result on this rank's device, under each
    DDP variant (no gradient accumulation: every variant runs)."""
    import torch

    from accelbench.cluster import processes as launch
    from accelbench.experiments.sr3 import data as sky
    from accelbench.experiments.sr3 import model as exp
    from accelbench.experiments.sr3.bare import BareRank, sr3_bare

    placement = launch.place_this_rank()
    spec, system, job = case_of(files.read_json(args.result, "result file", error=ResultError))
    rank, world, local = overhead.ranks()
    conf, s = job.conf, job.sr3
    torch.backends.cudnn.benchmark = conf.cudnn_benchmark
    data = sky.load(args.data)
    ds = exp.PatchSet(data["train_hr"], data["train_lr"], s.hr_size, min_len=world * s.batch_size)
    device, device_id = _rank_device(system, local)
    seed = job.params["seed"]
    case = Case(
        experiment="sr3",
        case=conf.name,
        settings=f"batch {s.batch_size}/device, {s.hr_size} px, {conf.precision}{conf.layout_label}",
        grad_accum=1,
        device=device,
        make_step=lambda kw: sr3_bare(
            s, ds, BareRank(device.torch_device, rank, world, device_id, kw), conf.precision, seed, conf
        ),
    )
    profile_rank(args, case, placement)


def sr3_host_bound(args) -> None:
    """``sr3-host-bound``: one row per (result, data path) to ``args.csv`` (:data:`HOST_BOUND_FIELDS`)."""
    import torch

    from accelbench.backends.device import Device
    from accelbench.experiments.sr3 import data as sky
    from accelbench.experiments.sr3 import model as exp
    from accelbench.experiments.sr3.bare import device_batches

    data = sky.load(args.data)
    if args.threads:
        torch.set_num_threads(args.threads)
    for path in args.result:
        result = files.read_json(path, "result file", error=ResultError)
        spec, system, job = case_of(result)
        conf, s, seed = job.conf, job.sr3, job.params["seed"]
        device = Device(system.backend)
        torch.backends.cudnn.benchmark = conf.cudnn_benchmark
        ds = exp.PatchSet(data["train_hr"], data["train_lr"], s.hr_size, min_len=s.batch_size)
        own = conf.loader_workers or 0
        for i, workers in enumerate([conf.loader_workers] + ([args.workers] if args.workers != own else [])):
            tr = exp.Trainer(s, device, ds, dataclasses.replace(conf, loader_workers=workers), seed)
            variants = [f"workers={tr.data_path['loader_workers']}"]
            if i == 0:  # the configuration's own data path, then the same Trainer's bare one
                variants.append("device-resident")
            for variant in variants:
                if variant == "device-resident":
                    dev = device.torch_device
                    tr.next_batch = device_batches(
                        ds, s.batch_size, dev, tr.memory_format, torch.Generator(device=dev).manual_seed(seed)
                    )
                overhead.append(
                    args.csv,
                    {
                        **_host_bound_times(tr, device, args.warmup, args.repeat),
                        "experiment": "sr3",
                        "case": f"{conf.name} ({conf.series})",
                        "variant": variant,
                        "steps": args.repeat,
                        "threads": torch.get_num_threads(),
                        "cudnn_benchmark": torch.backends.cudnn.benchmark,
                        "settings": (
                            f"{result['measurements'].get('parameters')} params, batch "
                            f"{s.batch_size}, {s.hr_size} px, {conf.precision}, "
                            f"{conf.compile_label}, pin_memory "
                            f"{tr.data_path['pin_memory']}, {tr.data_path['copy']} copy"
                        ),
                        "device": overhead.device_label(device),
                        "when": overhead.now(),
                    },
                    HOST_BOUND_FIELDS,
                )
            del tr
            overhead.empty_cache(device)


def _host_bound_times(tr, device, warmup: int, repeat: int) -> dict:
    """Device time per step (the rule's timer), host time to queue a step (no sync) and of one batch fetch, in ms."""
    t = phase.train_phase(tr.train_step, device, warmup, repeat, energy=False).timing
    device.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeat):
        tr.train_step()
    host = (time.perf_counter() - t0) / repeat * 1e3
    device.synchronize()
    fetch = []
    for _ in range(repeat):
        device.synchronize()
        a = time.perf_counter()
        tr.next_batch()
        fetch.append((time.perf_counter() - a) * 1e3)
    return {
        "median_ms": round(t.median, 3),
        "p10_ms": round(t.p10, 3),
        "p90_ms": round(t.p90, 3),
        "host_ms": round(host, 3),
        "next_batch_host_ms": round(statistics.median(fetch), 3),
    }
