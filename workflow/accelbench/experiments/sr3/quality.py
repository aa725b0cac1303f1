"""Study B SR3: the quality check after training: SR3 samples of held-out patches (SR3's DDPM chain, or DDIM over
fewer strided steps), their PSNR/SSIM against the ground truth beside plain bicubic upsampling, and the sample panel
(:func:`quality`, sampled as a :class:`QualityCheck` says)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from accelbench.backends.device import Device
from accelbench.experiments.sr3.model import build_ddim, build_scheduler, upsample
from accelbench.experiments.sr3.settings import SR3Settings
from accelbench.measure.timing import StepClock
from accelbench.models.monai_import import import_monai


@torch.no_grad()
def super_resolve(
    model: torch.nn.Module, s: SR3Settings, lr: torch.Tensor, steps: int, device: Device, precision: str, seed: int
) -> torch.Tensor:
    """Sample SR3 for low-resolution images ``lr`` (B, 1, h, w) in [0, 1]; returns (B, 1, H, W) in [0, 1].

    ``steps == timesteps``: SR3's ancestral DDPM chain; fewer: DDIM (eta 0) over ``steps`` strided steps.
    """
    dev = device.torch_device
    model.eval()
    cond = upsample(lr.to(dev), s.hr_size).clamp(0, 1) * 2 - 1
    precise = device.ops.float64
    sched = build_scheduler(s, precise) if steps >= s.timesteps else build_ddim(s, precise)
    sched.set_timesteps(min(steps, s.timesteps), device=dev)
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(cond.shape, device=dev, generator=g)
    amp = torch.bfloat16 if precision == "bf16" else None
    for ts in tqdm(sched.timesteps, desc="SR3 sampling", leave=False):
        ti = int(ts)
        with device.autocast(amp):
            eps = model(
                torch.cat([cond, x], dim=1), torch.full((x.shape[0],), ti, device=dev, dtype=torch.long)
            ).float()
        x, _ = sched.step(eps, ti, x, generator=g) if steps >= s.timesteps else sched.step(eps, ti, x)
        device.mark_step()
    model.train()
    return ((x.float().clamp(-1, 1) + 1) / 2).cpu()


def image_metrics(pred: torch.Tensor, truth: torch.Tensor) -> dict:
    """Mean PSNR (dB) and 2-D SSIM (7x7 window) of (B, 1, H, W) images in [0, 1] (data range 1)."""
    import_monai()
    from monai.metrics import PSNRMetric, SSIMMetric

    pred, truth = pred.float().clamp(0, 1), truth.float()
    win = min(7, truth.shape[-1])
    return {
        "psnr_db": float(PSNRMetric(max_val=1.0)(pred, truth).mean()),
        "ssim": float(SSIMMetric(spatial_dims=2, data_range=1.0, win_size=win)(pred, truth).mean()),
    }


@dataclass(frozen=True)
class QualityCheck:
    """How the held-out patches are sampled: ``images`` patches (config ``sr3_scaling.run.quality_images``) over
    ``sample_steps`` reverse steps (``quality_sample_steps``; the training steps: SR3's DDPM chain, fewer: DDIM), in
    the configuration's ``precision`` (``bf16``: autocast), the noise drawn from ``seed``."""

    images: int
    sample_steps: int
    precision: str
    seed: int


def quality(
    model: torch.nn.Module,
    s: SR3Settings,
    heldout_hr: np.ndarray,
    heldout_lr: np.ndarray,
    check: QualityCheck,
    device: Device,
) -> tuple[dict, dict[str, np.ndarray]]:
    """PSNR/SSIM of SR3 samples and of plain bicubic upsampling vs. the ground truth on ``check.images`` held-out
    patches (``heldout_hr`` (N, H, W) and ``heldout_lr`` (N, h, w) in [0, 1]), sampled as ``check`` says.

    Returns ``(metrics, panel)`` where panel holds the first patch's ``lr``, ``bicubic``, ``sr3``, ``truth``.
    """
    n, steps = check.images, check.sample_steps
    hr = torch.from_numpy(heldout_hr[:n])[:, None].float()
    lr = torch.from_numpy(heldout_lr[:n])[:, None].float()
    bicubic = upsample(lr, s.hr_size).clamp(0, 1)
    clock = StepClock(device, wall=True)
    clock.start()
    sr = super_resolve(model, s, lr, steps, device, check.precision, check.seed)
    clock.stop()
    seconds = clock.seconds()
    m_sr, m_bi = image_metrics(sr, hr), image_metrics(bicubic, hr)
    beats = m_sr["psnr_db"] > m_bi["psnr_db"] and m_sr["ssim"] > m_bi["ssim"]
    note = (
        "SR3 beats bicubic on both PSNR and SSIM"
        if beats
        else "this short training run does not beat plain bicubic upsampling (SR3 needs far more iterations)"
    )
    sampler = "ddpm" if steps >= s.timesteps else "ddim"
    metrics = {
        "images": int(len(hr)),
        "sample_steps": int(min(steps, s.timesteps)),
        "sampler": sampler,
        "sampling_seconds": seconds,
        "sr3": m_sr,
        "bicubic": m_bi,
        "beats_bicubic": bool(beats),
        "note": note,
    }
    panel = {
        "lr": lr[0, 0].numpy(),
        "bicubic": bicubic[0, 0].numpy(),
        "sr3": sr[0, 0].numpy(),
        "truth": hr[0, 0].numpy(),
    }
    return metrics, panel
