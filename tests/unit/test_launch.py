"""Multi-process launching (accelbench.cluster.processes): each rank's share of the job's threads, and no orphaned
ranks."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from accelbench.cluster import processes as launch

WORKER = textwrap.dedent("""
    import json, os, sys, time
    from accelbench.cluster.processes import place_this_rank
    placement = place_this_rank()
    out = sys.argv[1]
    placement.update(pid=os.getpid(), omp=os.environ.get("OMP_NUM_THREADS"))
    tmp = os.path.join(out, "rank%s.tmp" % os.environ["RANK"])
    with open(tmp, "w") as fh:
        json.dump(placement, fh)
    os.replace(tmp, os.path.join(out, "rank%s.json" % os.environ["RANK"]))
    if len(sys.argv) > 2:
        time.sleep(float(sys.argv[2]))
""")


def test_threads_split_over_ranks():
    assert launch.threads_per_rank(16, 2) == 8 and launch.threads_per_rank(3, 2) == 1
    assert launch.threads_per_rank(1, 4) == 1  # at least one thread each
    assert launch.rank_cpus(1, 4, list(range(8))) == [4, 5, 6, 7]
    assert launch.rank_cpus(1, 2, [0, 1]) == [0, 1]  # fewer CPUs than ranks x threads: wraps around
    env = launch.rank_env(8, 2, base={"OMP_NUM_THREADS": "8"})
    assert env["OMP_NUM_THREADS"] == "4" and env[launch.ENV_THREADS] == "4"
    assert env[launch.ENV_LAUNCHER].endswith(f":{os.getpid()}") and not launch._launcher_gone(env[launch.ENV_LAUNCHER])
    assert launch._launcher_gone(f"{launch._host()}:999999999") and not launch._launcher_gone("other-node:999999999")
    assert launch.rank_env(8, 2, per_rank=1, base={})["MKL_NUM_THREADS"] == "1"


def test_rank_threads_is_the_one_thread_policy(systems):
    import dataclasses

    cpu = systems["cpu"]  # devices_per_node: cores -> a "device" is one core, whatever the job's threads
    assert cpu.devices_per_node == "cores"
    assert launch.rank_threads(cpu, 16, 4) == 1 and launch.rank_threads(cpu, 0, 2) == 1
    h200 = systems["h200"]  # accelerators: the job's cores split over a node's ranks, at least one each
    assert launch.rank_threads(h200, 16, 4) == 4 and launch.rank_threads(h200, 3, 8) == 1
    assert launch.rank_threads(h200, 0, 1) == len(launch.job_cpus())  # 0 threads: every usable CPU
    assert launch.rank_threads(dataclasses.replace(cpu, devices_per_node=2), 8, 2) == 4  # CPU nodes of 2 ranks


def _ranks(path, n):
    return [json.loads((path / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.mark.parametrize("threads", [2, 4])
def test_two_rank_cpu_job_gets_half_the_threads_each(tmp_path, threads):
    (tmp_path / "worker.py").write_text(WORKER)
    env = launch.rank_env(threads, 2, base=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    proc = launch.run(launch.torchrun_command(2, [str(tmp_path / "worker.py"), str(tmp_path)]), env=env, capture=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ranks = _ranks(tmp_path, 2)
    for p in ranks:
        assert p["threads"] == threads // 2 and p["omp"] == str(threads // 2)
        assert p["parent_death_signal"] is True
        if p["affinity_set"]:
            assert len(p["cpus"]) == min(threads // 2, len(launch.job_cpus()))
    if len(launch.job_cpus()) >= threads and all(p["affinity_set"] for p in ranks):
        assert not set(ranks[0]["cpus"]) & set(ranks[1]["cpus"])  # disjoint blocks when the cores suffice


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead (waiting for its reaper)
        return fh.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux only")
def test_no_rank_outlives_a_killed_job(tmp_path):
    """A job (its own process group, as Snakemake and Slurm start it) is SIGKILLed: its torchrun ranks must die too."""
    (tmp_path / "worker.py").write_text(WORKER)
    launcher = textwrap.dedent(f"""
        from accelbench.cluster import processes as launch
        cmd = launch.torchrun_command(2, [{str(tmp_path / "worker.py")!r}, {str(tmp_path)!r}, "120"])
        launch.run(cmd, env=launch.rank_env(2, 2))
    """)
    job = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True)
    try:
        deadline = time.time() + 120
        while not all((tmp_path / f"rank{r}.json").exists() for r in range(2)):
            assert job.poll() is None and time.time() < deadline, "ranks did not start"
            time.sleep(0.2)
        pids = [p["pid"] for p in _ranks(tmp_path, 2)]
        assert all(_alive(p) for p in pids)
        os.killpg(job.pid, signal.SIGKILL)  # what a killed Snakemake job / scancel does
        job.wait()
        deadline = time.time() + 20
        while any(_alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.2)
        survivors = [p for p in pids if _alive(p)]
        assert not survivors, f"ranks {survivors} outlived their killed job"
    finally:
        for p in _ranks(tmp_path, 2) if all((tmp_path / f"rank{r}.json").exists() for r in range(2)) else []:
            if _alive(p["pid"]):
                os.kill(p["pid"], signal.SIGKILL)
