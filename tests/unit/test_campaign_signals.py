"""Faults: the campaign runner stops a step's whole process tree (``setsid`` grandchildren too) on a
timeout and on SIGTERM/SIGINT, records ``interrupted`` with the time, exits non-zero, and rewrites campaign.json at
most once per step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from accelbench.core import campaign

PY = sys.executable
# a step that starts a grandchild in a new session (as `setsid` does), writes its pid, and sleeps; the grandchild
# ignores SIGTERM (SIGKILL after the grace)
GRANDCHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
STEP = (
    "import os, subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
    "start_new_session=True); open(sys.argv[2], 'w').write(f'{os.getpid()} {p.pid}'); time.sleep(120)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    return not (state.exists() and state.read_text().split(") ", 1)[-1].startswith("Z"))


def _gone(pids, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _campaign(tmp_path: Path, step: dict) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"parts": {"p": {"budget_s": 600, "steps": [step]}}}))
    return path


def test_a_setsid_grandchild_does_not_survive_a_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "KILL_GRACE_S", 0.5)
    step = {"argv": [PY, "-c", STEP, GRANDCHILD, "{out}/pids"], "timeout_s": 2}
    record = campaign.run_part(_campaign(tmp_path, step), "p", tmp_path / "out", cwd=tmp_path)
    assert record["steps"][0]["status"] == "timeout"
    pids = [int(p) for p in (tmp_path / "out/p/pids").read_text().split()]
    assert _gone(pids), "a grandchild in its own session outlived the step's timeout"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_runner_stops_the_step_and_records_interrupted(tmp_path, sig):
    """SIGTERM (timeout, schedulers) or SIGINT (Ctrl-C) to `accelbench campaign`: no step process is left, the
    record says `interrupted` with the signal and the time, the exit status is 128 + the signal."""
    step = {"argv": [PY, "-c", STEP, "import time; time.sleep(120)", "{out}/pids"]}
    env = {**os.environ, "PYTHONPATH": str(Path(campaign.__file__).parents[2])}
    out = tmp_path / "out"
    cmd = [PY, "-m", "accelbench", "campaign", "--file", str(_campaign(tmp_path, step)), "--part", "p"]
    runner = subprocess.Popen([*cmd, "--out", str(out)], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    pidfile = out / "p/pids"
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and len(pidfile.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(p) for p in pidfile.read_text().split()]
    runner.send_signal(sig)
    _, err = runner.communicate(timeout=90)
    try:
        assert runner.returncode == 128 + sig, err
        assert _gone(pids, within=5), "a step process outlived the runner"
        record = json.loads((out / "p/campaign.json").read_text())
        assert record["steps"][0]["status"] == "interrupted"
        assert record["interrupted"]["signal"] == signal.Signals(sig).name and record["interrupted"]["at"]
        assert record["finished"]
        assert "interrupted by" in err and len(err.strip().splitlines()) == 1, err
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_the_record_is_written_at_most_once_per_step(tmp_path, monkeypatch):
    """Old code: two rewrites per step (quadratic: 1,048 of 10,000 steps in 300 s)."""
    writes = []
    real = campaign._write_record
    monkeypatch.setattr(campaign, "_write_record", lambda r, t: (writes.append(1), real(r, t)))
    monkeypatch.setattr(campaign, "RECORD_EVERY_S", 0.0)
    n = 20
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"parts": {"p": {"budget_s": 600, "steps": [{"argv": ["true"]}] * n}}}))
    record = campaign.run_part(path, "p", tmp_path / "out", cwd=tmp_path)
    assert [s["status"] for s in record["steps"]] == ["ok"] * n
    assert 1 <= len(writes) <= n + 2  # the start, one per step, the end
    assert json.loads((tmp_path / "out/p/campaign.json").read_text())["steps"][-1]["status"] == "ok"
