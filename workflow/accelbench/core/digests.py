"""Content digests of a job's input files, for freshness: a result is current only while the inputs it was made
from still hold the same bytes (the DAG's check, ``stale_results`` in ``workflow/rules/common.smk``), whatever the
files' modification times say (Snakemake's restore of a result after a failed job, ``cp -p``, ``rsync -a`` and
clock skew all make times lie).

:func:`digest` hashes a file's contents, or a folder's (every regular file below it, by relative path and content),
reading regular files only: a FIFO, device or socket is recorded by its kind, never opened (a dry run never blocks).
Each file is hashed once per process: the cache is keyed by (path, device, inode, size, mtime_ns, ctime_ns), so a
file rewritten in place (which changes its ctime even when its size and mtime are put back) is hashed again. The
digests of big files (:data:`KEEP_BYTES` or more: a sky map, model weights, a data set linked in) are also kept
across processes in :data:`STAMPS` under the same key, so that a DAG build (every ``snakemake -n``) does not read a
20 GB file again while its stamp shows no change.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from accelbench.errors import AccelbenchError, DataError

CHUNK = 4 * 2**20
MAX_FILES = 100_000  # a folder input with more entries is not a data set of these experiments: refused
_CACHE: dict[tuple, str] = {}
STAMPS = Path(".snakemake/accelbench/digests.json")  # relative to the working directory, as the spec files
KEEP_BYTES = 16 * 2**20  # files this big have their digest kept in STAMPS (hashing 16 MiB: ~30 ms)
MAX_STAMPS = 10_000  # entries kept in STAMPS (the newest)
_kept: dict[str, str] | None = None


def _stamp_key(key: tuple) -> str:
    return "\0".join(map(str, key))


def _kept_digests() -> dict[str, str]:
    """The digests kept in :data:`STAMPS` (read once per process): {} when it is missing, not this user's (another
    user's file could lie about contents) or not a JSON object of strings."""
    global _kept
    if _kept is None:
        _kept = {}
        try:
            if os.lstat(STAMPS).st_uid == os.geteuid():
                from accelbench.core.files import MAX_TEXT_BYTES, read_json

                data = read_json(STAMPS, "digest stamps", MAX_TEXT_BYTES, follow=False)
                if isinstance(data, dict):
                    _kept = {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
        except (OSError, ValueError, AccelbenchError):
            pass  # no stamps: the files are hashed again
    return _kept


def _keep(key: tuple, sha: str) -> None:
    """Add ``key -> sha`` to :data:`STAMPS` (written atomically through a private temporary file beside it; a
    folder that cannot be written: kept for this process only)."""
    import json
    import tempfile

    kept = _kept_digests()
    kept[_stamp_key(key)] = sha
    while len(kept) > MAX_STAMPS:
        kept.pop(next(iter(kept)))
    try:
        STAMPS.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".digests.", dir=STAMPS.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(kept, fh)
            os.replace(tmp, STAMPS)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def _file_sha256(path: str, st: os.stat_result) -> str:
    key = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _CACHE and st.st_size >= KEEP_BYTES and _stamp_key(key) in _kept_digests():
        _CACHE[key] = _kept_digests()[_stamp_key(key)]
    if key not in _CACHE:
        h = hashlib.sha256()
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced by something else since the stat
                return "not-a-regular-file"
            while chunk := os.read(fd, CHUNK):
                h.update(chunk)
        finally:
            os.close(fd)
        _CACHE[key] = h.hexdigest()
        if st.st_size >= KEEP_BYTES:
            _keep(key, _CACHE[key])
    return _CACHE[key]


def _entry(path: str) -> str:
    """The digest of one path (links followed): a regular file's content hash, else its kind."""
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    if stat.S_ISREG(st.st_mode):
        try:
            return _file_sha256(path, st)
        except OSError as exc:
            return f"unreadable ({exc.strerror or exc})"
    return "folder" if stat.S_ISDIR(st.st_mode) else "not-a-regular-file"


def digest(path: str | Path) -> str | None:
    """sha256 of the contents of ``path``: a file's bytes, or a folder's (sorted relative paths of everything below
    it with each regular file's content hash; links to folders are not followed). None when ``path`` is missing.

    Raises:
        DataError: a folder with more than :data:`MAX_FILES` entries (one line naming it).
    """
    path = str(path)
    kind = _entry(path)
    if kind == "missing":
        return None
    if kind != "folder":
        return kind
    h, count = hashlib.sha256(), 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            count += 1
            if count > MAX_FILES:
                raise DataError(f"input folder {path} holds more than {MAX_FILES} files; not a data set of these jobs")
            full = os.path.join(root, name)
            h.update(f"{os.path.relpath(full, path)}\0{_entry(full)}\n".encode())
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return h.hexdigest()


def digests(inputs: dict) -> dict:
    """``{name: {"path", "sha256"}}`` for every named input given as a path (None and missing paths left out): what
    a result records as ``inputs_sha256``."""
    out = {}
    for name, path in sorted((inputs or {}).items()):
        if isinstance(path, (str, Path)) and path:
            try:
                d = digest(path)
            except DataError as exc:  # recorded as such: never lose a finished measurement over its record
                d = str(exc)
            if d is not None:
                out[name] = {"path": str(path), "sha256": d}
    return out


def changed(recorded) -> list[str]:
    """The recorded inputs (a result's ``inputs_sha256``) whose contents differ now: their paths. A recorded input
    that is gone counts as changed (Snakemake makes it again, newer). Anything unreadable as a record: []."""
    if not isinstance(recorded, dict):
        return []
    out = []
    for entry in recorded.values():
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) and isinstance(entry.get("sha256"), str):
            try:
                now = digest(entry["path"])
            except DataError:
                now = None
            if now != entry["sha256"]:
                out.append(entry["path"])
    return out
