"""One committed reference-run folder: its ``run.yaml``, its series label, and which run a result file belongs to.

The part of :mod:`accelbench.aggregate.reference_runs` that the aggregations need
(:func:`accelbench.aggregate.common.load_results` labels a reference run's results as their own series). It imports
nothing of the aggregation, so that :mod:`accelbench.aggregate.reference_runs` can regenerate a run's tables with the
aggregation modules without an import circle.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from accelbench.core.config import read_yaml
from accelbench.errors import DataError

ROOT_NAME = "reference_runs"
META = "run.yaml"
REQUIRED = ("date", "hardware", "short", "commit", "commands")


def load_run(folder: str | Path) -> dict:
    """``run.yaml`` of one reference-run folder plus ``name``, ``path``, ``label`` and its result files.

    Raises:
        DataError: run.yaml missing, not a mapping, or lacking a required key (named).
        ConfigError: run.yaml not a plain file of bounded size, not YAML, a key given twice, an alias bomb
            (:func:`accelbench.core.config.read_yaml`).
        CampaignError: its optional ``parts`` (a campaign, :mod:`accelbench.core.campaign`) is invalid.
    """
    folder = Path(folder)
    meta_path = folder / META
    if not meta_path.exists() and not meta_path.is_symlink():
        raise DataError(f"reference run {folder} has no {META}")
    meta = read_yaml(meta_path)  # as configs are read: bounded, no key given twice, no alias bomb (one line)
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: expected a mapping with keys {', '.join(REQUIRED)}")
    missing = [k for k in REQUIRED if not meta.get(k)]
    if missing:
        raise DataError(f"{meta_path}: missing {', '.join(missing)}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(meta["date"])):
        raise DataError(f"{meta_path}: date {meta['date']!r} is not YYYY-MM-DD")
    if "parts" in meta:  # the run's commands as data: `accelbench campaign --file <run>/run.yaml --part NAME`
        from accelbench.core.campaign import check

        check({"parts": meta["parts"]}, str(meta_path))
    meta = {**meta, "date": str(meta["date"]), "commands": [str(c) for c in meta["commands"]]}
    from accelbench.core.tree import find_files

    results = find_files(folder / "results", ("**", "result.json"))  # no link followed (one line naming one)
    return {
        **meta,
        "name": folder.name,
        "path": folder,
        "label": series_label(meta),
        "results": [p.relative_to(folder).as_posix() for p in results],
    }


def series_label(meta: dict) -> str:
    """``reference run (H200, 2026-12-01)``: how the aggregations name this run's series."""
    return f"reference run ({meta['short']}, {meta['date']})"


@lru_cache(maxsize=256)
def _run_of_folder(folder: str) -> dict | None:
    f = Path(folder)
    return load_run(f) if (f / META).exists() else None


def run_for(result_path: str | Path) -> dict | None:
    """The reference run a result file belongs to (a ``reference_runs/<name>/`` folder above it), or None."""
    p = Path(result_path).resolve()
    for parent in p.parents:
        if parent.parent.name == ROOT_NAME:
            return _run_of_folder(str(parent))
    return None
