"""Multi-node jobs: node/rank plan, Slurm request, ``srun`` + ``torchrun`` c10d launch, and what each result records.

Study B runs SR3 strong scaling up to 64 Gaudi1 cards on 8 nodes (8 per node) and fine-tunes across nodes. Here a
system file states ``devices_per_node``; a device count above it becomes ``nodes x devices_per_node``
(:func:`node_plan`, :mod:`accelbench.cluster.node_layout`; a count that does not divide is a
:class:`~accelbench.errors.ConfigError`). Launching uses the stack's own engine, no launcher of ours:

* one node, or outside Slurm: ``torchrun --standalone --nproc-per-node P`` (what every job did before);
* N > 1 nodes inside a Slurm allocation: ``srun --nodes N --ntasks N --ntasks-per-node 1`` starts one torchrun agent
  per node (``--nnodes N --nproc-per-node P``), joined by torchrun's c10d rendezvous on the first node's address
  (``scontrol show hostnames`` of the job's node list, then that node's ``NodeAddr``) and a free port there;
* N > 1 nodes in a Kubeflow MPIJob's launcher: ``mpirun`` over its hostfile, one torchrun per node
  (:mod:`accelbench.cluster.mpi_hostfile`).

Every result records the layout (:func:`launch_record`, :mod:`accelbench.cluster.launch_record`): nodes, ranks per
node, rendezvous backend and endpoint, the collective backend (gloo/NCCL/HCCL) and, for NCCL, the transports it chose,
parsed from ``NCCL_DEBUG=INFO`` lines (:func:`parse_nccl_transports`), so a reviewer sees whether inter-node traffic
used InfiniBand, sockets or NVLink. The plan's and the record's names are importable from here too.

Example::

    plan = node_plan(system, 16)  # h100 with devices_per_node 8 -> NodePlan(devices=16, nodes=2, per_node=8)
    cmd, rdzv = launch_command(plan, ["rank", "--experiment", "sr3_scaling", ...], allocation())
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from accelbench import backends
from accelbench.cluster import processes as launch
from accelbench.cluster.launch_record import collective_backend, launch_record, parse_nccl_transports  # noqa: F401
from accelbench.cluster.node_layout import NodePlan, devices_per_node, job_limit_reason, node_plan  # noqa: F401
from accelbench.errors import ConfigError

RDZV_BACKEND = "c10d"


# --------------------------------------------------------------------------- Slurm request (rules)
def load_site(path: str | Path | None = None) -> dict:
    """The Slurm site file (``slurm/site.yaml``, or ``$ACCELBENCH_SLURM_SITE``); {} when absent. Read as config
    files are (:func:`accelbench.core.files.read_yaml`): a plain file of bounded size (a FIFO or ``/dev/zero`` is
    refused, never opened: every DAG build reads it), no key given twice, no alias bomb.

    Raises:
        ConfigError: unreadable, not YAML, a duplicate key, or not a mapping; one line naming the file.
    """
    from accelbench.core.files import read_yaml

    path = Path(path or os.environ.get("ACCELBENCH_SLURM_SITE") or "slurm/site.yaml")
    if not os.path.lexists(path):
        return {}
    site = read_yaml(path, "Slurm site file") or {}
    if not isinstance(site, dict):
        raise ConfigError(f"Slurm site file {path}: expected a mapping (multinode: ...), not {type(site).__name__}")
    return site


def slurm_resources(system, devices: int, site: dict | None = None, key: str = "devices") -> dict:
    """Snakemake resources of a job on ``devices`` ranks (read by snakemake-executor-plugin-slurm).

    One node: ``{"gpu": devices}`` on CUDA (``--gpus``), 0 elsewhere, as before. N > 1 nodes: ``nodes`` (``--nodes``),
    ``tasks`` = N (``tasks_per_gpu`` 0) and ``mpi`` (the job step then runs the rule's command once, on the first node,
    which calls ``srun`` itself), ``slurm_extra`` with ``--ntasks-per-node=1``, ``--exclusive`` (site
    ``multinode.exclusive``) and the accelerators per node: ``--gpus-per-node=P``, or the site's GRES form
    (``multinode.gres: gpu`` -> ``gres: gpu:P``, which Slurm counts per node; Gaudi sites set their card's GRES name
    here).

    Raises:
        ConfigError: the count does not fill whole nodes (:func:`node_plan`).
    """
    plan = node_plan(system, devices, key)
    backend = backends.get(system.backend)
    if plan.nodes == 1:
        return {"gpu": plan.devices if backend.slurm_gpu_resource else 0}
    mn = (site or {}).get("multinode") or {}
    extra = ["--ntasks-per-node=1"]
    if mn.get("exclusive", True):
        extra.append("--exclusive")
    # tasks_per_gpu 0: the plugin would otherwise turn `tasks` into --ntasks-per-gpu for a GRES naming "gpu"
    res = {"nodes": plan.nodes, "tasks": plan.nodes, "tasks_per_gpu": 0, "mpi": "srun", "gpu": 0}
    if mn.get("gres"):
        if backend.accelerator:
            res["gres"] = f"{mn['gres']}:{plan.per_node}"
    elif backend.slurm_gpu_resource:
        extra.append(f"--gpus-per-node={plan.per_node}")
    res["slurm_extra"] = " ".join(extra)
    return res


# --------------------------------------------------------------------------- allocation and rendezvous
def _scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=True, timeout=60).stdout


def _field(line: str, name: str) -> str | None:
    m = re.search(rf"(?:^|\s){re.escape(name)}=(\S+)", line)
    return m.group(1) if m else None


def allocation(env: dict | None = None) -> dict | None:
    """The Slurm allocation this process runs in: ``{"job_id", "hosts", "cpus_per_task"}``; None outside Slurm.

    The node list comes from ``SLURM_JOB_NODELIST`` or, where the job step dropped it (the Slurm executor's job step
    keeps only ``SLURM_JOB_ID``), from ``scontrol show job``; ``scontrol show hostnames`` expands it.
    """
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job or shutil.which("scontrol") is None:
        return None
    info = _scontrol("show", "job", "-o", job)
    nodelist = env.get("SLURM_JOB_NODELIST") or _field(info, "NodeList")
    hosts = _scontrol("show", "hostnames", nodelist).split() if nodelist and nodelist != "(null)" else []
    cpt = _field(info, "CPUs/Task")
    return {"job_id": job, "hosts": hosts, "cpus_per_task": int(cpt) if cpt and cpt.isdigit() else None}


def allocation_reason(plan: NodePlan, alloc: dict | None) -> str | None:
    """Why a multi-node ``plan`` cannot start here (None if it can): outside Slurm, or too few nodes allocated."""
    if plan.nodes == 1:
        return None
    if alloc is None:
        return (
            f"{plan.devices} devices need {plan.nodes} nodes x {plan.per_node}; this job runs outside a Slurm "
            f"allocation and an MPI hostfile (run with `--profile slurm` or `--profile kubernetes`, which ask for "
            f"{plan.nodes} nodes)"
        )
    if len(alloc["hosts"]) < plan.nodes:
        return (
            f"{plan.devices} devices need {plan.nodes} nodes x {plan.per_node}; Slurm job {alloc['job_id']} "
            f"holds {len(alloc['hosts'])} node(s)"
        )
    return None


def node_address(node: str) -> str:
    """The address Slurm reaches ``node`` at (``NodeAddr``; the name itself where scontrol does not say)."""
    try:
        return _field(_scontrol("show", "node", "-o", node), "NodeAddr") or node
    except (subprocess.SubprocessError, OSError):
        return node


def free_port() -> int:
    """A TCP port free on this host now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def launch_command(plan: NodePlan, worker_args: list[str], alloc: dict | None = None) -> tuple[list[str], dict]:
    """The command that starts ``plan.devices`` ranks of ``python -m accelbench <worker_args>``, and its rendezvous.

    One node: ``torchrun --standalone --nproc_per_node P`` (c10d on localhost, free port). N nodes (``alloc`` from
    :func:`allocation`, holding >= N nodes): ``srun --nodes N --ntasks N --ntasks-per-node 1 --kill-on-bad-exit=1``
    [``--cpus-per-task C``] ``torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint H:PORT
    --rdzv-id <job>-<random> --max-restarts 0``, H the first node's address. The launcher runs on the first node
    (the batch step), so the free port is picked there.

    Returns:
        ``(argv, rendezvous)`` with ``rendezvous = {"backend", "endpoint", "hosts", "slurm_job_id"}``.
    """
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    worker = ["-m", "accelbench", *worker_args]
    if plan.nodes == 1:
        return (
            launch.torchrun_command(plan.devices, worker),  # --standalone on this node
            {
                "backend": RDZV_BACKEND,
                "endpoint": "localhost (standalone)",
                "hosts": [socket.gethostname()],
                "slurm_job_id": (alloc or {}).get("job_id") or os.environ.get("SLURM_JOB_ID"),
            },
        )
    reason = allocation_reason(plan, alloc)
    if reason:
        raise ConfigError(reason)
    hosts = alloc["hosts"][: plan.nodes]
    endpoint = f"{node_address(hosts[0])}:{free_port()}"
    srun = [
        "srun",
        f"--jobid={alloc['job_id']}",
        f"--nodes={plan.nodes}",
        f"--ntasks={plan.nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
    ]
    if alloc.get("cpus_per_task"):
        srun.append(f"--cpus-per-task={alloc['cpus_per_task']}")
    cmd = [
        *srun,
        *torchrun,
        f"--nnodes={plan.nodes}",
        f"--nproc-per-node={plan.per_node}",
        f"--rdzv-backend={RDZV_BACKEND}",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id=accelbench-{alloc['job_id']}-{secrets.token_hex(4)}",
        "--max-restarts=0",
        *worker,
    ]
    return cmd, {"backend": RDZV_BACKEND, "endpoint": endpoint, "hosts": hosts, "slurm_job_id": alloc["job_id"]}


