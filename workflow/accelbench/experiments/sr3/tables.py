"""Study B SR3 aggregation: scaling table, scaling-efficiency table, scaling figure, sample picture.

Inputs are ``sr3_scaling`` result files from any number of systems, and Study B's published strong-scaling
times (``study_b_sr3_scaling.csv``: minutes for the 40,000-iteration workload per device count; data with
its source in the header lines). Strong-scaling efficiency with iterations x devices constant is
``T(1) / (N * T(N))`` for wall times, which for measured runs equals ``t_iter(1) / t_iter(N)`` (same
per-device batch). Hardware labels come from each result's provenance.

Labels say what the data show: an ``ours`` configuration is labelled :data:`FASTEST` only where it is faster than the
faithful configuration on the same node (:func:`series_labels`), and every minutes column says whether it is a
projection (median iteration x 40,000), a measured-plus-projected total (the iterations run, first-iteration
compilation included, + the median for the rest) or a published wall time (``minutes_kind``).

Claims (:data:`CLAIM_CHECKS`, for the claims table): strong-scaling efficiency per system, and the cross-system
1-device throughput order against the published times.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from accelbench.aggregate import scope
from accelbench.aggregate.claims import ClaimInputs, NotMeasured, Observation, claim_cells, per_system_rows
from accelbench.aggregate.common import joined_labels, load_results, noise_cell, noise_why, status_cell, write_table
from accelbench.aggregate.figures import FONT, origin_of, published, save_figure, series_label, wrap
from accelbench.errors import DataError
from accelbench.experiments.sr3 import configs as sr3_configs
from accelbench.experiments.sr3.job import STUDY_B_WORKLOAD

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
    header = [ln[1:].strip() for ln in path.read_text().splitlines() if ln.startswith("#")]
    wide = pd.read_csv(path, comment="#")
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
    transports, else the collective backend) of one result's launch record (:mod:`accelbench.cluster.multinode`); results
    from before multi-node launching ran on one node."""
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
    """One row per (system, configuration, devices), with the configuration's series (:mod:`..experiments.sr3_configs`;
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
    (:func:`.sr3_configs.loss_agreement`); None for other series or without a faithful run."""
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


def table(df: pd.DataFrame) -> pd.DataFrame:
    """The scaling table with ``OOM``/``unsupported`` in place of numbers for rows that did not run."""
    cols = [
        "hardware",
        "scale",
        "series",
        "series_label",
        "configuration",
        "precision",
        "attention_levels",
        "cudnn_benchmark",
        "host_syncs_timed",
        "devices",
        "layout",
        "interconnect",
        "iteration_ms",
        "iteration_p10_ms",
        "iteration_p90_ms",
        "images_per_s",
        "iterations_per_device",
        "iterations_run",
        "wall_s",
        "strong_total_s",
        "strong_total_label",
        "study_b_40k_minutes_projection",
        "study_b_40k_minutes_measured_plus_projected",
        "speedup_vs_1",
        "efficiency_vs_1",
        "mfu",
        "loss_vs_faithful",
        "peak_mem_gib",
        "peak_rss_gib",
        "replica_max_abs_diff",
        "psnr_sr3_db",
        "psnr_bicubic_db",
        "ssim_sr3",
        "ssim_bicubic",
        "beats_bicubic",
        "quality_sampler",
        "noise",
        "status",
        "reason",
    ]
    out = df.reindex(columns=cols).astype(object)
    for i, r in df.iterrows():
        if r["status"] != "ok":
            out.loc[i, "iteration_ms"] = status_cell(r.to_dict())
    return out


