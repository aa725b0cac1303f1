"""The claims table as a reviewer reads it: one row per claim first, every run's row behind it, a figure, a page.

:mod:`accelbench.aggregate.claims_table` judges each claim on each system; this module presents the verdicts:

* :func:`summary_table`: one row per claim, its verdict from the evidence that judges it, the run named. Where
  runs give decisive verdicts that differ, the row reads ``runs disagree`` and says each run's verdict, what it
  measured and how the runs differ; otherwise the most complete evidence leads (``holds``/``does not hold``, then
  the ``partly measured`` row with most needs covered, then ``not measured here`` with its most specific reason);
* :func:`front_table`: the first screen, one line per claim (its ``short`` text from the claims files, published,
  measured on which hardware, the verdict's category, the run that judged it), no footnotes; :func:`count_table`
  beside it (origin x verdict);
* :func:`aggregate`: ``claims.{csv,md,tex,html}`` (every claim x system row, with its origin; the Markdown and HTML
  open with :func:`front_table` and :func:`count_table`), ``claims_summary.csv`` (one row per claim) and
  ``fig_claims.png``;
* :func:`claims_page`: ``docs/claims.md``, each claim with its quote and source, hardware scope, what would make
  it fail, the evidence it needs, and each committed reference run's verdict (written by ``accelbench reference-runs``).
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from accelbench.aggregate import scope
from accelbench.aggregate.claims import VERDICTS, category, fails_if, needs_of, tolerance_text
from accelbench.aggregate.claims_table import claims_table, read_claims
from accelbench.aggregate.common import HTML_NOTE_CHARS, footnoted, html_table, load_results, write_table
from accelbench.aggregate.figures import FONT, save_figure, wrap
from accelbench.aggregate.h100_table import h100_table, read_published_minutes
from accelbench.core import files, registry
from accelbench.errors import DataError

DISAGREE = "runs disagree"
SUMMARY_VERDICTS = (*VERDICTS, DISAGREE)
VERDICT_COLOUR = {
    "holds": "#8fd18a",
    "does not hold": "#f08a8a",
    "partly measured": "#f3d27a",
    "not measured here": "#d9d9d9",
    DISAGREE: "#c9a0dc",
}
NO_RESULTS = "no results"
SUMMARY_COLUMNS = ["study", "claim_id", "claim", "published", "scope", "verdict", "evidence", "measured", "why", "runs"]
TITLE = "Published claims of Study A (arXiv 2606.19365) and Study B (arXiv 2607.05400)"
FRONT_COLUMNS = ["claim", "what it says", "published", "measured (on)", "verdict", "judged by"]
FRONT_TITLE = "Claims: one line per claim"
FRONT_NOTE = (
    "verdict: holds / does not hold (complete, like-for-like evidence), partly measured, not measured here, runs "
    "disagree; why, quotes and every run's row: below"
)


def origin_column(df: pd.DataFrame) -> pd.Series:
    """The origin of each claims row, from its hardware label: ``reference run (<label>, <date>)`` for a committed
    reference run's results, ``copied in (host <name>)`` for results merged from another machine
    (:func:`accelbench.aggregate.common.copied_in`), ``measured here`` for this checkout's, ``no results`` where
    nothing ran."""

    def one(hw: str) -> str:
        hw = str(hw)
        if hw in ("none", ""):
            return NO_RESULTS
        if hw.startswith(("reference run (", "copied in (")) and "): " in hw:  # a result merged from elsewhere too
            return hw.split("): ", 1)[0] + ")"
        return "measured here"

    return df["hardware"].map(one) if not df.empty else pd.Series(dtype=str)


def _covered(verdict: str) -> int:
    m = re.search(r"\((\d+) of \d+\)", verdict)
    return int(m.group(1)) if m else 0


def _where(row: pd.Series) -> str:
    return f"{row['origin']}, {scope.device_part(row['hardware'])}" if row["origin"] != NO_RESULTS else NO_RESULTS


def _own_device_first(decisive: pd.DataFrame) -> pd.DataFrame:
    """The decisive rows that judge a claim on its own hardware class (an H100 claim on an H100) where there are
    any, else all: a device counted in that class only by the scope policy (an H200 as H100) then stays in the
    per-run rows without deciding the claim. Claims of any hardware keep every row."""
    if decisive.empty:
        return decisive
    own = decisive[
        decisive.apply(
            lambda r: str(r["scope"]) != scope.label(scope.ANY) and not scope.class_of(r["hardware"])[1], axis=1
        )
    ]
    return own if not own.empty else decisive


def _summary_row(g: pd.DataFrame) -> dict:
    """The one row of one claim from its rows of every origin (see the module docstring for which leads)."""
    first = g.iloc[0]
    cats = g["verdict"].map(category)
    counts = ", ".join(f"{int((cats == v).sum())} {v}" for v in VERDICTS if (cats == v).any())
    base = {c: first[c] for c in ("study", "claim_id", "published", "scope")}
    base["claim"] = re.sub(r" \[[^\]]*\]$", "", str(first["claim"]))
    base["runs"] = f"{len(g)} row{'s' if len(g) > 1 else ''}: {counts}"
    decisive = _own_device_first(g[cats.isin(["holds", "does not hold"])])
    if not decisive.empty:
        verdicts = sorted(set(decisive["verdict"]))
        if len(verdicts) > 1:
            each = "; ".join(f"{_where(r)}: {r['verdict']} on {r['measured']}" for _, r in decisive.iterrows())
            devices = sorted({scope.device_part(h) for h in decisive["hardware"]})
            differ = (
                f"hardware differs ({' vs '.join(devices)})"
                if len(devices) > 1
                else "same hardware: the runs measured different observations or settings (see measured)"
            )
            return {
                **base,
                "verdict": DISAGREE,
                "evidence": "; ".join(dict.fromkeys(decisive["origin"])),
                "measured": " | ".join(decisive["measured"]),
                "why": f"{each}. Why they differ: {differ}",
            }
        lead = decisive.iloc[0]
        also = len(decisive) - 1
        evidence = "; ".join(dict.fromkeys(decisive.apply(_where, axis=1)))
        return {
            **base,
            "verdict": lead["verdict"],
            "evidence": evidence,
            "measured": lead["measured"],
            "why": lead["why"] + (f" (and {also} more row{'s' if also > 1 else ''} agree)" if also else ""),
        }
    partly = g[cats == "partly measured"]
    if not partly.empty:
        lead = partly.loc[partly["verdict"].map(_covered).idxmax()]
        return {
            **base,
            "verdict": lead["verdict"],
            "evidence": _where(lead),
            "measured": lead["measured"],
            "why": lead["why"],
        }
    specific = g[g["verdict"].str.contains(r"\(", regex=True) & (g["origin"] != NO_RESULTS)]
    lead = specific.iloc[0] if not specific.empty else g.iloc[0]
    return {
        **base,
        "verdict": lead["verdict"],
        "evidence": _where(lead),
        "measured": lead["measured"],
        "why": lead["why"],
    }


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per claim (:data:`SUMMARY_COLUMNS`) from the claims table ``df`` (every claim x system row, with or
    without an ``origin`` column), in the claims files' order."""
    if df.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    d = df if "origin" in df else df.assign(origin=origin_column(df))
    rows = [_summary_row(g) for _, g in d.groupby("claim_id", sort=False)]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def verdict_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Rows (claim x system) per study, origin and verdict category: measured here and each reference run counted
    apart."""
    d = df.assign(origin=origin_column(df), category=df["verdict"].map(category)) if not df.empty else df
    counts = (
        d.groupby(["study", "origin", "category"]).size().unstack("category", fill_value=0)
        if not d.empty
        else pd.DataFrame()
    )
    return counts.reindex(columns=list(VERDICTS), fill_value=0)


def head_category(verdict: str) -> str:
    """The category of a one-per-claim verdict: :data:`DISAGREE`, else :func:`accelbench.aggregate.claims.category`."""
    return DISAGREE if verdict == DISAGREE else category(verdict)


def summary_line(df: pd.DataFrame, summary: pd.DataFrame | None = None) -> str:
    """``one verdict per claim: 3 holds, ...; measured here: ...; reference run (H200, ...): ...``; ``summary``: the
    :func:`summary_table` of ``df`` where already made."""
    if df.empty:
        return "no claims"
    summary = summary_table(df) if summary is None else summary
    heads = summary["verdict"].map(head_category)
    line = "one verdict per claim: " + ", ".join(f"{int((heads == v).sum())} {v}" for v in SUMMARY_VERDICTS)
    by = verdict_counts(df).groupby(level="origin").sum()
    return line + "; " + "; ".join(f"{o}: " + ", ".join(f"{int(r[v])} {v}" for v in VERDICTS) for o, r in by.iterrows())


def _device(hardware: str) -> str:
    """``NVIDIA H200`` of ``reference run (...): NVIDIA H200 (1x, 139.8 GiB)``; ``CPU: AMD EPYC`` of
    ``CPU: AMD EPYC (2 threads) [cpu: ...]``: the device without its counts and notes."""
    return re.split(r" [(\[]", scope.device_part(str(hardware)), maxsplit=1)[0].strip()


CUT_MARK = " …"  # ends a cell cut by :func:`brief` (the whole text: the long tables below it)


def _clause_ends(text: str) -> list[int]:
    """Where each top-level clause of ``text`` ends: before ``; ``, `` | `` or a ``. `` that opens a capitalised
    sentence, outside parentheses and brackets (``4.80x (README; the log agrees). Erratum: ...`` has its first
    clause end after ``agrees)``; ``rel. L2`` is no end)."""
    ends, depth = [], 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]" and depth:
            depth -= 1
        elif depth == 0 and (
            text.startswith("; ", i)
            or text.startswith(" | ", i)
            or (text.startswith(". ", i) and text[i + 2 : i + 3].isupper())
        ):
            ends.append(i)
    return [*ends, len(text)]


def brief(text, limit: int) -> str:
    """``text`` in at most ``limit`` characters: its leading clauses (:func:`_clause_ends`) that fit, then
    :data:`CUT_MARK`; a first clause longer than that cut at a word. A trailing ``digest (unverified)`` mark
    (:data:`accelbench.aggregate.claims.DIGEST`) is kept."""
    from accelbench.aggregate.claims import DIGEST

    text = "" if text is None or (isinstance(text, float) and pd.isna(text)) else str(text)
    if len(text) <= limit:
        return text
    tail = f"; {DIGEST}" if text.endswith(f"; {DIGEST}") else ""
    body = text[: len(text) - len(tail)]
    room = limit - len(tail) - len(CUT_MARK)
    fits = [e for e in _clause_ends(body) if e <= room]
    kept = body[: fits[-1]] if fits else body[:room].rsplit(" ", 1)[0]
    return f"{kept.rstrip(' ,;:(')}{CUT_MARK}{tail}"


def front_table(
    shown: pd.DataFrame, summary: pd.DataFrame, shorts: dict[str, str], limit: int | None = None
) -> pd.DataFrame:
    """The first screen (:data:`FRONT_COLUMNS`), one line per claim of ``summary`` (:func:`summary_table` of
    ``shown``, every claim x system row with ``origin``): the claim's ``short`` text (``shorts``: claim id -> text,
    the claims files' column), its published value, what was measured and on which device, the verdict's category
    (:func:`head_category`) and the run(s) that judged it. The reasons and the full verdicts are in ``summary``.
    ``limit``: each cell in at most that many characters (:func:`brief`; the measured value cut before its device).

    Raises:
        DataError: a claim of ``summary`` without a short text.
    """
    cut = (lambda t, room=0: brief(t, limit - room)) if limit else (lambda t, room=0: t)  # noqa: E731
    rows = []
    for _, s in summary.iterrows():
        cid = s["claim_id"]
        if not str(shorts.get(cid, "")).strip():
            raise DataError(f"claim {cid}: no short text (column short of its claims file)")
        mine = shown[(shown["claim_id"] == cid) & (shown["measured"].astype(str) == str(s["measured"]))]
        measured = str(s["measured"]) if pd.notna(s["measured"]) else ""
        device = _device(mine["hardware"].iloc[0]) if measured and not mine.empty else ""
        verdict = head_category(str(s["verdict"]))
        judged = "; ".join(dict.fromkeys(o for o in mine["origin"] if o != NO_RESULTS)) if not mine.empty else ""
        measured = cut(measured, len(device) + 3 if device else 0)
        rows.append(
            {
                "claim": cid,
                "what it says": shorts[cid],
                "published": cut(s["published"]),
                "measured (on)": f"{measured} ({device})" if device and measured != "" else measured,
                "verdict": verdict,
                "judged by": cut(judged or ("" if verdict != DISAGREE else str(s["evidence"])) or NO_RESULTS),
            }
        )
    return pd.DataFrame(rows, columns=FRONT_COLUMNS)


def count_table(df: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Origin x verdict: first ``one verdict per claim`` (``summary``'s heads, :data:`SUMMARY_VERDICTS`), then each
    origin's claim x system rows (:func:`verdict_counts` summed over the studies), as integers (``runs disagree``
    only where some claim reads it)."""
    heads = summary["verdict"].map(head_category)
    rows = {"one verdict per claim": {v: int((heads == v).sum()) for v in SUMMARY_VERDICTS}}
    by = verdict_counts(df).groupby(level="origin").sum() if not df.empty else pd.DataFrame()
    for origin, r in by.iterrows():
        rows[str(origin)] = {v: int(r[v]) for v in VERDICTS}
    out = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=list(SUMMARY_VERDICTS)).fillna(0).astype(int)
    out = out.loc[:, [c for c in out.columns if c != DISAGREE or out[c].sum() > 0]]
    out.index.name = "origin"
    return out


