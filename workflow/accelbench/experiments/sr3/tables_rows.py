"""Study B SR3 aggregation, the rows: Study B's published strong-scaling times (:func:`read_reference`, their
efficiency :func:`published_efficiency`) and one row per ``sr3_scaling`` result (:func:`result_rows`: times,
layout, quality, efficiency against the same configuration's 1-device run, the series' label earned from the data
(:func:`series_labels`) and ours' loss curve against the faithful run's). Torch-free."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from accelbench.aggregate.common import noise_cell, status_cell
from accelbench.aggregate.figures import origin_of
from accelbench.core import files
from accelbench.errors import DataError
from accelbench.experiments.sr3 import configs as sr3_configs

FASTEST = "ours (fastest honest run)"
# what each minutes column of the efficiency table holds (its `minutes_kind`)
MINUTES_KIND = {
    "projection": "projected: median iteration x 40,000 / devices (no compilation, no warm-up)",
    "published": "published: Study B's wall time",
}
REFERENCE_LABELS = {
    "gaudi1": "Gaudi1",
    "gaudi2": "Gaudi2",
    "gaudi3": "Gaudi3",
    "v100": "V100",
    "a100": "A100",
    "h100": "H100",
}
# Devices per node of the published runs (Study B: Voyager's Gaudi1 nodes hold 8 cards, its 64-card run spans 8 nodes;
# every other published series fits one node), as in config/systems/<name>.yaml `devices_per_node`.
REFERENCE_DEVICES_PER_NODE = {"gaudi1": 8, "gaudi2": 8, "gaudi3": 8, "v100": 4, "a100": 4, "h100": 4}


def read_reference(path: str | Path) -> tuple[pd.DataFrame, str]:
    """Published times: long table (system, devices, minutes) and the source line of the file.

    Raises:
        DataError: missing file or no ``devices`` column.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"reference file {path} not found")
    text = files.read_text(path, "reference file", error=DataError)
    header = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("#")]
    wide = files.read_frame(path, "reference file", error=DataError, comment="#")
    if "devices" not in wide:
        raise DataError(f"reference file {path} has no 'devices' column")
    long = wide.melt(id_vars="devices", var_name="system", value_name="minutes").dropna()
    source = next((h for h in header if h.lower().startswith("source")), header[-1] if header else str(path))
    return long.reset_index(drop=True), source


def _published_layout(system: str, devices: int) -> str | None:
    per = REFERENCE_DEVICES_PER_NODE.get(system)
    if per is None:
        return None
    return "1 node" if devices <= per else f"{devices // per} nodes x {per}"


def published_efficiency(ref: pd.DataFrame) -> pd.DataFrame:
    """Efficiency of each published series against its own 1-device time: T(1) / (N * T(N))."""
    rows = []
    for system, g in ref.groupby("system"):
        t1 = g.loc[g["devices"] == 1, "minutes"]
        for _, r in g.iterrows():
            eff = float(t1.iloc[0] / (r["devices"] * r["minutes"])) if len(t1) else np.nan
            rows.append(
                {
                    "system": system,
                    "series": f"published {REFERENCE_LABELS.get(system, system)}",
                    "precision": "fp32",
                    "devices": int(r["devices"]),
                    "layout": _published_layout(system, int(r["devices"])),
                    "minutes_40k": float(r["minutes"]),
                    "minutes_kind": MINUTES_KIND["published"],
                    "efficiency": eff,
                    "label": "published",
                }
            )
    return pd.DataFrame(rows)


def layout_columns(launch: dict | None, devices: int) -> dict:
    """``nodes``, ``ranks_per_node``, ``layout`` ("1 node" / "2 nodes x 8") and ``interconnect`` (NCCL's inter-node
    transports, else the collective backend) of one result's launch record (:mod:`accelbench.cluster.multinode`);
    results from before multi-node launching ran on one node."""
    launch = launch or {}
    nodes = int(launch.get("nodes") or 1)
    per = int(launch.get("ranks_per_node") or devices)
    nccl = launch.get("nccl") or {}
    net = ", ".join(nccl.get("inter_node") or []) or (", ".join(sorted(nccl.get("via") or {})) if nccl else "")
    return {
        "nodes": nodes,
        "ranks_per_node": per,
        "layout": "1 node" if nodes == 1 else f"{nodes} nodes x {per}",
        "interconnect": net or launch.get("collective_backend"),
    }


