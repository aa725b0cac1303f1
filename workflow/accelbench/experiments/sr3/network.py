"""Study B SR3: the network and its noise schedules, as the authors' code (javierhndev/Super-Resolution-SR3) builds
them on MONAI: the 2-D diffusion U-Net (:func:`build_unet`) with its GroupNorms computed as a configuration says
(:func:`set_norm`), and the DDPM and DDIM schedulers on SR3's linear betas (:func:`build_scheduler`,
:func:`build_ddim`). :mod:`.model` offers these names too."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from accelbench.errors import ConfigError
from accelbench.experiments.sr3.settings import SR3Settings
from accelbench.models.monai_import import import_monai


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


def set_norm(model: torch.nn.Module, norm: str, flexible_layout: bool = False) -> torch.nn.Module:
    """``model`` with every ``nn.GroupNorm`` computed as ``norm`` says, in place: ``group_norm`` (MONAI's, SR3's)
    leaves it, ``channel_sums`` swaps each for :class:`accelbench.models.ndhwc_ops.ChannelSumGroupNorm` holding the
    same weight and bias tensors (same state dict, same arithmetic: per-channel fp32 sums over (H, W) added per group,
    one pointwise affine; fp64 checks in tests/experiments/test_ndhwc_ops.py); ``fused`` swaps each for
    :class:`accelbench.models.fused_groupnorm.FusedGroupNorm` (same tensors) and each resnet block's
    GroupNorm -> SiLU pairs, with the time-embedding add before the second, into that kernel family
    (:func:`_fused_resnet_block`; fp64 checks in tests/experiments/test_fused_groupnorm.py), their operator the
    ``flexible_layout`` registration where ``flexible_layout`` (the configuration forces Inductor's layout
    optimization: the compiled graph's activations are channels-last in an NCHW network), else the fixed one
    (:mod:`accelbench.models.group_norm_op` says why). Call it before ``torch.compile``.

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
        if hasattr(m, "flexible_layout"):  # a FusedGroupNorm (norm="fused"): which registration of its operator
            m.flexible_layout = flexible_layout
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
