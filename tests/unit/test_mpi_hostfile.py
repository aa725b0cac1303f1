"""Multi-node launch over an MPI hostfile (a Kubeflow MPIJob's launcher): accelbench.cluster.mpi_hostfile."""

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest

from accelbench.cluster import mpi_hostfile as mh
from accelbench.cluster import multinode as mn
from accelbench.errors import ConfigError

# what mpi-operator v2beta1 writes for a 2-node job with runLauncherAsWorker and slotsPerWorker 8
OPERATOR_HOSTFILE = "job-launcher.job.ns.svc slots=8\njob-worker-0.job.ns.svc slots=8\n"

# a stand-in for Open MPI's mpirun: runs the command -n times on this host, each with OMPI_COMM_WORLD_* set
# (ppr:K:node: K ranks per "node"), and logs its argv; exits with the worst exit status
FAKE_MPIRUN = textwrap.dedent(
    """\
    #!{python}
    import json, os, subprocess, sys
    args = sys.argv[1:]
    open(os.environ["FAKE_MPIRUN_LOG"], "a").write(json.dumps(args) + "\\n")
    n, per, wdir = 1, 1, None
    while args[0].startswith("-"):
        opt = args.pop(0)
        if opt == "--allow-run-as-root":
            continue
        val = args.pop(0)
        if opt == "-n":
            n = int(val)
        elif opt == "--map-by":
            per = int(val.split(":")[1])
        elif opt == "--wdir":
            wdir = val
    procs = []
    for r in range(n):
        env = dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE=str(n),
                   OMPI_COMM_WORLD_LOCAL_RANK=str(r % per), OMPI_COMM_WORLD_LOCAL_SIZE=str(per))
        procs.append(subprocess.Popen(args, env=env, cwd=wdir))
    sys.exit(max(p.wait() for p in procs))
    """
)


def test_hostfile_parsing_and_bad_lines(tmp_path):
    f = tmp_path / "hostfile"
    f.write_text(
        "# written by mpi-operator\n" + OPERATOR_HOSTFILE + "\nh3:4  # Hydra form\nh4\nh5 slots=2 max_slots=4\n"
    )
    assert mh.parse_hostfile(f) == [
        ("job-launcher.job.ns.svc", 8),
        ("job-worker-0.job.ns.svc", 8),
        ("h3", 4),
        ("h4", 1),
        ("h5", 2),
    ]
    for text, why in (
        ("a slots=8\nb slots=eight\n", " line 2: 'b slots=eight': slots must be a whole number"),
        ("a slots=0\n", " line 1: 'a slots=0': slots must be"),
        ("a cpus=8\n", " line 1: 'a cpus=8': expected 'host slots=N' or 'host:N'"),
        ("a slots=2\na slots=2\n", " line 2: host 'a' listed twice"),
        ("# nothing\n", ": lists no host"),
    ):
        f.write_text(text)
        with pytest.raises(ConfigError, match="MPI hostfile .*hostfile" + why.replace("(", r"\(")) as err:
            mh.parse_hostfile(f)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="MPI hostfile not found: .*missing"):
        mh.parse_hostfile(tmp_path / "missing")


@pytest.mark.parametrize(
    "host",
    ["a;touch${IFS}x", "$(id)", "--mca", "-np", "b,c", "h\x1b[2J"],
)
def test_hostfile_refuses_hosts_that_are_not_names(tmp_path, host):
    """Weak input: `a;...`, `$(...)`, `--mca` and `b,c` went verbatim into mpirun's argv (an option, or two hosts
    of its `--host` list); now one line naming the file, the line and the host."""
    f = tmp_path / "hostfile"
    f.write_text(f"good slots=2\n{host} slots=2\n")
    with pytest.raises(ConfigError, match=r"MPI hostfile .*hostfile line 2: .* is not a host name or address") as err:
        mh.parse_hostfile(f)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("slots", ["\u00b2", "\u0663", "1234567"])
def test_hostfile_slots_are_ascii_digits(tmp_path, slots):
    """Weak input: `slots=²` passed str.isdigit and ended in a bare ValueError from int()."""
    f = tmp_path / "hostfile"
    f.write_text(f"h1 slots={slots}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 1: .*slots must be a whole number"):
        mh.parse_hostfile(f)


@pytest.mark.timeout(20)
def test_hostfile_fifo_is_one_line_not_a_hang(tmp_path):
    """Unbounded reads: a hostfile at a FIFO blocked the launcher for ever (Path.read_text waits for a writer)."""
    import os

    f = tmp_path / "hostfile"
    os.mkfifo(f)
    code = "import sys; from accelbench.cluster import mpi_hostfile as mh; mh.parse_hostfile(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, timeout=15)
    assert proc.returncode != 0
    assert "not a plain file" in proc.stderr and str(f) in proc.stderr
    alloc = mh.allocation({mh.OPEN_MPI_VAR: str(f)})  # the launcher's view: the reason, not a hang
    assert alloc["error"] and "not a plain file" in alloc["error"]


