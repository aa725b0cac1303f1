"""The figure checker: whether a rendered figure reads at a glance (:func:`figure_problems`, run by
:func:`accelbench.aggregate.figures.save_figure` on every figure the package writes, so every aggregation rule checks
its figures; ``tests/unit/test_figures.py`` requires none).

The checks: (1) no text outside the canvas; (2) titles, labels and legends do not overlap; (3) no legend over a bar;
(4) every numeric axis labelled with a unit; (5) the saved image fits a page (:data:`MAX_WIDTH_PX` wide at the saved
dpi); (6) one colour (with hatch and marker) per class: two legend entries of one figure never look the same; (7) no
annotation (text inside an axes) drawn over data (bars, lines, markers); (8) every legend entry once per panel;
(9) series labels: an entry naming an origin starts with exactly one of ``measured here``, ``reference run (<hardware>,
<date>)`` (from the run's provenance) or ``published (<source>)``; (10) at most
:data:`~accelbench.aggregate.legend_check.MAX_LEGEND_ENTRIES` legend entries in a figure (the published series and,
per hardware, the best faithful and the best ours run: every other run is in the tables); (11) one colour per series:
no two entries of a legend share a colour; (12) no legend entry without data: its artist (the one with its label,
else any drawn artist of its colour or hatch) shows a finite, non-empty bar, line, marker or area. The height of (5)
is at most :data:`MAX_HEIGHT_PX` (a screen's height at 150 dpi). Checks (6) and (8)-(12) read legends and series:
:mod:`accelbench.aggregate.legend_check`.
"""

from __future__ import annotations

import re

from matplotlib.legend import Legend
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, NullFormatter

from accelbench.aggregate.legend_check import legend_problems, series_problems

MAX_WIDTH_PX = 2400  # widest saved image that still reads when scaled to a page (e.g. 16 in at 150 dpi)
MAX_HEIGHT_PX = 1600  # tallest saved image that reads on a screen without scrolling past its legend
UNIT = re.compile(r"[\(\[][^\)\]]+[\)\]]")  # "(ms)", "[min]", "(x)", "(fraction of device time)"


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
    at); (6), (8), (9) :func:`legend_problems`; (7) :func:`annotation_problems`; (10)-(12) :func:`series_problems`
    (those two: :mod:`accelbench.aggregate.legend_check`).
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
