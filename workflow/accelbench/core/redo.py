"""Redoing a finished result without ever deleting it, for any user, root included: a job that redoes result
``results/<system>/<experiment>/<variant...>/result.json`` runs inside :func:`superseding`, which moves the old
result and its side files to ``results/<system>/.superseded/<UTC time>/<experiment>/...`` first
(:func:`superseded_folder`) and puts them back if the job fails; a job killed outright (SIGKILL) leaves the journal
:data:`REDO` that makes the folder not current until its rerun puts the old files back (:func:`recover`), once the
journal proves itself. Every folder is reached from the results tree without following a link
(:mod:`accelbench.core.tree`). :mod:`accelbench.core.results` offers these names too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from accelbench.core import tree
from accelbench.errors import ResultError

SUPERSEDED = ".superseded"  # results/<system>/.superseded/<UTC time>/<experiment>/...: dot folder, aggregations skip it
log = logging.getLogger(__name__)


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


def tree_root(out: str | Path, system: str, experiment: str) -> tuple[Path, tuple[str, ...]]:
    """The results tree of result ``out`` (``<root>/<system>/<experiment>/<variant...>/result.json``) and the
    components of the result's folder below it (``(<system>, <experiment>, <variant...>)``).

    Raises:
        ResultError: ``out`` does not lie under ``<system>/<experiment>/``.
    """
    parts = Path(os.path.normpath(out)).parent.parts
    for i in range(len(parts) - 1):
        if parts[i] == system and parts[i + 1] == experiment:
            return Path(*parts[:i]) if i else Path("."), parts[i:]
    raise ResultError(f"result path {out} does not lie under <system>/<experiment>/ ({system}/{experiment})")


REDO = ".redo.json"  # in a result folder while a job redoes it: where the old files went (removed when the job ends)
JOURNAL_VERSION = 2  # journals record the result they belong to and each moved file's sha256


def redo_journal(out: str | Path) -> Path:
    """The journal of a redo of result ``out`` (:data:`REDO` beside it). While it exists the folder is not current:
    a redo was killed (SIGKILL, power loss) before it could put the old files back or finish; validation refuses the
    result, the DAG reruns it, and the rerun puts the old files back first (:func:`recover`)."""
    return Path(out).parent / REDO


MAX_JOURNAL_BYTES = 2**20  # a journal lists the names of one result folder: kilobytes
FOLDER_DIGEST = "folder"  # what a journal records for a sub-folder of a result folder (no content digest)
_STAMP = re.compile(r"\d{8}T\d{6}Z_*")


def _digest(d: tree.Folder, name: str) -> str:
    st = d.lstat(name)
    return FOLDER_DIGEST if st is not None and stat.S_ISDIR(st.st_mode) else d.sha256(name)


def _journal_record(out: Path, system: str, experiment: str, d: tree.Folder) -> tuple[tuple[str, ...], dict[str, str]]:
    """The superseded folder (components below the results tree) and the files (name -> sha256) that the redo
    journal of result ``out`` in its folder ``d`` records, checked to be a journal this tree wrote for this result:
    it names this result (``result``), ``moved_to`` is exactly ``<system>/.superseded/<UTC stamp>/<experiment>/
    <variant...>`` of it, a folder reached without a link, and every file it lists is there (or, never moved, still
    in the result's folder) with the recorded sha256. A journal is only ever written by :func:`superseding`; one that
    says anything else was planted, copied from elsewhere or damaged.

    Raises:
        ResultError: one line naming the journal and what is wrong with it; nothing was moved or deleted.
    """
    journal = redo_journal(out)
    root, parts = tree_root(out, system, experiment)

    def refuse(why: str) -> ResultError:
        return ResultError(
            f"{journal}: refused: {why}; nothing was moved or deleted (the old files of a killed redo are under "
            f"{root / system / SUPERSEDED}/<UTC time>/): put them back by hand, then delete {journal}"
        )

    try:
        record = json.loads(d.read_bytes(REDO, MAX_JOURNAL_BYTES))
    except (OSError, tree.TreeError) as exc:
        raise refuse(f"unreadable journal ({exc})") from None
    except (ValueError, RecursionError) as exc:
        raise refuse(f"unreadable journal ({exc})") from None
    if not isinstance(record, dict) or record.get("version") != JOURNAL_VERSION:
        raise refuse(f"not a journal of a redo written by this version of accelbench (version {JOURNAL_VERSION})")
    moved_to, names, result = record.get("moved_to"), record.get("files"), record.get("result")
    if result != "/".join((*parts, Path(out).name)):
        raise refuse(f"it is the journal of {result!r}, not of this result ({'/'.join((*parts, Path(out).name))})")
    if not isinstance(names, dict) or not names:
        raise refuse("it lists no moved files with their sha256 (a redo that moved nothing writes no journal)")
    bad = [n for n in names if n in ("", ".", "..", REDO) or "/" in n or "\0" in n]
    if bad or not all(isinstance(v, str) for v in names.values()):
        raise refuse(f"files {bad[:3] or list(names)[:3]} are not names of files in {journal.parent} with a digest")
    moved = (system, SUPERSEDED, "<stamp>", *parts[1:])
    got = tuple(Path(os.path.normpath(moved_to)).parts) if isinstance(moved_to, str) else ()
    if (
        len(got) != len(moved)
        or got[:2] != moved[:2]
        or got[3:] != moved[3:]
        or not _STAMP.fullmatch(got[2])
        or os.path.isabs(moved_to)
    ):
        raise refuse(f"moved_to {moved_to!r} is not this result's folder under {root / system / SUPERSEDED}")
    try:
        with tree.folder(root, got) as m:
            for name, digest in names.items():
                where = m if m.exists(name) else d
                if not where.exists(name) or _digest(where, name) != digest:
                    raise refuse(f"{name} is in neither {m.path} nor {d.path} with the sha256 the journal records")
    except FileNotFoundError:
        raise refuse(f"moved_to {moved_to!r}: {root.joinpath(*got)} does not exist") from None
    except tree.TreeError as exc:
        raise refuse(f"moved_to {moved_to!r}: {exc}") from None
    return got, names


def _supersede_into(root: Path, parts: tuple[str, ...]) -> tuple[str, ...]:
    """Create, exclusively, the folder a redo of the result in folder ``parts`` moves old files to
    (``<system>/.superseded/<UTC stamp>[_...]/<experiment>/<variant...>``); returns its components."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    while True:
        moved = (parts[0], SUPERSEDED, stamp, *parts[1:])
        with tree.folder(root, moved[:-1], create=True) as parent:
            try:
                os.mkdir(moved[-1], 0o777, dir_fd=parent.fd)
                return moved
            except FileExistsError:
                stamp += "_"  # two supersessions of one result within a second


def recover(out: str | Path, system: str, experiment: str) -> bool:
    """Undo a killed redo of result ``out``: every file of the folder that was moved aside (listed in the journal)
    comes back, replacing what the killed job (or Snakemake's restore of its own backup of ``result.json``) left
    there; files the killed job wrote that were not there before are removed (partial). The journal must prove itself
    first (:func:`_journal_record`: written for this result, naming its own folder under ``.superseded/`` that holds
    the files it lists, by sha256): any other is refused with one line, touching nothing. Returns True when a journal
    was found. Call with the device lock held (the harness does)."""
    root, parts = tree_root(out, system, experiment)
    try:
        d = tree.folder(root, parts)
    except FileNotFoundError:
        return False
    with d:
        if not d.exists(REDO):
            return False
        moved, names = _journal_record(Path(out), system, experiment, d)
        with tree.folder(root, moved) as m:
            left = [n for n in d.names() if n != REDO and not (n in names and not m.exists(n))]
            for name in left:  # checked before anything changes: a link or hard-linked file stops it here
                st = d.lstat(name)
                if stat.S_ISLNK(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink > 1):
                    raise ResultError(
                        f"{d.path / name}: a link or hard-linked file where a killed redo left its files; refused, "
                        f"nothing was moved or deleted: move it away, then rerun"
                    )
            for name in left:
                d.remove(name)
            for name in sorted(names):
                if m.exists(name):
                    m.move(name, d)
        _remove_empty(root, moved)
        d.remove(REDO)
    log.warning(
        "%s: a redo was killed before it finished; put its previous files back from %s", out, root.joinpath(*moved)
    )
    return True


def _remove_empty(root: Path, moved: tuple[str, ...]) -> None:
    """Remove folder ``moved`` (components below ``root``) and its parents up to ``.superseded/`` where empty."""
    for i in range(len(moved), moved.index(SUPERSEDED) + 1, -1):
        try:
            with tree.folder(root, moved[: i - 1]) as parent:
                parent.rmdir(moved[i - 1])
        except (OSError, tree.TreeError):
            return


@contextlib.contextmanager
def superseding(out: str | Path, system: str, experiment: str) -> Iterator[Path | None]:
    """Run a job that (re)writes result ``out`` without ever deleting a finished result, for any user.

    Before the job: a redo that was killed earlier is undone (:func:`recover`); then everything in the result's
    folder (``result.json`` and its side files: ``kernels.csv``, ``trace.json.gz``, ``samples.npz``, ...) is moved
    to :func:`superseded_folder`, after writing the journal :data:`REDO` that says where, for which result, and each
    file's sha256. If the job raises (or is interrupted), the files it wrote there are removed (no stale or truncated
    side file survives) and the moved files are put back. On success the old files stay under ``.superseded/``
    (findable; aggregations skip dot folders). Either way the journal goes last; a job killed outright leaves it, and
    the folder then counts as not current until a rerun recovers it. Every folder is reached from the results tree
    without following a link (:mod:`accelbench.core.tree`); a link, or a hard-linked file, is refused in one line.
    Yields the folder the old files went to (``None``: nothing was there).
    """
    root, parts = tree_root(out, system, experiment)
    recover(out, system, experiment)
    moved = None
    with tree.folder(root, parts, create=True) as d:
        old = [n for n in d.names() if n != REDO]
        if old:
            digests = {n: _digest(d, n) for n in old}  # before anything moves: a link or hard link is refused here
            moved = _supersede_into(root, parts)
            d.write_text(
                REDO,
                json.dumps(
                    {
                        "version": JOURNAL_VERSION,
                        "result": "/".join((*parts, Path(out).name)),
                        "moved_to": "/".join(moved),
                        "files": digests,
                        "pid": os.getpid(),
                        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    },
                    indent=1,
                )
                + "\n",
            )
            with tree.folder(root, moved) as m:
                for name in old:
                    d.move(name, m)
            log.warning("moved the previous files of %s to %s (superseded, not deleted)", out, root.joinpath(*moved))
        try:
            yield None if moved is None else root.joinpath(*moved)
        except BaseException:
            for name in d.names():
                if name != REDO:
                    d.remove(name)
            if moved is not None:
                with tree.folder(root, moved) as m:
                    for name in m.names():
                        m.move(name, d)
                _remove_empty(root, moved)
                log.warning("the job failed: put the previous files of %s back in place", out)
            with contextlib.suppress(FileNotFoundError):
                d.remove(REDO)
            raise
        with contextlib.suppress(FileNotFoundError):
            d.remove(REDO)
