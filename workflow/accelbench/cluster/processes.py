"""Multi-process launching on one node: each rank's share of the job's cores, and no rank outliving its job.

Two problems this module solves for every launcher (SR3's ``sr3-train``, LoRA's DDP/FSDP/ZeRO-3, and the
multi-node path built on top of it):

* **Thread placement.** A Snakemake job gets ``threads`` cores (``--cores all``: the whole node) and exports
  ``OMP_NUM_THREADS = threads``. Every torchrun rank inherits that, so N ranks start N x ``threads`` intra-op
  threads and oversubscribe the CPU (measured on 2x H200: SR3 at 2 GPUs took 294 ms/iteration instead of 176 ms).
  Here each rank gets ``max(1, threads // ranks)`` threads (:func:`threads_per_rank`) and, where the platform
  allows ``os.sched_setaffinity``, its own block of the job's CPUs (:func:`rank_cpus`). What each rank got is
  returned by :func:`place_this_rank` and recorded in the result.
* **Parent death.** torchrun (torch.distributed.elastic) starts its workers in a new session, outside the job's
  process group, so a SIGKILL of the job (Snakemake killed, Slurm's ``scancel``) left the ranks running: they
  finished and wrote an unprotected ``result.json``. Here torchrun is started with ``PR_SET_PDEATHSIG`` = SIGKILL
  (it dies with the launcher) and stays in the job's process group, and every rank sets the same signal against
  torchrun in :func:`place_this_rank` (it dies with torchrun). Linux only; elsewhere the ranks are left to
  torchrun's own shutdown (recorded as ``parent_death_signal: false``).

Usage (launcher side, then rank side)::

    env = rank_env(threads, ranks)                # OMP_NUM_THREADS = threads // ranks, job CPUs, launcher pid
    proc = run(torchrun_command(ranks, ["-m", "accelbench", ...]), env=env)
    ...
    placement = place_this_rank()                # in each rank, before any work: threads, affinity, PDEATHSIG
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from accelbench import backends

ENV_THREADS = "ACCELBENCH_RANK_THREADS"  # threads of one rank, set by the launcher
ENV_CPUS = "ACCELBENCH_JOB_CPUS"  # the job's CPUs (comma-separated), set by the launcher
ENV_LAUNCHER = (
    "ACCELBENCH_LAUNCHER_PID"  # "<host>:<pid>" of the launcher: a rank on that host whose launcher is gone exits
)
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
PR_SET_PDEATHSIG = 1


CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
_NO_LIMIT = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def _cgroup_room() -> tuple[int, str] | None:
    """The least memory (bytes) the cgroups of this process and their parents still allow (limit minus usage: v2
    ``memory.max`` - ``memory.current``, v1 ``memory.limit_in_bytes`` - ``memory.usage_in_bytes``), and the limit
    file; None where none sets a limit (or none can be read)."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and not controllers:
            base, limit_file, usage_file = CGROUP_ROOT, "memory.max", "memory.current"
            if (CGROUP_ROOT / "unified").is_dir() and not (CGROUP_ROOT / limit_file).exists():
                base = CGROUP_ROOT / "unified"  # hybrid layout: v2 under unified/
        elif "memory" in controllers.split(","):
            base, limit_file, usage_file = CGROUP_ROOT / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        folder = base / path.strip("/")
        folder = folder if folder.is_dir() else base  # a cgroup namespace (container): its own cgroup is the root
        for d in [folder, *[q for q in folder.parents if q.is_relative_to(base)]]:
            try:
                limit = (d / limit_file).read_text().strip()
                if limit == "max" or int(limit) >= _NO_LIMIT:
                    continue
                rooms.append((int(limit) - int((d / usage_file).read_text().strip()), str(d / limit_file)))
            except (OSError, ValueError):
                continue
    return min(rooms) if rooms else None


def host_memory_available() -> tuple[float, str]:
    """GiB of host memory this job may still take, and where the bound comes from: the kernel's ``MemAvailable``
    (psutil), or less where a cgroup memory limit of this process says less (:func:`_cgroup_room`: a container's
    or a Slurm job's limit, ``systemd-run -p MemoryMax=``), which the kernel enforces by killing the job."""
    import psutil

    best = (psutil.virtual_memory().available, "MemAvailable")
    room = _cgroup_room()
    if room is not None and room[0] < best[0]:
        best = (max(room[0], 0), room[1])
    return best[0] / 2**30, best[1]


