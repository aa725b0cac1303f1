"""Study A's configurations and network settings (:mod:`accelbench.experiments.unet3d.job` measures them):
the named configurations (:data:`VARIANTS`: math mode, memory layout, autocast, compilation, cuDNN autotuning) and
the model settings of a preset at a scale (:class:`ModelSettings`, :func:`resolve_settings`, :func:`settings_of`).
Torch-free (the rules and the tables read it while they plan and aggregate); the networks and the noise scheduler
these settings build are in :mod:`accelbench.experiments.unet3d.network`. The module docstring of
:mod:`~accelbench.experiments.unet3d.job` describes each configuration and its source."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

# torch.compile modes that run the compiled model as CUDA graphs (inductor's ``triton.cudagraphs``, CUDA graph trees);
# "max-autotune-no-cudagraphs" does not
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class Variant:
    """One profiled configuration: math mode, memory layout, autocast dtype, compilation."""

    name: str
    tf32: bool = False
    channels_last_3d: bool = False
    autocast: str | None = None  # "bf16" or None
    compile: bool = False
    compile_mode: str | None = None  # torch.compile mode ("reduce-overhead" = CUDA graphs, "max-autotune")
    fused_adam: bool = False  # torch.optim.Adam(fused=True) on CUDA
    cudnn_benchmark: bool = False  # cuDNN autotuning (Study A / Med-DDPM: PyTorch's default, off)
    # how Med-DDPM's network computes (MedDDPMUNet.set_implementations, accelbench.models.ndhwc_ops: same parameters,
    # same arithmetic); the defaults are Med-DDPM's. Recorded in each result (measurements.variant)
    attention: str = "conv1d_einsum"  # or "tokens_sdpa": a (B, N, C) token view + scaled_dot_product_attention
    checkpoint_attention: bool = True  # Med-DDPM checkpoints its attention blocks
    upsample: str = "interpolate"  # or "separable": x2 trilinear as three 1-D passes in fp32 ("_channels_last": NDHWC)
    norm: str = "group_norm"  # or "channel_sums": from per-channel sums; "fused": GroupNorm+SiLU(+add) in one kernel
    conv_grad: str = "as_computed"  # or "channels_last_3d": each Conv3d's incoming gradient made channels_last_3d
    skinny_conv: str = "as_is"  # or "pad8"/"pad16": Conv3d sides of < 8 channels zero-padded (models.padded_conv)
    # Inductor's layout optimisation (torch._inductor.config.layout_optimization) for this compile: True = Inductor's
    # default (on, where its heuristics choose channels-last for the graph's convolutions); False = off (the
    # network is already channels_last_3d: Inductor keeps the strides the layers produce). Recorded in each result
    layout_optimization: bool = True
    # the step's micro-batches as one forward/backward of micro_batches x batch_size volumes (ours): the same samples,
    # the same loss (the L1 mean over equal-sized micro-batches is the mean of their means) and one Adam step, without
    # the accumulation's second pass and .grad adds. Recorded in each result
    fold_micro_batches: bool = False

    @property
    def cuda_graphs(self) -> bool:
        """Whether the compiled model runs as CUDA graphs (``torch.compile`` modes :data:`CUDA_GRAPH_MODES`)."""
        return self.compile and self.compile_mode in CUDA_GRAPH_MODES

    @property
    def network_options(self) -> dict:
        """The keyword arguments of ``MedDDPMUNet.set_implementations`` this configuration runs with."""
        return {
            "attention": self.attention,
            "upsample": self.upsample,
            "norm": self.norm,
            "checkpoint_attention": self.checkpoint_attention,
            "conv_grad": self.conv_grad,
            "skinny_conv": self.skinny_conv,
        }

    @property
    def rewrites_network(self) -> bool:
        """Whether it computes any module of Med-DDPM's network otherwise than Med-DDPM does."""
        return self.network_options != NETWORK_DEFAULTS

    @property
    def series(self) -> str:
        return "ours (cuDNN autotuning on)" if self.cudnn_benchmark else "Study A-faithful (cuDNN autotuning off)"

    @property
    def baseline(self) -> str:
        """The configuration this one's speedup is measured against (the baseline of the same series)."""
        return "baseline_autotuned" if self.cudnn_benchmark else "baseline"

    @property
    def precision(self) -> str:
        """The math mode whose peak the MFU is computed against (and that the system must support)."""
        return "bf16" if self.autocast == "bf16" else ("tf32" if self.tf32 else "fp32")


