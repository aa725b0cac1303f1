"""LoRA's harness overhead (``benchmarks/harness_overhead.py lora``, ``ddp-profile --experiment lora``): the rule's
Trainer run (``train_rank``) against the bare loop (:mod:`.bare`), one process per rank. The case is the result's own:
its ``config`` (the rule's exact spec) resolved by the job's :meth:`.job.Settings.from_spec` on the system the job
resolved (:func:`accelbench.core.harness.system_from`).

``lora`` times the window of the product's step timer (Trainer's on_step_begin to on_step_end): the batch fetch and
copies and the token-count reduction before it (get_batch_samples), the logging reads after it, each untimed. The host
time of the Trainer step on the CPU is :mod:`.host_overhead`."""

from __future__ import annotations

import statistics

from accelbench.cluster import torchrun_call
from accelbench.core import files
from accelbench.errors import ResultError
from accelbench.measure import overhead
from accelbench.measure.ddp_profile import Case, profile_rank


def case_of(result: dict):
    """``(spec, system, LoRA settings, plan)`` of a ``lora_finetune`` result (its ``result.json`` as a dict): the
    settings as the job resolves them (``train_rank`` takes them so; at least the faithful series' throughput warm-up
    steps), the plan of the run."""
    from accelbench.core.harness import system_from
    from accelbench.experiments.lora.job import Settings

    spec = {k: v for k, v in result["config"].items() if k != "plan"}
    system = system_from(spec)
    job = Settings.from_spec(spec, system)
    return spec, system, job.lora, job.plan


def _rank_device(system, local: int):
    from accelbench import backends
    from accelbench.backends.device import Device

    return Device(system.backend, backends.get(system.backend).device_index(local))


def lora(args) -> None:
    """:func:`lora_rank` in this process for one device (the rule runs ``single`` without torchrun), else on the
    result's device count of torchrun ranks."""
    n = int(files.read_json(args.result, "result file", error=ResultError)["config"]["devices"])
    if n == 1:
        lora_rank(args)
        return
    torchrun_call.run(n, lora_rank, args, args.threads)


def lora_rank(args) -> None:
    """One rank: the rule's Trainer run, then the bare loop in the window of the product's step timer; rank 0 appends
    the row (rank 0's medians, as the product reports, and the slowest rank's) to ``args.csv``.

    ``args.bare_only`` (``--bare-only``): the Trainer run left out (where it fails and would leave the device unusable:
    the Liger fused linear cross-entropy under the Trainer), the bare loop alone, each step's loss and the median
    step printed, no row (no harness time to compare)."""
    import torch
    import torch.distributed as dist

    from accelbench.cluster import processes as launch
    from accelbench.experiments.lora.bare import (
        ProcessRank,
        bare_settings,
        harness_differences,
        lora_bare,
        settings_text,
        with_liger_kernels,
        without_num_items_in_batch,
    )
    from accelbench.experiments.lora.train import train_rank
    from accelbench.experiments.lora.trainer import ddp_options_for

    placement = launch.place_this_rank()
    result = files.read_json(args.result, "result file", error=ResultError)
    spec, system, s, plan = case_of(result)
    if plan.strategy not in ("single", "ddp"):
        raise SystemExit(f"bare loop written for single/ddp only, not {plan.strategy}")
    mirror = bare_settings(result, s, plan, system)
    if not getattr(args, "num_items_in_batch", True):  # --no-num-items-in-batch: the isolation experiment's other side
        mirror = without_num_items_in_batch(mirror)
    if getattr(args, "liger_kernels", None):
        mirror = with_liger_kernels(mirror, args.liger_kernels)
    rank, world, local = overhead.ranks()
    device = _rank_device(system, local)
    if rank == 0:
        print(f"bare loop settings: {mirror.describe()}", flush=True)
    if getattr(args, "bare_only", False):
        _bare_only(spec, system, plan, s, ProcessRank(rank, world, local), mirror, device)
        return
    out = train_rank(spec, system, plan, args.threads, placement)  # harness: the rule's Trainer run
    if out["status"] != "ok":
        raise SystemExit(f"harness run: {out['status']}: {out['reason']}")
    harness_samples = out["measurements"]["step_samples_ms"][s.warmup_steps :]
    differs = harness_differences(result.get("measurements") or {}, out["measurements"])
    del out
    overhead.empty_cache(device)

    if world > 1 and not dist.is_initialized():
        device.ops.prepare_collective()
        dist.init_process_group(device.ops.collective)
    ddp = ddp_options_for(plan, spec.get("ddp"), s.grad_accum)
    step, _ = lora_bare(spec, system, plan, s, ProcessRank(rank, world, local), ddp, mirror=mirror)
    # the window of the product's timer (on_step_begin to on_step_end): fetch and logging reads stay outside it
    bare_samples = overhead.time_loop(
        step.body, device, s.warmup_steps, s.timed_steps, before=step.before, after=step.after
    )
    allh, allb = [harness_samples], [bare_samples]
    if world > 1:
        allh, allb = [None] * world, [None] * world
        dist.all_gather_object(allh, harness_samples)
        dist.all_gather_object(allb, bare_samples)
        dist.destroy_process_group()
    if rank == 0:  # rank 0's median, as the product reports
        m = result["measurements"]
        overhead.append(
            args.csv,
            overhead.Row(
                experiment="lora",
                case=f"{spec['model_name']} {spec['attention']} {spec['strategy']}",
                devices=world,
                harness_ms=statistics.median(allh[0]),
                bare_ms=statistics.median(allb[0]),
                product_ms=m["step"]["median"] if result["status"] == "ok" else None,
                steps=s.timed_steps,
                threads_per_rank=placement["threads"],
                cudnn_benchmark=torch.backends.cudnn.benchmark,
                settings=settings_text(s, plan, step.mirror, differs)
                + f"; slowest-rank harness {max(statistics.median(x) for x in allh):.1f} ms, "
                f"bare {max(statistics.median(x) for x in allb):.1f} ms",
            ).cells(device),
        )


