"""The training and sampling step Study A times (imports torch): :class:`Workload` (model, optimizer, noise scheduler
and inputs of one configuration on one device; :meth:`Workload.train_step` is Med-DDPM's optimizer step of
``micro_batches`` forward/backward passes, :meth:`Workload.sample_step` one reverse-diffusion step) and
:func:`nvtx_step`, the one step in an NVTX range that Nsight Compute replays
(:mod:`accelbench.experiments.unet3d_ncu.job`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from accelbench.backends.device import Device
from accelbench.experiments.unet3d.configs import ModelSettings, Variant, keeps_grad_buffers, passes_per_step
from accelbench.experiments.unet3d.network import build_network, build_scheduler, set_implementations
from accelbench.experiments.unet3d.numerics import math_mode


def compile_kwargs(variant: Variant) -> dict:
    """``torch.compile``'s keyword arguments for ``variant``: its mode; with :attr:`Variant.layout_optimization` off,
    the mode's own Inductor options (``torch._inductor.list_mode_options``; ``torch.compile`` takes a mode or options,
    not both) plus ``layout_optimization=False``, for this compile only."""
    if variant.layout_optimization:
        return {"mode": variant.compile_mode}
    import torch._inductor

    mode_options = torch._inductor.list_mode_options(variant.compile_mode) if variant.compile_mode else {}
    return {"options": {**mode_options, "layout_optimization": False}}


class Workload:
    """Model, optimizer, scheduler and inputs for one variant on one device.

    Inputs: ``image`` (B, C_img, X, Y, Z) in [-1, 1] and ``mask`` (B, C_mask, X, Y, Z) one-hot; their spatial axes
    are put in the network's layout (:attr:`ModelSettings.spatial_order`).

    The model's module implementations are set to the variant's (:func:`.network.set_implementations`, in place)
    before it is compiled.

    Gradient buffers (``stable_grads``, :func:`keeps_grad_buffers`): with CUDA graphs (:attr:`Variant.cuda_graphs`)
    and more than one micro-batch, every parameter's ``.grad`` is allocated here, as zeros outside the CUDA graphs'
    memory pool, and zeroed in place after each optimizer step instead of being set to None. Otherwise autograd makes
    the first micro-batch's gradient the ``.grad`` itself, without a copy: the compiled backward's output, which lives
    in the CUDA-graph pool. The next micro-batch's forward starts a new CUDA-graph generation (its previous backward
    has run), which lets the graphs overwrite every output of the previous one, and accumulating into ``.grad`` in
    that micro-batch's backward fails with "RuntimeError: Error: accessing tensor output of CUDAGraphs that has been
    overwritten by a subsequent run" (H200, torch 2.11, ``bf16_compile_cudagraphs_autotuned`` on Med-DDPM's
    network; the stack trace it names, ``emb = self.time_mlp(...)`` in ``network.py``, is that of the first
    parameter's gradient, the time embedding's ``Linear``). ``torch.compiler.cudagraph_mark_step_begin()`` does not
    help: it starts a new generation where one starts anyway (pytorch/pytorch#169545 fails with it; torch's own
    message since pytorch/pytorch#184003 advises ``.grad`` buffers allocated outside the capture). The network
    compiles to one graph (dynamo on the CPU: no graph break, checkpointed attention included), so nothing else is
    needed. Cost: one in-place add per parameter in the first micro-batch and one in-place zeroing per step; the
    arithmetic and the gradients are unchanged. Recorded as ``measurements.grad_buffers``.

    Folded micro-batches (:attr:`Variant.fold_micro_batches`, :func:`.configs.passes_per_step`): a training step is one
    pass over ``train_image``/``train_mask``, the inputs repeated ``micro_batches`` times along the batch, with one
    timestep and noise draw per volume; sampling keeps batch B.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        settings: ModelSettings,
        variant: Variant,
        device: Device,
        image: torch.Tensor,
        mask: torch.Tensor,
        seed: int,
    ):
        self.s, self.v, self.device = settings, variant, device
        dev = device.torch_device
        fmt = torch.channels_last_3d if variant.channels_last_3d else torch.contiguous_format
        self.model = set_implementations(model, variant).to(dev, memory_format=fmt)  # the variant's modules
        order = (0, 1, *(2 + a for a in settings.spatial_order))
        image, mask = image.permute(order), mask.permute(order)
        self.image = image.repeat(settings.batch_size, 1, 1, 1, 1).to(dev).contiguous(memory_format=fmt)
        self.mask = mask.repeat(settings.batch_size, 1, 1, 1, 1).to(dev).contiguous(memory_format=fmt)
        self.fmt = fmt
        self.passes, fold = passes_per_step(variant, settings)
        self.train_image = self.image.repeat(fold, 1, 1, 1, 1).contiguous(memory_format=fmt) if fold > 1 else self.image
        self.train_mask = self.mask.repeat(fold, 1, 1, 1, 1).contiguous(memory_format=fmt) if fold > 1 else self.mask
        self.scheduler = build_scheduler(settings)
        self.net = torch.compile(self.model, **compile_kwargs(variant)) if variant.compile else self.model
        fused = {"fused": True} if variant.fused_adam and device.ops.fused_adamw else {}
        self.opt = torch.optim.Adam(self.model.parameters(), lr=settings.lr, **fused)
        self.stable_grads = keeps_grad_buffers(variant, settings)  # see the class docstring
        if self.stable_grads:
            for p in self.model.parameters():
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)  # eager memory, the parameter's layout (channels_last_3d kept)
        self.amp = torch.bfloat16 if variant.autocast == "bf16" else None
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        self.x_t = torch.randn(self.image.shape, generator=self.gen, device=dev).contiguous(memory_format=fmt)
        self.t_sample = int(settings.timesteps // 2)

    def predict(self, x_t: torch.Tensor, t: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        inp = torch.cat([x_t, self.mask if mask is None else mask], dim=1).contiguous(memory_format=self.fmt)
        with self.device.autocast(self.amp):
            return self.net(inp, t).float()

    def train_step(self) -> torch.Tensor:
        """One optimizer step at batch B: ``micro_batches`` x (forward + L1 loss on epsilon / micro_batches +
        backward), then the Adam step (Med-DDPM's gradient accumulation); folded (class docstring), one forward + L1
        loss + backward over all ``micro_batches`` x B volumes, then the Adam step. Returns the mean micro-batch loss.
        The gradients are set to None after the step, or zeroed in place where ``stable_grads`` (class docstring)."""
        dev = self.device.torch_device
        image, mask, n = self.train_image, self.train_mask, self.passes
        losses = []
        for _ in range(n):
            t = torch.randint(0, self.s.timesteps, (image.shape[0],), device=dev, generator=self.gen)
            noise = torch.randn(image.shape, device=dev, generator=self.gen).contiguous(memory_format=self.fmt)
            x_t = self.scheduler.add_noise(original_samples=image, noise=noise, timesteps=t)
            loss = F.l1_loss(self.predict(x_t, t, mask), noise)
            if n > 1:
                loss = loss / n
            loss.backward()
            losses.append(loss.detach())
            self.device.mark_step()
        self.opt.step()
        self.opt.zero_grad(set_to_none=not self.stable_grads)
        self.device.mark_step()
        return losses[0] if n == 1 else torch.stack(losses).sum()

    @torch.no_grad()
    def sample_step(self) -> torch.Tensor:
        """One reverse-diffusion step: a U-Net pass at timestep T/2 and the DDPM update."""
        t = torch.full((self.image.shape[0],), self.t_sample, device=self.device.torch_device, dtype=torch.long)
        eps = self.predict(self.x_t, t)
        out, _ = self.scheduler.step(eps, self.t_sample, self.x_t, generator=self.gen)
        self.device.mark_step()
        return out


def nvtx_step(
    settings: ModelSettings,
    variant: Variant,
    system,
    image: torch.Tensor,
    mask: torch.Tensor,
    *,
    warmup: int,
    seed: int,
    nvtx_range: str = "accelbench_step",
) -> None:
    """Build the workload as :func:`~accelbench.experiments.unet3d.job.profile` does, run ``warmup`` training
    steps, then exactly one training step inside the NVTX range ``nvtx_range``: the program Nsight Compute profiles
    (:mod:`accelbench.experiments.unet3d_ncu.job`)."""
    device = Device(system.backend)
    torch.manual_seed(seed)
    with math_mode(variant.tf32, variant.cudnn_benchmark):
        w = Workload(build_network(settings), settings, variant, device, image, mask, seed)
        for _ in range(warmup):
            w.train_step()
        device.synchronize()
        # a process-wide start/end range, not push/pop: autograd launches the backward kernels from its own device
        # thread, which a thread-local push/pop range misses (on an H200 it held 574 of the step's 1551 kernels)
        range_id = torch.cuda.nvtx.range_start(nvtx_range)
        w.train_step()
        device.synchronize()
        torch.cuda.nvtx.range_end(range_id)
