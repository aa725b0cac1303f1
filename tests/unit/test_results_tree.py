"""Untrusted ground: a link inside the results tree never leads a write, move, delete or re-timing out of it
(accelbench.core.tree), and a redo journal is honoured only when it proves itself (accelbench.core.results)."""

from __future__ import annotations

import json
import os
import re
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


SR3_RESULT = "results/cpu/sr3_scaling/faithful/devices_1/result.json"  # the one result of tiny.yaml's SR3 on cpu
THEIR_TIME = 1_700_000_000


@pytest.mark.parametrize("link", ["symlink", "hardlink", "own"])
def test_dry_run_re_times_nothing(tmp_path, tiny_config, link):
    """A result.json symlinked or hard-linked to a file outside plus a .redo.json: `snakemake -n` re-timed the outside
    file to 1970. On the real DAG (tiny config, SR3): a dry run re-times nothing, not even an own result; reading the
    Snakefile for real (`--list-rules`, no job run) marks the own result not current and leaves the linked file's
    time as it was. A symlinked result stops the plan in one line (no link is followed below results_dir)."""
    from dag import snakemake, write_config

    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    out = tmp_path / SR3_RESULT
    out.parent.mkdir(parents=True)
    victim = out if link == "own" else tmp_path / "victim.json"
    victim.write_text('{"v": "theirs"}')
    os.utime(victim, (THEIR_TIME, THEIR_TIME))
    if link != "own":
        (out.symlink_to if link == "symlink" else out.hardlink_to)(victim)
    (out.parent / results.REDO).write_text("{}")
    dry = snakemake(tmp_path, "-n", timeout=120)
    if link == "symlink":  # a linked result is refused before anything is planned (one line), nothing re-timed
        assert dry.returncode != 0
        lines = [ln for ln in (dry.stdout + dry.stderr).splitlines() if "is a link" in ln]
        assert len(lines) == 1 and lines[0].startswith(f"{SR3_RESULT} is a link"), dry.stderr[-3000:]
        assert victim.stat().st_mtime == THEIR_TIME and victim.read_text() == '{"v": "theirs"}'
        return
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "not current" in dry.stderr and SR3_RESULT in dry.stderr  # seen as stale: the marking was reached
    assert victim.stat().st_mtime == THEIR_TIME and victim.read_text() == '{"v": "theirs"}'
    run = snakemake(tmp_path, "--list-rules", timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert victim.stat().st_mtime == (results.NOT_CURRENT_MTIME if link == "own" else THEIR_TIME)
    assert victim.read_text() == '{"v": "theirs"}'


@pytest.mark.parametrize(
    "link", ["claims", "cpu/.superseded", "cpu/sr3_scaling/faithful", "cpu/sr3_scaling/.superseded"]
)
def test_link_on_the_way_of_an_output_stops_snakemake_in_one_line(tmp_path, tiny_config, link):
    """Snakemake itself creates an output's folders and deletes old outputs before a job, through links, before our
    code runs (`results/claims -> /etc`: 9 claims* files written into /etc). On the real DAG (tiny config, SR3), a
    link one or two levels below the results tree, on the way of a final output, or a `.superseded` at any depth:
    a dry run and a run stop while the Snakefile is read, rc != 0, one line naming the link; nothing outside."""
    from dag import snakemake, write_config

    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    outside = _outside(tmp_path)
    at = tmp_path / "results" / link
    at.parent.mkdir(parents=True)
    at.symlink_to(outside)
    for args in (("-n",), ()):
        proc = snakemake(tmp_path, *args, timeout=120)
        assert proc.returncode != 0, proc.stderr[-3000:]
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "is a link" in ln]
        assert len(lines) == 1, (proc.stdout + proc.stderr)[-3000:]
        assert re.fullmatch(  # the terminal shows paths below the working directory relative to it
            rf"results/{link} is a link \(to ({tmp_path}/)?outside\) inside the results tree results; refused, "
            r"nothing written, moved or deleted: replace the link by a folder or file of its own",
            lines[0],
        ), lines[0]
        assert sorted(p.name for p in outside.rglob("*")) == ["claims.csv"] and _snapshot(outside) == {
            "claims.csv": b"theirs\n"
        }
        assert not (tmp_path / "logs").exists()  # no job ran


