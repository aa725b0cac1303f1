"""The claims table: the claim files of both studies read into one shape (:func:`read_claims`,
:func:`claims_frame`), the checks of the experiments' tables modules gathered through the registry
(:func:`claim_checks`), and every claim judged on every system's results (:func:`claims_table`, one row per claim and
system, :data:`COLUMNS`).

The verdicts come from the engine, :mod:`accelbench.aggregate.claims`; the observations behind a claim come from the
aggregation module of its experiment, found through the registry (:func:`accelbench.core.registry.aggregated`,
imported by name): each such module may define

* ``CLAIM_CHECKS``: ``{experiment: check}``, ``check(claim, inputs) -> list of claims-table rows``, where ``inputs``
  is :class:`~accelbench.aggregate.claims.ClaimInputs` (the results by experiment, rows computed once per table); a
  check builds its rows with :func:`~accelbench.aggregate.claims.verdict_row` (one per system) or
  :func:`~accelbench.aggregate.claims.not_run`;
* ``claims_layout(df)``: its claims file in this table's shape (``quantity``, ``selector``, ``experiment``, ``claim``,
  ``published``, ``hardware``), or None when ``df`` is not in its layout (Study A's file has its own columns).

This module holds no study-specific code and imports no experiment.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pandas as pd

from accelbench.aggregate import scope
from accelbench.aggregate.claim_spec import setting_of
from accelbench.aggregate.claims import ClaimInputs, category, not_run
from accelbench.core import files, registry
from accelbench.errors import DataError

SHORT_CHARS = 80  # a claim's ``short`` text (the first table of the report and of claims.md): at most this long

COLUMNS = [
    "study",
    "claim_id",
    "claim",
    "source",
    "quote",
    "quote_source",
    "scope",
    "quantity",
    "tolerance",
    "fails_if",
    "needs",
    "published",
    "system",
    "hardware",
    "measured",
    "verdict",
    "why",
]


# --------------------------------------------------------------------------- the experiments' tables modules
def aggregation_modules() -> list[ModuleType]:
    """The aggregation module of every aggregated experiment of the registry, in registry order, each once."""
    return list({id(m): m for m in (e.load_tables() for e in registry.aggregated())}.values())


def claim_checks() -> dict[str, Callable]:
    """``{experiment: check}`` from the ``CLAIM_CHECKS`` of every aggregation module.

    Raises:
        DataError: two modules check the same experiment.
    """
    checks: dict[str, Callable] = {}
    owner: dict[str, str] = {}
    for module in aggregation_modules():
        for experiment, check in getattr(module, "CLAIM_CHECKS", {}).items():
            if experiment in checks:
                raise DataError(f"claims of {experiment} are checked by both {owner[experiment]} and {module.__name__}")
            checks[experiment], owner[experiment] = check, module.__name__
    return checks


# --------------------------------------------------------------------------- reading
def read_claims(path: str | Path, study: str) -> pd.DataFrame:
    """A claims CSV (``#`` lines are its source notes) in one shape: ``study, claim_id, short, claim, source,
    experiment, quantity, selector, check, low, high, published, applies_to, note``.

    Raises:
        DataError: the file is missing, lacks a ``check`` column, or a claim's ``short`` text is blank or longer than
            :data:`SHORT_CHARS` characters (named with the file and the claim).
    """
    df = files.read_frame(path, "claims file", error=DataError, comment="#", dtype=str, keep_default_na=False)
    if "short" not in df:
        raise DataError(f"{path}: no 'short' column (each claim in at most {SHORT_CHARS} characters)")
    for cid, short in zip(df.get("claim_id", []), df["short"]):
        if not short.strip() or len(short) > SHORT_CHARS:
            raise DataError(
                f"{path}: claim {cid}: column short must be 1-{SHORT_CHARS} characters, not {len(short)}: {short!r}"
            )
    return claims_frame(df, study, str(path))


def claims_frame(df: pd.DataFrame, study: str, name: str = "claims") -> pd.DataFrame:
    """:func:`read_claims` on a claims table already read (``name`` labels it in errors). A file without a
    ``quantity`` column is in a study's own layout: the ``claims_layout`` of its aggregation module reshapes it."""
    if "check" not in df:
        raise DataError(f"{name}: no 'check' column (each claim needs check, low, high)")
    df = df.copy()
    if "quantity" not in df:
        for module in aggregation_modules():
            layout = getattr(module, "claims_layout", None)
            shaped = layout(df) if layout is not None else None
            if shaped is not None:
                df = shaped
                break
    for col in ("hardware", "needs", "setting", "quote", "quote_source"):
        if col not in df:
            df[col] = ""
    for _, c in df.iterrows():
        try:
            scope.claim_classes(c["hardware"])
        except ValueError as exc:
            raise DataError(f"{name}: claim {c['claim_id']}: column hardware: {exc}") from None
        setting_of(c)
    df.insert(0, "study", study)
    return df


def _by_experiment(results: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in results:
        out.setdefault(r["experiment"], []).append(r)
    return out


def claims_table(results: list[dict], claims: pd.DataFrame, published: dict[str, Path] | None = None) -> pd.DataFrame:
    """Every claim against every system's results (see the module docstring for the verdicts): the rows of each claim
    come from the check of its experiment (:func:`claim_checks`). ``published``: each experiment's published
    reference file by experiment name (:func:`accelbench.core.registry.published_files`), e.g. Study B's SR3 times
    that the cross-system throughput order is checked against.

    Raises:
        DataError: a claim of an experiment with results that no aggregation module checks, or a row without a
            verdict or a reason.
    """
    inputs = ClaimInputs(_by_experiment(results), {k: Path(v) for k, v in (published or {}).items()})
    checks = claim_checks()
    rows = []
    for _, claim in claims.iterrows():
        check = checks.get(claim["experiment"])
        if check is not None:
            rows += check(claim, inputs)
        elif not inputs.of(claim["experiment"]):
            rows.append(not_run(claim, claim["experiment"]))
        else:
            raise DataError(f"claim {claim['claim_id']}: unknown experiment {claim['experiment']!r}")
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["verdict"].map(category)  # every verdict has a category (raises otherwise)
    if not (df["why"].astype(str).str.len() > 0).all():
        raise DataError("claims table: a row without a reason (a bug in accelbench.aggregate.claims)")
    return df
