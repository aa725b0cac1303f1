"""Validation of result files against the JSON schemas of this package, before any table is built.

Schemas (``accelbench/schemas/result.json`` and each experiment folder's ``<name>.schema.json``, JSON Schema draft
2020-12): ``result.json`` holds what every result needs (envelope, provenance: hardware, software versions, git
commit, host, UTC time, the system; ``oom``/``unsupported`` results with a non-empty reason) and
``<name>.schema.json`` what an ``ok`` result of that experiment must measure:
timings with their unit and repeated samples (median, p10/p90), values with units, and each number's range (a
timing's samples, median and percentiles above 0: a 0 ms step was not timed; rates, wall times and MFU above 0;
memory peaks not negative). A field the schema requires that an older result lacks is reported as that (the result
of an older accelbench, named with its file), so no table crashes on it. Schemas are strict about what
must be there and permissive about extra fields (results gain fields over time). On top of the schemas every number
in the file must be finite (``NaN``/``Infinity`` are refused: writers store ``null`` for "no value"), and physically
possible (:func:`bound_problems`): no MFU above 1, no board's average power above the power limit its provenance
records. Results made before those two rules (:data:`BOUNDS_SINCE`, e.g. the committed reference runs) are not
refused for them: the problems come back as warnings (:func:`warnings_of`, logged and listed in the summary), and the
tables flag the numbers (the quantization table recomputes or hides the MFU, the energy table flags the power).

:func:`validate_files` checks many files and raises one :class:`~accelbench.errors.ResultError` naming every
offending file with the field that is wrong; :func:`problems` gives the list for one file.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import re
from functools import cache
from importlib import resources
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from accelbench.backends import BACKENDS
from accelbench.core import files, registry
from accelbench.core.registry import names
from accelbench.core.results import SCHEMA_VERSION, read_json, redo_journal
from accelbench.errors import ResultError

log = logging.getLogger(__name__)
EXPERIMENTS = names()  # the study experiments of the registry (net_smoke, a diagnostic, has no schema)
BASE = "result.json"


@cache
def _schemas() -> dict[str, dict]:
    """``{"result.json": the common part, "<experiment>.json": each experiment's schema}``: the common part from
    ``accelbench/schemas/``, each experiment's from its folder (the registry's ``schema``)."""
    folder = resources.files("accelbench") / "schemas"
    schemas = {BASE: json.loads((folder / BASE).read_text())}
    for e in registry.EXPERIMENTS.values():
        if e.schema:
            schemas[f"{e.name}.json"] = json.loads(e.schema_path().read_text())
    base = schemas[BASE]
    base["properties"]["experiment"]["enum"] = list(names())  # the registry lists them, nothing else
    for where in (base["$defs"]["system"], base["$defs"]["environment"]["properties"]["hardware"]):
        where["properties"]["backend"]["enum"] = list(BACKENDS)  # so does the backends' table
    return schemas


@cache
def validator(experiment: str | None) -> Draft202012Validator:
    """The validator of one experiment's results (``None``: the common part only)."""
    schemas = _schemas()
    registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas.values())
    schema = schemas[f"{experiment}.json"] if experiment else schemas[BASE]
    return Draft202012Validator(schema, registry=registry)


