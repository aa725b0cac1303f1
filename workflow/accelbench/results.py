"""Result files: one JSON object per run holding ``config``, ``environment``, ``measurements``, ``status``.

Layout: ``results/<system>/<experiment>/<variant...>/result.json``, so results from several
machines merge by copying folders. Files are written atomically (temporary file + rename): an
interrupted job leaves no half-written result. An existing result is never replaced silently:
:func:`write_result` refuses unless ``overwrite=True``. A job that redoes a result runs inside
:func:`superseding`: the old result and its side files are moved to
``results/<system>/.superseded/<UTC time>/<experiment>/...`` first (never deleted, for any user,
root included), and put back if the job fails.

``status`` is one of :data:`STATUSES`: ``ok``; ``oom`` (out of device memory: the result says how
much was requested); ``unsupported`` (the system cannot run this case: the result says why).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from .errors import ResultError

SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "unsupported")
REQUIRED_KEYS = ("schema_version", "experiment", "status", "config", "environment", "measurements")
SUPERSEDED = ".superseded"  # results/<system>/.superseded/<UTC time>/<experiment>/...: dot folder, aggregations skip it
log = logging.getLogger(__name__)


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
                reason: str | None = None, artefacts: dict | None = None, spec_sha256: str | None = None) -> dict:
    """Assemble a result object. ``reason`` is required when ``status`` is not ``ok``; ``spec_sha256`` (the sha256
    of the job's spec file, :func:`accelbench.harness.load_spec`) is recorded for the DAG's stale-settings check."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
    if status != "ok" and not reason:
        raise ValueError(f"a result with status {status!r} needs a reason")
    result = {"schema_version": SCHEMA_VERSION, "experiment": experiment, "status": status, "reason": reason,
              "config": config, "environment": environment, "measurements": measurements,
              "artefacts": artefacts or {}}
    if spec_sha256:
        result["spec_sha256"] = spec_sha256  # the settings file it was made from (stale-settings check of the DAG)
    return result


def write_json_atomic(obj: Any, path: str | Path) -> None:
    """Write ``obj`` as indented JSON to ``path`` through a temporary file in the same folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(_jsonable(obj), fh, indent=1, allow_nan=False)
            fh.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> group/others read like every other output (umask 022)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_path(path: str | Path, required: bool = True) -> Iterator[Path]:
    """A temporary name beside ``path`` (``.partial.<name>``, same suffixes) to write a side file to; renamed to
    ``path`` when the body succeeds, removed when it raises: a reader never sees a truncated side file. With
    ``required=False`` a body that did not write the file leaves nothing (no error)."""
    path = Path(path)
    tmp = path.with_name(f".partial.{path.name}")
    try:
        yield tmp
        if required or tmp.exists():
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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


def superseded_folder(out: str | Path, system: str, experiment: str, stamp: str | None = None) -> Path:
    """Where the folder of result ``out`` (``.../<system>/<experiment>/<variant...>/result.json``) is moved when a
    job redoes it: ``.../<system>/.superseded/<stamp>/<experiment>/<variant...>`` (``stamp``: UTC ``%Y%m%dT%H%M%SZ``).

    Raises:
        ResultError: ``out`` does not lie under ``<system>/<experiment>/``.
    """
    folder = Path(out).parent
    parts = folder.parts
    for i in range(len(parts) - 1):
        if parts[i] == system and parts[i + 1] == experiment:
            stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            return Path(*parts[:i + 1], SUPERSEDED, stamp, *parts[i + 1:])
    raise ResultError(f"result path {out} does not lie under <system>/<experiment>/ ({system}/{experiment})")


@contextlib.contextmanager
def superseding(out: str | Path, system: str, experiment: str) -> Iterator[Path | None]:
    """Run a job that (re)writes result ``out`` without ever deleting a finished result, for any user.

    Before the job: everything in the result's folder (``result.json`` and its side files: ``kernels.csv``,
    ``trace.json.gz``, ``samples.npz``, ...) is moved to :func:`superseded_folder`. If the job raises (or is
    interrupted), the files it wrote there are removed (no stale or truncated side file survives) and the moved
    files are put back. On success the old files stay under ``.superseded/`` (findable; aggregations skip dot
    folders). Yields the folder the old files went to (``None``: nothing was there).
    """
    folder = Path(out).parent
    old = sorted(folder.iterdir()) if folder.is_dir() else []
    moved = None
    if old:
        moved = superseded_folder(out, system, experiment)
        while moved.exists():  # two supersessions of one result within a second
            moved = moved.with_name(moved.name + "_")
        moved.mkdir(parents=True)
        for p in old:
            os.replace(p, moved / p.name)
        log.warning("moved the previous files of %s to %s (superseded, not deleted)", out, moved)
    try:
        yield moved
    except BaseException:
        if folder.is_dir():
            for p in folder.iterdir():
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if moved is not None:
            for p in sorted(moved.iterdir()):
                os.replace(p, folder / p.name)
            moved.rmdir()
            with contextlib.suppress(OSError):  # the empty <stamp>/<experiment>/... parents
                for parent in moved.parents:
                    if parent.name == SUPERSEDED:
                        break
                    parent.rmdir()
            log.warning("the job failed: put the previous files of %s back in place", out)
        raise
