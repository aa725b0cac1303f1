"""What the numbers of a Study A configuration rest on (imports torch): the math mode it runs in (:func:`math_mode`:
TF32 and cuDNN autotuning switched, :func:`math_flags` as PyTorch reports them), the evidence that FP32 math is IEEE
FP32 where the configuration needs it (:func:`ieee_fp32_check`), and the quality proxy that compares a
configuration's outputs with the baseline's (:func:`quality_probe`, :func:`compare_quality`, :data:`QUALITY_METHOD`).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from accelbench.backends.device import Device
from accelbench.models.monai_import import import_monai


@contextlib.contextmanager
def math_mode(tf32: bool, cudnn_benchmark: bool = False):
    """Switch TF32 for both cuDNN convolutions and cuBLAS matmuls (Study A's baseline turns both off:
    PyTorch enables cuDNN TF32 by default) and cuDNN autotuning (``torch.backends.cudnn.benchmark``).
    Restores the previous settings on exit."""
    old_benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = cudnn_benchmark
    new_api = hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cudnn.conv, "fp32_precision")
    if new_api:
        old = (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision)
        mode = "tf32" if tf32 else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
    else:
        old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = old_benchmark
        if new_api:
            torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = old
        else:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def math_flags() -> dict:
    """The TF32 flags as PyTorch reports them now (recorded in every result)."""
    if hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cudnn.conv, "fp32_precision"):
        return {
            "matmul_fp32_precision": torch.backends.cuda.matmul.fp32_precision,
            "cudnn_conv_fp32_precision": torch.backends.cudnn.conv.fp32_precision,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        }
    return {
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


IEEE_FP32_REL_ERR_MAX = 1e-5


def ieee_fp32_check(device: Device, seed: int = 0) -> dict:
    """Evidence that FP32 math runs in IEEE FP32 now, as Study A's baseline requires.

    Two checks: (1) the flags: every TF32 switch :func:`math_mode` sets reads ``ieee`` (new API) or
    ``False`` (``allow_tf32``); (2) numbers: a (256 x 1024) @ (1024 x 256) matmul and a Conv3d
    (1 x 16 x 16^3 input, 16 filters of 3^3) run on ``device`` in fp32 and compared with float64 on
    the CPU (Frobenius relative error). IEEE fp32 gives about 1e-7; TF32 rounds the inputs to a
    10-bit mantissa and gives about 3e-4. Both errors must be below :data:`IEEE_FP32_REL_ERR_MAX` (1e-5).

    Returns:
        ``{"flags", "flags_ieee", "matmul_rel_err", "conv_rel_err", "rel_err_max", "holds"}``.
    """
    flags = math_flags()
    tf32_flags = {k: v for k, v in flags.items() if k != "cudnn_benchmark"}
    flags_ieee = all(v in ("ieee", False) for v in tf32_flags.values())
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(256, 1024, generator=g), torch.randn(1024, 256, generator=g)
    x, w = torch.randn(1, 16, 16, 16, 16, generator=g), torch.randn(16, 16, 3, 3, 3, generator=g)
    dev = device.torch_device

    def rel(got: torch.Tensor, ref: torch.Tensor) -> float:
        return float((got.double().cpu() - ref).norm() / ref.norm())

    with torch.no_grad():
        mm = rel(a.to(dev) @ b.to(dev), a.double() @ b.double())
        conv = rel(F.conv3d(x.to(dev), w.to(dev), padding=1), F.conv3d(x.double(), w.double(), padding=1))
    return {
        "flags": flags,
        "flags_ieee": bool(flags_ieee),
        "matmul_rel_err": mm,
        "conv_rel_err": conv,
        "rel_err_max": IEEE_FP32_REL_ERR_MAX,
        "holds": bool(flags_ieee and mm < IEEE_FP32_REL_ERR_MAX and conv < IEEE_FP32_REL_ERR_MAX),
    }


@torch.no_grad()
def quality_probe(w, steps: int, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic outputs for the quality comparison of the workload ``w``
    (:class:`~accelbench.experiments.unet3d.workload.Workload`): the predicted noise for a fixed noisy input at
    t = T/2, and a ``steps``-step reverse-diffusion sample from a fixed x_T (fixed RNG); both (B, C, D, H, W) fp32
    on the CPU."""
    dev = w.device.torch_device
    g = torch.Generator(device=dev).manual_seed(seed + 1)
    b = w.image.shape[0]
    noise = torch.randn(w.image.shape, device=dev, generator=g).contiguous(memory_format=w.fmt)
    t = torch.full((b,), w.t_sample, device=dev, dtype=torch.long)
    eps = w.predict(w.scheduler.add_noise(original_samples=w.image, noise=noise, timesteps=t), t)
    w.scheduler.set_timesteps(w.s.timesteps, device=dev)
    x = torch.randn(w.image.shape, device=dev, generator=g).contiguous(memory_format=w.fmt)
    for ts in w.scheduler.timesteps[:steps]:
        ti = int(ts)
        e = w.predict(x, torch.full((b,), ti, device=dev, dtype=torch.long))
        x, _ = w.scheduler.step(e, ti, x, generator=g)
    return {"predicted_noise": eps.float().cpu().contiguous(), "sample": x.float().cpu().contiguous()}


# What the quality comparison is, stated in every result (Study A's claim "synthesis quality not degraded").
QUALITY_METHOD = (
    "proxy: the predicted noise of one untrained network (same weights, seed and input) compared with "
    "the baseline configuration's; the verdict rests on its relative L2 only"
)
SAMPLE_NOTE = (
    "informational, not in the verdict: the short reverse-diffusion sample is dominated by the scheduler's "
    "own arithmetic; at 32^3 a network predicting zero noise still gives rel. L2 below 0.01"
)


def compare_quality(out: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], tol_rel_l2: float) -> dict:
    """Relative L2, PSNR (dB, data range of the reference) and 3D SSIM of each output vs. the baseline's.

    The verdict ``holds`` is ``rel_l2(predicted_noise) <= tol_rel_l2``: the predicted noise
    discriminates a broken configuration (one zeroed convolution gives about 0.2, a flipped output
    2; bf16 about 0.01), whereas the metrics of the short sample do not (a network that predicts
    zero noise gives a sample rel. L2 below 0.01 at 32^3) and are kept under ``sample`` with a note.
    This is a proxy for Study A's synthesis quality: see :data:`QUALITY_METHOD`.
    """
    import_monai()
    from monai.metrics import PSNRMetric, SSIMMetric

    res: dict = {"tolerance_rel_l2": tol_rel_l2, "method": QUALITY_METHOD}
    for key in ("predicted_noise", "sample"):
        a, b = out[key].double(), ref[key].double()
        rel = float((a - b).norm() / b.norm().clamp_min(1e-30))
        rng = float(b.max() - b.min()) or 1.0
        psnr = float(PSNRMetric(max_val=rng)(a, b).mean()) if rel > 0 else float("inf")
        ssim = float(SSIMMetric(spatial_dims=3, data_range=rng, win_size=7)(a.float(), b.float()).mean())
        res[key] = {"rel_l2": rel, "psnr_db": psnr, "ssim": ssim}
    res["sample"]["note"] = SAMPLE_NOTE
    res["holds"] = bool(res["predicted_noise"]["rel_l2"] <= tol_rel_l2)
    return res
