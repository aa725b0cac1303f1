"""The claims table as a reviewer reads it: one row per claim first, every run's row behind it, a figure, a page.

:mod:`accelbench.aggregate.claims_table` judges each claim on each system; this module writes the verdicts of a run:

* :func:`aggregate`: ``claims.{csv,md,tex,html}`` (every claim x system row, with its origin; the Markdown and HTML
  open with the first screen, :func:`accelbench.aggregate.claims_front.front_table`, and the verdict counts),
  ``claims_summary.csv`` (one row per claim, :func:`accelbench.aggregate.claims_summary.summary_table`) and
  ``fig_claims.png`` (:func:`fig_claims`); :func:`claims_html` is the HTML page;
* :func:`closing_lines`: the last lines of a successful run, pointing at the claims.

The committed pages (``docs/claims.md``, ARTIFACT.md's tables) are :mod:`accelbench.aggregate.claims_docs`.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from accelbench.aggregate.claims import VERDICTS
from accelbench.aggregate.claims_docs import FRONT_CELL_CHARS, judged
from accelbench.aggregate.claims_front import TITLE, VERDICT_COLOUR, front_html, front_markdown, front_table
from accelbench.aggregate.claims_summary import (
    SUMMARY_VERDICTS,
    count_table,
    head_category,
    summary_line,
    summary_table,
    verdict_counts,
)
from accelbench.aggregate.common import HTML_NOTE_CHARS, footnoted, html_table, load_results, write_table
from accelbench.aggregate.figures import FONT, save_figure, wrap
from accelbench.aggregate.h100_table import h100_table, read_published_minutes
from accelbench.core import files, registry
from accelbench.errors import DataError


def fig_claims(df: pd.DataFrame, path: str | Path, summary: pd.DataFrame | None = None) -> list[str]:
    """Verdicts as stacked horizontal bars: per study one bar of one verdict per claim, then one bar per origin
    (measured here and each reference run apart, one count per claim and system). ``summary``: the
    :func:`summary_table` of ``df`` where already made. Returns the figure's problems."""
    counts = verdict_counts(df)
    summary = summary_table(df) if summary is None else summary
    bars: list[tuple[str, dict]] = []
    for st in sorted(set(summary["study"])):
        heads = summary[summary["study"] == st]["verdict"].map(head_category)
        bars.append((f"Study {st}: one verdict per claim", {v: int((heads == v).sum()) for v in SUMMARY_VERDICTS}))
        for (s, o), r in counts.iterrows():
            if s == st:
                bars.append((f"Study {st}: {o}", {v: int(r[v]) for v in VERDICTS}))
    # at most a page tall (the figure checker's 1,600 px at 150 dpi): bars get thinner past about 20 of them
    fig, ax = plt.subplots(figsize=(10, min(10.4, 1.8 + 0.45 * max(1, len(bars)))))
    y = np.arange(len(bars))[::-1]
    left = np.zeros(len(bars))
    for v in SUMMARY_VERDICTS:
        vals = np.array([b.get(v, 0) for _, b in bars], dtype=float)
        if vals.any():  # a verdict no claim has gets no legend entry without a bar
            ax.barh(y, vals, left=left, color=VERDICT_COLOUR[v], label=v)
        left += vals
    ax.set_yticks(y, [b for b, _ in bars], fontsize=FONT["tick"])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("claims (first bar of a study) or claims x systems (count)")
    ax.set_ylabel("study, origin")
    fig.suptitle(  # the figure's title, not the axes': long origin labels narrow the axes
        wrap("Verdicts of the published claims: one per claim, then each origin apart", fig, FONT["label"]),
        fontsize=FONT["label"],
        x=0.01,
        ha="left",
    )
    if bars:
        ax.legend(
            fontsize=FONT["legend"],
            loc="upper left",
            bbox_to_anchor=(1.01, 1),
            title="verdict",
            title_fontsize=FONT["legend"],
        )
    else:
        ax.text(0.5, 0.5, "no claims", ha="center", transform=ax.transAxes)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))  # room for the title above
    return save_figure(fig, path)


