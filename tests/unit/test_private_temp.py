"""Untrusted ground: no predictable names in the shared temp folder. The traceback file of an unexpected error was
``<tmp>/accelbench-<command>-<pid>.traceback.txt``: a link another user planted there (hosts with
``fs.protected_symlinks=0``) made root write through it. The merged config schema is built per call, in a private
folder, and removed."""

from __future__ import annotations

import os
import tempfile

from accelbench.cli import failure
from accelbench.core import config


def test_the_traceback_file_never_follows_a_planted_link(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (tmp_path / f"accelbench-cmd-{os.getpid()}.traceback.txt").symlink_to(victim)  # the old, predictable name
    try:
        raise ValueError("boom")
    except ValueError as exc:
        saved = failure._saved_traceback("cmd", exc)
    assert victim.read_text() == "keep me\n"
    assert saved and "ValueError: boom" in open(saved).read() and not os.path.islink(saved)
    assert os.stat(saved).st_mode & 0o077 == 0  # private to its user


def test_the_merged_schema_is_private_and_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with config.merged_schema_file(config.CONFIG_SCHEMA) as path:
        assert path.is_file() and os.stat(path.parent).st_mode & 0o077 == 0
    assert list(tmp_path.iterdir()) == []
