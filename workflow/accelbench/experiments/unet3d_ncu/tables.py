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

Claims: the counter quantities (:data:`QUANTITIES`) of ``study_a_claims.csv`` are observed by
:mod:`accelbench.experiments.unet3d_ncu.tables_claims` (:func:`counter_observations`, with the rate-coverage rule of
:data:`RATE_COVERAGE_MIN`; its names are importable from here); they are judged per profiled (system, model) by the
Study A check of :mod:`accelbench.experiments.unet3d.tables_claims` (so :data:`CLAIM_CHECKS` is empty here).

Torch-free. Also the key of a Study A group (:data:`KEY`, :func:`key_of`), which every Study A table uses.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from accelbench.aggregate.common import joined_labels, load_results, write_table
from accelbench.aggregate.figures import FONT, origin_of, save_figure, series_label, wrap
from accelbench.aggregate.figures import published as published_origin
from accelbench.core import tree
from accelbench.core.results import read_result
from accelbench.experiments.unet3d.configs import BEFORE_THE_KEYS, VARIANTS
from accelbench.experiments.unet3d_ncu.tables_claims import (  # noqa: F401  (re-exported: the counter claims)
    CLAIM_CHECKS,
    NO_TENSOR_CORE_CLASSES,
    QUANTITIES,
    RATE_COVERAGE_MIN,
    TIMING_FREE,
    claim_configuration,
    counter_observations,
    ok_row,
    rate_coverage,
    read_claims,
    tensor_pipe_floor,
)

COUNTER_COLUMNS = [
    "sm_cycles",
    "instructions",
    "ipc",
    "tensor_pipe_pct",
    "dram_throughput_pct",
    "l1_hit_pct",
    "l2_hit_pct",
    "duration_ns",
]
COVERAGE_BASIS = (
    "mixed: ncu replay gpu__time_duration (cache control on, kernels serialized) / torch.profiler "
    "step device time (normal run)"
)
RATIOS = {"sm_cycles_ratio": "sm_cycles_step_est", "instructions_ratio": "instructions_step_est"}
# what a Study A group is (ratios, speedups and claims compare configurations inside one): the system, the run
# (measured here, or a committed reference run: two runs on one system are two groups) and the network
KEY = ["system", "run", "network", "model"]
NETWORK_LABEL = {"med_ddpm": "Med-DDPM network", "monai": "MONAI stand-in"}


def network_of(result: dict) -> str:
    """The U-Net a Study A result ran: ``config.network``; for a result made before the key existed the MONAI
    stand-in (:data:`~accelbench.experiments.unet3d.configs.BEFORE_THE_KEYS`: the only network then)."""
    return (result.get("config") or {}).get("network") or BEFORE_THE_KEYS["network"]


def key_of(result: dict) -> dict:
    """The :data:`KEY` columns of one result."""
    return {
        "system": result["config"]["system"]["name"],
        "run": result.get("_series", "measured"),
        "network": network_of(result),
        "model": result["config"]["model"],
    }


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
        row = {
            **key_of(r),
            "hardware": r["_hardware"],
            "origin": origin_of(r),
            "scale": cfg.get("settings", {}).get("scale", cfg["system"].get("scale")),
            "configuration": cfg["configuration"],
            "status": r["status"],
            "reason": r.get("reason"),
        }
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
            cov = m.get("coverage") or {}
            if cov.get("coverage"):  # coverage pass: every kernel of the step; totals as measured, no extrapolation
                row["coverage_time_share"] = cov["device_time_share"]
                row["coverage_kernels"] = (
                    f"{cov['coverage']['kernels_profiled']}/{cov['coverage']['kernels_in_step']:.0f}"
                )
                row["rates_time_share"] = t.get("rates_time_share")
                row["rates_over_every_kernel"] = ", ".join(
                    c for c in t.get("coverage_counters", []) if c not in ("sm_cycles", "instructions", "duration_ns")
                )
                share = 1.0
            for c in ("sm_cycles", "instructions"):
                row[f"{c}_step_est"] = t.get(c) / share if share and t.get(c) is not None else np.nan
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    order = {c: i for i, c in enumerate(VARIANTS)}
    df = df.sort_values(
        [*KEY, "configuration"], key=lambda s: s.map(order).fillna(99) if s.name == "configuration" else s
    )
    df = df.reset_index(drop=True)
    keys = list(df[KEY].itertuples(index=False, name=None))
    for ratio, col in RATIOS.items():
        if col not in df:
            df[col] = np.nan
        base = df[df["configuration"] == "baseline"].set_index(KEY)[col]
        df[ratio] = [v / base.get(k, np.nan) if pd.notna(v) else np.nan for k, v in zip(keys, df[col])]
    if "ipc" in df:
        base = df[df["configuration"] == "baseline"].set_index(KEY)["ipc"]
        df["ipc_change_pct"] = [
            100 * (v / base.get(k, np.nan) - 1) if pd.notna(v) else np.nan for k, v in zip(keys, df["ipc"])
        ]
    return df


