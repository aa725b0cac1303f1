"""Result files: one JSON object per run holding ``config``, ``environment``, ``measurements``, ``status``.

Layout: ``results/<system>/<experiment>/<variant...>/result.json``, so results from several
machines merge by copying folders. Files are written atomically (temporary file + rename): an
interrupted job leaves no half-written result. An existing result is never replaced silently:
:func:`write_result` refuses unless ``overwrite=True``.

``status`` is one of :data:`STATUSES`: ``ok``; ``oom`` (out of device memory: the result says how
much was requested); ``unsupported`` (the system cannot run this case: the result says why).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import ResultError

SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "unsupported")
REQUIRED_KEYS = ("schema_version", "experiment", "status", "config", "environment", "measurements")


def _jsonable(obj: Any) -> Any:
    """Replace NaN/inf by None and numpy scalars by Python numbers, recursively."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def make_result(experiment: str, status: str, config: dict, environment: dict, measurements: dict,
                reason: str | None = None, artefacts: dict | None = None) -> dict:
    """Assemble a result object. ``reason`` is required when ``status`` is not ``ok``."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
    if status != "ok" and not reason:
        raise ValueError(f"a result with status {status!r} needs a reason")
    return {"schema_version": SCHEMA_VERSION, "experiment": experiment, "status": status, "reason": reason,
            "config": config, "environment": environment, "measurements": measurements,
            "artefacts": artefacts or {}}


def write_json_atomic(obj: Any, path: str | Path) -> None:
    """Write ``obj`` as indented JSON to ``path`` through a temporary file in the same folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(_jsonable(obj), fh, indent=1, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_result(result: dict, path: str | Path, overwrite: bool = False) -> Path:
    """Write a result atomically.

    Raises:
        ResultError: ``path`` exists and ``overwrite`` is False (finished results are kept).
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise ResultError(f"refusing to overwrite the finished result {path}; move it away (or delete it) to rerun")
    write_json_atomic(result, path)
    return path


def read_result(path: str | Path) -> dict:
    """Read and check a result file.

    Raises:
        ResultError: missing, not JSON, or lacking required keys / a valid status; names the file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultError(f"result file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultError(f"corrupt result file {path}: not valid JSON ({exc}); delete it and rerun its rule") from None
    if not isinstance(data, dict):
        raise ResultError(f"corrupt result file {path}: expected a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ResultError(f"corrupt result file {path}: missing keys {missing}; delete it and rerun its rule")
    if data["status"] not in STATUSES:
        raise ResultError(f"corrupt result file {path}: status {data['status']!r} not in {STATUSES}")
    return data
