"""Study B SR3: the resolved settings of one scale (:class:`SR3Settings`, config ``sr3_scaling.preset`` with its
``scales`` override) and their resolution (:func:`resolve_settings`). Torch-free: the rule functions (:mod:`.rules`)
resolve the settings while the Snakefile plans."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from accelbench.errors import ConfigError


@dataclass(frozen=True)
class SR3Settings:
    """Resolved SR3 settings at one scale (see ``sr3_scaling.preset`` in config/config.schema.yaml)."""

    scale: str
    hr_size: int
    factor: int
    inner_channels: int
    channel_mult: tuple[int, ...]
    num_res_blocks: int
    attention_resolutions: tuple[int, ...]
    num_heads: int
    dropout: float
    norm_groups: int
    timesteps: int
    beta_start: float
    beta_end: float
    lr: float
    batch_size: int
    # the size the authors' U-Net starts its attention bookkeeping at (their JSON's "image_size": 128 at 256 px data):
    # attention sits where unet_image_size / 2**level is listed. None: hr_size, the paper text's reading
    unet_image_size: int | None = None

    @property
    def lr_size(self) -> int:
        return self.hr_size // self.factor

    @property
    def channels(self) -> tuple[int, ...]:
        return tuple(self.inner_channels * m for m in self.channel_mult)

    @property
    def attention_levels(self) -> tuple[bool, ...]:
        """Attention at level l iff ``unet_image_size / 2**l`` (as the authors' code counts; default hr_size / 2**l,
        the feature map's size, as the paper's text reads) is in ``attention_resolutions``."""
        start = self.unet_image_size or self.hr_size
        return tuple(start // 2**level in self.attention_resolutions for level in range(len(self.channel_mult)))

    def for_configuration(self, attention: str) -> SR3Settings:
        """These settings with the attention placement of a configuration: ``as_run`` keeps ``unet_image_size``,
        ``paper_text`` drops it (attention at the listed feature-map sizes)."""
        return self if attention == "as_run" else dataclasses.replace(self, unet_image_size=None)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(channels=list(self.channels), attention_levels=list(self.attention_levels), lr_size=self.lr_size)
        return d


def resolve_settings(preset: dict, scale: str, scales: dict | None) -> SR3Settings:
    """Merge the paper preset with the override of ``scale`` (``scales: {small: {...}, paper: {...}}``).

    Raises:
        ConfigError: hr_size not a multiple of factor x 2**(levels - 1).
    """
    p = dict(preset)
    p.update((scales or {}).get(scale) or {})
    p = {k: tuple(v) if isinstance(v, list) else v for k, v in p.items()}
    s = SR3Settings(scale=scale, **p)
    need = max(s.factor, 2 ** (len(s.channel_mult) - 1))
    if s.hr_size % need:
        raise ConfigError(
            f"sr3_scaling: hr_size {s.hr_size} must be a multiple of {need} "
            f"(factor {s.factor}, {len(s.channel_mult)} U-Net levels)"
        )
    return s