def _md_row(cells) -> str:
    return "| " + " | ".join(_md(c) for c in cells) + " |"


def front_markdown(front: pd.DataFrame, counts: pd.DataFrame) -> str:
    """:func:`front_table` and :func:`count_table` as Markdown (one line per claim, no footnotes), for claims.md."""
    out = [
        f"## {FRONT_TITLE}",
        "",
        f"{TITLE} ({FRONT_NOTE}).",
        "",
        _md_row(front.columns),
        _md_row(["---"] * len(front.columns)),
    ]
    out += [_md_row(r) for r in front.itertuples(index=False)]
    out += [
        "",
        "### Verdict counts",
        "",
        _md_row(["origin", *counts.columns]),
        _md_row(["---"] * (len(counts.columns) + 1)),
    ]
    out += [_md_row([o, *r]) for o, r in zip(counts.index, counts.itertuples(index=False))]
    return "\n".join(out) + "\n"


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
    fig, ax = plt.subplots(figsize=(10, 1.8 + 0.45 * max(1, len(bars))))
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
    scope.use_reference_dir(reference_dir)  # the H100/H200 evidence of the scope policy, beside the claims files
    claims = pd.concat([read_claims(reference_dir / f, s) for s, f in registry.claims_files()], ignore_index=True)
    df = claims_table(results, claims, registry.published_files(reference_dir))
    shown = df.copy()
    shown.insert(shown.columns.get_loc("hardware"), "origin", origin_column(df))
    summary = summary_table(shown)
    line = summary_line(df, summary)
    front = front_table(shown, summary, dict(zip(claims["claim_id"], claims["short"])))
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


