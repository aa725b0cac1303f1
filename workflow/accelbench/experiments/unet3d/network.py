"""The networks and the noise scheduler of Study A's workload (imports torch; their settings, torch-free, are in
:mod:`accelbench.experiments.unet3d.configs`): Med-DDPM's own U-Net or the MONAI stand-in (:func:`build_network`),
and Med-DDPM's cosine DDPM schedule (:func:`build_scheduler`). The module docstring of
:mod:`~accelbench.experiments.unet3d.job` maps Med-DDPM's settings onto the stand-in."""

from __future__ import annotations

import torch

from accelbench.experiments.unet3d.configs import NOT_ON_MONAI, ModelSettings, Variant
from accelbench.models.monai_import import import_monai


def build_network(s: ModelSettings) -> torch.nn.Module:
    """The U-Net ``s.network`` names: :class:`~.med_ddpm_unet.MedDDPMUNet` (``med_ddpm``) or the
    MONAI stand-in (:func:`build_unet`). Parameters in fp32 on the current default device."""
    if s.network == "med_ddpm":
        from accelbench.experiments.unet3d.med_ddpm_unet import MedDDPMUNet

        return MedDDPMUNet(
            s.image_channels + s.mask_channels,
            s.out_channels,
            base_channels=s.base_channels,
            channel_mult=s.channel_mult,
            num_res_blocks=s.num_res_blocks,
            attention_levels=s.attention_levels,
            num_heads=s.num_heads,
            norm_groups=s.norm_groups,
        )
    return build_unet(s)


def set_implementations(model: torch.nn.Module, variant: Variant) -> torch.nn.Module:
    """``model`` with the module implementations ``variant`` asks for (:attr:`Variant.network_options`), in place:
    Med-DDPM's network sets them (:meth:`~.med_ddpm_unet.MedDDPMUNet.set_implementations`; the
    parameters stay the same tensors); the MONAI stand-in has only its own.

    Raises:
        ValueError: a configuration that rewrites the network on the MONAI stand-in (the job records it as
            ``unsupported`` before it gets here: :func:`accelbench.experiments.unet3d.settings.network_reason`)."""
    from accelbench.experiments.unet3d.med_ddpm_unet import MedDDPMUNet

    if isinstance(model, MedDDPMUNet):
        return model.set_implementations(**variant.network_options)
    if variant.rewrites_network:
        raise ValueError(f"configuration {variant.name}: {NOT_ON_MONAI}")
    return model


def build_unet(s: ModelSettings) -> torch.nn.Module:
    """MONAI ``DiffusionModelUNet`` mapped to Med-DDPM (see module docstring). Parameters in fp32 on CPU.

    MONAI (like guided diffusion) zero-initialises the last convolution of each residual block and
    the output convolution, so an untrained network predicts exactly zero noise. Those layers are
    re-initialised here with PyTorch's default initialisation, so that every layer contributes to the
    output and the quality comparison between configurations compares real numbers, not zeros.
    The arithmetic per step is unchanged.
    """
    import_monai()
    from monai.networks.nets import DiffusionModelUNet

    model = DiffusionModelUNet(
        spatial_dims=3,
        in_channels=s.image_channels + s.mask_channels,
        out_channels=s.out_channels,
        num_res_blocks=[s.num_res_blocks] * len(s.channels),
        channels=list(s.channels),
        attention_levels=list(s.attention_levels),
        norm_num_groups=s.norm_groups,
        num_head_channels=[c // s.num_heads for c in s.channels],
        resblock_updown=False,
    )
    for module in model.modules():
        if isinstance(module, (torch.nn.Conv3d, torch.nn.Linear)) and not module.weight.detach().any():
            module.reset_parameters()
    return model


def build_scheduler(s: ModelSettings):
    """MONAI ``DDPMScheduler`` with Med-DDPM's cosine schedule and ``timesteps`` steps."""
    import_monai()
    from monai.networks.schedulers import DDPMScheduler

    return DDPMScheduler(num_train_timesteps=s.timesteps, schedule=s.schedule)
