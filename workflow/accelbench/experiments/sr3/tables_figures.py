"""Study B SR3 aggregation, the figures: the strong-scaling figure (:func:`fig_scaling`: wall time of Study B's
workload at paper scale, speedup over 1 device at every scale, beside the published series) and the sample picture
(:func:`fig_samples`: low resolution, bicubic, SR3, ground truth of one held-out patch per result). Torch-free."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from accelbench.aggregate.figures import (
    FONT,
    SERIES_COLOURS,
    best_per_hardware,
    device_of,
    left_out_note,
    most_relevant_hardware,
    page_inches,
    published,
    save_figure,
    series_label,
    text_height_in,
    wrap,
)
from accelbench.core import files
from accelbench.errors import DataError
from accelbench.experiments.sr3.configs import STUDY_B_WORKLOAD
from accelbench.experiments.sr3.tables_rows import REFERENCE_DEVICES_PER_NODE, REFERENCE_LABELS

# hardware drawn at most: two legend entries each (best faithful, best ours) and the multi-node key within the
# figure checker's 10 entries; the others are named in the title (and in scaling.csv)
MAX_HARDWARE = 4
LEGEND_WRAP = 72  # characters per legend line: two columns fit the 13-inch figure


def _kind(series: str) -> str:
    """``faithful`` for the Study B-faithful and paper-text series (the studies' settings), ``ours`` otherwise."""
    return "faithful" if series in ("faithful", "paper_text") else "ours"


def _rank(g: pd.DataFrame) -> tuple:
    """Smaller is better: paper scale first, then the least time for Study B's 40,000 iterations at any device count
    (small scale: median iteration / devices, the same ordering), then more device counts."""
    paper = (g["scale"] == "paper").all()
    t = g["study_b_40k_minutes_projection"] if paper else g["iteration_ms"] / g["devices"]
    return (not paper, float(pd.to_numeric(t, errors="coerce").min()), -g["devices"].nunique())


def drawn_series(df: pd.DataFrame) -> pd.DataFrame:
    """The measured rows :func:`fig_scaling` draws: finished runs; per hardware (:func:`figures.device_of`) the
    best faithful curve and the best ours curve (:func:`_rank`; a curve: one origin, device, configuration and scale
    over device counts). Every other run is in ``scaling.csv``."""
    ok = df[df["status"] == "ok"] if "status" in df else df
    if ok.empty:
        return ok
    hw_col = "device" if "device" in ok else "hardware"
    ok = ok.assign(_hardware=ok[hw_col].map(device_of), _kind=ok["series"].map(_kind))
    ok = ok[pd.to_numeric(ok["iteration_ms"], errors="coerce").notna()]
    return best_per_hardware(ok, [hw_col, "configuration", "scale", "origin"], _rank)


def fig_scaling(df: pd.DataFrame, ref: pd.DataFrame, source: str, path: str | Path) -> list[str]:
    """Two panels. Left: wall time (minutes) of Study B's 40,000-iteration workload vs. devices for the published
    series and for measured series at *paper* scale only (a small-scale projection is not the same workload and
    never shares this time axis). Right: speedup over 1 device, T(1)/T(N), for every series of any scale (the
    normalised comparison), with ideal linear scaling dotted grey. Measured: per hardware the best faithful and the
    best ours curve (:func:`drawn_series`), the others in the tables. One colour per series
    (:data:`figures.SERIES_COLOURS`), published circles dashed, measured squares solid. Returns the figure's
    problems."""
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(13, 6))
    ok, left_out = most_relevant_hardware(drawn_series(df), MAX_HARDWARE)
    all_n = set(ref["devices"]) | (set(ok["devices"]) if not ok.empty else set())
    colours = iter(SERIES_COLOURS)
    published_key = _draw_published(ax_t, ax_s, ref, colours)
    small, with_totals = _draw_measured(ax_t, ax_s, ok, colours)
    n = np.array(sorted(all_n)) if all_n else np.array([1])
    ax_s.plot(n, n, ":", color="grey", linewidth=1, label="_ideal")  # said in the panel's title
    _label_axes(fig, ax_t, ax_s, small, with_totals)
    _key_published(ax_t, published_key)
    for ax in (ax_t, ax_s):
        ax.set_xticks(n, [str(int(v)) for v in n])
        ax.grid(True, which="both", alpha=0.3)
    _legend_and_title(fig, ax_t, ax_s, source, left_out_note(left_out, "hardware", "scaling.csv"))
    return save_figure(fig, path, dpi=120)