def _bare_only(spec, system, plan, s, place, mirror, device) -> None:
    """``--bare-only``, one device: the bare loop of the result alone, ``s.warmup_steps + s.timed_steps`` optimizer
    steps, each step's loss read after it (a host sync: a device fault surfaces at the step that made it), then the
    median step (ms) of the timed ones, printed."""
    from accelbench.experiments.lora.bare import lora_bare
    from accelbench.measure.phase import Latency

    if place.world > 1:
        raise SystemExit("--bare-only runs one device (the result's device count is 1)")
    step, _ = lora_bare(spec, system, plan, s, place, mirror=mirror)
    print(f"bare loop as run: {step.mirror.describe()}", flush=True)
    clock = Latency(device, wall=True)  # synchronize + perf_counter around each body: the fault surfaces at its step
    for n in range(1, s.warmup_steps + s.timed_steps + 1):
        step.before()
        clock.step_begin()
        step.body()
        clock.step_end()
        step.after()
        print(f"bare step {n}: loss {step.tr_loss.item():.6f}, {clock.samples()[-1]:.1f} ms", flush=True)
    print(f"bare loop median step {statistics.median(clock.samples()[s.warmup_steps :]):.1f} ms", flush=True)


def ddp_profile_rank(args) -> None:
    """One rank of ``ddp-profile --experiment lora``: the bare loop of the result (eager, token ids drawn on the
    device) under each DDP variant; with ``--mirror``, built as the result's Trainer runs it
    (:func:`.bare.bare_settings`: torch.compile, bf16 adapters, fused AdamW, how batches reach the device), the
    profile of the rule's own step."""
    from accelbench.cluster import processes as launch
    from accelbench.experiments.lora.bare import ProcessRank, bare_settings, lora_bare

    placement = launch.place_this_rank()
    result = files.read_json(args.result, "result file", error=ResultError)
    spec, system, s, plan = case_of(result)
    mirror = bare_settings(result, s, plan, system) if getattr(args, "mirror", False) else None
    rank, world, local = overhead.ranks()
    case = Case(
        experiment="lora",
        case=f"{spec['model_name']} {spec['attention']}"
        + (f" ({spec.get('series', 'ours')}, bare loop mirroring the Trainer: {mirror.describe()})" if mirror else ""),
        settings=f"seq {s.seq_len}, batch {s.per_device_batch}x{s.grad_accum}/device, {plan.precision}",
        grad_accum=s.grad_accum,
        device=_rank_device(system, local),
        make_step=lambda kw: lora_bare(spec, system, plan, s, ProcessRank(rank, world, local), kw, mirror=mirror),
    )
    profile_rank(args, case, placement)