def test_hostfile_parsing_is_linear_and_size_capped(tmp_path):
    """Unbounded work: each line was checked against every earlier host (20k lines 9 s, 40k 40 s, 10 MB > 120 s).
    Now 50k distinct hosts parse in well under a second, and a 10 MB file is refused by its size at once."""
    import time

    f = tmp_path / "hostfile"
    f.write_text("".join(f"worker-{i}.job.ns.svc slots=8\n" for i in range(50_000)))  # ~1.5 MB
    t0 = time.perf_counter()
    assert len(mh.parse_hostfile(f)) == 50_000
    assert time.perf_counter() - t0 < 1.0
    big = tmp_path / "big"
    big.write_text("".join(f"w{i} slots=1\n" for i in range(1_000_000)))  # ~11 MB
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"MPI hostfile .*big: \d+ bytes, more than such a file has"):
        mh.parse_hostfile(big)
    assert time.perf_counter() - t0 < 1.0


def test_detects_an_mpijob_launcher(tmp_path):
    f = tmp_path / "hostfile"
    f.write_text(OPERATOR_HOSTFILE)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "mpirun").write_text("#!/bin/sh\n")
    (bin_ / "mpirun").chmod(0o755)
    assert mh.allocation({"PATH": str(bin_)}) is None  # no hostfile variable, no MPIJob role
    assert mh.allocation({"K_MPI_JOB_ROLE": "worker"}) is None
    env = {"OMPI_MCA_orte_default_hostfile": str(f), "K_MPI_JOB_ROLE": "launcher", "PATH": str(bin_)}
    alloc = mh.allocation(env)
    assert alloc["hosts"] == ["job-launcher.job.ns.svc", "job-worker-0.job.ns.svc"] and alloc["slots"] == [8, 8]
    assert alloc["mode"] == "per-node" and alloc["mpirun"] == str(bin_ / "mpirun") and alloc["error"] is None
    plan = mn.NodePlan(16, 2, 8)
    assert mh.allocation_reason(plan, alloc) is None
    # the operator's role alone points at its default path
    assert mh.allocation({"K_MPI_JOB_ROLE": "launcher"})["hostfile"] == "/etc/mpi/hostfile"
    # reasons, each one line
    assert "lists 2 host(s)" in mh.allocation_reason(mn.NodePlan(24, 3, 8), alloc)
    assert "has fewer slots than 16" in mh.allocation_reason(mn.NodePlan(32, 2, 16), alloc)
    assert "`mpirun` is not on PATH" in mh.allocation_reason(plan, mh.allocation({**env, "PATH": str(tmp_path)}))
    bad = mh.allocation({**env, "ACCELBENCH_MPI_LAUNCH": "per-rack"})
    assert "ACCELBENCH_MPI_LAUNCH='per-rack'" in mh.allocation_reason(plan, bad)
    f.write_text("a slots=x\n")
    assert "line 1" in mh.allocation_reason(plan, mh.allocation(env))
    hydra = mh.allocation({"I_MPI_HYDRA_HOST_FILE": str(f), "PATH": str(bin_)})
    assert "only Open MPI" in mh.allocation_reason(plan, hydra)


