"""The committed pages about the claims (written by ``accelbench reference-runs``,
:mod:`accelbench.aggregate.reference_runs`):

* :func:`judged`: every claim judged on the given result files together, the build of the workflow's ``claims``
  rule (:func:`accelbench.aggregate.claims_report.aggregate` uses it): on every committed reference run's results,
  what ``results/claims/claims.md`` opens with after ``snakemake --cores all --config 'experiments=[]'``;
* :func:`claims_page`: ``docs/claims.md``, each claim with its quote and source, hardware scope, what would make it
  fail, the evidence it needs, and each committed reference run's verdict, after :func:`verdict_table`;
* :func:`reference_front`: ARTIFACT.md's opening table (:func:`~accelbench.aggregate.claims_front.front_table` of
  :func:`judged`, cells cut to :data:`FRONT_CELL_CHARS`);
* :func:`verdict_table`: one verdict per claim over every reference run together (:func:`judged`), as Markdown;
* :func:`read_run_tables`: the runs' ``tables/claims/claims.csv``, each read bounded (a FIFO or a huge file: one line
  naming it, :class:`~accelbench.errors.DataError`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate import scope
from accelbench.aggregate.claim_spec import fails_if, needs_of, tolerance_text
from accelbench.aggregate.claims_front import front_table, md_cell, md_row
from accelbench.aggregate.claims_summary import SUMMARY_VERDICTS, head_category, origin_column, summary_table
from accelbench.aggregate.claims_table import read_claims
from accelbench.core import registry


def read_run_tables(run_tables: dict[str, Path]) -> dict[str, pd.DataFrame]:
    """``{run folder name: its committed tables/claims/claims.csv}``, read, in name order, each through
    :func:`accelbench.core.files.read_frame` (a FIFO or huge file there: one line naming it, :class:`DataError`)."""
    from accelbench.core.files import MAX_TEXT_BYTES, read_frame
    from accelbench.errors import DataError

    return {
        name: read_frame(p, "claims table", MAX_TEXT_BYTES, DataError, dtype=str, keep_default_na=False)
        for name, p in sorted(run_tables.items())
    }


def judged(result_paths: list[str | Path], reference_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every claim x system row of ``result_paths`` judged together, with its ``origin`` column; the claims of
    every study as the registry names them under ``reference_dir``): the workflow's claims build.

    Raises:
        ResultError: a missing or corrupt result (named); DataError: a bad claims or reference file."""
    from accelbench.aggregate.claims_table import claims_table
    from accelbench.aggregate.common import load_results

    reference_dir = Path(reference_dir)
    results = load_results([str(p) for p in result_paths])
    scope.use_reference_dir(reference_dir)  # the H100/H200 evidence of the scope policy, beside the claims files
    claims = pd.concat([read_claims(reference_dir / f, s) for s, f in registry.claims_files()], ignore_index=True)
    df = claims_table(results, claims, registry.published_files(reference_dir))
    df.insert(df.columns.get_loc("hardware"), "origin", origin_column(df))
    return df, claims


def verdict_table(shown: pd.DataFrame) -> str:
    """A Markdown table of one verdict per claim over every reference run together (:func:`summary_table` of
    :func:`judged` on their results): claim, verdict, the evidence (run and hardware), what it measured."""
    if shown.empty:
        return "No reference run has results yet."
    summary = summary_table(shown)
    out = ["| claim | verdict | evidence | measured |", "|---|---|---|---|"]
    out += [
        f"| {md_cell(r['claim_id'])} | {md_cell(r['verdict'])} | {md_cell(r['evidence'])} | {md_cell(r['measured'])} |"
        for _, r in summary.iterrows()
    ]
    return "\n".join(out)


FRONT_CELL_CHARS = 120  # ARTIFACT.md's opening table: each cell at most this long (:func:`brief`)