def _where(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _message(e) -> str:
    """One readable line per schema error (alternatives named, long values cut; a measured field the schema requires
    but the result lacks is called what it is: a result of an older version, which the tables cannot read)."""
    if e.validator in ("anyOf", "oneOf") and all(isinstance(x, dict) and "required" in x for x in e.validator_value):
        return "needs one of: " + " | ".join(", ".join(x["required"]) for x in e.validator_value)
    if e.validator == "required" and list(e.absolute_path)[:1] == ["measurements"]:
        return (
            f"{e.message}: a result of an older accelbench (made before this field was recorded); the tables "
            f"cannot read it: rerun its rule, or move it out of the results"
        )
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
NON_NEGATIVE = re.compile(
    r"((^|_)(ms|s|us|ns|seconds|minutes|hours|gib|mib|bytes|count|per_s|mfu|max|per_device"
    r"|tokens|minutes_per_million_tokens|iterations)"
    r"|^(median|p10|p90|samples|mfu|iterations_per_device))$"
)


def _negative(obj, where=(), named=False) -> list[str]:
    if named and isinstance(obj, (int, float)) and not isinstance(obj, bool) and obj < 0:
        return [f"{_where(where)}: {obj} is negative (a duration, count or size cannot be)"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _negative(v, (*where, k), bool(NON_NEGATIVE.search(str(k))))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _negative(v, (*where, i), named)]
    return []


# The physical bounds apply to results made from this UTC time on; older ones get them as warnings.
BOUNDS_SINCE = "2026-12-02T00:00:00+00:00"
BOARD_SOURCES = ("nvml", "hlml")  # energy counters of the accelerator board, which the board's power limit bounds
# a board's power reading is accurate to about +-5% (nvidia-smi: "accurate to within +/- 5%" of the draw) and the cap
# acts over tens of ms: a new result is refused only above limit x (1 + this); the tables flag anything above the limit
POWER_METER_TOLERANCE = 0.05
MFU_KEY = re.compile(r"(^|_)mfu($|_)")


def _mfu_over_one(obj, where=()) -> list[str]:
    if isinstance(obj, dict):
        out = []
        for k, v in obj.items():
            if (
                MFU_KEY.search(str(k))
                and isinstance(v, (int, float))
                and not isinstance(v, bool)
                and math.isfinite(v)
                and v > 1
            ):
                out.append(
                    f"{_where((*where, k))}: MFU {v:.3g} is above 1 (achieved FLOP/s above the peak: the FLOP "
                    f"count or the peak it is paired with is wrong)"
                )
            else:
                out += _mfu_over_one(v, (*where, k))
        return out
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _mfu_over_one(v, (*where, i))]
    return []


def power_limit_w(data: dict) -> float | None:
    """The board's power limit (W per device) recorded in a result's provenance
    (``environment.hardware.power_limit_w``, :meth:`accelbench.backends.cuda.CudaOps.provenance`), None if absent."""
    v = ((data.get("environment") or {}).get("hardware") or {}).get("power_limit_w")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def power_over_limit(energy: dict | None, limit_w: float, within_staleness: bool = False) -> list[dict]:
    """The metered phases of ``measurements.energy`` whose average power per device (median over windows, W, divided
    by the devices counted) is above ``limit_w`` (W per device) by more than the meter's accuracy
    (:data:`POWER_METER_TOLERANCE`): ``[{"phase", "power_w" (per device), "windows"}]``.
    Board counters only (:data:`BOARD_SOURCES`: a host's RAPL package is not bounded by the board's limit).

    ``within_staleness``: also allow the phase's own recorded error bound, its ``staleness_bound`` (update period /
    median window: a counter read up to one update late overstates a window's power by up to that fraction), so only
    a power that no reading of the counter can explain is returned. A 5-step phase of 25 ms steps metered in one
    0.13 s window of a counter updated every 0.1 s (staleness bound 0.77) can read 996 W on a 700 W board; its phase
    is recorded ``reliable: false`` and the tables flag it (``within_staleness=False``), but it is not a defect."""
    if not isinstance(energy, dict) or energy.get("status") != "ok":
        return []
    out = []
    for phase, e in (energy.get("phases") or {}).items():
        if not isinstance(e, dict) or e.get("status") != "ok" or e.get("source") not in BOARD_SOURCES:
            continue
        w = (e.get("power_w") or {}).get("median")
        if not isinstance(w, (int, float)):
            continue
        per_device = float(w) / max(1, int(e.get("devices_counted") or 1))
        stale = e.get("staleness_bound") if within_staleness else None
        margin = (
            1 + float(stale) if isinstance(stale, (int, float)) and not isinstance(stale, bool) and stale > 0 else 1
        )
        if per_device > limit_w * (1 + POWER_METER_TOLERANCE) * margin:
            out.append({"phase": phase, "power_w": per_device, "windows": e.get("windows_used")})
    return out


