"""Freshness by contents: input digests that see a replaced file whatever its time stamps, read
regular files only, and the SR3 own-data spec that changes with the maps' contents."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np

from accelbench.core import digests
from accelbench.core.rule_context import RuleContext
from accelbench.experiments.sr3 import rules as sr3_rules


def _same_times(path, st) -> None:
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_file_rewritten_with_its_old_size_and_time_has_another_digest(tmp_path):
    f = tmp_path / "map.npy"
    f.write_bytes(b"a" * 100)
    before, st = digests.digest(f), f.stat()
    f.write_bytes(b"b" * 100)
    _same_times(f, st)  # cp -p, rsync -a, Snakemake's restore: times prove nothing
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    assert digests.digest(f) != before
    recorded = {"data": {"path": str(f), "sha256": before}}
    assert digests.changed(recorded) == [str(f)]
    assert digests.changed(digests.digests({"data": str(f), "none": None})) == []


def test_a_folder_digest_follows_contents_and_never_opens_a_fifo(tmp_path):
    folder = tmp_path / "maps"
    folder.mkdir()
    (folder / "a.npy").write_bytes(b"1" * 10)
    os.mkfifo(folder / "pipe.npy")  # opened for reading it would block a dry run for ever
    before = digests.digest(folder)
    assert digests.digest(folder) == before  # cached, and stable
    st = (folder / "a.npy").stat()
    (folder / "a.npy").write_bytes(b"2" * 10)
    _same_times(folder / "a.npy", st)
    assert digests.digest(folder) != before
    assert digests.digest(tmp_path / "missing") is None


def test_sr3_prepare_spec_changes_when_an_own_map_is_replaced(tmp_path, tiny_config, systems):
    """Overwriting a file in `sr3_scaling.data.folder` changed nothing ("Nothing to be done")."""
    folder = tmp_path / "maps"
    folder.mkdir()
    np.save(folder / "m.npy", np.arange(64.0).reshape(8, 8))
    cfg = dict(tiny_config)
    cfg["sr3_scaling"] = dict(cfg["sr3_scaling"], data={"source": "folder", "folder": str(folder)})
    rc = RuleContext(cfg, systems["cpu"], "results", tmp_path)
    wildcards = SimpleNamespace(scale="small")
    before = sr3_rules.prepare_spec(rc, wildcards)
    st = (folder / "m.npy").stat()
    np.save(folder / "m.npy", np.arange(64.0).reshape(8, 8)[::-1])  # the same size, then the same time
    _same_times(folder / "m.npy", st)
    after = sr3_rules.prepare_spec(rc, wildcards)
    assert after["data"] == before["data"] and after["folder_sha256"] != before["folder_sha256"]
    cfg["sr3_scaling"] = dict(cfg["sr3_scaling"], data={"source": "hubble"})  # the bundled image: spec unchanged
    assert "folder_sha256" not in sr3_rules.prepare_spec(
        RuleContext(cfg, systems["cpu"], "results", tmp_path), wildcards
    )
