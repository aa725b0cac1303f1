"""The generic parts of the harness-overhead benchmarks (``benchmarks/harness_overhead.py``): the CSV appender, the
timer of a bare loop, the result row (:class:`Row`), per-step percentiles and the efficiency table. Each experiment's
driver (the rule's step against its bare loop) lives in its own folder (``experiments/<name>/overhead.py``) and starts
its ranks through :mod:`accelbench.cluster.torchrun_call`; this module names no experiment."""

from __future__ import annotations

import csv
import gc
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

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
EFFICIENCY_GOAL = 0.95  # time at 1 device / time at N, per-device batch fixed


MAX_CSV_BYTES = 64 * 2**20  # a benchmark CSV gains a row of ~1 kB per run: far below


def upgrade_header(path: Path, fields: list[str]) -> None:
    """Rewrite an existing CSV whose header is not ``fields`` (written before a column was added) with ``fields``, its
    rows' new cells empty, so that appended rows line up with the header (a column no longer in ``fields`` would be
    dropped; none has been removed). Read and rewritten in its folder without following a link
    (:mod:`accelbench.core.tree`: a link, a hard-linked file or a FIFO at ``path`` is refused in one line, untouched).
    """
    import io

    from accelbench.core import tree

    path = Path(path)
    if not path.parent.is_dir():
        return
    with tree.folder(path.parent) as d:
        if d.lstat(path.name) is None:
            return
        reader = csv.DictReader(io.StringIO(d.read_bytes(path.name, MAX_CSV_BYTES).decode(), newline=""))
        if reader.fieldnames == fields:
            return
        rows = list(reader)
        with d.open_write(path.name, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)


def append(csv_path: str, row: dict, fields: list[str] = FIELDS) -> None:
    """Append ``row`` (its ``fields``) to ``csv_path`` (its folder created), writing the header first for a new or
    empty file (an older header is upgraded first: :func:`upgrade_header`); echo it as JSON. The file is opened in its
    folder without following a link (:func:`accelbench.core.tree.open_append`: a link or hard-linked file refused).
    """
    from accelbench.core import tree

    path = Path(csv_path)
    upgrade_header(path, fields)
    with tree.open_append(path.parent, path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        if os.fstat(fh.fileno()).st_size == 0:
            w.writeheader()
        w.writerow({k: row.get(k) for k in fields})
    print(json.dumps({k: row.get(k) for k in fields}), flush=True)


def empty_cache(device=None) -> None:
    """Collect garbage and return the device's cached memory (``device``: a :class:`~accelbench.backends.device.
    Device`; None: the host only)."""
    gc.collect()
    if device is not None:
        device.empty_cache()


def time_loop(step, device, warmup: int, repeat: int, before=None, after=None) -> list[float]:
    """Time (ms) of each of ``repeat`` calls of ``step`` after ``warmup`` untimed calls, through the one timed phase
    (:func:`accelbench.measure.phase.timed_phase` with a :class:`~accelbench.measure.phase.Latency` tracker: device
    events where the backend has them, else synchronize and the host clock). ``before``/``after``: called untimed
    around each call, warm-up ones included (:class:`~accelbench.measure.phase.Untimed`: work the product's timer
    leaves outside its window, e.g. Trainer's batch fetch and its logging reads)."""
    from accelbench.measure import phase

    hooks = phase.Untimed(before, after)
    if before is not None or after is not None:  # the warm-up calls with their hooks, then the timed ones
        phase.timed_phase(lambda: (hooks.before(), step(), hooks.after()), device, warmup, 0)
        warmup = 0
    return phase.timed_phase(step, device, warmup, repeat, (hooks, phase.Latency(device))).timing.samples


def device_label(device) -> str:
    """The CSV's ``device`` column: the accelerator's name (its backend's probe), ``cpu`` for the host."""
    found = device.ops.probe() if device.ops.accelerator else None
    return found["names"][device.index] if found and found["names"] else "cpu"


def ranks() -> tuple[int, int, int]:
    """(rank, world size, local rank) of this process (torchrun's variables; one process: 0, 1, 0)."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


@dataclass(frozen=True)
class Row:
    """One harness-overhead row's measured columns (:data:`FIELDS`, named as the CSV names them): times in ms per
    step (``product_ms`` None where the product gave no time); the ratios, ``device`` and ``when`` are filled in by
    :meth:`cells`."""

    experiment: str
    case: str
    devices: int  # ranks of the run
    harness_ms: float
    bare_ms: float
    product_ms: float | None
    steps: int  # timed steps of each loop
    threads_per_rank: int
    cudnn_benchmark: bool
    settings: str  # what was run, in words

    def cells(self, device) -> dict:
        """The CSV row (:data:`FIELDS`): times rounded to 3 decimals, their ratios to 4, ``device`` the accelerator's
        name (:func:`device_label` of ``device``, a :class:`~accelbench.backends.device.Device`), ``when`` now (UTC).
        """
        product = self.product_ms
        return {
            "experiment": self.experiment,
            "case": self.case,
            "devices": self.devices,
            "harness_ms": round(self.harness_ms, 3),
            "bare_ms": round(self.bare_ms, 3),
            "harness_over_bare": round(self.harness_ms / self.bare_ms, 4),
            "product_ms": round(product, 3) if product else None,
            "product_over_bare": round(product / self.bare_ms, 4) if product else None,
            "steps": self.steps,
            "threads_per_rank": self.threads_per_rank,
            "cudnn_benchmark": self.cudnn_benchmark,
            "settings": self.settings,
            "device": device_label(device),
            "when": now(),
        }


def now() -> str:
    """UTC time of a row."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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


def efficiency(csv_path: str) -> Path:
    """Time at 1 device / time at N (per-device batch fixed) for the harness, the bare loop and the product; printed
    and written beside the CSV as ``<name>_efficiency.csv`` (returned). The CSV accumulates runs: each N-device row is
    paired with the 1-device row of the same experiment and model measured closest in time (the same session's
    run)."""
    import pandas as pd

    df = pd.read_csv(csv_path)
    df = df[~df["case"].astype(str).str.startswith("efficiency")].reset_index(drop=True)
    rows = []
    when = pd.to_datetime(df["when"], utc=True, errors="coerce")
    model = df["case"].astype(str).str.split().str[:2].str.join(" ")  # e.g. "llama31_8b flash", "fp32"
    for i, r in df[df["devices"] > 1].iterrows():
        ones = df[(df["experiment"] == r["experiment"]) & (df["devices"] == 1) & (model == model[i])]
        if ones.empty:
            continue
        one = ones.loc[(when[ones.index] - when[i]).abs().idxmin()]
        rows.append(
            {
                "experiment": r["experiment"],
                "case": r["case"],
                "devices": int(r["devices"]),
                "efficiency_harness": round(one["harness_ms"] / r["harness_ms"], 4),
                "efficiency_bare": round(one["bare_ms"] / r["bare_ms"], 4),
                "efficiency_product": round(one["product_ms"] / r["product_ms"], 4)
                if pd.notna(r["product_ms"]) and pd.notna(one["product_ms"])
                else None,
                "goal": EFFICIENCY_GOAL,
                "one_device_when": one.get("when"),
                "when": r.get("when"),
            }
        )
        print(json.dumps(rows[-1]))
    out = Path(csv_path).with_name(Path(csv_path).stem + "_efficiency.csv")
    from accelbench.core import tree

    with tree.open_write(out.parent, out, "w", newline="") as fh:  # no link followed at `out`
        pd.DataFrame(rows).to_csv(fh, index=False)
    return out