def class_rows(results: list[dict]) -> pd.DataFrame:
    """Per-kernel-class counter totals (convolution, layout conversion, normalization, ...) per configuration."""
    rows = []
    for r in results:
        if r["status"] != "ok":
            continue
        for cls, agg in r["measurements"]["by_class"].items():
            rows.append(
                {
                    "system": r["config"]["system"]["name"],
                    "hardware": r["_hardware"],
                    "model": r["config"]["model"],
                    "configuration": r["config"]["configuration"],
                    "class": cls,
                    "kernels": agg["kernels"],
                    **{c: agg.get(c) for c in COUNTER_COLUMNS},
                }
            )
    return pd.DataFrame(
        rows, columns=["system", "hardware", "model", "configuration", "class", "kernels", *COUNTER_COLUMNS]
    )


def table(df: pd.DataFrame) -> pd.DataFrame:
    cols = [
        "system",
        "hardware",
        "model",
        "network",
        "configuration",
        "sm_cycles",
        "sm_cycles_step_est",
        "sm_cycles_ratio",
        "instructions",
        "instructions_step_est",
        "instructions_ratio",
        "ipc",
        "ipc_change_pct",
        "tensor_pipe_pct",
        "dram_throughput_pct",
        "l1_hit_pct",
        "l2_hit_pct",
        "top_stalls",
        "profiled_kernels",
        "device_time_covered",
        "coverage_time_share",
        "coverage_kernels",
        "rates_over_every_kernel",
        "rates_time_share",
        "device_time_covered_profiler",
        "device_time_covered_basis",
        "status",
        "reason",
    ]
    out = df.reindex(columns=cols).astype(object)
    for i, status in enumerate(df["status"]):
        if status != "ok":
            out.loc[i, "sm_cycles"] = {"oom": "OOM", "unsupported": "unsupported"}[status]
    return out


def fig_ratios(df: pd.DataFrame, claims: pd.DataFrame, path: str | Path) -> list[str]:
    """Bars: measured SM-cycle and instruction ratios to baseline per configuration and system (solid); published
    ratios (Study A, per GPU) hatched beside them. Systems without counters are named in each panel with their
    reason below the panels (e.g. ``unsupported``: no ncu on a CPU). Returns the figure's problems
    (:func:`figure_check.figure_problems`)."""
    ok = df[(df["status"] == "ok") & (df["configuration"] != "baseline")] if not df.empty else df
    published = claims[claims["metric"].isin(list(RATIOS))]
    missing = []
    if not df.empty:
        for hw, g in df.groupby("hardware"):
            if not (g["status"] == "ok").any():
                reasons = sorted({f"{s}: {r}" for s, r in zip(g["status"], g["reason"])})
                missing.append(f"{hw}: {'; '.join(reasons)}")
    from matplotlib.patches import Patch

    origins = list(dict.fromkeys(ok["origin"])) if "origin" in ok and not ok.empty else []
    colour = {o: f"C{[0, 2, 4, 5][i % 4]}" for i, o in enumerate(origins)}
    sources = {"digest": "Study A digest", "abstract": "Study A abstract"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharey=False)
    for ax, (ratio, _) in zip(axes, RATIOS.items()):
        labels, vals, colors, hatches = [], [], [], []
        for _, r in ok.iterrows():
            if pd.notna(r.get(ratio)):
                labels.append(f"{r['configuration']}\n{r['hardware'].split(': ')[-1].split(' (')[0]}")
                vals.append(r[ratio])
                colors.append(colour.get(r.get("origin"), "C0"))
                hatches.append("")
        for _, c in published[published["metric"] == ratio].iterrows():
            labels.append(f"{c['configuration']}\n{c['gpu'].upper()}, published")
            vals.append(float(c["value"]))
            colors.append("C1")
            hatches.append("//")
        x = np.arange(len(vals))
        ax.bar(x, vals, color=colors, hatch=hatches)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=FONT["legend"])
        ax.set_xlabel("configuration, hardware")
        ax.set_ylabel(f"{ratio.replace('_', ' ')} (configuration / baseline)")
        if not vals:
            ax.text(0.5, 0.5, "no counters measured", ha="center", transform=ax.transAxes)
    gpus = "/".join(sorted({str(g).upper() for g in published["gpu"]})) or "none"
    src = "/".join(sorted({sources.get(str(s), str(s)) for s in published["source"]})) or "Study A"
    handles = [Patch(facecolor="C1", hatch="//", label=series_label(published_origin(src), f"NVIDIA {gpus}", "paper"))]
    for o in origins:
        mine = ok[ok["origin"] == o]
        if mine[list(RATIOS)].isna().all(axis=None):  # no bar of this origin: no legend entry
            continue
        scale = "/".join(sorted(set(mine["scale"].dropna()))) if "scale" in mine else None
        handles.append(
            Patch(facecolor=colour[o], label=series_label(o, "; ".join(sorted(set(mine["hardware"]))), scale or None))
        )
    fig.legend(handles=handles, fontsize=FONT["legend"], loc="lower left", bbox_to_anchor=(0.01, 0.01))
    note = ("no counters measured on " + "; ".join(missing)) if missing else ""
    if note:  # below the panels, never over a bar
        fig.text(0.99, 0.01, wrap(note, fig, FONT["legend"], 0.45), fontsize=FONT["legend"], ha="right", va="bottom")
    fig.suptitle(
        "Study A, Nsight Compute counters relative to baseline: published beside measured", fontsize=FONT["title"]
    )
    lines = max(len(handles), note.count("\n") + len(wrap(note, fig, FONT["legend"], 0.45).splitlines()) if note else 0)
    fig.tight_layout(rect=(0, min(0.4, 0.035 * lines + 0.04), 1, 0.95), w_pad=3)
    return save_figure(fig, path)


