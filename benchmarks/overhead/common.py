"""Shared parts of the harness-overhead benchmarks: the CSV appender, the bare loop's CUDA-event timer, the torchrun
launch of the CLI's rank subcommands, the result row."""

from __future__ import annotations

import csv
import gc
import json
import os
import sys
import time
from pathlib import Path

CLI = Path(__file__).resolve().parents[1] / "harness_overhead.py"  # the entry point torchrun runs per rank

FIELDS = [
    "experiment",
    "case",
    "devices",
    "harness_ms",
    "bare_ms",
    "harness_over_bare",
    "product_ms",
    "product_over_bare",
    "steps",
    "threads_per_rank",
    "cudnn_benchmark",
    "settings",
    "device",
    "when",
]


def upgrade_header(path: Path, fields: list[str]) -> None:
    """Rewrite an existing CSV whose header is not ``fields`` (written before a column was added) with ``fields``, its
    rows' new cells empty, so that appended rows line up with the header (a column no longer in ``fields`` would be
    dropped; none has been removed)."""
    if not path.exists():
        return
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames == fields:
            return
        rows = list(reader)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def _append(csv_path: str, row: dict, fields: list[str] = FIELDS) -> None:
    """Append ``row`` (its ``fields``) to ``csv_path``, writing the header first for a new file (an older header is
    upgraded first: :func:`upgrade_header`); echo it as JSON."""
    upgrade_header(Path(csv_path), fields)
    new = not Path(csv_path).exists()
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        if new:
            w.writeheader()
        w.writerow({k: row.get(k) for k in fields})
    print(json.dumps({k: row.get(k) for k in fields}), flush=True)


def _system(spec: dict):
    from accelbench.core.harness import system_from

    return system_from(spec)


def _dev() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _empty_cache() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _events_loop(step, warmup: int, repeat: int, before=None, after=None) -> list[float]:
    """CUDA-event time (ms) of each of ``repeat`` calls of ``step`` after ``warmup`` untimed calls (CPU smoke runs:
    the host clock). ``before``/``after``: called untimed around each call (work the product's timer leaves outside
    its window, e.g. Trainer's batch fetch and its logging reads)."""
    import torch

    before, after = before or (lambda: None), after or (lambda: None)
    for _ in range(warmup):
        before(), step(), after()
    if not torch.cuda.is_available():
        out = []
        for _ in range(repeat):
            before()
            t0 = time.perf_counter()
            step()
            out.append((time.perf_counter() - t0) * 1e3)
            after()
        return out
    torch.cuda.synchronize()
    pairs = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        before()
        a.record()
        step()
        b.record()
        after()
        pairs.append((a, b))
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in pairs]


def _torchrun(n: int, argv: list[str], threads: int) -> None:
    """Run ``argv`` (a rank subcommand of :data:`CLI`) on ``n`` torchrun ranks, each with its share of ``threads``;
    exit with the job's status if it fails."""
    from accelbench.cluster import processes as launch

    proc = launch.run(launch.torchrun_command(n, [str(CLI), *argv]), env=launch.rank_env(threads, n))
    if proc.returncode:
        sys.exit(proc.returncode)


def _row(experiment, case, devices, harness, bare, product, steps, threads, benchmark, settings):
    import torch

    return {
        "experiment": experiment,
        "case": case,
        "devices": devices,
        "harness_ms": round(harness, 3),
        "bare_ms": round(bare, 3),
        "harness_over_bare": round(harness / bare, 4),
        "product_ms": round(product, 3) if product else None,
        "product_over_bare": round(product / bare, 4) if product else None,
        "steps": steps,
        "threads_per_rank": threads,
        "cudnn_benchmark": benchmark,
        "settings": settings,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _ranks() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))
