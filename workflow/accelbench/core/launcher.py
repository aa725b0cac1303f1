"""The one rank launcher: plan, launch and collect the ranks of a multi-rank experiment (SR3, LoRA, net_smoke).

Launcher side (:func:`run_ranks`, called through :meth:`accelbench.core.harness.JobContext.run_ranks`):

1. **Plan** the layout (:func:`accelbench.cluster.multinode.node_plan`): one node up to the system's
   ``devices_per_node``, whole nodes above it; a multi-node plan outside both a Slurm allocation and an MPI
   hostfile (:mod:`accelbench.cluster.mpi_hostfile`: a Kubeflow MPIJob's launcher), or above the system's
   ``devices``, is an ``unsupported`` outcome with the reason.
2. **Threads**, stated once (:func:`accelbench.cluster.processes.rank_threads`): each rank gets its share of the job's
   cores, ``threads // ranks per node``; on a system whose device *is* a core (``cpu`` with ``devices_per_node: cores``)
   each rank gets exactly one, so adding CPU "devices" adds cores as adding GPUs adds GPUs. Each rank also gets
   its own block of the job's CPUs (:func:`accelbench.cluster.processes.place_this_rank`) and dies with its launcher.
3. **Launch** ``accelbench rank --experiment <name> --spec <file> ...`` in every rank: ``torchrun --standalone`` on
   one node, ``srun`` + ``torchrun`` c10d across nodes (:func:`accelbench.cluster.multinode.launch_command`), or
   ``mpirun`` + ``torchrun`` over an MPI hostfile (:func:`accelbench.cluster.mpi_hostfile.launch_command`). The spec
   travels as its file, never as inline JSON.
4. **Collect**, one rank-file protocol: every rank writes ``rank<r>.json`` =
   ``{"rank", "status", "reason", "record", "artefacts"}`` into a folder under the working directory (shared
   between the nodes of a cluster job). A rank that runs out of device memory writes ``status: oom`` (caught here,
   in :func:`accelbench.core.harness.rank_main`, for every experiment) and exits, so torchrun stops the ranks waiting
   on it; a rank whose ``run_rank`` returns a record with its own ``status`` other than ``ok`` is treated the same.

Results: the first failed rank's status becomes the job's (``oom`` with the rank's reason, ``measurements.ranks``
the failed ranks' records); otherwise the experiment merges the records (its ``run`` gets a :class:`Ranks`).
A rank that fails for any other reason ends the job with an error naming the exit status and the log's tail.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from accelbench.cluster import mpi_hostfile, multinode
from accelbench.cluster import processes as launch
from accelbench.core.outcome import Outcome
from accelbench.errors import AccelbenchError

log = logging.getLogger("accelbench")
RANK_ROOT = Path(".snakemake/accelbench/ranks")  # under the working directory: shared by the nodes of a cluster job


@dataclass
class Ranks:
    """What the ranks of one job returned.

    Attributes:
        records: each rank's ``run_rank`` record, in rank order.
        launch: the launch record (:func:`accelbench.cluster.multinode.launch_record`): nodes, ranks per node,
            rendezvous, collective backend, NCCL transports.
    """

    records: list[dict]
    launch: dict


def accelbench_command(args: list[str]) -> list[str]:
    """``python -m accelbench <args>`` with this interpreter: what every launched process runs (torchrun's ranks,
    Nsight Compute's replayed step)."""
    import sys

    return [sys.executable, "-m", "accelbench", *args]


def _inputs_args(inputs: dict) -> list[str]:
    out = []
    for k, v in inputs.items():
        if v is not None:
            out += ["--input", f"{k}={v}"]
    return out


def run_ranks(ctx, settings, devices: int, key: str, timeout: float | None = None):
    """Start ``devices`` ranks of ``ctx.experiment``'s ``run_rank(settings, ctx)`` and collect them.

    Args:
        ctx: the job's :class:`accelbench.core.harness.JobContext`.
        settings: the experiment's settings (each rank rebuilds them from the same spec file).
        devices: ranks to start (one per device).
        key: the config key the count came from (named in errors).
        timeout: seconds before the ranks are killed (None: no limit).

    Returns:
        :class:`Ranks`, or an ``oom``/``unsupported`` :class:`accelbench.core.harness.Outcome`.

    Raises:
        AccelbenchError: a rank failed for another reason than memory (exit status and log tail named).
    """
    system = ctx.system
    plan = multinode.node_plan(system, devices, key)
    alloc = multinode.allocation() if plan.nodes > 1 else None
    mpi = mpi_hostfile.allocation() if plan.nodes > 1 and alloc is None else None  # an MPIJob's launcher
    reason = mpi_hostfile.allocation_reason(plan, mpi) if mpi else multinode.allocation_reason(plan, alloc)
    reason = reason or multinode.job_limit_reason(system, plan)
    if reason:
        return Outcome.unsupported(reason, {"launch": multinode.launch_record(plan, system.backend, None)})
    RANK_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ranks_", dir=RANK_ROOT) as rank_dir:
        worker = [
            "rank",
            "--experiment",
            ctx.experiment.name,
            "--spec",
            ctx.spec_path,
            "--out",
            str(ctx.out),
            "--rank-dir",
            rank_dir,
            "--threads",
            str(ctx.threads),
            *_inputs_args(ctx.inputs),
        ]
        per_rank = launch.rank_threads(system, ctx.threads, plan.per_node)
        env = multinode.launch_env(system.backend, launch.rank_env(ctx.threads, plan.per_node, per_rank=per_rank))
        if mpi:
            cmd, rdzv = mpi_hostfile.launch_command(plan, worker, mpi, env)
        else:
            cmd, rdzv = multinode.launch_command(plan, worker, alloc)
        log.info(
            "launching %d rank(s) on %d node(s), %d thread(s) each: %s",
            devices,
            plan.nodes,
            per_rank,
            " ".join(cmd[:12]),
        )
        returncode, output = multinode.run_tee(cmd, env=env, timeout=timeout)
        files = sorted(Path(rank_dir).glob("rank*.json"), key=lambda p: int(p.stem[4:]))
        statuses = [json.loads(p.read_text()) for p in files]
    failed = [s for s in statuses if s["status"] != "ok"]
    if failed:
        first = failed[0]
        return Outcome(first["status"], {"ranks": [s.get("record") or {} for s in failed]}, first["reason"])
    if returncode != 0 or len(statuses) != devices:
        lines = output.splitlines()
        errors = [ln for ln in lines if "Error" in ln and "elastic" not in ln and "errors.html" not in ln]
        tail = "\n".join(errors[-5:] + lines[-10:])
        raise AccelbenchError(
            f"{ctx.experiment.name}: {devices} rank(s) failed (exit status {returncode}, "
            f"{len(statuses)} rank result(s)); see the log above:\n{tail}"
        )
    for s in statuses:
        ctx.artefacts.update(s.get("artefacts") or {})
    return Ranks([s["record"] for s in statuses], multinode.launch_record(plan, system.backend, rdzv, output))


def in_process(ctx, settings) -> Ranks:
    """Run ``run_rank`` once in this process (a single-device run that needs no process group), as a :class:`Ranks`
    of one record: the same merge then serves one rank and many."""
    module = ctx.experiment.load()
    record = module.run_rank(settings, ctx)
    return Ranks([record], multinode.launch_record(multinode.NodePlan(1, 1, 1), ctx.system.backend, None))
