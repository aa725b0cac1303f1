"""Study A (arXiv 2606.19365): Med-DDPM's 3D diffusion U-Net, profiled per configuration.

Workload: Med-DDPM's mask-conditioned 3D DDPM. The noisy image is concatenated with the one-hot mask (whole head:
1 + 2 = 3 input channels) and the U-Net predicts the noise (epsilon). Cosine beta schedule with 250 steps, L1 loss on
epsilon, Adam lr 1e-5, batch 1.

Two networks (config ``unet3d_profile.network``, recorded as ``measurements.network`` and labelled in the tables):

- ``med_ddpm`` (the default, the network of the Study A-faithful series): :class:`accelbench.models.med_ddpm_unet.MedDDPMUNet`,
  written from Med-DDPM's code (mobaidoctor/med-ddpm at 2b14ee6): trilinear upsampling + conv, gradient-checkpointed
  attention with 1x1 Conv1d q/k/v and output projections, Med-DDPM's tensor layout (spatial axes as its data
  transforms leave them: BraTS (B, C, 144, 192, 192)), and its optimizer step of ``micro_batches`` = 2 micro-batches
  (``gradient_accumulate_every = 2``: two forward/backward passes of loss / 2, then one Adam step). Med-DDPM's EMA
  (decay 0.995 every 10 steps from step 2,000; before that a copy of the weights every 10 steps) is recorded in each
  result (``measurements.ema``), not run: it is outside the step Study A profiles.
- ``monai`` (the stand-in of the first reference run): MONAI's ``DiffusionModelUNet(spatial_dims=3)`` with the same
  parameter count and forward FLOPs (40,226,433; 5,536.7 GFLOP at 128^3, batch 1), mapped as below.

Mapping of Med-DDPM's settings (``diffusion_model/unet.py`` defaults) onto MONAI's ``DiffusionModelUNet``:

============================  ======================================  ===================================
Med-DDPM                      MONAI argument                          value (whole head)
============================  ======================================  ===================================
num_channels=64,              channels = base * mult                  (64, 64, 128, 192, 256)
channel_mult=(1,1,2,3,4)
num_res_blocks=1              num_res_blocks (per level)              (1, 1, 1, 1, 1)
attention_resolutions="16"    attention_levels: level l has attention (F, F, F, T, F) for 128^3; the
                              when volume[0] // 16 == 2**l (guided-   middle block always has attention
                              diffusion's downsample-factor rule)
num_heads=1                   num_head_channels = channels per level  one head per attention block
GroupNorm(32) + SiLU          norm_num_groups=32                      same
in 3 (1 noisy + 2 mask) /     in_channels / out_channels              3 / 1 (BraTS: 8 / 4)
out 1
============================  ======================================  ===================================

What the MONAI stand-in does differently from Med-DDPM's code (each changes the kernels, not the counts): it
upsamples with nearest-neighbour interpolation + conv (Med-DDPM: trilinear + conv); its attention projections are
``nn.Linear`` (cuBLAS, with transposes) where Med-DDPM has 1x1 ``Conv1d`` (both have q, k, v and an output
projection, so the counts agree); its attention is not gradient-checkpointed; its time embedding is MONAI's
sinusoidal one, injected the same way (additive, per residual block); no dropout; its tensor keeps the data's axis
order (BraTS (..., 192, 192, 144)). With ``micro_batches`` = 1 a step is one forward + backward + Adam step.
With BraTS' volume, guided diffusion's rule (192 // 16 = 12, not a power of two) puts attention only in the middle
block, in both networks, as in Med-DDPM.

Configurations (Study A's four, then ours):
``baseline`` (TF32 off for cuDNN convolutions and cuBLAS matmuls), ``tf32``, ``channels_last_3d``
(model and inputs in ``torch.channels_last_3d``), ``tf32_channels_last_3d``, ``bf16`` (autocast),
``compile`` (``torch.compile``, TF32 off), ``tf32_compile``, ``bf16_compile``, ``bf16_compile_fused_adam``
(plus Adam's fused CUDA kernel), ``bf16_compile_cudagraphs`` (``mode="reduce-overhead"``: CUDA graphs), and beyond
it (issue 29): ``bf16_channels_last_3d`` (+ ``_compile``, + ``_compile_cudagraphs``), ``bf16_compile_max_autotune``
(``mode="max-autotune-no-cudagraphs"``: inductor benchmarks its GEMM/convolution candidates at compile time) and
``bf16_channels_last_3d_compile_max_autotune`` (``mode="max-autotune"``, CUDA graphs included). Inductor's search
has no time limit of its own: its cost is the recorded ``first_train_step_ms`` (compilation and tuning), bounded in
practice by the job's window. A configuration counts only where its quality check holds (``quality.holds``).

cuDNN autotuning (``torch.backends.cudnn.benchmark``) is a recorded axis. Med-DDPM's own training code
(``train.py``, ``diffusion_model/trainer.py`` in mobaidoctor/med-ddpm) never sets it, so Study A profiled with
PyTorch's default, autotuning off: every plain name above is that Study A-faithful series. The same name with
the suffix ``_autotuned`` (``baseline_autotuned``, ``bf16_compile_autotuned``, ...) is our series, autotuning on;
its speedups are against ``baseline_autotuned``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from accelbench.backends.device import Device
from accelbench.core import precisions
from accelbench.core.outcome import Outcome
from accelbench.measure import energy, flops
from accelbench.measure import timing as measure

EXPERIMENT = "unet3d_profile"

from accelbench.experiments.unet3d.configs import (  # noqa: E402, F401  (re-exported: the experiment's public names)
    AUTOTUNED,
    CUDA_GRAPH_MODES,
    GRAD_BUFFERS,
    MED_DDPM_EMA,
    NETWORKS,
    VARIANTS,
    ModelSettings,
    Variant,
    build_network,
    build_scheduler,
    build_unet,
    keeps_grad_buffers,
    resolve_settings,
)


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


class Workload:
    """Model, optimizer, scheduler and inputs for one variant on one device.

    Inputs: ``image`` (B, C_img, X, Y, Z) in [-1, 1] and ``mask`` (B, C_mask, X, Y, Z) one-hot; their spatial axes
    are put in the network's layout (:attr:`ModelSettings.spatial_order`).

    Gradient buffers (``stable_grads``, :func:`keeps_grad_buffers`): with CUDA graphs (:attr:`Variant.cuda_graphs`)
    and more than one micro-batch, every parameter's ``.grad`` is allocated here, as zeros outside the CUDA graphs'
    memory pool, and zeroed in place after each optimizer step instead of being set to None. Otherwise autograd makes
    the first micro-batch's gradient the ``.grad`` itself, without a copy: the compiled backward's output, which lives
    in the CUDA-graph pool. The next micro-batch's forward starts a new CUDA-graph generation (its previous backward
    has run), which lets the graphs overwrite every output of the previous one, and accumulating into ``.grad`` in
    that micro-batch's backward fails with "RuntimeError: Error: accessing tensor output of CUDAGraphs that has been
    overwritten by a subsequent run" (H200, torch 2.11, ``bf16_compile_cudagraphs_autotuned`` on Med-DDPM's
    network; the stack trace it names, ``emb = self.time_mlp(...)`` in ``med_ddpm_unet.py``, is that of the first
    parameter's gradient, the time embedding's ``Linear``). ``torch.compiler.cudagraph_mark_step_begin()`` does not
    help: it starts a new generation where one starts anyway (pytorch/pytorch#169545 fails with it; torch's own
    message since pytorch/pytorch#184003 advises ``.grad`` buffers allocated outside the capture). The network
    compiles to one graph (dynamo on the CPU: no graph break, checkpointed attention included), so nothing else is
    needed. Cost: one in-place add per parameter in the first micro-batch and one in-place zeroing per step; the
    arithmetic and the gradients are unchanged. Recorded as ``measurements.grad_buffers``.
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
        self.model = model.to(dev, memory_format=fmt)
        order = (0, 1, *(2 + a for a in settings.spatial_order))
        image, mask = image.permute(order), mask.permute(order)
        self.image = image.repeat(settings.batch_size, 1, 1, 1, 1).to(dev).contiguous(memory_format=fmt)
        self.mask = mask.repeat(settings.batch_size, 1, 1, 1, 1).to(dev).contiguous(memory_format=fmt)
        self.fmt = fmt
        self.scheduler = build_scheduler(settings)
        self.net = torch.compile(self.model, mode=variant.compile_mode) if variant.compile else self.model
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

    def predict(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        inp = torch.cat([x_t, self.mask], dim=1).contiguous(memory_format=self.fmt)
        with self.device.autocast(self.amp):
            return self.net(inp, t).float()

    def train_step(self) -> torch.Tensor:
        """One optimizer step at batch B: ``micro_batches`` x (forward + L1 loss on epsilon / micro_batches +
        backward), then the Adam step (Med-DDPM's gradient accumulation). Returns the mean micro-batch loss.
        The gradients are set to None after the step, or zeroed in place where ``stable_grads`` (class docstring)."""
        dev = self.device.torch_device
        b, n = self.image.shape[0], self.s.micro_batches
        losses = []
        for _ in range(n):
            t = torch.randint(0, self.s.timesteps, (b,), device=dev, generator=self.gen)
            noise = torch.randn(self.image.shape, device=dev, generator=self.gen).contiguous(memory_format=self.fmt)
            x_t = self.scheduler.add_noise(original_samples=self.image, noise=noise, timesteps=t)
            loss = F.l1_loss(self.predict(x_t, t), noise)
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


@torch.no_grad()
def quality_probe(w: Workload, steps: int, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic outputs for the quality comparison: the predicted noise for a fixed noisy input
    at t = T/2, and a ``steps``-step reverse-diffusion sample from a fixed x_T (fixed RNG)."""
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


def unsupported_reason(variant: Variant, system) -> str | None:
    """Why ``variant`` cannot run on ``system`` (None if it can)."""
    if variant.tf32 and not system.supports("tf32"):
        return f"{system.name} has no TF32 tensor cores (supported precisions: {', '.join(system.precisions)})"
    if variant.autocast == "bf16" and not system.supports("bf16"):
        return f"{system.name} has no native bf16 (supported precisions: {', '.join(system.precisions)})"
    return None


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
    """Build the workload as :func:`run` does, run ``warmup`` training steps, then exactly one training
    step inside the NVTX range ``nvtx_range``: the program Nsight Compute profiles
    (:mod:`accelbench.experiments.unet3d.ncu`)."""
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


def profile(
    settings: ModelSettings,
    variant: Variant,
    system,
    image: torch.Tensor,
    mask: torch.Tensor,
    *,
    warmup: int,
    repeat: int,
    profile_steps: int,
    quality_sample_steps: int,
    quality_rel_l2_max: float,
    seed: int,
    trace_path: str | Path,
) -> dict:
    """Profile one configuration: quality probe vs. baseline, timed training and sampling steps,
    peak memory, FLOPs/MFU, and a torch.profiler kernel breakdown of one training step.

    Args:
        settings: resolved model settings (:func:`resolve_settings`).
        variant: one of :data:`VARIANTS`.
        system: the :class:`accelbench.core.systems.System` to run on (its backend must be present).
        image, mask: (1, C, X, Y, Z) tensors from :func:`accelbench.data.mri.load_case`.
        trace_path: where the Chrome trace (``.json.gz``) of the profiled step is written.

    Returns:
        ``{"status", "reason", "measurements"}``; status ``unsupported`` or ``oom`` with a reason
        instead of raising for those cases. Times in ms, memory in GiB.
    """
    reason = unsupported_reason(variant, system)
    if reason:
        return {"status": "unsupported", "reason": reason, "measurements": {}}
    device = Device(system.backend)
    torch.manual_seed(seed)
    model = build_network(settings)
    n_params = sum(p.numel() for p in model.parameters())
    m: dict = {
        "parameters": n_params,
        "network": settings.network,
        "micro_batches": settings.micro_batches,
        "tensor_shape": list(settings.tensor_shape),
        "ema": MED_DDPM_EMA if settings.network == "med_ddpm" else None,
        "variant": dataclasses.asdict(variant),
        "precision": variant.precision,
        "series": variant.series,
        "cudnn_benchmark": variant.cudnn_benchmark,
        "grad_buffers": GRAD_BUFFERS["stable" if keeps_grad_buffers(variant, settings) else "per_step"],
    }
    try:
        # 1. quality: same weights, seed and input; the baseline's outputs are the reference
        with math_mode(False):
            ref = quality_probe(
                Workload(copy.deepcopy(model), settings, VARIANTS["baseline"], device, image, mask, seed),
                quality_sample_steps,
                seed,
            )
        with math_mode(variant.tf32, variant.cudnn_benchmark):
            m["math_flags"] = math_flags()
            if not variant.tf32:  # every FP32 number of this configuration rests on IEEE FP32 math
                m["ieee_fp32_check"] = ieee_fp32_check(device, seed)
                if not m["ieee_fp32_check"]["holds"]:
                    raise RuntimeError(
                        f"configuration {variant.name} must run in IEEE FP32 but does not: {m['ieee_fp32_check']}"
                    )
            w = Workload(model, settings, variant, device, image, mask, seed)
            m["quality"] = compare_quality(quality_probe(w, quality_sample_steps, seed), ref, quality_rel_l2_max)
            del ref
            # 2. FLOPs (eager model: torch.compile does not change the arithmetic)
            eager = (
                Workload(
                    copy.deepcopy(model),
                    settings,
                    dataclasses.replace(variant, compile=False, compile_mode=None),
                    device,
                    image,
                    mask,
                    seed,
                )
                if variant.compile
                else w
            )
            flops_train = flops.count_flops(eager.train_step)
            flops_fwd = flops.count_flops(eager.sample_step)
            del eager
            # 3. first step (includes cuDNN heuristics / torch.compile), then timed steps
            device.reset_peak_memory()
            first = measure.StepClock(device, wall=True)
            first.start()
            w.train_step()
            first.stop()
            m["first_train_step_ms"] = first.samples()[0]
            train = measure.time_steps(w.train_step, device, warmup, repeat, desc=f"{variant.name} train")
            peak = device.peak_memory_bytes()
            sample = measure.time_steps(w.sample_step, device, warmup, repeat, desc=f"{variant.name} sample")
            # 4. kernel breakdown of one training step
            kernels = measure.profile_steps(w.train_step, device, profile_steps, trace_path)
    except device.out_of_memory_errors() as exc:
        peak = device.peak_memory_bytes()
        device.empty_cache()
        return {
            "status": "oom",
            "reason": f"out of device memory: {str(exc).splitlines()[0]}",
            "measurements": {**m, "peak_mem_gib_before_oom": peak / 2**30 if peak else None},
        }
    peak_tflops = system.peak_tflops.get(variant.precision)
    m.update(
        {
            "train_step": train.to_dict(),
            "sample_step": sample.to_dict(),
            "sample_projection": {
                "label": "projection",
                "steps": settings.timesteps,
                "seconds": sample.median * settings.timesteps / 1e3,
                "method": f"median reverse step x {settings.timesteps} steps",
            },
            "peak_mem_gib": peak / 2**30 if peak is not None else None,
            "flops": {"train_step": flops_train, "forward": flops_fwd},
            "train_throughput": flops.throughput_and_mfu(flops_train, train.median, peak_tflops),
            "train_volumes_per_s": settings.batch_size * settings.micro_batches / (train.median / 1e3),
            "kernels": kernels.to_dict(top=25),
            # board energy of the timed steps (accelbench.measure.energy): J per training step, a 250-step sample projected
            "energy": energy.report(
                {"train_step": train.energy, "sample_step": sample.energy},
                "train_step",
                {
                    "training_step": ("train_step", 1, "J/training step", 1, "measured"),
                    "sample": (
                        "sample_step",
                        1,
                        f"J/{settings.timesteps}-step sample",
                        settings.timesteps,
                        "projection",
                    ),
                },
                {
                    "volumes_per_s_per_w": (
                        settings.batch_size * settings.micro_batches / (train.median / 1e3),
                        "train_step",
                        "volumes/s/W",
                    )
                },
                step_ms=train.median,
            ),
        }
    )
    return {"status": "ok", "reason": None, "measurements": m, "kernel_summary": kernels}


# --------------------------------------------------------------------------- the job (accelbench.core.harness)
@dataclass(frozen=True)
class Settings:
    """One unet3d_profile job: the model at the system's scale, the configuration, and the run parameters
    (``warmup``, ``repeat``, ``profile_steps``, ``quality_sample_steps``, ``quality_rel_l2_max``, ``seed``)."""

    model: ModelSettings
    variant: Variant
    params: dict

    @classmethod
    def from_spec(cls, spec: dict, system) -> Settings:
        """From the rule's spec: ``{model, configuration, presets, scales, run}`` (config ``unet3d_profile``)."""
        return cls(
            resolve_settings(
                spec["model"],
                spec["presets"],
                system.scale,
                spec.get("scales", {}),
                network=spec.get("network", "monai"),
                micro_batches=spec.get("micro_batches", 1),
            ),
            VARIANTS[spec["configuration"]],
            dict(spec["run"]),
        )


def unsupported_outcome(s: Settings, ctx) -> Outcome | None:
    """The job's ``unsupported`` outcome when the system lacks the configuration's precision (TF32 on a CPU or
    V100, bf16 on V100), or this host only emulates it, slowly (bf16 on a CPU without AVX512-BF16/AMX, unless the
    config's ``run_emulated_precisions`` lists it: :func:`accelbench.core.precisions.emulated_reason`, a short probe):
    known without measuring, so the harness writes it without taking the device lock."""
    reason = unsupported_reason(s.variant, ctx.system) or precisions.emulated_reason(
        ctx.system, s.variant.autocast, precisions.run_emulated(ctx.spec)
    )
    return None if reason is None else Outcome("unsupported", {}, reason, {"settings": s.model.to_dict()})


# cost model of a job (accelbench.core.estimate, issue 42): seconds per forward-pass unit of the reference work (a 32^3
# volume at width 16, Med-DDPM's U-Net) on the reference machine, fitted to the embedded default's jobs
COST = {"startup_s": 10.0, "unit_s": 0.42, "compile_s": 90.0, "bf16_x": 0.35, "reference_work": 32**3 * 16**2}


def estimate_s(spec: dict) -> float:
    """Wall seconds of the job on the reference machine (:data:`accelbench.core.estimate.REFERENCE`): forward-pass units
    (a training step = 3 per micro-batch; the quality probe's and the timed sampling steps 1 each) x the work per
    pass (voxels x width^2, relative to the default's) x :data:`COST` ``unit_s``, x ``bf16_x`` under native bf16
    autocast (x the probe's slowdown where emulated bf16 is asked for); start-up alone where the job will only write
    ``unsupported`` (:func:`unsupported_outcome`'s reasons)."""
    from accelbench.core.estimate import STARTUP_S
    from accelbench.core.harness import system_from

    system, variant = system_from(spec), VARIANTS[spec["configuration"]]
    if unsupported_reason(variant, system) or precisions.emulated_reason(
        system, variant.autocast, precisions.run_emulated(spec)
    ):
        return STARTUP_S
    m = resolve_settings(
        spec["model"],
        spec["presets"],
        system.scale,
        spec.get("scales", {}),
        network=spec.get("network", "monai"),
        micro_batches=spec.get("micro_batches", 1),
    )
    r = spec["run"]
    units = (
        3 * m.micro_batches * (1 + r["warmup"] + r["repeat"] + r["profile_steps"])
        + r["warmup"]
        + r["repeat"]
        + 2 * r["quality_sample_steps"]
        + 1
    )
    work = m.volume[0] * m.volume[1] * m.volume[2] * m.base_channels**2 / COST["reference_work"]
    if variant.autocast == "bf16":
        emulated = precisions.emulation(system, "bf16")
        work *= emulated[1] if emulated else COST["bf16_x"]
    return COST["startup_s"] + COST["unit_s"] * units * work + (COST["compile_s"] if variant.compile else 0.0)


def run(s: Settings, ctx) -> Outcome:
    """Profile the job's configuration (:func:`profile`) on the MRI pair ``ctx.inputs`` ``image``/``mask``; the
    kernel table (``kernels.csv``) and the Chrome trace (``trace.json.gz``) go beside the result when it is ``ok``."""
    import logging

    from accelbench.data.mri import load_case

    image, mask = load_case(ctx.inputs["image"], ctx.inputs["mask"], s.model.image_channels, s.model.mask_channels)
    logging.getLogger("accelbench").info(
        "system %s (%s), model %s at %s scale, configuration %s",
        ctx.system.name,
        ctx.system.backend,
        s.model.preset,
        s.model.scale,
        s.variant.name,
    )
    with ctx.side_file("trace.json.gz", "trace") as trace:
        out = profile(s.model, s.variant, ctx.system, image, mask, trace_path=trace, **s.params)
        if out["status"] != "ok":
            trace.unlink(missing_ok=True)  # no trace beside an oom/unsupported result
    if out["status"] == "ok":
        with ctx.side_file("kernels.csv", "kernel_table") as table:
            measure.write_kernel_table(out["kernel_summary"], table)
    return Outcome(out["status"], out["measurements"], out["reason"], {"settings": s.model.to_dict()})
