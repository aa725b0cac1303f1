"""Study A's bare reference loop: the plain PyTorch training step that the profiled step
(:meth:`.workload.Workload.train_step`, timed by :func:`accelbench.measure.phase.train_phase`) is checked against, and
the settings it takes from the result it is compared with.

``benchmarks/harness_overhead.py study-a`` (driver: :mod:`.overhead`) times both on the same
network, shapes and settings and writes ``harness_ms``/``bare_ms``.

The bare loop runs what the result ran (the driver resolves the network, preset, scale and micro-batches of its
``config`` through the job's own ``Settings.from_spec``): the same network builder and noise scheduler, the
configuration's math mode and cuDNN autotuning (:func:`.numerics.math_mode`), the network's module implementations
(:func:`.network.set_implementations`: token-view SDPA attention without checkpointing, separable upsampling,
GroupNorm from channel sums where the configuration asks for them), memory layout, autocast, ``torch.compile`` mode,
fused Adam, Med-DDPM's gradient accumulation over ``micro_batches`` (loss / micro_batches) or the micro-batches
folded into one pass (:func:`.configs.passes_per_step`) and, with CUDA graphs and accumulation, ``.grad`` buffers
kept outside the graphs' pool as the Workload keeps them (:func:`.configs.keeps_grad_buffers`).

Torch is imported inside the functions that build the loop.
"""

from __future__ import annotations

from collections.abc import Callable


def bare_samples(settings, variant, image, mask, seed: int, device: str, time_loop: Callable) -> list[float]:
    """Build the bare loop of ``settings`` (:class:`.configs.ModelSettings`) and ``variant`` (:class:`.configs.Variant`)
    on ``device`` (``"cuda"``/``"cpu"``) inside the configuration's math mode, and return ``time_loop(step)``: the
    caller's timer of the training step (e.g. CUDA-event ms per call, warm-up first).

    Args:
        image, mask: (1, C, X, Y, Z) tensors from :func:`accelbench.data.mri.load_case`; put in the network's layout
            (:attr:`.configs.ModelSettings.spatial_order`).
        seed: ``torch.manual_seed`` before the network is built (the harness's weights).
    """
    import torch
    import torch.nn.functional as F

    from accelbench.experiments.unet3d.configs import keeps_grad_buffers, passes_per_step
    from accelbench.experiments.unet3d.network import build_network, build_scheduler, set_implementations
    from accelbench.experiments.unet3d.numerics import math_mode
    from accelbench.experiments.unet3d.workload import compile_kwargs

    torch.manual_seed(seed)
    with math_mode(variant.tf32, variant.cudnn_benchmark):
        fmt = torch.channels_last_3d if variant.channels_last_3d else torch.contiguous_format
        model = set_implementations(build_network(settings), variant).to(device, memory_format=fmt)
        net = torch.compile(model, **compile_kwargs(variant)) if variant.compile else model
        opt = torch.optim.Adam(model.parameters(), lr=settings.lr, **({"fused": True} if variant.fused_adam else {}))
        stable = keeps_grad_buffers(variant, settings)  # as the rule's Workload (CUDA graphs + accumulation)
        if stable:
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
        sched = build_scheduler(settings)
        order = (0, 1, *(2 + a for a in settings.spatial_order))  # the network's layout
        n, fold = passes_per_step(variant, settings)  # passes per step, micro-batches in each
        x0 = image.permute(order).repeat(fold, 1, 1, 1, 1).to(device).contiguous(memory_format=fmt)
        m = mask.permute(order).repeat(fold, 1, 1, 1, 1).to(device).contiguous(memory_format=fmt)
        dtype = torch.bfloat16 if variant.autocast == "bf16" else None

        def step():
            for _ in range(n):  # Med-DDPM's gradient accumulation (micro_batches), or one folded pass
                t = torch.randint(0, settings.timesteps, (fold,), device=device)
                noise = torch.randn_like(x0)
                x_t = sched.add_noise(original_samples=x0, noise=noise, timesteps=t)
                with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
                    pred = net(torch.cat([x_t, m], dim=1), t).float()
                loss = F.l1_loss(pred, noise)
                (loss / n if n > 1 else loss).backward()
            opt.step()
            opt.zero_grad(set_to_none=not stable)

        return time_loop(step)  # model, net, opt: freed with this frame