def bound_problems(data: dict) -> list[str]:
    """Physically impossible values of one result: an MFU (any ``mfu``/``mfu_*`` key of ``measurements``) above 1,
    and a metered phase whose average power per device is above the board's power limit recorded in the provenance
    (:func:`power_limit_w`; without one the power is not checked) beyond what the phase's own staleness bound allows
    (:func:`power_over_limit` ``within_staleness``)."""
    out = _mfu_over_one(data.get("measurements"), ("measurements",))
    limit = power_limit_w(data)
    if limit is not None:
        energy = (data.get("measurements") or {}).get("energy")
        out += [
            f"measurements.energy.phases.{p['phase']}.power_w: {p['power_w']:.1f} W per device (median over "
            f"{p['windows']} window(s)) is above the board's power limit {limit:g} W "
            f"(environment.hardware.power_limit_w): the energy counter or the window timing is wrong"
            for p in power_over_limit(energy, limit, within_staleness=True)
        ]
    return out


def made_before_bounds(data: dict) -> bool:
    """True for a result made before :data:`BOUNDS_SINCE` (``environment.timestamp_utc``), whose impossible values
    are warnings, not errors; False where the time is missing or unreadable (checked as new)."""
    ts = (data.get("environment") or {}).get("timestamp_utc")
    try:
        made = _dt.datetime.fromisoformat(str(ts))
    except ValueError:
        return False
    if made.tzinfo is None:
        made = made.replace(tzinfo=_dt.UTC)
    return made < _dt.datetime.fromisoformat(BOUNDS_SINCE)


def warnings_of(data) -> list[str]:
    """The physical-bound problems (:func:`bound_problems`) of a result made before the rules (:data:`BOUNDS_SINCE`):
    reported, not refused (its measured numbers stay as recorded; the tables flag them)."""
    if not isinstance(data, dict) or not made_before_bounds(data):
        return []
    try:
        return bound_problems(data)
    except RecursionError:
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
    out = [
        f"{_where(e.absolute_path)}: {_message(e)}"
        for e in sorted(validator(None).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    ]
    exp = data.get("experiment")
    if exp in EXPERIMENTS and not out:
        out += [
            f"{_where(e.absolute_path)}: {_message(e)}"
            for e in sorted(validator(exp).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
        ]
    out += _non_finite(data) + _negative(data.get("measurements"), ("measurements",))
    return out if made_before_bounds(data) else out + bound_problems(data)


def problems(path: str | Path) -> list[str]:
    """Problems of one result file (unreadable, not a plain file, too big or not JSON counts as one problem; so does
    the journal of a killed redo beside it, :func:`accelbench.core.results.redo_journal`)."""
    journal = redo_journal(path)
    if journal.exists():
        return [
            f"(folder): {journal.name} is there: a redo of this result was killed before it finished, so the "
            f"folder may mix old and new files; rerun its rule (which first puts the old files back)"
        ]
    try:
        data = read_json(path)
    except ResultError as exc:
        return [f"(file): {exc.why}"]
    return problems_of(data)


def validate_files(paths: list[str | Path]) -> list[dict]:
    """Validate every file; return one summary per file (path, experiment, status, sha256, and ``warnings``: the
    impossible values of a result made before the rules that refuse them, :func:`warnings_of`, also logged).

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
        summary.append(
            {
                "path": str(p),
                "experiment": data["experiment"],
                "status": data["status"],
                "system": data["config"]["system"]["name"],
                "sha256": files.sha256(p, "result file", error=ResultError, follow=False),
            }
        )
        warned = warnings_of(data)
        if warned:
            summary[-1]["warnings"] = warned
            for w in warned:
                log.warning("%s: %s (made before %s: reported, not refused; the tables flag it)", p, w, BOUNDS_SINCE)
    if bad:
        lines = [
            f"{len(bad)} of {len(paths)} result file(s) do not match the result schema "
            f"(accelbench/schemas, schema_version {SCHEMA_VERSION}); fix or move each away and rerun its rule:"
        ]
        for p, found in bad.items():
            lines += [f"  {p}: {f}" for f in found[:8]] + (
                [f"  {p}: ... {len(found) - 8} more"] if len(found) > 8 else []
            )
        raise ResultError("\n".join(lines))
    return summary
