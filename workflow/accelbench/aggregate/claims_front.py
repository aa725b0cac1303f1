"""The first screen of the claims: one line per claim (its short text, published, measured on which device, the
verdict's category, the run that judged it), no footnotes, in Markdown and HTML.

* :func:`front_table`: the table (:data:`FRONT_COLUMNS`) from the claims table's rows and their
  :func:`~accelbench.aggregate.claims_summary.summary_table`, each cell optionally cut by :func:`brief`;
* :func:`front_markdown` and :func:`front_html`: it and the verdict counts
  (:func:`~accelbench.aggregate.claims_summary.count_table`) as the opening of ``claims.md`` and ``claims.html``;
  verdict cells coloured by :data:`VERDICT_COLOUR`;
* :func:`md_cell` and :func:`md_row`: a Markdown table cell and row (``|`` escaped, one line).

A claim without a short text raises :class:`~accelbench.errors.DataError` naming it.
"""

from __future__ import annotations

import re

import pandas as pd

from accelbench.aggregate import scope
from accelbench.aggregate.claim_spec import DIGEST
from accelbench.aggregate.claims_summary import DISAGREE, NO_RESULTS, head_category, judging_rows
from accelbench.errors import DataError

VERDICT_COLOUR = {
    "holds": "#8fd18a",
    "does not hold": "#f08a8a",
    "partly measured": "#f3d27a",
    "not measured here": "#d9d9d9",
    DISAGREE: "#c9a0dc",
}
TITLE = "Published claims of Study A (arXiv 2606.19365) and Study B (arXiv 2607.05400)"
FRONT_COLUMNS = ["claim", "what it says", "published", "measured (on)", "verdict", "judged by"]
FRONT_TITLE = "Claims: one line per claim"
FRONT_NOTE = (
    "verdict: holds / does not hold (complete, like-for-like evidence), partly measured, not measured here, runs "
    "disagree; why, quotes and every run's row: below"
)


def md_cell(text) -> str:
    """``text`` as one Markdown table cell: ``|`` escaped, newlines as spaces, NaN/None empty."""
    return str(text if pd.notna(text) else "").replace("|", "\\|").replace("\n", " ")


def md_row(cells) -> str:
    """One Markdown table row of ``cells`` (each through :func:`md_cell`)."""
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


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
    (:data:`accelbench.aggregate.claim_spec.DIGEST`) is kept."""
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
    (:func:`head_category`) and the run(s) that judged it (:func:`judging_rows`: the most like runs, never a CPU
    run where an accelerator's is as decisive). The reasons and the full verdicts are in ``summary``.
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
        judging = judging_rows(shown[shown["claim_id"] == cid])  # the rows the summary's verdict comes from
        mine = judging[judging["measured"].astype(str) == str(s["measured"])]
        measured = str(s["measured"]) if pd.notna(s["measured"]) else ""
        device = _device(mine["hardware"].iloc[0]) if measured and not mine.empty else ""
        verdict = head_category(str(s["verdict"]))
        judged = "; ".join(dict.fromkeys(o for o in judging["origin"] if o != NO_RESULTS))
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


def front_markdown(front: pd.DataFrame, counts: pd.DataFrame) -> str:
    """:func:`front_table` and :func:`count_table` as Markdown (one line per claim, no footnotes), for claims.md."""
    out = [
        f"## {FRONT_TITLE}",
        "",
        f"{TITLE} ({FRONT_NOTE}).",
        "",
        md_row(front.columns),
        md_row(["---"] * len(front.columns)),
    ]
    out += [md_row(r) for r in front.itertuples(index=False)]
    out += [
        "",
        "### Verdict counts",
        "",
        md_row(["origin", *counts.columns]),
        md_row(["---"] * (len(counts.columns) + 1)),
    ]
    out += [md_row([o, *r]) for o, r in zip(counts.index, counts.itertuples(index=False))]
    return "\n".join(out) + "\n"


COLUMN_PX = {  # the first screen's columns, each at most this wide (CSS px at 12 px text): all fit FRONT_WIDTH_PX
    "claim": 40,
    "what it says": 300,
    "published": 120,
    "measured (on)": 200,
    "verdict": 130,
    "judged by": 200,
}
CELL_PAD_PX = 11  # each cell's padding and border
FRONT_WIDTH_PX = 1060  # the whole table: fits beside the report's navigation in a 1400 px wide window
FRONT_STYLE = (
    "<style>.accelbench-front table{border-collapse:collapse;font-size:12px;line-height:1.25}"
    ".accelbench-front th,.accelbench-front td{border:1px solid #ccc;padding:1px 5px;white-space:nowrap;"
    "text-align:left;vertical-align:top}"
    + "".join(
        f".accelbench-front td.c-{i}{{max-width:{px}px;overflow:hidden;text-overflow:ellipsis}}"
        for i, px in enumerate(COLUMN_PX.values())
    )
    + ".accelbench-front h3{margin:0 0 2px 0}.accelbench-front p{margin:0 0 4px 0;font-size:12px}"
    + "".join(f".accelbench-front td.v-{i}{{background:{c}}}" for i, c in enumerate(VERDICT_COLOUR.values()))
    + "</style>"
)
CUT = ("what it says", "published", "measured (on)", "judged by")  # one line on screen, whole in the cell's title


def front_html(front: pd.DataFrame, counts: pd.DataFrame) -> str:
    """:func:`front_table` as the report's first table: one line per claim, each column at most its
    :data:`COLUMN_PX` wide (the table within :data:`FRONT_WIDTH_PX`, so "judged by" shows on a 1400 px screen; the
    long cells of :data:`CUT` end in an ellipsis on screen, whole in their tooltip and in the tables below), verdict
    cells coloured, no footnotes; then :func:`count_table`."""
    import html

    colour_of = {v: i for i, v in enumerate(VERDICT_COLOUR)}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in front.columns)
    body = []
    for _, r in front.iterrows():
        cells = []
        for i, c in enumerate(front.columns):
            text = html.escape(str(r[c]))
            if c == "verdict":
                cells.append(f'<td class="c-{i} v-{colour_of[r[c]]}">{text}</td>')
            elif c in CUT:
                cells.append(f'<td class="c-{i}" title="{text}">{text}</td>')
            else:
                cells.append(f'<td class="c-{i}">{text}</td>')
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
