"""Harness overhead: the rule's measured step vs a minimal bare loop of the same model, shapes and settings.

For each product result (a ``result.json`` written by the rule, whose ``config`` is the rule's exact spec), this
runs, in one process run (under torchrun for multi-device cases, with the product's own launcher settings from
:mod:`accelbench.launch`):

* ``harness``: the step the rule times, built and timed by the experiment's own code (Study A:
  ``unet3d_profile.Workload.train_step`` + ``measure.time_steps``; SR3: ``sr3_scaling.Trainer.train_step`` +
  ``measure.time_steps``, per-iteration max over ranks; LoRA: ``lora.train.train_rank``, i.e. the HF Trainer
  with the step-timer callback);
* ``bare``: a plain PyTorch loop written here (model from the same builder, same shapes, dtype, math mode, cuDNN
  autotuning, optimizer; CUDA events per step; DDP where the rule uses DDP),

and appends one CSV row per case: ``harness_ms``, ``bare_ms`` and ``harness_over_bare`` (goal <= 1.03), with the
device count, settings and rank thread placement. Efficiency rows (time at 1 device / time at N, weak scaling at a
fixed per-device batch) are added for SR3 and LoRA when both device counts are present. A benchmark writes
numbers; it asserts nothing.

Usage (on the accelerator node, after the product's rules ran; paths of the rule's results and inputs)::

    python benchmarks/harness_overhead.py study-a --result R/unet3d_profile/whole_head/baseline_autotuned/result.json \\
        --image resources/mri/..._image.nii.gz --mask ..._mask.nii.gz --csv benchmarks/harness_overhead_h200.csv
    python benchmarks/harness_overhead.py sr3 --result R/sr3_scaling/fp32/devices_2/result.json --data resources/sky/sr3_paper.npz --csv ...
    python benchmarks/harness_overhead.py lora --result R/lora_finetune/llama31_8b/flash/ddp/n2/result.json --csv ...

DDP profile (``ddp-profile``): the bare loop of a LoRA or SR3 result in one torchrun job per rank count (default
``--nprocs 1,2``), per rank and DDP variant (default; ``gradient_as_bucket_view``; ``static_graph`` +
``gradient_as_bucket_view``, recorded as not run with gradient accumulation; one bucket via a huge
``bucket_cap_mb``): step time (CUDA events, median of ``--repeat``), then ``--profiled`` steps under torch.profiler
(CUDA kernels) giving device busy time (union of kernels/copies), NCCL kernel time, exposed communication (NCCL time
not overlapped by compute kernels), device idle time in the step, kernels per step and host time per step; one CSV
row per (rank count, variant, rank) in ``benchmarks/ddp_profile_h200.csv`` with settings, device, threads per rank
and UTC time. On the 2-GPU node, after the product's rules wrote these results::

    NCCL_NVLS_ENABLE=0 python benchmarks/harness_overhead.py ddp-profile --experiment lora \
        --result results/h200/lora_finetune/llama31_8b/flash/ddp/n2/result.json --nprocs 1,2 --warmup 3 --repeat 10
    NCCL_NVLS_ENABLE=0 python benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
        --result results/h200/sr3_scaling/fp32/devices_2/result.json --data resources/sky/sr3_paper.npz --nprocs 1,2

Host overhead of the LoRA Trainer step (``host-overhead``, on any CPU machine; no result.json needed): the GPU step at
Llama-3.1-8B shape is host/launch-bound (9590 kernels per step, the GPU busy 149 ms of 239 ms), so every host
millisecond the Trainer adds shows. This runs, in one process on 1 CPU thread, a random-init Llama of ``--layers``
decoder layers of width 64 (vocabulary 256, word-level tokenizer of the pydoc pairs; device work small and the same on
both sides) through the product's ``train_rank`` (Trainer, step-timer window and step-to-step loop time; also with
``LossCurveMixin.fast_host_step`` off, i.e. Trainer's own per-step module walks) and through :func:`lora_bare`
(same spec, grad_accum 2, micro-batch 2), alternated ``--rounds`` times; median, p10, p90 per optimizer step and the
differences go to ``benchmarks/harness_overhead_host_cpu.csv``; a cProfile of the timed Trainer steps, split into the
Trainer's parts (:data:`TRAINER_PARTS`) against the bare loop's, to ``..._attribution.csv``::

    python benchmarks/harness_overhead.py host-overhead --layers 32   # 32 = Llama-3.1-8B's decoder layer count
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

FIELDS = ["experiment", "case", "devices", "harness_ms", "bare_ms", "harness_over_bare", "product_ms", "steps",
          "threads_per_rank", "cudnn_benchmark", "settings", "device", "when"]


def _append(csv_path: str, row: dict, fields: list[str] = FIELDS) -> None:
    """Append ``row`` (its ``fields``) to ``csv_path``, writing the header first for a new file; echo it as JSON."""
    new = not Path(csv_path).exists()
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        if new:
            w.writeheader()
        w.writerow({k: row.get(k) for k in fields})
    print(json.dumps({k: row.get(k) for k in fields}), flush=True)


def _system(spec: dict):
    from accelbench.harness import system_from

    return system_from(spec)


def _dev() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _empty_cache() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _events_loop(step, warmup: int, repeat: int) -> list[float]:
    """CUDA-event time (ms) of each of ``repeat`` calls of ``step`` after ``warmup`` untimed calls (CPU smoke runs:
    the host clock)."""
    import torch

    for _ in range(warmup):
        step()
    if not torch.cuda.is_available():
        out = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            step()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    torch.cuda.synchronize()
    pairs = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        pairs.append((a, b))
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in pairs]


def _torchrun(n: int, argv: list[str], threads: int) -> None:
    """Run ``argv`` (this script's rank subcommand) on ``n`` torchrun ranks, each with its share of ``threads``;
    exit with the job's status if it fails."""
    from accelbench import launch

    proc = launch.run(launch.torchrun_command(n, [__file__, *argv]), env=launch.rank_env(threads, n))
    if proc.returncode:
        sys.exit(proc.returncode)


def _row(experiment, case, devices, harness, bare, product, steps, threads, benchmark, settings):
    import torch

    return {"experiment": experiment, "case": case, "devices": devices, "harness_ms": round(harness, 3),
            "bare_ms": round(bare, 3), "harness_over_bare": round(harness / bare, 4),
            "product_ms": round(product, 3) if product else None, "steps": steps, "threads_per_rank": threads,
            "cudnn_benchmark": benchmark, "settings": settings,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# --------------------------------------------------------------------------- Study A
def study_a(args) -> None:
    import torch
    import torch.nn.functional as F

    from accelbench import measure
    from accelbench.data.mri import load_case
    from accelbench.devices import Device
    from accelbench.experiments import unet3d_profile as exp

    result = json.loads(Path(args.result).read_text())
    spec = result["config"]
    system = _system(spec)
    settings = exp.resolve_settings(spec["model"], spec["presets"], system.scale, spec.get("scales", {}))
    variant = exp.VARIANTS[spec["configuration"]]
    image, mask = load_case(args.image, args.mask, settings.image_channels, settings.mask_channels)
    device = Device(system.backend)
    warmup, repeat = args.warmup, args.repeat
    seed = spec["run"]["seed"]

    def harness() -> float:
        torch.manual_seed(seed)
        with exp.math_mode(variant.tf32, variant.cudnn_benchmark):
            w = exp.Workload(exp.build_unet(settings), settings, variant, device, image, mask, seed)
            t = measure.time_steps(w.train_step, device, warmup, repeat, desc="harness")
        del w
        return t.median

    def bare() -> float:
        torch.manual_seed(seed)
        with exp.math_mode(variant.tf32, variant.cudnn_benchmark):
            fmt = torch.channels_last_3d if variant.channels_last_3d else torch.contiguous_format
            model = exp.build_unet(settings).to(_dev(), memory_format=fmt)
            net = torch.compile(model, mode=variant.compile_mode) if variant.compile else model
            opt = torch.optim.Adam(model.parameters(), lr=settings.lr,
                                   **({"fused": True} if variant.fused_adam else {}))
            sched = exp.build_scheduler(settings)
            x0 = image.to(_dev()).contiguous(memory_format=fmt)
            m = mask.to(_dev()).contiguous(memory_format=fmt)
            dtype = torch.bfloat16 if variant.autocast == "bf16" else None

            def step():
                t = torch.randint(0, settings.timesteps, (1,), device=_dev())
                noise = torch.randn_like(x0)
                x_t = sched.add_noise(original_samples=x0, noise=noise, timesteps=t)
                with torch.autocast(_dev(), dtype=dtype, enabled=dtype is not None):
                    pred = net(torch.cat([x_t, m], dim=1), t).float()
                F.l1_loss(pred, noise).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            samples = _events_loop(step, warmup, repeat)
        del model, net, opt
        return statistics.median(samples)

    h = harness()
    _empty_cache()
    b = bare()
    product = result["measurements"]["train_step"]["median"] if result["status"] == "ok" else None
    _append(args.csv, _row("study_a", spec["configuration"], 1, h, b, product, repeat, torch.get_num_threads(),
                           variant.cudnn_benchmark, f"{settings.preset} {'x'.join(map(str, settings.volume))}, "
                                                    f"{variant.precision}, compile={variant.compile}"))


# --------------------------------------------------------------------------- SR3 (one process per rank)
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
    from accelbench.experiments import sr3_scaling as exp

    placement = launch.place_this_rank()
    result = json.loads(Path(args.result).read_text())
    spec = result["config"]
    system = _system(spec)
    s = exp.resolve_settings(spec["preset"], system.scale, spec.get("scales", {}))
    n, precision, seed = int(spec["devices"]), spec["precision"], spec["run"]["seed"]
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
    tr = exp.Trainer(s, device, ds, precision, seed, rank, world, distributed=world > 1, ddp=spec.get("ddp"))
    if world > 1:
        dist.barrier()
    t = measure.time_steps(tr.train_step, device, args.warmup, args.repeat, desc=f"rank {rank} harness")
    harness = gathered_max(t.samples)
    del tr
    _empty_cache()

    # bare: DDP U-Net, Adam, batches from the same patches already on the device
    step, _ = sr3_bare(s, ds, dev, precision, seed, rank, world, local if system.backend == "cuda" else None,
                       exp.ddp_kwargs(spec.get("ddp")))
    if world > 1:
        dist.barrier()
    bare = gathered_max(_events_loop(step, args.warmup, args.repeat))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        m = result["measurements"]
        _append(args.csv, _row("sr3", f"{precision}", n, harness, bare,
                               m["iteration"]["median"] if result["status"] == "ok" else None, args.repeat,
                               placement["threads"], torch.backends.cudnn.benchmark,
                               f"{m.get('parameters')} params, batch {s.batch_size}/device, {s.hr_size} px"))


def sr3_bare(s, ds, dev, precision: str, seed: int, rank: int, world: int, device_id: int | None,
             ddp_kwargs: dict | None = None):
    """The bare SR3 training step: U-Net (DDP when ``world > 1``, with ``ddp_kwargs``), Adam, batches drawn from the
    patches already on the device. Returns ``(step, model)``."""
    import torch
    import torch.nn.functional as F

    from accelbench.experiments import sr3_scaling as exp

    torch.manual_seed(seed)
    model = exp.build_unet(s).to(dev)
    ids = [device_id] if device_id is not None else None
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **(ddp_kwargs or {})) if world > 1 else model
    opt = torch.optim.Adam(model.parameters(), lr=s.lr)
    sched = exp.build_scheduler(s, float64=False)
    cond_all, target_all = ds.cond.to(dev), ds.target.to(dev)
    dtype = torch.bfloat16 if precision == "bf16" else None
    g = torch.Generator(device=dev).manual_seed(seed + rank)

    def step():
        idx = torch.randint(0, ds.n, (s.batch_size,), device=dev, generator=g)
        cond, target = cond_all[idx], target_all[idx]
        tt = torch.randint(0, s.timesteps, (s.batch_size,), device=dev, generator=g)
        noise = torch.randn(target.shape, device=dev, generator=g)
        x_t = sched.add_noise(original_samples=target, noise=noise, timesteps=tt)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            pred = net(torch.cat([cond, x_t], dim=1), tt).float()
        F.l1_loss(pred, noise).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, net


# --------------------------------------------------------------------------- LoRA (one process per rank)
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


def _ranks() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


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


# --------------------------------------------------------------------------- DDP profile of the bare loop
PROFILE_FIELDS = ["experiment", "case", "devices", "rank", "variant", "ddp_kwargs", "step_ms", "step_ms_profiled",
                  "window_ms", "gpu_busy_ms", "compute_ms", "nccl_ms", "exposed_comm_ms", "gpu_idle_ms",
                  "kernels_per_step", "host_launch_ms", "steps", "profiled_steps", "threads_per_rank", "settings",
                  "device", "note", "when"]
ONE_BUCKET_MB = 100_000  # larger than any model's gradients here: DDP then all-reduces them in one bucket


def union(intervals) -> list[tuple[float, float]]:
    """Merged, sorted union of ``(start, end)`` intervals (any unit; empty or reversed intervals dropped)."""
    out: list[list[float]] = []
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def covered(intervals) -> float:
    """Total length of the union of ``intervals`` (overlaps counted once)."""
    return sum(b - a for a, b in union(intervals))


def overlap(a, b) -> float:
    """Length of the time covered by both interval sets ``a`` and ``b`` (each merged first)."""
    ua, ub = union(a), union(b)
    i = j = 0
    total = 0.0
    while i < len(ua) and j < len(ub):
        lo, hi = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        total += max(0.0, hi - lo)
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return total


def not_overlapped(a, b) -> float:
    """Length of the time covered by ``a`` and not by ``b``: e.g. communication kernels (``a``) not hidden behind
    compute kernels (``b``) = exposed communication."""
    return covered(a) - overlap(a, b)


def device_intervals(trace_events: list[dict]) -> tuple[list, list]:
    """(all device activity, NCCL kernels) as ``(start_us, end_us)`` lists from a Chrome trace's ``traceEvents``
    (torch.profiler/Kineto): kernels, memcpy and memset; NCCL kernels by name (``nccl...``)."""
    busy, comm = [], []
    for e in trace_events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        iv = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        busy.append(iv)
        if e["cat"] == "kernel" and "nccl" in str(e.get("name", "")).lower():
            comm.append(iv)
    return busy, comm


def profile_metrics(trace_events: list[dict], steps: int) -> dict:
    """Per-step device metrics (ms) of ``steps`` back-to-back profiled steps: the device window (first activity's
    start to last activity's end), busy time (union of kernels/copies), compute (non-NCCL) and NCCL kernel time,
    exposed communication (NCCL time not overlapped by compute), device idle within the window, kernel count.
    All None where the trace has no device activity (CPU runs)."""
    busy, comm = device_intervals(trace_events)
    if not busy:
        return {k: None for k in ("window_ms", "gpu_busy_ms", "compute_ms", "nccl_ms", "exposed_comm_ms",
                                  "gpu_idle_ms", "kernels_per_step")}
    comm_set = set(comm)
    compute = [iv for iv in busy if iv not in comm_set]
    window = max(b for _, b in busy) - min(a for a, _ in busy)
    per = lambda us: round(us / 1e3 / steps, 4)  # noqa: E731  (µs over all steps -> ms per step)
    n_kernels = sum(1 for e in trace_events if e.get("ph") == "X" and e.get("cat") == "kernel")
    return {"window_ms": per(window), "gpu_busy_ms": per(covered(busy)), "compute_ms": per(covered(compute)),
            "nccl_ms": per(covered(comm)), "exposed_comm_ms": per(not_overlapped(comm, compute)),
            "gpu_idle_ms": per(window - covered(busy)), "kernels_per_step": round(n_kernels / steps, 1)}


STATIC_GRAPH_NO_SYNC = ("not run: DDP static_graph with no_sync gradient accumulation fails in the reducer "
                        "(torch 2.13: 'expect_autograd_hooks_ INTERNAL ASSERT FAILED', found on CPU/gloo)")


def ddp_variants(world: int, grad_accum: int = 1) -> list[tuple[str, dict, str | None]]:
    """The DDP options compared on the bare loop, as ``(name, DDP kwargs, reason not run)``; on one rank only
    ``no_ddp`` (no wrapper). ``static_graph`` is not run with gradient accumulation (:data:`STATIC_GRAPH_NO_SYNC`)."""
    if world == 1:
        return [("no_ddp", {}, None)]
    return [("default", {}, None), ("bucket_view", {"gradient_as_bucket_view": True}, None),
            ("static_graph+bucket_view", {"static_graph": True, "gradient_as_bucket_view": True},
             STATIC_GRAPH_NO_SYNC if grad_accum > 1 else None),
            ("one_bucket", {"bucket_cap_mb": ONE_BUCKET_MB}, None)]


def profile_step(step, warmup: int, repeat: int, profiled: int, cuda: bool) -> dict:
    """Warm up, time ``repeat`` steps (CUDA events; host clock on CPU), then profile ``profiled`` back-to-back steps
    with torch.profiler (CUDA activity: kernels, copies; CPU activity on CPU runs) and return step times, host time
    per step (the Python call of ``step``, not waiting for the device) and :func:`profile_metrics`."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    step_ms = statistics.median(_events_loop(step, warmup, repeat))
    acts = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]  # device kernels; host time from the clock
    host, pairs = [], []
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        for _ in range(profiled):
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            t0 = time.perf_counter()
            step()
            host.append((time.perf_counter() - t0) * 1e3)
            if cuda:
                b.record()
                pairs.append((a, b))
        if cuda:
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    profiled_ms = [a.elapsed_time(b) for a, b in pairs] if cuda else host
    return {"step_ms": round(step_ms, 3), "step_ms_profiled": round(statistics.median(profiled_ms), 3),
            "host_launch_ms": round(statistics.median(host), 3), **profile_metrics(events, profiled)}


def ddp_profile(args) -> None:
    """One torchrun job per rank count in ``--nprocs`` running :func:`ddp_profile_rank`."""
    data = ["--data", args.data] if args.data else []
    for n in [int(x) for x in str(args.nprocs).split(",") if x]:
        _torchrun(n, ["ddp-profile-rank", "--experiment", args.experiment, "--result", args.result, "--csv", args.csv,
                      "--threads", str(args.threads), "--warmup", str(args.warmup), "--repeat", str(args.repeat),
                      "--profiled", str(args.profiled), *data], args.threads)


def ddp_profile_rank(args) -> None:
    """Bare loop of a LoRA or SR3 result under each DDP variant (:func:`ddp_variants`) on this torchrun job's ranks;
    each rank's :func:`profile_step` numbers are gathered and rank 0 appends one CSV row per (variant, rank)."""
    import torch
    import torch.distributed as dist

    from accelbench import launch

    placement = launch.place_this_rank()
    result = json.loads(Path(args.result).read_text())
    rank, world, local = _ranks()
    if args.experiment == "lora":
        spec, system, s, plan = _lora_case(result)
        case = f"{spec['model_name']} {spec['attention']}"
        settings = f"seq {s.seq_len}, batch {s.per_device_batch}x{s.grad_accum}/device, {plan.precision}"
    else:
        from accelbench.data import sky
        from accelbench.experiments import sr3_scaling as exp

        spec = result["config"]
        system = _system(spec)
        s = exp.resolve_settings(spec["preset"], system.scale, spec.get("scales", {}))
        data = sky.load(args.data)
        ds = exp.PatchSet(data["train_hr"], data["train_lr"], s.hr_size, min_len=world * s.batch_size)
        case = spec["precision"]
        settings = f"batch {s.batch_size}/device, {s.hr_size} px, {spec['precision']}"
    cuda = system.backend == "cuda"
    if cuda:
        torch.cuda.set_device(local)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    rows = []
    for variant, kw, not_run in ddp_variants(world, s.grad_accum if args.experiment == "lora" else 1):
        row = {"experiment": args.experiment, "case": case, "devices": world, "rank": rank, "variant": variant,
               "ddp_kwargs": json.dumps(kw, sort_keys=True), "steps": args.repeat, "profiled_steps": args.profiled,
               "threads_per_rank": placement["threads"], "settings": settings,
               "device": torch.cuda.get_device_name(local) if cuda else "cpu"}
        if not_run:
            rows.append({**row, "note": not_run, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            continue
        if args.experiment == "lora":
            step, net = lora_bare(spec, system, plan, s, rank, world, local, kw)
        else:
            dev = torch.device("cuda", local) if cuda else torch.device("cpu")
            step, net = sr3_bare(s, ds, dev, spec["precision"], spec["run"]["seed"], rank, world,
                                 local if cuda else None, kw)
        if world > 1:
            dist.barrier()
        m = profile_step(step, args.warmup, args.repeat, args.profiled, cuda)
        rows.append({**row, **m, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        del step, net
        _empty_cache()
    allrows = [rows]
    if world > 1:
        allrows = [None] * world
        dist.all_gather_object(allrows, rows)
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        new = not Path(args.csv).exists()
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        with open(args.csv, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=PROFILE_FIELDS, lineterminator="\n")
            if new:
                w.writeheader()
            for i in range(len(rows)):
                for r in allrows:
                    w.writerow({k: r[i].get(k) for k in PROFILE_FIELDS})
                    print(json.dumps({k: r[i].get(k) for k in PROFILE_FIELDS}), flush=True)


# --------------------------------------------------------------------------- host overhead of the Trainer step (CPU)
HOST_FIELDS = ["side", "clock", "median_ms", "p10_ms", "p90_ms", "steps", "rounds", "layers", "hidden", "vocab", "seq_len",
               "batch", "precision", "threads", "settings", "device", "versions", "when"]
ATTRIBUTION_FIELDS = ["layers", "fast_host_step", "part", "trainer_ms_per_step", "bare_ms_per_step",
                      "extra_ms_per_step", "trainer_calls_per_step", "where", "note"]


def _parts() -> list[tuple[str, object, str, str, str]]:
    """The timed parts of a step: ``(label, owner, attribute, side, note)``; side ``both`` (the same function runs in
    the Trainer step and the bare loop), ``trainer`` or ``bare``. Indented labels are inside the part above them."""
    import torch
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer
    from accelerate.utils.operations import ConvertOutputsToFp32
    from peft import PeftModelForCausalLM
    from torch.optim.lr_scheduler import LRScheduler
    from transformers import Trainer
    from transformers.trainer_callback import CallbackHandler

    from accelbench.experiments.lora.trainer import LossCurveMixin

    return [
        ("get_batch_samples (dataloader, collator, device placement, token count)", Trainer, "get_batch_samples",
         "trainer", "before on_step_begin: outside the product's step window"),
        ("  _get_num_items_in_batch", Trainer, "_get_num_items_in_batch", "trainer",
         "labels[..., 1:].ne(-100).sum() per micro-batch"),
        ("training_step x grad_accum", Trainer, "training_step", "trainer", "forward + backward and Trainer's wrapping"),
        ("  model.train() (Module.train, outermost calls)", torch.nn.Module, "train", "trainer",
         "Trainer: before every micro-batch, a walk over every module"),
        ("  _prepare_inputs", Trainer, "_prepare_inputs", "trainer", ".to(device) of the batch"),
        ("  compute_loss", Trainer, "compute_loss", "trainer", "incl. the forward"),
        ("    accelerate forward wrapper (autocast, outputs to fp32)", ConvertOutputsToFp32, "__call__", "trainer",
         "incl. the model forward; converts the logits to fp32"),
        ("    model forward (PeftModelForCausalLM.forward)", PeftModelForCausalLM, "forward", "both",
         "bare: under torch.autocast"),
        ("  accelerator.backward", Accelerator, "backward", "trainer", "incl. autograd"),
        ("    autograd backward (torch.autograd.backward)", torch.autograd, "backward", "both", ""),
        ("floating_point_ops (LossCurveMixin)", LossCurveMixin, "floating_point_ops", "trainer", "state.total_flos"),
        ("_clip_grad_norm (LossCurveMixin, then Trainer's)", LossCurveMixin, "_clip_grad_norm", "trainer",
         "fast_host_step: the parameters that require gradients; else model.parameters() (frozen ones too)"),
        ("  torch.nn.utils.clip_grad_norm_", torch.nn.utils, "clip_grad_norm_", "both", "bare: adapter parameters"),
        ("_get_grad_norm", Trainer, "_get_grad_norm", "trainer", ""),
        ("optimizer.step (AcceleratedOptimizer)", AcceleratedOptimizer, "step", "trainer", "incl. the torch optimizer"),
        ("  AdamW step (torch.optim.AdamW.step)", torch.optim.AdamW, "step", "both", "fused AdamW on both sides"),
        ("_get_learning_rate", Trainer, "_get_learning_rate", "trainer", ""),
        ("lr_scheduler.step", LRScheduler, "step", "trainer", "constant_with_warmup (LambdaLR)"),
        ("model.zero_grad (Module.zero_grad)", torch.nn.Module, "zero_grad", "trainer",
         "Trainer: a walk over every parameter; fast_host_step: a cached list (not timed here, ~0.03 ms)"),
        ("optimizer.zero_grad (bare)", torch.optim.Optimizer, "zero_grad", "bare", "adapter parameters"),
        ("callbacks (CallbackHandler.call_event)", CallbackHandler, "call_event", "trainer",
         "StepTimer, DefaultFlowCallback, ProgressCallback (tqdm)"),
        ("_maybe_log_save_evaluate", Trainer, "_maybe_log_save_evaluate", "trainer", "log/save/eval checks"),
    ]


class PartTimers:
    """Thread-CPU time and calls of each part of :func:`_parts` while enabled (wrappers set on the owners' attributes,
    outermost calls only; about 1 us per call). ``enable``/``disable`` as a ``cProfile.Profile``; ``restore`` puts
    the originals back."""

    def __init__(self, parts):
        self.on = False
        self.ms = {p[0]: 0.0 for p in parts}
        self.calls = {p[0]: 0 for p in parts}
        self._saved = []
        for label, owner, attr, _side, _note in parts:
            orig = owner.__dict__.get(attr) or getattr(owner, attr)  # own or inherited (optimizers: hooked)
            self._saved.append((owner, attr, orig))
            setattr(owner, attr, self._wrap(label, orig))

    def _wrap(self, label, orig):
        import functools

        depth = [0]
        timers = self

        @functools.wraps(orig)
        def wrapped(*a, **k):
            if not timers.on or depth[0]:
                depth[0] += 1
                try:
                    return orig(*a, **k)
                finally:
                    depth[0] -= 1
            depth[0] += 1
            t0 = time.thread_time()
            try:
                return orig(*a, **k)
            finally:
                timers.ms[label] += (time.thread_time() - t0) * 1e3
                timers.calls[label] += 1
                depth[0] -= 1
        return wrapped

    def enable(self):
        self.on = True

    def disable(self):
        self.on = False

    def restore(self):
        for owner, attr, orig in reversed(self._saved):
            setattr(owner, attr, orig)


def percentiles(samples: list[float]) -> dict:
    """Median, 10th and 90th percentile (ms, 3 decimals) of per-step samples (linear interpolation between order
    statistics, as ``statistics.quantiles(method="inclusive")``); one sample gives that sample for all three."""
    if not samples:
        raise ValueError("no samples")
    if len(samples) == 1:
        v = round(float(samples[0]), 3)
        return {"median_ms": v, "p10_ms": v, "p90_ms": v}
    q = statistics.quantiles(samples, n=10, method="inclusive")
    return {"median_ms": round(statistics.median(samples), 3), "p10_ms": round(q[0], 3), "p90_ms": round(q[-1], 3)}


def tiny_tokenizer(folder: str, vocab: int) -> str:
    """A word-level tokenizer of the ``vocab - 2`` most frequent words of the pydoc instruction pairs (+ ``<unk>``,
    ``<eos>``), saved as a transformers tokenizer folder (offline; for a tiny-vocabulary random-init model)."""
    from collections import Counter

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from accelbench.experiments.lora.data import build_pairs, format_pair

    words = Counter(w for p in build_pairs("pydoc") for w in format_pair(p).split())
    table = {"<unk>": 0, "<eos>": 1}
    for w, _ in words.most_common(vocab - 2):
        table[w] = len(table)
    tok = Tokenizer(models.WordLevel(table, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(folder)
    return folder


def tiny_lora_spec(layers: int, hidden: int, vocab: int, seq_len: int, precision: str, warmup: int, timed: int,
                   tokenizer: str) -> dict:
    """A ``lora_finetune`` rule spec (single, flash = SDPA, CPU system) for a random-init Llama of ``layers`` decoder
    layers of width ``hidden`` (4 heads, 2 KV heads, MLP 2 x hidden) with Study B's LoRA and trainer settings but
    ``seq_len``, ``precision`` and the step counts given."""
    from accelbench.experiments.lora.settings import LoraSettings
    from accelbench.systems import load_systems

    system = load_systems(Path(__file__).resolve().parents[1] / "config" / "systems")["cpu"]
    s = LoraSettings(seq_len=seq_len, precision=precision, warmup_steps=warmup, timed_steps=timed, eval_blocks=2)
    return {"settings": s.to_dict(), "data": {"source": "pydoc"}, "model_name": f"tiny_llama_{layers}x{hidden}",
            "attention": "flash", "strategy": "single", "devices": 1, "system": system.to_dict(),
            "model": {"source": "random", "name": f"tiny Llama {layers}x{hidden}", "tokenizer": tokenizer,
                      "config": {"model_type": "llama", "hidden_size": hidden, "intermediate_size": 2 * hidden,
                                 "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
                                 "vocab_size": vocab}}}


def _clocks() -> tuple[float, float]:
    """(wall, this thread's CPU time) in seconds: with 1 torch thread the CPU step runs in this thread (autograd runs
    CPU backward in the calling thread), so its CPU time is the step's host time without the time other processes
    on the machine took the core."""
    return time.perf_counter(), time.thread_time()


def _trainer_run(spec, system, plan, s, profiler=None) -> dict:
    """The product's Trainer run (``train_rank``) with per-step clocks of its timed steps: ``window`` (the step
    timer's window: ``on_step_begin`` to ``on_step_end``; wall = the product's own samples) and ``loop`` (one
    ``on_step_begin`` to the next: the whole loop per step, batch fetching included; ``timed - 1`` samples), each as
    wall and thread-CPU ms: ``{"window_wall", "window_cpu", "loop_wall", "loop_cpu"}``. With a ``cProfile.Profile``,
    it profiles from the first timed step's begin to the last timed step's end."""
    from accelbench.experiments.lora import train as lora_train  # where train_rank looks make_step_timer up

    begins, ends = [], []
    real = lora_train.make_step_timer
    last = s.warmup_steps + s.timed_steps

    def timer(device, world):
        t = real(device, world)
        begin, end = t.on_step_begin, t.on_step_end

        def on_step_begin(args, state, control, **kw):
            out = begin(args, state, control, **kw)
            if state.global_step >= s.warmup_steps:
                begins.append(_clocks())
                if profiler is not None and state.global_step == s.warmup_steps:
                    profiler.enable()
            return out

        def on_step_end(args, state, control, **kw):
            if state.global_step > s.warmup_steps:  # global_step is already the finished step's number + 1
                ends.append(_clocks())
            if state.global_step == last and profiler is not None:
                profiler.disable()
            return end(args, state, control, **kw)
        t.on_step_begin, t.on_step_end = on_step_begin, on_step_end
        return t
    lora_train.make_step_timer = timer
    try:
        out = lora_train.train_rank(spec, system, plan, threads=1)
    finally:
        lora_train.make_step_timer = real
    if out["status"] != "ok":
        raise SystemExit(f"Trainer run: {out['status']}: {out['reason']}")
    ms = lambda pairs, i: [(b[i] - a[i]) * 1e3 for a, b in pairs]  # noqa: E731
    return {"window_wall": out["measurements"]["step_samples_ms"][s.warmup_steps:],
            "window_cpu": ms(list(zip(begins, ends)), 1),
            "loop_wall": ms(list(zip(begins, begins[1:])), 0), "loop_cpu": ms(list(zip(begins, begins[1:])), 1)}


def _bare_run(step, warmup: int, repeat: int) -> dict:
    """``{"wall", "cpu"}`` ms of each of ``repeat`` calls of ``step`` after ``warmup`` (CPU: no device to wait for)."""
    for _ in range(warmup):
        step()
    wall, cpu = [], []
    for _ in range(repeat):
        a = _clocks()
        step()
        b = _clocks()
        wall.append((b[0] - a[0]) * 1e3)
        cpu.append((b[1] - a[1]) * 1e3)
    return {"wall": wall, "cpu": cpu}


def host_overhead(args) -> None:
    """Host time per optimizer step of the product's Trainer step (``train_rank``) vs the bare loop
    (:func:`lora_bare`), same tiny model and settings, on the CPU with 1 thread (device work negligible, so the step
    time is host time). Appends rows to ``--csv`` and the cProfile attribution to ``<csv stem>_attribution.csv``."""
    import cProfile
    import pstats
    import tempfile

    import torch
    import transformers

    import accelerate

    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    tok_dir = tiny_tokenizer(tempfile.mkdtemp(prefix="accelbench_tok_"), args.vocab)
    spec = tiny_lora_spec(args.layers, args.hidden, args.vocab, args.seq_len, args.precision, args.warmup,
                          args.repeat, tok_dir)
    spec, system, s, plan = _lora_case({"config": spec})
    fused = args.fused
    from accelbench.experiments.lora.trainer import LossCurveMixin

    modes = [True, False] if args.before else [True]  # the product's fast host step, then Trainer's own walks
    samples: dict[str, list[float]] = {}

    def trainer(mode: bool) -> None:
        LossCurveMixin.fast_host_step = mode
        tag = "" if mode else " (fast_host_step off)"
        try:
            for k, v in _trainer_run(spec, system, plan, s).items():
                side, clock = k.split("_")
                samples.setdefault((f"trainer_{side}{tag}", clock), []).extend(v)
        finally:
            LossCurveMixin.fast_host_step = True
        _empty_cache()

    def bare() -> None:
        step, net = lora_bare(spec, system, plan, s, 0, 1, 0, fused=fused)
        for clock, v in _bare_run(step, s.warmup_steps, s.timed_steps).items():
            samples.setdefault(("bare", clock), []).extend(v)
        del step, net
        _empty_cache()

    runs = [lambda m=m: trainer(m) for m in modes] + [bare]
    for r in range(args.rounds):  # interleaved, order reversed every other round: drift and load hit all sides
        for run in (runs if r % 2 == 0 else runs[::-1]):
            run()
    versions = f"torch {torch.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}"
    common = {"steps": s.timed_steps, "rounds": args.rounds, "layers": args.layers, "hidden": args.hidden,
              "vocab": args.vocab, "seq_len": s.seq_len, "batch": f"{s.per_device_batch}x{s.grad_accum}",
              "precision": plan.precision, "threads": torch.get_num_threads(), "device": f"cpu: {_cpu_name()}",
              "versions": versions}
    settings = (f"LoRA r{s.r} q/v, bare AdamW fused={fused}, Trainer optim {_trainer_optim(s, plan)}, "
                f"clip {s.max_grad_norm}, attention {plan.attn_implementation}; host load average "
                f"{load_start:.2f} at start, {os.getloadavg()[0]:.2f} at end, {os.cpu_count()} cores"
                + (f"; {args.note}" if args.note else ""))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    stats = {k: percentiles(v) for k, v in samples.items()}
    for (side, clock), v in stats.items():
        _append(args.csv, fields=HOST_FIELDS,
                row={"side": side, "clock": clock, **v, **common, "settings": settings, "when": now})
    for (side, clock) in [k for k in stats if k[0] != "bare"]:
        diff = {k: round(stats[(side, clock)][k] - stats[("bare", clock)][k], 3) for k in ("median_ms", "p10_ms", "p90_ms")}
        _append(args.csv, fields=HOST_FIELDS,
                row={"side": f"{side} - bare", "clock": clock, **diff, **common,
                     "settings": settings + "; differences of the percentiles", "when": now})

    # attribution: thread-CPU time of each part (:func:`_parts`) in one more run of each side (the Trainer with
    # fast_host_step off when --before: the step as before the change), then optionally a cProfile listing
    parts = _parts()
    LossCurveMixin.fast_host_step = not args.before
    timers = PartTimers(parts)
    try:
        trainer_clocks = _trainer_run(spec, system, plan, s, profiler=timers)
        t_ms, t_calls = dict(timers.ms), dict(timers.calls)
        step, net = lora_bare(spec, system, plan, s, 0, 1, 0, fused=fused)
        for _ in range(s.warmup_steps):
            step()
        timers.ms = {k: 0.0 for k in t_ms}
        timers.enable()
        bare_clocks = _bare_run(step, 0, s.timed_steps)
        timers.disable()
        b_ms = dict(timers.ms)
        del step, net
    finally:
        timers.restore()
        LossCurveMixin.fast_host_step = True
    n = s.timed_steps
    rows = [("step window (on_step_begin to on_step_end)", statistics.mean(trainer_clocks["window_cpu"]),
             statistics.mean(bare_clocks["cpu"]), 1.0, "-", "bare: the step call"),
            ("step loop (on_step_begin to the next)", statistics.mean(trainer_clocks["loop_cpu"]),
             statistics.mean(bare_clocks["cpu"]), 1.0, "-", f"mean of {n - 1} intervals; incl. get_batch_samples")]
    for label, owner, name, side, note in parts:
        where = f"{getattr(owner, '__module__', '')}.{getattr(owner, '__qualname__', getattr(owner, '__name__', ''))}"
        rows.append((label, t_ms[label] / n if side != "bare" else None, b_ms[label] / n if side != "trainer" else None,
                     t_calls[label] / n if side != "bare" else None, f"{where}.{name}".lstrip("."), note))
    attr = Path(args.csv).with_name(Path(args.csv).stem + "_attribution.csv")
    for label, tm, bm, calls, where, note in rows:
        _append(str(attr), fields=ATTRIBUTION_FIELDS, row={
            "layers": args.layers, "fast_host_step": not args.before, "part": label,
            "trainer_ms_per_step": round(tm, 3) if tm is not None else None,
            "bare_ms_per_step": round(bm, 3) if bm is not None else None,
            "extra_ms_per_step": round((tm or 0.0) - (bm or 0.0), 3),
            "trainer_calls_per_step": round(calls, 2) if calls is not None else None, "where": where,
            "note": "; ".join(x for x in (note, f"thread CPU ms per step, {n} steps of one run") if x)})
    if args.top:
        prof = cProfile.Profile()
        LossCurveMixin.fast_host_step = not args.before
        try:
            _trainer_run(spec, system, plan, s, profiler=prof)
        finally:
            LossCurveMixin.fast_host_step = True
        print("--- Trainer, top cumulative (timed steps) ---")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)


def _cpu_name() -> str:
    """The host CPU's model name (Linux ``/proc/cpuinfo``; else ``platform.processor()``)."""
    import platform

    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _trainer_optim(s, plan) -> str:
    """The optimizer the product's TrainingArguments give on the CPU (what ``train_rank`` trains with)."""
    import tempfile

    from transformers import TrainingArguments

    from accelbench.experiments.lora.trainer import training_arguments_kwargs

    kw = training_arguments_kwargs(plan, s, "cpu", tempfile.mkdtemp(prefix="accelbench_args_"), 1, None)
    return str(TrainingArguments(**kw).optim.value)


# --------------------------------------------------------------------------- efficiency
def efficiency(args) -> None:
    """Time at 1 device / time at N (per-device batch fixed) for the harness, the bare loop and the product; printed
    and written beside the CSV as ``<name>_efficiency.csv``. The CSV accumulates runs: each N-device row is paired
    with the 1-device row of the same experiment and model measured closest in time (the same session's run)."""
    import pandas as pd

    df = pd.read_csv(args.csv)
    df = df[~df["case"].astype(str).str.startswith("efficiency")].reset_index(drop=True)
    rows = []
    when = pd.to_datetime(df["when"], utc=True, errors="coerce")
    model = df["case"].astype(str).str.split().str[:2].str.join(" ")  # e.g. "llama31_8b flash", "fp32"
    for i, r in df[df["experiment"].isin(["sr3", "lora"]) & (df["devices"] > 1)].iterrows():
        ones = df[(df["experiment"] == r["experiment"]) & (df["devices"] == 1) & (model == model[i])]
        if ones.empty:
            continue
        one = ones.loc[(when[ones.index] - when[i]).abs().idxmin()]
        rows.append({"experiment": r["experiment"], "case": r["case"], "devices": int(r["devices"]),
                     "efficiency_harness": round(one["harness_ms"] / r["harness_ms"], 4),
                     "efficiency_bare": round(one["bare_ms"] / r["bare_ms"], 4),
                     "efficiency_product": round(one["product_ms"] / r["product_ms"], 4)
                     if pd.notna(r["product_ms"]) and pd.notna(one["product_ms"]) else None,
                     "goal": 0.95, "one_device_when": one.get("when"), "when": r.get("when")})
        print(json.dumps(rows[-1]))
    out = Path(args.csv).with_name(Path(args.csv).stem + "_efficiency.csv")
    pd.DataFrame(rows).to_csv(out, index=False)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("study-a", "sr3", "sr3-rank", "lora", "lora-rank", "efficiency", "ddp-profile", "ddp-profile-rank"):
        s = sub.add_parser(name)
        s.add_argument("--csv", required=not name.startswith("ddp-profile"),
                       default="benchmarks/ddp_profile_h200.csv" if name.startswith("ddp-profile") else None)
        if name == "efficiency":
            continue
        if name.startswith("ddp-profile"):
            s.add_argument("--experiment", required=True, choices=["lora", "sr3"])
            s.add_argument("--data", help="SR3: the rule's sky data (.npz)")
            s.add_argument("--nprocs", default="1,2", help="rank counts, one torchrun job each (comma-separated)")
            s.add_argument("--profiled", type=int, default=3, help="steps under torch.profiler (after the timed ones)")
        s.add_argument("--result", required=True, help="the product rule's result.json (its config = the rule's spec)")
        s.add_argument("--threads", type=int, default=0, help="the job's cores (0 = every usable core)")
        s.add_argument("--warmup", type=int, default=5)
        s.add_argument("--repeat", type=int, default=20)
        if name.startswith("study"):
            s.add_argument("--image", required=True)
            s.add_argument("--mask", required=True)
        if name.startswith("sr3"):
            s.add_argument("--data", required=True)
    h = sub.add_parser("host-overhead", help="host ms per optimizer step: product Trainer vs bare loop, tiny Llama, "
                                             "CPU, 1 thread")
    h.add_argument("--csv", default="benchmarks/harness_overhead_host_cpu.csv")
    h.add_argument("--layers", type=int, default=2)
    h.add_argument("--hidden", type=int, default=64)
    h.add_argument("--vocab", type=int, default=256)
    h.add_argument("--seq-len", type=int, default=32)
    h.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    h.add_argument("--warmup", type=int, default=5)
    h.add_argument("--repeat", type=int, default=20)
    h.add_argument("--rounds", type=int, default=3, help="Trainer and bare runs, alternated")
    h.add_argument("--fused", action=argparse.BooleanOptionalAction, default=True, help="bare loop: fused AdamW")
    h.add_argument("--before", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the Trainer with LossCurveMixin.fast_host_step off (Trainer's own per-step walks); "
                        "the cProfile attribution is then of that run")
    h.add_argument("--top", type=int, default=0, help="print the top N cumulative cProfile entries of both sides")
    h.add_argument("--note", default="", help="added to the settings column")
    args = p.parse_args(argv)
    {"host-overhead": host_overhead, "study-a": study_a, "sr3": sr3, "sr3-rank": sr3_rank, "lora": lora, "lora-rank": lora_rank,
     "efficiency": efficiency, "ddp-profile": ddp_profile, "ddp-profile-rank": ddp_profile_rank}[args.cmd](args)


if __name__ == "__main__":
    main()
