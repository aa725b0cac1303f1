"""Campaigns as data: the commands of a run on lent hardware, in named parts, run by one generic runner.

A campaign file (``campaigns/*.yaml``, or the ``parts:`` of a reference run's ``run.yaml``; its format, reading and
checking: :mod:`accelbench.core.campaign_file`) holds ``parts``, each a time budget and ordered ``steps`` (``argv``
lists, no shell); one part runs at a time::

    accelbench campaign --file campaigns/h200_one_gpu.yaml --part sr3 --out OUT [--dry-run]

The runner (:func:`run_part`) runs the steps in order from the working directory (the repository root), each in its
own session; output goes to ``<out>/<part>/<index>.log``, and ``<out>/<part>/campaign.json`` records per step the
argv, the env keys, rc, seconds and status: ``ok``, ``failed``, ``timeout`` (its ``timeout_s`` or the part's budget
ran out), ``skipped`` (with the reason: the budget was spent, fewer than ``needs_s`` seconds left, or an earlier
failure under ``stop_on_failure: true``) or ``interrupted``, and the commit of the harness
(:func:`accelbench.core.provenance.git_info`). The record is rewritten atomically (compact JSON) at most once per step,
when a step starts (at most every :data:`RECORD_EVERY_S` seconds, so a campaign of 10,000 short steps is not
quadratic), and at the end. A failing step does not stop the later ones unless the part sets
``stop_on_failure: true``.

A stopped step (timeout, budget, or the runner interrupted) takes its whole process tree along: the runner is a
child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so a grandchild that left the step's session (``setsid``) or was
orphaned stays a descendant of the runner and is found (``psutil``) and stopped too: SIGTERM, then SIGKILL after
:data:`KILL_GRACE_S`. SIGTERM or SIGINT (Ctrl-C, ``timeout``, a scheduler) to the runner stops the running step
that way, records it ``interrupted``, the record ``interrupted: {signal, at}``, and raises :class:`Interrupted`
(``accelbench campaign`` exits 128 + the signal's number).

The file's names (:func:`load`, :func:`check`, :func:`dry_run`, ...) are importable from here too. Invalid input
raises :class:`~accelbench.errors.CampaignError`: one line naming the file and the key.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import json
import math
import os
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

from accelbench.core import files
from accelbench.core.campaign_file import (  # noqa: F401  (re-exported: the file's names, as before the split)
    OUT,
    RUN_META,
    SCHEMA,
    check,
    dry_run,
    load,
    part_folder,
    part_of,
    resolve,
)
from accelbench.core.provenance import git_info
from accelbench.errors import CampaignError

KILL_GRACE_S = 20  # SIGTERM, then SIGKILL this long after (as `timeout -k 20` in the bash series scripts)
RECORD = "campaign.json"
RECORD_EVERY_S = 1.0  # the record is rewritten when a step starts, at most this often (and always at the end)
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


class Interrupted(CampaignError):
    """The runner got SIGTERM or SIGINT: the running step was stopped and recorded ``interrupted``."""

    def __init__(self, signum: int, record: Path):
        self.signum = signum
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}: the running step was stopped, {record} records it")


# --------------------------------------------------------------------------- running
def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _subreaper(on: bool) -> bool:
    """Make this process a child subreaper (orphaned descendants are reparented to it, not to init); False where the
    kernel has no such thing (not Linux)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _tree(proc: subprocess.Popen, before: set[int], seen: dict[int, psutil.Process]) -> list[psutil.Process]:
    """The step's processes now: its own, its descendants, and this runner's children that were not there before the
    step started (orphans reparented here, :func:`_subreaper`) with theirs; ``seen`` (pid -> Process, filled while
    the step runs) adds any found earlier that still live."""
    found: dict[int, psutil.Process] = {}
    roots = []
    with contextlib.suppress(psutil.Error):
        roots.append(psutil.Process(proc.pid))
    with contextlib.suppress(psutil.Error):
        roots += [c for c in psutil.Process().children() if c.pid not in before and c.pid != proc.pid]
    for root in roots:
        found[root.pid] = root
        with contextlib.suppress(psutil.Error):
            found.update((c.pid, c) for c in root.children(recursive=True))
    for pid, p in seen.items():
        if pid not in found and p.is_running():  # same pid and start time: not a reused pid
            found[pid] = p
    seen.update(found)
    return list(found.values())


