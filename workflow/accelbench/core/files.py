"""The one bounded read of a file a user can reach: result files (this machine's, copied in, the reference runs'),
``--spec`` and ``--results-file`` files, configs, system, campaign and ``run.yaml`` files, redo journals.

:func:`read_bytes` reads a plain file only (a link to one is followed): never a FIFO (which would block even a dry
run), a device such as ``/dev/zero`` (which never ends), a socket or a folder; and at most ``limit`` bytes (a file
that grows past it while read is refused too). Every refusal is one line naming the file
(:class:`~accelbench.errors.AccelbenchError` or the caller's subclass), with ``.why`` (the same without the file)
and ``.missing`` (True when the file does not exist).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from accelbench.errors import AccelbenchError

MAX_BYTES = 256 * 2**20  # a result with its kernel tables is a few MB; a bigger file of these kinds is not one
MAX_TEXT_BYTES = 16 * 2**20  # configs, spec and list files, run.yaml, journals: kilobytes


def _refuse(error: type[AccelbenchError], what: str, path: Path, why: str, missing: bool = False) -> AccelbenchError:
    err = error(f"{what} not found: {path}" if missing else f"{what} {path}: {why}")
    err.why, err.missing = why, missing
    return err


def read_bytes(
    path: str | Path, what: str = "file", limit: int = MAX_BYTES, error: type[AccelbenchError] = AccelbenchError
) -> bytes:
    """The bytes of ``path``, read safely (see the module docstring).

    Args:
        path: the file (a link to a plain file is followed).
        what: what the file is, for the message (``"--spec file"``, ``"result file"``).
        limit: the most bytes it may have.
        error: the exception class raised.

    Raises:
        AccelbenchError: (``error``) missing, not a plain file, bigger than ``limit``, or unreadable; one line.
    """
    path = Path(path)
    try:
        st = os.stat(path)  # before opening: a device or FIFO is never opened
    except FileNotFoundError:
        raise _refuse(error, what, path, "not found", missing=True) from None
    except OSError as exc:
        raise _refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(error, what, path, "not a plain file (a FIFO, device, socket or folder); move it away")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # replaced by a FIFO since?
    except OSError as exc:
        raise _refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(error, what, path, "not a plain file (a FIFO, device, socket or folder); move it away")
        if st.st_size > limit:
            raise _refuse(error, what, path, f"{st.st_size} bytes, more than such a file has ({limit}); move it away")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(2**20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise _refuse(error, what, path, f"grew past {limit} bytes while read; move it away")
        return b"".join(chunks)
    except OSError as exc:
        raise _refuse(error, what, path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_text(
    path: str | Path, what: str = "file", limit: int = MAX_TEXT_BYTES, error: type[AccelbenchError] = AccelbenchError
) -> str:
    """:func:`read_bytes` as UTF-8 text (a file that is not UTF-8: one line naming it)."""
    data = read_bytes(path, what, limit, error)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise _refuse(error, what, Path(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def sha256(
    path: str | Path, what: str = "file", limit: int = MAX_BYTES, error: type[AccelbenchError] = AccelbenchError
) -> str:
    """The sha256 of :func:`read_bytes` (hex)."""
    return hashlib.sha256(read_bytes(path, what, limit, error)).hexdigest()


# Folders of the operating system that results are never written into (as root they could be): a result folder may
# not be `/`, one of these or lie below one, after following links ...
SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
)
# ... except these folders of users' own files: temporary files kept across reboots, homes under /var (Fedora
# Atomic: /home -> /var/home), source trees (a container's usual WORKDIR /usr/src/app)
USER_DIRS_IN_SYSTEM_DIRS = ("/var/tmp", "/var/home", "/usr/src", "/usr/local/src")


def os_folder(path: str | Path) -> str | None:
    """``path`` with every link followed (relative to the working directory) when that is ``/`` or lies in a folder
    of :data:`SYSTEM_DIRS` outside :data:`USER_DIRS_IN_SYSTEM_DIRS`; None for a folder of one's own."""
    resolved = os.path.realpath(path)

    def under(folder: str) -> bool:
        return resolved == folder or resolved.startswith(folder + "/")

    if resolved == "/" or (any(map(under, SYSTEM_DIRS)) and not any(map(under, USER_DIRS_IN_SYSTEM_DIRS))):
        return resolved
    return None
