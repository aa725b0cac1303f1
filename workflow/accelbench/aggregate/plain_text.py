"""Text that reaches a figure from data (folder, device, model and configuration names) is plain text: a ``$`` in it
is escaped (``\\$``), so matplotlib never reads it as mathtext (``$\\foo$`` in a copied folder's name stopped the SR3
figure with a parse error). Tick labels that matplotlib's number formatters write (``$\\mathdefault{10^{2}}$`` on a
log axis) keep their mathtext: only category and fixed tick labels, titles, axis labels, legends and annotations are
escaped. :func:`accelbench.aggregate.figures.save_figure` calls :func:`plain_text` on every figure before drawing it.
"""

from __future__ import annotations

import re

from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter

_DOLLAR = re.compile(r"(?<!\\)\$")


def plain(text: str) -> str:
    """``text`` with every unescaped ``$`` escaped."""
    return _DOLLAR.sub(r"\\$", text)


def plain_text(fig) -> None:
    """Escape ``$`` in every text of ``fig`` that came from data (see the module docstring)."""
    ticks = set()
    for axes in fig.axes:
        for axis in (axes.xaxis, axes.yaxis):
            fmt = axis.get_major_formatter()
            if isinstance(fmt, FixedFormatter):
                fmt.seq = [plain(str(s)) for s in fmt.seq]
            elif type(fmt).__name__ == "StrCategoryFormatter":  # matplotlib.category: {category: position}
                fmt._units = {plain(str(k)): v for k, v in fmt._units.items()}
            for tick in axis.majorTicks + axis.minorTicks:
                ticks.update((id(tick.label1), id(tick.label2)))
    for text in fig.findobj(Text):
        if id(text) not in ticks and "$" in text.get_text():
            text.set_text(plain(text.get_text()))
