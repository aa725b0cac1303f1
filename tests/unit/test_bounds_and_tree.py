"""Hostile inputs and faults, round three: every read of a file a user can reach is bounded
through one helper, the device lock folder is fixed, and nothing outside the results tree is touched (as root: the
CI user). Each case fails before its fix."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fake_results as fr

SCHEMA = Path(__file__).resolve().parents[2] / "config/config.schema.yaml"

BOMB = """date: 2026-12-01
hardware: H200
short: H200
commit: abc
commands: [x]
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
"""


def _python(code: str, *args: str, timeout: float = 20, **kw) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with a time limit: a read that blocks fails the test instead of hanging it."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, check=False, **kw
    )


def _hostile(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"{kind}.json"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev_zero":
        p.symlink_to("/dev/zero")
    else:  # a plain file past the limit (sparse: no disk used)
        with open(p, "wb") as fh:
            fh.truncate(300 * 2**20)
    return p


# --------------------------------------------------------------------------- 5: every read bounded, one helper
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge"])
def test_bounded_read_refuses_fifo_device_and_huge_file_with_one_line(tmp_path, kind):
    from accelbench.core import files
    from accelbench.errors import DataError

    p = _hostile(tmp_path, kind)
    t = time.perf_counter()
    with pytest.raises(DataError) as info:
        files.read_bytes(p, "--results-file", error=DataError)
    assert time.perf_counter() - t < 2
    msg = str(info.value)
    assert msg.startswith(f"--results-file {p}: ") and "\n" not in msg
    assert ("not a plain file" in msg) if kind != "huge" else ("more than such a file has" in msg)
    (tmp_path / "ok.json").write_text("[1]")
    assert files.read_text(tmp_path / "ok.json") == "[1]"


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_results_file_and_spec_that_would_hang_are_one_line(tmp_path, kind):
    """`--results-file /dev/zero` ran out of memory and a FIFO `--spec` hung for ever: now one line each."""
    p = _hostile(tmp_path, kind)
    proc = _python("import sys; from accelbench.cli import main; sys.exit(main())", "validate-results",
                   "--results-file", str(p), "--out", str(tmp_path / "v.json"))  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--results-file {p}: unreadable list of result files: not a plain file" in proc.stderr
    assert "Traceback" not in proc.stderr
    code = "import sys\nfrom accelbench.core.harness import load_spec\n"
    code += "try:\n load_spec(sys.argv[1])\nexcept Exception as e: print(e)"
    proc = _python(code, str(p))
    kind_said = {"fifo": "a FIFO", "dev_zero": "a character device"}[kind]
    assert proc.stdout.strip() == f"spec file {p}: not a plain file ({kind_said}); move it away"


def test_reference_run_yaml_alias_bomb_and_duplicate_key_are_one_line(tmp_path):
    """run.yaml was read with yaml.safe_load: an alias bomb beside one result ran every aggregation reading that run
    out of memory. It now goes through read_yaml (bounded, no alias bomb, no key given twice)."""
    from accelbench.aggregate.run_folder import load_run
    from accelbench.errors import ConfigError

    run = tmp_path / "reference_runs/h200-2026-12-01"
    (run / "results").mkdir(parents=True)
    (run / "run.yaml").write_text(BOMB)
    t = time.perf_counter()
    with pytest.raises(ConfigError, match=f"{run / 'run.yaml'}: more than 1,000,000 values once its YAML aliases"):
        load_run(run)
    assert time.perf_counter() - t < 5
    (run / "run.yaml").write_text(
        "date: 2026-12-01\nhardware: H200\nshort: H200\ncommit: a\ncommit: b\ncommands: [x]\n"
    )
    with pytest.raises(ConfigError, match="line 5: key 'commit' is given twice"):
        load_run(run)
    (run / "run.yaml").unlink()
    os.mkfifo(run / "run.yaml")
    with pytest.raises(ConfigError, match="run.yaml: not a plain file"):
        load_run(run)


# --------------------------------------------------------------------------- 7: the lock folder is fixed
def test_lock_folder_does_not_follow_tmpdir(tmp_path, monkeypatch):
    """Two CPU jobs with different TMPDIR both held the `cpu` lock at once; the folder is now fixed."""
    import tempfile
    import threading

    from accelbench.core import locks

    monkeypatch.delenv("ACCELBENCH_LOCK_DIR", raising=False)
    devices = f"selftest{os.getpid()}"  # a device set of its own: never the machine's real `cpu` lock
    got = threading.Event()

    def second_job():
        with locks.device_lock(devices, "second", poll_s=3600):
            got.set()

    for t in ("a", "b"):
        (tmp_path / t).mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "a"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    try:
        with locks.device_lock(devices, "first"):
            monkeypatch.setenv("TMPDIR", str(tmp_path / "b"))
            monkeypatch.setattr(tempfile, "tempdir", None)
            assert locks.lock_dir() == Path("/var/tmp/accelbench-locks")
            thread = threading.Thread(target=second_job, daemon=True)
            thread.start()
            assert not got.wait(1.5)  # the second job waits for the first
        thread.join(10)
        assert got.is_set()
        assert os.stat(locks.lock_dir()).st_mode & 0o7777 == 0o1777
    finally:
        locks.lock_path(devices).unlink(missing_ok=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="a user after root: needs root to play both")
def test_a_user_after_root_takes_the_lock(monkeypatch):
    """Root's lock file was 0644 (its umask): a non-root user after root met 'Permission denied'."""
    import shutil
    import tempfile

    from accelbench.core import locks

    base = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="accelbench-locktest-"))
    try:
        base.chmod(0o755)
        monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(base / "locks"))
        with locks.device_lock("cpu", "root's job"):
            pass
        assert (base / "locks").stat().st_mode & 0o7777 == 0o1777
        assert (base / "locks/accelbench-cpu.lock").stat().st_mode & 0o777 == 0o666
        code = (
            "import os\nfrom accelbench.core import locks\n"  # imported as root: nobody may not read the venv
            "os.setgid(65534); os.setuid(65534)\n"
            "with locks.device_lock('cpu', 'nobody'): print('held')"
        )
        proc = _python(code, env={**os.environ, "ACCELBENCH_LOCK_DIR": str(base / "locks")})
        assert proc.stdout.strip() == "held", proc.stderr[-2000:]
    finally:
        shutil.rmtree(base)