def job_cpus() -> list[int]:
    """CPUs this process may run on (``os.sched_getaffinity``), or ``range(os.cpu_count())`` where unavailable."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def threads_per_rank(threads: int, ranks: int) -> int:
    """The job's ``threads`` split over ``ranks`` processes: ``max(1, threads // ranks)`` (0 threads = all CPUs)."""
    threads = threads or len(job_cpus())
    return max(1, threads // max(1, ranks))


def rank_threads(system, threads: int, ranks_per_node: int) -> int:
    """The thread policy of every multi-rank job, stated once: a rank's share of the job's ``threads`` cores.

    ``max(1, threads // ranks_per_node)`` (0 threads = every usable CPU); on a system whose device *is* a core
    (backend ``cpu`` with ``devices_per_node: cores``, the embedded default) exactly 1, so that adding CPU
    "devices" adds cores, as adding GPUs adds GPUs (SR3 strong scaling on a CPU).
    """
    if not backends.get(system.backend).accelerator and getattr(system, "devices_per_node", None) == "cores":
        return 1
    return threads_per_rank(threads, ranks_per_node)


def rank_cpus(local_rank: int, per_rank: int, cpus: list[int]) -> list[int]:
    """The CPUs of rank ``local_rank``: the ``local_rank``-th block of ``per_rank`` CPUs of ``cpus`` (wrapping
    around when there are fewer CPUs than ranks x threads, so every rank still gets ``min(per_rank, len(cpus))``)."""
    if not cpus:
        return []
    picked = [cpus[(local_rank * per_rank + i) % len(cpus)] for i in range(per_rank)]
    return sorted(set(picked))


def rank_env(threads: int, ranks: int, per_rank: int | None = None, base: dict | None = None) -> dict[str, str]:
    """Environment for ``ranks`` local ranks of a job that owns ``threads`` cores (0 = every CPU it may use).

    Sets the usual thread-count variables (``OMP_NUM_THREADS`` ...) to ``per_rank`` (default
    :func:`threads_per_rank`), the job's CPUs (the first ``threads`` of this process's affinity set) and this
    process's pid (the ranks exit when it is gone). ``base`` defaults to ``os.environ``.
    """
    env = dict(os.environ if base is None else base)
    cpus = job_cpus()
    if threads:
        cpus = cpus[:threads]
    n = per_rank if per_rank is not None else threads_per_rank(threads, ranks)
    env.update({v: str(n) for v in THREAD_VARS})
    env.update({ENV_THREADS: str(n), ENV_CPUS: ",".join(map(str, cpus)), ENV_LAUNCHER: f"{_host()}:{os.getpid()}"})
    return env


def torchrun_command(nproc: int, args: list[str], rdzv: list[str] | None = None) -> list[str]:
    """``python -m torch.distributed.run <rdzv> --nproc_per_node N <args>``; ``rdzv`` defaults to ``--standalone``
    (one node, a free port). Multi-node launchers pass their own rendezvous options (``--rdzv-backend c10d`` ...)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *(rdzv if rdzv is not None else ["--standalone"]),
        f"--nproc_per_node={nproc}",
        *args,
    ]


def _libc():
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent (the thread that forked it) dies.
    Returns False where ``prctl`` is unavailable (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _libc().prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _host() -> str:
    import socket

    return socket.gethostname()


def _launcher_gone(value: str | None) -> bool:
    """True when ``value`` (``"<host>:<pid>"``) names a launcher on this host that no longer runs (ranks on other
    nodes of a multi-node job cannot check it and never exit for it)."""
    if not value or ":" not in value:
        return False
    host, pid = value.rsplit(":", 1)
    return host == _host() and pid.isdigit() and not _alive(int(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _die_with(parent: int):
    """``preexec_fn`` for a child of ``parent``: SIGKILL when ``parent`` dies (also if it died before this ran)."""

    def pre() -> None:
        set_parent_death_signal()
        if os.getppid() != parent:
            os._exit(1)

    return pre


def start(cmd: list[str], env: dict | None = None, **popen_kw) -> subprocess.Popen:
    """Start ``cmd`` (normally :func:`torchrun_command`) in this job's process group, killed when this process dies."""
    return subprocess.Popen(cmd, env=env, preexec_fn=_die_with(os.getpid()), **popen_kw)


def run(
    cmd: list[str], env: dict | None = None, timeout: float | None = None, capture: bool = False
) -> subprocess.CompletedProcess:
    """:func:`start` and wait; on a timeout or an exception here (Ctrl-C) the launched process is killed first.
    ``capture``: stdout and stderr together as text in ``.stdout``."""
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True} if capture else {}
    proc = start(cmd, env, **kw)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:
        proc.kill()  # torchrun's ranks follow through their own parent-death signal
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def place_this_rank(threads: int | None = None) -> dict:
    """Call first thing in every rank: die with torchrun, take this rank's thread count and CPU block.

    ``threads`` overrides the launcher's per-rank count (``ACCELBENCH_RANK_THREADS``; absent: torch's current
    count). Affinity is set only when the launcher passed the job's CPUs and ``os.sched_setaffinity`` works.

    Returns:
        ``{"local_rank", "threads", "cpus", "affinity_set", "affinity_note", "parent_death_signal"}``, recorded
        per rank in the result.
    """
    import torch

    pdeath = set_parent_death_signal()
    if os.getppid() == 1 or _launcher_gone(os.environ.get(ENV_LAUNCHER)):
        os._exit(1)  # torchrun or the launcher died before the signal was armed
    local = int(os.environ.get("LOCAL_RANK", 0))
    n = threads or int(os.environ.get(ENV_THREADS, 0)) or torch.get_num_threads()
    cpus_env = os.environ.get(ENV_CPUS)
    cpus, affinity_set, note = None, False, None
    if not cpus_env:
        note = "no job CPU list from the launcher"
    elif not hasattr(os, "sched_setaffinity"):
        note = "os.sched_setaffinity not available on this platform"
    else:
        cpus = rank_cpus(local, n, [int(c) for c in cpus_env.split(",") if c])
        try:
            os.sched_setaffinity(0, cpus)
            affinity_set = True
        except OSError as exc:
            note = f"sched_setaffinity refused: {exc}"
        cpus = sorted(os.sched_getaffinity(0))
    torch.set_num_threads(n)  # after the affinity: the OpenMP pool inherits it
    return {
        "local_rank": local,
        "threads": torch.get_num_threads(),
        "cpus": cpus,
        "affinity_set": affinity_set,
        "affinity_note": note,
        "parent_death_signal": pdeath,
    }