def reference_front(reference_dir: str | Path, shown: pd.DataFrame, n_runs: int) -> str:
    """ARTIFACT.md's opening table: :func:`front_table` of every committed reference run together (``shown``:
    :func:`judged` on their ``n_runs`` runs' results, the rows ``results/claims/claims.md`` opens with), one line
    per claim in the claims files' order, each cell cut to :data:`FRONT_CELL_CHARS` (:func:`brief`), no footnotes;
    then the one-verdict-per-claim counts in one line. The claims files: every study's, as the registry names
    them, under ``reference_dir``."""
    if shown.empty:
        return "No reference run has results yet."
    summary = summary_table(shown)
    files = registry.claims_files()
    claims = pd.concat([read_claims(Path(reference_dir) / f, s) for s, f in files], ignore_index=True)
    order = {cid: i for i, cid in enumerate(claims["claim_id"])}
    summary = summary.sort_values("claim_id", key=lambda c: c.map(order), kind="stable")
    front = front_table(shown, summary, dict(zip(claims["claim_id"], claims["short"])), FRONT_CELL_CHARS)
    heads = summary["verdict"].map(head_category)
    counts = ", ".join(f"{int((heads == v).sum())} {v}" for v in SUMMARY_VERDICTS if (heads == v).any())
    out = [md_row(front.columns), md_row(["---"] * len(front.columns))]
    out += [md_row(r) for r in front.itertuples(index=False)]
    return (
        "\n".join(out) + f"\n\nOne verdict per claim over the {n_runs} reference runs ({len(front)} claims): {counts}."
    )


def claims_page(reference_dir: str | Path, run_tables: dict[str, Path], shown: pd.DataFrame) -> str:
    """``docs/claims.md``: for each claim its quote and source, hardware scope, tolerance and what would make it
    fail, the evidence it needs and the setting it must be measured on, then each reference run's verdict (from
    ``run_tables``: ``{run folder name: its tables/claims/claims.csv}``, each run judged on its own results), after
    one table of one verdict per claim over every run together. The claims files: every study's, as the registry
    names them, under ``reference_dir``; ``shown``: :func:`judged` on every run's results (the first table)."""
    files = registry.claims_files()
    claims = pd.concat([read_claims(Path(reference_dir) / f, s) for s, f in files], ignore_index=True)
    runs = read_run_tables(run_tables)
    out = [
        "# Claims of the two studies, and what each reference run says of them",
        "",
        "Generated by `accelbench reference-runs` from "
        + ", ".join(f"`resources/reference/{f}`" for _, f in files)
        + " and each reference run's `tables/claims/claims.csv` "
        "(do not edit). How a verdict is reached: `workflow/accelbench/aggregate/claims.py`; which hardware "
        "counts as which: `workflow/accelbench/aggregate/scope.py` (an H200 counts as H100 class only for the "
        "quantities its evidence allows, below).",
        "",
        "## One verdict per claim, over every reference run",
        "",
        verdict_table(shown),
        "",
        "## The H200 as an H100: the evidence, per quantity",
        "",
        scope.evidence_markdown(),
    ]
    for _, c in claims.iterrows():
        cid = c["claim_id"]
        quote = (
            f"> {c['quote']}\n>\n> -- {c['quote_source']}"
            if str(c.get("quote", "")).strip()
            else f"No verbatim text: {c['source']} (the claim is our wording)."
        )
        out += [
            "",
            f"## {cid}: {md_cell(c['claim'])}",
            "",
            quote,
            "",
            f"- **Published**: {md_cell(c['published'])}",
            f"- **Source**: {md_cell(c['source'])}",
            f"- **Hardware scope**: {scope.label(c['hardware'])}",
            f"- **Quantity and tolerance**: `{c['quantity']}` ({md_cell(c['experiment'])}), "
            f"{md_cell(tolerance_text(c))}; fails if {md_cell(fails_if(c))}",
            f"- **Evidence it needs**: {md_cell(' | '.join(needs_of(c)) or 'one observation')}"
            + (f"; measured on `{c['setting']}`" if str(c.get("setting", "")).strip() else ""),
        ] + ([f"- **Note**: {md_cell(c['note'])}"] if str(c.get("note", "")).strip() else [])
        rows = [(name, r) for name, df in runs.items() for _, r in df[df["claim_id"] == cid].iterrows()]
        if rows:
            out += ["", "| reference run | system | verdict | measured | why |", "|---|---|---|---|---|"]
            out += [
                f"| {name} | {md_cell(r['system'])} | {md_cell(r['verdict'])} | {md_cell(r['measured'])} | "
                f"{md_cell(r['why'])} |"
                for name, r in rows
            ]
    return "\n".join(out) + "\n"