FRONT_STYLE = (
    "<style>.accelbench-front table{border-collapse:collapse;font-size:12px;line-height:1.25}"
    ".accelbench-front th,.accelbench-front td{border:1px solid #ccc;padding:1px 5px;white-space:nowrap;"
    "text-align:left;vertical-align:top}"
    ".accelbench-front td.cut{max-width:150px;overflow:hidden;text-overflow:ellipsis}"
    ".accelbench-front h3{margin:0 0 2px 0}.accelbench-front p{margin:0 0 4px 0;font-size:12px}"
    + "".join(f".accelbench-front td.v-{i}{{background:{c}}}" for i, c in enumerate(VERDICT_COLOUR.values()))
    + "</style>"
)
CUT = ("published", "measured (on)", "judged by")  # cut to one line on screen, whole in the cell's title


def front_html(front: pd.DataFrame, counts: pd.DataFrame) -> str:
    """:func:`front_table` as the report's first table: one line per claim (the long cells of :data:`CUT` end in
    an ellipsis on screen, whole in their tooltip and in the tables below), verdict cells coloured, no footnotes;
    then :func:`count_table`."""
    import html

    colour_of = {v: i for i, v in enumerate(VERDICT_COLOUR)}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in front.columns)
    body = []
    for _, r in front.iterrows():
        cells = []
        for c in front.columns:
            text = html.escape(str(r[c]))
            if c == "verdict":
                cells.append(f'<td class="v-{colour_of[r[c]]}">{text}</td>')
            elif c in CUT:
                cells.append(f'<td class="cut" title="{text}">{text}</td>')
            else:
                cells.append(f"<td>{text}</td>")
        body.append(f'<tr data-claim="{html.escape(str(r["claim"]))}">' + "".join(cells) + "</tr>")
    count_head = "".join(f"<th>{html.escape(str(c))}</th>" for c in ["origin", *counts.columns])
    count_body = "".join(
        "<tr>" + f"<td>{html.escape(str(o))}</td>" + "".join(f"<td>{int(v)}</td>" for v in r) + "</tr>"
        for o, r in zip(counts.index, counts.itertuples(index=False))
    )
    return (
        f'<div class="accelbench-front">{FRONT_STYLE}<h3>{html.escape(FRONT_TITLE)}</h3>'
        f"<p>{html.escape(FRONT_NOTE)}.</p>"
        f'<table class="front"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        f'<p style="margin-top:6px">Verdict counts (claims x systems per origin):</p>'
        f'<table class="counts"><thead><tr>{count_head}</tr></thead><tbody>{count_body}</tbody></table></div>\n'
    )


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


