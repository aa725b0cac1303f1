"""SR3 (``sr3``, ``sr3-rank``): the rule's ``sr3_scaling`` Trainer step vs the bare DDP loop, one process per rank, in
the result's configuration. The bare loop and the settings it takes from the result are the experiment's own
(:mod:`accelbench.experiments.sr3.bare`, beside the code it checks); this module runs both and writes the CSV row: the
row's ``settings`` say the data path, its ``product_ms`` is the median in the rule's own ``result.json``, and
``product_over_bare`` the number that matters: the table's value against the bare loop of the same settings."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from accelbench.experiments.sr3.bare import data_path_text, result_case, result_data_path_differs, sr3_bare
from overhead.common import _append, _empty_cache, _events_loop, _row, _system, _torchrun


def sr3(args) -> None:
    spec = json.loads(Path(args.result).read_text())["config"]
    _torchrun(
        int(spec["devices"]),
        [
            "sr3-rank",
            "--result",
            args.result,
            "--data",
            args.data,
            "--csv",
            args.csv,
            "--warmup",
            str(args.warmup),
            "--repeat",
            str(args.repeat),
        ],
        args.threads,
    )


def sr3_rank(args) -> None:
    import torch
    import torch.distributed as dist

    from accelbench.backends.device import Device
    from accelbench.cluster import multinode
    from accelbench.cluster import processes as launch
    from accelbench.data import sky
    from accelbench.experiments.sr3 import model as exp
    from accelbench.measure import timing as measure

    placement = launch.place_this_rank()
    result = json.loads(Path(args.result).read_text())
    spec = result["config"]
    system = _system(spec)
    conf, s = result_case(result)
    n, precision, seed = int(spec["devices"]), conf.precision, spec["run"]["seed"]
    torch.backends.cudnn.benchmark = conf.cudnn_benchmark
    rank, world, local, _ = multinode.join_process_group(system.backend)
    device = Device(system.backend, local if system.backend == "cuda" else 0)
    dev = device.torch_device
    data = sky.load(args.data)
    ds = exp.PatchSet(data["train_hr"], data["train_lr"], s.hr_size, min_len=n * s.batch_size)

    def gathered_max(samples: list[float]) -> float:
        allv = [samples]
        if world > 1:
            allv = [None] * world
            dist.all_gather_object(allv, samples)
        return statistics.median([max(r[i] for r in allv) for i in range(len(samples))])

    # harness: the rule's Trainer and timer
    tr = exp.Trainer(
        s,
        device,
        ds,
        precision,
        seed,
        rank,
        world,
        distributed=world > 1,
        ddp=spec.get("ddp"),
        **conf.trainer_options(),
    )
    if world > 1:
        dist.barrier()
    t = measure.time_steps(tr.train_step, device, args.warmup, args.repeat, desc=f"rank {rank} harness")
    harness = gathered_max(t.samples)
    data_path = data_path_text(tr.data_path, conf.authors_data_path) + result_data_path_differs(result, tr.data_path)
    del tr
    _empty_cache()

    # bare: DDP U-Net, Adam, batches from the same patches already on the device (the authors' data path: through
    # the same kind of DataLoader and copy as the Trainer's)
    step, _ = sr3_bare(
        s,
        ds,
        dev,
        precision,
        seed,
        rank,
        world,
        local if system.backend == "cuda" else None,
        exp.ddp_kwargs(spec.get("ddp")),
        conf,
        pin_memory=device.ops.non_blocking_copies,
    )
    if world > 1:
        dist.barrier()
    bare = gathered_max(_events_loop(step, args.warmup, args.repeat))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        m = result["measurements"]
        _append(
            args.csv,
            _row(
                "sr3",
                f"{conf.name} ({conf.series})",
                n,
                harness,
                bare,
                m["iteration"]["median"] if result["status"] == "ok" else None,
                args.repeat,
                placement["threads"],
                torch.backends.cudnn.benchmark,
                f"{m.get('parameters')} params, batch {s.batch_size}/device, {s.hr_size} px, "
                f"{precision}, {conf.compile_label}, fused Adam "
                f"{conf.fused_adam}, channels_last {conf.channels_last}, host syncs {conf.host_syncs}, "
                f"{data_path}",
            ),
        )