def aggregate(result_paths: list[str | Path], claims_path: str | Path, out_dir: str | Path) -> None:
    """Write ``counters.{csv,md,tex}``, ``counters_by_class.{csv,md,tex}`` and ``fig_counter_ratios.png``.

    Raises:
        ResultError: a result file is missing or corrupt.
    """
    out_dir = tree.make_output_dir(out_dir)  # below <results>, following no link
    # the counters only: the unet3d_profile results (given with them by reference_runs.TABLES) are read beside each
    # counter result by profile_for
    results = [r for r in load_results(result_paths) if r.get("experiment") != "unet3d_profile"]
    df = counter_rows(results)
    hw = joined_labels(df)
    write_table(
        table(df),
        out_dir / "counters",
        f"Study A hardware counters (Nsight Compute, one training step; kernels covering the stated share of "
        f"device time) on {hw}. Ratios are configuration / baseline. coverage_time_share: share of the step's "
        f"device time (torch.profiler) whose kernels the coverage pass measured (SM cycles, instructions; "
        f"target >= 0.8), coverage_kernels: kernels measured / launched per step; where present the totals and "
        f"ratios are as measured, not extrapolated. rates_over_every_kernel: the rates the coverage pass also "
        f"measured over every kernel (IPC, tensor pipe, where listed); rates_time_share: share of that time "
        f"behind the other rates (hit rates, DRAM, stalls, and IPC/tensor pipe where not listed: the detail "
        f"pass on the top kernels). Without a coverage pass, step totals "
        f"are extrapolated by device_time_covered, whose two sides come from different measurements (ncu "
        f"replay time over torch.profiler step time); device_time_covered_profiler takes both sides from "
        f"torch.profiler.",
    )
    reasons = sorted(
        {
            f"{h}: {st} ({r})"
            for h, st, r in zip(df.get("hardware", []), df.get("status", []), df.get("reason", []))
            if st != "ok"
        }
    )
    write_table(
        class_rows(results),
        out_dir / "counters_by_class",
        f"Study A hardware counters per kernel class (profiled kernels only) on {hw}. Classes as the run's "
        "classifier recorded them (a result stores 50 kernels by name, too few to re-class): results "
        "measured before 2026-12-02 count same-dtype strided copies (channels_last_3d conversions) as "
        "cast_copy; the Study A table re-classes them as layout_conversion.",
        empty="Nothing measured: " + ("; ".join(reasons) if reasons else "no unet3d_ncu result") + ".",
    )
    fig_ratios(df, read_claims(claims_path), out_dir / "fig_counter_ratios.png")