# --------------------------------------------------------------------------- docs/claims.md
def _md(text) -> str:
    return str(text if pd.notna(text) else "").replace("|", "\\|").replace("\n", " ")


def read_run_tables(run_tables: dict[str, Path]) -> dict[str, pd.DataFrame]:
    """``{run folder name: its committed tables/claims/claims.csv}``, read, in name order, each through
    :func:`accelbench.core.files.read_text` (a FIFO or huge file there: one line naming it, :class:`DataError`)."""
    import io

    from accelbench.core.files import MAX_TEXT_BYTES, read_text
    from accelbench.errors import DataError

    return {
        name: pd.read_csv(
            io.StringIO(read_text(p, "claims table", MAX_TEXT_BYTES, DataError)), dtype=str, keep_default_na=False
        )
        for name, p in sorted(run_tables.items())
    }


def verdict_table(runs: dict[str, pd.DataFrame]) -> str:
    """A Markdown table of one verdict per claim over every reference run together (:func:`summary_table` of their
    claims tables, :func:`read_run_tables`): claim, verdict, the evidence (run and hardware), what it measured."""
    runs = list(runs.values())
    if not runs:
        return "No reference run has a claims table yet."
    summary = summary_table(pd.concat(runs, ignore_index=True))
    out = ["| claim | verdict | evidence | measured |", "|---|---|---|---|"]
    out += [
        f"| {_md(r['claim_id'])} | {_md(r['verdict'])} | {_md(r['evidence'])} | {_md(r['measured'])} |"
        for _, r in summary.iterrows()
    ]
    return "\n".join(out)


