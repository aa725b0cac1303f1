"""What every figure must say, in one place: series labels with their origin, hardware and scale, the sizes and
colours figures share, and :func:`save_figure`, which writes every figure the package draws after the figure checker
(:func:`accelbench.aggregate.figure_check.figure_problems`: text inside the canvas, no overlaps, units, a page's
size, one colour per series, no entry without data...; ``tests/unit/test_figures.py`` requires none). Inside
:func:`checked`, a figure with a problem fails the aggregation at its end (:class:`~accelbench.errors.DataError`).

Which runs a figure draws: :func:`device_of` names the hardware of a series without its run, and
:func:`best_per_hardware` picks, per hardware and class (faithful, ours), the one group that is best by a rank.

Series labels: :func:`series_label` gives ``"<origin>: <hardware>, <scale> scale[, details]"`` where origin is one of
``measured here``, ``reference run (<hardware>, <date>)`` or ``published (<source>)`` (:func:`published` builds the
last). :func:`origin_of` reads it from a result's provenance, so new origins plug in without touching the figures.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from matplotlib import colormaps
from matplotlib.colors import to_hex

from accelbench.aggregate.figure_check import figure_problems
from accelbench.aggregate.plain_text import plain_text
from accelbench.errors import DataError

log = logging.getLogger(__name__)

ORIGINS = ("published", "measured here", "reference run")
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


def page_inches(dpi: float) -> tuple[float, float]:
    """(width, height) in inches of the largest figure saved at ``dpi`` that fits a page: the figure checker's
    :data:`~accelbench.aggregate.figure_check.MAX_WIDTH_PX` x :data:`~accelbench.aggregate.figure_check.MAX_HEIGHT_PX`
    pixels. A figure whose panels grow with the results sizes itself from this."""
    from accelbench.aggregate.figure_check import MAX_HEIGHT_PX, MAX_WIDTH_PX

    return MAX_WIDTH_PX / dpi, MAX_HEIGHT_PX / dpi


def most_relevant_hardware(df, limit: int, hardware: str = "_hardware", scale: str = "scale"):
    """The rows of ``df`` (a pandas DataFrame) of at most ``limit`` hardware (column ``hardware``), so a figure's
    panels, bars and legend entries stay bounded however many systems' results are merged; returns ``(rows, names of
    the hardware left out)``. The hardware kept: those with paper-scale rows (column ``scale``: Study B's and Study
    A's workload) first, then those with the most rows, then by name. :func:`left_out_note` says what is left out."""
    if df.empty or df[hardware].nunique() <= limit:
        return df, []
    paper = df[scale].eq("paper") if scale in df else df[hardware].map(lambda _: False)
    order = sorted(
        df[hardware].unique(), key=lambda h: (not paper[df[hardware] == h].any(), -(df[hardware] == h).sum(), str(h))
    )
    keep = set(order[: max(0, limit)])
    return df[df[hardware].isin(keep)], [str(h) for h in order if h not in keep]


def left_out_note(names: list[str], what: str, where: str, shown: int = 2) -> str:
    """One sentence saying what a figure leaves out and where it is: ``"Not drawn: 3 more hardware (A; B; +1 more);
    every run: scaling.csv."`` (``what``: ``hardware``, ``results``...; ``where``: the file with every row); empty for
    nothing left out. At most ``shown`` names, so the note's length is bounded too."""
    if not names:
        return ""
    listed = "; ".join(names[:shown]) + (f"; +{len(names) - shown} more" if len(names) > shown else "")
    return f"Not drawn: {len(names)} more {what} ({listed}); every run: {where}."


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
