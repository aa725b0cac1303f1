"""Machine-wide lock of a device set: two measurement jobs never time on the same cores or accelerators at once.

Snakemake schedules the jobs of one run so that they do not overlap (each measurement job asks for every core), but
two runs in one folder with different targets, or two checkouts on one machine, know nothing of each other. Every
measurement command (``unet3d-profile``, ``unet3d-ncu``, ``sr3-train``, ``lora-finetune``, ``llm-quant``) therefore
holds an exclusive ``fcntl.flock`` on ``<lock dir>/accelbench-<device set>.lock`` while it runs; a second one says who
holds it (pid, host, checkout, job) and waits, saying so in its log and on the terminal of the run (:func:`notice`).
The lock dir is the fixed folder :data:`LOCK_DIR` (``/var/tmp/accelbench-locks``: per machine, also on a cluster node;
kept across reboots; Apptainer binds ``/var/tmp`` into its containers by default, so jobs in and out of the image
share it), never ``TMPDIR`` (two jobs with different ``TMPDIR`` would both hold the ``cpu`` lock). Only the variable
``ACCELBENCH_LOCK_DIR`` moves it, on purpose (every job of the machine must then set the same). The folder is made
sticky and world-writable (mode 1777, like ``/tmp``) and each lock file mode 0666, so that a user after root (or
after another user) can take the lock; a lock file is opened without following links and without truncation, and
must be a plain file with no other hard link (``st_nlink`` 1: one planted in a shared folder as a hard link to
another file would have that file emptied when the holder's line is written), else it is refused in one line. The
kernel drops the lock when the holder exits, killed or not: no stale lock survives.

Device set: ``cpu`` (the whole host), ``cuda-<ids>``, ``hpu-<ids>``: the ids of ``CUDA_VISIBLE_DEVICES`` /
``HABANA_VISIBLE_MODULES`` as a sorted set (``1,0`` and ``0, 1`` are ``0,1``), or ``all`` when the variable is unset.
Overlapping sets exclude each other: a job holds ``accelbench-<backend>-<id>.lock`` of each of its devices
exclusively and ``accelbench-<backend>.lock`` shared, while a job on ``all`` holds ``accelbench-<backend>.lock``
exclusively; disjoint sets measure at once. Ids are compared as written: an index and the UUID of the same GPU are
not recognised as one device (use one form on a machine).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from accelbench import backends, terminal_fd
from accelbench.errors import AccelbenchError
from accelbench.terminal_fd import TERMINAL_CHARS, terminal  # noqa: F401  (TERMINAL_CHARS re-exported)

log = logging.getLogger(__name__)


def device_set(backend: str, environ: dict | None = None) -> str:
    """Name of the device set a job on ``backend`` measures on (see the module docstring)."""
    env = os.environ if environ is None else environ
    ops = backends.get(backend)
    if not ops.accelerator:
        return ops.name
    visible = env.get(ops.visible_devices_var) if ops.visible_devices_var else None
    ids = sorted(
        {re.sub(r"[^A-Za-z0-9_-]", "_", v.strip()) for v in (visible or "").split(",") if v.strip()},
        key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v),
    )
    return f"{ops.name}-{','.join(ids) if ids else 'all'}"


LOCK_DIR = Path("/var/tmp/accelbench-locks")
LOCK_DIR_VAR = "ACCELBENCH_LOCK_DIR"


def lock_dir() -> Path:
    """:data:`LOCK_DIR`, or ``$ACCELBENCH_LOCK_DIR`` where set (not ``TMPDIR``: see the module docstring)."""
    return Path(os.environ.get(LOCK_DIR_VAR) or LOCK_DIR)


def lock_path(devices: str) -> Path:
    return lock_dir() / f"accelbench-{devices}.lock"


def _lock_files(devices: str) -> list[tuple[Path, int]]:
    """(lock file, flock mode) pairs of a device set, in a fixed order (see the module docstring)."""
    name, _, ids = devices.partition("-")
    if not ids:
        return [(lock_path(name), fcntl.LOCK_EX)]
    if ids == "all":
        return [(lock_path(name), fcntl.LOCK_EX)]
    return [(lock_path(name), fcntl.LOCK_SH)] + [(lock_path(f"{name}-{i}"), fcntl.LOCK_EX) for i in ids.split(",")]


def _folder_problem(st: os.stat_result) -> str | None:
    """Why a lock folder with this ``lstat`` cannot be trusted, or None: a link; owned by a user other than root or
    this process's; writable by group or others without the sticky bit (anyone could swap a lock file held by a job).
    """
    if stat.S_ISLNK(st.st_mode):
        return "a link, not a folder"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by uid {st.st_uid}, neither root nor this user ({os.geteuid()}): that user can swap lock files"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return f"mode {stat.S_IMODE(st.st_mode):o}: writable by others without the sticky bit (make it 1777)"
    return None


def _shared_folder(folder: Path) -> os.stat_result:
    """Make the lock folder (mode 1777 when this process makes it; its parents as the umask says); its ``lstat``.

    Raises:
        OSError: the folder cannot be trusted (:func:`_folder_problem`).
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()
        os.chmod(folder, 0o1777)  # sticky and world-writable: every user's jobs lock here, none removes another's file
    except FileExistsError:
        pass  # made before (or by another job meanwhile)
    st = os.lstat(folder)
    problem = _folder_problem(st)  # e.g. planted in /var/tmp by another user: it could swap the files we lock
    if problem:
        raise OSError(0, f"{folder} is {problem}")
    return st