FRONT_CELL_CHARS = 120  # ARTIFACT.md's opening table: each cell at most this long (:func:`brief`)


def reference_front(reference_dir: str | Path, runs: dict[str, pd.DataFrame]) -> str:
    """ARTIFACT.md's opening table: :func:`front_table` of every committed reference run together (``runs``:
    :func:`read_run_tables`), one line per claim in the claims files' order, each cell cut to
    :data:`FRONT_CELL_CHARS` (:func:`brief`), no footnotes; then the one-verdict-per-claim counts in one line.
    The claims files: every study's, as the registry names them, under ``reference_dir``."""
    if not runs:
        return "No reference run has a claims table yet."
    shown = pd.concat(list(runs.values()), ignore_index=True)
    if "origin" not in shown:
        shown.insert(shown.columns.get_loc("hardware"), "origin", origin_column(shown))
    summary = summary_table(shown)
    files = registry.claims_files()
    claims = pd.concat([read_claims(Path(reference_dir) / f, s) for s, f in files], ignore_index=True)
    order = {cid: i for i, cid in enumerate(claims["claim_id"])}
    summary = summary.sort_values("claim_id", key=lambda c: c.map(order), kind="stable")
    front = front_table(shown, summary, dict(zip(claims["claim_id"], claims["short"])), FRONT_CELL_CHARS)
    heads = summary["verdict"].map(head_category)
    counts = ", ".join(f"{int((heads == v).sum())} {v}" for v in SUMMARY_VERDICTS if (heads == v).any())
    out = [_md_row(front.columns), _md_row(["---"] * len(front.columns))]
    out += [_md_row(r) for r in front.itertuples(index=False)]
    return (
        "\n".join(out)
        + f"\n\nOne verdict per claim over the {len(runs)} reference runs ({len(front)} claims): {counts}."
    )


