"""LoRA (``lora``, ``lora-rank``): the rule's Trainer run (``train_rank``) vs a bare loop, one process per rank."""

from __future__ import annotations

import contextlib
import json
import statistics
from pathlib import Path

from .common import _append, _empty_cache, _events_loop, _ranks, _row, _system, _torchrun


def lora(args) -> None:
    spec = json.loads(Path(args.result).read_text())["config"]
    n = int(spec["devices"])
    if n == 1:  # the rule runs `single` in its own process, without torchrun
        lora_rank(args)
        return
    _torchrun(n, ["lora-rank", "--result", args.result, "--csv", args.csv, "--threads", str(args.threads)], args.threads)


def lora_rank(args) -> None:
    import torch
    import torch.distributed as dist

    from accelbench import launch
    from accelbench.experiments.lora.train import train_rank
    from accelbench.experiments.lora.trainer import ddp_options_for

    placement = launch.place_this_rank()
    result = json.loads(Path(args.result).read_text())
    spec, system, s, plan = _lora_case(result)
    if plan.strategy not in ("single", "ddp"):
        raise SystemExit(f"bare loop written for single/ddp only, not {plan.strategy}")
    out = train_rank(spec, system, plan, args.threads, placement)  # harness: the rule's Trainer run
    if out["status"] != "ok":
        raise SystemExit(f"harness run: {out['status']}: {out['reason']}")
    harness_samples = out["measurements"]["step_samples_ms"][s.warmup_steps:]
    del out
    _empty_cache()

    rank, world, local = _ranks()
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if system.backend == "cuda" else "gloo")
    ddp = ddp_options_for(plan, spec.get("ddp"), s.grad_accum)
    step, _ = lora_bare(spec, system, plan, s, rank, world, local, ddp)
    bare_samples = _events_loop(step, s.warmup_steps, s.timed_steps)
    allh, allb = [harness_samples], [bare_samples]
    if world > 1:
        allh, allb = [None] * world, [None] * world
        dist.all_gather_object(allh, harness_samples)
        dist.all_gather_object(allb, bare_samples)
        dist.destroy_process_group()
    if rank == 0:  # rank 0's median, as the product reports
        m = result["measurements"]
        _append(args.csv, _row("lora", f"{spec['model_name']} {spec['attention']} {spec['strategy']}", world,
                               statistics.median(allh[0]), statistics.median(allb[0]),
                               m["step"]["median"] if result["status"] == "ok" else None, s.timed_steps,
                               placement["threads"], torch.backends.cudnn.benchmark,
                               f"seq {s.seq_len}, batch {s.per_device_batch}x{s.grad_accum}/device, {plan.precision}, "
                               f"slowest-rank harness {max(statistics.median(x) for x in allh):.1f} ms, "
                               f"bare {max(statistics.median(x) for x in allb):.1f} ms"))



def _lora_case(result: dict):
    """(spec, system, LoRA settings, plan) of a LoRA result."""
    from accelbench.experiments.lora.settings import LoraSettings, plan_run

    spec = {k: v for k, v in result["config"].items() if k != "plan"}
    system = _system(spec)
    s = LoraSettings(**{**spec["settings"], "target_modules": tuple(spec["settings"]["target_modules"])})
    return spec, system, s, plan_run(spec["strategy"], spec["devices"], spec["attention"], system, s)


def lora_bare(spec: dict, system, plan, s, rank: int, world: int, local: int, ddp_kwargs: dict | None = None,
              fused: bool | None = None):
    """The bare LoRA step of a rule's spec: same model (random init on the device for ``source: random``), attention,
    LoRA, dtype and autocast; DDP when ``world > 1`` (``ddp_kwargs``); fused AdamW on the adapters; ``grad_accum``
    micro-batches of random token ids drawn on the device (``no_sync`` but the last); gradient clipping. The
    process group must exist when ``world > 1``. ``fused``: fused AdamW (None = on CUDA only). Returns
    ``(step, model)``."""
    import torch

    from accelbench.experiments.lora.model import apply_lora, set_attention
    from accelbench.models.llm import load_causal_lm

    cuda = system.backend == "cuda"
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(local)
    random_on_device = spec["model"].get("source") == "random" and cuda
    with torch.device(dev) if random_on_device else contextlib.nullcontext():
        lm = load_causal_lm(dict(spec["model"]), dtype="bfloat16" if plan.precision == "bf16" and cuda else "float32")
    model = lm.model.to(dev)
    set_attention(model, plan)
    model.config.use_cache = False
    torch.manual_seed(s.seed)
    model, _ = apply_lora(model, s)
    model.train()
    net = (torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None, **(ddp_kwargs or {}))
           if world > 1 else model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=s.lr, **({"fused": True} if (cuda if fused is None else fused) else {}))
    vocab = min(model.config.vocab_size, 49152)
    g = torch.Generator(device=dev).manual_seed(s.seed + rank)
    dtype = torch.bfloat16 if plan.precision == "bf16" else None

    def step():
        for micro in range(s.grad_accum):
            ids = torch.randint(0, vocab, (s.per_device_batch, s.seq_len), device=dev, generator=g)
            ctx = net.no_sync() if world > 1 and micro < s.grad_accum - 1 else contextlib.nullcontext()
            with ctx, torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
                loss = net(input_ids=ids, labels=ids).loss / s.grad_accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, net

