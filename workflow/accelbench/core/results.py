"""Result files: one JSON object per run holding ``config``, ``environment``, ``measurements``, ``status``.

Layout: ``results/<system>/<experiment>/<variant...>/result.json``, so results from several
machines merge by copying folders. Files are written atomically (temporary file + rename): an
interrupted job leaves no half-written result. An existing result is never replaced silently:
:func:`write_result` refuses unless ``overwrite=True``. A job that redoes a result runs inside
:func:`superseding`: the old result and its side files are moved to
``results/<system>/.superseded/<UTC time>/<experiment>/...`` first (never deleted, for any user,
root included), and put back if the job fails; a job killed outright (SIGKILL) leaves the journal
:data:`REDO` that makes the folder not current until its rerun puts the old files back (:func:`recover`).

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accelbench.core import files
from accelbench.errors import ResultError

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


MAX_RESULT_BYTES = 256 * 2**20  # a result with its kernel tables is a few MB; a bigger "result" is not one


def _unreadable(path: Path, why: str) -> ResultError:
    err = ResultError(f"corrupt result file {path}: {why}")
    err.why = why  # without the path (validate names the file once)
    return err


def read_json(path: str | Path) -> Any:
    """The JSON value of result file ``path``, read safely: a plain file (never a FIFO, which would block, nor a
    device such as ``/dev/zero``, which never ends), at most :data:`MAX_RESULT_BYTES` and
    :data:`accelbench.core.files.MAX_JSON_NODES` values (counted before parsing), nested no deeper than Python's
    parser allows.

    Raises:
        ResultError: missing, not a plain file, too big (bytes or values), not UTF-8 JSON, or nested too deeply;
            names the file (``.why``: the same without the file).
    """
    path = Path(path)
    try:
        data = files.read_bytes(path, "corrupt result file", MAX_RESULT_BYTES, ResultError)
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
            return Path(*parts[: i + 1], SUPERSEDED, stamp, *parts[i + 1 :])
    raise ResultError(f"result path {out} does not lie under <system>/<experiment>/ ({system}/{experiment})")


NOT_CURRENT_MTIME = 1  # 1970-01-01T00:00:01Z: the time of a result marked not current (mark_current)


def mark_current(path: str | Path, current: bool) -> None:
    """Mark result ``path`` as not current (``current=False``: its modification time set to
    :data:`NOT_CURRENT_MTIME`, older than any input, so Snakemake reruns its job whatever settings it recorded for
    it), or undo that mark (``current=True`` on a marked file: time set to now). The DAG calls it for every finished
    result of this system (common.smk ``stale_results``); the contents are never touched. A file this user may not
    re-time is left as it is (logged)."""
    path = Path(path)
    try:
        st = path.stat()
        if not current and st.st_mtime != NOT_CURRENT_MTIME:
            os.utime(path, (st.st_atime, NOT_CURRENT_MTIME))
        elif current and st.st_mtime == NOT_CURRENT_MTIME:
            os.utime(path)
    except OSError as exc:
        log.warning("%s: could not mark it %scurrent (%s)", path, "" if current else "not ", exc)


REDO = ".redo.json"  # in a result folder while a job redoes it: where the old files went (removed when the job ends)


def redo_journal(out: str | Path) -> Path:
    """The journal of a redo of result ``out`` (:data:`REDO` beside it). While it exists the folder is not current:
    a redo was killed (SIGKILL, power loss) before it could put the old files back or finish; validation refuses the
    result, the DAG reruns it, and the rerun puts the old files back first (:func:`recover`)."""
    return Path(out).parent / REDO


MAX_JOURNAL_BYTES = 2**20  # a journal lists the names of one result folder: kilobytes


def _journal_record(out: Path, system: str, experiment: str) -> tuple[Path, list[str]]:
    """The superseded folder and the file names a redo journal of result ``out`` records, checked: the folder must
    be :func:`superseded_folder` of ``out`` (some stamp), inside ``<system>/.superseded/`` with every link followed,
    and exist; every name a plain name in the result's folder. A journal is only ever written by
    :func:`superseding`; one that says anything else was planted or damaged.

    Raises:
        ResultError: one line naming the journal and what is wrong with it; nothing was moved or deleted.
    """
    journal = redo_journal(out)

    def refuse(why: str) -> ResultError:
        return ResultError(
            f"{journal}: refused: {why}; nothing was moved or deleted (the old files of a killed redo are under "
            f"<results>/{system}/{SUPERSEDED}/<UTC time>/): put them back by hand, then delete {journal}"
        )

    try:
        record = json.loads(files.read_bytes(journal, "redo journal", MAX_JOURNAL_BYTES, ResultError))
    except ResultError as exc:
        raise refuse(f"unreadable journal ({exc.why})") from None
    except (ValueError, RecursionError) as exc:
        raise refuse(f"unreadable journal ({exc})") from None
    moved_to, names = (record.get("moved_to"), record.get("files")) if isinstance(record, dict) else (None, None)
    if not isinstance(moved_to, str) or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise refuse('not a journal of a redo ({"moved_to": folder, "files": [names]})')
    bad = [n for n in names if n in ("", ".", "..", REDO) or "/" in n or "\0" in n]
    if bad:
        raise refuse(f"files {bad[:3]} are not names of files in {journal.parent}")
    expected = superseded_folder(out, system, experiment, stamp="STAMP")
    root = Path(*expected.parts[: expected.parts.index(SUPERSEDED) + 1])  # <results>/<system>/.superseded
    moved = Path(os.path.normpath(journal.parent / moved_to))
    try:
        stamp, *rest = moved.relative_to(root).parts
    except ValueError:
        stamp, rest = "", []
    if os.path.isabs(moved_to) or not stamp or rest != list(expected.relative_to(root).parts[1:]):
        raise refuse(f"moved_to {moved_to!r} is not this result's folder under {root}")
    if moved.is_symlink() or not moved.is_dir():
        raise refuse(f"moved_to {moved_to!r}: {moved} is not a folder")
    real_root = os.path.realpath(Path(os.path.realpath(root.parent)) / SUPERSEDED)
    if os.path.realpath(moved) != os.path.join(real_root, stamp, *rest):
        raise refuse(f"moved_to {moved_to!r} leads out of {root} through a link")
    return moved, names


def recover(out: str | Path, system: str, experiment: str) -> bool:
    """Undo a killed redo of result ``out``: every file of the folder that was moved aside (listed in the journal)
    comes back, replacing what the killed job (or Snakemake's restore of its own backup of ``result.json``) left
    there; files the killed job wrote that were not there before are removed (partial). The journal is checked
    first (:func:`_journal_record`: only this result's folder and its own folder under ``.superseded/``): a planted
    one is refused with one line, touching nothing. Returns True when a journal was found. Call with the device lock
    held (the harness does)."""
    journal = redo_journal(out)
    if not journal.exists() and not journal.is_symlink():
        return False
    folder = journal.parent
    moved, names = _journal_record(Path(out), system, experiment)
    names = set(names)
    for p in folder.iterdir():
        if p.name == REDO or (p.name in names and not (moved / p.name).exists()):
            continue  # the journal; an old file that was never moved
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for name in sorted(names):
        if (moved / name).exists() or (moved / name).is_symlink():
            os.replace(moved / name, folder / name)
    _remove_empty(moved)
    journal.unlink()
    log.warning("%s: a redo was killed before it finished; put its previous files back from %s", out, moved)
    return True


def _remove_empty(moved: Path) -> None:
    with contextlib.suppress(OSError):  # moved and its empty <stamp>/<experiment>/... parents
        moved.rmdir()
        for parent in moved.parents:
            if parent.name == SUPERSEDED:
                break
            parent.rmdir()


@contextlib.contextmanager
def superseding(out: str | Path, system: str, experiment: str) -> Iterator[Path | None]:
    """Run a job that (re)writes result ``out`` without ever deleting a finished result, for any user.

    Before the job: a redo that was killed earlier is undone (:func:`recover`); then everything in the result's
    folder (``result.json`` and its side files: ``kernels.csv``, ``trace.json.gz``, ``samples.npz``, ...) is moved
    to :func:`superseded_folder`, after writing the journal :data:`REDO` that says where. If the job raises (or is
    interrupted), the files it wrote there are removed (no stale or truncated side file survives) and the moved
    files are put back. On success the old files stay under ``.superseded/`` (findable; aggregations skip dot
    folders). Either way the journal goes last; a job killed outright leaves it, and the folder then counts as not
    current until a rerun recovers it. Yields the folder the old files went to (``None``: nothing was there).
    """
    folder = Path(out).parent
    recover(out, system, experiment)
    old = sorted(folder.iterdir()) if folder.is_dir() else []
    moved = None
    journal = redo_journal(out)
    if old:
        moved = superseded_folder(out, system, experiment)
        while moved.exists():  # two supersessions of one result within a second
            moved = moved.with_name(moved.name + "_")
        moved.mkdir(parents=True)
        write_json_atomic(
            {
                "moved_to": os.path.relpath(moved, folder),
                "files": [p.name for p in old],
                "pid": os.getpid(),
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            journal,
        )
        for p in old:
            os.replace(p, moved / p.name)
        log.warning("moved the previous files of %s to %s (superseded, not deleted)", out, moved)
    try:
        yield moved
    except BaseException:
        if folder.is_dir():
            for p in folder.iterdir():
                if p.name != REDO:
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if moved is not None:
            for p in sorted(moved.iterdir()):
                os.replace(p, folder / p.name)
            _remove_empty(moved)
            log.warning("the job failed: put the previous files of %s back in place", out)
        journal.unlink(missing_ok=True)
        raise
    journal.unlink(missing_ok=True)
