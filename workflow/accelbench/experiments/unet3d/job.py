"""Study A (arXiv 2606.19365): Med-DDPM's 3D diffusion U-Net, profiled per configuration.

Workload: Med-DDPM's mask-conditioned 3D DDPM. The noisy image is concatenated with the one-hot mask (whole head:
1 + 2 = 3 input channels) and the U-Net predicts the noise (epsilon). Cosine beta schedule with 250 steps, L1 loss on
epsilon, Adam lr 1e-5, batch 1.

Two networks (config ``unet3d_profile.network``, recorded as ``measurements.network`` and labelled in the tables):

- ``med_ddpm`` (the network of the Study A-faithful series):
  :class:`~accelbench.experiments.unet3d.med_ddpm_unet.MedDDPMUNet`, written from Med-DDPM's code
  (mobaidoctor/med-ddpm at 2b14ee6): trilinear upsampling + conv, gradient-checkpointed attention with 1x1 Conv1d
  q/k/v and output projections, Med-DDPM's tensor layout (spatial axes as its data transforms leave them: BraTS
  (B, C, 144, 192, 192)).
  Med-DDPM's optimizer step has 2 micro-batches (``gradient_accumulate_every = 2``: two forward/backward passes of
  loss / 2, then one Adam step); config ``unet3d_profile.micro_batches`` sets the micro-batches per Adam step of
  either network (recorded as ``measurements.micro_batches``, a column of the Study A table). Med-DDPM's EMA
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
it: ``bf16_channels_last_3d`` (+ ``_compile``, + ``_compile_cudagraphs``), ``bf16_compile_max_autotune``
(``mode="max-autotune-no-cudagraphs"``: inductor benchmarks its GEMM/convolution candidates at compile time) and
``bf16_channels_last_3d_compile_max_autotune`` (``mode="max-autotune"``, CUDA graphs included), and
``bf16_channels_last_3d_ndhwc_compile_cudagraphs``: channels_last_3d kept through the step, CUDA graphs, fused Adam and
three module rewrites of Med-DDPM's network with the same parameters and arithmetic (:mod:`accelbench.models.ndhwc_ops`;
recorded as ``measurements.variant``'s ``attention``, ``checkpoint_attention``, ``upsample``, ``norm``,
``conv_grad``): attention on
a (B, N, C) token view through ``scaled_dot_product_attention``, not checkpointed (``tokens_sdpa``), the x2 trilinear
upsampling as three separable 1-D passes (``separable``), GroupNorm from per-channel sums with one pointwise affine
(``channel_sums``), each Conv3d's incoming gradient channels_last_3d (``conv_grad``); on the MONAI stand-in it is
``unsupported``; ``bf16_channels_last_3d_ndhwc_fused_gn_compile_cudagraphs``: the same with ``norm="fused"`` (every
GroupNorm with the SiLU after it and the time-embedding add before it in one Triton kernel family, forward and
backward: :mod:`accelbench.models.fused_groupnorm`);
``bf16_channels_last_3d_ndhwc_fused_gn_padconv_compile_cudagraphs``: the same with the stem's 3 input channels and the
output convolution's 1 output channel zero-padded to 8 on the fly (``skinny_conv="pad8"``,
:mod:`accelbench.models.padded_conv`: same parameters and state dict, same result); the two with ``_no_layout_opt``
before ``_cudagraphs``: the same with Inductor's layout optimisation off for their compile
(``layout_optimization=False``; the network is channels_last_3d already);
``bf16_channels_last_3d_ndhwc_fused_gn_padconv_fold_compile_no_layout_opt_cudagraphs``: the last with the step's
micro-batches folded into one forward/backward pass of ``micro_batches`` x B volumes (``fold_micro_batches``,
:func:`.configs.passes_per_step`: the same samples and loss, one Adam step, no accumulation). Inductor's search
has no time limit of its own: its cost is the recorded ``first_train_step_ms`` (compilation and tuning), bounded in
practice by the job's window. A configuration counts only where its quality check holds (``quality.holds``).

cuDNN autotuning (``torch.backends.cudnn.benchmark``) is a recorded axis. Med-DDPM's own training code
(``train.py``, ``diffusion_model/trainer.py`` in mobaidoctor/med-ddpm) never sets it, so Study A profiled with
PyTorch's default, autotuning off: every plain name above is that Study A-faithful series. The same name with
the suffix ``_autotuned`` (``baseline_autotuned``, ``bf16_compile_autotuned``, ...) is our series, autotuning on;
its speedups are against ``baseline_autotuned``.

This module is the job (the registry's ``job``): one configuration profiled (:func:`profile`: quality probe, timed
training and sampling steps, peak memory, FLOPs/MFU, kernel breakdown) and its run (:func:`run`). Its parts, whose
names it re-exports: the configurations and model settings (:mod:`.configs`, torch-free), the networks
(:mod:`.network`), the math mode, IEEE-FP32 check and quality proxy (:mod:`.numerics`), the timed step
(:mod:`.workload`), and the job's settings, ``unsupported`` reasons and run-time estimate (:mod:`.settings`,
torch-free).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: F401  (re-exported: the IEEE check's tests patch its conv3d)

from accelbench.backends.device import Device
from accelbench.core.outcome import Outcome
from accelbench.experiments.unet3d.configs import (  # noqa: F401  (re-exported: the experiment's public names)
    AUTOTUNED,
    CUDA_GRAPH_MODES,
    GRAD_BUFFERS,
    MED_DDPM_EMA,
    NETWORKS,
    VARIANTS,
    ModelSettings,
    Variant,
    keeps_grad_buffers,
    resolve_settings,
)
from accelbench.experiments.unet3d.network import build_network, build_scheduler, build_unet  # noqa: F401
from accelbench.experiments.unet3d.numerics import (  # noqa: F401
    IEEE_FP32_REL_ERR_MAX,
    QUALITY_METHOD,
    SAMPLE_NOTE,
    compare_quality,
    ieee_fp32_check,
    math_flags,
    math_mode,
    quality_probe,
)
from accelbench.experiments.unet3d.settings import (  # noqa: F401  (the job's settings, unsupported and estimate)
    COST,
    Settings,
    estimate_s,
    network_reason,
    unsupported_outcome,
    unsupported_reason,
)
from accelbench.experiments.unet3d.workload import Workload, nvtx_step  # noqa: F401
from accelbench.measure import clocks, energy, flops, phase
from accelbench.measure import kernels as kernel_traces
from accelbench.models import fused_groupnorm

EXPERIMENT = "unet3d_profile"


def profile(job: Settings, system, image: torch.Tensor, mask: torch.Tensor, trace_path: str | Path) -> dict:
    """Profile one configuration: quality probe vs. baseline, timed training and sampling steps,
    peak memory, FLOPs/MFU, and a torch.profiler kernel breakdown of one training step.

    Args:
        job: the job's :class:`~.settings.Settings`: ``model`` (resolved model settings: :func:`resolve_settings`),
            ``variant`` (one of :data:`VARIANTS`) and ``params`` (``warmup``, ``repeat``, ``profile_steps``,
            ``quality_sample_steps``, ``quality_rel_l2_max``, ``seed``).
        system: the :class:`accelbench.core.systems.System` to run on (its backend must be present).
        image, mask: (1, C, X, Y, Z) tensors from :func:`accelbench.experiments.unet3d.data.load_case`.
        trace_path: where the Chrome trace (``.json.gz``) of the profiled step is written.

    Returns:
        ``{"status", "reason", "measurements"}``; status ``unsupported`` or ``oom`` with a reason
        instead of raising for those cases. Times in ms, memory in GiB.
    """
    settings, variant, seed = job.model, job.variant, job.params["seed"]
    reason = unsupported_reason(variant, system) or network_reason(variant, settings)
    if reason:
        return {"status": "unsupported", "reason": reason, "measurements": {}}
    device = Device(system.backend)
    torch.manual_seed(seed)
    model = build_network(settings)
    m = _configuration_record(model, settings, variant, device)
    try:
        measured = _measure(job, model, device, image, mask, trace_path, m)
    except device.out_of_memory_errors() as exc:
        peak = device.peak_memory_bytes()
        device.empty_cache()
        return {
            "status": "oom",
            "reason": f"out of device memory: {str(exc).splitlines()[0]}",
            "measurements": {**m, "peak_mem_gib_before_oom": peak / 2**30 if peak else None},
        }
    m.update(_step_measurements(settings, system.peak_tflops.get(variant.precision), **measured))
    return {"status": "ok", "reason": None, "measurements": m, "kernel_summary": measured["kernels"]}


def _configuration_record(model, settings: ModelSettings, variant: Variant, device: Device) -> dict:
    """The measurements that state what ran: parameters, network, shapes, configuration, math and buffers; for a
    fused-GroupNorm configuration, which implementation ran it (``norm_path``: ``triton`` or the ``torch`` fallback,
    :func:`accelbench.models.fused_groupnorm.path`)."""
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "network": settings.network,
        "micro_batches": settings.micro_batches,
        "tensor_shape": list(settings.tensor_shape),
        "ema": MED_DDPM_EMA if settings.network == "med_ddpm" else None,
        "variant": dataclasses.asdict(variant),
        "precision": variant.precision,
        "series": variant.series,
        "cudnn_benchmark": variant.cudnn_benchmark,
        "grad_buffers": GRAD_BUFFERS["stable" if keeps_grad_buffers(variant, settings) else "per_step"],
        "norm_path": fused_groupnorm.path(device.torch_device) if variant.norm == "fused" else None,
    }


def _measure(job: Settings, model, device: Device, image, mask, trace_path, m: dict) -> dict:
    """Quality (into ``m``), FLOPs, the timed training and sampling steps and the kernel breakdown, in the
    configuration's math mode. Returns the numbers :func:`_step_measurements` turns into measurements. Raises the
    device's out-of-memory errors."""
    settings, variant, p = job.model, job.variant, job.params
    seed, warmup, repeat = p["seed"], p["warmup"], p["repeat"]
    # 1. quality: same weights, seed and input; the baseline's outputs are the reference
    with math_mode(False):
        ref = quality_probe(
            Workload(copy.deepcopy(model), settings, VARIANTS["baseline"], device, image, mask, seed),
            p["quality_sample_steps"],
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
        probe = quality_probe(w, p["quality_sample_steps"], seed)
        m["quality"] = compare_quality(probe, ref, p["quality_rel_l2_max"])
        del ref
        # 2. FLOPs (eager model: torch.compile does not change the arithmetic)
        eager = w
        if variant.compile:
            eager_variant = dataclasses.replace(variant, compile=False, compile_mode=None)
            eager = Workload(copy.deepcopy(model), settings, eager_variant, device, image, mask, seed)
        flops_train, flops_fwd = flops.count_flops(eager.train_step), flops.count_flops(eager.sample_step)
        del eager
        # 3. first step (includes cuDNN heuristics / torch.compile), then timed steps (the one timed phase,
        #    accelbench.measure.phase: the first step is its first warm-up step; peak memory over all training steps)
        trained = phase.train_phase(
            w.train_step, device, 1 + warmup, repeat, extra=(phase.PeakMemory(device),), desc=f"{variant.name} train"
        )
        m["first_train_step_ms"] = trained.first_iteration_s * 1e3
        train = trained.timing
        train.warmup = warmup  # the untimed steps after the first one, as the result has always counted them
        sample = phase.train_phase(w.sample_step, device, warmup, repeat, desc=f"{variant.name} sample").timing
        # 4. kernel breakdown of one training step
        kernels = kernel_traces.profile_steps(w.train_step, device, p["profile_steps"], trace_path)
    return {
        "train": train,
        "sample": sample,
        "peak": trained.values["peak_memory_bytes"],
        "flops_train": flops_train,
        "flops_fwd": flops_fwd,
        "kernels": kernels,
    }


def _step_measurements(settings: ModelSettings, peak_tflops, *, train, sample, peak, flops_train, flops_fwd, kernels):
    """The timed steps' measurements: step times, the 250-step sample projection, peak memory, FLOPs and MFU,
    volumes/s, the kernel table's top rows and the board energy of the timed steps."""
    volumes_per_s = settings.batch_size * settings.micro_batches / (train.median / 1e3)
    return {
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
        "train_volumes_per_s": volumes_per_s,
        "kernels": kernels.to_dict(top=25),
        # board energy of the timed steps (accelbench.measure.energy): J per training step, a 250-step sample
        # projected
        "energy": energy.report(
            {"train_step": train.energy, "sample_step": sample.energy},
            "train_step",
            {
                "training_step": ("train_step", 1, "J/training step", 1, "measured"),
                "sample": ("sample_step", 1, f"J/{settings.timesteps}-step sample", settings.timesteps, "projection"),
            },
            {"volumes_per_s_per_w": (volumes_per_s, "train_step", "volumes/s/W")},
            step_ms=train.median,
        ),
        # the SM clock, temperature and clock-event reasons during the timed steps (accelbench.measure.clocks)
        "clocks": clocks.report({"train_step": train.clocks, "sample_step": sample.clocks}, "train_step"),
    }


# --------------------------------------------------------------------------- the job (accelbench.core.harness)
def run(s: Settings, ctx) -> Outcome:
    """Profile the job's configuration (:func:`profile`) on the MRI pair ``ctx.inputs`` ``image``/``mask``; the
    kernel table (``kernels.csv``) and the Chrome trace (``trace.json.gz``) go beside the result when it is ``ok``."""
    import logging

    from accelbench.experiments.unet3d.data import load_case

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
        out = profile(s, ctx.system, image, mask, trace)
        if out["status"] != "ok":
            trace.unlink(missing_ok=True)  # no trace beside an oom/unsupported result
    if out["status"] == "ok":
        with ctx.side_file("kernels.csv", "kernel_table") as table:
            kernel_traces.write_kernel_table(out["kernel_summary"], table)
    return Outcome(out["status"], out["measurements"], out["reason"], {"settings": s.model.to_dict()})
