"""What every figure must say, in one place: series labels with their origin, hardware and scale, and a checker that a
rendered figure reads at a glance (:func:`figure_problems`, run by :func:`save_figure` on every figure the package
writes, so every aggregation rule checks its figures; ``tests/unit/test_figures.py`` requires none).

The checker: (1) no text outside the canvas; (2) titles, labels and legends do not overlap; (3) no legend over a bar;
(4) every numeric axis labelled with a unit; (5) the saved image fits a page (:data:`MAX_WIDTH_PX` wide at the saved
dpi); (6) one colour (with hatch and marker) per class: two legend entries of one figure never look the same; (7) no
annotation (text inside an axes) drawn over data (bars, lines, markers); (8) every legend entry once per panel;
(9) series labels: an entry naming an origin starts with exactly one of ``measured here``, ``reference run (<hardware>,
<date>)`` (from the run's provenance) or ``published (<source>)``; (10) at most :data:`MAX_LEGEND_ENTRIES` legend
entries in a figure (the published series and, per hardware, the best faithful and the best ours run: every other run
is in the tables); (11) one colour per series: no two entries of a legend share a colour; (12) no legend entry without
data: its artist (the one with its label, else any drawn artist of its colour or hatch) shows a finite, non-empty
bar, line, marker or area. The height of (5) is at most :data:`MAX_HEIGHT_PX` (a screen's height at 150 dpi).

Which runs a figure draws: :func:`device_of` names the hardware of a series without its run, and
:func:`best_per_hardware` picks, per hardware and class (faithful, ours), the one group that is best by a rank.

Series labels: :func:`series_label` gives ``"<origin>: <hardware>, <scale> scale[, details]"`` where origin is one of
those three (:func:`published` builds ``published (<source>)``). :func:`origin_of` reads it from a result's
provenance, so new origins plug in without touching the figures.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from matplotlib import colormaps
from matplotlib.colors import to_hex
from matplotlib.legend import Legend
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, NullFormatter

from accelbench.aggregate.plain_text import plain_text
from accelbench.errors import DataError

log = logging.getLogger(__name__)

ORIGINS = ("published", "measured here", "reference run")
# a series label starts with exactly one origin: "measured here", "reference run (<hardware>, <date>)",
# "published (<source>)"
SERIES_LABEL = re.compile(r"^(measured here|reference run \([^()]+\)|published \([^()]+\))(: .+)?$")
MAX_WIDTH_PX = 2400  # widest saved image that still reads when scaled to a page (e.g. 16 in at 150 dpi)
MAX_HEIGHT_PX = 1600  # tallest saved image that reads on a screen without scrolling past its legend
MAX_LEGEND_ENTRIES = 10  # published series + per hardware the best faithful and the best ours
UNIT = re.compile(r"[\(\[][^\)\]]+[\)\]]")  # "(ms)", "[min]", "(x)", "(fraction of device time)"
FONT = {"title": 10, "label": 9, "tick": 8, "legend": 7}  # smallest sizes used by the figures


def origin_of(result: dict) -> str:
    """The origin of a result: ``result["origin"]`` or ``environment["origin"]`` when set (e.g. ``reference run``
    for results shipped with the project), else ``measured here``."""
    series = result.get("_series")
    if series and series != "measured":  # a committed reference run: "reference run (H200, 2026-11-30)"
        return series
    return result.get("origin") or result.get("environment", {}).get("origin") or "measured here"


def published(source: str) -> str:
    """The origin of a published series: ``published (<source>)``, e.g. ``published (Study B, Fig. 2)``."""
    return f"published ({source})"


def series_label(origin: str, hardware: str, scale: str | None = None, *details: str) -> str:
    """``"measured here: CPU: AMD EPYC (2 threads), small scale, fp32"``: origin first, then hardware and scale.

    Args:
        origin: ``measured here``, ``reference run (<hardware>, <date>)`` (:func:`origin_of`) or ``published
            (<source>)`` (:func:`published`).
        hardware: the hardware label (:func:`accelbench.core.provenance.hardware_label`, or the paper's hardware).
        scale: ``paper``, ``small`` or a free description (e.g. ``"paper (TinyLlama-1.1B)"``); None: not stated.
        details: further distinguishing parts (precision, strategy, ...).
    """
    hardware = hardware.removeprefix(f"{origin}: ")  # a reference run's hardware label already leads with it
    parts = [hardware] + ([f"{scale} scale"] if scale else []) + [d for d in details if d]
    return f"{origin}: " + ", ".join(parts)


# one colour per series of a figure, never two alike: tab10 without its grey (kept for reference lines such as ideal
# scaling), then tab20's light shades without its light grey
SERIES_COLOURS = [f"C{k}" for k in (0, 1, 2, 3, 4, 5, 6, 8, 9)] + [
    to_hex(colormaps["tab20"](k)) for k in (1, 3, 5, 7, 9, 11, 13, 17, 19)
]


def device_of(label: str) -> str:
    """The hardware of a series without its run: ``NVIDIA H200 (139.8 GiB)`` of ``reference run (H200,
    2026-11-30): NVIDIA H200 (139.8 GiB)`` or ``measured here: NVIDIA H200 (139.8 GiB)``; a bare label as it is."""
    label = str(label)
    for prefix in ("measured here: ", "reference run ("):
        if label.startswith(prefix) and (prefix.endswith(": ") or "): " in label):
            return label.removeprefix(prefix) if prefix.endswith(": ") else label.split("): ", 1)[1]
    return label


def best_per_hardware(df, by: list[str], rank, hardware: str = "_hardware", kind: str = "_kind"):
    """The rows of ``df`` (a pandas DataFrame) that a figure draws: per (``hardware``, ``kind``) pair (e.g. NVIDIA
    H200 x faithful / ours), the one group of ``by`` (one curve or one run) whose ``rank(group)`` (a tuple, smaller
    is better) is least; the other groups stay in the tables. Rows keep their order within a group; groups come in
    the order of their first row."""
    if df.empty:
        return df
    keep = []
    for _, part in df.groupby([hardware, kind], sort=False):
        groups = list(part.groupby(by, sort=False, dropna=False))
        keep += list(min(groups, key=lambda kg: rank(kg[1]))[1].index)
    return df[df.index.isin(keep)]  # a selection, not a concat: the frame keeps its attrs


def _extent(artist, renderer):
    try:
        bb = artist.get_window_extent(renderer)
    except Exception:
        return None
    return bb if bb.width > 0 and bb.height > 0 else None


def _texts(fig):
    """Visible, non-empty text artists (titles, labels, tick labels, annotations, legend texts)."""
    return [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())
    ]


def _numeric(axis) -> bool:
    """True when the axis shows numbers (a quantity needing a unit), False for categories (configuration names)."""
    fmt = axis.get_major_formatter()
    if isinstance(fmt, (FixedFormatter, NullFormatter)) or type(fmt).__name__ == "StrCategoryFormatter":
        return False
    labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
    clean = [re.sub(r"\\mathdefault|\\times|[${}^\\]", "", t).replace("\u2212", "-") for t in labels]
    return bool(clean) and all(re.fullmatch(r"[0-9.,\-+e%\s]+", t) for t in clean)


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
    """Checks (6), (8) and (9) of the module docstring on every legend of ``fig``."""
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
    """Checks (10)-(12) of the module docstring: at most :data:`MAX_LEGEND_ENTRIES` entries (distinct texts over
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


def _along(pts, steps: int = 24):
    """Points along the segments joining ``pts`` (display coordinates), so a text crossed by a line is seen."""
    import numpy as np

    if len(pts) < 2:
        return pts
    t = np.linspace(0, 1, steps)[:, None, None]
    return np.concatenate([pts, (pts[:-1] + t * (pts[1:] - pts[:-1])).reshape(-1, 2)])


def _vertices(artist, renderer):
    """Display coordinates of the data of a line or collection, with points along each segment (empty when
    unreadable)."""
    import numpy as np

    try:
        if hasattr(artist, "get_xydata"):
            pts = _along(artist.get_transform().transform(np.asarray(artist.get_xydata(), dtype=float)))
        else:
            paths = artist.get_paths()
            offsets = artist.get_offsets()
            if len(paths) == 1 and len(offsets) > 1:  # scatter: one marker path at many offsets
                pts = artist.get_offset_transform().transform(np.asarray(offsets, dtype=float))
            else:
                pts = (
                    np.concatenate([_along(artist.get_transform().transform(p.vertices)) for p in paths])
                    if paths
                    else np.empty((0, 2))
                )
    except Exception:
        return np.empty((0, 2))
    return pts[np.isfinite(pts).all(axis=1)] if len(pts) else pts


def annotation_problems(fig) -> list[str]:
    """Check (7): a text drawn inside an axes (``ax.text``, ``ax.annotate``) covers none of its bars, lines,
    markers or whiskers."""
    from matplotlib.collections import Collection

    r = fig.canvas.get_renderer()
    problems = []
    for i, ax in enumerate(a for a in fig.axes if a.get_visible()):
        texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
        if not texts:
            continue
        bars = [
            b
            for p in ax.patches
            if isinstance(p, Rectangle)
            and p.get_visible()
            and p.get_height()
            and p.get_width()
            and (b := _extent(p, r)) is not None
        ]
        points = [
            _vertices(a, r)
            for a in list(ax.lines) + [c for c in ax.collections if isinstance(c, Collection)]
            if a.get_visible()
        ]
        for t in texts:
            tb = _extent(t, r)
            if tb is None:
                continue
            hit = any(min(b.x1, tb.x1) - max(b.x0, tb.x0) > 1 and min(b.y1, tb.y1) - max(b.y0, tb.y0) > 1 for b in bars)
            hit = hit or any(
                ((p[:, 0] > tb.x0 + 1) & (p[:, 0] < tb.x1 - 1) & (p[:, 1] > tb.y0 + 1) & (p[:, 1] < tb.y1 - 1)).any()
                for p in points
                if len(p)
            )
            if hit:
                problems.append(f"axes {i}: annotation {t.get_text()[:50]!r} drawn over data")
    return problems


def size_problems(fig, dpi: float) -> list[str]:
    """Check (5): the saved image (``fig`` at ``dpi``) fits a page: at most :data:`MAX_WIDTH_PX` x
    :data:`MAX_HEIGHT_PX` pixels."""
    w, h = fig.get_figwidth() * dpi, fig.get_figheight() * dpi
    if w > MAX_WIDTH_PX + 0.5 or h > MAX_HEIGHT_PX + 0.5:
        return [f"{w:.0f}x{h:.0f} px at {dpi:g} dpi: larger than a page ({MAX_WIDTH_PX}x{MAX_HEIGHT_PX} px)"]
    return []


def figure_problems(fig, dpi: float = 150) -> list[str]:
    """Everything unreadable in a rendered figure, as sentences (empty list: fine).

    Checks (1)-(12) of the module docstring: (1) every text and legend lies inside the canvas (matplotlib's tight
    bounding box of the figure within the figure's box); (2) titles, suptitle, axis labels and legends do not
    overlap one another; (3) a legend covers no bar; (4) every visible axis that shows ticks has a label, and a
    numeric one states a unit in parentheses or brackets; (5) :func:`size_problems` at ``dpi`` (the dpi it is saved
    at); (6), (8), (9) :func:`legend_problems`; (7) :func:`annotation_problems`; (10)-(12) :func:`series_problems`.
    """
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.bbox
    problems = []
    tol = 1.0
    tight = fig.get_tightbbox(r)
    if tight is not None:
        tight = tight.transformed(fig.dpi_scale_trans)
        if tight.x0 < box.x0 - tol or tight.y0 < box.y0 - tol or tight.x1 > box.x1 + tol or tight.y1 > box.y1 + tol:
            for t in _texts(fig):
                e = _extent(t, r)
                if e is not None and (e.x0 < -tol or e.y0 < -tol or e.x1 > box.x1 + tol or e.y1 > box.y1 + tol):
                    problems.append(f"text outside the canvas: {t.get_text()[:60]!r}")
            for leg in fig.findobj(Legend):
                e = _extent(leg, r)
                if e is not None and (e.x0 < -tol or e.y0 < -tol or e.x1 > box.x1 + tol or e.y1 > box.y1 + tol):
                    problems.append("legend outside the canvas")
            if not problems:
                problems.append(f"figure content outside the canvas: {tight} vs {box}")
    # (2) overlaps between the large text elements
    named = []
    if getattr(fig, "_suptitle", None) is not None and fig._suptitle.get_text():
        named.append(("suptitle", fig._suptitle))
    for i, ax in enumerate(a for a in fig.axes if a.get_visible()):
        for what, t in (
            ("title", ax.title),
            ("left title", ax._left_title),
            ("right title", ax._right_title),
            ("x label", ax.xaxis.label),
            ("y label", ax.yaxis.label),
        ):
            if t.get_visible() and t.get_text().strip():
                named.append((f"axes {i} {what}", t))
        if ax.get_legend() is not None:
            named.append((f"axes {i} legend", ax.get_legend()))
    named += [("figure legend", leg) for leg in fig.legends]
    boxes = [(n, _extent(a, r)) for n, a in named]
    for i, (n1, b1) in enumerate(boxes):
        for n2, b2 in boxes[i + 1 :]:
            if b1 is not None and b2 is not None and b1.overlaps(b2):
                inter_w = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
                inter_h = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
                if inter_w > 2 and inter_h > 2:
                    problems.append(f"{n1} overlaps {n2}")
    for i, ax in enumerate(a for a in fig.axes if a.get_visible()):
        # (3) legend over bars
        leg = ax.get_legend()
        lb = _extent(leg, r) if leg is not None else None
        if lb is not None:
            for p in ax.patches:
                if isinstance(p, Rectangle) and p.get_visible() and p.get_height() and p.get_width():
                    pb = _extent(p, r)
                    if (
                        pb is not None
                        and pb.overlaps(lb)
                        and (min(pb.x1, lb.x1) - max(pb.x0, lb.x0)) > 1
                        and (min(pb.y1, lb.y1) - max(pb.y0, lb.y0)) > 1
                    ):
                        problems.append(f"axes {i}: the legend covers a bar")
                        break
        # (4) labels and units
        if not ax.axison:
            continue
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if not axis.get_visible() or not [t for t in axis.get_ticklabels() if t.get_text()]:
                continue
            label = axis.label.get_text().strip()
            if not label:
                problems.append(f"axes {i}: {name} axis without a label")
            elif _numeric(axis) and not UNIT.search(label):
                problems.append(f"axes {i}: {name} label {label!r} states no unit")
    return problems + size_problems(fig, dpi) + legend_problems(fig) + series_problems(fig) + annotation_problems(fig)


def text_height_in(lines: int, fontsize: float, spacing: float = 1.4) -> float:
    """Inches that ``lines`` lines of text take at ``fontsize`` (points) with ``spacing`` x the font size a line: what
    a figure reserves for a wrapped title or a legend outside its axes."""
    return lines * fontsize * spacing / 72


def wrap(text: str, fig, fontsize: float, share: float = 0.95) -> str:
    """``text`` broken into lines that fit ``share`` of the figure's width at ``fontsize`` (points)."""
    import textwrap

    chars = max(20, int(fig.get_figwidth() * 72 * share / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(part, chars) for part in text.split("\n"))


_FOUND: dict[str, list[str]] = {}  # figure -> its problems, saved inside :func:`checked`


@contextlib.contextmanager
def checked() -> Iterator[None]:
    """Run an aggregation so that its figures' problems fail it: every figure is still written (to be looked at),
    then one line names each defective figure and its first problem.

    Raises:
        DataError: a figure saved in the body has a problem of :func:`figure_problems`.
    """
    _FOUND.clear()
    try:
        yield
    finally:
        found = dict(_FOUND)
        _FOUND.clear()
    if found:
        raise DataError(
            "figure check failed: "
            + "; ".join(
                f"{name}: {p[0]}" + (f" (+{len(p) - 1} more)" if len(p) > 1 else "") for name, p in found.items()
            )
        )


def save_figure(fig, path: str | Path, dpi: int = 150) -> list[str]:
    """Save ``fig`` to ``path`` (parents created) after :func:`figure_problems`; problems are logged as warnings
    (a figure is still written) and returned, so tests can require none; inside :func:`checked` they fail the
    aggregation at its end."""
    import matplotlib.pyplot as plt

    plain_text(fig)  # `$` from data is no mathtext
    problems = figure_problems(fig, dpi)
    for p in problems:
        log.warning("%s: %s", Path(path).name, p)
    if problems:
        _FOUND[Path(path).name] = problems
    from accelbench.core import tree

    with tree.open_output(path, "wb") as fh:  # below <results>, following no link; renamed into place whole
        fig.savefig(fh, dpi=dpi, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
    return problems