def join_process_group(backend: str) -> tuple[int, int, int, str]:
    """In a rank started by torchrun: bind this rank's device (CUDA: ``LOCAL_RANK``; Gaudi: register HCCL) and join
    the process group with :func:`collective_backend` when there is more than one rank.

    Returns:
        ``(rank, world size, local rank, collective backend)``.
    """
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    ops = backends.get(backend)
    ops.set_device(local)
    ops.prepare_collective()
    pg = ops.collective
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend=pg, rank=rank, world_size=world)
    return rank, world, local, pg


def launch_env(backend: str, env: dict | None = None) -> dict:
    """Environment of the ranks: ``NCCL_DEBUG=INFO`` on CUDA (unless the user set it), so the transports NCCL picks
    appear in the log and :func:`parse_nccl_transports` can record them."""
    return backends.get(backend).rank_env(os.environ if env is None else env)


def run_tee(cmd: list[str], env: dict | None = None, timeout: float | None = None) -> tuple[int, str]:
    """Run ``cmd``, copying its output (stdout and stderr) to this process's stderr line by line; returns
    ``(exit status, output)``.

    Raises:
        subprocess.TimeoutExpired: ``cmd`` ran longer than ``timeout`` seconds (it is killed first).
    """
    import threading

    # in the job's process group, killed with this launcher (accelbench.cluster.processes: no rank outlives its job)
    proc = launch.start(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    lines: list[str] = []

    def pump():
        for line in proc.stdout:
            sys.stderr.write(line)
            lines.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        reader.join(timeout=10)
        sys.stderr.flush()
    return rc, "".join(lines)