def result_rows(results: list[dict]) -> pd.DataFrame:
    """One row per (system, configuration, devices), with the configuration's series (:mod:`.configs`;
    results from before the series name their precision only). Times: iteration ms, totals s/min; throughput
    images/s; ``loss_vs_faithful``: ours' loss curve against the faithful run of the same system and device count."""
    rows = []
    for r in results:
        cfg, m = r["config"], r["measurements"]
        conf = sr3_configs.of_result(r)
        row = {
            "system": cfg["system"]["name"],
            "hardware": r["_hardware"],
            "software": r["_software"],
            "device": r.get("_device", r["_hardware"]),  # the label without a count: the series over devices
            "origin": origin_of(r),
            "scale": cfg.get("settings", {}).get("scale", cfg["system"].get("scale")),
            "configuration": conf.name,
            "series": conf.series,
            "precision": cfg["precision"],
            "devices": int(cfg["devices"]),
            "status": r["status"],
            "attention_levels": "".join("A" if a else "." for a in cfg.get("settings", {}).get("attention_levels", [])),
            "reason": r.get("reason"),
            "noise": noise_cell(r),
            "_path": r["_path"],
            "_artefacts": r.get("artefacts", {}),
        }
        row.update(layout_columns(m.get("launch"), int(cfg["devices"])))
        if r["status"] == "ok":
            q = m["quality"]
            row.update(
                {
                    "iteration_ms": m["iteration"]["median"],
                    "iteration_p10_ms": m["iteration"]["p10"],
                    "iteration_p90_ms": m["iteration"]["p90"],
                    "timed_iterations": m["iteration"]["count"],
                    "images_per_s": m["images_per_s"],
                    "iterations_per_device": m["iterations_per_device"],
                    "iterations_run": m["iterations_run"],
                    "wall_s": m["measured_wall_s"],
                    "first_iteration_s": m.get("first_iteration_s"),  # the cold start (compile, CUDA graphs)
                    "strong_total_s": m["strong_scaling_total"]["seconds"],
                    "strong_total_label": m["strong_scaling_total"]["label"],
                    "study_b_40k_minutes_projection": m["study_b_projection"]["minutes"],
                    "study_b_40k_minutes_measured_plus_projected": measured_plus_projected_minutes(m),
                    "peak_mem_gib": m.get("peak_mem_gib"),
                    "peak_rss_gib": max(m.get("peak_rss_gib_per_rank") or [np.nan]),
                    "replica_max_abs_diff": m["replica_max_abs_diff"],
                    "psnr_sr3_db": q["sr3"]["psnr_db"],
                    "psnr_bicubic_db": q["bicubic"]["psnr_db"],
                    "ssim_sr3": q["sr3"]["ssim"],
                    "ssim_bicubic": q["bicubic"]["ssim"],
                    "beats_bicubic": q["beats_bicubic"],
                    "quality_sampler": f"{q['sampler']} {q['sample_steps']} steps",
                    "cudnn_benchmark": m.get("cudnn_benchmark"),
                    "host_syncs_timed": _max_or_none(m.get("host_syncs_timed_per_rank")),
                    "mfu": (m.get("train_throughput") or {}).get("mfu"),
                    "_loss_curve": (m.get("loss") or {}).get("curve"),
                }
            )
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df = df.sort_values(["system", "origin", "series", "configuration", "devices"]).reset_index(drop=True)
    if "iteration_ms" in df:
        eff = []
        for _, r in df.iterrows():
            one = df[
                (df["system"] == r["system"])
                & (df["origin"] == r["origin"])
                & (df["configuration"] == r["configuration"])
                & (df["devices"] == 1)
                & (df["status"] == "ok")
            ]
            eff.append(
                float(one["iteration_ms"].iloc[0] / r["iteration_ms"])
                if len(one) and pd.notna(r["iteration_ms"])
                else np.nan
            )
        df["efficiency_vs_1"] = eff
        df["speedup_vs_1"] = df["efficiency_vs_1"] * df["devices"]
        df["loss_vs_faithful"] = [_loss_check(df, r) for _, r in df.iterrows()]
    df["series_label"] = series_labels(df)
    return df


