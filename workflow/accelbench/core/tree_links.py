"""Finding a link below a results tree before Snakemake plans any job (:func:`refuse_links`, called from
workflow/rules/common.smk): Snakemake's own writes (an output's folders created, an old output deleted) follow links,
so one there would lead them out of the tree. :mod:`accelbench.core.tree` offers these names too.
"""

from __future__ import annotations

import collections
import os
import stat
from pathlib import Path

from accelbench.core.tree_folder import TreeError, refuse_link, split

SCAN_ENTRIES = 100_000  # entries first_link looks at, at most, in its walk for `.superseded` (a results tree: ~10^3)


def first_link(root: str | Path, planned=(), max_entries: int = SCAN_ENTRIES) -> Path | None:
    """The first link below results tree ``root`` that would lead Snakemake's own writes out of it (it creates an
    output's folders and deletes an old output before a job, following links), else None. Looked at, links not
    followed (``os.scandir``, ``lstat``): every entry one and two levels below ``root`` (``root/<x>``,
    ``root/<system>/<x>``); every folder on the path of each ``planned`` output below ``root`` (the output file
    itself not: the job's own write refuses it); and every entry named ``.superseded`` at any depth, in a walk of at
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
        for k in range(1, len(parts)):
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


def refuse_links(root: str | Path, planned=()) -> None:
    """Raise :class:`TreeError` (one line naming the link and where it leads) when :func:`first_link` finds one: what
    the Snakefile checks before Snakemake plans any job (workflow/rules/common.smk).

    Raises:
        TreeError: a link below ``root`` on the way of an output.
    """
    link = first_link(root, planned)
    if link is not None:
        raise refuse_link(link, Path(root))