def _file_problem(fd: int, path: Path, folder: os.stat_result) -> str | None:
    """Why the opened lock file ``fd`` cannot be trusted, or None: not a plain file; a file with another hard link
    (the holder's line is written into it: the other name's file would be overwritten); no longer the file at
    ``path`` (swapped between open and check); owned by a user other than root or this one outside a sticky
    root-owned folder."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "not a plain file"
    try:
        now = os.lstat(path)
    except OSError:
        return "removed while being opened"
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        return "swapped for another file while being opened"
    if st.st_nlink > 1:
        return f"a file with {st.st_nlink} hard links (another name's file would be overwritten): delete it"
    shared = folder.st_uid == 0 and folder.st_mode & stat.S_ISVTX  # /tmp-like: only a file's owner can swap it
    if st.st_uid not in (0, os.geteuid()) and not shared:
        return f"owned by uid {st.st_uid} in a folder that is not sticky and root's"
    return None


def _open(path: Path) -> int:
    """The lock file ``path``, opened read-write without following a link (made mode 0666 if missing), checked
    (:func:`_file_problem`)."""
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK
    try:
        folder = _shared_folder(path.parent)
        try:
            fd = os.open(path, flags)  # no O_CREAT on an existing file: protected_regular refuses that to others
        except FileNotFoundError:
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
                os.fchmod(fd, 0o666)  # whatever the umask: a user after root (or another user) can take it too
            except FileExistsError:
                fd = os.open(path, flags)
        problem = _file_problem(fd, path, folder)
        if problem:
            os.close(fd)
            raise OSError(0, problem)
        return fd
    except OSError as exc:
        raise AccelbenchError(
            f"device lock {path} cannot be used ({exc.strerror or exc}); make {path.parent} a folder of root or yours, "
            f"mode 1777, or set {LOCK_DIR_VAR} to one, the same for all measurement jobs of this machine"
        ) from None


def printable(text: str) -> str:
    """``text`` with control characters (escape sequences, newlines, carriage returns) shown as ``\\x1b``-style
    escapes: lock-holder text is written by whoever holds the lock and must not drive the reader's terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


NOTICE_FD = "ACCELBENCH_NOTICE_FD"
_notice_fd: int | None = None


def claim_notice_fd(environ: dict | None = None) -> int | None:
    """Take over the descriptor named by ``$ACCELBENCH_NOTICE_FD`` (called once when a command starts; the workflow
    sets 3, and the measurement rules' shell lines point fd 3 at Snakemake's stderr, ``3>&2``, before sending the
    job's own output to its log). The variable is removed, so that processes this one starts (ranks, ncu) never
    write to whatever their own fd 3 is. Returns the descriptor, or None (not set, or not open)."""
    global _notice_fd
    env = os.environ if environ is None else environ
    fd = env.pop(NOTICE_FD, "")
    _notice_fd = None
    if fd.isdigit():
        try:
            os.fstat(int(fd))
            _notice_fd = int(fd)
        except OSError:
            pass
    terminal_fd.fd = _notice_fd  # where notices and progress lines go (accelbench.terminal_fd.terminal)
    return _notice_fd


def notice(message: str) -> None:
    """Log ``message`` and print it where the user sees it: the terminal of the run (:func:`claim_notice_fd`), or
    only the log where none was given."""
    log.warning(message)
    terminal(f"accelbench: {message}")


@contextlib.contextmanager
def device_lock(devices: str, what: str, poll_s: float = 30.0) -> Iterator[Path]:
    """Hold the machine-wide lock of ``devices`` while the body runs; wait for it (saying why) if another job holds
    an overlapping set.

    Args:
        devices: a :func:`device_set` name.
        what: this job, written into the lock files for whoever waits (e.g. the result path).
        poll_s: seconds between the "still waiting" lines of the log; the terminal gets one line, then a dot every
            ``2 * poll_s`` seconds.

    Raises:
        AccelbenchError: the lock folder cannot be used (one line naming it and ``ACCELBENCH_LOCK_DIR``).
    """
    files = _lock_files(devices)
    fds = [(_open(path), mode, path) for path, mode in files]
    try:
        waited = 0.0
        while True:
            held, blocked = [], None
            for fd, mode, path in fds:  # all or none: never hold some while waiting for the others
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    held.append(fd)
                except BlockingIOError:
                    blocked = (fd, path)
                    break
            if blocked is None:
                break
            for fd in held:
                fcntl.flock(fd, fcntl.LOCK_UN)
            if waited == 0 or waited % poll_s < 1:  # the log: every poll_s; the terminal: once, then a dot a minute
                holder = printable(os.pread(blocked[0], 4096, 0).decode(errors="replace").strip()) or "another process"
                message = (
                    f"{what}: waiting {waited:.0f} s for {blocked[1]}: {holder} measures on the same devices "
                    f"({devices}); timings would be disturbed"
                )
                if waited == 0:
                    notice(f"{what}: waiting for devices {devices}, held by {holder} (a dot a minute)")
                log.warning(message)
            if waited and waited % (2 * poll_s) < 1:  # a dot a minute at the default poll_s
                terminal(".", end="")
            time.sleep(1.0)
            waited += 1.0
        note = (
            f"pid {os.getpid()} on {socket.gethostname()}, checkout {os.getcwd()} ({what}) since "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
        ).encode()
        for fd, mode, _ in fds:
            if mode == fcntl.LOCK_EX:
                os.ftruncate(fd, 0)
                os.pwrite(fd, note, 0)
        if waited:
            terminal("", end="\n" if waited >= 2 * poll_s else "")  # ends the line of dots
            notice(f"{what}: got {files[-1][0]} after {waited:.0f} s")
        yield files[-1][0]
    finally:
        for fd, mode, _ in fds:
            if mode == fcntl.LOCK_EX and "note" in locals():
                os.ftruncate(fd, 0)  # no stale holder line for whoever waits on a shared lock next
            os.close(fd)  # releases the flocks
