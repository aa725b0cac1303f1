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
    MAX_HEIGHT_PX,
    published,
    save_figure,
    series_label,
    text_height_in,
    wrap,
)
from accelbench.experiments.unet3d.configs import AUTOTUNED
from accelbench.experiments.unet3d.tables_ncu import KEY, NETWORK_LABEL
from accelbench.experiments.unet3d.tables_ncu_claims import claim_configuration
from accelbench.experiments.unet3d.tables_rows import CLASSES, ORDER


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


def fig_speedup(df: pd.DataFrame, path: str | Path, claims: pd.DataFrame | None = None) -> list[str]:
    """Horizontal grouped bars: speedup over baseline per configuration (rows), one colour per (hardware, model)
    series; whiskers span the speedups implied by the p90 and p10 step times; results flagged noisy are hatched
    (a legend entry says so, nothing is written over a bar); published speedup ranges (``claims``, metric
    ``speedup_x``) as black range markers on their configuration's row. Returns the figure's problems."""
    from matplotlib.patches import Patch

    confs = [c for c in ORDER if c in set(df["configuration"])]
    groups = list(df.groupby([*KEY, "hardware"]))  # two systems may share a hardware label
    pub = published_speedups(claims)
    pub = pub[pub["configuration"].isin(confs)]
    height = 0.8 / max(1, len(groups))
    fig, ax = plt.subplots(figsize=(10, 2.4 + 0.32 * len(confs) * max(1, len(groups)) ** 0.5))
    y0 = np.arange(len(confs))[::-1]  # first configuration on top
    row = dict(zip(confs, y0))
    any_noisy = False
    missing: dict[str, list[str]] = {}
    for gi, (gkey, g) in enumerate(groups):
        hw = gkey[-1]
        label = _series(g)
        g = g.set_index("configuration")
        for c in confs:
            if c not in g.index:
                continue
            r = g.loc[c]
            y = row[c] - gi * height
            if r["status"] != "ok":  # said in the row's label, never written over a bar
                missing.setdefault(c, []).append(f"{_short(hw)}: {status_cell({'status': r['status']})}")
                continue
            s = r["speedup_vs_baseline"]
            base = "baseline" + AUTOTUNED if c.endswith(AUTOTUNED) else "baseline"  # each series' own baseline
            lo = s - g.loc[base, "train_step_ms"] / r["train_step_p90_ms"] if base in g.index else 0
            hi = g.loc[base, "train_step_ms"] / r["train_step_p10_ms"] - s if base in g.index else 0
            noisy = r.get("noise") == "noisy"  # measurements.noise: other load on the host or a wide spread
            any_noisy |= noisy
            ax.barh(
                y,
                s,
                height,
                color=f"C{gi}",
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
    ax.set_yticks(
        y0 - height * (len(groups) - 1) / 2,
        [f"{c} ({'; '.join(missing[c])})" if c in missing else c for c in confs],
        fontsize=FONT["tick"],
    )
    ax.set_ylabel("configuration")
    ax.set_xlabel("training-step speedup over baseline (x)")
    ax.set_title(
        wrap(
            _title(
                df,
                "training-step speedup over each system's baseline (bar: median step time; "
                "whiskers: speedup at the p90 and p10 step times)",
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
    fig.tight_layout(rect=(0, min(0.5, (0.25 * len(uniq) + 0.2) / fig.get_figheight()), 1, 1))
    return save_figure(fig, path)


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
    fig, ax = plt.subplots(figsize=(10, 2.6 + 0.14 * note + 0.28 * max(1, len(ok)) * (1 + 0.6 * (lines - 1))))
    return fig, ax, np.arange(len(ok))[::-1]


def _hbar_finish(fig, ax, ok: pd.DataFrame, y, df: pd.DataFrame, what: str) -> None:
    ax.set_yticks(y, _bar_labels(ok), fontsize=FONT["tick"])
    parts = _bar_parts(ok)
    ax.set_ylabel("configuration" + (f" ({', '.join(parts)})" if parts else ""))
    title = wrap(_title(df, what) + "\n" + _series_note(ok), fig, FONT["label"])
    fig.suptitle(title, fontsize=FONT["label"], x=0.01, ha="left")
    ax.legend(fontsize=FONT["legend"], bbox_to_anchor=(1.01, 1), loc="upper left", title_fontsize=FONT["legend"])
    # the title's lines (at 1.4 x the font size) kept above the axes and the legend beside them
    top = text_height_in(title.count("\n") + 1, FONT["label"]) + 0.15
    # below the title, room for the legend beside the axes (its entries at 2 x the font size, the axis label)
    entries = len(ax.get_legend().get_texts()) + 1
    fig.set_figheight(max(fig.get_figheight(), top + text_height_in(entries, FONT["legend"], 2.0) + 1.2))
    fig.tight_layout(rect=(0, 0, 1, 1 - top / fig.get_figheight()))


def _page_dpi(fig, dpi: int = 150) -> int:
    """``dpi``, or less where the figure would be taller than a page at it (:data:`MAX_HEIGHT_PX`: every reference
    run's bars in one figure); the text keeps its size in points."""
    return max(72, min(dpi, int(MAX_HEIGHT_PX / fig.get_figheight())))


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
    """Stacked horizontal bars: share of device time per kernel class (one colour each, :data:`CLASS_COLOURS`),
    one bar per (hardware, configuration)."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return _nothing_ran(df, path, "kernel-time breakdown of one training step")
    fig, ax, y = _hbar_figure(ok)
    left = np.zeros(len(ok))
    for cls in CLASSES:
        vals = ok[f"share_{cls}"].to_numpy(dtype=float)
        ax.barh(y, vals, left=left, color=CLASS_COLOURS[cls], label=cls.replace("_", " "))
        left += vals
    ax.set_xlabel("share of device time (fraction)")
    ax.set_xlim(0, 1)
    _hbar_finish(fig, ax, ok, y, df, "kernel-time breakdown of one training step")
    ax.get_legend().set_title("kernel class")
    return save_figure(fig, path, dpi=_page_dpi(fig))


def fig_counts(df: pd.DataFrame, path: str | Path) -> list[str]:
    """Horizontal bars: kernel launches per training step, with the layout-conversion and cast/copy parts hatched."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return _nothing_ran(df, path, "kernel launches per training step")
    fig, ax, y = _hbar_figure(ok)
    ax.barh(y, ok["kernel_count"], color="C0", label="all kernels")
    ax.barh(y, ok["layout_conversion_kernels"], color="C3", hatch="//", label="layout-conversion kernels")
    if "cast_copy_kernels" in ok:
        ax.barh(
            y,
            ok["cast_copy_kernels"].fillna(0),
            left=ok["layout_conversion_kernels"],
            color="C1",
            hatch="..",
            label="cast / copy kernels",
        )
    ax.set_xlabel("kernels per training step (count)")
    _hbar_finish(fig, ax, ok, y, df, "kernel launches per training step")
    return save_figure(fig, path, dpi=_page_dpi(fig))