def claims_page(reference_dir: str | Path, run_tables: dict[str, Path]) -> str:
    """``docs/claims.md``: for each claim its quote and source, hardware scope, tolerance and what would make it
    fail, the evidence it needs and the setting it must be measured on, then each reference run's verdict (from
    ``run_tables``: ``{run folder name: its tables/claims/claims.csv}``, each run judged on its own results), after
    one table of one verdict per claim over every run together. The claims files: every study's, as the registry
    names them, under ``reference_dir``."""
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
        verdict_table(runs),
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
            f"## {cid}: {_md(c['claim'])}",
            "",
            quote,
            "",
            f"- **Published**: {_md(c['published'])}",
            f"- **Source**: {_md(c['source'])}",
            f"- **Hardware scope**: {scope.label(c['hardware'])}",
            f"- **Quantity and tolerance**: `{c['quantity']}` ({_md(c['experiment'])}), "
            f"{_md(tolerance_text(c))}; fails if {_md(fails_if(c))}",
            f"- **Evidence it needs**: {_md(' | '.join(needs_of(c)) or 'one observation')}"
            + (f"; measured on `{c['setting']}`" if str(c.get("setting", "")).strip() else ""),
        ] + ([f"- **Note**: {_md(c['note'])}"] if str(c.get("note", "")).strip() else [])
        rows = [(name, r) for name, df in runs.items() for _, r in df[df["claim_id"] == cid].iterrows()]
        if rows:
            out += ["", "| reference run | system | verdict | measured | why |", "|---|---|---|---|---|"]
            out += [
                f"| {name} | {_md(r['system'])} | {_md(r['verdict'])} | {_md(r['measured'])} | {_md(r['why'])} |"
                for name, r in rows
            ]
    return "\n".join(out) + "\n"


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
