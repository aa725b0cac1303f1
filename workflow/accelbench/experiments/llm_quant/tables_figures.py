"""The figures of Study B's quantization (torch-free): the pruning sensitivity per decoder layer coloured by cluster
(:func:`fig_layers`, Study B's figure 1) and per projection type (:func:`fig_submodules`), on a symmetric log axis;
models with random-init weights are left out and named (:func:`quality_only`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from accelbench.aggregate.figures import FONT, left_out_note, save_figure, series_label, wrap
from accelbench.experiments.llm_quant.projections import SUBMODULES


def _symlog(ax, values, linthresh: float = 1.0) -> None:
    """Symmetric log y axis with labelled decades on both sides of 0 (a perplexity decrease is negative)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    ax.set_yscale("symlog", linthresh=linthresh)
    top = int(np.ceil(np.log10(max(hi, linthresh) / linthresh)))
    bottom = int(np.ceil(np.log10(max(-lo, linthresh) / linthresh))) if lo < 0 else None
    ticks = [linthresh * 10**k for k in range(top + 1)] + [0.0]
    if bottom is not None:
        ticks += [-linthresh * 10**k for k in range(bottom + 1)]
        ax.set_ylim(-linthresh * 10**bottom * 1.05, linthresh * 10**top * 1.05)
    ax.yaxis.set_major_locator(FixedLocator(sorted(ticks)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def quality_only(d: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of ``d`` with trained weights, and a note naming the models left out because their weights are random
    (``measurements.model.weights`` says ``random``): their sensitivity measures the architecture, not quality."""
    if d.empty or "weights" not in d:
        return d, ""
    rand = d["weights"].fillna("").astype(str).str.contains("random")
    names = sorted(set(d.loc[rand, "model"]))
    note = (
        (
            f"Left out: {', '.join(names)} (random-init weights: architecture only, its sensitivity says nothing "
            f"about quality; its numbers are in the CSV)."
        )
        if names
        else ""
    )
    return d[~rand], note


MAX_PANELS = 4  # (model, hardware) panels a figure draws at most (two rows of two or of three): legible on a page


def _bounded(d: pd.DataFrame, csv: str) -> tuple[list, str]:
    """The (model, hardware) groups of ``d`` a figure draws: at most :data:`MAX_PANELS`, every model first (its
    first hardware, in sorted order), then the others; and a note naming those left out and the CSV with all."""
    groups = list(d.groupby(["model", "hardware"], sort=True)) if not d.empty else []
    if len(groups) <= MAX_PANELS:
        return groups, ""
    first = {}
    for i, ((model, _), _) in enumerate(groups):
        first.setdefault(model, i)
    order = sorted(range(len(groups)), key=lambda i: (i not in first.values(), i))
    keep = sorted(order[:MAX_PANELS])
    left = [f"{m} on {h}" for i, ((m, h), _) in enumerate(groups) if i not in keep]
    return [groups[i] for i in keep], left_out_note(left, "runs", csv)


def fig_layers(sens: pd.DataFrame, path: str | Path) -> list[str]:
    """Study B's figure 1: pruning sensitivity per layer, coloured by cluster, dashed cluster means. The baseline
    perplexity in each title is the one the sensitivity is measured against: on the *validation* split (the
    table's FP32 perplexity is on the *test* split, so the two differ). Models with random-init weights are left
    out (:func:`quality_only`), named below the panels. Returns the figure's problems."""
    sens, left_out = quality_only(sens)
    groups, more = _bounded(sens, "sensitivity_layers.csv")
    left_out = " ".join(x for x in (left_out, more) if x)
    # one panel per (model, hardware): two columns past two panels, each row at most 4.2 in, the figure at most a
    # page tall (the figure checker's 1,600 px at 150 dpi) however many runs there are
    ncols = 1 if len(groups) <= 2 else 2
    nrows = max(1, -(-len(groups) // ncols))
    row_in = min(4.2, 9.6 / nrows)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(11 if ncols == 1 else 15.5, row_in * nrows + (0.4 if left_out else 0)), squeeze=False
    )
    for ax in axes.flat[len(groups) :] if groups else []:
        ax.set_visible(False)
    colours = plt.get_cmap("viridis")
    for ax, ((model, hw), d) in zip(axes.flat, groups):
        k = int(d["cluster"].max()) + 1
        metric = d["allocation"].iloc[0].split("/")[0]
        who = series_label(
            d["origin"].iloc[0] if "origin" in d else "measured here", hw, d["scale"].iloc[0] if "scale" in d else None
        )
        for c in range(k):
            sel = d[d["cluster"] == c]
            if sel.empty:  # a cluster without a layer: no legend entry without a bar
                continue
            col = colours(c / max(1, k - 1))
            ax.bar(sel["layer"], sel[metric], color=col, label=f"cluster {c} (mean {sel[metric].mean():.3g})")
            ax.axhline(sel[metric].mean(), color=col, ls="--", lw=1)
        shown = [d[metric]]
        if "quant4" in d and metric != "quant4":
            ax.plot(d["layer"], d["quant4"], "k.", label="only this layer in 4 bits (ours)")
            shown.append(d["quant4"])
        _symlog(ax, pd.concat(shown))
        ax.set_xlabel("decoder layer (index)")
        ax.set_ylabel("perplexity increase (symlog)")
        ax.set_title(
            wrap(
                f"{d['model_label'].iloc[0] if 'model_label' in d else model}: {metric} "
                f"sensitivity ({d['allocation'].iloc[0]}); against baseline perplexity "
                f"{d['baseline_ppl'].iloc[0]:.2f} on the validation split in "
                f"{d['chunk_len'].iloc[0] if 'chunk_len' in d else '?'}-token chunks (the table's "
                f"FP32 perplexity is on the test split)",
                fig,
                FONT["label"],
                0.8 / ncols,
            ),
            fontsize=FONT["label"],
        )
        ax.legend(
            fontsize=FONT["legend"],
            loc="upper left",
            bbox_to_anchor=(0, -0.18),
            ncol=3,
            title=who,
            title_fontsize=FONT["legend"],
            alignment="left",
        )  # the series once, as the legend's title
    if not groups:
        axes[0, 0].text(0.5, 0.5, "no sensitivity results of a trained model", ha="center")
        axes[0, 0].axis("off")
    if left_out:
        fig.text(0.01, 0.01, wrap(left_out, fig, FONT["legend"]), fontsize=FONT["legend"], va="bottom")
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight() if left_out else 0, 1, 1))
    return save_figure(fig, path)


def fig_submodules(sub: pd.DataFrame, path: str | Path) -> list[str]:
    """Pruning sensitivity per projection type (per type, or mean over layers with the per-layer spread):
    attention projections (q/k/v/o) and MLP projections (gate/up/down) in two colours, named in a legend. Each
    panel's y label names its quantity (one layer's projection pruned, mean over layers; or the projection pruned
    in every layer at once): two panels of different kinds are not the same quantity. Random-init models are left
    out (:func:`quality_only`)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    sub, left_out = quality_only(sub)
    groups, more = _bounded(sub, "sensitivity_submodules.csv")
    left_out = " ".join(x for x in (left_out, more) if x)
    # a grid of at most MAX_PANELS panels, 2 a row, 6 x 5 in each (the room the rotated ticks, the legend below and
    # a wrapped title need): at most 12 x 10.4 in, within a page (2400 x 1600 px at 150 dpi)
    ncols = min(2, max(1, len(groups)))
    nrows = max(1, -(-len(groups) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(6 * ncols, 5 * nrows + (0.4 if left_out else 0)), squeeze=False)
    for ax in axes.flat[len(groups) :] if groups else []:
        ax.set_visible(False)
    for ax, ((model, hw), d) in zip(axes.flat, groups):
        mods = [m for m in SUBMODULES if m in set(d["module"])]
        mean = d.groupby("module")["prune"].mean().reindex(mods)
        colour = {m: ("tab:blue" if m in ("q_proj", "k_proj", "v_proj", "o_proj") else "tab:orange") for m in mods}
        ax.bar(mods, mean.values, color=[colour[m] for m in mods])
        per_layer = (d["layer"] != "all").any()
        if per_layer:
            for i, m in enumerate(mods):
                v = d[d["module"] == m]["prune"]
                ax.plot(np.full(len(v), i), v, "k.", ms=3)
        _symlog(ax, d["prune"])
        ax.set_xlabel("projection (sub-module type)")
        ax.set_ylabel(
            "perplexity increase (symlog)\n"
            + ("one layer 30% pruned, mean over layers" if per_layer else "30% pruned in all layers at once")
        )
        who = series_label(
            d["origin"].iloc[0] if "origin" in d else "measured here", hw, d["scale"].iloc[0] if "scale" in d else None
        )
        ax.set_title(
            wrap(
                f"{d['model_label'].iloc[0] if 'model_label' in d else model}: "
                f"{'mean over layers' if per_layer else 'all layers at once'}",
                fig,
                FONT["label"],
                0.8 / ncols,  # centred on its axes, which the two-line y label shifts right: narrower than 1/ncols
            ),
            fontsize=FONT["label"],
        )
        ax.tick_params(axis="x", rotation=45)
        handles = [
            Patch(color="tab:blue", label="attention (q/k/v/o)"),
            Patch(color="tab:orange", label="MLP (gate/up/down)"),
        ]
        if per_layer:
            handles.append(Line2D([], [], color="k", marker=".", ls="", label="one layer"))
        ax.legend(
            handles=handles,
            fontsize=FONT["legend"],
            loc="upper left",
            bbox_to_anchor=(0, -0.42),
            ncol=3,
            title=wrap(who, fig, FONT["legend"], 0.8 / ncols),
            title_fontsize=FONT["legend"],
            alignment="left",
        )  # the series once, as the legend's title
    if not groups:
        axes[0, 0].text(0.5, 0.5, "no sub-module sensitivity of a trained model", ha="center")
        axes[0, 0].axis("off")
    if left_out:
        fig.text(0.01, 0.01, wrap(left_out, fig, FONT["legend"]), fontsize=FONT["legend"], va="bottom")
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight() if left_out else 0, 1, 1))
    return save_figure(fig, path)
