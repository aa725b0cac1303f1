"""What every figure must say, in one place: series labels with their origin, hardware and scale, and a check that a
rendered figure is readable (no text outside the canvas, no overlapping titles/labels/legends, no legend over
bars, every numeric axis labelled with a unit).

Series labels: :func:`series_label` gives ``"<origin>: <hardware>, <scale> scale[, details]"`` where origin is one of
:data:`ORIGINS` (``published`` numbers from a paper, ``measured here`` by this checkout's results, ``reference run``
results shipped for comparison). :func:`origin_of` reads it from a result's provenance, so new origins plug in
without touching the figures.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.legend import Legend  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import FixedFormatter, NullFormatter  # noqa: E402

log = logging.getLogger(__name__)

ORIGINS = ("published", "measured here", "reference run")
UNIT = re.compile(r"[\(\[][^\)\]]+[\)\]]")  # "(ms)", "[min]", "(x)", "(fraction of device time)"
FONT = {"title": 10, "label": 9, "tick": 8, "legend": 7}  # smallest sizes used by the figures


def origin_of(result: dict) -> str:
    """The origin of a result: ``result["origin"]`` or ``environment["origin"]`` when set (e.g. ``reference run``
    for results shipped with the project), else ``measured here``."""
    series = result.get("_series")
    if series and series != "measured":  # a committed reference run: "reference run (H200, 2026-11-30)"
        return series
    return result.get("origin") or result.get("environment", {}).get("origin") or "measured here"


def series_label(origin: str, hardware: str, scale: str | None = None, *details: str) -> str:
    """``"measured here: CPU: AMD EPYC (2 threads), small scale, fp32"``: origin first, then hardware and scale.

    Args:
        origin: ``published``, ``measured here``, ``reference run`` (or another provenance origin).
        hardware: the hardware label (:func:`accelbench.provenance.hardware_label`, or the paper's hardware).
        scale: ``paper``, ``small`` or a free description (e.g. ``"paper (TinyLlama-1.1B)"``); None: not stated.
        details: further distinguishing parts (precision, strategy, ...).
    """
    hardware = hardware.removeprefix(f"{origin}: ")  # a reference run's hardware label already leads with it
    parts = [hardware] + ([f"{scale} scale"] if scale else []) + [d for d in details if d]
    return f"{origin}: " + ", ".join(parts)


def _extent(artist, renderer):
    try:
        bb = artist.get_window_extent(renderer)
    except Exception:
        return None
    return bb if bb.width > 0 and bb.height > 0 else None


def _texts(fig):
    """Visible, non-empty text artists (titles, labels, tick labels, annotations, legend texts)."""
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
            and (t.axes is None or t.axes.get_visible())]


def _numeric(axis) -> bool:
    """True when the axis shows numbers (a quantity needing a unit), False for categories (configuration names)."""
    fmt = axis.get_major_formatter()
    if isinstance(fmt, (FixedFormatter, NullFormatter)) or type(fmt).__name__ == "StrCategoryFormatter":
        return False
    labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
    clean = [re.sub(r"\\mathdefault|\\times|[${}^\\]", "", t).replace("\u2212", "-") for t in labels]
    return bool(clean) and all(re.fullmatch(r"[0-9.,\-+e%\s]+", t) for t in clean)


def figure_problems(fig) -> list[str]:
    """Everything unreadable in a rendered figure, as sentences (empty list: fine).

    Checks: (1) every text and legend lies inside the canvas (matplotlib's tight bounding box of the figure within
    the figure's box); (2) titles, suptitle, axis labels and legends do not overlap one another; (3) a legend
    covers no bar; (4) every visible axis that shows ticks has a label, and a numeric one states a unit in
    parentheses or brackets.
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
        for what, t in (("title", ax.title), ("left title", ax._left_title), ("right title", ax._right_title),
                        ("x label", ax.xaxis.label), ("y label", ax.yaxis.label)):
            if t.get_visible() and t.get_text().strip():
                named.append((f"axes {i} {what}", t))
        if ax.get_legend() is not None:
            named.append((f"axes {i} legend", ax.get_legend()))
    named += [("figure legend", leg) for leg in fig.legends]
    boxes = [(n, _extent(a, r)) for n, a in named]
    for i, (n1, b1) in enumerate(boxes):
        for n2, b2 in boxes[i + 1:]:
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
                    if pb is not None and pb.overlaps(lb) and (min(pb.x1, lb.x1) - max(pb.x0, lb.x0)) > 1 \
                            and (min(pb.y1, lb.y1) - max(pb.y0, lb.y0)) > 1:
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
    return problems


def wrap(text: str, fig, fontsize: float, share: float = 0.95) -> str:
    """``text`` broken into lines that fit ``share`` of the figure's width at ``fontsize`` (points)."""
    import textwrap

    chars = max(20, int(fig.get_figwidth() * 72 * share / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(part, chars) for part in text.split("\n"))


def save_figure(fig, path: str | Path, dpi: int = 150) -> list[str]:
    """Save ``fig`` to ``path`` (parents created) after :func:`figure_problems`; problems are logged as warnings
    (a figure is still written) and returned, so tests can require none."""
    import matplotlib.pyplot as plt

    problems = figure_problems(fig)
    for p in problems:
        log.warning("%s: %s", Path(path).name, p)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return problems
