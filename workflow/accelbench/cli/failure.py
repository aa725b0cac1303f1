"""How a command ends when it fails: one line on stderr, never traceback frames unless asked for.

* An error the user can act on (:class:`accelbench.errors.AccelbenchError`: a bad key, file or argument) is one
  line naming it (a list of config problems: one line each), exit status 2.
* Anything else is one line too (the exception's type and first line), exit status 1; where it was raised while a
  result file was being read (an aggregation meeting a result that lacks a field this version reads: a result of an
  older accelbench), the line names that file and the field, and says the file is older than the code.
* The traceback is printed only with ``accelbench --verbose`` or ``ACCELBENCH_VERBOSE=1`` in the environment (what
  a Snakemake run passes down to its jobs); otherwise it is written to a file in the temporary folder that the line
  names, so a failed job's log still leads to it.
* Ctrl-C (SIGINT) ends the command with one line, then the process dies of SIGINT (as Python itself would), so the
  shell or Snakemake that started it sees an interrupted command, not an ordinary failure.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import traceback

from accelbench.cli.terminal import cap_text
from accelbench.errors import AccelbenchError

VERBOSE_ENV = "ACCELBENCH_VERBOSE"
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def cores(value: str) -> int:
    """``--threads``: a whole number >= 0 (else argparse's one-line usage error naming the option)."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of CPU cores (a whole number >= 0; 0 = all)")
    return n


def verbose(flag: bool, environ: dict | None = None) -> bool:
    """Tracebacks wanted: ``--verbose`` given, or ``ACCELBENCH_VERBOSE`` set to anything but ``''``/``0``."""
    value = (os.environ if environ is None else environ).get(VERBOSE_ENV, "")
    return bool(flag) or value not in ("", "0")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def result_being_read(exc: BaseException) -> dict | None:
    """The loaded result (a dict with ``_path``, as :func:`accelbench.aggregate.common.load_results` makes them)
    held by the innermost frame of ``exc``'s traceback that holds one, or None."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, dict) and isinstance(value.get("_path"), str) and "experiment" in value:
                found = value
        tb = tb.tb_next
    return found


def message(command: str, exc: BaseException) -> str:
    """The one line for ``exc`` (see the module docstring)."""
    if isinstance(exc, AccelbenchError):
        return f"accelbench {command}: error: {exc}"  # a list of problems keeps one line per problem
    result = result_being_read(exc) if isinstance(exc, (KeyError, TypeError, IndexError)) else None
    if result is not None:
        field = repr(exc.args[0]) if isinstance(exc, KeyError) and exc.args else "a field"
        git = ((result.get("environment") or {}).get("git") or {}).get("commit")
        when = (result.get("environment") or {}).get("timestamp_utc")
        made = ", ".join(v for v in (f"commit {str(git)[:7]}" if git else "", str(when or "")[:10]) if v)
        return (
            f"accelbench {command}: error: result {result['_path']} lacks {field}, which this version reads: an "
            f"older accelbench wrote it{f' ({made})' if made else ''}; measure it again or leave it out"
        )
    what = _first_line(exc)
    return f"accelbench {command}: error: {type(exc).__name__}{': ' + what if what else ''}"


def _saved_traceback(command: str, exc: BaseException) -> str | None:
    """The traceback of ``exc`` in a new ``<tmp>/accelbench-<command>-<random>.traceback.txt``; its path, or None."""
    try:  # a new file of our own (O_EXCL, 0600): never a name another user could have planted a link at
        fd, path = tempfile.mkstemp(prefix=f"accelbench-{command}-", suffix=".traceback.txt")
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def report(command: str, exc: BaseException, verbose_flag: bool = False) -> int:
    """Print ``exc`` as one line on stderr (after its traceback when :func:`verbose`); return the exit status. Ctrl-C:
    the process dies of SIGINT after its line, as Python would, so a calling shell or Snakemake stops too."""
    if isinstance(exc, KeyboardInterrupt):
        print(f"accelbench {command}: interrupted (Ctrl-C); no result was recorded for this job", file=sys.stderr)
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return INTERRUPTED  # where SIGINT is blocked
    line = message(command, exc)
    if verbose(verbose_flag):
        traceback.print_exception(exc, file=sys.stderr)
    elif not isinstance(exc, AccelbenchError):
        saved = _saved_traceback(command, exc)
        line += f" (traceback: {saved or f'--verbose or {VERBOSE_ENV}=1'})"
    print(cap_text(line), file=sys.stderr)  # a line built from user data (90,000 unexpected keys) stays readable
    return 2 if isinstance(exc, AccelbenchError) else 1