def test_planted_link_as_lock_file_is_one_line_and_touches_nothing(tmp_path, monkeypatch):
    from accelbench.core import locks
    from accelbench.errors import AccelbenchError

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks/accelbench-cpu.lock").symlink_to(victim)
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path / "locks"))
    with pytest.raises(AccelbenchError, match="device lock .*accelbench-cpu.lock cannot be used"):
        with locks.device_lock("cpu", "x"):
            pass
    assert victim.read_text() == "keep me\n"


# --------------------------------------------------------------------------- 8: results_dir resolved, OS folders denied
def _etc_listing() -> set[str]:
    return set(os.listdir("/etc"))


@pytest.mark.parametrize("value", ["results_etc", "/var/lib/x", "/usr/local/bin", "/run/x", "/usr", "/var"])
def test_results_dir_in_an_os_folder_is_refused_links_followed(tmp_path, monkeypatch, default_config, value):
    """`ln -s /etc results_etc` then `--config results_dir=results_etc` let a job write /etc/cpu/... as root."""
    from accelbench.core.config import validate_config
    from accelbench.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results_etc").symlink_to("/etc")
    before = _etc_listing()
    default_config["results_dir"] = value
    with pytest.raises(ConfigError) as info:
        validate_config(default_config, SCHEMA)
    assert f"config key 'results_dir': {value!r} (" in str(info.value) and "folder of the operating system" in str(
        info.value
    )
    assert _etc_listing() == before


def test_results_dir_with_tilde_is_the_home_folder_or_refused(tmp_path, monkeypatch, default_config):
    """`results_dir: ~/x` wrote to a folder literally named `~`."""
    import copy

    from accelbench.core.config import validate_config
    from accelbench.errors import ConfigError

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()  # a home that does not exist is refused (tests/unit/test_weak_inputs_four.py)
    cfg = copy.deepcopy(default_config)
    cfg["results_dir"] = "~/x"
    assert validate_config(cfg)["results_dir"] == str(tmp_path / "home/x")
    default_config["results_dir"] = "~nosuchuser43/x"
    with pytest.raises(ConfigError, match="'results_dir': '~nosuchuser43/x': ~nosuchuser43 is no home folder here"):
        validate_config(default_config)
    for v in ("/var/tmp/r", "/usr/src/app/results", "results", "/tmp/x"):  # `/results`: only where it exists
        from accelbench.core.config import results_dir_errors

        assert results_dir_errors(v) == [], v