def _draw_published(ax_t, ax_s, ref: pd.DataFrame, colours) -> list[tuple[str, str]]:
    """Draw Study B's published series (dashed circles; its multi-node points circled); returns ``(name, colour)``
    of each, to be keyed in the time panel's corner (:func:`_key_published`)."""
    published_key: list[tuple[str, str]] = []
    for system, g in ref.groupby("system", sort=False):
        g = g.sort_values("devices")
        per = REFERENCE_DEVICES_PER_NODE.get(system)
        multi_ref = g[g["devices"] > per] if per else g.iloc[:0]
        nodes = (
            (int(multi_ref["devices"].min()) // per, int(multi_ref["devices"].max()) // per) if len(multi_ref) else ()
        )
        circled = [f"circled: {nodes[0]}-{nodes[1]} nodes of {per}"] if nodes else []
        label = series_label(published("Study B"), REFERENCE_LABELS.get(system, system), "paper", "fp32", *circled)
        color = next(colours)
        # named at the line's end, not in the legend: the legend keeps to the measured series (at most 10 entries)
        ax_t.plot(g["devices"], g["minutes"], "--o", color=color, alpha=0.8, markersize=4, label=f"_{label}")
        published_key.append((REFERENCE_LABELS.get(system, system) + (f" ({circled[0]})" if circled else ""), color))
        if len(multi_ref):  # Study B's multi-node points (Gaudi1: 16, 32, 64 cards on 2, 4, 8 nodes), said in its label
            ax_t.scatter(
                multi_ref["devices"],
                multi_ref["minutes"],
                s=90,
                facecolors="none",
                edgecolors=color,
                linewidths=1.2,
                zorder=4,
                label="_multi-node",
            )
        t1 = g.loc[g["devices"] == 1, "minutes"]
        if len(t1):
            ax_s.plot(g["devices"], float(t1.iloc[0]) / g["minutes"], "--o", color=color, alpha=0.8, markersize=4)
    return published_key


def _draw_measured(ax_t, ax_s, ok: pd.DataFrame, colours) -> tuple[list[str], bool]:
    """Draw the measured curves (:func:`drawn_series`, one per device type, configuration, scale and origin): paper
    scale on the time panel (with the measured-plus-projected totals), every scale on the speedup panel. Returns the
    labels of the small-scale series (not on the time axis) and whether any total was drawn."""
    small, with_totals = [], False
    hw_col = "device" if "device" in ok else "hardware"
    for (hw, prec, scale, origin), g in (
        # one curve per device type: the label without a count (each point's count is its x)
        ok.groupby([hw_col, "configuration", "scale", "origin"], sort=True) if not ok.empty else []
    ):
        g = g.sort_values("devices")
        color = next(colours)
        label = series_label(origin, hw, scale, f"best {_kind(g['series'].iloc[0])}: {prec}")
        multi = g[g["nodes"] > 1] if "nodes" in g else g.iloc[:0]
        if len(multi):  # multi-node points beside the single-node ones, labelled with their layout
            _circle_multi_node(ax_t if scale == "paper" else ax_s, multi, scale)
        if scale == "paper":
            ax_t.plot(g["devices"], g["study_b_40k_minutes_projection"], "-s", color=color, linewidth=2, label=label)
            with_totals = _draw_total(ax_t, g, color) or with_totals
        else:
            small.append(label)
        if len(g["devices"].unique()) > 1 and (g["devices"] == 1).any():  # T(1) / T(N): needs 1 and N devices
            ax_s.plot(g["devices"], g["speedup_vs_1"], "-s", color=color, linewidth=2, label=label)
    return small, with_totals


def _circle_multi_node(ax, multi: pd.DataFrame, scale: str) -> None:
    """Circle a measured curve's multi-node points in red, each annotated with its layout (nodes x ranks per node);
    the legend names them once."""
    y = "study_b_40k_minutes_projection" if scale == "paper" else "speedup_vs_1"
    labelled = any(h.get_label().startswith("measured multi-node") for h in ax.collections)
    ax.scatter(
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
        ax.annotate(
            mr["layout"],
            (mr["devices"], mr[y]),
            fontsize=7,
            color="red",
            textcoords="offset points",
            xytext=(6, 6),
        )


def _draw_total(ax_t, g: pd.DataFrame, color) -> bool:
    """Beside a paper-scale projection, dotted open squares: the total with the iterations run (compilation
    included) + the median for the rest; returns whether any was drawn."""
    total = (
        g.dropna(subset=["study_b_40k_minutes_measured_plus_projected"])
        if "study_b_40k_minutes_measured_plus_projected" in g
        else g.iloc[:0]
    )
    if not len(total):
        return False
    ax_t.plot(
        total["devices"],
        total["study_b_40k_minutes_measured_plus_projected"],
        ":s",
        color=color,
        markerfacecolor="none",
        linewidth=1.2,
        label="_total",
    )  # said in the panel's title
    return True


def _label_axes(fig, ax_t, ax_s, small: list[str], with_totals: bool) -> None:
    """Axis labels, scales and titles of both panels; under the time axis, how many small-scale series it leaves
    out."""
    # small-scale series: under the axis, not in a box over the curves; their labels are in the legend
    note = f"\n{len(small)} small-scale series not on this time axis (another workload): see the speedup panel"
    ax_t.set_xlabel("devices (count)" + (wrap(note, fig, FONT["label"], 0.45) if small else ""))
    ax_t.set_ylabel("training time for 40,000 iterations (min)")
    ax_t.set_xscale("log", base=2)
    ax_t.set_yscale("log")
    ax_t.set_title(
        "wall time at paper scale (log-log); measured: projected from\nthe median iteration"
        + (
            "; dotted, open squares: the iterations run\n(compilation included) + the median for the rest"
            if with_totals
            else ""
        ),
        fontsize=FONT["label"],
    )
    ax_s.set_xlabel("devices (count)")
    ax_s.set_ylabel("speedup over 1 device, T(1) / T(N) (x)")
    ax_s.set_title(
        "speedup over 1 device, every scale (log-log);\ndotted grey: ideal linear speedup", fontsize=FONT["label"]
    )
    ax_s.set_xscale("log", base=2)
    ax_s.set_yscale("log", base=2)


def _key_published(ax_t, published_key: list[tuple[str, str]]) -> None:
    """Key the published series in the time panel's upper right, each name in its line's colour."""
    # upper right: long runs on many devices, no data there; the legend keeps to the measured series (at most 10
    # entries however many hardware)
    for i, (name, color) in enumerate([("published (Study B), dashed circles:", "black"), *published_key]):
        ax_t.text(
            0.98,
            0.97 - 0.055 * i,
            name,
            transform=ax_t.transAxes,
            ha="right",
            va="top",
            color=color,
            fontsize=FONT["legend"],
        )


def _legend_and_title(fig, ax_t, ax_s, source: str, left_out: str = "") -> None:
    """The measured series' legend under the plots (two wrapped columns), the figure's title naming the published
    source, and the figure grown by the legend's height."""
    th, tl = ax_t.get_legend_handles_labels()
    handles, labels = ax_s.get_legend_handles_labels()
    uniq = dict(zip(tl + labels, th + handles))
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
        wrap(
            f"Study B SR3 strong scaling (iterations x devices constant); measured: per hardware the best faithful and "
            f"the best ours run (every run: scaling.csv). Published: {source}" + (f". {left_out}" if left_out else ""),
            fig,
            FONT["title"],
        ),
        fontsize=FONT["title"],
    )
    # the legend's height (inches: its lines at 1.45 x the font size, padding, the note under the time axis) goes
    # below the 6-inch plots
    legend_in = text_height_in(lines, FONT["legend"], 1.45) + 0.65
    fig.set_figheight(6 + legend_in)
    fig.tight_layout(rect=(0, legend_in / (6 + legend_in), 1, 1))


ROW_IN = 3.1  # inches of one result's row of panels (the images, their titles)


def fig_samples(df: pd.DataFrame, path: str | Path, max_rows: int = 6, dpi: int = 110) -> list[str]:
    """Low-res / bicubic / SR3 / ground truth of one held-out patch for up to ``max_rows`` results, and at most the
    rows that fit a page (:func:`figures.page_inches` at ``dpi``) with the caption: one result per hardware first
    (:func:`figures.device_of`), in the frame's order; the caption names how many results are left out (each one's
    samples file lies beside its ``result.json``, its PSNR and SSIM are in ``scaling.csv``). The caption also says
    how many iterations each SR3 model trained (Study B: ``STUDY_B_WORKLOAD`` in all) and, where SR3 does not beat
    bicubic, that its column is the noise of an under-trained model (the pipeline ran; SR3's quality is not
    shown)."""
    ok = df[df["status"] == "ok"] if "status" in df else df
    found = []
    for _, r in ok.iterrows():
        name = (r["_artefacts"] or {}).get("samples")
        p = Path(r["_path"]).with_name(name) if name else None
        if p is not None and p.exists():
            found.append((r, p))
    # one result per hardware first, then the others: the most hardware in the rows a page holds
    first_of: dict = {}
    for i, (r, _) in enumerate(found):
        first_of.setdefault(device_of(r["hardware"]), i)
    firsts = set(first_of.values())
    found = [f for i, f in enumerate(found) if i in firsts] + [f for i, f in enumerate(found) if i not in firsts]
    rows = min(max_rows, len(found))
    while True:  # the most rows that fit a page with their caption (bounded: the caption names only those rows)
        caption, extra = _samples_caption([r for r, _ in found[:rows]], len(found) - rows)
        if rows <= 1 or ROW_IN * rows + extra <= page_inches(dpi)[1] - 0.05:
            break
        rows -= 1
    panels = []
    for r, p in found[:rows]:  # a plain file of bounded size without pickles (a copied-in FIFO: one line)
        arrays = files.load_numpy(p, "SR3 samples file", error=DataError)
        panels.append((r, arrays if isinstance(arrays, dict) else {}))
    n = max(1, len(panels))
    fig, axes = plt.subplots(n, 4, figsize=(10, ROW_IN * n + extra), squeeze=False)
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
    return save_figure(fig, path, dpi=dpi)


def _samples_caption(shown: list, left_out: int) -> tuple[str, float]:
    """(caption under the samples of the results ``shown``, inches it takes): what the panels show and not, each
    SR3 model's iterations, and how many results are ``left_out`` and where they are."""
    notes = []
    for r in shown:
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
    if left_out:
        caption += (
            f" Not drawn: {left_out} more result{'s' if left_out != 1 else ''} (each one's samples file beside its "
            "result.json; every run's PSNR and SSIM: scaling.csv)."
        )
    return caption, (0.16 * (len(caption) // 150 + 1) if caption else 0)  # inches for the caption below the panels
