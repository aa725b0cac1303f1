"""The figure checks that read legends and series (checks (6), (8)-(12) of
:mod:`accelbench.aggregate.figure_check`, which runs them on every figure the package saves):

* :func:`legend_problems`: (6) one look (colour, hatch, marker, line style) per class: two legend entries of one
  figure never look the same; (8) every legend entry once per panel; (9) a series label naming an origin starts with
  exactly one of ``measured here``, ``reference run (<hardware>, <date>)`` or ``published (<source>)``
  (:data:`SERIES_LABEL`);
* :func:`series_problems`: (10) at most :data:`MAX_LEGEND_ENTRIES` legend entries in a figure (the published series
  and, per hardware, the best faithful and the best ours run: every other run is in the tables); (11) one colour per
  series: no two entries of a legend share a colour (:func:`colour_of`); (12) no legend entry without data: its
  artist (the one with its label, else any drawn artist of its colour or hatch) shows a finite, non-empty bar, line,
  marker or area (:func:`has_data`).

Each returns its problems as sentences naming the legend and the entry (empty list: fine); ``fig`` is a drawn
matplotlib figure.
"""

from __future__ import annotations

import re

from matplotlib.legend import Legend
from matplotlib.patches import Rectangle

# a series label starts with exactly one origin: "measured here", "reference run (<hardware>, <date>)",
# "published (<source>)"
SERIES_LABEL = re.compile(r"^(measured here|reference run \([^()]+\)|published \([^()]+\))(: .+)?$")
MAX_LEGEND_ENTRIES = 10  # published series + per hardware the best faithful and the best ours


def _look(handle) -> tuple | None:
    """What a legend handle looks like (colour, hatch, marker, line style), to tell two classes apart; None when
    it cannot be read."""
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    def hexes(c):
        try:
            import numpy as np

            arr = np.atleast_2d(np.asarray(c, dtype=float))
            return tuple(to_hex(x, keep_alpha=False) for x in arr[:1])
        except (TypeError, ValueError):
            return (str(c),)

    if isinstance(handle, Patch):
        return ("patch", hexes(handle.get_facecolor()), handle.get_hatch() or "")
    if isinstance(handle, Line2D):
        return (
            "line",
            hexes(handle.get_color()),
            str(handle.get_marker()),
            str(handle.get_linestyle()),
            hexes(handle.get_markerfacecolor()),
            # a dash pattern (offset, on-off sequence) reads as "--" above: its pattern tells two apart
            str(getattr(handle, "_unscaled_dash_pattern", "")),
        )
    try:  # collections (scatter): face and edge colour
        return ("collection", hexes(handle.get_facecolor()), hexes(handle.get_edgecolor()))
    except AttributeError:
        return None


def _legends(fig) -> list[tuple[str, Legend]]:
    out = [
        (f"axes {i} legend", ax.get_legend())
        for i, ax in enumerate(a for a in fig.axes if a.get_visible())
        if ax.get_legend() is not None
    ]
    return out + [("figure legend", leg) for leg in fig.legends]


def legend_problems(fig) -> list[str]:
    """Checks (6), (8) and (9) (see the module docstring) on every legend of ``fig``."""
    problems = []
    for where, leg in _legends(fig):
        looks: dict[tuple, str] = {}
        texts = [t.get_text() for t in leg.get_texts()]
        handles = getattr(leg, "legend_handles", None) or getattr(leg, "legendHandles", [])
        seen = set()
        for text in texts:
            if text in seen:
                problems.append(f"{where}: entry {text[:60]!r} twice")
            seen.add(text)
        for handle, text in zip(handles, texts):
            look = _look(handle)
            if look is None:
                continue
            other = looks.setdefault(look, text)
            if other != text:
                problems.append(f"{where}: {text[:40]!r} looks the same as {other[:40]!r} (one colour per class)")
        title = leg.get_title().get_text()
        for text in texts + ([title] if title else []):
            origins = re.findall(r"(?<!not )measured here|reference run|published", text)
            whole = " ".join(text.split())  # a label wrapped over lines (the SR3 legend) read as one line
            if origins and (
                len(origins) > 1 or not (SERIES_LABEL.match(text.split("\n")[0]) or SERIES_LABEL.match(whole))
            ):
                problems.append(
                    f"{where}: series label {text[:70]!r} is not exactly one of 'measured here', "
                    f"'reference run (<hardware>)', 'published (<source>)'"
                )
    return problems


def _norm(text: str) -> str:
    """A label as a reader sees it: ``\\$`` unescaped (:func:`plain_text`), lines joined, spaces single."""
    return " ".join(str(text).replace("\\$", "$").split())