def efficiency_table(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Scaling efficiency per series and device count: this run's results beside published. ``minutes_40k``: a
    measured row's projection from its median iteration, a published row's wall time (``minutes_kind`` says which);
    ``minutes_40k_measured_plus_projected``: a measured row's total with the iterations it ran (compilation
    included), beside its projection."""
    rows = []
    for _, r in df.iterrows():
        ok = r["status"] == "ok"
        label = r.get("series_label") or sr3_configs.SERIES.get(r["series"], r["series"])
        device, origin = str(r.get("device", r["hardware"])), str(r.get("origin") or "measured here")
        who = device if device.startswith(origin) else f"{origin}: {device}"  # a reference run's label leads already
        rows.append(
            {
                "series": f"{who} ({r['scale']}), {label}: {r['configuration']}",
                "precision": r["precision"],
                "devices": r["devices"],
                "layout": r.get("layout"),
                "minutes_40k": r.get("study_b_40k_minutes_projection") if ok else None,
                "minutes_kind": MINUTES_KIND["projection"] if ok else None,
                "minutes_40k_measured_plus_projected": r.get("study_b_40k_minutes_measured_plus_projected")
                if ok
                else None,
                "efficiency": r.get("efficiency_vs_1") if ok else None,
                "label": "projection" if ok else status_cell(r.to_dict()),
                "noise": r.get("noise"),
                "reason": r.get("reason"),
            }
        )
    cols = [
        "series",
        "precision",
        "devices",
        "layout",
        "minutes_40k",
        "minutes_kind",
        "minutes_40k_measured_plus_projected",
        "efficiency",
        "label",
        "noise",
        "reason",
    ]
    return pd.concat([pd.DataFrame(rows, columns=cols), published_efficiency(ref)], ignore_index=True).reindex(
        columns=cols
    )


def fig_scaling(df: pd.DataFrame, ref: pd.DataFrame, source: str, path: str | Path) -> list[str]:
    """Two panels. Left: wall time (minutes) of Study B's 40,000-iteration workload vs. devices for the published
    series and for measured series at *paper* scale only (a small-scale projection is not the same workload and
    never shares this time axis). Right: speedup over 1 device, T(1)/T(N), for every series of any scale (the
    normalised comparison), with ideal linear scaling dotted. Returns the figure's problems."""
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(13, 6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ok = df[df["status"] == "ok"] if "status" in df else df
    all_n = set(ref["devices"]) | (set(ok["devices"]) if not ok.empty else set())
    for i, (system, g) in enumerate(ref.groupby("system", sort=False)):
        g = g.sort_values("devices")
        label = series_label(published("Study B"), REFERENCE_LABELS.get(system, system), "paper", "fp32")
        ax_t.plot(
            g["devices"], g["minutes"], "--o", color=colors[i % len(colors)], alpha=0.8, markersize=4, label=label
        )
        per = REFERENCE_DEVICES_PER_NODE.get(system)
        multi_ref = g[g["devices"] > per] if per else g.iloc[:0]
        if len(multi_ref):  # Study B's multi-node points (Gaudi1: 16, 32, 64 cards on 2, 4, 8 nodes)
            ax_t.scatter(
                multi_ref["devices"],
                multi_ref["minutes"],
                s=90,
                facecolors="none",
                edgecolors="grey",
                linewidths=1.2,
                zorder=4,
                label=f"multi-node points ({per} devices per node)",
            )
        t1 = g.loc[g["devices"] == 1, "minutes"]
        if len(t1):
            ax_s.plot(
                g["devices"],
                float(t1.iloc[0]) / g["minutes"],
                "--o",
                color=colors[i % len(colors)],
                alpha=0.8,
                markersize=4,
                label=label,
            )
    small, with_totals = [], False
    for j, ((hw, prec, scale, origin), g) in enumerate(
        # one curve per device type: the label without a count (each point's count is its x)
        ok.groupby(["device" if "device" in ok else "hardware", "configuration", "scale", "origin"], sort=True)
        if not ok.empty
        else []
    ):
        g = g.sort_values("devices")
        color = "black" if j == 0 else colors[(j + 6) % len(colors)]
        label = series_label(origin, hw, scale, prec)
        multi = g[g["nodes"] > 1] if "nodes" in g else g.iloc[:0]
        if len(multi):  # multi-node points beside the single-node ones, labelled with their layout
            ax_m = ax_t if scale == "paper" else ax_s
            y = "study_b_40k_minutes_projection" if scale == "paper" else "speedup_vs_1"
            labelled = any(h.get_label().startswith("measured multi-node") for h in ax_m.collections)
            ax_m.scatter(
                multi["devices"],
                multi[y],
                s=140,
                facecolors="none",
                edgecolors="red",
                linewidths=1.5,
                zorder=5,
                label="_" if labelled else "measured multi-node run (nodes x ranks per node)",
            )
            for _, mr in multi.iterrows():
                ax_m.annotate(
                    mr["layout"],
                    (mr["devices"], mr[y]),
                    fontsize=7,
                    color="red",
                    textcoords="offset points",
                    xytext=(6, 6),
                )
        if scale == "paper":
            ax_t.plot(g["devices"], g["study_b_40k_minutes_projection"], "-s", color=color, linewidth=2, label=label)
            total = (
                g.dropna(subset=["study_b_40k_minutes_measured_plus_projected"])
                if "study_b_40k_minutes_measured_plus_projected" in g
                else g.iloc[:0]
            )
            if len(total):  # beside the projection: the total with the iterations run (compilation included)
                ax_t.plot(
                    total["devices"],
                    total["study_b_40k_minutes_measured_plus_projected"],
                    ":s",
                    color=color,
                    markerfacecolor="none",
                    linewidth=1.2,
                    label="_total",
                )  # one legend entry for all: below
                with_totals = True
        else:
            small.append(label)
        t1 = g.loc[g["devices"] == 1, "iteration_ms"]
        if len(t1):  # strong scaling: speedup = T(1) / T(N) = t_iter(1) * iters(1) / (t_iter(N) * iters(N))
            ax_s.plot(g["devices"], g["speedup_vs_1"], "-s", color=color, linewidth=2, label=label)
    n = np.array(sorted(all_n)) if all_n else np.array([1])
    ax_s.plot(n, n, ":", color="grey", linewidth=1, label="ideal linear speedup")
    if with_totals:  # one entry for every series' dotted total (its colour is the series')
        from matplotlib.lines import Line2D

        ax_t.add_line(
            Line2D(
                [],
                [],
                ls=":",
                marker="s",
                color="0.35",
                markerfacecolor="none",
                linewidth=1.2,
                label="dotted, open squares (colour of the series): the iterations run, compilation "
                "included, + the median for the rest",
            )
        )
    if small:
        ax_t.text(
            0.98,
            0.98,
            wrap(
                "not on this time axis (another workload scale; see the speedup panel): " + "; ".join(small),
                fig,
                FONT["legend"],
                0.4,
            ),
            transform=ax_t.transAxes,
            fontsize=FONT["legend"],
            va="top",
            ha="right",
            bbox={"facecolor": "white", "edgecolor": "0.6"},
        )
    ax_t.set_xlabel("devices (count)")
    ax_t.set_ylabel("training time for 40,000 iterations (min)")
    ax_t.set_xscale("log", base=2)
    ax_t.set_yscale("log")
    ax_t.set_title(
        "wall time at paper scale (log-log; measured: projected from the median iteration)", fontsize=FONT["label"]
    )  # dotted: with the iterations run (its legend entry says so)
    ax_s.set_xlabel("devices (count)")
    ax_s.set_ylabel("speedup over 1 device, T(1) / T(N) (x)")
    ax_s.set_title("speedup over 1 device, every scale (log-log)", fontsize=FONT["label"])
    ax_s.set_xscale("log", base=2)
    ax_s.set_yscale("log", base=2)
    for ax in (ax_t, ax_s):
        ax.set_xticks(n, [str(int(v)) for v in n])
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax_s.get_legend_handles_labels()
    th, tl = ax_t.get_legend_handles_labels()
    uniq = dict(zip(labels + tl, handles + th))
    fig.legend(
        list(uniq.values()),
        list(uniq.keys()),
        fontsize=FONT["legend"],
        loc="lower left",
        bbox_to_anchor=(0.01, 0.01),
        ncol=2,
    )
    fig.suptitle(
        wrap(f"Study B SR3 strong scaling (iterations x devices constant). Published: {source}", fig, FONT["title"]),
        fontsize=FONT["title"],
    )
    fig.tight_layout(rect=(0, 0.035 * ((len(uniq) + 1) // 2) + 0.03, 1, 1))
    return save_figure(fig, path, dpi=120)


def fig_samples(df: pd.DataFrame, path: str | Path, max_rows: int = 6) -> list[str]:
    """Low-res / bicubic / SR3 / ground truth of one held-out patch for up to ``max_rows`` results, with a caption
    below saying how many iterations each SR3 model trained (Study B: ``STUDY_B_WORKLOAD`` in all) and, where SR3
    does not beat bicubic, that its column is the noise of an under-trained model (the pipeline ran; SR3's quality
    is not shown)."""
    ok = df[df["status"] == "ok"] if "status" in df else df
    panels = []
    for _, r in ok.iterrows():
        name = (r["_artefacts"] or {}).get("samples")
        p = Path(r["_path"]).with_name(name) if name else None
        if p is not None and p.exists():
            with np.load(p) as z:
                panels.append((r, {k: z[k] for k in z.files}))
        if len(panels) >= max_rows:
            break
    notes = []
    for r, _ in panels:
        its = int(r["iterations_run"])
        text = f"{r['hardware'].split(' (')[0]}: SR3 trained {its} iteration{'s' if its != 1 else ''} per device"
        if not r.get("beats_bicubic", True):
            text += (
                f" (Study B: {STUDY_B_WORKLOAD:,} in all), PSNR {r['psnr_sr3_db']:.1f} dB vs bicubic "
                f"{r['psnr_bicubic_db']:.1f} dB: too few iterations to learn the task, so its column is noise"
            )
        notes.append(text)
    notes = list(dict.fromkeys(notes))
    caption = (
        (
            "What this shows: each run's sample of one held-out patch (the pipeline ran end to end). What it does "
            "not show: SR3's image quality unless trained as in Study B. " + "; ".join(notes) + "."
        )
        if notes
        else ""
    )
    extra = 0.16 * (len(caption) // 150 + 1) if caption else 0  # inches for the caption below the panels
    n = max(1, len(panels))
    fig, axes = plt.subplots(n, 4, figsize=(10, 3.1 * n + extra), squeeze=False)
    titles = ["low resolution", "bicubic", "SR3", "ground truth"]
    for i, (r, pan) in enumerate(panels):
        for j, key in enumerate(("lr", "bicubic", "sr3", "truth")):
            ax = axes[i, j]
            ax.imshow(pan[key], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            t = titles[j]
            if key == "bicubic":
                t += f"\nPSNR {r['psnr_bicubic_db']:.1f} dB, SSIM {r['ssim_bicubic']:.2f}"
            elif key == "sr3":
                t += f"\nPSNR {r['psnr_sr3_db']:.1f} dB, SSIM {r['ssim_sr3']:.2f}"
            ax.set_title(t, fontsize=7)
        axes[i, 0].set_ylabel(
            f"{r['hardware'].split(': ')[-1][:28]}\n{r['configuration']}, {r['devices']} dev,\n"
            f"{int(r['iterations_run'])} iterations",
            fontsize=7,
        )
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no finished SR3 result", ha="center", va="center")
        for ax in axes[0]:
            ax.axis("off")
    if caption:
        fig.text(0.01, 0.005, wrap(caption, fig, 7), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, extra / fig.get_figheight(), 1, 1))
    return save_figure(fig, path, dpi=110)


# --------------------------------------------------------------------------- claims
def _observations(claim: pd.Series, df: pd.DataFrame, res: dict) -> list[Observation]:
    """Observations of one scaling claim on one system: ``df`` its rows of :func:`result_rows`, ``res`` its results
    by (precision, devices)."""
    mine = select_configuration(df, claim["selector"], multi_device=True)
    multi = mine[mine["devices"] > 1]
    if multi.empty:
        raise NotMeasured(
            f"no {claim['selector']} run on more than one device (config sr3_scaling.configurations, "
            "sr3_scaling.devices)"
        )
    ok = (
        multi[(multi["status"] == "ok") & multi["efficiency_vs_1"].notna()] if "efficiency_vs_1" in multi else multi[:0]
    )
    if ok.empty:
        r = multi.iloc[0]
        raise NotMeasured(
            f"{r['devices']} devices: {r['status']} ({r['reason']})"
            if r["status"] != "ok"
            else "no 1-device run to compare with"
        )
    return [
        Observation(
            float(r["efficiency_vs_1"]),
            f"{r['configuration']} ({sr3_configs.SERIES[r['series']]}) "
            f"{r['devices']} devices: efficiency "
            f"{r['efficiency_vs_1']:.2f} (iteration {r['iteration_ms']:.1f} ms)",
            [res[k] for k in [(r["configuration"], r["devices"]), (r["configuration"], 1)] if k in res],
            key=str(int(r["devices"])),
        )
        for _, r in ok.iterrows()
    ]


def throughput_order_row(claim: pd.Series, sr3: pd.DataFrame, sr3_reference: pd.DataFrame, noise: dict) -> dict:
    """The cross-system claim: measured 1-device throughput order of the claim's ``hardware`` classes vs. the
    published (a system counts as the class the scope policy gives it, :mod:`accelbench.aggregate.scope`).
    ``noise``: why a result is noisy, by (system, precision, devices)."""
    tokens = scope.claim_classes(claim["hardware"])
    pub = sr3_reference[(sr3_reference["devices"] == 1) & sr3_reference["system"].isin(tokens)]
    pub_order = list(pub.sort_values("minutes")["system"])
    measured = {}
    ok = sr3[(sr3["status"] == "ok") & (sr3["devices"] == 1)] if not sr3.empty else sr3
    for _, g in ok.groupby("system") if not ok.empty else []:
        for _, r in select_configuration(g, claim["selector"]).iterrows():
            for t in tokens:
                if scope.class_of(r["hardware"])[0] == t:
                    measured[t] = (
                        r["images_per_s"],
                        f"{r['hardware']} ({r['configuration']})",
                        (r["system"], r["configuration"], r["devices"]),
                    )
    base = {
        **claim_cells(claim),
        "system": ", ".join(sorted(set(sr3["system"]))) if not sr3.empty else "(none)",
        "hardware": "; ".join(h for _, h, _ in measured.values()) or (joined_labels(sr3) if not sr3.empty else "none"),
    }
    if len(measured) < 2:
        return {
            **base,
            "measured": ", ".join(f"{t}: {v[0]:.3g} images/s" for t, v in measured.items()) or "",
            "verdict": "not measured here",
            "why": f"needs 1-device {claim['selector']} SR3 results of at least two of {', '.join(tokens)} "
            f"(found: {', '.join(measured) or 'none'}); copy their results/<system>/ folders here",
        }
    why_noisy = [w for k in (v[2] for v in measured.values()) if (w := noise.get(k))]
    order = sorted(measured, key=lambda t: -measured[t][0])
    expected = [t for t in pub_order if t in measured]
    text = " > ".join(f"{t} {measured[t][0]:.3g} img/s" for t in order)
    if why_noisy:
        return {
            **base,
            "measured": text,
            "verdict": "not measured here",
            "why": "not measured reliably: result flagged noisy (" + why_noisy[0] + ")",
        }
    holds = order == expected
    missing = [t for t in tokens if t not in measured]
    verdict = (
        "does not hold"
        if not holds
        else "holds"
        if not missing
        else f"partly measured ({len(measured)} of {len(tokens)})"
    )
    return {
        **base,
        "measured": text,
        "verdict": verdict,
        "why": f"published order {' > '.join(expected)}; measured {' > '.join(order)}"
        + (f"; missing {', '.join(missing)}" if missing else ""),
    }


def _claim_key(r: dict) -> tuple:
    """Identity of a result inside its system's group: (configuration, devices)."""
    return sr3_configs.of_result(r).name, int(r["config"]["devices"])


def select_configuration(df: pd.DataFrame, selector: str | None, multi_device: bool = False) -> pd.DataFrame:
    """The rows of the first configuration in ``selector`` (``"faithful|fp32"``: the faithful series where it was run,
    else the paper-text one; the chosen name is in each row) that has ok results (on more than one device with
    ``multi_device``); all rows without a selector."""
    if not selector or df.empty:
        return df
    names = [n.strip() for n in str(selector).split("|") if n.strip()]
    for name in names:
        rows = df[df["configuration"] == name]
        ok = rows[rows["status"] == "ok"]
        if len(ok[ok["devices"] > 1] if multi_device else ok):
            return rows
    return df[df["configuration"] == names[0]] if names else df


def _claim_rows(claim: pd.Series, inputs: ClaimInputs) -> list[dict]:
    """The claims-table rows of one sr3_scaling claim: one per system, or one row across systems for the
    throughput order (against the published SR3 times, ``sr3_reference`` of the claims table)."""
    exp = claim["experiment"]
    group = inputs.of(exp)
    if claim["quantity"] == "throughput_order":
        if "sr3_reference" not in inputs.published:
            raise DataError(
                f"claim {claim['claim_id']}: the throughput order needs Study B's published SR3 times (sr3_reference)"
            )
        noise = {(r["config"]["system"]["name"], *_claim_key(r)): w for r in group if (w := noise_why(r))}
        ref, _ = read_reference(inputs.published["sr3_reference"])
        return [throughput_order_row(claim, inputs.rows(result_rows, exp), ref, noise)]
    return per_system_rows(claim, inputs, result_rows, _claim_key, _observations)


CLAIM_CHECKS = {"sr3_scaling": _claim_rows}


def aggregate(result_paths: list[str | Path], reference_path: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Write ``scaling.{csv,md,tex}``, ``efficiency.{csv,md,tex}``, ``fig_scaling.png`` and ``fig_samples.png``.

    Raises:
        ResultError: a missing or corrupt result file. DataError: a missing reference file.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = [r for r in load_results(result_paths) if r["experiment"] == "sr3_scaling"]
    ref, source = read_reference(reference_path)
    df = result_rows(results)
    write_table(
        table(df),
        out_dir / "scaling",
        "Study B SR3 training per system, precision and device count (iteration: median, ms; totals: s; "
        "study_b_40k_minutes_projection: median iteration x Study B's 40,000 iterations, min; "
        "study_b_40k_minutes_measured_plus_projected: the measured wall time of the iterations run, first-"
        f"iteration compilation included, + the median for the rest, min). series_label: {FASTEST!r} only on "
        "the fastest ours configuration faster than the faithful one on the same node and device count",
    )
    write_table(
        efficiency_table(df, ref),
        out_dir / "efficiency",
        "Strong-scaling efficiency T(1) / (N T(N)): this run's results (minutes_40k projected from the median "
        "iteration; minutes_40k_measured_plus_projected: the iterations run, compilation included, + the "
        f"median for the rest; minutes_kind says which) and published wall times ({source})",
    )
    fig_scaling(df, ref, source, out_dir / "fig_scaling.png")
    fig_samples(df, out_dir / "fig_samples.png")
    return {
        "table": out_dir / "scaling.csv",
        "efficiency": out_dir / "efficiency.csv",
        "scaling": out_dir / "fig_scaling.png",
        "samples": out_dir / "fig_samples.png",
    }
