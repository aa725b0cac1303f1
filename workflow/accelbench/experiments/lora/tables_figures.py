"""Study B LoRA aggregation, the figure: runtime vs. devices (:func:`runtime_figure`), the published series beside
ours (projected epoch minutes where the epoch size is known, else minutes per million training tokens)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
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
from accelbench.aggregate.legend_check import MAX_LEGEND_ENTRIES


def _series_style(series: str, variants=()) -> str | tuple:
    """Line style of a LoRA series in the figure: faithful solid, ours dotted, each other ours variant of the figure
    (``variants``) its own: the style its name's hash picks among dash-dot and dashed where no variant before it (in
    sorted order) has it, else the first free one of :data:`VARIANT_STYLES` (dash patterns past the named styles)."""
    styles = {"faithful": "-", "ours": ":"}
    if series in styles:
        return styles[series]
    taken: list = []
    for name in sorted(set(variants) | {series}):
        if name in styles:
            continue
        preferred = VARIANT_STYLES[sum(map(ord, str(name))) % 2]
        free = [s for s in VARIANT_STYLES if s not in taken]
        style = preferred if preferred not in taken else (free[0] if free else preferred)
        if name == series:
            return style
        taken.append(style)
    return VARIANT_STYLES[0]


# line styles of the ours variants (Line2D's ls): the two named ones first, then dash patterns (offset, on-off)
VARIANT_STYLES = ["-.", "--", (0, (6, 1.5, 1, 1.5, 1, 1.5)), (0, (1, 2.5)), (0, (10, 3))]


STRATEGY_STYLES = {"single": ":", "ddp": "-", "fsdp": "--", "zero3": "-."}  # line style of a strategy, every series


def _kind(series) -> str:
    return "faithful" if series == "faithful" else "ours"


def drawn_runs(ok: pd.DataFrame, fams: list[str]) -> pd.DataFrame:
    """The rows of ours :func:`runtime_figure` draws: per hardware (:func:`figures.device_of`) the best faithful and
    the best ours series of one run (most model families, then the least projected minutes per million tokens on the
    first family it ran); every other run is in ``runs.csv``."""
    if ok.empty:
        return ok
    ok = ok.assign(series=ok["series"].fillna("faithful") if "series" in ok else "faithful")
    ok = ok.assign(_hardware=ok["device"].map(device_of), _kind=ok["series"].map(_kind))
    order = {f: i for i, f in enumerate(fams)}

    def rank(g):
        first = min(g["family"], key=lambda f: order.get(f, len(order)))
        return (-g["family"].nunique(), order.get(first, len(order)), g.loc[g["family"] == first, "_y"].min())

    ok = ok.assign(_y=ok["projected_epoch_min"].fillna(ok["projected_min_per_mtok"]))
    return best_per_hardware(ok, ["origin", "device", "series"], rank)


def runtime_figure(ours: pd.DataFrame, ref: pd.DataFrame, path: str | Path, ref_source: str) -> list[str]:
    """Runtime vs. devices, one row of panels per model family. Left: wall time per epoch (min), the published
    series and ours where the epoch size is known (projected epoch minutes: the same quantity on the same axis).
    Right, only where ours lack the epoch size: ours in minutes per million training tokens, its own panel and axis
    (another quantity: never on the epoch axis; the panel's title and the caption say so). Ours: per hardware the
    best faithful and the best ours series (:func:`drawn_runs`). Colour: the series (published: its Gaudi
    generation; ours: its run and series), one per legend entry; line style: the strategy, hollow markers: eager
    attention (said in the figure's title). Returns the figure's problems (:func:`figure_check.figure_problems`)."""
    ok = ours[ours["status"] == "ok"] if not ours.empty else ours
    ref = ref.assign(attention=ref["flash_attention"].map(lambda f: "flash" if f else "eager"))
    fams = list(dict.fromkeys(list(ref["model"]) + (list(ok["family"]) if not ok.empty else [])))
    pub_hw = list(dict.fromkeys(ref["accelerator"]))
    ok = drawn_runs(ok, fams)
    # the legend: the published series and two per hardware (best faithful, best ours) within the checker's entries
    ok, left_out = most_relevant_hardware(ok, max(1, (MAX_LEGEND_ENTRIES - len(pub_hw)) // 2))
    colours = iter(SERIES_COLOURS)
    colour = {("published", h): next(colours) for h in pub_hw}
    ours_keys = list(dict.fromkeys(zip(ok["origin"], ok["device"], ok["scale"], ok["series"]))) if not ok.empty else []
    colour.update({k: next(colours) for k in ours_keys})
    per_tok_any = not ok.empty and ok["projected_epoch_min"].isna().any()
    ncols = 2 if per_tok_any else 1
    fig, axes = plt.subplots(
        max(1, len(fams)), ncols, figsize=(5.6 * ncols, 2.6 * max(1, len(fams)) + 1.6), squeeze=False
    )
    left_out = left_out_note(left_out, "hardware", "runs.csv")
    labels = {
        ("published", h): series_label(published("Study B, Fig. 2, read off"), h.capitalize(), "paper") for h in pub_hw
    }
    labels.update({k: series_label(k[0], k[1], k[2], f"best {_kind(k[3])}: {k[3]}") for k in ours_keys})
    for row, fam in enumerate(fams):
        mine = ok[ok["family"] == fam] if not ok.empty else ok
        ax_e = axes[row, 0]
        xs_e: set = set()
        for _, g in ref[ref["model"] == fam].groupby("series", sort=False):
            g = g.sort_values("devices")
            key = ("published", g["accelerator"].iloc[0])
            ax_e.plot(
                g["devices"],
                g["minutes"],
                ls=STRATEGY_STYLES.get(g["strategy"].iloc[0], "-"),
                marker="o",
                ms=4,
                color=colour[key],
                markerfacecolor="none" if g["attention"].iloc[0] == "eager" else colour[key],
                label=labels[key],
            )
            xs_e |= set(g["devices"])
        epoch = mine[mine["projected_epoch_min"].notna()] if not mine.empty else mine
        per_tok = mine[mine["projected_epoch_min"].isna()] if not mine.empty else mine
        for d, ax, col, xs in (
            (epoch, ax_e, "projected_epoch_min", xs_e),
            (per_tok, axes[row, 1] if ncols > 1 else None, "projected_min_per_mtok", set()),
        ):
            if ax is None or d.empty:
                continue
            for (origin, hw, scale, ser, strat, att), g in d.groupby(
                ["origin", "device", "scale", "series", "strategy", "attention"]
            ):
                g = g.sort_values("devices")
                key = (origin, hw, scale, ser)
                ax.plot(
                    g["devices"],
                    g[col],
                    ls=STRATEGY_STYLES.get(strat, "-"),
                    marker="s",
                    ms=6,
                    lw=1.8,
                    color=colour[key],
                    markerfacecolor="none" if att == "eager" else colour[key],
                    label=labels[key],
                )
                xs |= set(g["devices"])
            if ax is not ax_e:
                ax.set_title(
                    f"{fam}: ours, minutes per million tokens\n(epoch size unknown: not the published epoch minutes)",
                    fontsize=FONT["label"],
                )
                ax.set_ylabel("time per 1M training tokens\n(min, projected)")
                ax.set_xlabel("devices (count)")
                ax.set_xticks(sorted(xs))
                ax.grid(alpha=0.3)
        if ax_e.get_lines():
            ax_e.set_title(
                f"{fam}: wall time per epoch" + (" (published)" if epoch.empty else ""), fontsize=FONT["label"]
            )
            ax_e.set_ylabel("wall time per epoch (min)")
            ax_e.set_xlabel("devices (count)")
            ax_e.set_xticks(sorted(xs_e))
            ax_e.grid(alpha=0.3)
    for ax in list(axes.flat):  # no empty panel
        if not ax.get_lines():
            ax.remove()
    rows = _figure_legend(fig)
    styles = ", ".join(
        f"{k}: {'dotted' if v == ':' else 'solid' if v == '-' else 'dashed' if v == '--' else 'dash-dot'}"
        for k, v in STRATEGY_STYLES.items()
    )
    title = wrap(
        f"Study B LoRA fine-tuning runtime vs. devices; ours: per hardware the best faithful and the best ours series "
        f"(every run: runs.csv). Line: strategy ({styles}); hollow markers: eager attention, filled: flash. "
        f"Published series: {ref_source.rstrip(':')}" + (f". {left_out}" if left_out else ""),
        fig,
        FONT["title"],
    )
    fig.suptitle(title, fontsize=FONT["title"])
    legend_in = 0.2 * rows + 0.3  # the legend's height (inches) below the panels, which keep theirs
    title_in = text_height_in(title.count("\n") + 1, FONT["title"]) + 0.1  # the title's lines above them
    # the panels' rows share what a page leaves of its height (at most 2.4 in each): bounded for any number of runs
    row_in = min(2.4, (page_inches(120)[1] - 0.65 - legend_in - title_in) / max(1, len(fams)))
    fig.set_figheight(row_in * max(1, len(fams)) + 0.6 + legend_in + title_in)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1 - title_in / fig.get_figheight()))
    return save_figure(fig, path, dpi=120)


def _figure_legend(fig) -> int:
    """One legend below the panels, one entry per label over every panel, each a plain solid line in the series'
    colour (the line style is the strategy). Returns the number of entries."""
    handles: dict = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        from matplotlib.lines import Line2D

        proxies = [
            Line2D([], [], color=h.get_color(), marker=h.get_marker(), ms=5, label=lab) for lab, h in handles.items()
        ]
        fig.legend(handles=proxies, fontsize=FONT["legend"] + 1, loc="lower left", bbox_to_anchor=(0.01, 0.01))
    return len(handles)
