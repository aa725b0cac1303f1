"""Reading one plain file of bounded size, the check under every read of a file a user can reach
(:mod:`accelbench.core.files` offers these names and the readers of NumPy, JSON and CSV built on them).

:func:`read_bytes` reads a plain file only (a link to one is followed): never a FIFO (which would block even a dry
run), a device such as ``/dev/zero`` (which never ends), a socket or a folder; and at most ``limit`` bytes (a file
that grows past it while read is refused too). Every refusal is one line naming the file
(:class:`~accelbench.errors.AccelbenchError` or the caller's subclass, built by :func:`refuse`), with ``.why`` (the
same without the file) and ``.missing`` (True when the file does not exist). :func:`open_binary` opens such a file
for readers that take a file object; :func:`read_text` decodes it as UTF-8; :func:`sha256` hashes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from accelbench.errors import AccelbenchError

MAX_BYTES = 256 * 2**20  # a result with its kernel tables is a few MB; a bigger file of these kinds is not one
MAX_TEXT_BYTES = 16 * 2**20  # configs, spec and list files, run.yaml, journals: kilobytes


def refuse(error: type[AccelbenchError], what: str, path: Path, why: str, missing: bool = False) -> AccelbenchError:
    """The one-line error (``error``) refusing file ``path`` (``what`` it is): ``.why`` (``why``, without the file)
    and ``.missing`` (``missing``: the message then says the file was not found) set on it, for the caller to raise."""
    err = error(f"{what} not found: {path}" if missing else f"{what} {path}: {why}")
    err.why, err.missing = why, missing
    return err


def _kind(mode: int) -> str:
    """What a file that is not a plain one is, for the message (``a FIFO``, ``a character device``)."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file of a known kind"


def _open_regular(path: Path, what: str, limit: int, error: type[AccelbenchError], follow: bool) -> int:
    """An open descriptor of plain file ``path`` of at most ``limit`` bytes (see :func:`read_bytes`)."""
    try:
        st = os.stat(path, follow_symlinks=follow)  # before opening: a device or FIFO is never opened
    except FileNotFoundError:
        raise refuse(error, what, path, "not found", missing=True) from None
    except OSError as exc:
        raise refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise refuse(error, what, path, "a link; such a file is never followed out of its folder (copy the file in)")
    if not stat.S_ISREG(st.st_mode):
        raise refuse(error, what, path, f"not a plain file ({_kind(st.st_mode)}); move it away")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: replaced by a FIFO since, the open does not wait for a writer
    except OSError as exc:
        raise refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(error, what, path, f"not a plain file ({_kind(st.st_mode)}); move it away")
        if st.st_size > limit:
            raise refuse(error, what, path, f"{st.st_size} bytes, more than such a file has ({limit}); move it away")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(
    path: str | Path,
    what: str = "file",
    limit: int = MAX_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> bytes:
    """The bytes of ``path``, read safely (see the module docstring).

    Args:
        path: the file (a link to a plain file is followed unless ``follow`` is False).
        what: what the file is, for the message (``"--spec file"``, ``"result file"``).
        limit: the most bytes it may have.
        error: the exception class raised.
        follow: False: a link is refused (files of a results tree copied in from elsewhere).

    Raises:
        AccelbenchError: (``error``) missing, not a plain file, bigger than ``limit``, or unreadable; one line.
    """
    path = Path(path)
    fd = _open_regular(path, what, limit, error, follow)
    try:
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(2**20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise refuse(error, what, path, f"grew past {limit} bytes while read; move it away")
        return b"".join(chunks)
    except OSError as exc:
        raise refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_binary(
    path: str | Path,
    what: str = "file",
    limit: int = MAX_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> Iterator[BinaryIO]:
    """``path`` opened for reading as a binary file object, checked as :func:`read_bytes` checks it (a plain file of
    at most ``limit`` bytes, opened without blocking): for readers that take a file object (``np.load``, images).
    The size is checked at the open; a reader that reads past it sees the file's end."""
    path = Path(path)
    fd = _open_regular(path, what, limit, error, follow)
    os.set_blocking(fd, True)  # a plain file: reads never wait
    with os.fdopen(fd, "rb") as fh:
        yield fh


def read_text(
    path: str | Path,
    what: str = "file",
    limit: int = MAX_TEXT_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> str:
    """:func:`read_bytes` as UTF-8 text (a file that is not UTF-8: one line naming it)."""
    data = read_bytes(path, what, limit, error, follow)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise refuse(error, what, Path(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def sha256(
    path: str | Path,
    what: str = "file",
    limit: int = MAX_BYTES,
    error: type[AccelbenchError] = AccelbenchError,
    follow: bool = True,
) -> str:
    """The sha256 of :func:`read_bytes` (hex; ``follow`` False: a link is refused)."""
    return hashlib.sha256(read_bytes(path, what, limit, error, follow)).hexdigest()