def test_link_off_the_way_of_every_output_is_left_alone(tmp_path, tiny_config):
    """The control: a link three levels down in a copied-in system's folder, on no output's way and in no
    experiment's folder (where the DAG looks for results, tree.find_files), plans as before."""
    from dag import snakemake, write_config

    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    at = tmp_path / "results/lab/notes/notes"
    at.parent.mkdir(parents=True)
    at.symlink_to(_outside(tmp_path))
    dry = snakemake(tmp_path, "-n", timeout=120)
    assert dry.returncode == 0 and "is a link" not in dry.stderr, dry.stderr[-3000:]


def test_first_link_looks_two_levels_down_on_the_planned_way_and_for_superseded(tmp_path):
    root = tmp_path / "results"
    (root / "cpu/a/b/c").mkdir(parents=True)
    planned = [root / "cpu/a/b/c/result.json", root / "claims/claims.csv"]
    assert tree.first_link(root, planned) is None and tree.first_link(tmp_path / "absent", planned) is None
    (root / "cpu/a/b/c/result.json").symlink_to("/dev/null")  # the output itself: Snakemake would take it as done
    assert tree.first_link(root, planned) == root / "cpu/a/b/c/result.json"
    (root / "cpu/a/b/c/result.json").unlink()
    (root / "cpu/a/b/other").symlink_to("/")  # three levels down, on no planned way
    assert tree.first_link(root, planned) is None
    (root / "cpu/a/b/c/.superseded").symlink_to("/")
    assert tree.first_link(root, planned) == root / "cpu/a/b/c/.superseded"
    assert tree.first_link(root, planned, max_entries=3) is None  # bounded: the walk stops after 3 entries
    (root / "cpu/a/b/c/.superseded").unlink()
    os.rename(root / "cpu/a/b/c", tmp_path / "c")
    (root / "cpu/a/b/c").symlink_to(tmp_path / "c")  # on the way of a planned output
    assert tree.first_link(root, planned) == root / "cpu/a/b/c"
    (root / "cpu/x").symlink_to("/")  # two levels down
    assert tree.first_link(root, planned) == root / "cpu/x"
    with pytest.raises(tree.TreeError) as info:
        tree.refuse_links(root, planned)
    assert str(info.value).startswith(f"{root / 'cpu/x'} is a link (to /) inside the results tree {root}")


# --------------------------------------------------------------------------- writers below the results tree
AGGREGATIONS = [
    ("accelbench.aggregate.energy", "energy"),
    ("accelbench.experiments.llm_quant.tables", "study_b_quant"),
    ("accelbench.experiments.lora.tables", "study_b_lora"),
    ("accelbench.experiments.sr3.tables", "study_b_sr3"),
    ("accelbench.experiments.unet3d.tables", "study_a"),
    ("accelbench.experiments.unet3d_ncu.tables", "study_a"),
]


@pytest.mark.parametrize("module,name", AGGREGATIONS)
def test_aggregation_output_folder_that_is_a_link_is_refused_first(tmp_path, module, name):
    """`out_dir.mkdir(parents=True)` created folders through links (a dangling one: a bare FileExistsError)."""
    import importlib

    aggregate = importlib.import_module(module).aggregate
    (tmp_path / "results").mkdir()
    out_dir = tmp_path / "results" / name
    out_dir.symlink_to(tmp_path / "outside/new")
    with pytest.raises(tree.TreeError) as info:
        aggregate([], tmp_path / "no_reference.csv", out_dir)
    assert str(info.value).startswith(f"{out_dir} is a link (to {tmp_path / 'outside/new'})")
    assert not (tmp_path / "outside").exists()


