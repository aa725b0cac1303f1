"""Study B SR3: the patch data and one rank's batches: (condition, target) pairs built as SR3 builds them
(:class:`PatchSet`, bicubic :func:`upsample`), the rank's ``DistributedSampler`` and ``DataLoader`` with its workers
capped at the rank's cores (:func:`batch_loader`), and the copy to the device (:func:`to_device`). :mod:`.model`
offers these names too."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from accelbench.errors import ConfigError


def upsample(lr: torch.Tensor, size: int) -> torch.Tensor:
    """Bicubic upsampling (B, 1, h, w) -> (B, 1, size, size), as SR3 builds its condition image."""
    return F.interpolate(lr, size=(size, size), mode="bicubic", align_corners=False)


class PatchSet(torch.utils.data.Dataset):
    """(condition, target) pairs in [-1, 1], each (1, H, W); repeated cyclically up to ``min_len`` items so
    that every rank gets full batches even when patches are few (paper scale on many devices)."""

    def __init__(self, hr: np.ndarray, lr: np.ndarray, hr_size: int, min_len: int = 0):
        hr_t = torch.from_numpy(np.ascontiguousarray(hr, dtype=np.float32))[:, None]
        lr_t = torch.from_numpy(np.ascontiguousarray(lr, dtype=np.float32))[:, None]
        if hr_t.shape[-1] != hr_size:
            raise ConfigError(f"sky patches are {hr_t.shape[-1]} px but sr3_scaling hr_size is {hr_size}")
        self.target = hr_t * 2 - 1
        self.cond = upsample(lr_t, hr_size).clamp(0, 1) * 2 - 1
        self.n = len(hr_t)
        self.length = max(self.n, min_len)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        return self.cond[i % self.n], self.target[i % self.n]


def rank_cores() -> int:
    """The cores this rank has: its intra-op threads (``torch.get_num_threads()``: its share of the job's cores, set
    by :func:`accelbench.cluster.processes.place_this_rank`), at most the CPUs it may run on (its affinity block)."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else torch.get_num_threads()
    return max(1, min(torch.get_num_threads(), cpus))


PERSISTENT_WORKERS_WHY = (
    "the authors' workers restart every epoch (persistent_workers=False), but their epoch is their "
    "whole training set; ours is a few iterations at paper scale, so workers are kept for the run "
    "to keep restarts out of the timed iterations, as the authors' long epochs do"
)


def batch_loader(
    data: PatchSet,
    batch_size: int,
    rank: int,
    world: int,
    seed: int,
    *,
    pin_memory: bool,
    workers: int | None = None,
    blocking: bool = False,
):
    """One rank's batches: a ``DistributedSampler`` (shuffled, full batches) and its ``DataLoader``.

    ``workers`` (a configuration's ``loader_workers``; None: 0, batches made in this process) is capped at the cores
    this rank has (:func:`rank_cores`). Workers are persistent (:data:`PERSISTENT_WORKERS_WHY`): the authors'
    ``create_dataloader`` keeps DataLoader's default (``persistent_workers=False``, the workers start again every
    epoch), but their epoch is their whole training set, while ours is a few iterations at paper scale (18 patches at
    batch 4: a restart every 2-4 iterations, each 0.1 s or more, inside the timed loop). ``pin_memory``: whether the
    device pins (the caller
    says). ``blocking``: how the caller copies the batch (:func:`to_device`), recorded only.

    Returns:
        ``(sampler, loader, data_path)``: ``data_path`` is what ``measurements.data_path`` records (workers requested
        and used, the cores that capped them, pinning, the copy, the source of these settings).
    """
    from torch.utils.data import DataLoader, DistributedSampler

    from accelbench.experiments.sr3.configs import AUTHORS_DATA_SOURCE, OURS_DATA_SOURCE

    requested, cores = int(workers or 0), rank_cores()
    used = min(requested, cores)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(
        data,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=True,
        num_workers=used,
        pin_memory=pin_memory,
        persistent_workers=used > 0,
    )
    authors = workers is not None or blocking
    record = {
        "loader_workers_requested": requested,
        "loader_workers": used,
        "rank_cores": cores,
        "capped": (
            f"{requested} workers requested, {cores} core(s) on this rank (its threads, its share of "
            "the job's cores; at most its CPU affinity)"
        )
        if used < requested
        else None,
        "pin_memory_requested": True if authors else pin_memory,
        "pin_memory": pin_memory,
        "persistent_workers": used > 0,
        "persistent_workers_why": PERSISTENT_WORKERS_WHY if used > 0 else None,
        "copy": "blocking" if blocking else "non_blocking",
        "source": AUTHORS_DATA_SOURCE if authors else OURS_DATA_SOURCE,
    }
    return sampler, loader, record


def to_device(x: torch.Tensor, dev: torch.device, memory_format: torch.memory_format, blocking: bool) -> torch.Tensor:
    """``x`` on ``dev``: a blocking copy (the authors' ``set_device``: ``x.to(device)``) or ``non_blocking=True``."""
    return x.to(dev, non_blocking=not blocking, memory_format=memory_format)
