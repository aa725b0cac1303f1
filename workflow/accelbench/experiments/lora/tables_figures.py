"""Study B LoRA aggregation, the figure: runtime vs. devices (:func:`runtime_figure`), the published series beside
ours (projected epoch minutes where the epoch size is known, else minutes per million training tokens)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from accelbench.aggregate.figures import FONT, published, save_figure, series_label, text_height_in, wrap


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


PUBLISHED_MARKERS = "o^vD<>"
MEASURED_MARKERS = "sPX*hpd8H"  # our series' hardware; past the last one the same markers again, hollow


def measured_marker(i: int) -> dict:
    """Marker keywords of the ``i``-th hardware of our series: one of :data:`MEASURED_MARKERS`, filled, then the same
    markers hollow, so that every origin (measured here, each reference run) keeps its own look in the legend."""
    n = len(MEASURED_MARKERS)
    return {"marker": MEASURED_MARKERS[i % n], **({"markerfacecolor": "none"} if (i // n) % 2 else {})}


def runtime_figure(ours: pd.DataFrame, ref: pd.DataFrame, path: str | Path, ref_source: str) -> list[str]:
    """Runtime vs. devices, one row of panels per model family. Left: wall time per epoch (min), the published
    series (dashed) and ours where the epoch size is known (projected epoch minutes: the same quantity on the same
    axis, solid). Right, only where ours lack the epoch size: ours in minutes per million training tokens (another
    quantity, its own axis, said in the title). Colour: strategy and attention (the same in every panel); marker:
    the hardware of the series (published Gaudi generations, ours by origin and device); one legend for the figure,
    each entry once. Returns the figure's problems (:func:`figures.figure_problems`)."""
    from matplotlib.lines import Line2D

    ok = ours[ours["status"] == "ok"] if not ours.empty else ours
    ref = ref.assign(attention=ref["flash_attention"].map(lambda f: "flash" if f else "eager"))
    fams = list(dict.fromkeys(list(ref["model"]) + (list(ok["family"]) if not ok.empty else [])))
    combos = list(
        dict.fromkeys(
            [(s, a) for s, a in zip(ref["strategy"], ref["attention"])]
            + ([(s, a) for s, a in zip(ok["strategy"], ok["attention"])] if not ok.empty else [])
        )
    )
    colour = {c: f"C{i % 10}" for i, c in enumerate(combos)}
    pub_hw = list(dict.fromkeys(ref["accelerator"]))
    pub_marker = {h: PUBLISHED_MARKERS[i % len(PUBLISHED_MARKERS)] for i, h in enumerate(pub_hw)}
    ours_keys = list(dict.fromkeys(zip(ok["origin"], ok["device"], ok["scale"]))) if not ok.empty else []
    our_marker = {k: measured_marker(i) for i, k in enumerate(ours_keys)}
    per_tok_any = not ok.empty and ok["projected_epoch_min"].isna().any()
    ncols = 2 if per_tok_any else 1
    fig, axes = plt.subplots(
        max(1, len(fams)), ncols, figsize=(5.6 * ncols, 2.9 * max(1, len(fams)) + 1.6), squeeze=False
    )
    used_combos, used_pub, used_ours, used_series = set(), set(), set(), set()
    variants = set(ok["series"].dropna()) if not ok.empty and "series" in ok else set()
    for row, fam in enumerate(fams):
        mine = ok[ok["family"] == fam] if not ok.empty else ok
        ax_e = axes[row, 0]
        pub = ref[ref["model"] == fam]
        xs_e: set = set()
        for _, g in pub.groupby("series", sort=False):
            g = g.sort_values("devices")
            key = (g["strategy"].iloc[0], g["attention"].iloc[0])
            hw = g["accelerator"].iloc[0]
            ax_e.plot(g["devices"], g["minutes"], "--", marker=pub_marker[hw], ms=4, color=colour[key], alpha=0.8)
            used_combos.add(key)
            used_pub.add(hw)
            xs_e |= set(g["devices"])
        epoch = mine[mine["projected_epoch_min"].notna()] if not mine.empty else mine
        per_tok = mine[mine["projected_epoch_min"].isna()] if not mine.empty else mine
        for d, ax, col, xs in (
            (epoch, ax_e, "projected_epoch_min", xs_e),
            (per_tok, axes[row, 1] if ncols > 1 else None, "projected_min_per_mtok", set()),
        ):
            if ax is None or d.empty:
                continue
            d = d.assign(series=d["series"].fillna("faithful")) if "series" in d else d.assign(series="faithful")
            for (strat, att, origin, hw, scale, ser), g in d.groupby(
                ["strategy", "attention", "origin", "device", "scale", "series"]
            ):
                g = g.sort_values("devices")
                ax.plot(
                    g["devices"],
                    g[col],
                    ls=_series_style(ser, variants),
                    **our_marker[(origin, hw, scale)],
                    ms=6,
                    lw=1.8,
                    color=colour[(strat, att)],
                )
                used_series.add(ser)
                used_combos.add((strat, att))
                used_ours.add((origin, hw, scale))
                xs |= set(g["devices"])
            if ax is not ax_e:
                ax.set_title(f"{fam}: ours, per million tokens (epoch size unknown)", fontsize=FONT["label"])
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
    handles = [
        Line2D([], [], color=colour[c], lw=2, label=f"{c[0]}, {c[1]} attention") for c in combos if c in used_combos
    ]
    src = "Study B, Fig. 2, read off"
    handles += [
        Line2D(
            [],
            [],
            color="k",
            ls="--",
            marker=pub_marker[h],
            ms=5,
            label=series_label(published(src), h.capitalize(), "paper"),
        )
        for h in pub_hw
        if h in used_pub
    ]
    handles += [
        Line2D(
            [],
            [],
            color="k",
            ls="-",
            **our_marker[k],
            ms=6,
            label=series_label(k[0], k[1], k[2], "projected from the median step"),
        )
        for k in ours_keys
        if k in used_ours
    ]
    if len(used_series) > 1:  # ours in two series: the line style tells them apart
        handles += [
            Line2D([], [], color="0.4", ls=_series_style(ser, variants), lw=1.8, label=f"our runs, series: {ser}")
            for ser in sorted(used_series)
        ]
    # two legend columns only where the longest label fits half the figure's width (about 0.55 em per character,
    # plus the handle): long reference-run labels otherwise run off the canvas
    longest = max((len(h.get_label()) for h in handles), default=0)
    two = ncols > 1 and 2 * ((longest + 6) * 0.55 * (FONT["legend"] + 1) / 72) < 0.97 * fig.get_figwidth()
    if handles:
        fig.legend(
            handles=handles,
            fontsize=FONT["legend"] + 1,
            loc="lower left",
            bbox_to_anchor=(0.01, 0.01),
            ncol=2 if two else 1,
        )
    rows = (len(handles) + 1) // 2 if two else len(handles)
    title = wrap(
        f"Study B LoRA fine-tuning runtime vs. devices. Published series: {ref_source.rstrip(':')}",
        fig,
        FONT["title"],
    )
    fig.suptitle(title, fontsize=FONT["title"])
    legend_in = 0.2 * rows + 0.3  # the legend's height (inches) below the panels, which keep theirs
    title_in = text_height_in(title.count("\n") + 1, FONT["title"]) + 0.1  # the title's lines above them
    fig.set_figheight(2.9 * max(1, len(fams)) + 1.3 + legend_in + title_in)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1 - title_in / fig.get_figheight()))
    return save_figure(fig, path, dpi=130)
