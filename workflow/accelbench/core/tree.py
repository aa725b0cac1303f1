"""The one way to write, move, delete and re-time a file under a results tree (results, superseded results, claims,
tables, figures, a reference run's README): untrusted ground, since a results folder may be copied in from elsewhere.

Every operation opens its folder relative to the tree's root one component at a time, ``openat``-style, with
``O_NOFOLLOW | O_DIRECTORY`` (:func:`folder`), at the moment of use: a link anywhere below the root (``results/claims ->
/etc``, ``results/cpu/.superseded -> /elsewhere``, ``results/cpu`` swapped for a link while a job runs) is refused
with one line naming it, and nothing is written. Files are written to a temporary name in the held folder and renamed
there (a link or hard-linked file at the final name is refused, never written through); a file is re-timed or
deleted only when it is a plain file with no other hard link (``st_nlink`` 1), opened without following a link.
The root itself (``results_dir``, checked when the config is read) may be reached through links.

Example::

    with tree.folder("results", ("claims",), create=True) as d:
        d.write_bytes("claims.csv", b"...")

The module is split by what each part does, every name still offered here: the folder held open and reached
without a link (:class:`Folder`, :func:`folder`, :func:`split`, :class:`TreeError`) is
:mod:`accelbench.core.tree_folder`; the scan for links before Snakemake plans (:func:`first_link`,
:func:`refuse_links`) and the search for result files that follows none (:func:`find_files`)
:mod:`accelbench.core.tree_links`; this module writes files by their path below the root.

Linux and other POSIX systems with ``dir_fd`` support (every system accelbench runs on).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from accelbench.core.tree_folder import Folder, TreeError, folder, split
from accelbench.core.tree_links import SCAN_ENTRIES, find_files, first_link, refuse_links  # noqa: F401 (offered here)


def file_folder(root: str | Path, path: str | Path, create: bool = False) -> tuple[Folder, str]:
    """The folder of file ``path`` (below ``root``), opened as :func:`folder`, and the file's name."""
    parts = split(root, path)
    if not parts:
        raise TreeError(f"{path} is the results tree {root} itself, not a file in it")
    return folder(root, parts[:-1], create), parts[-1]


def write_bytes(root: str | Path, path: str | Path, data: bytes) -> None:
    """Write file ``path`` below ``root`` atomically, its folders created, no link followed (:class:`Folder`)."""
    d, name = file_folder(root, path, create=True)
    with d:
        d.write_bytes(name, data)


def write_text(root: str | Path, path: str | Path, text: str) -> None:
    """:func:`write_bytes` of UTF-8 ``text``."""
    write_bytes(root, path, text.encode())


@contextlib.contextmanager
def open_write(root: str | Path, path: str | Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """:meth:`Folder.open_write` of file ``path`` below ``root`` (its folders created): for pandas' ``to_csv`` and
    Matplotlib's ``savefig`` (pass ``format=``), which then write to a file object opened safely."""
    d, name = file_folder(root, path, create=True)
    with d, d.open_write(name, mode, **kwargs) as fh:
        yield fh


@contextlib.contextmanager
def open_append(root: str | Path, path: str | Path, mode: str = "a", **kwargs) -> Iterator[IO]:
    """:meth:`Folder.open_append` of file ``path`` below ``root`` (its folders created, no link followed)."""
    d, name = file_folder(root, path, create=True)
    with d, d.open_append(name, mode, **kwargs) as fh:
        yield fh


def out_dir_root(out_dir: str | Path) -> Path:
    """The results tree of an aggregation's ``--out-dir`` (``<results>/<name>``, the layout of every rule's output
    folder): its parent."""
    return Path(os.path.normpath(out_dir)).parent


def write_output(path: str | Path, data: str | bytes) -> None:
    """Write an aggregation's output file ``<results>/<name>/<file>`` (tables, claims, figures, validation stamps)
    atomically below ``<results>`` (:func:`out_dir_root` of its folder), following no link."""
    path = Path(path)
    write_bytes(out_dir_root(path.parent), path, data.encode() if isinstance(data, str) else data)


@contextlib.contextmanager
def open_output(path: str | Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """:func:`open_write` of an aggregation's output file (root as :func:`write_output`): for ``to_csv``/``savefig``."""
    path = Path(path)
    with open_write(out_dir_root(path.parent), path, mode, **kwargs) as fh:
        yield fh


def make_output_dir(out_dir: str | Path) -> Path:
    """Create an aggregation's ``--out-dir`` (``<results>/<name>``) below ``<results>`` (:func:`out_dir_root`) without
    following a link, instead of ``Path.mkdir(parents=True)`` (which creates folders through one). Returns ``out_dir``.

    Raises:
        TreeError: ``<results>/<name>`` is a link or not a folder (one line naming it).
    """
    out_dir = Path(os.path.normpath(out_dir))
    with folder(out_dir_root(out_dir), (out_dir.name,), create=True):
        pass
    return out_dir


def rmtree_in(root: str | Path, path: str | Path) -> None:
    """Delete ``path`` below ``root`` (:meth:`Folder.remove`)."""
    d, name = file_folder(root, path)
    with d:
        d.remove(name)


__all__ = [
    "Folder",
    "TreeError",
    "file_folder",
    "find_files",
    "first_link",
    "folder",
    "make_output_dir",
    "open_append",
    "open_output",
    "open_write",
    "out_dir_root",
    "refuse_links",
    "rmtree_in",
    "split",
    "write_bytes",
    "write_output",
    "write_text",
]