def aggregate(result_paths: list[str | Path], reference_dir: str | Path, out_dir: str | Path) -> pd.DataFrame:
    """Write ``claims.{csv,md,tex,html}`` (every claim x system, with an ``origin`` column: measured here /
    reference run / no results; the Markdown and HTML lead with one row per claim), ``claims_summary.csv`` and
    ``fig_claims.png`` into ``out_dir``. The claims files of every study and the published files of every
    experiment are read from ``reference_dir`` (``resources/reference/``), as the registry names them.

    Raises:
        ResultError: a missing or corrupt result (named); DataError: a bad claims or reference file.
    """
    from accelbench.core import tree

    out = Path(out_dir)
    tree.folder(tree.out_dir_root(out), (out.name,), create=True).close()  # `<results>/claims` a link: one line
    results = load_results(result_paths)
    reference_dir = Path(reference_dir)
    shown, claims = judged(result_paths, reference_dir)  # the same build as ARTIFACT.md's generated tables
    df = shown.drop(columns="origin")
    summary = summary_table(shown)
    line = summary_line(df, summary)
    # the first screen: each cell cut as ARTIFACT.md's (the whole texts follow in the long form)
    front = front_table(shown, summary, dict(zip(claims["claim_id"], claims["short"])), FRONT_CELL_CHARS)
    counts = count_table(df, summary)
    write_table(
        summary,
        out / "claims_summary",
        f"{TITLE}: one row per claim, its verdict from the evidence that judges it (run named). {line}.",
        title="Claims: one verdict per claim",
    )
    write_table(
        shown,
        out / "claims",
        f"{TITLE} checked against each system's results (one row per claim and "
        f"system): holds / does not hold / partly measured (k of n) / not measured here (why). {line}.",
        title="Claims: every run",
    )
    sr3_published = registry.published_files(reference_dir).get("sr3_scaling")
    write_table(
        h100_table(results, shown, read_published_minutes(sr3_published) if sr3_published else None),
        out / "h100_vs_published",
        "Every number the studies published for an H100 beside what a real NVIDIA H100 measured (an H200 counted as "
        "H100 by the scope policy is not one here); difference_pct: (measured - published) / published, where both "
        "are one number; what_differs: the settings that differ between the two",
        title="Published vs measured on the studies' own GPU (H100)",
    )
    with tree.folder(tree.out_dir_root(out), (out.name,)) as d:
        long_form = d.read_bytes("claims_summary.md", 2**28) + b"\n\n" + d.read_bytes("claims.md", 2**28)
        d.write_bytes("claims.md", (front_markdown(front, counts) + "\n").encode() + long_form)
        d.write_text("claims.html", claims_html(shown, summary, line, front, counts))
    fig_claims(df, out / "fig_claims.png", summary)
    return df


BRIEF = ["claim_id", "claim", "published", "origin", "system", "measured", "verdict", "why"]


def _coloured(html: str) -> str:
    style = "".join(f".accelbench-table td.v-{i}{{background:{c}}}" for i, c in enumerate(VERDICT_COLOUR.values()))
    colour_of = {v: i for i, v in enumerate(VERDICT_COLOUR)}

    def cell(m: re.Match) -> str:
        text = m.group(1)
        try:
            cat = head_category(text)
        except DataError:  # a cell that is no verdict
            return m.group(0)
        return f'<td class="v-{colour_of[cat]}">{text}</td>'

    html = re.sub(r"<td>([^<]*)</td>", cell, html)
    return html.replace("</style>", style + "</style>", 1)


def claims_html(
    shown: pd.DataFrame,
    summary: pd.DataFrame,
    line: str,
    front: pd.DataFrame | None = None,
    counts: pd.DataFrame | None = None,
) -> str:
    """The report's claims page: :func:`front_html` first (given ``front`` and ``counts``), then one row per claim
    with its full verdict, evidence and why (verdict cells coloured), then every claim x system row behind a
    ``<details>`` (the columns a reviewer reads first, :data:`BRIEF`; the rest is in claims.csv)."""

    def one(df: pd.DataFrame, caption: str, title: str) -> str:
        cells = df.astype(object).where(df.notna(), "").map(str)
        cells, notes = footnoted(cells, HTML_NOTE_CHARS, 240, repeated=True)
        return _coloured(html_table(cells, caption, notes, title=title))

    head = one(
        summary,
        f"{TITLE}: one row per claim, its verdict from the evidence that judges it (run named). "
        f"{line}. Every column: results/claims/claims_summary.csv.",
        "Claims: one verdict per claim",
    )
    every = one(
        shown.reindex(columns=BRIEF),
        f"{TITLE}, one row per claim and system. Every column: results/claims/claims.csv.",
        "Claims: every run",
    )
    first = front_html(front, counts) if front is not None and counts is not None else ""
    return (
        first + head + f"\n<details><summary>Every run's verdict ({len(shown)} rows)</summary>\n{every}\n</details>\n"
    )


# --------------------------------------------------------------------------- the end of a run
def closing_lines(claims_dir: str | Path) -> list[str]:
    """The last lines of a successful run (Snakemake's ``onsuccess``): where the claims are (``claims.md``, its
    first table one line per claim), the one-verdict-per-claim counts (from ``claims_summary.csv``) and the report
    command. Without a claims table in ``claims_dir`` (a run that did not make it): the report command alone."""
    claims_dir = Path(claims_dir)
    report = "accelbench: the HTML report of every table and figure: snakemake --report report.html"
    summary = claims_dir / "claims_summary.csv"
    if not summary.is_file():
        return [report]
    summary_table = files.read_frame(summary, "claims summary", error=DataError, dtype=str, keep_default_na=False)
    heads = summary_table["verdict"].map(head_category)
    counts = ", ".join(f"{int((heads == v).sum())} {v}" for v in SUMMARY_VERDICTS if (heads == v).any())
    return [
        f"accelbench: done. Read the claims first: {claims_dir / 'claims.md'} (one line per claim, then why)",
        f"accelbench: one verdict per claim ({len(heads)} claims): {counts}",
        report,
    ]
