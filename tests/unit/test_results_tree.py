"""Issue 56, causes A and B: a link inside the results tree never leads a write, move, delete or re-timing out of it
(accelbench.core.tree), and a redo journal is honoured only when it proves itself (accelbench.core.results)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from accelbench.core import results, tree
from accelbench.errors import ResultError


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _finished(tmp_path: Path) -> Path:
    out = tmp_path / "results/cpu/sr3_scaling/faithful/devices_1/result.json"
    out.parent.mkdir(parents=True)
    out.write_text('{"v": "old"}')
    (out.parent / "samples.npz").write_bytes(b"PK old")
    return out


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "claims.csv").write_text("theirs\n")
    return outside


def test_claims_folder_linked_out_is_refused_and_writes_nothing_there(tmp_path):
    """`results/claims -> /etc`: `snakemake -R claims` wrote 9 claims* files into /etc as root."""
    from accelbench.aggregate.common import write_table

    outside = _outside(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results/claims").symlink_to(outside)
    with pytest.raises(tree.TreeError) as info:
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "results/claims/claims", "caption")
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / 'results/claims'} is a link (to {outside})") and "\n" not in msg
    assert _snapshot(outside) == {"claims.csv": b"theirs\n"}


def test_figure_into_a_linked_out_folder_is_refused(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from accelbench.aggregate.figures import save_figure

    outside = _outside(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results/study_a").symlink_to(outside)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    with pytest.raises(tree.TreeError, match="is a link"):
        save_figure(fig, tmp_path / "results/study_a/fig.png")
    assert _snapshot(outside) == {"claims.csv": b"theirs\n"}
    (tmp_path / "results/study_a").unlink()  # a folder of its own: the figure is written whole, no temp left
    save_figure(fig, tmp_path / "results/study_a/fig.png")
    assert [p.name for p in (tmp_path / "results/study_a").iterdir()] == ["fig.png"]
    assert (tmp_path / "results/study_a/fig.png").read_bytes()[:4] == b"\x89PNG"


def test_superseded_folder_linked_out_is_refused_and_nothing_moves(tmp_path):
    """`results/cpu/.superseded` linked out: superseded results were moved outside the tree."""
    out = _finished(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "results/cpu/.superseded").symlink_to(outside)
    before = _snapshot(out.parent)
    with pytest.raises(tree.TreeError, match=r"\.superseded is a link"):
        with results.superseding(out, "cpu", "sr3_scaling"):
            out.write_text("new")
    assert _snapshot(out.parent) == before and _snapshot(outside) == {}


def test_result_folder_swapped_for_a_link_during_the_job_writes_nothing_outside(tmp_path):
    """`results/cpu` swapped for a link while `sr3_train` ran: result.json and samples.npz were written outside."""
    out = _finished(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "results"
    with results.atomic_path(out.with_name("samples.npz"), root=root) as tmp:
        os.rename(root / "cpu", tmp_path / "cpu_aside")  # the swap, after the job opened its folder
        (root / "cpu").symlink_to(outside)
        tmp.write_bytes(b"PK new")  # reaches the folder the job opened, not the link
    with pytest.raises(tree.TreeError, match=f"{root / 'cpu'} is a link"):
        results.write_result({"v": "new"}, out, overwrite=True, root=root)
    assert _snapshot(outside) == {}
    assert (tmp_path / "cpu_aside/sr3_scaling/faithful/devices_1/samples.npz").read_bytes() == b"PK new"


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_marking_a_linked_result_not_current_re_times_nothing_outside(tmp_path, link):
    """A result.json symlinked or hard-linked to a file outside plus a .redo.json: `snakemake -n` re-timed the
    outside file to 1970 (common.smk stale_results -> mark_current)."""
    out = _finished(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs")
    os.utime(victim, (1_700_000_000, 1_700_000_000))
    out.unlink()
    (out.symlink_to if link == "symlink" else out.hardlink_to)(victim)
    (out.parent / results.REDO).write_text("{}")
    results.mark_current(out, False, root=tmp_path / "results")
    assert victim.stat().st_mtime == 1_700_000_000
    results.mark_current(out.with_name("samples.npz"), False, root=tmp_path / "results")  # a plain file still is
    assert out.with_name("samples.npz").stat().st_mtime == results.NOT_CURRENT_MTIME


def test_dry_run_does_not_mark_results(tmp_path):
    """A dry run changes nothing on disk: the DAG's stale_results marks only outside `snakemake -n`."""
    text = (Path(__file__).parents[2] / "workflow/rules/common.smk").read_text()
    call = text.index("mark_current(target, is_current, root=RESULTS)")
    assert "if not DRY_RUN:" in text[call - 200 : call]
    assert 'DRY_RUN = bool(getattr(workflow.output_settings, "dryrun", False))' in text


CAUSE_B = {"moved_to": "../../../.superseded/20260101T000000Z/sr3_scaling/faithful/devices_1", "files": []}


@pytest.mark.parametrize("extra", [{}, {"version": 2, "result": "cpu/sr3_scaling/faithful/devices_1/result.json"}])
def test_cause_b_journal_deletes_nothing(tmp_path, extra):
    """The planted journal of cause B, with its empty folder present, deleted result.json and samples.npz for good."""
    out = _finished(tmp_path)
    (tmp_path / "results/cpu/.superseded/20260101T000000Z/sr3_scaling/faithful/devices_1").mkdir(parents=True)
    journal = out.parent / results.REDO
    journal.write_text(json.dumps({**CAUSE_B, **extra}))
    before = _snapshot(tmp_path / "results")
    with pytest.raises(ResultError) as info:
        results.recover(out, "cpu", "sr3_scaling")
    assert str(info.value).startswith(f"{journal}: refused: ") and "\n" not in str(info.value)
    assert _snapshot(tmp_path / "results") == before


def test_journal_whose_files_do_not_match_their_digest_is_refused(tmp_path):
    """A journal in the new format naming a superseded folder that holds other bytes than it records."""
    out = _finished(tmp_path)
    moved = tmp_path / "results/cpu/.superseded/20260101T000000Z/sr3_scaling/faithful/devices_1"
    moved.mkdir(parents=True)
    (moved / "result.json").write_text('{"v": "planted"}')
    record = {
        "version": 2,
        "result": "cpu/sr3_scaling/faithful/devices_1/result.json",
        "moved_to": "cpu/.superseded/20260101T000000Z/sr3_scaling/faithful/devices_1",
        "files": {"result.json": "0" * 64},
    }
    (out.parent / results.REDO).write_text(json.dumps(record))
    before = _snapshot(tmp_path / "results")
    with pytest.raises(ResultError, match="with the sha256 the journal records"):
        results.recover(out, "cpu", "sr3_scaling")
    assert _snapshot(tmp_path / "results") == before


def test_reference_run_readme_link_is_refused(tmp_path):
    """A reference run's README.md linked to a file: `accelbench reference-runs` overwrote that file."""
    from accelbench.aggregate.reference_runs import update

    run = tmp_path / "reference_runs/h200-2026-12-01"
    (run / "results").mkdir(parents=True)
    (run / "run.yaml").write_text("date: 2026-12-01\nhardware: H200\nshort: H200\ncommit: a\ncommands: [x]\n")
    victim = tmp_path / "victim.md"
    victim.write_text("theirs")
    (run / "README.md").symlink_to(victim)
    with pytest.raises(tree.TreeError, match=f"{run / 'README.md'} is a link"):
        update(tmp_path / "reference_runs", tmp_path / "README.md")
    assert victim.read_text() == "theirs"
