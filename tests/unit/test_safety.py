"""No measured result is ever lost, and no input runs as a command: supersession, device locks, spec files,
schema patterns of names that become paths."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import stat
import time

import pytest

from accelbench import cli
from accelbench.core import harness, locks, results
from accelbench.core.config import schema_errors
from accelbench.errors import AccelbenchError
from conftest import REPO


def _finished(folder, text="old"):
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"v": text}))
    (folder / "kernels.csv").write_text(f"name\n{text}\n")
    (folder / "trace.json.gz").write_bytes(b"\x1f\x8b" + text.encode())
    os.chmod(folder / "result.json", 0o444)  # protected() as Snakemake leaves it


def test_superseding_moves_old_result_and_side_files_aside_on_success(tmp_path):
    folder = tmp_path / "results/cpu/unet3d_profile/whole_head/baseline"
    _finished(folder)
    out = folder / "result.json"
    with results.superseding(out, "cpu", "unet3d_profile") as moved:
        assert [p.name for p in folder.iterdir()] == [results.REDO]  # no stale side file; the journal of the redo
        out.write_text(json.dumps({"v": "new"}))
    assert json.loads(out.read_text()) == {"v": "new"}
    assert moved.parents[3].name == ".superseded" and moved.parts[-3:] == ("unet3d_profile", "whole_head", "baseline")
    assert moved.is_relative_to(tmp_path / "results/cpu/.superseded")
    assert json.loads((moved / "result.json").read_text()) == {"v": "old"}
    assert (moved / "kernels.csv").read_text() == "name\nold\n" and (moved / "trace.json.gz").exists()
    # aggregations glob */<experiment>/**/result.json: the superseded copy is not among them
    assert list((tmp_path / "results").glob("*/unet3d_profile/**/result.json")) == [out]


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_superseding_puts_old_result_back_when_the_job_fails(tmp_path, error):
    folder = tmp_path / "r/cpu/llm_quant/m/sensitivity"
    _finished(folder)
    out = folder / "result.json"
    with pytest.raises(type(error)):
        with results.superseding(out, "cpu", "llm_quant"):
            (folder / "trace.json.gz").write_bytes(b"\x1f\x8b trunc")  # a truncated side file of the failed job
            raise error
    assert json.loads(out.read_text()) == {"v": "old"}
    assert (folder / "trace.json.gz").read_bytes() == b"\x1f\x8bold" and (folder / "kernels.csv").exists()
    assert not (tmp_path / "r/cpu/.superseded").exists() or not any((tmp_path / "r/cpu/.superseded").rglob("*.json"))


def test_superseding_failed_first_run_leaves_no_side_file(tmp_path):
    out = tmp_path / "r/cpu/sr3_scaling/fp32/devices_1/result.json"
    with pytest.raises(OSError):
        with results.superseding(out, "cpu", "sr3_scaling"):
            out.parent.mkdir(parents=True)
            (out.parent / "samples.npz").write_bytes(b"PK partial")
            raise OSError(28, "No space left on device")
    assert list(out.parent.iterdir()) == []


def test_superseded_folder_needs_system_and_experiment(tmp_path):
    with pytest.raises(results.ResultError, match="does not lie under"):
        results.superseded_folder(tmp_path / "x/result.json", "cpu", "unet3d_profile")


def test_result_files_are_group_readable(tmp_path):
    old = os.umask(0o022)
    try:
        path = results.write_result(results.make_result("e", "ok", {}, {}, {}), tmp_path / "result.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_spec_file_is_read_and_its_hash_recorded(tmp_path, monkeypatch):
    digest = hashlib.sha256(b'{"a": 1}\n').hexdigest()
    spec = tmp_path / f"{digest[:16]}.json"  # content-addressed, as the workflow writes it
    spec.write_text('{"a": 1}\n')
    loaded, sha = harness.load_spec(str(spec))
    assert loaded == {"a": 1} and sha == hashlib.sha256(b'{"a": 1}\n').hexdigest()
    assert results.make_result("e", "ok", {}, {}, {}, spec_sha256=sha)["spec_sha256"] == sha
    assert "spec_sha256" not in results.make_result("e", "ok", {}, {}, {})
    assert harness.load_spec('{"inline": true}') == ({"inline": True}, None)
    with pytest.raises(AccelbenchError, match="spec file not found: .*nope.json"):
        harness.load_spec(str(tmp_path / "nope.json"))
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(AccelbenchError, match="must hold a JSON object"):
        harness.load_spec(str(tmp_path / "bad.json"))


def test_an_edited_spec_file_is_refused_by_the_job_and_written_anew_by_the_dag(tmp_path, monkeypatch):
    """`.snakemake/accelbench/spec/<hash>.json` with `eval_tokens` edited from 512 to 64: the job ran with 64 and
    the result counted as current (the staleness check hashed the file on disk). Now the job refuses a spec file
    whose bytes do not hash to its name (one line naming it), and the DAG's spec_path_of writes it anew, without
    following a link."""
    monkeypatch.chdir(tmp_path)
    path = harness.spec_path_of({"eval_tokens": 512})
    assert harness.load_spec(path)[0] == {"eval_tokens": 512}
    good = (tmp_path / path).read_bytes()
    (tmp_path / path).write_bytes(good.replace(b"512", b"64"))
    with pytest.raises(AccelbenchError) as err:
        harness.load_spec(path)
    assert str(err.value).startswith(f"spec file {path}: its contents (sha256 ") and "\n" not in str(err.value)
    assert "do not match its name" in str(err.value)
    assert harness.spec_path_of({"eval_tokens": 512}) == path and (tmp_path / path).read_bytes() == good
    spec, sha = harness.load_spec(path)
    assert spec == {"eval_tokens": 512} and sha == hashlib.sha256(good).hexdigest()
    victim = tmp_path / "victim.json"  # a link at the spec path: refused, its target untouched
    victim.write_text("theirs")
    (tmp_path / path).unlink()
    (tmp_path / path).symlink_to(victim)
    with pytest.raises(AccelbenchError, match="is a link"):
        harness.spec_path_of({"eval_tokens": 512})
    assert victim.read_text() == "theirs"


@pytest.mark.parametrize(
    "key, value",
    [("results_dir", "r;touch /tmp/x;y"), ("results_dir", "lab||x"), ("results_dir", "$(id)"), ("systems_dir", "a`b`")],
)
def test_schema_refuses_shell_metacharacters_in_path_settings(default_config, key, value):
    problems = schema_errors(dict(default_config, **{key: value}), REPO / "config/config.schema.yaml")
    assert any(f"config key '{key}'" in p and "does not match" in p for p in problems), problems


def test_schema_accepts_ordinary_paths(default_config):
    for value in ("results", "/scratch/my results/run-1", "../out_2.x"):
        assert schema_errors(dict(default_config, results_dir=value), REPO / "config/config.schema.yaml") == []


def test_schema_refuses_lora_preset_names_that_are_not_identifiers(default_config):
    cfg = json.loads(json.dumps(default_config))
    cfg["lora_finetune"]["presets"]["a b;c"] = {"source": "random"}
    problems = schema_errors(cfg, REPO / "config/config.schema.yaml")
    assert any("lora_finetune.presets" in p for p in problems), problems


def _hold(path_dir, ready, release):
    os.environ["ACCELBENCH_LOCK_DIR"] = path_dir
    with locks.device_lock("cpu", "results/cpu/holder/result.json"):
        ready.set()
        release.wait(30)


def test_device_lock_waits_and_says_who_holds_it(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path))
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        start = time.monotonic()
        import threading

        threading.Timer(1.5, release.set).start()
        with caplog.at_level("WARNING", logger="accelbench.core.locks"):
            with locks.device_lock("cpu", "results/cpu/waiter/result.json"):
                waited = time.monotonic() - start
        assert waited >= 1.0  # it really waited for the holder (not a timing claim: a lower bound from the timer)
        assert "holder/result.json" in caplog.text and "same devices (cpu)" in caplog.text
    finally:
        release.set()
        holder.join(30)


def test_lock_wait_is_printed_on_the_notice_fd_with_who_holds_it(tmp_path, monkeypatch):
    """The waiting job names the holder (pid, host, checkout, job) on the terminal fd the rules give it (3>&2)."""
    import socket

    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path))
    read, write = os.pipe()
    monkeypatch.setenv(locks.NOTICE_FD, str(write))
    monkeypatch.setattr(locks, "_notice_fd", None)  # restored after the test
    assert locks.claim_notice_fd() == write and locks.NOTICE_FD not in os.environ  # ranks do not inherit it
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        import threading

        threading.Timer(1.5, release.set).start()
        with locks.device_lock("cpu", "results/cpu/waiter/result.json"):
            pass
        os.close(write)
        text = os.read(read, 65536).decode()
    finally:
        release.set()
        holder.join(30)
    first = text.splitlines()[0]
    assert first.startswith("accelbench: results/cpu/waiter/result.json: waiting for devices cpu, held by "), text
    assert f"pid {holder.pid} on {socket.gethostname()}, checkout " in first, text
    assert "got " in text.splitlines()[-1], text
    # once, not every poll; at most 200 characters a line (the log keeps the whole line)
    assert len(text.splitlines()) == 2 and max(map(len, text.splitlines())) <= locks.TERMINAL_CHARS, text


def test_a_long_lock_wait_prints_one_line_then_dots(tmp_path, monkeypatch):
    """The wait is said once (at most 200 characters), then one dot per 2 x poll_s (a minute by default),
    not the whole line every poll (330 characters every 30 s before)."""
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path))
    read, write = os.pipe()
    monkeypatch.setenv(locks.NOTICE_FD, str(write))
    monkeypatch.setattr(locks, "_notice_fd", None)
    locks.claim_notice_fd()
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        import threading

        threading.Timer(4.5, release.set).start()
        with locks.device_lock("cpu", "results/cpu/waiter/result.json", poll_s=1.0):
            pass
        os.close(write)
        text = os.read(read, 65536).decode()
    finally:
        release.set()
        holder.join(30)
    lines = text.splitlines()
    assert len(lines) == 3 and "waiting for devices cpu" in lines[0] and "got " in lines[2], text
    assert set(lines[1]) == {"."} and 1 <= len(lines[1]) <= 3, text  # a dot every 2 s of a 4-5 s wait
    assert max(map(len, lines)) <= locks.TERMINAL_CHARS


def test_known_unsupported_job_does_not_wait_for_the_device_lock(tmp_path, monkeypatch, systems):
    """ncu on a CPU is `unsupported` before any measurement: the job writes it without taking the lock."""
    from accelbench.core import harness, registry

    def no_lock(*args, **kwargs):
        raise AssertionError("a job that only writes `unsupported` took the machine-wide lock")

    monkeypatch.setattr(locks, "device_lock", no_lock)
    out = tmp_path / "results/cpu/unet3d_ncu/whole_head/tf32/result.json"
    spec = {"system": systems["cpu"].to_dict(), "model": "whole_head", "configuration": "tf32", "ncu": {}}
    ctx = harness.JobContext(
        registry.get("unet3d_ncu"),
        spec,
        "spec.json",
        None,
        systems["cpu"],
        out,
        inputs={"profile_result": str(tmp_path / "missing/result.json")},
    )
    result = harness.run_job(ctx)
    assert result["status"] == "unsupported" and "Nsight Compute profiles NVIDIA GPUs" in result["reason"]
    assert json.loads(out.read_text())["status"] == "unsupported"


def test_device_set_names():
    assert locks.device_set("cpu", {}) == "cpu"
    assert locks.device_set("cuda", {"CUDA_VISIBLE_DEVICES": "0,1"}) == "cuda-0,1"
    assert locks.device_set("cuda", {}) == "cuda-all"
    assert locks.device_set("hpu", {"HABANA_VISIBLE_MODULES": "../x"}) == "hpu-___x"


def test_measurement_command_supersedes_on_success_and_restores_on_failure(
    tmp_path, default_config, systems, monkeypatch
):
    """Through `accelbench sr3-train` (the job records `unsupported` for an impossible device count, and fails
    when its torchrun fails): the guard of every measurement command, with the device lock in a private folder."""
    import importlib.util

    where = REPO / "workflow/accelbench/experiments/sr3/tests/test_sr3_scaling.py"  # the SR3 tests' spec builder
    module_spec = importlib.util.spec_from_file_location("sr3_scaling_tests", where)
    sr3_tests = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(sr3_tests)
    _spec = sr3_tests._spec

    from accelbench.cluster import multinode

    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.chdir(tmp_path)  # the launcher's rank folders (.snakemake/accelbench/ranks)
    out = tmp_path / "results/cpu/sr3_scaling/fp32/devices_100000/result.json"
    _finished(out.parent)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec(default_config, systems, 100_000)))
    assert cli.main(["sr3-train", "--spec", str(spec), "--data", "unused.npz", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["status"] == "unsupported" and sorted(p.name for p in out.parent.iterdir()) == [
        "result.json"
    ]
    [old] = (tmp_path / "results/cpu/.superseded").glob("*/sr3_scaling/fp32/devices_100000/result.json")
    assert json.loads(old.read_text()) == {"v": "old"} and (old.parent / "kernels.csv").exists()
    assert (tmp_path / "locks/accelbench-cpu.lock").exists()

    out = tmp_path / "results/cpu/sr3_scaling/fp32/devices_2/result.json"
    _finished(out.parent)
    spec.write_text(json.dumps(_spec(default_config, systems, 2)))

    def failing(cmd, env=None, **kw):  # torchrun fails after a rank wrote a partial side file
        assert "rank" in cmd
        (out.parent / "samples.npz").write_bytes(b"PK partial")
        return 1, ""

    monkeypatch.setattr(multinode, "run_tee", failing)
    assert cli.main(["sr3-train", "--spec", str(spec), "--data", "d.npz", "--out", str(out)]) == 2
    assert json.loads(out.read_text()) == {"v": "old"}
    assert sorted(p.name for p in out.parent.iterdir()) == ["kernels.csv", "result.json", "trace.json.gz"]


def test_side_files_appear_whole_or_not_at_all(tmp_path):
    target = tmp_path / "trace.json.gz"
    with pytest.raises(OSError):
        with results.atomic_path(target) as tmp:
            tmp.write_bytes(b"\x1f\x8b truncated")
            raise OSError(28, "No space left on device")
    assert list(tmp_path.iterdir()) == []
    with results.atomic_path(target) as tmp:
        assert tmp.name.endswith(".json.gz") and tmp.parent.samefile(tmp_path)  # readers keyed on the suffix still work
        tmp.write_bytes(b"whole")
    assert target.read_bytes() == b"whole" and [p.name for p in tmp_path.iterdir()] == ["trace.json.gz"]
