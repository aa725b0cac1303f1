"""Validation of result files against the JSON schemas of this package, before any table is built.

Schemas (``accelbench/schemas/``, JSON Schema draft 2020-12): ``result.json`` holds what every result needs
(envelope, provenance: hardware, software versions, git commit, host, UTC time, the system; ``oom``/``unsupported``
results with a non-empty reason) and ``<experiment>.json`` what an ``ok`` result of that experiment must measure:
timings with their unit and repeated samples (median, p10/p90), values with units. Schemas are strict about what
must be there and permissive about extra fields (results gain fields over time). On top of the schemas every number
in the file must be finite (``NaN``/``Infinity`` are refused: writers store ``null`` for "no value").

:func:`validate_files` checks many files and raises one :class:`~accelbench.errors.ResultError` naming every
offending file with the field that is wrong; :func:`problems` gives the list for one file.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from .errors import ResultError
from .backends import BACKENDS
from .registry import names
from .results import SCHEMA_VERSION, read_json, redo_journal

EXPERIMENTS = names()  # the study experiments of the registry (net_smoke, a diagnostic, has no schema)
BASE = "result.json"


@lru_cache(maxsize=None)
def _schemas() -> dict[str, dict]:
    folder = resources.files("accelbench") / "schemas"
    schemas = {p.name: json.loads(p.read_text()) for p in folder.iterdir() if p.name.endswith(".json")}
    base = schemas[BASE]
    base["properties"]["experiment"]["enum"] = list(names())  # the registry lists them, nothing else
    for where in (base["$defs"]["system"], base["$defs"]["environment"]["properties"]["hardware"]):
        where["properties"]["backend"]["enum"] = list(BACKENDS)  # so does the backends' table
    return schemas


@lru_cache(maxsize=None)
def validator(experiment: str | None) -> Draft202012Validator:
    """The validator of one experiment's results (``None``: the common part only)."""
    schemas = _schemas()
    registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas.values())
    schema = schemas[f"{experiment}.json"] if experiment else schemas[BASE]
    return Draft202012Validator(schema, registry=registry)


def _where(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _message(e) -> str:
    """One readable line per schema error (alternatives named, long values cut)."""
    if e.validator in ("anyOf", "oneOf") and all(isinstance(x, dict) and "required" in x for x in e.validator_value):
        return "needs one of: " + " | ".join(", ".join(x["required"]) for x in e.validator_value)
    return e.message if len(e.message) <= 240 else e.message[:237] + "..."


def _non_finite(obj, where=()) -> list[str]:
    if isinstance(obj, float) and not math.isfinite(obj):
        return [f"{_where(where)}: {obj} is not a finite number (store null for 'no value')"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _non_finite(v, (*where, k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _non_finite(v, (*where, i))]
    return []


# Quantities that cannot be negative, by key name: durations, counts, sizes, rates, and a timing's statistics.
NON_NEGATIVE = re.compile(r"((^|_)(ms|s|us|ns|seconds|minutes|hours|gib|mib|bytes|count|per_s)"
                          r"|^(median|p10|p90|samples))$")


def _negative(obj, where=(), named=False) -> list[str]:
    if named and isinstance(obj, (int, float)) and not isinstance(obj, bool) and obj < 0:
        return [f"{_where(where)}: {obj} is negative (a duration, count or size cannot be)"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _negative(v, (*where, k), bool(NON_NEGATIVE.search(str(k))))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _negative(v, (*where, i), named)]
    return []


def problems_of(data) -> list[str]:
    """Every problem of one parsed result, as ``field: message`` lines (empty when valid)."""
    if not isinstance(data, dict):
        return ["(top level): not a JSON object"]
    try:
        return _problems_of(data)
    except RecursionError:
        return ["(top level): nested too deeply to be a result"]


def _problems_of(data: dict) -> list[str]:
    out = [f"{_where(e.absolute_path)}: {_message(e)}"
           for e in sorted(validator(None).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))]
    exp = data.get("experiment")
    if exp in EXPERIMENTS and not out:
        out += [f"{_where(e.absolute_path)}: {_message(e)}"
                for e in sorted(validator(exp).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))]
    return out + _non_finite(data) + _negative(data.get("measurements"), ("measurements",))


def problems(path: str | Path) -> list[str]:
    """Problems of one result file (unreadable, not a plain file, too big or not JSON counts as one problem; so does
    the journal of a killed redo beside it, :func:`accelbench.results.redo_journal`)."""
    journal = redo_journal(path)
    if journal.exists():
        return [f"(folder): {journal.name} is there: a redo of this result was killed before it finished, so the "
                f"folder may mix old and new files; rerun its rule (which first puts the old files back)"]
    try:
        data = read_json(path)
    except ResultError as exc:
        return [f"(file): {exc.why}"]
    return problems_of(data)


def validate_files(paths: list[str | Path]) -> list[dict]:
    """Validate every file; return one summary per file (path, experiment, status, sha256).

    Raises:
        ResultError: one or more files are invalid; the message lists each file and its wrong fields.
    """
    bad, summary = {}, []
    for p in paths:
        found = problems(p)
        if found:
            bad[str(p)] = found
            continue
        data = read_json(p)
        summary.append({"path": str(p), "experiment": data["experiment"], "status": data["status"],
                        "system": data["config"]["system"]["name"],
                        "sha256": hashlib.sha256(Path(p).read_bytes()).hexdigest()})
    if bad:
        lines = [f"{len(bad)} of {len(paths)} result file(s) do not match the result schema "
                 f"(accelbench/schemas, schema_version {SCHEMA_VERSION}); fix or move each away and rerun its rule:"]
        for p, found in bad.items():
            lines += [f"  {p}: {f}" for f in found[:8]] + ([f"  {p}: ... {len(found) - 8} more"] if len(found) > 8 else [])
        raise ResultError("\n".join(lines))
    return summary
