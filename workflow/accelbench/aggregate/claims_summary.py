"""One verdict per claim, from the claims table's rows of every run (every claim x system, each with its origin).

:mod:`accelbench.aggregate.claims_table` judges each claim on each system (the verdict engine is
:mod:`accelbench.aggregate.claims`); this module reduces those rows to the verdict a reviewer reads first:

* :func:`origin_column`: where each row's evidence comes from (``measured here``, ``reference run (<label>,
  <date>)``, ``copied in (host <name>)``, ``no results``);
* :func:`summary_table`: one row per claim (:data:`SUMMARY_COLUMNS`), its verdict from the evidence that judges it,
  the run named. Where runs give decisive verdicts that differ, the row reads ``runs disagree`` (:data:`DISAGREE`)
  and says each run's verdict, what it measured and how the runs differ; otherwise the most complete evidence leads
  (``holds``/``does not hold``, then the ``partly measured`` row with most needs covered, then ``not measured here``
  with its most specific reason);
* :func:`verdict_counts`, :func:`count_table` and :func:`summary_line`: the counts of verdict categories (origin x
  verdict), as a table and as one line.

Input frames are claims tables (the columns of :func:`accelbench.aggregate.claims_table.claims_table`); a verdict of
no category raises :class:`~accelbench.errors.DataError` (:func:`accelbench.aggregate.claims.category`).
"""

from __future__ import annotations

import re

import pandas as pd

from accelbench.aggregate import scope
from accelbench.aggregate.claims import VERDICTS, category

DISAGREE = "runs disagree"
SUMMARY_VERDICTS = (*VERDICTS, DISAGREE)
NO_RESULTS = "no results"
SUMMARY_COLUMNS = ["study", "claim_id", "claim", "published", "scope", "verdict", "evidence", "measured", "why", "runs"]


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