def _reap(pids: list[int]) -> None:
    """Collect the exit status of those of ``pids`` that are this process's children (reparented orphans)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _stop(proc: subprocess.Popen, before: set[int], seen: dict[int, psutil.Process]) -> int:
    """SIGTERM to the step's whole process tree (its session's group, its descendants, ``setsid`` ones and orphans
    included, see :func:`_tree`), SIGKILL to what is left after :data:`KILL_GRACE_S`; the step's exit status."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while True:
        exited = proc.poll() is not None  # reaped: its children were reparented here before, the scan sees them
        procs = [p for p in _tree(proc, before, seen) if p.pid != proc.pid or not exited]
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGTERM) if time.monotonic() < deadline else p.kill()
        _reap([p.pid for p in procs if p.pid != proc.pid])
        alive = []
        for p in procs:
            with contextlib.suppress(psutil.Error):
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        if not alive and exited:
            break
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            deadline = time.monotonic() - 1  # from now on SIGKILL
        time.sleep(0.05)
    return proc.wait()


def _run_step(step: dict, folder: Path, index: int, left: float, cwd: str | Path | None) -> dict:
    """Run one step (its output to ``<folder>/<index>.log``), stopped after its timeout_s or ``left`` seconds; an
    exception (the runner interrupted) stops the step's process tree, then propagates."""
    argv = [resolve(a, folder) for a in step["argv"]]
    env = {k: resolve(v, folder) for k, v in step.get("env", {}).items()}
    limit, by_budget = left, True
    if "timeout_s" in step and step["timeout_s"] <= left:
        limit, by_budget = step["timeout_s"], False
    rec = {"status": "failed", "rc": None, "reason": None}
    t0 = time.monotonic()
    before: set[int] = set()
    with contextlib.suppress(psutil.Error):
        before = {c.pid for c in psutil.Process().children()}
    seen: dict[int, psutil.Process] = {}
    with open(folder / f"{index}.log", "wb") as log:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                cwd=cwd,
                start_new_session=True,  # its own session: a terminal's Ctrl-C reaches the runner, which stops it
            )
        except OSError as exc:
            rec["reason"] = f"cannot start {argv[0]!r}: {exc.strerror or exc}"
            log.write(f"campaign: {rec['reason']}\n".encode())
            return {**rec, "seconds": round(time.monotonic() - t0, 3)}
        try:
            rec["rc"] = proc.wait(timeout=limit)
            rec["status"] = "ok" if rec["rc"] == 0 else "failed"
            rec["reason"] = None if rec["rc"] == 0 else f"exit status {rec['rc']}"
            leftover = [p for p in _tree(proc, before, seen) if p.pid != proc.pid]
            if leftover:  # the step's own process ended, something it started did not: not left running
                _stop(proc, before, seen)
        except subprocess.TimeoutExpired:
            rec["rc"] = _stop(proc, before, seen)
            rec["status"] = "timeout"
            rec["reason"] = "the part's budget ran out" if by_budget else f"timeout_s {step['timeout_s']} reached"
        except BaseException:  # interrupted: the step's processes do not outlive the runner
            _stop(proc, before, seen)
            raise
    return {**rec, "seconds": round(time.monotonic() - t0, 3)}


