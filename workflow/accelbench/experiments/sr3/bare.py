"""Study B SR3's bare reference loop: the plain PyTorch DDP step that the job's ``Trainer.train_step``
(:class:`.model.Trainer`) is checked against, and the settings it takes from the result it is compared with.

``benchmarks/harness_overhead.py sr3`` (driver: :mod:`.overhead`) times both in the result's
configuration (:mod:`.configs`: precision, attention placement, cuDNN autotuning, compilation, fused Adam,
channels_last and, for the faithful series, its per-iteration ``loss.item()`` + barrier and the authors' data path:
DataLoader workers, pinned memory, blocking copy, which the bare loop takes too; for ours the bare loop's batches are
already on the device: :func:`device_batches`); ``ddp-profile`` and ``sr3-host-bound`` run :func:`sr3_bare` and
:func:`device_batches` too. :func:`data_path_text` and :func:`result_data_path_differs` state the data path for the
CSV's ``settings`` column.

Torch is imported inside the functions that build the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    """The data path of a row's settings, from the Trainer's ``data_path`` record (:func:`.model.batch_loader`)."""
    capped = f" (of {d['loader_workers_requested']} requested)" if d["capped"] else ""
    text = f"data: DataLoader {d['loader_workers']} workers{capped}, pin_memory {d['pin_memory']}, {d['copy']} copy"
    return text + (" (bare loop the same)" if authors else " (bare loop: batches already on the device)")


def device_batches(ds, batch: int, dev, fmt, generator):
    """A ``next_batch`` drawing ``batch`` patches at random (``generator``, on ``dev``) from copies of ``ds`` already
    on the device in memory format ``fmt``: the bare loop's data path (no DataLoader, no host-to-device copy)."""
    import torch

    cond, target = ds.cond.to(dev, memory_format=fmt), ds.target.to(dev, memory_format=fmt)

    def next_batch():
        idx = torch.randint(0, ds.n, (batch,), device=dev, generator=generator)
        return cond[idx], target[idx]

    return next_batch


@dataclass(frozen=True)
class BareRank:
    """Where one rank's bare loop runs: ``dev`` (its ``torch.device``), ``rank`` of ``world`` (DDP when
    ``world > 1``), ``device_id`` (DDP's ``device_ids`` entry; None where the backend takes none), ``ddp_kwargs``
    (DDP's options) and ``pin_memory`` of the authors' DataLoader (None: on CUDA)."""

    dev: Any
    rank: int = 0
    world: int = 1
    device_id: int | None = None
    ddp_kwargs: dict | None = None
    pin_memory: bool | None = None


def sr3_bare(s, ds, where: BareRank, precision: str, seed: int, conf=None):
    """The bare SR3 training step of settings ``s`` (:class:`.settings.SR3Settings`) on the patch set ``ds``, on
    ``where`` (:class:`BareRank`): U-Net (DDP when ``world > 1``, with ``ddp_kwargs``), Adam, batches drawn from the
    patches already on the device; with ``conf`` (an :class:`~accelbench.experiments.sr3.configs.Configuration`) its
    compilation, fused Adam, channels_last and host syncs, and where it takes the authors' data path, batches through
    the same kind of DataLoader as the Trainer's (:func:`.model.batch_loader`: the workers capped at the rank's
    cores, ``pin_memory`` (default: on CUDA), the blocking or non_blocking copy). Returns ``(step, model)``."""
    import torch
    import torch.nn.functional as F

    from accelbench.experiments.sr3 import model as exp

    dev, rank, world, pin_memory = where.dev, where.rank, where.world, where.pin_memory
    torch.manual_seed(seed)
    fmt = torch.channels_last if conf is not None and conf.channels_last else torch.contiguous_format
    norm, flexible = (conf.norm, conf.layout_optimization) if conf is not None else ("group_norm", False)
    model = exp.set_norm(exp.build_unet(s), norm, flexible).to(dev, memory_format=fmt)
    ids = [where.device_id] if where.device_id is not None else None
    ddp = where.ddp_kwargs or {}
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **ddp) if world > 1 else model
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
