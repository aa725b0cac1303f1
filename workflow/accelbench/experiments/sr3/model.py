"""Study B SR3: the network, its noise schedule, the patch data, one rank's batches and its training loop
(:class:`Trainer`), as the authors' code (javierhndev/Super-Resolution-SR3) builds them on MONAI. Settings:
:mod:`.settings`; the quality check: :mod:`.quality`; the job that launches, times and merges the ranks: :mod:`.job`."""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from accelbench.backends.device import Device
from accelbench.errors import ConfigError
from accelbench.experiments.sr3.settings import SR3Settings
from accelbench.models.monai_import import import_monai


# --------------------------------------------------------------------------- model, schedule, data
def build_unet(s: SR3Settings) -> torch.nn.Module:
    """MONAI ``DiffusionModelUNet(spatial_dims=2)`` mapped to SR3 (module docstring), fp32 on CPU.

    SR3's dropout (before the second convolution of every resnet block) is added as a forward pre-hook
    on each block's ``conv2``; it acts in training mode only. MONAI zero-initialises some output
    convolutions (an untrained net predicts zero noise); those are re-initialised with PyTorch's default.
    """
    import_monai()
    from monai.networks.nets import DiffusionModelUNet
    from monai.networks.nets.diffusion_model_unet import DiffusionUNetResnetBlock

    model = DiffusionModelUNet(
        spatial_dims=2,
        in_channels=2,
        out_channels=1,
        num_res_blocks=[s.num_res_blocks] * len(s.channels),
        channels=list(s.channels),
        attention_levels=list(s.attention_levels),
        norm_num_groups=s.norm_groups,
        num_head_channels=[c // s.num_heads for c in s.channels],
        resblock_updown=False,
    )
    for module in model.modules():
        if (
            isinstance(module, (torch.nn.Conv2d, torch.nn.Linear))
            and not module.weight.is_meta
            and not module.weight.detach().any()
        ):
            module.reset_parameters()
        if isinstance(module, DiffusionUNetResnetBlock) and s.dropout > 0:
            module.conv2.register_forward_pre_hook(
                lambda mod, args, p=s.dropout: (F.dropout(args[0], p=p, training=mod.training),)
            )
    return model


def set_norm(model: torch.nn.Module, norm: str) -> torch.nn.Module:
    """``model`` with every ``nn.GroupNorm`` computed as ``norm`` says, in place: ``group_norm`` (MONAI's, SR3's)
    leaves it, ``channel_sums`` swaps each for :class:`accelbench.models.ndhwc_ops.ChannelSumGroupNorm` holding the
    same weight and bias tensors (same state dict, same arithmetic: per-channel fp32 sums over (H, W) added per group,
    one pointwise affine; fp64 checks in tests/experiments/test_ndhwc_ops.py); ``fused`` swaps each for
    :class:`accelbench.models.fused_groupnorm.FusedGroupNorm` (same tensors) and each resnet block's
    GroupNorm -> SiLU pairs, with the time-embedding add before the second, into that kernel family
    (:func:`_fused_resnet_block`; fp64 checks in tests/experiments/test_fused_groupnorm.py). Call it before
    ``torch.compile``.

    Raises:
        ConfigError: an unknown ``norm``."""
    from accelbench.models import ndhwc_ops

    if norm not in ndhwc_ops.NORM_IMPLS:
        raise ConfigError(f"sr3 norm: {norm!r} is not one of {', '.join(ndhwc_ops.NORM_IMPLS)}")
    fused_block = _fused_resnet_block()
    from monai.networks.nets.diffusion_model_unet import DiffusionUNetResnetBlock

    ndhwc_ops.set_group_norms(model, norm)
    for m in model.modules():  # fused: each resnet block's two GroupNorm + SiLU pairs in one kernel family
        if isinstance(m, DiffusionUNetResnetBlock):
            if norm == "fused":
                m.norm1.activation = m.norm2.activation = "silu"
            m.__class__ = fused_block if norm == "fused" else DiffusionUNetResnetBlock
    return model


@functools.cache
def _fused_resnet_block() -> type:
    """The class :func:`set_norm` gives MONAI's resnet blocks for ``norm="fused"`` (made once: MONAI loads lazily)."""
    import_monai()
    from monai.networks.nets.diffusion_model_unet import DiffusionUNetResnetBlock

    class FusedNormResnetBlock(DiffusionUNetResnetBlock):
        """MONAI's resnet block (same modules and parameters: :func:`set_norm` only changes an instance's class)
        with ``norm1``/``norm2`` :class:`~accelbench.models.fused_groupnorm.FusedGroupNorm` s that apply the SiLU
        after them, the second one also the time-embedding add before it; no up/downsampling inside the block
        (SR3's: ``resblock_updown=False``). Shapes as MONAI's: x (B, C_in, H, W), emb (B, E) -> (B, C_out, H, W)."""

        def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
            if self.upsample is not None or self.downsample is not None:
                raise ValueError("FusedNormResnetBlock: up/downsampling inside a resnet block is not SR3's")
            h = self.conv1(self.norm1(x))
            temb = self.time_emb_proj(self.nonlinearity(emb))
            return self.skip_connection(x) + self.conv2(self.norm2(h, temb.to(h.dtype)))

    return FusedNormResnetBlock


def _float64_schedule(sched, float64: bool):
    """Recompute betas/alphas/alpha_bar in float64, as SR3's numpy code does. In float32, 1 - alpha_bar at
    beta = 1e-6 keeps only ~2 significant digits, and MONAI's last reverse step then scales the image by
    beta_0 / (1 - alpha_bar_0) = 1.013 instead of 1. (Gaudi has no float64: kept float32 there.)"""
    if float64:
        sched.betas = sched.betas.double()
        sched.alphas = 1.0 - sched.betas
        sched.alphas_cumprod = torch.cumprod(sched.alphas, dim=0)
    return sched


def build_scheduler(s: SR3Settings, float64: bool = True):
    """MONAI ``DDPMScheduler``: SR3's linear beta schedule (``timesteps`` steps, beta_start .. beta_end).

    ``add_noise`` casts the schedule to the samples' dtype (float32 in training); sampling keeps float64.
    """
    import_monai()
    from monai.networks.schedulers import DDPMScheduler

    return _float64_schedule(
        DDPMScheduler(
            num_train_timesteps=s.timesteps,
            schedule="linear_beta",
            beta_start=s.beta_start,
            beta_end=s.beta_end,
            clip_sample=True,
        ),
        float64,
    )


def build_ddim(s: SR3Settings, float64: bool = True):
    """MONAI ``DDIMScheduler`` on the same betas (strided sampling for short quality checks; eta = 0)."""
    import_monai()
    from monai.networks.schedulers import DDIMScheduler

    return _float64_schedule(
        DDIMScheduler(
            num_train_timesteps=s.timesteps,
            schedule="linear_beta",
            beta_start=s.beta_start,
            beta_end=s.beta_end,
            clip_sample=True,
        ),
        float64,
    )


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


DDP_OPTIONS = ("static_graph", "gradient_as_bucket_view", "bucket_cap_mb")


def ddp_kwargs(ddp: dict | None) -> dict:
    """``sr3_scaling.ddp`` as ``DistributedDataParallel`` keyword arguments (unset/None = DDP's default).

    Raises:
        ConfigError: an unknown option (named).
    """
    d = {k: v for k, v in (ddp or {}).items() if v is not None}
    bad = sorted(set(d) - set(DDP_OPTIONS))
    if bad:
        raise ConfigError(f"sr3_scaling.ddp: unknown option(s) {bad}; allowed: {list(DDP_OPTIONS)}")
    return d


def compile_options(mode: str | None, layout_optimization: bool = False) -> dict:
    """Keyword arguments of ``torch.compile`` for ``mode`` (None: the default), with Inductor's layout optimization
    forced where asked (``layout_optimization`` and ``force_layout_optimization``; the mode's own options kept, since
    ``torch.compile`` takes a mode or options, not both). Scoped to this call: Inductor's process-wide config is left
    as it was."""
    if not layout_optimization:
        return {"mode": mode}
    import torch._inductor

    mode_options = torch._inductor.list_mode_options(mode) if mode else {}  # (None lists every mode's)
    # force_layout_optimization is read only where layout_optimization is on (off on ROCm by default)
    return {"options": {**mode_options, "layout_optimization": True, "force_layout_optimization": True}}


class Trainer:
    """One DDP rank's SR3 training loop: model (DDP-wrapped when distributed, with the ``ddp`` options of
    :func:`ddp_kwargs`), Adam, scheduler, batches (:func:`batch_loader`: ``loader_workers`` worker processes, capped at
    the rank's cores; ``blocking_copies``: the authors' blocking ``.to(device)``, else ``non_blocking=True``)."""

    def __init__(
        self,
        s: SR3Settings,
        device: Device,
        data: PatchSet,
        precision: str,
        seed: int,
        rank: int = 0,
        world: int = 1,
        distributed: bool = False,
        ddp: dict | None = None,
        *,
        compile: bool = False,
        fused_adam: bool = False,
        channels_last: bool = False,
        host_syncs: bool = False,
        compile_mode: str | None = None,
        loader_workers: int | None = None,
        blocking_copies: bool = False,
        layout_optimization: bool = False,
        norm: str = "group_norm",
    ):
        self.s, self.device, self.rank, self.world = s, device, rank, world
        self.distributed, self.host_syncs, self.blocking_copies = distributed, host_syncs, blocking_copies
        dev = device.torch_device
        torch.manual_seed(seed)  # same initial weights on every rank (DDP also broadcasts rank 0's)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.model = set_norm(build_unet(s), norm).to(dev, memory_format=self.memory_format)
        if distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.net = DDP(
                self.model, device_ids=[device.index] if device.ops.ddp_device_ids else None, **ddp_kwargs(ddp)
            )
        else:
            self.net = self.model
        if compile:  # DDP-wrapped: TorchDynamo splits the graph at DDP's buckets (DDPOptimizer)
            self.net = torch.compile(self.net, **compile_options(compile_mode, layout_optimization))
        self.cudagraphs = compile and compile_mode == "reduce-overhead"
        self.scheduler = build_scheduler(s, float64=False)  # add_noise works in the samples' dtype anyway
        self.fused_adam = bool(fused_adam and device.ops.fused_adamw)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=s.lr, **({"fused": True} if self.fused_adam else {}))
        self.amp = torch.bfloat16 if precision == "bf16" else None
        self.gen = torch.Generator(device=dev).manual_seed(seed + 1000 * (rank + 1))
        # pinned host memory where copies can overlap the device's work (CUDA): `.to(non_blocking=True)` from pageable
        # memory makes the host wait for the device before every iteration (bf16 on 1 H200: 166 -> 128 ms);
        # the authors' data path pins too (their create_dataloader's pin_memory=True), where the device pins
        self.pin_memory = device.ops.non_blocking_copies
        self.sampler, self.loader, self.data_path = batch_loader(
            data,
            s.batch_size,
            rank,
            world,
            seed,
            pin_memory=self.pin_memory,
            workers=loader_workers,
            blocking=blocking_copies,
        )
        if len(self.loader) == 0:
            raise ConfigError(f"no full batch of {s.batch_size} per rank from {len(data)} patches over {world} ranks")
        self.epoch, self._it = 0, iter(self.loader)
        self.losses: list[float] = []

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            cond, target = next(self._it)
        except StopIteration:
            self.epoch += 1
            self.sampler.set_epoch(self.epoch)
            self._it = iter(self.loader)
            cond, target = next(self._it)
        dev, fmt, blocking = self.device.torch_device, self.memory_format, self.blocking_copies
        return to_device(cond, dev, fmt, blocking), to_device(target, dev, fmt, blocking)

    def predict(self, net, x_t: torch.Tensor, cond: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        with self.device.autocast(self.amp):
            x = torch.cat([cond, x_t], dim=1).contiguous(memory_format=self.memory_format)
            return net(x, t).float()

    def loss(self, net) -> torch.Tensor:
        """SR3's training loss through ``net``: next batch, noise at random timesteps, L1 on the predicted epsilon."""
        cond, target = self.next_batch()
        dev = self.device.torch_device
        t = torch.randint(0, self.s.timesteps, (target.shape[0],), device=dev, generator=self.gen)
        noise = torch.randn(target.shape, device=dev, generator=self.gen)
        x_t = self.scheduler.add_noise(original_samples=target, noise=noise, timesteps=t)
        return F.l1_loss(self.predict(net, x_t, cond, t), noise)

    def flop_step(self) -> None:
        """One forward and backward of the network as :meth:`train_step` runs it (next batch, noise, L1 on epsilon),
        through the plain module (``self.model``: neither the DDP wrapper nor the compiled one) and with no
        optimizer step (the gradients are dropped): what FLOP counting runs
        (:func:`accelbench.measure.flops.count_flops`).

        Counting through the compiled module broke compilation: TorchDynamo, called under ``FlopCounterMode`` (a
        dispatch mode), leaves the frame uncompiled and runs it eagerly on every later call too, so every compiled
        configuration ran eager in the rule (H200, SR3 ``bf16_compile_cudagraphs``: the rule's median 197.2 ms, the
        same Trainer in the overhead benchmark 77.7 ms). The plain module runs the same operators, so the count is
        the same. Distributed, it runs on a copy of the module: DDP's gradient hooks sit on the module's parameters,
        and with ``static_graph=True`` a backward through them that DDP did not start left the replicas out of step
        (found on 2 gloo ranks)."""
        import copy

        model = copy.deepcopy(self.model) if self.distributed else self.model
        self.loss(model).backward()
        self.device.mark_step()
        if model is self.model:
            self.opt.zero_grad(set_to_none=True)
        del model

    def train_step(self) -> torch.Tensor:
        """One iteration: next batch, noise at random timesteps, L1 on epsilon, backward (DDP all-reduce), Adam.
        With ``host_syncs`` (the authors' ``sr.py``/``model.py``) it ends with ``loss.item()`` and, distributed,
        ``dist.barrier()``: two host synchronisations per iteration."""
        if self.cudagraphs:  # a new iteration: the graphs' previous outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        loss = self.loss(self.net)
        loss.backward()
        self.device.mark_step()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.device.mark_step()
        if self.host_syncs:
            loss.item()
            if self.distributed:
                import torch.distributed as dist

                dist.barrier()
        return loss.detach()


def replica_spread(model: torch.nn.Module) -> float:
    """Largest difference of any parameter between DDP ranks (0.0 = identical replicas). Collective."""
    import torch.distributed as dist

    v = torch.nn.utils.parameters_to_vector([p.detach().float() for p in model.parameters()])
    hi, lo = v.clone(), v.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    return float((hi - lo).abs().max())