def _write_record(record: dict, target: Path) -> None:
    """``record`` as compact JSON to ``target``, atomically (a reader sees the old or the new file)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(record, fh, separators=(",", ":"))
        fh.write("\n")
    os.replace(tmp, target)


class _Signalled(BaseException):
    def __init__(self, signum: int):
        self.signum = signum


@contextlib.contextmanager
def _signals_raise():
    """SIGTERM and SIGINT raise :class:`_Signalled` in the body (main thread only; elsewhere nothing changes)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Signalled(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_part(
    file: str | Path, name: str, out: str | Path, cwd: str | Path | None = None, budget_s: float | None = None
) -> dict:
    """Run part ``name`` of the campaign ``file``: its steps in order under its budget (see the module docstring).

    ``budget_s`` lowers the part's ``budget_s`` for this run (a call with less device time left); a larger value
    is ignored, and the record keeps both.

    Returns:
        The record written to ``<out>/<name>/campaign.json``.

    Raises:
        CampaignError: the file is invalid or has no such part (nothing is run then).
    """
    part = part_of(load(file), name, file)
    folder = part_folder(out, name)
    folder.mkdir(parents=True, exist_ok=True)
    budget, stop_on_failure = part["budget_s"], bool(part.get("stop_on_failure", False))
    if budget_s is not None and budget_s < budget:
        budget = max(float(budget_s), 0.0)
    git = git_info(cwd)
    record = {
        "campaign": str(file),
        "campaign_sha256": files.sha256(file, "campaign file", error=CampaignError),
        "part": name,
        "budget_s": budget,
        "part_budget_s": part["budget_s"],
        "stop_on_failure": stop_on_failure,
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        "host": socket.gethostname(),
        "out": str(folder),
        "started": _now(),
        "finished": None,
        "seconds": None,
        "steps": [
            {
                "index": i,
                "argv": [resolve(a, folder) for a in step["argv"]],
                "env": sorted(step.get("env", {})),
                **{k: step[k] for k in ("needs_s", "timeout_s", "always") if k in step},
                "status": "pending",
                "rc": None,
                "seconds": None,
                "reason": None,
                "log": None,
            }
            for i, step in enumerate(part["steps"])
        ],
    }
    target = folder / RECORD
    t0 = time.monotonic()
    failed = False
    written = -math.inf
    reaper = _subreaper(True)
    try:
        with _signals_raise():
            _write_record(record, target)
            for i, step in enumerate(part["steps"]):
                rec = record["steps"][i]
                used = time.monotonic() - t0
                left, always = budget - used, step.get("always", False)
                if stop_on_failure and failed and not always:
                    rec.update(status="skipped", reason="an earlier step failed (stop_on_failure)")
                elif left <= 0 and not always:
                    rec.update(
                        status="skipped", reason=f"the part's budget of {budget} s was spent ({used:.0f} s used)"
                    )
                elif step.get("needs_s", 0) > left and not always:
                    rec.update(status="skipped", reason=f"needs {step['needs_s']} s, {left:.0f} s of the budget left")
                else:
                    print(f"=== {name} [{i}] {used:.0f}s: {shlex.join(rec['argv'])}", flush=True)
                    rec.update(status="running", log=f"{i}.log")
                    if time.monotonic() - written >= RECORD_EVERY_S:  # once per step at most, and not too often
                        _write_record(record, target)
                        written = time.monotonic()
                    rec.update(_run_step(step, folder, i, math.inf if always else left, cwd))
                    failed = failed or rec["status"] != "ok"
                line = f"{rec['status']}" + (f" (rc {rec['rc']}, {rec['seconds']} s)" if rec["log"] else "")
                print(f"    {name} [{i}] {line}" + (f": {rec['reason']}" if rec["reason"] else ""), flush=True)
    except _Signalled as sig:
        when = _now()
        for rec in record["steps"]:
            if rec["status"] == "running":
                rec.update(status="interrupted", reason=f"the runner got {signal.Signals(sig.signum).name} at {when}")
        record.update(
            interrupted={"signal": signal.Signals(sig.signum).name, "at": when},
            finished=when,
            seconds=round(time.monotonic() - t0, 3),
        )
        _write_record(record, target)
        print(f"=== {name}: interrupted ({signal.Signals(sig.signum).name}); {target}", flush=True)
        raise Interrupted(sig.signum, target) from None
    finally:
        if reaper:
            _subreaper(False)
    record.update(finished=_now(), seconds=round(time.monotonic() - t0, 3))
    _write_record(record, target)
    counts: dict[str, int] = {}
    for rec in record["steps"]:
        counts[rec["status"]] = counts.get(rec["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"=== {name}: {summary} in {record['seconds']:.0f} s; {target}", flush=True)
    return record


def failed_steps(record: dict) -> list[dict]:
    """The steps of a :func:`run_part` record that failed or timed out (skipped ones are not failures)."""
    return [s for s in record["steps"] if s["status"] in ("failed", "timeout")]
