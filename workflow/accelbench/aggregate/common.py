"""Shared aggregation helpers: reading results, status cells, writing tables in three formats."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..provenance import hardware_label, software_label
from ..results import read_result

STATUS_LABEL = {"oom": "OOM", "unsupported": "unsupported"}


def load_results(paths: list[str | Path]) -> list[dict]:
    """Read every result (see :func:`accelbench.results.read_result`), adding ``_path``,
    ``_hardware`` and ``_software`` labels derived from the provenance, and ``_series``: ``measured``, or for a
    result of a committed reference run (:mod:`accelbench.reference_runs`) its label, which then also leads
    ``_hardware`` so every aggregation draws it as its own series.

    Raises:
        ResultError: a missing or corrupt file (named in the message).
    """
    from ..reference_runs import run_for

    out = []
    for p in paths:
        r = read_result(p)
        r["_path"] = str(p)
        r["_hardware"] = hardware_label(r["environment"])
        r["_software"] = software_label(r["environment"])
        run = run_for(p)  # a committed reference run: its own labelled series, e.g. "reference run (H200, 2026-12-01)"
        r["_series"] = run["label"] if run else "measured"
        if run:
            r["_hardware"] = f"{run['label']}: {r['_hardware']}"
        out.append(r)
    return out


def joined_labels(df: pd.DataFrame, column: str = "hardware", empty: str = "none") -> str:
    """The distinct provenance labels of ``column`` (e.g. every hardware measured), for captions and titles."""
    return "; ".join(sorted(set(df[column]))) if not df.empty else empty


def status_cell(result: dict) -> str | None:
    """``OOM`` / ``unsupported`` for results that did not run, None for ``ok``."""
    return STATUS_LABEL.get(result["status"])


def write_table(df: pd.DataFrame, stem: str | Path, caption: str, float_format: str = "{:.3g}") -> list[Path]:
    """Write ``df`` as ``<stem>.csv`` (full precision), ``<stem>.md`` and ``<stem>.tex`` (rounded).

    Returns the written paths.
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".csv"), stem.with_suffix(".md"), stem.with_suffix(".tex")]
    df.to_csv(paths[0], index=False)
    shown = df.map(lambda v: float_format.format(v) if isinstance(v, float) and pd.notna(v) else ("" if v is None or (isinstance(v, float) and pd.isna(v)) else v))
    paths[1].write_text(f"{caption}\n\n" + shown.to_markdown(index=False) + "\n")
    latex = shown.to_latex(index=False, caption=caption, escape=True, longtable=False)
    paths[2].write_text(latex)
    return paths