def test_argv_for_two_nodes_of_eight_cards(tmp_path, monkeypatch):
    alloc = {
        "hostfile": "/etc/mpi/hostfile",
        "hosts": ["job-launcher.job.ns.svc", "job-worker-0.job.ns.svc"],
        "slots": [8, 8],
        "mode": "per-node",
        "mpirun": "/usr/bin/mpirun",
        "error": None,
    }
    monkeypatch.setattr(mh.socket, "gethostname", lambda: "job-launcher")
    monkeypatch.setattr(mh, "free_port", lambda: 29555)
    monkeypatch.setattr(mh.os, "geteuid", lambda: 1000)
    env = {"PATH": "/bin", "OMP_NUM_THREADS": "12", "NCCL_DEBUG": "INFO", "HOSTNAME": "x", "KUBERNETES_PORT": "1"}
    plan = mn.NodePlan(16, 2, 8)
    cmd, rdzv = mh.launch_command(plan, ["rank", "--spec", "s.json"], alloc, env)
    hosts = "job-launcher.job.ns.svc:1,job-worker-0.job.ns.svc:1"
    cwd = str(mh.os.getcwd())
    assert cmd[:11] == ["/usr/bin/mpirun", "-n", "2", "--host", hosts, "--map-by", "ppr:1:node"] + [
        "--bind-to",
        "none",
        "--wdir",
        cwd,
    ]
    assert cmd[11:17] == ["-x", "NCCL_DEBUG", "-x", "OMP_NUM_THREADS", "-x", "PATH"]  # not HOSTNAME, KUBERNETES_*
    assert cmd[17:22] == [sys.executable, "-m", "accelbench.cluster.mpi_hostfile", "node", "--"]
    assert cmd[22:26] == [
        "--nnodes=2",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=job-launcher.job.ns.svc:29555",
    ]
    assert cmd[26].startswith("--rdzv-id=accelbench-mpi-") and cmd[27] == "--max-restarts=0"
    assert cmd[28:] == ["-m", "accelbench", "rank", "--spec", "s.json"]
    assert all(isinstance(a, str) for a in cmd)
    # each node's torchrun: its MPI rank is its node rank; node 0 hosts the c10d store
    node1 = mh.node_argv({"OMPI_COMM_WORLD_RANK": "1"}, cmd[22:])
    assert node1[:5] == [sys.executable, "-m", "torch.distributed.run", "--node-rank=1", "--rdzv-conf=is_host=false"]
    assert "--rdzv-conf=is_host=true" in mh.node_argv({"OMPI_COMM_WORLD_RANK": "0"}, [])
    with pytest.raises(ConfigError, match="not started by mpirun"):
        mh.node_argv({}, [])

    # the first host is not this launcher: torchrun's default port there
    monkeypatch.setattr(mh.socket, "gethostname", lambda: "elsewhere")
    assert mh.launch_command(plan, ["rank"], alloc, {})[1]["endpoint"] == "job-launcher.job.ns.svc:29400"

    # Study B's job files: one process per card
    cmd, card = mh.launch_command(plan, ["rank"], {**alloc, "mode": "per-card"}, {})
    assert cmd[1:7] == ["-n", "16", "--host", hosts.replace(":1", ":8"), "--map-by", "ppr:8:node"]
    assert cmd[-8:] == [
        "accelbench.cluster.mpi_hostfile",
        "card",
        "--master=job-launcher.job.ns.svc:29400",
        "--",
        sys.executable,
        "-m",
        "accelbench",
        "rank",
    ]
    ompi = {"OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "16"}
    ompi |= {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}
    torch_env = mh.card_env(ompi, "h:123")
    got = {k: torch_env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")}
    assert got == {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "h"}
    assert torch_env["MASTER_PORT"] == "123"

    # what the result records
    rec = mn.launch_record(plan, "hpu", rdzv)
    assert rec["launcher"] == "mpirun + torchrun" and rec["mpi_hostfile"] == "/etc/mpi/hostfile"
    assert rec["rendezvous_backend"] == "c10d" and rec["hosts"] == alloc["hosts"] and rec["slurm_job_id"] is None
    assert mn.launch_record(plan, "hpu", card)["launcher"] == "mpirun -n 16 (one process per card)"
    slurm = mn.launch_record(plan, "hpu", {"backend": "c10d", "hosts": ["a", "b"], "slurm_job_id": "9"})
    assert slurm["launcher"] == "srun + torchrun" and slurm["mpi_hostfile"] is None
    with pytest.raises(ConfigError, match="lists 2 host"):
        mh.launch_command(mn.NodePlan(24, 3, 8), ["rank"], alloc, {})


@pytest.mark.parametrize("mode", ["per-node", "per-card"])
def test_two_nodes_rendezvous_through_mpirun(tmp_path, systems, monkeypatch, mode):
    """net_smoke on 2 "nodes" x 1 CPU rank, launched by the (stand-in) mpirun of an MPIJob's launcher."""
    from accelbench import cli

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "mpirun").write_text(FAKE_MPIRUN.format(python=sys.executable))
    (bin_ / "mpirun").chmod(0o755)
    (tmp_path / "hostfile").write_text("localhost slots=1\n127.0.0.1 slots=1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_}:{mh.os.environ['PATH']}")
    monkeypatch.setenv("OMPI_MCA_orte_default_hostfile", str(tmp_path / "hostfile"))
    monkeypatch.setenv("ACCELBENCH_MPI_LAUNCH", mode)
    monkeypatch.setenv("FAKE_MPIRUN_LOG", str(tmp_path / "mpirun.log"))
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    two_nodes = dataclasses.replace(systems["cpu"], devices=2, devices_per_node=1)
    spec = {"system": two_nodes.to_dict(), "devices": 2, "max_bytes": 4096, "warmup": 1, "iters": 2}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    out = tmp_path / "r/cpu/net_smoke/devices_2/allreduce.json"
    assert cli.main(["net-smoke", "--spec", "s.json", "--out", str(out), "--threads", "2"]) == 0
    result = json.loads(out.read_text())
    assert result["status"] == "ok", result.get("reason")
    m = result["measurements"]
    assert m["world_size"] == 2 and m["collective_backend"] == "gloo"
    launch = m["launch"]
    assert launch["nodes"] == 2 and launch["ranks_per_node"] == 1 and launch["hosts"] == ["localhost", "127.0.0.1"]
    assert launch["mpi_hostfile"] == str(tmp_path / "hostfile")
    [argv] = [json.loads(line) for line in (tmp_path / "mpirun.log").read_text().splitlines()]
    assert argv[:2] == ["-n", "2"]
    if mode == "per-node":
        assert launch["launcher"] == "mpirun + torchrun" and launch["rendezvous_backend"] == "c10d"
        assert "node" in argv and "--nproc-per-node=1" in argv
    else:
        assert launch["launcher"] == "mpirun -n 2 (one process per card)" and "card" in argv