def measured_plus_projected_minutes(m: dict) -> float | None:
    """Minutes of Study B's workload as run: ``strong_scaling_total`` (the measured wall time of the iterations run,
    first-iteration compilation and warm-up included, + the median iteration for the rest), where it is the same
    workload as ``study_b_projection`` (both record ``workload_iterations``; else None: another scale's total, or one
    that does not say its workload, is not Study B's 40,000 iterations)."""
    total, proj = m.get("strong_scaling_total") or {}, m.get("study_b_projection") or {}
    work = total.get("workload_iterations")
    if total.get("seconds") is None or work is None or work != proj.get("workload_iterations"):
        return None
    return float(total["seconds"]) / 60.0


def series_labels(df: pd.DataFrame) -> list[str]:
    """Per row, its series' label, computed from the data for ``ours``: :data:`FASTEST` only on the fastest ``ours``
    configuration whose median iteration (ms) is below the faithful configuration's on the same node (same system,
    origin and hardware label) at the same device count; other ``ours`` rows say ``faster than faithful``, ``not
    faster than faithful (<ms> vs <ms> ms per iteration)``, that no faithful run on the node compares, or that they
    did not run. Other series keep :data:`accelbench.experiments.sr3.configs.SERIES`."""
    node = ["system", "origin", "hardware", "devices"]
    ok = df[df["status"] == "ok"] if "iteration_ms" in df else df.iloc[:0]
    faithful = {
        tuple(r[k] for k in node): float(r["iteration_ms"]) for _, r in ok[ok["configuration"] == "faithful"].iterrows()
    }
    faster = {}  # node -> the fastest ours row index below faithful
    for i, r in ok[ok["series"] == "ours"].iterrows():
        key = tuple(r[k] for k in node)
        if (
            key in faithful
            and float(r["iteration_ms"]) < faithful[key]
            and (key not in faster or float(r["iteration_ms"]) < float(ok.loc[faster[key], "iteration_ms"]))
        ):
            faster[key] = i
    out = []
    for i, r in df.iterrows():
        if r["series"] != "ours":
            out.append(sr3_configs.SERIES.get(r["series"], r["series"]))
            continue
        key = tuple(r[k] for k in node)
        if r["status"] != "ok":
            out.append(f"ours ({status_cell(r.to_dict())}: not compared)")
        elif key not in faithful:
            out.append("ours (not compared: no faithful run on this node)")
        elif faster.get(key) == i:
            out.append(FASTEST)
        elif float(r["iteration_ms"]) < faithful[key]:
            out.append("ours (faster than faithful)")
        else:
            out.append(
                f"ours (not faster than faithful: {float(r['iteration_ms']):.1f} vs {faithful[key]:.1f} ms "
                f"per iteration)"
            )
    return out


def _max_or_none(values):
    values = [v for v in (values or []) if v is not None]
    return max(values) if values else None


def _loss_check(df: pd.DataFrame, r: pd.Series) -> str | None:
    """``within``/``outside`` (relative difference of the mean loss; the worst iteration's; iterations compared) of an
    ``ours`` row against the faithful row of the same system, origin and device count
    (:func:`.configs.loss_agreement`); None for other series or without a faithful run."""
    if r["series"] != "ours" or not isinstance(r.get("_loss_curve"), list):
        return None
    f = df[
        (df["system"] == r["system"])
        & (df["origin"] == r["origin"])
        & (df["devices"] == r["devices"])
        & (df["configuration"] == "faithful")
        & (df["status"] == "ok")
    ]
    if f.empty or not isinstance(f.iloc[0].get("_loss_curve"), list):
        return "no faithful run to compare with"
    a = sr3_configs.loss_agreement(r["_loss_curve"], f.iloc[0]["_loss_curve"])
    verdict = "within" if a["within"] else "outside"
    return (
        f"{verdict} {a['tolerance']:.0%} (mean {a['relative_difference']:.2%}, worst iteration "
        f"{a['worst_iteration_difference']:.2%}, {a['iterations']} iterations)"
    )
