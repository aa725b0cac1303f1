"""Finding a link below a results tree before Snakemake plans any job (:func:`refuse_links`, called from
workflow/rules/common.smk): Snakemake's own writes (an output's folders created, an old output deleted) follow links,
so one there would lead them out of the tree; nor is a finished output that is a link, a FIFO or a device ever read
(Snakemake takes one with a recent time as done, and the validation and aggregation jobs would read it). Finding the
result files of a results tree without following a link (:func:`find_files`, what the DAG and the reference runs
gather instead of ``glob``, which skipped a linked folder silently and followed a linked file).
:mod:`accelbench.core.tree` offers these names too.
"""

from __future__ import annotations

import collections
import os
import stat
from pathlib import Path

from accelbench.core.plain_files import _kind
from accelbench.core.tree_folder import TreeError, refuse_link, split

SCAN_ENTRIES = 100_000  # entries first_link looks at, at most, in its walk for `.superseded` (a results tree: ~10^3)


def first_link(root: str | Path, planned=(), max_entries: int = SCAN_ENTRIES) -> Path | None:
    """The first link below results tree ``root`` that would lead Snakemake's own writes out of it (it creates an
    output's folders and deletes an old output before a job, following links), else None. Looked at, links not
    followed (``os.scandir``, ``lstat``): every entry one and two levels below ``root`` (``root/<x>``,
    ``root/<system>/<x>``); every folder on the path of each ``planned`` output below ``root`` (the output file
    itself too: Snakemake would take a link there with a recent time as done and the readers would follow it); and
    every entry named ``.superseded`` at any depth, in a walk of at
    most ``max_entries`` entries (breadth first; a ``.superseded`` folder is not entered, an unreadable folder is
    skipped). ``root`` itself may be a link (checked when the config is read); an absent ``root`` has none.
    Cost: one ``scandir`` per folder up to ``max_entries`` entries, one ``lstat`` per distinct planned folder."""
    root = Path(root)
    if not root.is_dir():
        return None
    seen, queue, depth_of = 0, collections.deque([root]), {root: 0}
    while queue and seen < max_entries:
        here = queue.popleft()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            path, depth = Path(entry.path), depth_of[here] + 1
            if entry.is_symlink():
                if depth <= 2 or entry.name == ".superseded":
                    return path
            elif entry.is_dir(follow_symlinks=False) and entry.name != ".superseded":
                depth_of[path] = depth
                queue.append(path)
    checked: set[tuple[str, ...]] = set()
    for target in planned:
        try:
            parts = split(root, target)
        except TreeError:
            continue  # not below the results tree
        for k in range(1, len(parts) + 1):
            if parts[:k] in checked:
                continue
            checked.add(parts[:k])
            try:
                st = os.lstat(root.joinpath(*parts[:k]))
            except OSError:
                break  # absent: nothing deeper exists
            if stat.S_ISLNK(st.st_mode):
                return root.joinpath(*parts[:k])
    return None


def odd_output(root: str | Path, planned=()) -> tuple[Path, str] | None:
    """The first ``planned`` output below ``root`` that exists as something other than a plain file or a folder (a
    FIFO, a device, a socket: ``lstat``, nothing opened), with what it is; else None. Snakemake takes such an output
    with a recent time as done, so a dry run would plan nothing for it, and the job reading it would block or never
    end."""
    for target in planned:
        try:
            split(root, target)
            st = os.lstat(target)
        except (TreeError, OSError):
            continue  # not below the results tree, or absent
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            return Path(target), _kind(st.st_mode)
    return None


def refuse_links(root: str | Path, planned=()) -> None:
    """Raise :class:`TreeError` (one line naming it) when :func:`first_link` finds a link, or :func:`odd_output` an
    output that is a FIFO or device: what the Snakefile checks before Snakemake plans any job, dry run included
    (workflow/rules/common.smk).

    Raises:
        TreeError: a link below ``root`` on the way of an output or at one; an output that is not a plain file.
    """
    link = first_link(root, planned)
    if link is not None:
        raise refuse_link(link, Path(root))
    odd = odd_output(root, planned)
    if odd is not None:
        raise TreeError(
            f"{odd[0]} is not a plain file ({odd[1]}) inside the results tree {root}; refused, nothing read: move it "
            f"away"
        )


def find_files(root: str | Path, pattern: tuple[str, ...]) -> list[Path]:
    """The paths below ``root`` that match ``pattern``, sorted, found without following a link (``os.scandir``).

    ``pattern`` is one entry a component: a name, ``*`` (any name) or ``**`` (any number of folders, none
    included), e.g. ``("*", "sr3_scaling", "**", "result.json")``. Names starting with ``.`` (``.superseded``, the
    temporary ``.partial.*``) are never matched nor entered. An absent ``root`` has none; ``root`` itself may be a
    link.

    Raises:
        TreeError: an entry that matches a component of ``pattern`` is a link (one line naming it and where it
            leads), at any depth: under ``**`` every entry counts, since any could lead to a folder.
    """
    root = Path(root)
    found: list[Path] = []

    def entries(here: Path) -> list[os.DirEntry]:
        try:
            with os.scandir(here) as it:
                return sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def walk(here: Path, rest: tuple[str, ...]) -> None:
        head, tail = rest[0], rest[1:]
        if head == "**":
            if tail:
                walk(here, tail)  # no folder
            for entry in entries(here):  # one folder or more: every entry is on the way
                if entry.is_symlink():
                    raise refuse_link(Path(entry.path), root)
                if entry.is_dir(follow_symlinks=False):
                    walk(Path(entry.path), rest)
            return
        for entry in entries(here):
            if head != "*" and entry.name != head:
                continue
            if entry.is_symlink():
                raise refuse_link(Path(entry.path), root)
            if not tail:
                found.append(Path(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                walk(Path(entry.path), tail)

    if root.is_dir():
        walk(root, tuple(pattern))
    return sorted(set(found))