# Med-DDPM's own implementations (the field defaults above)
NETWORK_DEFAULTS = Variant("defaults").network_options
# why a configuration with other implementations does not run on the MONAI stand-in (an `unsupported` reason)
NOT_ON_MONAI = (
    "its attention/upsample/norm rewrites are written for Med-DDPM's network (unet3d_profile.network: med_ddpm); "
    "the MONAI stand-in's blocks are MONAI's own (nearest-neighbour upsampling, Linear projections)"
)

# Ours (round two and three): the NDHWC step and the same with the fused GroupNorm; VARIANTS lists them with
# their comments
NDHWC = Variant(
    "bf16_channels_last_3d_ndhwc_compile_cudagraphs",
    autocast="bf16",
    channels_last_3d=True,
    compile=True,
    compile_mode="reduce-overhead",
    fused_adam=True,
    attention="tokens_sdpa",
    checkpoint_attention=False,
    upsample="separable",
    norm="channel_sums",
    conv_grad="channels_last_3d",
)
NDHWC_FUSED_GN = dataclasses.replace(
    NDHWC, name="bf16_channels_last_3d_ndhwc_fused_gn_compile_cudagraphs", norm="fused"
)
PADCONV = dataclasses.replace(
    NDHWC_FUSED_GN, name="bf16_channels_last_3d_ndhwc_fused_gn_padconv_compile_cudagraphs", skinny_conv="pad8"
)


def no_layout_opt_name(name: str) -> str:
    """``..._compile_cudagraphs`` -> ``..._compile_no_layout_opt_cudagraphs``."""
    return name.replace("_compile_cudagraphs", "_compile_no_layout_opt_cudagraphs")


PADCONV_NO_LAYOUT_OPT = dataclasses.replace(PADCONV, name=no_layout_opt_name(PADCONV.name), layout_optimization=False)
UPSAMPLE_CL = dataclasses.replace(
    PADCONV_NO_LAYOUT_OPT,
    name=PADCONV_NO_LAYOUT_OPT.name.replace("_padconv_", "_padconv_upsample_cl_"),
    upsample="separable_channels_last",
)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("baseline"),
        Variant("tf32", tf32=True),
        Variant("channels_last_3d", channels_last_3d=True),
        Variant("tf32_channels_last_3d", tf32=True, channels_last_3d=True),
        Variant("bf16", autocast="bf16"),
        Variant("compile", compile=True),
        Variant("tf32_compile", tf32=True, compile=True),
        Variant("bf16_compile", autocast="bf16", compile=True),
        Variant("bf16_compile_fused_adam", autocast="bf16", compile=True, fused_adam=True),
        Variant("bf16_compile_cudagraphs", autocast="bf16", compile=True, compile_mode="reduce-overhead"),
        # ours beyond the CUDA-graph configuration: the 3-D channels-last layout with bf16 (cuDNN's NDHWC
        # kernels need no layout conversion in bf16), with the compiler, and the compiler's own kernel search
        Variant("bf16_channels_last_3d", autocast="bf16", channels_last_3d=True),
        Variant("bf16_channels_last_3d_compile", autocast="bf16", channels_last_3d=True, compile=True),
        Variant(
            "bf16_channels_last_3d_compile_cudagraphs",
            autocast="bf16",
            channels_last_3d=True,
            compile=True,
            compile_mode="reduce-overhead",
        ),
        Variant("bf16_compile_max_autotune", autocast="bf16", compile=True, compile_mode="max-autotune-no-cudagraphs"),
        Variant(
            "bf16_channels_last_3d_compile_max_autotune",
            autocast="bf16",
            channels_last_3d=True,
            compile=True,
            compile_mode="max-autotune",
        ),
        # channels_last_3d kept through the step (accelbench.models.ndhwc_ops): token-view SDPA attention, not
        # checkpointed; separable trilinear upsampling; GroupNorm from per-channel sums; each Conv3d's gradient
        # channels_last_3d; CUDA graphs; fused Adam
        NDHWC,
        # the same with every GroupNorm, the SiLU after it and the time-embedding add before it in one Triton kernel
        # family (accelbench.models.fused_groupnorm; the plain composition where Triton or CUDA is missing)
        NDHWC_FUSED_GN,
        # the same in eager mode (no compile, no CUDA graphs, Adam unfused): what a CPU or a Gaudi runs of ours, the
        # GroupNorm through the fused operator's fallback there (F.group_norm + F.silu; the result's norm_path says
        # which ran); the embedded default's ours configuration
        dataclasses.replace(
            NDHWC_FUSED_GN,
            name="bf16_channels_last_3d_ndhwc_fused_gn",
            compile=False,
            compile_mode=None,
            fused_adam=False,
        ),
        # the same with the stem's 3 input channels and the output convolution's one output channel zero-padded to 8
        # (accelbench.models.padded_conv: same parameters and result; cuDNN is poor at Cout=1 / Cin=3)
        PADCONV,
        # the fused-GroupNorm and padded configurations with Inductor's layout optimisation off for their compile
        # (the stride-check failure of reference_runs/h200x1-2026-12-06 was the fused GroupNorm's flexible_layout
        # operator, not this option: models/group_norm_op.py; the option alone changes nothing measurable on an H100,
        # reference_runs/h100x1c-2026-12-06)
        dataclasses.replace(NDHWC_FUSED_GN, name=no_layout_opt_name(NDHWC_FUSED_GN.name), layout_optimization=False),
        PADCONV_NO_LAYOUT_OPT,
        # the same with the step's two micro-batches folded into one pass of two volumes (Variant.fold_micro_batches)
        dataclasses.replace(
            PADCONV_NO_LAYOUT_OPT,
            name=PADCONV_NO_LAYOUT_OPT.name.replace("_padconv_", "_padconv_fold_"),
            fold_micro_batches=True,
        ),
        # the padded configuration with the upsampling's passes channels innermost (no transpose; the fold above lost
        # 13 ms to that transpose at two volumes), unfolded and folded
        UPSAMPLE_CL,
        dataclasses.replace(
            UPSAMPLE_CL, name=UPSAMPLE_CL.name.replace("_upsample_cl_", "_upsample_cl_fold_"), fold_micro_batches=True
        ),
    )
}
AUTOTUNED = "_autotuned"
VARIANTS.update(
    {
        v.name + AUTOTUNED: dataclasses.replace(v, name=v.name + AUTOTUNED, cudnn_benchmark=True)
        for v in list(VARIANTS.values())
    }
)


