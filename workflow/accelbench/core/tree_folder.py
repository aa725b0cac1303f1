"""A folder of a results tree held open (:class:`Folder`), reached from the tree's root one component at a time,
``openat``-style, with ``O_NOFOLLOW | O_DIRECTORY`` (:func:`folder`): a link anywhere below the root is refused with
one line naming it (:class:`TreeError`). Every method works on plain names at the held descriptor, following no
link. The ground :mod:`accelbench.core.tree` (which offers these names too) writes, moves and deletes on.

Linux and other POSIX systems with ``dir_fd`` support (every system accelbench runs on).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from accelbench.errors import AccelbenchError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class TreeError(AccelbenchError):
    """A write, move, delete or re-timing under a results tree was refused (a link, a hard-linked file, a file that
    is not a plain one); nothing was changed."""


def refuse_link(path: Path, root: Path) -> TreeError:
    """The one-line :class:`TreeError` refusing link ``path`` inside results tree ``root`` (naming where it leads)."""
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return TreeError(
        f"{path} is a link (to {target}) inside the results tree {root}; refused, nothing written, moved or deleted: "
        f"replace the link by a folder or file of its own"
    )


class Folder:
    """A folder of a results tree held open (``fd``); ``path`` is for messages and for callers that need a name.
    Every method works on plain names in this folder (no ``/``) at ``fd``, following no link."""

    def __init__(self, fd: int, path: Path, root: Path):
        self.fd, self.path, self.root = fd, path, root

    # ------------------------------------------------------------------ looking
    def _name(self, name: str) -> str:
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise TreeError(f"{self.path}: {name!r} is not a plain file name; refused")
        return name

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a link is not followed); None when absent."""
        try:
            return os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        return self.lstat(name) is not None

    def names(self) -> list[str]:
        """The entries of this folder, sorted."""
        return sorted(os.listdir(self.fd))

    def sub(self, name: str, create: bool = False) -> Folder:
        """The sub-folder ``name`` opened without following a link (created with ``create``); close it (``with``).

        Raises:
            TreeError: ``name`` is a link or not a folder.
            FileNotFoundError: absent and not ``create``.
        """
        path = self.path / name
        name = self._name(name)
        for _ in range(2):
            try:
                return Folder(os.open(name, _DIR_FLAGS, dir_fd=self.fd), path, self.root)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=self.fd)
            except OSError as exc:
                st = self.lstat(name)
                if st is not None and stat.S_ISLNK(st.st_mode):
                    raise refuse_link(path, self.root) from None
                if exc.errno == errno.ENOTDIR:
                    raise TreeError(f"{path} is not a folder inside the results tree {self.root}; refused") from None
                raise
        return Folder(os.open(name, _DIR_FLAGS, dir_fd=self.fd), path, self.root)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def proc_path(self, name: str) -> Path:
        """A path to ``name`` in this folder that reaches it through the held descriptor (``/proc/self/fd/<fd>/name``:
        no link of the tree is followed, however the tree changes), for a library that only takes a path (NumPy, the
        profiler); ``path / name`` where ``/proc`` is absent. Only this process may use it, while the folder is
        open."""
        proc = Path(f"/proc/self/fd/{self.fd}")
        return proc / self._name(name) if proc.is_dir() else self.path / name

    # ------------------------------------------------------------------ the checked file
    def _plain(self, name: str, what: str) -> int:
        """``name`` opened (no link followed), checked a plain file with no other hard link; returns the fd."""
        name = self._name(name)
        try:
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=self.fd
            )
        except OSError:
            st = self.lstat(name)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise refuse_link(self.path / name, self.root) from None
            raise
        st = os.fstat(fd)
        why = None
        if not stat.S_ISREG(st.st_mode):
            why = "not a plain file (a FIFO, device, socket or folder)"
        elif st.st_nlink > 1:
            why = f"a file with {st.st_nlink} hard links (the others may lie outside the results tree {self.root})"
        if why:
            os.close(fd)
            raise TreeError(f"{self.path / name} is {why}; refused to {what} it: move it away")
        return fd

    def utime(self, name: str, times: tuple[float, float] | None = None) -> None:
        """Set the access and modification times of plain file ``name`` (None: now); a link, a hard-linked file or
        anything but a plain file is refused (:class:`TreeError`), untouched."""
        fd = self._plain(name, "re-time")
        try:
            os.utime(fd, times)
        finally:
            os.close(fd)

    def sha256(self, name: str) -> str:
        """The sha256 (hex) of plain file ``name`` (no link followed, no other hard link)."""
        fd = self._plain(name, "hash")
        h = hashlib.sha256()
        try:
            while chunk := os.read(fd, 2**20):
                h.update(chunk)
        finally:
            os.close(fd)
        return h.hexdigest()

    def read_bytes(self, name: str, limit: int) -> bytes:
        """The bytes of plain file ``name`` (no link followed, no other hard link), at most ``limit``.

        Raises:
            TreeError: a link, not a plain file, hard-linked, or bigger than ``limit``.
        """
        fd = self._plain(name, "read")
        chunks, size = [], 0
        try:
            while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if len(data) > limit:
            raise TreeError(f"{self.path / name}: more than {limit} bytes; refused to read it: move it away")
        return data

    # ------------------------------------------------------------------ writing
    @contextlib.contextmanager
    def open_write(self, name: str, mode: str = "w", **kwargs) -> Iterator[IO]:
        """A file object to write file ``name`` through: a new temporary file in this folder, renamed to ``name`` at
        this folder's descriptor when the body succeeds, removed when it raises. A link or a hard-linked file at
        ``name`` is refused (:class:`TreeError`, one line naming it), never written through or replaced.
        Mode ``"w"``/``"wb"`` (``newline=`` etc. passed on)."""
        name = self._name(name)
        st = self.lstat(name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise refuse_link(self.path / name, self.root)
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise TreeError(f"{self.path / name} is a file with {st.st_nlink} hard links; refused to replace it")
        tmp = self._new_temp(name)
        try:
            with os.fdopen(os.open(tmp, _WRITE_FLAGS, 0o666, dir_fd=self.fd), mode, **kwargs) as fh:
                yield fh
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise

    @contextlib.contextmanager
    def open_append(self, name: str, mode: str = "a", **kwargs) -> Iterator[IO]:
        """A file object appending to file ``name`` (created when absent) in place: for a log or CSV that grows by
        rows. Opened without following a link (``O_NOFOLLOW``, never blocking on a FIFO); a link, a hard-linked file
        or anything but a plain file at ``name`` is refused (:class:`TreeError`, one line naming it), never written
        through. Mode ``"a"``/``"ab"`` (``newline=`` etc. passed on)."""
        name = self._name(name)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(name, flags, 0o666, dir_fd=self.fd)
        except OSError:
            st = self.lstat(name)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise refuse_link(self.path / name, self.root) from None
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise TreeError(
                    f"{self.path / name} is not a plain file; refused to append to it: move it away"
                ) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            why = "not a plain file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} hard links"
            raise TreeError(f"{self.path / name} is {why}; refused to append to it: move it away")
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.open_write(name, "wb") as fh:
            fh.write(data)

    def write_text(self, name: str, text: str) -> None:
        with self.open_write(name, "w", encoding="utf-8") as fh:
            fh.write(text)

    def _new_temp(self, name: str) -> str:
        return f".partial.{os.getpid()}.{os.urandom(4).hex()}.{name}"[:255]

    def temp_name(self, name: str) -> str:
        """A fresh temporary name for ``name`` in this folder (``.partial.<pid>.<random>.<name>``, same suffixes)."""
        return self._new_temp(self._name(name))

    # ------------------------------------------------------------------ moving and deleting
    def move(self, name: str, to: Folder, new_name: str | None = None) -> None:
        """Rename entry ``name`` of this folder to ``new_name`` (default ``name``) in folder ``to`` (the entry itself:
        a link is moved as a link, never followed)."""
        os.replace(self._name(name), to._name(new_name or name), src_dir_fd=self.fd, dst_dir_fd=to.fd)

    def remove(self, name: str) -> None:
        """Delete entry ``name``: a plain file with no other hard link, or a folder (with its contents, no link
        followed). A link, a hard-linked file, or a FIFO/device is refused (:class:`TreeError`), untouched."""
        st = self.lstat(name)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            raise refuse_link(self.path / name, self.root)
        if stat.S_ISDIR(st.st_mode):
            with self.sub(name) as sub:
                for each in sub.names():
                    sub.remove(each)
            os.rmdir(name, dir_fd=self.fd)
            return
        os.close(self._plain(name, "delete"))
        os.unlink(name, dir_fd=self.fd)

    def rmdir(self, name: str) -> None:
        os.rmdir(self._name(name), dir_fd=self.fd)


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _parts(rel: str | Path | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    parts = tuple(rel) if isinstance(rel, (tuple, list)) else Path(rel).parts
    if any(p in ("", ".", "..", "/") or "/" in p for p in parts):
        raise TreeError(f"{Path(*parts) if parts else rel}: not a path inside a results tree (no '..', not absolute)")
    return parts


def folder(root: str | Path, rel: str | Path | tuple[str, ...] | list[str] = (), create: bool = False) -> Folder:
    """The folder ``root/rel`` opened one component at a time below ``root`` without following a link (created with
    ``create``). Use it in ``with``.

    Raises:
        TreeError: a component below ``root`` is a link or not a folder (one line naming it).
        FileNotFoundError: a component is absent and not ``create``.
    """
    root = Path(root)
    if create:
        os.makedirs(root, exist_ok=True)
    top = Folder(os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)), root, root)
    here = top
    try:
        for part in _parts(rel):
            nxt = here.sub(part, create)
            here.close()
            here = nxt
    except BaseException:
        here.close()
        raise
    return here


def split(root: str | Path, path: str | Path) -> tuple[str, ...]:
    """The components of ``path`` below ``root`` (both as given, not resolved).

    Raises:
        TreeError: ``path`` does not lie below ``root``.
    """
    try:
        rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    except ValueError:
        raise TreeError(f"{path} does not lie inside the results tree {root}; refused") from None
    return _parts(rel) if rel.parts else ()