def _hex(colour) -> str | None:
    """The first colour of ``colour`` (a colour, an RGBA array) as ``#rrggbb``; None when it is empty or fully
    transparent ("none")."""
    import numpy as np
    from matplotlib.colors import to_hex, to_rgba_array

    try:
        arr = to_rgba_array(colour)
    except (TypeError, ValueError):
        return None
    arr = arr[np.asarray(arr)[:, 3] > 0] if len(arr) else arr
    return to_hex(arr[0], keep_alpha=False) if len(arr) else None


def colour_of(artist) -> str | None:
    """What colour a reader reads an artist (or a legend handle) by: a line's colour, a patch's or a collection's face
    colour, its edge colour where the face is empty ("none")."""
    from matplotlib.lines import Line2D

    if isinstance(artist, Line2D):
        return _hex(artist.get_color())
    for get in ("get_facecolor", "get_edgecolor"):
        if hasattr(artist, get) and (c := _hex(getattr(artist, get)())) is not None:
            return c
    return None


def has_data(artist) -> bool:
    """Whether a drawn artist shows data: a line or marker at a finite point, a bar with a finite non-zero width and
    height, a collection (scatter, filled area, whiskers) with a finite point, a container (bars, error bars) with
    one such child."""
    import numpy as np
    from matplotlib.collections import Collection, PathCollection
    from matplotlib.container import Container
    from matplotlib.patches import Patch

    def finite(xy) -> bool:
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        return bool(len(xy)) and bool(np.isfinite(xy).all(axis=1).any())

    try:
        if isinstance(artist, Container):
            return any(has_data(a) for a in artist.get_children() if a is not None)
        if isinstance(artist, Rectangle):
            v = np.array([artist.get_x(), artist.get_y(), artist.get_width(), artist.get_height()], dtype=float)
            return bool(np.isfinite(v).all() and v[2] != 0 and v[3] != 0)
        if hasattr(artist, "get_xydata"):
            return finite(artist.get_xydata())
        if isinstance(artist, PathCollection):  # scatter: one marker at each offset
            return finite(artist.get_offsets())
        if isinstance(artist, Collection):
            return any(finite(p.vertices) for p in artist.get_paths())
        if isinstance(artist, Patch):
            return finite(artist.get_path().vertices)
    except (TypeError, ValueError):
        return False
    return False


def _drawn(fig) -> list:
    """Every artist of the visible axes that a legend entry can stand for (lines, patches, collections, containers)."""
    out = []
    for ax in fig.axes:
        if ax.get_visible():
            out += [*ax.lines, *ax.patches, *ax.collections, *ax.containers]
    return out


def _legend_handles(leg) -> list:
    return list(getattr(leg, "legend_handles", None) or getattr(leg, "legendHandles", []))


def series_problems(fig) -> list[str]:
    """Checks (10)-(12) (see the module docstring): at most :data:`MAX_LEGEND_ENTRIES` entries (distinct texts over
    every legend of the figure), no two entries of one legend in one colour, no entry without data."""
    problems = []
    legends = _legends(fig)
    entries = {_norm(t.get_text()) for _, leg in legends for t in leg.get_texts()}
    if len(entries) > MAX_LEGEND_ENTRIES:
        problems.append(
            f"{len(entries)} legend entries (at most {MAX_LEGEND_ENTRIES}: the published series and, per hardware, "
            f"the best faithful and the best ours run; the other runs belong in the tables)"
        )
    drawn = _drawn(fig)
    with_data = [a for a in drawn if has_data(a)]
    by_label: dict[str, list] = {}
    for a in drawn:
        label = a.get_label()
        if label and not str(label).startswith("_"):
            by_label.setdefault(_norm(label), []).append(a)
    colours_with_data = {colour_of(a) for a in with_data} - {None}
    hatches_with_data = {a.get_hatch() for a in with_data if hasattr(a, "get_hatch") and a.get_hatch()}
    for where, leg in legends:
        colours: dict[str, str] = {}
        for handle, text in zip(_legend_handles(leg), [t.get_text() for t in leg.get_texts()]):
            name = _norm(text)
            colour = colour_of(handle)
            if colour is not None:
                other = colours.setdefault(colour, name)
                if other != name:
                    problems.append(
                        f"{where}: {name[:40]!r} has the colour of {other[:40]!r} ({colour}; one per series)"
                    )
            artists = by_label.get(name)
            if artists is not None:  # the entry's own artist(s): one of them shows data
                empty = not any(has_data(a) for a in artists)
            else:  # a proxy handle: some drawn data has its colour or hatch
                hatch = handle.get_hatch() if hasattr(handle, "get_hatch") else None
                empty = colour not in colours_with_data and not (hatch and hatch in hatches_with_data)
            if empty:
                problems.append(f"{where}: legend entry {name[:60]!r} has no data in the figure")
    return problems
