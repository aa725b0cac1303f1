"""Network smoke test: an all-reduce bandwidth sweep over a job's ranks, on the launch path of SR3 and LoRA.

Before spending hours on SR3 strong scaling across nodes, a site sees what its interconnect delivers: every rank
all-reduces (sum) a float32 tensor of each message size, ``warmup`` untimed and ``iters`` timed calls per size with
a barrier before each call and the device synchronized after it; the slowest rank's time counts (per call, the
maximum over ranks: :func:`accelbench.measure.timing.merge_ranks`). Bandwidths follow ``nccl-tests``' definitions
(``all_reduce_perf``): algorithm bandwidth ``algbw = bytes / t`` and bus bandwidth ``busbw = algbw * 2 (n - 1) / n``
for ``n`` ranks, the number to compare with a link's peak. Launched like the measurements
(:mod:`accelbench.core.launcher`, :mod:`accelbench.cluster.multinode`): ``srun`` + ``torchrun`` c10d across nodes,
``torchrun --standalone`` on one, so the backend (NCCL/HCCL/gloo), rendezvous and, for NCCL, the chosen transports
are the ones SR3 will get. NCCL's own ``all_reduce_perf`` is run too where it is on ``PATH`` (optional; its output is
kept verbatim).
"""

from __future__ import annotations

import logging
import os
import platform
from dataclasses import dataclass

from accelbench import backends
from accelbench.core.outcome import Outcome
from accelbench.measure import timing as measure

EXPERIMENT = "net_smoke"
METHOD = "barrier, all_reduce(sum, float32), synchronize; median over calls of the slowest rank's time"
log = logging.getLogger("accelbench")


def message_sizes(max_bytes: int, min_bytes: int = 4096, factor: int = 4) -> list[int]:
    """Message sizes in bytes: ``min_bytes``, x ``factor`` ... up to ``max_bytes`` (multiples of 4: float32)."""
    out, n = [], min_bytes
    while n <= max_bytes:
        out.append(n // 4 * 4)
        n *= factor
    return out


def bandwidths(nbytes: int, seconds: float, world: int) -> dict:
    """``{"algbw_gbps", "busbw_gbps"}`` in GB/s (1e9 B/s) of one all-reduce of ``nbytes`` over ``world`` ranks taking
    ``seconds`` (nccl-tests: busbw = algbw x 2 (n-1)/n)."""
    alg = nbytes / seconds / 1e9
    return {"algbw_gbps": alg, "busbw_gbps": alg * 2 * (world - 1) / world}


# --------------------------------------------------------------------------- the job (accelbench.core.harness)
@dataclass(frozen=True)
class Settings:
    """One sweep: ``devices`` ranks; message sizes up to ``max_bytes``; ``warmup`` untimed and ``iters`` timed calls
    per size. Defaults (when the spec does not set them): 16 MiB, 2 and 10 on ``cpu``; 1 GiB, 5 and 20 elsewhere."""

    devices: int
    max_bytes: int
    warmup: int
    iters: int

    @classmethod
    def from_spec(cls, spec: dict, system) -> Settings:
        """From the rule's spec: ``{system, devices}`` (``max_bytes``, ``warmup``, ``iters`` optional)."""
        cpu = not backends.get(system.backend).accelerator
        return cls(
            int(spec["devices"]),
            int(spec.get("max_bytes", 16 * 2**20 if cpu else 2**30)),
            int(spec.get("warmup", 2 if cpu else 5)),
            int(spec.get("iters", 10 if cpu else 20)),
        )

    @property
    def sizes(self) -> list[int]:
        return message_sizes(self.max_bytes)


def run_rank(s: Settings, ctx) -> dict:
    """One rank of the sweep (in each process ``ctx.run_ranks`` started): this rank's table.

    Returns:
        ``{"rank", "world_size", "collective_backend", "node", "sizes": [{"bytes", "times_us": [one per timed
        call]}, ...]}`` (times in microseconds).
    """
    import torch
    import torch.distributed as dist

    from accelbench.backends.device import Device
    from accelbench.cluster.multinode import join_process_group

    backend = ctx.system.backend
    rank, world, local, pg = join_process_group(backend)
    device = Device(backend, backends.get(backend).device_index(local))
    rows = []
    for nbytes in s.sizes:
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=device.torch_device)
        clock = measure.StepClock(device, wall=True)  # synchronize, host clock, call, synchronize
        for _ in range(s.warmup + s.iters):
            dist.barrier()
            clock.start()
            dist.all_reduce(x)
            clock.stop()
        rows.append({"bytes": nbytes, "times_us": [t * 1e3 for t in clock.samples()[s.warmup :]]})
        del x
    dist.barrier()
    dist.destroy_process_group()
    return {
        "rank": rank,
        "world_size": world,
        "collective_backend": pg,
        "node": os.environ.get("SLURMD_NODENAME") or platform.node(),
        "sizes": rows,
    }


