"""One verdict per claim, from the claims table's rows of every run (every claim x system, each with its origin).

:mod:`accelbench.aggregate.claims_table` judges each claim on each system (the verdict engine is
:mod:`accelbench.aggregate.claims`); this module reduces those rows to the verdict a reviewer reads first:

* :func:`origin_column`: where each row's evidence comes from (``measured here``, ``reference run (<label>,
  <date>)``, ``copied in (host <name>)``, ``no results``);
* :func:`likeness`: how like a row's run is to the claim's setting: its device class, then its setting;
* :func:`judging_rows`: the rows that judge a claim (those :func:`summary_table` builds its row from, and the
  first screen names as "judged by");
* :func:`summary_table`: one row per claim (:data:`SUMMARY_COLUMNS`), its verdict from the evidence that judges it,
  the run named. Evidence is ranked by :func:`likeness` before anything else within each verdict category, so a
  small CPU run never replaces a paper-scale accelerator run (committed reference run or not). Where runs of the
  most like rank give decisive verdicts that differ, the row reads ``runs disagree`` (:data:`DISAGREE`) and says
  each run's verdict, what it measured and how the runs differ; otherwise the most complete evidence leads
  (``holds``/``does not hold``, then the ``partly measured`` row with most needs covered, then ``not measured here``
  of the most like run, with its most specific reason);
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


_CPU = re.compile(r"^\s*CPU\b", re.I)
_UNLIKE = "not like for like"


def likeness(row: pd.Series) -> tuple[int, int]:
    """How like one claims row's run is to the claim's setting: (device, setting), lower is more like.

    device: 0 an accelerator of the claim's own hardware class (for a claim of any hardware, any accelerator), or
    of no class the policy counts by proxy; 1 an accelerator counted as its class only by the scope policy (an H200
    as H100); 2 a CPU (never the studies' hardware: a small run beside paper-scale ones); 3 no results.
    setting: 0 judged on the claim; 1 measured on another setting (``not like for like``); 2 outside the claim's
    hardware (``not measured here (A100 claim)``: its value still shown).

    ``row``: a claims-table row (``hardware``, ``scope``, ``verdict``; ``origin`` optional)."""
    hw = str(row["hardware"])
    verdict = str(row["verdict"])
    setting = (
        2
        if verdict.startswith("not measured here (") and verdict.endswith(" claim)")
        else 1
        if verdict.startswith(f"not measured here ({_UNLIKE}")
        else 0
    )
    if hw in ("none", "") or row.get("origin") == NO_RESULTS:
        return 3, setting
    if _CPU.match(scope.device_part(hw)):
        return 2, setting
    any_hw = str(row["scope"]) == scope.label(scope.ANY)
    return (1 if not any_hw and scope.class_of(hw)[1] else 0), setting


def judging_rows(g: pd.DataFrame) -> pd.DataFrame:
    """The rows of one claim (every origin, with ``origin``) that judge it, most like first (:func:`likeness`):

    * the decisive rows (``holds``/``does not hold``) of the most like device among them (an H100 claim on an H100
      before an H200 counted as one; any accelerator before a CPU);
    * else the ``partly measured`` row of the most like device with most needs covered;
    * else the ``not measured here`` row of the most like device, in the claim's hardware before outside it, a value
      measured before none, its reason most specific; with the rows of that device that read the same verdict and
      value (the other runs that say the same)."""
    cats = g["verdict"].map(category)
    like = g.apply(likeness, axis=1, result_type="expand") if not g.empty else pd.DataFrame(columns=[0, 1])
    device = like[0]
    decisive = cats.isin(["holds", "does not hold"])
    if decisive.any():
        return g[decisive & (device == device[decisive].min())]
    partly = cats == "partly measured"
    if partly.any():
        pool = g[partly & (device == device[partly].min())]
        return pool.loc[[pool["verdict"].map(_covered).idxmax()]]
    key = pd.DataFrame(
        {
            "device": device,
            "outside": like[1] == 2,
            "blank": g["measured"].astype(str).str.strip().isin(["", "nan"]),
            "vague": ~g["verdict"].str.contains(r"\(", regex=True),
        },
        index=g.index,
    )
    lead = key.sort_values(list(key.columns), kind="stable").index[0]
    same = (
        (device == device[lead])
        & (g["verdict"] == g.at[lead, "verdict"])
        & (g["measured"].astype(str) == str(g.at[lead, "measured"]))
    )
    return pd.concat([g.loc[[lead]], g[same & (g.index != lead)]])


def _summary_row(g: pd.DataFrame) -> dict:
    """The one row of one claim from its rows of every origin (see the module docstring for which leads)."""
    first = g.iloc[0]
    cats = g["verdict"].map(category)
    counts = ", ".join(f"{int((cats == v).sum())} {v}" for v in VERDICTS if (cats == v).any())
    base = {c: first[c] for c in ("study", "claim_id", "published", "scope")}
    base["claim"] = re.sub(r" \[[^\]]*\]$", "", str(first["claim"]))
    base["runs"] = f"{len(g)} row{'s' if len(g) > 1 else ''}: {counts}"
    judging = judging_rows(g)
    lead = judging.iloc[0]
    if category(lead["verdict"]) in ("holds", "does not hold"):
        decisive = judging
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
        also = len(decisive) - 1
        evidence = "; ".join(dict.fromkeys(decisive.apply(_where, axis=1)))
        return {
            **base,
            "verdict": lead["verdict"],
            "evidence": evidence,
            "measured": lead["measured"],
            "why": lead["why"] + (f" (and {also} more row{'s' if also > 1 else ''} agree)" if also else ""),
        }
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
