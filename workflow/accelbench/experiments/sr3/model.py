"""Study B SR3: one rank's training loop (:class:`Trainer`), as the authors' code
(javierhndev/Super-Resolution-SR3) builds it on MONAI, with its DDP and ``torch.compile`` options. The network and
its schedules are :mod:`.network`, the patch data and one rank's batches :mod:`.batches` (their names offered here
too); settings: :mod:`.settings`; the quality check: :mod:`.quality`; the job that launches, times and merges the
ranks: :mod:`.job`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from accelbench.backends.device import Device
from accelbench.errors import ConfigError
from accelbench.experiments.sr3.batches import (  # noqa: F401 (offered here, as they always were)
    PERSISTENT_WORKERS_WHY,
    PatchSet,
    batch_loader,
    rank_cores,
    to_device,
    upsample,
)
from accelbench.experiments.sr3.configs import Configuration
from accelbench.experiments.sr3.network import (  # noqa: F401 (offered here, as they always were)
    build_ddim,
    build_scheduler,
    build_unet,
    set_norm,
)
from accelbench.experiments.sr3.settings import SR3Settings

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
        conf: Configuration,
        seed: int,
        *,
        rank: int = 0,
        world: int = 1,
        ddp: dict | None = None,
    ):
        """Build rank ``rank`` of ``world`` (DDP when ``world > 1``) in configuration ``conf``: its precision,
        compilation (mode, Inductor layout optimization), fused Adam, channels-last layout, normalisation, host
        synchronisations and data path (``loader_workers``, ``blocking_copies``). Its attention placement and cuDNN
        autotuning are the caller's (:meth:`SR3Settings.for_configuration`, ``torch.backends.cudnn.benchmark``).

        Raises:
            ConfigError: an unknown ``ddp`` option, or no full batch per rank.
        """
        distributed = world > 1
        precision, compile, compile_mode = conf.precision, conf.compile, conf.compile_mode
        self.s, self.device, self.rank, self.world = s, device, rank, world
        self.distributed, self.host_syncs, self.blocking_copies = distributed, conf.host_syncs, conf.blocking_copies
        dev = device.torch_device
        torch.manual_seed(seed)  # same initial weights on every rank (DDP also broadcasts rank 0's)
        self.memory_format = torch.channels_last if conf.channels_last else torch.contiguous_format
        self.model = set_norm(build_unet(s), conf.norm, conf.layout_optimization).to(
            dev, memory_format=self.memory_format
        )
        if distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.net = DDP(
                self.model, device_ids=[device.index] if device.ops.ddp_device_ids else None, **ddp_kwargs(ddp)
            )
        else:
            self.net = self.model
        if compile:  # DDP-wrapped: TorchDynamo splits the graph at DDP's buckets (DDPOptimizer)
            self.net = torch.compile(self.net, **compile_options(compile_mode, conf.layout_optimization))
        self.cudagraphs = compile and compile_mode == "reduce-overhead"
        self.scheduler = build_scheduler(s, float64=False)  # add_noise works in the samples' dtype anyway
        self.fused_adam = bool(conf.fused_adam and device.ops.fused_adamw)
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
            workers=conf.loader_workers,
            blocking=conf.blocking_copies,
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