def merge(records: list[dict], warmup: int, iters: int) -> dict:
    """The sweep from every rank's table (rank order): per call, the slowest rank's time
    (:func:`accelbench.measure.timing.merge_ranks`); per size its median and minimum over calls and the bandwidths.

    Returns:
        ``{"world_size", "collective_backend", "rank_nodes", "warmup", "iters", "method", "sizes": [{"bytes",
        "time_us" (median of the per-call maxima over ranks), "time_us_min", "algbw_gbps", "busbw_gbps"}, ...]}``.
    """
    world = len(records)
    rows = []
    for i, row in enumerate(records[0]["sizes"]):
        t = measure.merge_ranks([r["sizes"][i]["times_us"] for r in records], warmup, METHOD)
        rows.append(
            {
                "bytes": row["bytes"],
                "time_us": t.median,
                "time_us_min": t.min,
                **bandwidths(row["bytes"], t.median / 1e6, world),
            }
        )
    return {
        "world_size": world,
        "collective_backend": records[0]["collective_backend"],
        "rank_nodes": [r["node"] for r in records],
        "warmup": warmup,
        "iters": iters,
        "method": METHOD,
        "sizes": rows,
    }


def run(s: Settings, ctx) -> Outcome:
    """The sweep over ``s.devices`` ranks (:func:`run_rank`, launched through ``ctx.run_ranks``), merged
    (:func:`merge`); ``allreduce.csv`` (one row per size) beside the result; NCCL's ``all_reduce_perf`` where it is on
    ``PATH`` (CUDA, one node; its output under ``launch.nccl_tests``).

    Raises:
        AccelbenchError: fewer than 2 ranks, or a layout this job cannot start (outside a Slurm allocation, ...).
    """
    import shutil
    import subprocess

    import pandas as pd

    from accelbench.cluster.multinode import node_plan
    from accelbench.errors import AccelbenchError

    config = {"max_bytes": s.max_bytes, "warmup": s.warmup, "iters": s.iters}
    plan = node_plan(ctx.system, s.devices, "net_smoke devices")
    if plan.devices < 2:
        raise AccelbenchError("net-smoke needs at least 2 ranks to all-reduce between (ask for devices_2 or more)")
    ranks = ctx.run_ranks(s, s.devices, "net_smoke devices")
    if isinstance(ranks, Outcome):
        if ranks.status == "unsupported":
            raise AccelbenchError(f"net-smoke: {ranks.reason}")
        ranks.config = {**config, **ranks.config}
        return ranks  # oom
    m = merge(ranks.records, s.warmup, s.iters)
    record = ranks.launch
    nccl_tests = shutil.which(
        "all_reduce_perf"
    )  # NCCL's nccl-tests, optional, one node (multi-node needs its MPI build)
    if nccl_tests and backends.get(ctx.system.backend).collective == "nccl" and plan.nodes == 1:
        proc = subprocess.run(
            [nccl_tests, "-b", "8", "-e", str(s.max_bytes), "-f", "4", "-g", str(plan.devices)],
            capture_output=True,
            text=True,
        )
        record["nccl_tests"] = {"command": proc.args, "returncode": proc.returncode, "output": proc.stdout[-8000:]}
    else:
        record["nccl_tests"] = None
    m["launch"] = record
    table = pd.DataFrame(m["sizes"])
    table.insert(0, "ranks", plan.devices)
    table.insert(1, "nodes", plan.nodes)
    with ctx.side_file("allreduce.csv", "table") as tmp:
        table.to_csv(tmp, index=False)
    transports = (record["nccl"] or {}).get("inter_node") or (record["nccl"] or {}).get("via")
    log.info(
        "%s: peak bus bandwidth %.3g GB/s (%s, %s)",
        ctx.out,
        table["busbw_gbps"].max(),
        record["collective_backend"],
        transports or "transports not reported",
    )
    return Outcome("ok", m, config=config)
