"""SR3 (``sr3``, ``sr3-rank``): the rule's ``sr3_scaling`` Trainer step vs a bare DDP loop, one process per rank, in the
result's configuration (:mod:`accelbench.experiments.sr3.configs`: precision, attention placement, cuDNN autotuning,
compilation, fused Adam, channels_last and, for the faithful series, its per-iteration ``loss.item()`` + barrier
and the authors' data path (DataLoader workers, pinned memory, blocking copy), which the bare loop takes too; for ours
the bare loop's batches are already on the device); the row's ``settings`` say the data path. The row's
``product_ms`` is the median in the rule's own ``result.json``, and ``product_over_bare`` the number that matters: the
table's value against the bare loop of the same settings."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

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
    from accelbench.core import rank_processes as launch
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


def result_data_path_differs(result: dict, here: dict) -> str:
    """``""`` where the result ran the data path this run takes (workers used, copy), else a note for the row's
    settings: the result's product_ms then comes from another data path (e.g. a faithful result made before the
    authors' data path), so product_over_bare compares unlike work."""
    rec = (result.get("measurements") or {}).get("data_path") or {}
    theirs = (
        rec.get("loader_workers", 0),
        rec.get("copy", "non_blocking" if rec.get("non_blocking_copies", True) else "blocking"),
    )
    ours = (here["loader_workers"], here["copy"])
    if theirs == ours:
        return ""
    return (
        f"; the result ran another data path ({theirs[0]} workers, {theirs[1]} copy; here {ours[0]}, {ours[1]}): "
        "product_over_bare compares unlike work"
    )


def data_path_text(d: dict, authors: bool) -> str:
    """The data path of a row's settings, from the Trainer's ``data_path`` record (:func:`sr3_model.batch_loader`)."""
    capped = f" (of {d['loader_workers_requested']} requested)" if d["capped"] else ""
    text = f"data: DataLoader {d['loader_workers']} workers{capped}, pin_memory {d['pin_memory']}, {d['copy']} copy"
    return text + (" (bare loop the same)" if authors else " (bare loop: batches already on the device)")


def result_case(result: dict):
    """``(configuration, settings)`` of an SR3 ``result.json``: its :class:`~accelbench.experiments.sr3.configs.
    Configuration` and the SR3 settings it ran (preset at the system's scale, attention placed as the configuration
    places it), as the rule resolved them."""
    from accelbench.experiments.sr3 import configs as sr3_configs
    from accelbench.experiments.sr3 import model as exp

    spec = result["config"]
    conf = sr3_configs.of_result(result)
    return conf, exp.resolve_settings(spec["preset"], _system(spec).scale, spec.get("scales", {})).for_configuration(
        conf.attention
    )


def device_batches(ds, batch: int, dev, fmt, generator):
    """A ``next_batch`` drawing ``batch`` patches at random (``generator``, on ``dev``) from copies of ``ds`` already
    on the device in memory format ``fmt``: the bare loop's data path (no DataLoader, no host-to-device copy)."""
    import torch

    cond, target = ds.cond.to(dev, memory_format=fmt), ds.target.to(dev, memory_format=fmt)

    def next_batch():
        idx = torch.randint(0, ds.n, (batch,), device=dev, generator=generator)
        return cond[idx], target[idx]

    return next_batch


def sr3_bare(
    s,
    ds,
    dev,
    precision: str,
    seed: int,
    rank: int,
    world: int,
    device_id: int | None,
    ddp_kwargs: dict | None = None,
    conf=None,
    pin_memory: bool | None = None,
):
    """The bare SR3 training step: U-Net (DDP when ``world > 1``, with ``ddp_kwargs``), Adam, batches drawn from the
    patches already on the device; with ``conf`` (an :class:`~accelbench.experiments.sr3.configs.Configuration`) its
    compilation, fused Adam, channels_last and host syncs, and where it takes the authors' data path, batches through
    the same kind of DataLoader as the Trainer's (:func:`sr3_model.batch_loader`: the workers capped at the rank's
    cores, ``pin_memory`` (default: on CUDA), the blocking or non_blocking copy). Returns ``(step, model)``."""
    import torch
    import torch.nn.functional as F

    from accelbench.experiments.sr3 import model as exp

    torch.manual_seed(seed)
    fmt = torch.channels_last if conf is not None and conf.channels_last else torch.contiguous_format
    model = exp.build_unet(s).to(dev, memory_format=fmt)
    ids = [device_id] if device_id is not None else None
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **(ddp_kwargs or {})) if world > 1 else model
    if conf is not None and conf.compile:
        # the result's mode ("reduce-overhead": CUDA graphs) and Inductor options, as the rule's Trainer compiles
        net = torch.compile(net, **exp.compile_options(conf.compile_mode, conf.layout_optimization))
    cudagraphs = conf is not None and conf.compile and conf.compile_mode == "reduce-overhead"
    fused = conf is not None and conf.fused_adam and dev.type == "cuda"
    opt = torch.optim.Adam(model.parameters(), lr=s.lr, **({"fused": True} if fused else {}))
    syncs = conf is not None and conf.host_syncs
    sched = exp.build_scheduler(s, float64=False)
    dtype = torch.bfloat16 if precision == "bf16" else None
    g = torch.Generator(device=dev).manual_seed(seed + rank)
    if conf is not None and conf.authors_data_path:
        blocking = conf.blocking_copies
        sampler, loader, _ = exp.batch_loader(
            ds,
            s.batch_size,
            rank,
            world,
            seed,
            pin_memory=dev.type == "cuda" if pin_memory is None else pin_memory,
            workers=conf.loader_workers,
            blocking=blocking,
        )

        def batches():
            epoch = 0
            while True:
                yield from loader
                epoch += 1
                sampler.set_epoch(epoch)

        stream = batches()

        def next_batch():
            cond, target = next(stream)
            return exp.to_device(cond, dev, fmt, blocking), exp.to_device(target, dev, fmt, blocking)
    else:
        next_batch = device_batches(ds, s.batch_size, dev, fmt, g)

    def step():
        if cudagraphs:  # a new iteration, as the rule's Trainer.train_step marks it
            torch.compiler.cudagraph_mark_step_begin()
        cond, target = next_batch()
        tt = torch.randint(0, s.timesteps, (s.batch_size,), device=dev, generator=g)
        noise = torch.randn(target.shape, device=dev, generator=g)
        x_t = sched.add_noise(original_samples=target, noise=noise, timesteps=tt)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            pred = net(torch.cat([cond, x_t], dim=1).contiguous(memory_format=fmt), tt).float()
        loss = F.l1_loss(pred, noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if syncs:  # the faithful series' loss read and barrier, as in the rule's step
            loss.item()
            if world > 1:
                torch.distributed.barrier()

    return step, net
