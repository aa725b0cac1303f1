"""Study A's counter table and the figure of ratios to baseline, with the published ratios beside them.

Inputs: ``unet3d_ncu`` result files (any systems) and, beside them in the same layout, the ``unet3d_profile``
results of the same configurations. Published ratios (``sm_cycles_ratio``, ``instructions_ratio`` in
``study_a_claims.csv``) are read as data and drawn next to the measured ones.

Replay is bounded (the top kernels, at most ``launch_count`` launches), so configurations are compared on
*extrapolated* step totals: counters summed over the profiled kernels, divided by the share of the step's
device time those kernels take (their ncu ``gpu__time_duration`` over the torch.profiler step device time).
This assumes the kernels not replayed have the same counter-per-time mix; the share is in the table.

The two sides of that share come from different measurements: the numerator from ncu's kernel replay
(ncu's default cache control flushes caches before each replayed kernel, and every kernel runs alone), the
denominator from torch.profiler during a normal step. The table states this (``device_time_covered_basis``)
and gives beside it the share with both sides from torch.profiler (``device_time_covered_profiler``: the
selected kernel names' share of the profiled step; it counts every launch of those names, also launches that
``launch_count`` kept out of the replay). Until ncu covers the whole step, the gap between the two shares
is the uncertainty of the extrapolation.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..experiments.unet3d_profile import VARIANTS  # noqa: E402
from ..results import read_result  # noqa: E402
from .common import joined_labels, load_results, write_table  # noqa: E402
from .study_a import read_claims  # noqa: E402

COUNTER_COLUMNS = ["sm_cycles", "instructions", "ipc", "tensor_pipe_pct", "dram_throughput_pct", "l1_hit_pct",
                   "l2_hit_pct", "duration_ns"]
COVERAGE_BASIS = ("mixed: ncu replay gpu__time_duration (cache control on, kernels serialized) / torch.profiler "
                  "step device time (normal run)")
RATIOS = {"sm_cycles_ratio": "sm_cycles_step_est", "instructions_ratio": "instructions_step_est"}


def profile_for(ncu_result_path: str | Path) -> dict | None:
    """The ``unet3d_profile`` result beside an ``unet3d_ncu`` result (same system/model/configuration)."""
    parts = list(Path(ncu_result_path).parts)
    if "unet3d_ncu" not in parts:
        return None
    parts[len(parts) - 1 - parts[::-1].index("unet3d_ncu")] = "unet3d_profile"
    path = Path(*parts)
    return read_result(path) if path.exists() else None


def counter_rows(results: list[dict]) -> pd.DataFrame:
    """One row per (system, model, configuration): totals, top stalls, kernel coverage, ratios to baseline
    (computed on step totals extrapolated from the profiled kernels' share of device time)."""
    rows = []
    for r in results:
        cfg, m = r["config"], r["measurements"]
        row = {"system": cfg["system"]["name"], "hardware": r["_hardware"], "model": cfg["model"],
               "configuration": cfg["configuration"], "status": r["status"], "reason": r.get("reason")}
        if r["status"] == "ok":
            t = m["total"]
            row.update({c: t.get(c) for c in COUNTER_COLUMNS})
            row["top_stalls"] = ", ".join(f"{k} {v:.2f}" for k, v in t.get("top_stalls", []))
            row["profiled_kernels"] = m["profiled_kernels"]
            row["architecture"] = m["architecture"]
            profile = profile_for(r["_path"])
            share = None
            if profile and profile["status"] == "ok" and t.get("duration_ns"):
                share = t["duration_ns"] / 1e3 / profile["measurements"]["kernels"]["device_time_us"]
            row["device_time_covered"] = share
            row["device_time_covered_basis"] = COVERAGE_BASIS if share else None
            row["device_time_covered_profiler"] = m.get("kernel_selection", {}).get("device_time_share")
            for c in ("sm_cycles", "instructions"):
                row[f"{c}_step_est"] = t.get(c) / share if share and t.get(c) is not None else np.nan
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    order = {c: i for i, c in enumerate(VARIANTS)}
    df = df.sort_values(["system", "model", "configuration"], key=lambda s: s.map(order).fillna(99) if s.name == "configuration" else s)
    df = df.reset_index(drop=True)
    for ratio, col in RATIOS.items():
        if col not in df:
            df[col] = np.nan
        base = df[df["configuration"] == "baseline"].set_index(["system", "model"])[col]
        df[ratio] = [v / base.get((s, mo), np.nan) if pd.notna(v) else np.nan
                     for s, mo, v in zip(df["system"], df["model"], df[col])]
    if "ipc" in df:
        base = df[df["configuration"] == "baseline"].set_index(["system", "model"])["ipc"]
        df["ipc_change_pct"] = [100 * (v / base.get((s, mo), np.nan) - 1) if pd.notna(v) else np.nan
                                for s, mo, v in zip(df["system"], df["model"], df["ipc"])]
    return df


def class_rows(results: list[dict]) -> pd.DataFrame:
    """Per-kernel-class counter totals (convolution, layout conversion, normalization, ...) per configuration."""
    rows = []
    for r in results:
        if r["status"] != "ok":
            continue
        for cls, agg in r["measurements"]["by_class"].items():
            rows.append({"hardware": r["_hardware"], "model": r["config"]["model"],
                         "configuration": r["config"]["configuration"], "class": cls, "kernels": agg["kernels"],
                         **{c: agg.get(c) for c in COUNTER_COLUMNS}})
    return pd.DataFrame(rows, columns=["hardware", "model", "configuration", "class", "kernels", *COUNTER_COLUMNS])


def table(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["hardware", "model", "configuration", "sm_cycles", "sm_cycles_step_est", "sm_cycles_ratio", "instructions",
            "instructions_step_est", "instructions_ratio",
            "ipc", "ipc_change_pct", "tensor_pipe_pct", "dram_throughput_pct", "l1_hit_pct", "l2_hit_pct", "top_stalls",
            "profiled_kernels", "device_time_covered", "device_time_covered_profiler", "device_time_covered_basis"]
    out = df.reindex(columns=cols).astype(object)
    for i, (status, reason) in enumerate(zip(df["status"], df["reason"])):
        if status != "ok":
            out.loc[i, "sm_cycles"] = {"oom": "OOM", "unsupported": "unsupported"}[status]
            out.loc[i, "top_stalls"] = reason
    return out


def fig_ratios(df: pd.DataFrame, claims: pd.DataFrame, path: str | Path) -> None:
    """Bars: measured SM-cycle and instruction ratios to baseline per configuration and system; published
    ratios (Study A, per GPU) as hatched bars beside them."""
    ok = df[(df["status"] == "ok") & (df["configuration"] != "baseline")]
    published = claims[claims["metric"].isin(list(RATIOS))]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=False)
    for ax, (ratio, _) in zip(axes, RATIOS.items()):
        labels, vals, colors, hatches = [], [], [], []
        for _, r in ok.iterrows():
            if pd.notna(r.get(ratio)):
                labels.append(f"{r['configuration']}\n{r['hardware'].split(' (')[0]} (measured)")
                vals.append(r[ratio])
                colors.append("C0")
                hatches.append("")
        for _, c in published[published["metric"] == ratio].iterrows():
            labels.append(f"{c['configuration']}\n{c['gpu'].upper()} (published, {c['source']})")
            vals.append(float(c["value"]))
            colors.append("C1")
            hatches.append("//")
        x = np.arange(len(vals))
        ax.bar(x, vals, color=colors, hatch=hatches)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel(f"{ratio.replace('_', ' ')} (configuration / baseline)")
        if not vals:
            ax.text(0.5, 0.5, "no counters measured\n(see the table for why)", ha="center", transform=ax.transAxes)
    hw = joined_labels(df)
    fig.suptitle(f"Study A, Nsight Compute counters relative to baseline: measured on {hw}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=150)
    plt.close(fig)


def aggregate(result_paths: list[str | Path], claims_path: str | Path, out_dir: str | Path) -> None:
    """Write ``counters.{csv,md,tex}``, ``counters_by_class.{csv,md,tex}`` and ``fig_counter_ratios.png``.

    Raises:
        ResultError: a result file is missing or corrupt.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = load_results(result_paths)
    df = counter_rows(results)
    hw = joined_labels(df)
    write_table(table(df), out_dir / "counters",
                f"Study A hardware counters (Nsight Compute, one training step; kernels covering the stated share of "
                f"device time) on {hw}. Ratios are configuration / baseline, on step totals extrapolated by "
                f"device_time_covered, whose two sides come from different measurements (ncu replay time over "
                f"torch.profiler step time); device_time_covered_profiler takes both sides from torch.profiler.")
    write_table(class_rows(results), out_dir / "counters_by_class",
                f"Study A hardware counters per kernel class (profiled kernels only) on {hw}.")
    fig_ratios(df, read_claims(claims_path), out_dir / "fig_counter_ratios.png")
