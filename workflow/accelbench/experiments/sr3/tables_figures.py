"""Study B SR3 aggregation, the figures: the strong-scaling figure (:func:`fig_scaling`: wall time of Study B's
workload at paper scale, speedup over 1 device at every scale, beside the published series) and the sample picture
(:func:`fig_samples`: low resolution, bicubic, SR3, ground truth of one held-out patch per result). Torch-free."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from accelbench.aggregate.figures import FONT, published, save_figure, series_label, text_height_in, wrap
from accelbench.core import files
from accelbench.errors import DataError
from accelbench.experiments.sr3.configs import STUDY_B_WORKLOAD
from accelbench.experiments.sr3.tables_rows import REFERENCE_DEVICES_PER_NODE, REFERENCE_LABELS

LEGEND_WRAP = 72  # characters per legend line: two columns fit the 13-inch figure
MEASURED_COLOURS = [matplotlib.colormaps["tab20"](k) for k in range(20)]


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
        # measured series: black, then tab20's 20 colours (published series draw circles, these squares, so the
        # two never look alike); past 21 series the marker changes too, so no two entries look the same
        color = "black" if j == 0 else MEASURED_COLOURS[(j - 1) % len(MEASURED_COLOURS)]
        mark = "s" if j <= len(MEASURED_COLOURS) else "D"
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
            ax_t.plot(
                g["devices"], g["study_b_40k_minutes_projection"], f"-{mark}", color=color, linewidth=2, label=label
            )
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
            ax_s.plot(g["devices"], g["speedup_vs_1"], f"-{mark}", color=color, linewidth=2, label=label)
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
    # small-scale series: under the axis, not in a box over the curves; their labels are in the legend
    note = f"\n{len(small)} small-scale series not on this time axis (another workload): see the speedup panel"
    ax_t.set_xlabel("devices (count)" + (wrap(note, fig, FONT["label"], 0.45) if small else ""))
    ax_t.set_ylabel("training time for 40,000 iterations (min)")
    ax_t.set_xscale("log", base=2)
    ax_t.set_yscale("log")
    ax_t.set_title(
        "wall time at paper scale (log-log;\nmeasured: projected from the median iteration)", fontsize=FONT["label"]
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
    # two columns of labels wrapped to half the figure's width (a reference run's label names its hardware)
    shown = [textwrap.fill(label, LEGEND_WRAP) for label in uniq]
    fig.legend(
        list(uniq.values()),
        shown,
        fontsize=FONT["legend"],
        loc="lower left",
        bbox_to_anchor=(0.01, 0.01),
        ncol=2,
    )
    lines = sum(max(s.count("\n") + 1 for s in shown[i : i + 2]) for i in range(0, len(shown), 2))
    fig.suptitle(
        wrap(f"Study B SR3 strong scaling (iterations x devices constant). Published: {source}", fig, FONT["title"]),
        fontsize=FONT["title"],
    )
    # the legend's height (inches: its lines at 1.45 x the font size, padding, the note under the time axis) goes
    # below the 6-inch plots
    legend_in = text_height_in(lines, FONT["legend"], 1.45) + 0.65
    fig.set_figheight(6 + legend_in)
    fig.tight_layout(rect=(0, legend_in / (6 + legend_in), 1, 1))
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
        if p is not None and p.exists():  # a plain file of bounded size without pickles (a copied-in FIFO: one line)
            arrays = files.load_numpy(p, "SR3 samples file", error=DataError)
            panels.append((r, arrays if isinstance(arrays, dict) else {}))
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
