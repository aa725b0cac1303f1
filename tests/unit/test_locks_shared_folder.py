"""Untrusted ground, the shared lock folder. A folder another user made (and so can swap lock files in) is refused
in one line, a lock file swapped while being opened is refused, and the holder's text (anyone can write it) reaches
the terminal and the log with its control characters escaped."""

from __future__ import annotations

import fcntl
import logging
import os
import threading

import pytest

from accelbench.core import locks
from accelbench.errors import AccelbenchError

NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's folder: needs root to make it")
def test_a_lock_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    """`nobody` pre-created the folder (mode 700, its own): root's job B got the lock while A held it after nobody
    swapped the file. Now root refuses the folder before locking anything."""
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(folder))
    with pytest.raises(AccelbenchError) as err:
        with locks.device_lock("cpu", "root's job"):
            pass
    assert "owned by uid 65534" in str(err.value) and str(folder) in str(err.value)
    assert "\n" not in str(err.value)
    assert not (folder / "accelbench-cpu.lock").exists()


def test_a_group_writable_folder_without_sticky_bit_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(folder))
    with pytest.raises(AccelbenchError, match="writable by others without the sticky bit"):
        with locks.device_lock("cpu", "job"):
            pass
    folder.chmod(0o1777)  # /tmp-like: fine
    with locks.device_lock("cpu", "job"):
        pass


def test_a_lock_file_swapped_after_open_is_refused(tmp_path):
    path = tmp_path / "accelbench-cpu.lock"
    path.write_text("")
    fd = os.open(path, os.O_RDWR)
    try:
        other = tmp_path / "other"
        other.write_text("")
        os.replace(other, path)  # what the folder's owner did while root's job held the lock
        assert "swapped" in locks._file_problem(fd, path, os.lstat(tmp_path))
    finally:
        os.close(fd)


def test_holder_text_is_printed_with_control_characters_escaped(tmp_path, monkeypatch, caplog):
    """The holder's line went to root's terminal raw: `ESC[2J` cleared it and a red fake message followed."""
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path / "locks"))
    devices = "selftest"
    path = locks.lock_path(devices)
    path.parent.mkdir(mode=0o1777)
    path.write_text("\x1b[2J\x1b[31maccelbench: all results deleted\x1b[0m\r\n")
    written = []
    monkeypatch.setattr(locks, "terminal", lambda text, end="\n": written.append(text))
    holder = os.open(path, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    got = threading.Event()

    def job():
        with locks.device_lock(devices, "second", poll_s=3600):
            got.set()

    with caplog.at_level(logging.WARNING, logger=locks.__name__):
        thread = threading.Thread(target=job, daemon=True)
        thread.start()
        try:
            assert not got.wait(1.5)
        finally:
            os.close(holder)  # releases the flock
        thread.join(10)
    assert got.is_set()
    shown = "\n".join(written) + "\n".join(r.getMessage() for r in caplog.records)
    assert "\x1b" not in shown and "\r" not in shown
    assert "\\x1b[2J" in shown and "all results deleted" in shown


def test_a_hard_linked_lock_file_is_refused_and_its_other_file_kept(tmp_path, monkeypatch):
    """A hard link planted in the lock folder (`accelbench-cpu.lock` -> a file of the job's user) had that file
    emptied: the lock file passed the link check, then the holder's line truncated it. Now a lock file with another
    hard link is refused in one line naming it, and the other file keeps its bytes."""
    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs\n")
    (folder / "accelbench-cpu.lock").hardlink_to(victim)
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(folder))
    with pytest.raises(AccelbenchError) as err:
        with locks.device_lock("cpu", "job"):
            pass
    message = str(err.value)
    assert f"device lock {folder / 'accelbench-cpu.lock'} cannot be used (a file with 2 hard links" in message
    assert "\n" not in message and victim.read_text() == "theirs\n"
    (folder / "accelbench-cpu.lock").unlink()  # deleted, as the line says: the lock works again
    with locks.device_lock("cpu", "job"):
        pass
    assert victim.read_text() == "theirs\n"
