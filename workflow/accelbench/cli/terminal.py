"""What a run prints on the terminal stays readable: every line at most :data:`MAX_CHARS` characters (shell
lines of the default run otherwise reach several hundred).

:func:`short_line` shortens one line: paths of the working directory or the repository become relative, a list
of paths after ``input:``/``output:``/``log:`` names their common folder once (``results/study_a/{table.csv,
table.md, ...}``), and what is still too long is cut with ``... (N more characters)``. :func:`shorten_snakemake`
applies it to what Snakemake's terminal handler writes (the Snakefile calls it), errors excepted (printed whole up
to :data:`MAX_ERROR_CHARS` a line, :func:`cap_line`: one raised while the Snakefile is read has no log file to fall
back on); the complete lines stay in Snakemake's log
file (``.snakemake/log/``) and in each job's log. Torch-free.

Example::

    short_line("    output: results/a/x.csv, results/a/y.csv")  # '    output: results/a/{x.csv, y.csv}'
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

MAX_CHARS = 200  # the longest line a run prints on the terminal
_LIST = re.compile(r"^(\s*(?:input|output|log|benchmark): )(.+)$")


def _relative(line: str, roots: tuple[str, ...]) -> str:
    for root in roots:
        if root and root != "/":
            line = line.replace(root.rstrip("/") + "/", "")
    return line


def _grouped(items: list[str], room: int) -> str:
    """``a/b/{x, y}`` for paths ``a/b/x, a/b/y`` with a common folder (the list as it was otherwise), in about
    ``room`` characters: the items that fit, then ``... (+N more)``."""
    try:
        folder = os.path.commonpath(items) if len(items) > 1 and all("/" in i for i in items) else ""
    except ValueError:  # absolute and relative paths mixed: no common folder
        folder = ""
    if folder in items:  # one of them is the folder itself
        folder = os.path.dirname(folder)
    names = [i[len(folder) + 1 :] for i in items] if folder else items
    shown: list[str] = []
    for k, name in enumerate(names):
        rest = f", ... (+{len(names) - k} more)"
        if shown and len(folder) + len(", ".join([*shown, name])) + len(rest) + 3 > room:
            shown.append(rest[2:])
            break
        shown.append(name)
    return f"{folder}/{{{', '.join(shown)}}}" if folder else ", ".join(shown)


def short_line(line: str, limit: int = MAX_CHARS, roots: tuple[str, ...] | None = None) -> str:
    """``line`` in at most ``limit`` characters (see the module docstring); ``roots``: folders whose paths become
    relative (default: the working directory and the repository)."""
    if len(line) <= limit:
        return line
    line = _relative(line, roots if roots is not None else (os.getcwd(), str(Path(__file__).resolve().parents[3])))
    m = _LIST.match(line)
    if m and len(line) > limit:
        line = m.group(1) + _grouped([i.strip() for i in m.group(2).split(", ")], limit - len(m.group(1)))
    if len(line) <= limit:
        return line
    tail = "... (000 more characters)"
    for _ in range(2):  # the count's digits change the tail's length
        tail = f"... ({len(line) - (limit - len(tail))} more characters)"
    return line[: limit - len(tail)] + tail


def short_text(text: str, limit: int = MAX_CHARS) -> str:
    """Every line of ``text`` through :func:`short_line`."""
    return "\n".join(short_line(line, limit) for line in text.split("\n"))


MAX_ERROR_CHARS = 2000  # the longest line of an error printed on the terminal (the point and the file stay in it)


def cap_line(line: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``line`` in at most ``limit`` characters: its head (where an error names its file or key) and its tail
    (where it says what to do) kept, the middle replaced by ``... (N characters left out) ...``. An error built
    from user data (90,000 unexpected config keys: one line of 1 MB) stays a line a terminal can show."""
    if len(line) <= limit:
        return line
    mark = " ... (0000000 characters left out) ... "
    for _ in range(2):  # the count's digits change the mark's length
        left_out = len(line) - (limit - len(mark))
        mark = f" ... ({left_out} characters left out) ... "
    head = (limit - len(mark)) * 2 // 3
    tail = limit - len(mark) - head
    return line[:head] + mark + line[len(line) - tail :]


def cap_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Every line of ``text`` through :func:`cap_line`."""
    return "\n".join(cap_line(line, limit) for line in text.split("\n"))


def _short_or_whole(text: str) -> str:
    """:func:`short_text`, or ``text`` unchanged should shortening fail: a message is never lost to it."""
    try:
        return short_text(text)
    except Exception:  # noqa: BLE001 - the terminal must get the line either way
        return text


def _for_terminal(record: logging.LogRecord, format_record) -> str:
    """A record as the terminal shows it: an error (level ERROR and up) whole up to :data:`MAX_ERROR_CHARS` a line
    (:func:`cap_text`: head and tail kept), every other one through :func:`short_text`. An error raised while the
    Snakefile is read reaches no ``.snakemake/log`` file (none exists yet): cutting it at 200 lost its point, e.g.
    "is a folder of the operating system" after a 180-character path."""
    text = format_record(record)
    return cap_text(text) if record.levelno >= logging.ERROR else _short_or_whole(text)


def shorten_snakemake(logger: logging.Logger | None = None) -> int:
    """Make the terminal handlers of Snakemake's logger (those writing to stdout/stderr, not its log file) write
    every line through :func:`short_line`. Returns how many handlers it wrapped (0 with a logger plugin such as
    ``--logger rich``, which formats on its own)."""
    if logger is None:
        from snakemake.logging import logger as snakemake_logger

        logger = snakemake_logger
    wrapped = 0
    for handler in logger.handlers:
        if not isinstance(handler, logging.StreamHandler) or isinstance(handler, logging.FileHandler):
            continue  # the log file keeps every line whole
        if getattr(handler, "_short_lines", False):
            continue
        handler.format = lambda record, original=handler.format: _for_terminal(record, original)
        handler._short_lines = True
        wrapped += 1
    return wrapped