@dataclass(frozen=True)
class ModelSettings:
    """Resolved U-Net + diffusion settings for one preset at one scale (see config/config.schema.yaml)."""

    preset: str
    scale: str
    volume: tuple[int, int, int]
    spacing_mm: tuple[float, float, float]
    base_channels: int
    channel_mult: tuple[int, ...]
    num_res_blocks: int
    attention_resolutions: tuple[int, ...]
    num_heads: int
    image_channels: int
    mask_channels: int
    out_channels: int
    norm_groups: int
    timesteps: int
    schedule: str
    lr: float
    batch_size: int
    # "med_ddpm" (Med-DDPM's own network) or "monai" (the stand-in; see the module docstring), and forward/backward
    # passes per optimizer step (Med-DDPM: gradient_accumulate_every = 2): always given, their defaults are the config
    # schema's (unet3d_profile.network, unet3d_profile.micro_batches)
    network: str = field(kw_only=True)
    micro_batches: int = field(kw_only=True)

    @property
    def channels(self) -> tuple[int, ...]:
        return tuple(self.base_channels * m for m in self.channel_mult)

    @property
    def attention_levels(self) -> tuple[bool, ...]:
        """guided-diffusion's rule: attention at level l iff volume[0] // res == 2**l for a listed res."""
        factors = {self.volume[0] // r for r in self.attention_resolutions if self.volume[0] % r == 0}
        return tuple(2**level in factors for level in range(len(self.channel_mult)))

    @property
    def spatial_order(self) -> tuple[int, int, int]:
        """Which axes of ``volume`` (the data's X, Y, Z) make the tensor's D, H, W: Med-DDPM's transforms reverse
        them (BraTS 192 x 192 x 144 -> (B, C, 144, 192, 192)); the MONAI stand-in keeps them."""
        return (2, 1, 0) if self.network == "med_ddpm" else (0, 1, 2)

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        """(B, C_in, D, H, W) of one micro-batch's network input."""
        return (
            self.batch_size,
            self.image_channels + self.mask_channels,
            *(self.volume[a] for a in self.spatial_order),
        )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(
            channels=list(self.channels),
            attention_levels=list(self.attention_levels),
            tensor_shape=list(self.tensor_shape),
        )
        return d


NETWORKS = ("med_ddpm", "monai")

# Med-DDPM's EMA (diffusion_model/trainer.py, train.py): recorded in each result, not run (outside the profiled step)
MED_DDPM_EMA = {
    "decay": 0.995,
    "update_every_steps": 10,
    "start_step": 2000,
    "applied": False,
    "note": "recorded, not run: before step 2,000 Med-DDPM copies the weights every 10 steps, after it "
    "updates the average every 10 steps; neither is part of the profiled training step",
}


# How a training step holds its gradients (Workload's docstring), recorded in each result
GRAD_BUFFERS = {
    "per_step": {
        "kept": False,
        "note": "autograd allocates .grad in the step's first backward; set to None after the optimizer step",
    },
    "stable": {
        "kept": True,
        "note": "CUDA graphs with gradient accumulation: .grad allocated once as zeros outside "
        "the CUDA-graph pool and zeroed in place after each optimizer step, so that the "
        "next micro-batch's CUDA-graph run cannot overwrite the accumulated gradients",
    },
}


def passes_per_step(variant: Variant, settings: ModelSettings) -> tuple[int, int]:
    """(forward/backward passes per optimizer step, micro-batches in each pass): ``(micro_batches, 1)``, Med-DDPM's
    gradient accumulation, or ``(1, micro_batches)`` where the configuration folds them
    (:attr:`Variant.fold_micro_batches`). A pass holds ``batch_size`` volumes per micro-batch."""
    n = settings.micro_batches
    return (1, n) if variant.fold_micro_batches else (n, 1)


def keeps_grad_buffers(variant: Variant, settings: ModelSettings) -> bool:
    """Whether a training step keeps its ``.grad`` buffers (CUDA graphs and gradient accumulation over more than one
    pass; see :class:`Workload`)."""
    return variant.cuda_graphs and passes_per_step(variant, settings)[0] > 1


def resolve_settings(
    preset_name: str, presets: dict, scale: str, scales: dict, *, network: str, micro_batches: int
) -> ModelSettings:
    """Merge a preset with its scale override. Overriding ``volume`` keeps the field of view
    (spacing = paper volume x paper spacing / new volume). ``network`` (:data:`NETWORKS`) and ``micro_batches``
    (per optimizer step) come from the config's ``unet3d_profile`` block (a job's spec: :func:`settings_of`).

    Raises:
        ValueError: an unknown ``network`` or ``micro_batches`` below 1."""
    if network not in NETWORKS:
        raise ValueError(f"unet3d_profile.network: {network!r} is not one of {', '.join(NETWORKS)}")
    if int(micro_batches) < 1:
        raise ValueError(f"unet3d_profile.micro_batches: {micro_batches!r} must be at least 1")
    p = dict(presets[preset_name])
    override = (scales or {}).get(scale) or {}
    if "volume" in override:
        fov = [v * s for v, s in zip(p["volume"], p["spacing_mm"])]
        p["spacing_mm"] = [f / v for f, v in zip(fov, override["volume"])]
    p.update(override)
    p = {k: tuple(v) if isinstance(v, list) else v for k, v in p.items()}
    return ModelSettings(preset=preset_name, scale=scale, network=network, micro_batches=int(micro_batches), **p)


# What results made before the config keys `network` and `micro_batches` existed ran (the first reference run,
# 2026-11-30): the MONAI stand-in, one forward/backward pass per Adam step. Read only for such a result (or its spec),
# which records neither key; never a default of the config (config/config.yaml and its schema hold those).
BEFORE_THE_KEYS = {"network": "monai", "micro_batches": 1}


def settings_of(spec: dict, scale: str) -> ModelSettings:
    """The model settings of a unet3d_profile spec (a job's spec, or a result's ``config``) at ``scale``: its preset
    ``spec["model"]`` of ``spec["presets"]`` with the scale's overrides, its ``network`` and ``micro_batches``
    (:data:`BEFORE_THE_KEYS` for a result made before those keys existed).

    Raises:
        ValueError: an unknown network or micro_batches below 1 (:func:`resolve_settings`).
    """
    return resolve_settings(
        spec["model"],
        spec["presets"],
        scale,
        spec.get("scales", {}),
        network=spec.get("network", BEFORE_THE_KEYS["network"]),
        micro_batches=spec.get("micro_batches", BEFORE_THE_KEYS["micro_batches"]),
    )
