"""Network smoke test: an all-reduce bandwidth sweep over a job's ranks, on the launch path of SR3 and LoRA.

Before spending hours on SR3 strong scaling across nodes, a site sees what its interconnect delivers: every rank
all-reduces (sum) a float32 tensor of each message size, ``warmup`` untimed and ``iters`` timed calls per size with
a barrier before each call and the device synchronized after it; the slowest rank's time counts. Bandwidths follow
``nccl-tests``' definitions (``all_reduce_perf``): algorithm bandwidth ``algbw = bytes / t`` and bus bandwidth
``busbw = algbw * 2 (n - 1) / n`` for ``n`` ranks, the number to compare with a link's peak. Launched like the
measurements (:mod:`accelbench.multinode`): ``srun`` + ``torchrun`` c10d across nodes, ``torchrun --standalone`` on
one, so the backend (NCCL/HCCL/gloo), rendezvous and, for NCCL, the chosen transports are the ones SR3 will get.
NCCL's own ``all_reduce_perf`` is run too where it is on ``PATH`` (optional; its output is kept verbatim).
"""

from __future__ import annotations

import os
import platform
import time

EXPERIMENT = "net_smoke"


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


def run_rank(backend: str, sizes: list[int], warmup: int, iters: int) -> dict | None:
    """One rank of the sweep (started by torchrun). Returns the table on rank 0, None elsewhere.

    Returns:
        ``{"world_size", "collective_backend", "rank_nodes", "sizes": [{"bytes", "time_us" (median of the per-call
        maxima over ranks), "time_us_min", "algbw_gbps", "busbw_gbps"}, ...]}``.
    """
    import torch
    import torch.distributed as dist

    from ..devices import Device
    from ..multinode import collective_backend

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    pg = collective_backend(backend)
    if backend == "cuda":
        torch.cuda.set_device(local)
    elif backend == "hpu":
        import habana_frameworks.torch.distributed.hccl  # noqa: F401  (gated: hpu only; registers hccl)
    dist.init_process_group(backend=pg, rank=rank, world_size=world)
    device = Device(backend, local if backend == "cuda" else 0)
    rows = []
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=device.torch_device)
        times = []
        for i in range(warmup + iters):
            dist.barrier()
            device.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            device.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        slowest = torch.tensor(times, dtype=torch.float32, device=device.torch_device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        t = sorted(slowest.cpu().tolist())
        med = t[len(t) // 2] if len(t) % 2 else (t[len(t) // 2 - 1] + t[len(t) // 2]) / 2
        rows.append({"bytes": nbytes, "time_us": med * 1e6, "time_us_min": t[0] * 1e6, **bandwidths(nbytes, med, world)})
        del x
    nodes = [None] * world
    dist.all_gather_object(nodes, os.environ.get("SLURMD_NODENAME") or platform.node())
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return None
    return {"world_size": world, "collective_backend": pg, "rank_nodes": nodes, "warmup": warmup, "iters": iters,
            "method": "barrier, all_reduce(sum, float32), synchronize; median over calls of the slowest rank's time",
            "sizes": rows}
