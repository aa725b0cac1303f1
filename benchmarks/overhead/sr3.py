"""SR3 (``sr3``, ``sr3-rank``): the rule's ``sr3_scaling`` Trainer step vs a bare DDP loop, one process per rank, in the
result's configuration (:mod:`accelbench.experiments.sr3_configs`: precision, attention placement, cuDNN autotuning,
compilation, fused Adam, channels_last and, for the faithful series, its per-iteration ``loss.item()`` + barrier,
which the bare loop makes too). The row's ``product_ms`` is the median in the rule's own ``result.json``, and
``product_over_bare`` the number that matters: the table's value against the bare loop of the same settings."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from .common import _append, _empty_cache, _events_loop, _row, _system, _torchrun


def sr3(args) -> None:
    spec = json.loads(Path(args.result).read_text())["config"]
    _torchrun(int(spec["devices"]), ["sr3-rank", "--result", args.result, "--data", args.data, "--csv", args.csv,
                                     "--warmup", str(args.warmup), "--repeat", str(args.repeat)], args.threads)


def sr3_rank(args) -> None:
    import torch
    import torch.distributed as dist

    from accelbench import launch, measure, multinode
    from accelbench.data import sky
    from accelbench.devices import Device
    from accelbench.experiments import sr3_configs
    from accelbench.experiments import sr3_model as exp

    placement = launch.place_this_rank()
    result = json.loads(Path(args.result).read_text())
    spec = result["config"]
    system = _system(spec)
    conf = sr3_configs.of_result(result)
    s = exp.resolve_settings(spec["preset"], system.scale, spec.get("scales", {})).for_configuration(conf.attention)
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
    tr = exp.Trainer(s, device, ds, precision, seed, rank, world, distributed=world > 1, ddp=spec.get("ddp"),
                     compile=conf.compile, fused_adam=conf.fused_adam, channels_last=conf.channels_last,
                     host_syncs=conf.host_syncs)
    if world > 1:
        dist.barrier()
    t = measure.time_steps(tr.train_step, device, args.warmup, args.repeat, desc=f"rank {rank} harness")
    harness = gathered_max(t.samples)
    del tr
    _empty_cache()

    # bare: DDP U-Net, Adam, batches from the same patches already on the device
    step, _ = sr3_bare(s, ds, dev, precision, seed, rank, world, local if system.backend == "cuda" else None,
                       exp.ddp_kwargs(spec.get("ddp")), conf)
    if world > 1:
        dist.barrier()
    bare = gathered_max(_events_loop(step, args.warmup, args.repeat))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        m = result["measurements"]
        _append(args.csv, _row("sr3", f"{conf.name} ({conf.series})", n, harness, bare,
                               m["iteration"]["median"] if result["status"] == "ok" else None, args.repeat,
                               placement["threads"], torch.backends.cudnn.benchmark,
                               f"{m.get('parameters')} params, batch {s.batch_size}/device, {s.hr_size} px, "
                               f"{precision}, compile {conf.compile}, fused Adam {conf.fused_adam}, channels_last "
                               f"{conf.channels_last}, host syncs {conf.host_syncs}"))


def sr3_bare(s, ds, dev, precision: str, seed: int, rank: int, world: int, device_id: int | None,
             ddp_kwargs: dict | None = None, conf=None):
    """The bare SR3 training step: U-Net (DDP when ``world > 1``, with ``ddp_kwargs``), Adam, batches drawn from the
    patches already on the device; with ``conf`` (an :class:`~accelbench.experiments.sr3_configs.Configuration`) its
    compilation, fused Adam, channels_last and host syncs. Returns ``(step, model)``."""
    import torch
    import torch.nn.functional as F

    from accelbench.experiments import sr3_model as exp

    torch.manual_seed(seed)
    fmt = torch.channels_last if conf is not None and conf.channels_last else torch.contiguous_format
    model = exp.build_unet(s).to(dev, memory_format=fmt)
    ids = [device_id] if device_id is not None else None
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **(ddp_kwargs or {})) if world > 1 else model
    if conf is not None and conf.compile:
        net = torch.compile(net)
    fused = conf is not None and conf.fused_adam and dev.type == "cuda"
    opt = torch.optim.Adam(model.parameters(), lr=s.lr, **({"fused": True} if fused else {}))
    syncs = conf is not None and conf.host_syncs
    sched = exp.build_scheduler(s, float64=False)
    cond_all, target_all = ds.cond.to(dev, memory_format=fmt), ds.target.to(dev, memory_format=fmt)
    dtype = torch.bfloat16 if precision == "bf16" else None
    g = torch.Generator(device=dev).manual_seed(seed + rank)

    def step():
        idx = torch.randint(0, ds.n, (s.batch_size,), device=dev, generator=g)
        cond, target = cond_all[idx], target_all[idx]
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