def test_job_whose_result_folder_links_into_etc_writes_nothing(tmp_path, monkeypatch):
    """The harness checks the result folder itself (links followed) before the lock and the supersede: a system
    folder `results/cpu -> /etc` is refused too, and /etc is left as it was."""
    from accelbench.core import harness, registry
    from accelbench.errors import AccelbenchError
    from lora_helpers import system

    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "results").mkdir()
    (tmp_path / "results/cpu").symlink_to("/etc")
    out = tmp_path / "results/cpu/sr3_scaling/fp32/devices_1/result.json"
    ctx = harness.JobContext(registry.get("sr3_scaling"), {}, "spec.json", None, system(), out)
    before = _etc_listing()
    with pytest.raises(AccelbenchError, match="a folder of the operating system; nothing written"):
        with harness.guarded(ctx):
            pass  # the job's body (nothing here: without the check the test must still touch nothing)
    assert _etc_listing() == before and not Path("/etc/sr3_scaling").exists()


# --------------------------------------------------------------------------- 9: the redo journal is checked
def _result_folder(root: Path) -> Path:
    out = root / "results/cpu/sr3_scaling/fp32/devices_1/result.json"
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps(fr.sr3("cpu", 1, 641.4)))
    (out.parent / "samples.npz").write_bytes(b"PK side file")
    return out


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "case",
    ["absolute", "relative_out", "names_outside", "other_result", "link_out", "fifo", "missing_folder"],
)
def test_planted_redo_journal_is_refused_and_touches_nothing(tmp_path, case):
    """`{"moved_to": "/tmp/victim", "files": ["result.json", "secret.txt"]}` planted beside a result moved a file from
    elsewhere into results/, removed its folder and deleted the result's unlisted side files for good."""
    from accelbench.core import results
    from accelbench.errors import ResultError

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "result.json").write_text('{"v": "victim"}')
    (victim / "secret.txt").write_text("secret")
    out = _result_folder(tmp_path)
    sup = tmp_path / "results/cpu/.superseded"
    other = sup / "20260101T000000Z/sr3_scaling/fp32/devices_2"  # another result's folder
    other.mkdir(parents=True)
    (other / "result.json").write_text('{"v": "other"}')
    journal = out.parent / results.REDO
    record = {"files": ["result.json", "secret.txt"]}
    if case == "absolute":
        record["moved_to"] = str(victim)
    elif case == "relative_out":
        record["moved_to"] = os.path.relpath(victim, out.parent)
    elif case == "names_outside":
        mine = sup / "20260101T000000Z/sr3_scaling/fp32/devices_1"
        mine.mkdir(parents=True)
        record = {"moved_to": os.path.relpath(mine, out.parent), "files": ["../../../../../../victim/secret.txt"]}
    elif case == "other_result":
        record["moved_to"] = os.path.relpath(other, out.parent)
    elif case == "link_out":
        (sup / "20260102T000000Z/sr3_scaling/fp32").mkdir(parents=True)
        (sup / "20260102T000000Z/sr3_scaling/fp32/devices_1").symlink_to(victim)
        record["moved_to"] = "../../../.superseded/20260102T000000Z/sr3_scaling/fp32/devices_1"
    elif case == "missing_folder":
        record["moved_to"] = "../../../.superseded/20260103T000000Z/sr3_scaling/fp32/devices_1"
    if case == "fifo":
        os.mkfifo(journal)
    else:
        journal.write_text(json.dumps(record))
    before_tree, before_victim = _snapshot(tmp_path / "results"), _snapshot(victim)
    with pytest.raises(ResultError) as info:
        with results.superseding(out, "cpu", "sr3_scaling"):
            out.write_text("new")
    msg = str(info.value)
    assert msg.startswith(f"{journal}: refused: ") and "nothing was moved or deleted" in msg and "\n" not in msg
    assert _snapshot(tmp_path / "results") == before_tree and _snapshot(victim) == before_victim


def test_genuine_journal_of_a_killed_redo_is_still_recovered(tmp_path):
    """The checks accept what superseding() writes: a killed redo's old files come back (round two's case)."""
    from accelbench.core import results

    out = _result_folder(tmp_path)
    old = _snapshot(out.parent)
    moved = results.superseded_folder(out, "cpu", "sr3_scaling", "20260101T000000Z")
    moved.mkdir(parents=True)
    digests = {name: hashlib.sha256((out.parent / name).read_bytes()).hexdigest() for name in old}
    record = {"version": 2, "result": "cpu/sr3_scaling/fp32/devices_1/result.json", "files": digests}
    results.write_json_atomic(
        {**record, "moved_to": "cpu/.superseded/20260101T000000Z/sr3_scaling/fp32/devices_1"}, out.parent / results.REDO
    )
    for name in old:
        os.replace(out.parent / name, moved / name)
    (out.parent / "result.json").write_text("partial")  # what the killed job (or Snakemake's restore) left
    assert results.recover(out, "cpu", "sr3_scaling")
    assert _snapshot(out.parent) == old and not moved.exists()
