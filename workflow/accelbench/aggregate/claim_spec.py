"""A published claim as data: how its check, tolerance, needs and setting read, and the cells of a claims-table row
that describe it (the same on every system).

A claim is one row of a study's claims file (``study_a_claims.csv``, ``study_b_claims.csv``), a :class:`pandas.Series`
with ``check`` (``range``: ``low <= x <= high``; ``min``: ``x >= low``; ``max``: ``x <= high``; ``true``: the
property holds), ``needs`` (``|``-separated observation keys), ``setting`` (``key=pattern;...``), ``hardware``,
``source``, ``quote`` and ``caveat``. Judging a claim on a system's observations is :mod:`accelbench.aggregate.claims`
(the verdict engine), which builds every row from :func:`claim_cells` and ends every why with :func:`with_caveat`.

Errors: a ``setting`` item that is not ``key=pattern`` or an unknown ``check`` raises
:class:`~accelbench.errors.DataError` naming the claim.
"""

from __future__ import annotations

import math

import pandas as pd

from accelbench.aggregate import scope
from accelbench.errors import DataError


# --------------------------------------------------------------------------- reading a claim
def setting_of(claim: pd.Series) -> dict[str, str]:
    """The claim's ``setting`` (``model=tinyllama*;text=wikitext*``) as ``{key: pattern}``.

    Raises:
        DataError: an item without ``=``.
    """
    out = {}
    for item in str(claim.get("setting", "") or "").split(";"):
        if not item.strip():
            continue
        key, eq, pattern = item.partition("=")
        if not eq or not key.strip() or not pattern.strip():
            raise DataError(f"claim {claim['claim_id']}: setting {item.strip()!r} is not key=pattern")
        out[key.strip().lower()] = pattern.strip().lower()
    return out


def needs_of(claim: pd.Series) -> list[str]:
    """The observations the claim needs (``|``-separated keys of its ``needs`` column); empty = one observation."""
    return [t.strip() for t in str(claim.get("needs", "") or "").split("|") if t.strip()]


def tolerance_text(claim: pd.Series) -> str:
    c, lo, hi = claim["check"], claim.get("low", ""), claim.get("high", "")
    return {"range": f"{lo} <= x <= {hi}", "min": f"x >= {lo}", "max": f"x <= {hi}", "true": "property holds"}.get(c, c)


def fails_if(claim: pd.Series) -> str:
    """The result that would make the claim fail, from its check: ``x < 3 or x > 5``, ``x < 0.75``, ``false``."""
    c, lo, hi = claim["check"], str(claim.get("low", "")).strip(), str(claim.get("high", "")).strip()
    parts = ([f"x < {lo}"] if lo and c in ("range", "min") else []) + (
        [f"x > {hi}"] if hi and c in ("range", "max") else []
    )
    return "the property is false" if c == "true" else " or ".join(parts) or "nothing (no bound)"


def passes(claim: pd.Series, value: float | bool) -> bool:
    """Whether ``value`` satisfies the claim's check. Raises DataError on an unknown check."""
    c = claim["check"]
    if c == "true":
        return bool(value)
    v = float(value)
    lo = float(claim["low"]) if str(claim.get("low", "")).strip() else -math.inf
    hi = float(claim["high"]) if str(claim.get("high", "")).strip() else math.inf
    if c in ("range", "min", "max"):
        return lo <= v <= hi
    raise DataError(f"claim {claim['claim_id']}: unknown check {c!r} (range, min, max, true)")


# --------------------------------------------------------------------------- the table
DIGEST = "digest (unverified)"  # how a row marks a claim whose published side is a third-party summary


def is_digest(claim: pd.Series) -> bool:
    """Whether the claim's published side comes from a third-party summary, unverified against the paper: its
    ``source`` starts with or names ``digest``, or its ``note`` starts with ``(digest)``."""
    source = str(claim.get("source", "")).strip().lower()
    return source.startswith("digest") or "(digest)" in source or str(claim.get("note", "")).startswith("(digest)")


def claim_cells(claim: pd.Series) -> dict:
    """The cells of a claims-table row that describe the claim (the same on every system). A digest claim
    (:func:`is_digest`) says so in its source and published cells: :data:`DIGEST`."""
    digest = is_digest(claim)
    source = str(claim["source"])
    if digest and DIGEST not in source:
        source = DIGEST if source.strip().lower() == "digest" else f"{DIGEST}: {source}"
    return {
        "study": claim["study"],
        "claim_id": claim["claim_id"],
        "claim": claim["claim"],
        "source": source,
        "quote": claim.get("quote", ""),
        "quote_source": claim.get("quote_source", ""),
        "scope": scope.label(claim.get("hardware", "")),
        "quantity": claim["quantity"],
        "tolerance": tolerance_text(claim),
        "fails_if": fails_if(claim),
        "needs": " | ".join(needs_of(claim)),
        "published": f"{claim['published']}; {DIGEST}" if digest else claim["published"],
    }


def with_caveat(claim: pd.Series, row: dict) -> dict:
    """``row`` with the claim's ``caveat`` (data: what the comparison cannot tell, e.g. published whole-job wall
    times against our projected medians) appended to its ``why``; unchanged without one."""
    caveat = str(claim.get("caveat", "") or "").strip()
    if caveat and caveat not in str(row.get("why", "")):
        row = {**row, "why": f"{row['why']}. Caveat: {caveat}"}
    return row
