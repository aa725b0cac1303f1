"""LoRA (``lora``, ``lora-rank``): the rule's Trainer run (``train_rank``) vs the bare loop, one process per rank.

The bare loop and the settings it takes from the result are the experiment's own
(:mod:`accelbench.experiments.lora.bare`, beside the code it checks); this module runs both and writes the CSV row. It
times the window of the product's step timer (Trainer's on_step_begin to on_step_end): the batch fetch and copies and
the token-count reduction before it (get_batch_samples), the logging reads after it, each untimed."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from accelbench.experiments.lora.bare import bare_settings, harness_differences, lora_bare, lora_case, settings_text
from overhead.common import _append, _empty_cache, _events_loop, _ranks, _row, _torchrun


def lora(args) -> None:
    spec = json.loads(Path(args.result).read_text())["config"]
    n = int(spec["devices"])
    if n == 1:  # the rule runs `single` in its own process, without torchrun
        lora_rank(args)
        return
    _torchrun(
        n, ["lora-rank", "--result", args.result, "--csv", args.csv, "--threads", str(args.threads)], args.threads
    )


def lora_rank(args) -> None:
    import torch
    import torch.distributed as dist

    from accelbench.cluster import processes as launch
    from accelbench.experiments.lora.train import train_rank
    from accelbench.experiments.lora.trainer import ddp_options_for

    placement = launch.place_this_rank()
    result = json.loads(Path(args.result).read_text())
    spec, system, s, plan = lora_case(result)
    if plan.strategy not in ("single", "ddp"):
        raise SystemExit(f"bare loop written for single/ddp only, not {plan.strategy}")
    mirror = bare_settings(result, s, plan, system)
    rank, world, local = _ranks()
    if rank == 0:
        print(f"bare loop settings: {mirror.describe()}", flush=True)
    out = train_rank(spec, system, plan, args.threads, placement)  # harness: the rule's Trainer run
    if out["status"] != "ok":
        raise SystemExit(f"harness run: {out['status']}: {out['reason']}")
    harness_samples = out["measurements"]["step_samples_ms"][s.warmup_steps :]
    differs = harness_differences(result.get("measurements") or {}, out["measurements"])
    del out
    _empty_cache()

    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if system.backend == "cuda" else "gloo")
    ddp = ddp_options_for(plan, spec.get("ddp"), s.grad_accum)
    step, _ = lora_bare(spec, system, plan, s, rank, world, local, ddp, mirror=mirror)
    # the window of the product's timer (on_step_begin to on_step_end): fetch and logging reads stay outside it
    bare_samples = _events_loop(step.body, s.warmup_steps, s.timed_steps, before=step.before, after=step.after)
    allh, allb = [harness_samples], [bare_samples]
    if world > 1:
        allh, allb = [None] * world, [None] * world
        dist.all_gather_object(allh, harness_samples)
        dist.all_gather_object(allb, bare_samples)
        dist.destroy_process_group()
    if rank == 0:  # rank 0's median, as the product reports
        m = result["measurements"]
        _append(
            args.csv,
            _row(
                "lora",
                f"{spec['model_name']} {spec['attention']} {spec['strategy']}",
                world,
                statistics.median(allh[0]),
                statistics.median(allb[0]),
                m["step"]["median"] if result["status"] == "ok" else None,
                s.timed_steps,
                placement["threads"],
                torch.backends.cudnn.benchmark,
                settings_text(s, plan, mirror, differs)
                + f"; slowest-rank harness {max(statistics.median(x) for x in allh):.1f} ms, "
                f"bare {max(statistics.median(x) for x in allb):.1f} ms",
            ),
        )
