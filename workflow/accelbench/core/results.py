"""Result files: one JSON object per run holding ``config``, ``environment``, ``measurements``, ``status``.

Layout: ``results/<system>/<experiment>/<variant...>/result.json``, so results from several
machines merge by copying folders. Files are written atomically (temporary file + rename): an
interrupted job leaves no half-written result. An existing result is never replaced silently:
:func:`write_result` refuses unless ``overwrite=True``. A job that redoes a result runs inside
:func:`superseding`: the old result and its side files are moved to
``results/<system>/.superseded/<UTC time>/<experiment>/...`` first (never deleted, for any user,
root included), and put back if the job fails; a job killed outright (SIGKILL) leaves the journal
:data:`REDO` that makes the folder not current until its rerun puts the old files back (:func:`recover`).

The redo itself (:func:`superseding`, :func:`recover`, the journal :data:`REDO`, :func:`superseded_folder`,
:func:`tree_root`) is :mod:`accelbench.core.redo`; its names are offered here too.

``status`` is one of :data:`STATUSES`: ``ok``; ``oom`` (out of device memory: the result says how
much was requested); ``unsupported`` (the system cannot run this case: the result says why).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accelbench.core import files, tree
from accelbench.core.redo import (  # noqa: F401 (offered here, as they always were)
    FOLDER_DIGEST,
    JOURNAL_VERSION,
    MAX_JOURNAL_BYTES,
    REDO,
    SUPERSEDED,
    recover,
    redo_journal,
    superseded_folder,
    superseding,
    tree_root,
)
from accelbench.errors import ResultError

SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "unsupported")
REQUIRED_KEYS = ("schema_version", "experiment", "status", "config", "environment", "measurements")
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


def make_result(
    experiment: str,
    status: str,
    config: dict,
    environment: dict,
    measurements: dict,
    reason: str | None = None,
    artefacts: dict | None = None,
    spec_sha256: str | None = None,
) -> dict:
    """Assemble a result object. ``reason`` is required when ``status`` is not ``ok``; ``spec_sha256`` (the sha256
    of the job's spec file, :func:`accelbench.core.harness.load_spec`) is recorded for the DAG's stale-settings
    check."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
    if status != "ok" and not reason:
        raise ValueError(f"a result with status {status!r} needs a reason")
    result = {
        "schema_version": SCHEMA_VERSION,
        "experiment": experiment,
        "status": status,
        "reason": reason,
        "config": config,
        "environment": environment,
        "measurements": measurements,
        "artefacts": artefacts or {},
    }
    if spec_sha256:
        result["spec_sha256"] = spec_sha256  # the settings file it was made from (stale-settings check of the DAG)
    return result


def write_json_atomic(obj: Any, path: str | Path, root: str | Path | None = None) -> None:
    """Write ``obj`` as indented JSON to ``path`` through a temporary file in the same folder, the folder opened below
    ``root`` (default: the file's own folder) without following a link (:mod:`accelbench.core.tree`).

    Raises:
        TreeError: a link or hard-linked file on the way below ``root``; nothing written.
    """
    path = Path(path)
    text = json.dumps(_jsonable(obj), indent=1, allow_nan=False) + "\n"
    tree.write_text(path.parent if root is None else root, path, text)


@contextlib.contextmanager
def atomic_path(path: str | Path, required: bool = True, root: str | Path | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` (``.partial.<pid>.<random>.<name>``, same suffixes) to write a side file to,
    reaching the folder through a descriptor held open from ``root`` (default: the file's own folder) without
    following a link (:meth:`accelbench.core.tree.Folder.proc_path`: a folder swapped for a link meanwhile is never
    written through); renamed to ``path`` in that folder when the body succeeds, removed when it raises: a reader
    never sees a truncated side file. With ``required=False`` a body that did not write the file leaves nothing (no
    error)."""
    path = Path(path)
    d, name = tree.file_folder(path.parent if root is None else root, path, create=True)
    with d:
        tmp = d.temp_name(name)
        try:
            yield d.proc_path(tmp)
            if required or d.exists(tmp):
                d.move(tmp, d, name)
        finally:
            with contextlib.suppress(OSError):
                d.remove(tmp)


def write_result(result: dict, path: str | Path, overwrite: bool = False, root: str | Path | None = None) -> Path:
    """Write a result atomically (:func:`write_json_atomic`; ``root``: the results tree, see :func:`tree_root`).

    Raises:
        ResultError: ``path`` exists and ``overwrite`` is False (finished results are kept).
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise ResultError(f"refusing to overwrite the finished result {path}; move it away (or delete it) to rerun")
    write_json_atomic(result, path, root)
    return path


MAX_RESULT_BYTES = 256 * 2**20  # a result with its kernel tables is a few MB; a bigger "result" is not one


def _unreadable(path: Path, why: str) -> ResultError:
    err = ResultError(f"corrupt result file {path}: {why}")
    err.why = why  # without the path (validate names the file once)
    return err


def read_json(path: str | Path) -> Any:
    """The JSON value of result file ``path``, read safely: a plain file (never a FIFO, which would block, nor a
    device such as ``/dev/zero``, which never ends; never a link: a results tree copied in from elsewhere may link a
    "result" to any file of the reader's, and below ``results_dir`` no link is followed), at most
    :data:`MAX_RESULT_BYTES` and :data:`accelbench.core.files.MAX_JSON_NODES` values (counted before parsing), nested
    no deeper than Python's parser allows.

    Raises:
        ResultError: missing, a link, not a plain file, too big (bytes or values), not UTF-8 JSON, or nested too
            deeply; names the file (``.why``: the same without the file).
    """
    path = Path(path)
    try:
        data = files.read_bytes(path, "corrupt result file", MAX_RESULT_BYTES, ResultError, follow=False)
        files.check_nodes(data, path, "corrupt result file", ResultError)  # memory, not only bytes: [[],[],...]
        return json.loads(data.decode())
    except ResultError as exc:
        if exc.missing:
            exc.args = (f"result file not found: {path}",)
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _unreadable(path, f"not valid JSON ({exc}); delete it and rerun its rule") from None
    except RecursionError:
        raise _unreadable(path, "nested too deeply to be a result; move it away") from None


def read_result(path: str | Path) -> dict:
    """Read and check a result file (:func:`read_json`).

    Raises:
        ResultError: missing, not a plain JSON file, or lacking required keys / a valid status; names the file.
    """
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise ResultError(f"corrupt result file {path}: expected a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ResultError(f"corrupt result file {path}: missing keys {missing}; delete it and rerun its rule")
    if data["status"] not in STATUSES:
        raise ResultError(f"corrupt result file {path}: status {data['status']!r} not in {STATUSES}")
    return data


NOT_CURRENT_MTIME = 1  # 1970-01-01T00:00:01Z: the time of a result marked not current (mark_current)


def mark_current(path: str | Path, current: bool, root: str | Path | None = None) -> None:
    """Mark result ``path`` as not current (``current=False``: its modification time set to
    :data:`NOT_CURRENT_MTIME`, older than any input, so Snakemake reruns its job whatever settings it recorded for
    it), or undo that mark (``current=True`` on a marked file: time set to now). The DAG calls it for every finished
    result of this system (common.smk ``stale_results``; never in a dry run); the contents are never touched. The
    file is reached from ``root`` (the results tree; default its own folder) without following a link and must be a
    plain file with no other hard link (:meth:`accelbench.core.tree.Folder.utime`): anything else, or a file this
    user may not re-time, is left as it is (one line logged)."""
    path = Path(path)
    try:
        d, name = tree.file_folder(path.parent if root is None else root, path)
        with d:
            st = d.lstat(name)
            if st is None:
                return
            if not current and st.st_mtime != NOT_CURRENT_MTIME:
                d.utime(name, (st.st_atime, NOT_CURRENT_MTIME))
            elif current and st.st_mtime == NOT_CURRENT_MTIME:
                d.utime(name)
    except (OSError, tree.TreeError) as exc:
        log.warning("%s: could not mark it %scurrent (%s)", path, "" if current else "not ", exc)