def test_quantization_sensitivity_csv_linked_out_is_refused(tmp_path):
    """`llm_quant/tables.py` wrote sensitivity_layers.csv with `to_csv(path)`, through a link at that name."""
    from accelbench.experiments.llm_quant.tables import aggregate

    outside = _outside(tmp_path)
    out_dir = tmp_path / "results/study_b_quant"
    out_dir.mkdir(parents=True)
    (out_dir / "sensitivity_layers.csv").symlink_to(outside / "claims.csv")
    reference = Path(__file__).parents[2] / "resources/reference/study_b_quantization.csv"
    with pytest.raises(tree.TreeError, match="sensitivity_layers.csv is a link"):
        aggregate([], reference, out_dir)
    assert _snapshot(outside) == {"claims.csv": b"theirs\n"}
    (out_dir / "sensitivity_layers.csv").unlink()
    aggregate([], reference, out_dir)
    assert (out_dir / "sensitivity_submodules.csv").is_file() and not list(out_dir.glob(".partial*"))


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_overhead_csv_linked_out_is_refused(tmp_path, link):
    """`measure/overhead.py` appended rows (and rewrote an old header) through a link or a hard link."""
    from accelbench.measure import overhead

    outside = _outside(tmp_path)
    path = tmp_path / "bench/h.csv"
    path.parent.mkdir()
    (path.symlink_to if link == "symlink" else path.hardlink_to)(outside / "claims.csv")
    with pytest.raises(tree.TreeError, match=f"{path} is a "):
        overhead.append(str(path), {"experiment": "x"}, ["experiment", "case"])
    with pytest.raises(tree.TreeError, match=f"{path} is a "):
        overhead.append(str(path), {"experiment": "x"}, ["theirs"])  # the header as it is: no upgrade first
    assert _snapshot(outside) == {"claims.csv": b"theirs\n"}
    path.unlink()
    overhead.append(str(path), {"experiment": "x"}, ["experiment"])
    overhead.append(str(path), {"experiment": "y", "case": "c"}, ["experiment", "case"])  # header upgraded
    assert path.read_text() == "experiment,case\nx,\ny,c\n"
    row = {"experiment": "sr3", "case": "fp32", "devices": 1, "harness_ms": 1.0, "bare_ms": 1.0, "when": "t"}
    overhead.append(str(tmp_path / "bench/e.csv"), row)
    (tmp_path / "bench/e_efficiency.csv").symlink_to(outside / "claims.csv")
    with pytest.raises(tree.TreeError, match="e_efficiency.csv is a link"):
        overhead.efficiency(str(tmp_path / "bench/e.csv"))
    assert _snapshot(outside) == {"claims.csv": b"theirs\n"}


def test_kernel_table_and_config_reference_at_a_link_are_refused(tmp_path):
    """`measure/kernels.py` and `core/config_reference.py` wrote with `open(path, "w")`, through a link."""
    from types import SimpleNamespace

    from accelbench.core import config_reference
    from accelbench.measure.kernels import write_kernel_table

    outside = _outside(tmp_path)
    row = {"name": "k", "class": "gemm", "tensor_core": True, "calls": 1, "device_time_us": 2.0, "share": 1.0}
    summary = SimpleNamespace(table=[row])
    for name in ("kernels.csv", "configuration.md"):
        (tmp_path / name).symlink_to(outside / "claims.csv")
    with pytest.raises(tree.TreeError, match="kernels.csv is a link"):
        write_kernel_table(summary, tmp_path / "kernels.csv")
    with pytest.raises(tree.TreeError, match="configuration.md is a link"):
        config_reference.write(tmp_path / "configuration.md")
    assert _snapshot(outside) == {"claims.csv": b"theirs\n"}
    (tmp_path / "kernels.csv").unlink()
    write_kernel_table(summary, tmp_path / "kernels.csv")
    assert (tmp_path / "kernels.csv").read_text().splitlines()[1] == "k,gemm,True,1,2.0,1.0"


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


@pytest.mark.parametrize("doc", ["claims", "readme"])
def test_reference_runs_never_writes_through_a_linked_page(tmp_path, doc):
    """`accelbench reference-runs` refused a link at a run's README.md but overwrote the target of a `docs/claims.md`
    (or README.md, ARTIFACT.md) link. Now every page it writes is replaced at its own path or, a link, refused in one
    line naming it; the link's target keeps its bytes."""
    from accelbench.aggregate.reference_runs import BEGIN, END, update

    REPO = Path(__file__).resolve().parents[2]
    run = tmp_path / "reference_runs/h200-2026-12-01"
    (run / "results").mkdir(parents=True)
    (run / "run.yaml").write_text("date: 2026-12-01\nhardware: H200\nshort: H200\ncommit: a\ncommands: [x]\n")
    readme, claims = tmp_path / "README.md", tmp_path / "docs/claims.md"
    claims.parent.mkdir()
    victim = tmp_path / "victim.md"
    victim.write_text(f"theirs\n{BEGIN}\nold\n{END}\n")
    if doc == "claims":
        readme.write_text(f"# x\n{BEGIN}\nstale\n{END}\n")
        claims.symlink_to(victim)
    else:
        readme.symlink_to(victim)
        claims.write_text("old page\n")
    with pytest.raises(tree.TreeError) as err:
        update(tmp_path / "reference_runs", readme, reference_dir=REPO / "resources/reference", claims_doc=claims)
    linked = claims if doc == "claims" else readme
    assert str(err.value).startswith(f"{linked} is a link (to {victim})") and "\n" not in str(err.value)
    assert victim.read_text() == f"theirs\n{BEGIN}\nold\n{END}\n"


