"""SR3 (``sr3-host-bound``): does the SR3 rule's data path cost anything, and what does its step look like when the
host, not the device, sets the pace? One process, one device. For each given result (its configuration,
:mod:`accelbench.experiments.sr3.configs`), the rule's ``Trainer`` and timer (``measure.timing.time_steps``: CUDA
events, no synchronisation inside the loop; threads: ``--threads`` or torch's default, no rank placement) in three
data paths:

* ``workers=K``: the configuration's own (ours: batches made in the process, K = 0, pinned, ``non_blocking`` copy;
  faithful: its DataLoader workers and blocking copy);
* ``device-resident``: the same Trainer, its batches drawn on the device from patches already there (no DataLoader,
  no copy: the bare loop's data path);
* ``workers=N`` (``--workers``, when it differs from K): a new Trainer with N persistent DataLoader workers (pinning
  in DataLoader's thread).

Per variant the row gives the step time (CUDA events: median, p10, p90 of ``--repeat``), the host's wall time per
step over ``--repeat`` steps with no explicit synchronisation (``host_ms``; once the launch queue is full the host
waits for the device, so this alone does not tell host-bound from device-bound) and the host time of one batch fetch
and copy after a synchronize (``next_batch_host_ms``, median). On 1 H200 (2026-12-01) the batch fetch took 0.45 ms
and batches already on the device changed nothing beyond the spread. ::

    python benchmarks/harness_overhead.py sr3-host-bound --result R/sr3_scaling/bf16/devices_1/result.json \\
        R/sr3_scaling/bf16_compile/devices_1/result.json --data resources/sky/sr3_paper.npz
"""

from __future__ import annotations

import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from accelbench.experiments.sr3.bare import device_batches, result_case
from overhead.common import _append

FIELDS = [
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


def sr3_host_bound(args) -> None:
    import torch

    from accelbench.backends.device import Device
    from accelbench.data import sky
    from accelbench.experiments.sr3 import model as exp
    from accelbench.measure import timing as measure

    data = sky.load(args.data)
    backend = "cuda" if torch.cuda.is_available() else "cpu"
    device = Device(backend, 0)
    dev = device.torch_device
    if args.threads:
        torch.set_num_threads(args.threads)
    for path in args.result:
        result = json.loads(Path(path).read_text())
        spec = result["config"]
        conf, s = result_case(result)
        torch.backends.cudnn.benchmark = conf.cudnn_benchmark
        ds = exp.PatchSet(data["train_hr"], data["train_lr"], s.hr_size, min_len=s.batch_size)
        own = conf.loader_workers or 0
        for i, workers in enumerate([conf.loader_workers] + ([args.workers] if args.workers != own else [])):
            tr = exp.Trainer(
                s,
                device,
                ds,
                conf.precision,
                spec["run"]["seed"],
                **{**conf.trainer_options(), "loader_workers": workers},
            )
            variants = [f"workers={tr.data_path['loader_workers']}"]
            if i == 0:  # the configuration's own data path, then the same Trainer's bare one
                variants.append("device-resident")
            for variant in variants:
                if variant == "device-resident":
                    tr.next_batch = device_batches(
                        ds,
                        s.batch_size,
                        dev,
                        tr.memory_format,
                        torch.Generator(device=dev).manual_seed(spec["run"]["seed"]),
                    )
                row = _measure(tr, device, args.warmup, args.repeat, measure)
                _append(
                    args.csv,
                    {
                        **row,
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
                        "device": torch.cuda.get_device_name(0) if backend == "cuda" else "cpu",
                        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    },
                    FIELDS,
                )
            del tr
            if backend == "cuda":
                torch.cuda.empty_cache()


def _measure(tr, device, warmup: int, repeat: int, measure) -> dict:
    """Device time per step (the rule's timer), host time to queue a step (no sync) and of one batch fetch, in ms."""
    t = measure.time_steps(tr.train_step, device, warmup, repeat, energy=False)
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
