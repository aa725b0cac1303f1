"""Study A (``study-a``): the rule's ``unet3d_profile`` step vs a bare loop of the same U-Net, one process."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from overhead.common import _append, _dev, _empty_cache, _events_loop, _row, _system


def study_a(args) -> None:
    import torch
    import torch.nn.functional as F

    from accelbench.backends.device import Device
    from accelbench.data.mri import load_case
    from accelbench.experiments.unet3d import profile as exp
    from accelbench.measure import timing as measure

    result = json.loads(Path(args.result).read_text())
    spec = result["config"]
    system = _system(spec)
    settings = exp.resolve_settings(
        spec["model"],
        spec["presets"],
        system.scale,
        spec.get("scales", {}),
        network=spec.get("network", "monai"),
        micro_batches=spec.get("micro_batches", 1),
    )
    variant = exp.VARIANTS[spec["configuration"]]
    image, mask = load_case(args.image, args.mask, settings.image_channels, settings.mask_channels)
    device = Device(system.backend)
    warmup, repeat = args.warmup, args.repeat
    seed = spec["run"]["seed"]

    def harness() -> float:
        torch.manual_seed(seed)
        with exp.math_mode(variant.tf32, variant.cudnn_benchmark):
            w = exp.Workload(exp.build_network(settings), settings, variant, device, image, mask, seed)
            t = measure.time_steps(w.train_step, device, warmup, repeat, desc="harness")
        del w
        return t.median

    def bare() -> float:
        torch.manual_seed(seed)
        with exp.math_mode(variant.tf32, variant.cudnn_benchmark):
            fmt = torch.channels_last_3d if variant.channels_last_3d else torch.contiguous_format
            model = exp.build_network(settings).to(_dev(), memory_format=fmt)
            net = torch.compile(model, mode=variant.compile_mode) if variant.compile else model
            opt = torch.optim.Adam(
                model.parameters(), lr=settings.lr, **({"fused": True} if variant.fused_adam else {})
            )
            stable = exp.keeps_grad_buffers(variant, settings)  # as the rule's Workload (CUDA graphs + accumulation)
            if stable:
                for p in model.parameters():
                    p.grad = torch.zeros_like(p)
            sched = exp.build_scheduler(settings)
            order = (0, 1, *(2 + a for a in settings.spatial_order))  # the network's layout
            x0 = image.permute(order).to(_dev()).contiguous(memory_format=fmt)
            m = mask.permute(order).to(_dev()).contiguous(memory_format=fmt)
            n = settings.micro_batches
            dtype = torch.bfloat16 if variant.autocast == "bf16" else None

            def step():
                for _ in range(n):  # Med-DDPM's gradient accumulation (micro_batches)
                    t = torch.randint(0, settings.timesteps, (1,), device=_dev())
                    noise = torch.randn_like(x0)
                    x_t = sched.add_noise(original_samples=x0, noise=noise, timesteps=t)
                    with torch.autocast(_dev(), dtype=dtype, enabled=dtype is not None):
                        pred = net(torch.cat([x_t, m], dim=1), t).float()
                    loss = F.l1_loss(pred, noise)
                    (loss / n if n > 1 else loss).backward()
                opt.step()
                opt.zero_grad(set_to_none=not stable)

            samples = _events_loop(step, warmup, repeat)
        return statistics.median(samples)  # model, net, opt: freed with this frame (step only ran above)

    h = harness()
    _empty_cache()
    b = bare()
    product = result["measurements"]["train_step"]["median"] if result["status"] == "ok" else None
    _append(
        args.csv,
        _row(
            "study_a",
            spec["configuration"],
            1,
            h,
            b,
            product,
            repeat,
            torch.get_num_threads(),
            variant.cudnn_benchmark,
            f"{settings.preset} {'x'.join(map(str, settings.volume))}, {variant.precision}, compile={variant.compile}",
        ),
    )