def test_result_files_are_found_without_following_a_link_at_any_depth(tmp_path):
    """The DAG found copied-in results with `glob`: a result.json linked to a file outside was hashed, validated and
    aggregated, and a linked folder four levels down was skipped with no word. Now `tree.find_files` refuses either
    in one line naming it, at every depth; dot folders are not entered."""
    root = tmp_path / "results"
    ok = root / "lab/sr3_scaling/fp32/devices_1/result.json"
    ok.parent.mkdir(parents=True)
    ok.write_text("{}")
    (root / "lab/sr3_scaling/result.json").write_text("{}")  # `**` as no folder
    (root / "lab/sr3_scaling/.superseded/x").mkdir(parents=True)
    (root / "lab/sr3_scaling/.superseded/x/result.json").write_text("{}")
    (root / "lab/unet3d_profile/a").mkdir(parents=True)
    pattern = ("*", "sr3_scaling", "**", "result.json")
    assert tree.find_files(root, pattern) == [
        root / "lab/sr3_scaling/fp32/devices_1/result.json",
        root / "lab/sr3_scaling/result.json",
    ]
    assert tree.find_files(tmp_path / "absent", pattern) == []
    outside = tmp_path / "victim"
    outside.mkdir()
    (outside / "v1.json").write_text("{}")
    (root / "lab/unet3d_profile/a/link").symlink_to(outside)  # on no searched way: left alone
    assert len(tree.find_files(root, pattern)) == 2
    for planted, target in (
        (root / "lab/sr3_scaling/fp32/devices_2/result.json", outside / "v1.json"),  # a linked result
        (root / "lab/sr3_scaling/fp32/devices_1/deeper", outside),  # a linked folder four levels down
        (root / "lab/sr3_scaling/bf16", outside),  # three
    ):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.symlink_to(target)
        with pytest.raises(tree.TreeError) as err:
            tree.find_files(root, pattern)
        assert str(err.value).startswith(f"{planted} is a link (to {target}) inside the results tree {root}")
        planted.unlink()


def test_a_result_read_through_a_link_is_refused_in_one_line(tmp_path):
    """validate_results and the aggregations read a result.json linked to /tmp/victim/v1.json as a result. Now the
    read (accelbench.core.results.read_json) refuses a link in one line naming it."""
    victim = tmp_path / "victim/v1.json"
    victim.parent.mkdir()
    victim.write_text("{}")
    out = tmp_path / "results/cpu/unet3d_profile/whole_head/baseline/result.json"
    out.parent.mkdir(parents=True)
    out.symlink_to(victim)
    with pytest.raises(ResultError) as err:
        results.read_json(out)
    assert str(err.value).startswith(f"corrupt result file {out}: a link") and "\n" not in str(err.value)
    from accelbench.core.validate import validate_files

    with pytest.raises(ResultError) as err:
        validate_files([out])
    assert f"  {out}: (file): a link; such a file is never followed" in str(err.value)


@pytest.mark.parametrize("odd", ["fifo", "dev-zero"])
def test_a_fifo_or_device_at_a_planned_output_is_refused_before_planning(tmp_path, odd):
    """A FIFO (or a link to /dev/zero) at this system's result path: `snakemake -n` took it as done and said
    nothing. Now refuse_links names it in one line (a link as a link, anything else not a plain file)."""
    root = tmp_path / "results"
    out = root / "cpu/sr3_scaling/faithful/devices_1/result.json"
    out.parent.mkdir(parents=True)
    if odd == "fifo":
        os.mkfifo(out)
    else:
        out.symlink_to("/dev/zero")
    with pytest.raises(tree.TreeError) as err:
        tree.refuse_links(root, [out, root / "claims/claims.csv"])
    want = f"{out} is a link (to /dev/zero)" if odd == "dev-zero" else f"{out} is not a plain file (a FIFO)"
    assert str(err.value).startswith(want) and "\n" not in str(err.value)
