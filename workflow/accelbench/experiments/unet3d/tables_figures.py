"""Study A's figures (torch-free; matplotlib's backend is set once by :mod:`accelbench.aggregate`): the training-step
speedups with the published ranges (:func:`fig_speedup`), the kernel-time breakdown by class (:func:`fig_breakdown`)
and the kernel launches per step (:func:`fig_counts`), drawn from the rows of
:func:`accelbench.experiments.unet3d.tables_rows.result_rows`. Each returns the figure's problems
(:func:`accelbench.aggregate.figures.save_figure`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from accelbench.aggregate.common import status_cell
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
from accelbench.experiments.unet3d.configs import AUTOTUNED
from accelbench.experiments.unet3d.tables_rows import CLASSES, ORDER
from accelbench.experiments.unet3d_ncu.tables import KEY, NETWORK_LABEL
from accelbench.experiments.unet3d_ncu.tables_claims import claim_configuration


def _title(df: pd.DataFrame, what: str) -> str:
    models = ", ".join(f"{m} ({v})" for m, v in df[["model", "volume"]].drop_duplicates().itertuples(index=False))
    return f"Study A, Med-DDPM U-Net {models}:\n{what}"


def _series(g: pd.DataFrame, model: str | None = None) -> str:
    """Legend text of one (hardware, model) group: origin, hardware, scale (volume), model."""
    r = g.iloc[0]
    net = "" if r.get("network", "med_ddpm") == "med_ddpm" else f", {NETWORK_LABEL.get(r['network'], r['network'])}"
    return series_label(
        r.get("origin", "measured here"), r["hardware"], r["scale"], f"{model or r['model']} {r['volume']}{net}"
    )


SOURCE_NAMES = {"digest": "Study A digest", "abstract": "Study A abstract"}
# one colour per kernel class (tab20 pairs, "other" grey): never two classes alike
CLASS_COLOURS = {
    "convolution": "#1f77b4",
    "gemm": "#aec7e8",
    "attention": "#2ca02c",
    "normalization": "#d62728",
    "layout_conversion": "#9467bd",
    "cast_copy": "#8c564b",
    "elementwise": "#e377c2",
    "optimizer": "#bcbd22",
    "reduction": "#17becf",
    "memory": "#ff7f0e",
    "other": "#7f7f7f",
}


def published_speedups(claims: pd.DataFrame | None) -> pd.DataFrame:
    """The published speedup ranges of ``study_a_claims.csv`` (metric ``speedup_x``): configuration (ours), low,
    high, gpu, source."""
    if claims is None or claims.empty:
        return pd.DataFrame(columns=["configuration", "low", "high", "gpu", "source"])
    c = claims[claims["metric"] == "speedup_x"]
    return pd.DataFrame(
        {
            "configuration": [claim_configuration(x) for x in c["configuration"]],
            "low": pd.to_numeric(c["low"]),
            "high": pd.to_numeric(c["high"]),
            "gpu": c["gpu"].str.upper(),
            "source": c["source"],
        }
    )


FAITHFUL = ("baseline", "tf32", "channels_last_3d", "tf32_channels_last_3d")  # Study A's four, autotuning off
RUN = [*KEY, "hardware"]  # one run of one network on one device (two systems may share a hardware label)


def drawn_rows(df: pd.DataFrame, speedups: bool = False) -> pd.DataFrame:
    """The rows Study A's figures draw: per hardware (:func:`figures.device_of`), the best faithful run's bars of
    Study A's four configurations (:data:`FAITHFUL`: the run with most of them finished, Med-DDPM's own network
    first, then the fewest noisy) and the best ours configuration (the fastest finished training step of every other
    configuration, Med-DDPM's network first). ``speedups``: only rows with a speedup (a run without its baseline has
    none). Columns ``_hardware`` and ``_kind`` (``faithful`` / ``ours``) added. Every other row is in the table."""
    ok = df[df["status"] == "ok"]
    if speedups:
        ok = ok[pd.to_numeric(ok["speedup_vs_baseline"], errors="coerce").notna()]
    if ok.empty:
        return ok.assign(_hardware=[], _kind=[])
    ok = ok.assign(
        _hardware=ok["hardware"].map(device_of),
        _kind=["faithful" if c in FAITHFUL else "ours" for c in ok["configuration"]],
    )
    other_net = ok.get("network", pd.Series("med_ddpm", index=ok.index)) != "med_ddpm"
    ok = ok.assign(_other_net=other_net, _noisy=ok.get("noise", pd.Series(index=ok.index)) == "noisy")
    faithful = best_per_hardware(
        ok[ok["_kind"] == "faithful"],
        RUN,
        lambda g: (-len(g), bool(g["_other_net"].iloc[0]), int(g["_noisy"].sum())),
    )
    ours = best_per_hardware(
        ok[ok["_kind"] == "ours"],
        [*RUN, "configuration"],
        lambda g: (bool(g["_other_net"].iloc[0]), bool(g["_noisy"].iloc[0]), float(g["train_step_ms"].iloc[0])),
    )
    return pd.concat([faithful, ours]).drop(columns=["_other_net", "_noisy"])


def fig_speedup(df: pd.DataFrame, path: str | Path, claims: pd.DataFrame | None = None) -> list[str]:
    """Horizontal grouped bars: speedup over baseline per configuration (rows); per hardware two series
    (:func:`drawn_rows`): the best faithful run's four Study A configurations and the best ours configuration, each
    over its own run's baseline (``baseline``, or ``baseline_autotuned`` for an autotuned configuration), one colour
    each; whiskers span the speedups implied by the p90 and p10 step times; results flagged noisy are hatched (a
    legend entry says so, nothing is written over a bar); published speedup ranges (``claims``, metric
    ``speedup_x``) as shaded bands on their configuration's row. Returns the figure's problems."""
    from matplotlib.patches import Patch

    pub = published_speedups(claims)
    # two legend entries per hardware (best faithful, best ours) beside the published bands and the noisy key
    shown, left_out = most_relevant_hardware(
        drawn_rows(df, speedups=True), max(1, (MAX_LEGEND_ENTRIES - min(3, len(pub)) - 1) // 2)
    )
    confs = [c for c in ORDER if c in set(shown["configuration"]) or (c in FAITHFUL and c in set(df["configuration"]))]
    groups = list(shown.groupby(["_hardware", "_kind"], sort=True))
    pub = pub[pub["configuration"].isin(confs)]
    height = 0.8 / max(1, len(groups))
    fig, ax = plt.subplots(figsize=(10, 2.6 + 0.3 * len(confs) * max(1, len(groups)) ** 0.5))
    y0 = np.arange(len(confs))[::-1]  # first configuration on top
    row = dict(zip(confs, y0))
    any_noisy = False
    colours = iter(SERIES_COLOURS)
    for gi, (_, g) in enumerate(groups):
        label = _series(g) + f", best {g['_kind'].iloc[0]}"
        colour = next(colours)
        for _, r in g.iterrows():
            c = r["configuration"]
            y = row[c] - gi * height
            s = r["speedup_vs_baseline"]
            base = "baseline" + AUTOTUNED if c.endswith(AUTOTUNED) else "baseline"  # each run's own baseline
            b = df[(df[RUN] == r[RUN]).all(axis=1) & (df["configuration"] == base) & (df["status"] == "ok")]
            base_ms = float(b["train_step_ms"].iloc[0]) if len(b) else None
            lo = s - base_ms / r["train_step_p90_ms"] if base_ms else 0
            hi = base_ms / r["train_step_p10_ms"] - s if base_ms else 0
            noisy = r.get("noise") == "noisy"  # measurements.noise: other load on the host or a wide spread
            any_noisy |= noisy
            ax.barh(
                y,
                s,
                height,
                color=colour,
                xerr=[[max(lo, 0)], [max(hi, 0)]],
                capsize=2,
                label=label,
                hatch="xx" if noisy else None,
                edgecolor="white" if noisy else None,
            )
            label = None
    for k, (_, p) in enumerate(pub.iterrows()):  # a shaded band behind the configuration's bars
        y = row[p["configuration"]] - height * (len(groups) - 1) / 2
        ax.fill_betweenx(
            [y - 0.45, y + 0.45],
            p["low"],
            p["high"],
            color=("0.55", "#e6a000", "#8c564b")[k % 3],
            alpha=0.5,
            zorder=3,
            lw=0.8,
            edgecolor="k",
            hatch="//",
            label=series_label(
                published(SOURCE_NAMES.get(p["source"], p["source"])), p["gpu"], "paper", "speedup range"
            ),
        )
    ax.axvline(1.0, color="k", lw=0.8, ls="--")
    not_run = _not_run(df, confs)  # said in the row's label, never written over a bar
    ax.set_yticks(
        y0 - height * (len(groups) - 1) / 2,
        [f"{c} ({status_cell(not_run[c].to_dict())})" if c in not_run else c for c in confs],
        fontsize=FONT["tick"],
    )
    ax.set_ylabel("configuration")
    ax.set_xlabel("training-step speedup over baseline (x)")
    ax.set_title(
        wrap(
            _title(
                df,
                "training-step speedup over each run's baseline (bar: median step time; whiskers: speedup at the "
                "p90 and p10 step times); per hardware the best faithful run and the best ours configuration "
                "(every run: table.csv)"
                + (f". {left_out_note(left_out, 'hardware', 'table.csv')}" if left_out else ""),
            ),
            fig,
            FONT["label"],
            0.6,
        ),
        fontsize=FONT["label"],
        loc="left",
    )
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    if any_noisy:
        uniq["noisy (hatched): other load on the host or a wide spread; not reliable"] = Patch(
            facecolor="0.7", hatch="xx", edgecolor="white"
        )
    if uniq:
        fig.legend(
            list(uniq.values()),
            list(uniq.keys()),
            fontsize=FONT["legend"],
            loc="lower left",
            bbox_to_anchor=(0.01, 0.01),
        )
    fig.set_figheight(min(fig.get_figheight() + 0.16 * len(uniq), page_inches(150)[1]))
    fig.tight_layout(rect=(0, min(0.5, (0.16 * len(uniq) + 0.2) / fig.get_figheight()), 1, 1))
    return save_figure(fig, path)


def _not_run(df: pd.DataFrame, confs: list[str]) -> dict:
    """Per configuration of the figure, one row of it that did not finish where none of it did (its status said
    below the axis instead of an empty row)."""
    out = {}
    for c in confs:
        rows = df[df["configuration"] == c]
        if len(rows) and not (rows["status"] == "ok").any():
            out[c] = rows.iloc[0]
    return out


def _short(hardware: str) -> str:
    """``NVIDIA H200`` of ``reference run (H200, 2026-11-30): NVIDIA H200 (1x, 139.8 GiB)``, ``CPU: AMD EPYC`` of
    ``CPU: AMD EPYC (2 threads)``."""
    if hardware.startswith("reference run (") and "): " in hardware:
        hardware = hardware.split("): ", 1)[1]
    return hardware.split(" (")[0][:22]


def _run_short(run: str) -> str:
    """``H200, 2026-11-30`` of ``reference run (H200, 2026-11-30)``; ``measured here`` of ``measured``."""
    run = str(run)
    if run.startswith("reference run (") and run.endswith(")"):
        return run[len("reference run (") : -1]
    return "measured here" if run == "measured" else run


def _bar_parts(rows: pd.DataFrame) -> dict[str, list[str]]:
    """What tells the bars apart besides the configuration, each only where it varies: the run (measured here or
    a reference run), the network, the device (not one repeated device name)."""
    cols = {
        "run": [_run_short(r) for r in rows.get("run", pd.Series(["measured"] * len(rows)))],
        "network": [NETWORK_LABEL.get(n, n) for n in rows.get("network", pd.Series([""] * len(rows)))],
        "hardware": [_short(h) for h in rows["hardware"]],
    }
    return {k: v for k, v in cols.items() if len(set(v)) > 1}


BAR_LABEL_WRAP = 64  # characters per line of a bar's label: the labels and the legend fit the 10-inch figure


def _bar_labels(rows: pd.DataFrame) -> list[str]:
    """``configuration`` and what tells the bar apart (:func:`_bar_parts`), one per bar, wrapped at
    :data:`BAR_LABEL_WRAP` characters (a reference run's name and its device make long labels)."""
    parts = list(zip(*_bar_parts(rows).values()))
    return [
        textwrap.fill(f"{c} ({', '.join(p)})" if parts else c, BAR_LABEL_WRAP)
        for c, p in zip(rows["configuration"], parts or [()] * len(rows))
    ]


def _series_note(ok: pd.DataFrame) -> str:
    """Note naming the series of the bars (origin, hardware, scale)."""
    return "\n".join(_series(g) for _, g in ok.groupby(["hardware", "model"])) if not ok.empty else "nothing measured"


def _hbar_figure(ok: pd.DataFrame) -> tuple:
    """A figure of one horizontal bar per (hardware, configuration), first on top, 10 in wide; each bar's row as tall
    as its wrapped label (:func:`_bar_labels`), plus the lines of the series note above the plot."""
    lines = max((label.count("\n") + 1 for label in _bar_labels(ok)), default=1)
    note = _series_note(ok).count("\n") + 1
    height = 2.6 + 0.14 * note + 0.28 * max(1, len(ok)) * (1 + 0.6 * (lines - 1))
    fig, ax = plt.subplots(figsize=(10, min(height, page_inches(150)[1])))  # at most a page (MAX_BARS bars fit)
    return fig, ax, np.arange(len(ok))[::-1]


def _hbar_finish(fig, ax, ok: pd.DataFrame, y, df: pd.DataFrame, what: str) -> None:
    ax.set_yticks(y, _bar_labels(ok), fontsize=FONT["tick"])
    parts = _bar_parts(ok)
    ax.set_ylabel("configuration" + (f" ({', '.join(parts)})" if parts else ""))
    more = ok.attrs.get("left_out", "")
    title = wrap(_title(df, what) + "\n" + _series_note(ok) + (f"\n{more}" if more else ""), fig, FONT["label"])
    fig.suptitle(title, fontsize=FONT["label"], x=0.01, ha="left")
    ax.legend(fontsize=FONT["legend"], bbox_to_anchor=(1.01, 1), loc="upper left", title_fontsize=FONT["legend"])
    # the title's lines (at 1.4 x the font size) kept above the axes and the legend beside them
    top = text_height_in(title.count("\n") + 1, FONT["label"]) + 0.15
    # below the title, room for the legend beside the axes (its entries at 2 x the font size, the axis label)
    entries = len(ax.get_legend().get_texts()) + 1
    legend_h = top + text_height_in(entries, FONT["legend"], 2.0) + 1.2
    fig.set_figheight(min(max(fig.get_figheight(), legend_h), page_inches(150)[1]))
    fig.tight_layout(rect=(0, 0, 1, 1 - top / fig.get_figheight()))


MAX_BARS = 24  # bars of a kernel figure at most: a page's height with two-line labels; more hardware are named


def _drawn_bars(df: pd.DataFrame) -> pd.DataFrame:
    """The bars of the kernel figures: :func:`drawn_rows`, per hardware faithful then ours, configurations in
    :data:`ORDER`; of at most the hardware whose bars number :data:`MAX_BARS`
    (:func:`figures.most_relevant_hardware`), the others named in ``attrs["left_out"]`` (a note, or empty)."""
    rows = drawn_rows(df)
    if rows.empty:
        return rows
    limit = rows["_hardware"].nunique()
    kept, left = most_relevant_hardware(rows, limit)
    while limit > 1 and len(kept) > MAX_BARS:
        limit -= 1
        kept, left = most_relevant_hardware(rows, limit)
    order = {c: i for i, c in enumerate(ORDER)}
    rows = kept.assign(_order=kept["configuration"].map(order)).sort_values(["_hardware", "_kind", "_order"])
    rows.attrs["left_out"] = left_out_note(left, "hardware", "table.csv")
    return rows


def _nothing_ran(df: pd.DataFrame, path: str | Path, what: str) -> list[str]:
    """The figure where no configuration ran (e.g. only an `unsupported` tf32 on a CPU): the rows' statuses and
    reasons in words, no empty bars."""
    fig, ax = plt.subplots(figsize=(10, 3))
    why = "; ".join(sorted({f"{r['configuration']}: {status_cell(r) or r['status']}" for _, r in df.iterrows()}))
    ax.text(0.5, 0.5, wrap(f"nothing ran: {why}", fig, FONT["label"], 0.8), ha="center", va="center")
    ax.set_axis_off()
    fig.suptitle(wrap(_title(df, what), fig, FONT["label"]), fontsize=FONT["label"], x=0.01, ha="left")
    fig.tight_layout()
    return save_figure(fig, path)


def fig_breakdown(df: pd.DataFrame, path: str | Path) -> list[str]:
    """Stacked horizontal bars: share of device time per kernel class (one colour each, :data:`CLASS_COLOURS`; a
    class with no time in any bar is left out of the legend, past :data:`legend_check.MAX_LEGEND_ENTRIES` classes the
    smallest are counted in ``other`` and named there), one bar per configuration of the runs
    :func:`drawn_rows` picks (per hardware the best faithful run and the best ours configuration)."""
    ok = _drawn_bars(df)
    if ok.empty:
        return _nothing_ran(df, path, "kernel-time breakdown of one training step")
    fig, ax, y = _hbar_figure(ok)
    left = np.zeros(len(ok))
    shares = {c: np.nan_to_num(ok[f"share_{c}"].to_numpy(dtype=float)) for c in CLASSES}
    # at most MAX_LEGEND_ENTRIES classes: the largest (by their largest share) apart, the rest counted in "other"
    named = sorted((c for c in CLASSES if c != "other" and shares[c].any()), key=lambda c: -shares[c].max())
    folded = named[MAX_LEGEND_ENTRIES - 1 :]
    for c in folded:
        shares["other"] = shares["other"] + shares.pop(c)
    for cls in [c for c in CLASSES if c in shares and shares[c].any()]:
        vals = shares[cls]
        label = cls.replace("_", " ") + (f" (with {', '.join(folded)})" if cls == "other" and folded else "")
        ax.barh(y, vals, left=left, color=CLASS_COLOURS[cls], label=label.replace("_", " "))
        left += vals
    ax.set_xlabel("share of device time (fraction)")
    ax.set_xlim(0, 1)
    _hbar_finish(fig, ax, ok, y, df, "kernel-time breakdown of one training step")
    ax.get_legend().set_title("kernel class")
    return save_figure(fig, path)


def fig_counts(df: pd.DataFrame, path: str | Path) -> list[str]:
    """Horizontal bars: kernel launches per training step, with the layout-conversion and cast/copy parts hatched; the
    bars of :func:`fig_breakdown`."""
    ok = _drawn_bars(df)
    if ok.empty:
        return _nothing_ran(df, path, "kernel launches per training step")
    fig, ax, y = _hbar_figure(ok)
    ax.barh(y, ok["kernel_count"], color="C0", label="all kernels")
    layout = ok["layout_conversion_kernels"].fillna(0)
    if layout.any():  # no legend entry without a bar
        ax.barh(y, layout, color="C3", hatch="//", label="layout-conversion kernels")
    if "cast_copy_kernels" in ok and ok["cast_copy_kernels"].fillna(0).any():
        ax.barh(
            y,
            ok["cast_copy_kernels"].fillna(0),
            left=layout,
            color="C1",
            hatch="..",
            label="cast / copy kernels",
        )
    ax.set_xlabel("kernels per training step (count)")
    _hbar_finish(fig, ax, ok, y, df, "kernel launches per training step")
    return save_figure(fig, path)
