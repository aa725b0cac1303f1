"""The run's terminal, seen from inside a job: the descriptor the measurement rules' shell lines point at Snakemake's
stderr (fd 3, ``3>&2``) before sending the job's own output to its log. :func:`accelbench.core.locks.claim_notice_fd`
sets :data:`fd` when a command starts; :func:`terminal` writes there (lock waits, the progress of long loops), at most
:data:`TERMINAL_CHARS` characters a line. The lowest floor of the package: any module may print through it."""

from __future__ import annotations

import os

TERMINAL_CHARS = 200  # the longest line a job prints on the run's terminal (its log keeps what it said whole)
fd: int | None = None  # the run's terminal; None: nowhere (not run by the workflow, or in a rank)


def terminal(text: str, end: str = "\n") -> None:
    """``text`` on the run's terminal (:data:`fd`), nowhere without one; cut to :data:`TERMINAL_CHARS`."""
    if len(text) > TERMINAL_CHARS:
        text = text[: TERMINAL_CHARS - 3] + "..."
    if fd is not None:
        try:
            os.write(fd, f"{text}{end}".encode())
        except OSError:
            pass
