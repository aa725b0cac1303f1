"""Med-DDPM's 3D U-Net, written from the architecture of its code (Study A's network).

Source of the settings: mobaidoctor/med-ddpm at 2b14ee6, ``diffusion_model/unet.py`` (``create_model``), ``modules.py``,
``trainer.py`` and ``train.py`` / ``train_brats.py`` (a guided-diffusion U-Net, Dhariwal & Nichol 2021). Med-DDPM's code
is GPL-3.0; this module is written anew from the description below and shares no code with it.

Architecture (``dims=3``; ``C`` = ``base_channels`` = 64, ``channel_mult`` = (1, 1, 2, 3, 4), ``E`` = 4 C):

- time embedding: sinusoidal (cos half, then sin half; max period 1000) of width C -> Linear(C, E) -> SiLU ->
  Linear(E, E);
- stem: Conv3d(in, C, 3); the encoder, per level l: ``num_res_blocks`` residual blocks to ``C * mult[l]`` channels, each
  followed by an attention block where the level has attention, then (not on the last level) a stride-2 Conv3d(3)
  downsampling; every stem/block/downsampling output is kept for a skip connection;
- middle: residual block, attention block, residual block;
- decoder, levels in reverse: ``num_res_blocks + 1`` residual blocks on [h, skip] (concatenated on channels), each with
  attention where the level has it; the last block of each level but level 0 ends in an upsampling: **trilinear
  interpolation** x2 (``align_corners=False``) then Conv3d(3);
- output: GroupNorm -> SiLU -> Conv3d(C, out, 3).

Residual block: GroupNorm -> SiLU -> Conv3d(3) to the block's width; plus SiLU -> Linear(E, width) of the time embedding
(added, broadcast over space); GroupNorm -> SiLU -> Dropout(0) -> Conv3d(3); skip: identity when widths match, else a
1x1x1 Conv3d. Attention block (one head per block at these settings, guided diffusion's "legacy" order: heads split
before q/k/v): GroupNorm over the flattened (B, C, T) tensor, q/k/v projection as a 1x1 **Conv1d** (C -> 3C), scores
``einsum(q s, k s)`` with s = ch^-1/4 on both, softmax in fp32, ``einsum(w, v)``, output projection as a 1x1 **Conv1d**,
residual add. The attention block is always **gradient-checkpointed** in training (Med-DDPM passes ``True`` to its
checkpoint function regardless of ``use_checkpoint``): its forward runs without saving activations and is recomputed
in the backward pass. Residual blocks are not checkpointed (``use_checkpoint=False`` in ``create_model``).

Attention placement follows guided diffusion's rule: at downsample factor ``ds = 2**l`` iff ``ds`` is in
``image_size // r`` for the listed resolutions r (whole head 128 // 16 = 8: level 3; BraTS 192 // 16 = 12: none, so
only the middle block), computed by :attr:`accelbench.experiments.unet3d.configs.ModelSettings.attention_levels`.

What differs from Med-DDPM's code, on purpose: the layers Med-DDPM zero-initialises (the second convolution of every
residual block, the attention output projection and the output convolution) keep PyTorch's default initialisation, so
an untrained network predicts non-zero noise and the quality check compares real numbers (the arithmetic per step is
unchanged); ``GroupNorm32``'s explicit fp32 cast is left to autocast, which runs ``group_norm`` in fp32 anyway.

Options beyond Med-DDPM (``attention``, ``upsample``, ``norm``; :meth:`MedDDPMUNet.set_implementations`): the same
parameters and arithmetic computed so that a ``channels_last_3d`` network stays NDHWC
(:mod:`accelbench.models.ndhwc_ops`). Their defaults are Med-DDPM's.

Counts (``resources/reference/med_ddpm_network.csv``, counted on Med-DDPM's own code): whole head (3 in, 1 out)
40,226,433 parameters and 5,536.7 GFLOP forward at (1, 3, 128, 128, 128); BraTS (8 in, 4 out, 2 residual blocks)
57,562,564 parameters and 21,258.2 GFLOP forward at (1, 8, 144, 192, 192).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from accelbench.models import ndhwc_ops, padded_conv
from accelbench.models.fused_groupnorm import FusedGroupNorm


def timestep_features(t: torch.Tensor, width: int, max_period: float = 1000.0) -> torch.Tensor:
    """Sinusoidal features of the timesteps ``t`` (B,) -> (B, width): cosines of ``width // 2`` log-spaced
    frequencies (1 down to 1/max_period), then sines; a zero column if ``width`` is odd."""
    half = width // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32, device=t.device) * (-math.log(max_period) / half))
    angle = t.float()[:, None] * freq[None, :]
    feats = torch.cat([angle.cos(), angle.sin()], dim=1)
    return F.pad(feats, (0, 1)) if width % 2 else feats


class ResidualBlock(nn.Module):
    """Two 3x3x3 convolutions with GroupNorm/SiLU, the time embedding added in between; (B, c_in, D, H, W) ->
    (B, c_out, D, H, W)."""

    def __init__(self, c_in: int, c_out: int, emb_dim: int, groups: int, dropout: float = 0.0):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c_in)
        self.conv1 = nn.Conv3d(c_in, c_out, 3, padding=1)
        self.emb = nn.Linear(emb_dim, c_out)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.drop = nn.Dropout(dropout)
        self.conv2 = nn.Conv3d(c_out, c_out, 3, padding=1)
        self.skip = nn.Identity() if c_in == c_out else nn.Conv3d(c_in, c_out, 1)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(norm_silu(self.norm1, x))
        h = self.conv2(self.drop(norm_silu(self.norm2, h, self.emb(F.silu(emb)).to(h.dtype)[:, :, None, None, None])))
        return self.skip(x) + h


def norm_silu(norm: nn.Module, x: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
    """``SiLU(norm(x + add))``, ``add`` (B, C, 1, 1, 1) or None: in one kernel family where ``norm`` is a
    :class:`~accelbench.models.fused_groupnorm.FusedGroupNorm` with its SiLU (``norm="fused"``), else as written."""
    if isinstance(norm, FusedGroupNorm) and norm.activation == "silu":
        return norm(x, add)
    return F.silu(norm(x if add is None else x + add))


class SpatialAttention(nn.Module):
    """Self-attention over all voxels of a (B, C, D, H, W) map with 1x1 Conv1d projections, gradient-checkpointed
    in training (``checkpointed``). ``impl``: ``conv1d_einsum`` (Med-DDPM's: (B, C, N) reshape, Conv1d, einsum) or
    ``tokens_sdpa`` (:func:`accelbench.models.ndhwc_ops.tokens_sdpa_attention`: the same parameters and arithmetic on
    a (B, N, C) token view with ``scaled_dot_product_attention``)."""

    def __init__(self, channels: int, heads: int, groups: int, checkpointed: bool = True, impl: str = "conv1d_einsum"):
        super().__init__()
        if channels % heads:
            raise ValueError(f"attention: {channels} channels do not split into {heads} heads")
        _check("attention", impl, ndhwc_ops.ATTENTION_IMPLS)
        self.heads, self.checkpointed, self.impl = heads, checkpointed, impl
        self.norm = nn.GroupNorm(groups, channels)
        self.qkv = nn.Conv1d(channels, 3 * channels, 1)
        self.proj = nn.Conv1d(channels, channels, 1)

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "tokens_sdpa":
            return ndhwc_ops.tokens_sdpa_attention(x, self.norm, self.qkv, self.proj, self.heads)
        b, c, *space = x.shape
        flat = x.reshape(b, c, -1)
        qkv = self.qkv(self.norm(flat))
        n = flat.shape[-1]
        width = c // self.heads
        q, k, v = qkv.reshape(b * self.heads, 3 * width, n).split(width, dim=1)  # heads split before q/k/v
        s = width**-0.25
        w = torch.einsum("bci,bcj->bij", q * s, k * s)
        w = torch.softmax(w.float(), dim=-1).to(w.dtype)
        out = torch.einsum("bij,bcj->bci", w, v).reshape(b, c, n)
        return (flat + self.proj(out)).reshape(b, c, *space)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.checkpointed and torch.is_grad_enabled()):
            return self._attend(x)
        if torch.compiler.is_compiling():  # the compiler partitions the recomputation itself
            return checkpoint(self._attend, x, use_reentrant=False)
        # eager, as Med-DDPM: the whole forward is recomputed in the backward pass (PyTorch's early stop would skip
        # the output projection, whose result the backward pass does not need)
        with set_checkpoint_early_stop(False):
            return checkpoint(self._attend, x, use_reentrant=False)


class Upsample(nn.Module):
    """x2 interpolation in all three spatial dimensions (``mode``: Med-DDPM ``trilinear``) then a 3x3x3 convolution.
    ``impl``: ``interpolate`` (``F.interpolate``), ``separable`` (trilinear only:
    :func:`accelbench.models.ndhwc_ops.trilinear_up2`, the same interpolation as three 1-D passes) or
    ``separable_channels_last`` (the same passes with the channels innermost:
    :func:`~accelbench.models.ndhwc_ops.trilinear_up2_channels_last`)."""

    def __init__(self, channels: int, mode: str = "trilinear", impl: str = "interpolate"):
        super().__init__()
        _check("upsample", impl, ndhwc_ops.UPSAMPLE_IMPLS)
        if impl.startswith("separable") and mode != "trilinear":
            raise ValueError(f"upsample: {impl!r} is trilinear interpolation, not {mode!r}")
        self.mode, self.impl = mode, impl
        self.conv = nn.Conv3d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "separable":
            return self.conv(ndhwc_ops.trilinear_up2(x))
        if self.impl == "separable_channels_last":
            return self.conv(ndhwc_ops.trilinear_up2_channels_last(x))
        return self.conv(F.interpolate(x, scale_factor=2, mode=self.mode))


def _check(what: str, impl: str, allowed: tuple[str, ...]) -> None:
    if impl not in allowed:
        raise ValueError(f"{what}: implementation {impl!r} is not one of {', '.join(allowed)}")


class _Stage(nn.Module):
    """A residual block, optionally followed by attention (one entry of the encoder or decoder)."""

    def __init__(self, block: ResidualBlock, attn: SpatialAttention | None, up: Upsample | None = None):
        super().__init__()
        self.block, self.attn, self.up = block, attn, up

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        x = self.block(x, emb)
        if self.attn is not None:
            x = self.attn(x)
        return self.up(x) if self.up is not None else x


class MedDDPMUNet(nn.Module):
    """Med-DDPM's U-Net (see module docstring). ``forward(x, t)``: x (B, in_channels, D, H, W) with each spatial size
    divisible by 2**(levels-1), t (B,) integer timesteps -> predicted noise (B, out_channels, D, H, W).

    Args:
        attention_levels: per level, whether its blocks have attention (guided diffusion's rule, resolved by the
            caller).
        checkpoint_attention: Med-DDPM: True (always).
        upsample_mode: Med-DDPM: ``trilinear``.
        attention, upsample, norm: the implementations of the attention blocks, the upsamplings and every GroupNorm
            (:meth:`set_implementations`); the defaults are Med-DDPM's.
        conv_grad: the layout of the gradient each Conv3d's backward receives (``as_computed``, Med-DDPM's, or
            ``channels_last_3d``: :func:`accelbench.models.ndhwc_ops.channels_last_grad`).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        base_channels: int = 64,
        channel_mult: tuple[int, ...] = (1, 1, 2, 3, 4),
        num_res_blocks: int = 1,
        attention_levels: tuple[bool, ...] = (False, False, False, True, False),
        num_heads: int = 1,
        norm_groups: int = 32,
        dropout: float = 0.0,
        checkpoint_attention: bool = True,
        upsample_mode: str = "trilinear",
        attention: str = "conv1d_einsum",
        upsample: str = "interpolate",
        norm: str = "group_norm",
        conv_grad: str = "as_computed",
        skinny_conv: str = "as_is",
    ):
        super().__init__()
        self._conv_grad_hooks: list = []
        if len(attention_levels) != len(channel_mult):
            raise ValueError(f"attention_levels has {len(attention_levels)} entries for {len(channel_mult)} levels")
        self.base_channels = base_channels
        emb = 4 * base_channels
        self.time_mlp = nn.Sequential(nn.Linear(base_channels, emb), nn.SiLU(), nn.Linear(emb, emb))

        def attention_block(ch: int, level_has: bool) -> SpatialAttention | None:
            return SpatialAttention(ch, num_heads, norm_groups, checkpoint_attention) if level_has else None

        ch = base_channels * channel_mult[0]
        self.stem = nn.Conv3d(in_channels, ch, 3, padding=1)
        skips = [ch]
        self.down = nn.ModuleList()
        for level, mult in enumerate(channel_mult):
            for _ in range(num_res_blocks):
                width = base_channels * mult
                self.down.append(
                    _Stage(
                        ResidualBlock(ch, width, emb, norm_groups, dropout),
                        attention_block(width, attention_levels[level]),
                    )
                )
                ch = width
                skips.append(ch)
            if level < len(channel_mult) - 1:
                self.down.append(nn.Conv3d(ch, ch, 3, stride=2, padding=1))
                skips.append(ch)
        self.mid = nn.ModuleList(
            [
                ResidualBlock(ch, ch, emb, norm_groups, dropout),
                SpatialAttention(ch, num_heads, norm_groups, checkpoint_attention),
                ResidualBlock(ch, ch, emb, norm_groups, dropout),
            ]
        )
        self.up = nn.ModuleList()
        for level in reversed(range(len(channel_mult))):
            width = base_channels * channel_mult[level]
            for i in range(num_res_blocks + 1):
                last = i == num_res_blocks
                self.up.append(
                    _Stage(
                        ResidualBlock(ch + skips.pop(), width, emb, norm_groups, dropout),
                        attention_block(width, attention_levels[level]),
                        Upsample(width, upsample_mode) if level > 0 and last else None,
                    )
                )
                ch = width
        self.head = nn.Sequential(nn.GroupNorm(norm_groups, ch), nn.SiLU(), nn.Conv3d(ch, out_channels, 3, padding=1))
        self.set_implementations(
            attention=attention,
            upsample=upsample,
            norm=norm,
            checkpoint_attention=checkpoint_attention,
            conv_grad=conv_grad,
            skinny_conv=skinny_conv,
        )

    def set_implementations(
        self,
        *,
        attention: str = "conv1d_einsum",
        upsample: str = "interpolate",
        norm: str = "group_norm",
        checkpoint_attention: bool = True,
        conv_grad: str = "as_computed",
        skinny_conv: str = "as_is",
    ) -> MedDDPMUNet:
        """Choose, in place, how the attention blocks, the upsamplings and the GroupNorms compute (names:
        :mod:`accelbench.models.ndhwc_ops`; the defaults are Med-DDPM's), whether attention is checkpointed and the
        layout of each Conv3d's incoming gradient (``conv_grad``: a forward hook, no module or parameter added). The
        parameters stay the same tensors (``norm="channel_sums"`` swaps each ``nn.GroupNorm`` for a
        :class:`~accelbench.models.ndhwc_ops.ChannelSumGroupNorm` holding its weight and bias, and back;
        ``norm="fused"`` for a :class:`~accelbench.models.fused_groupnorm.FusedGroupNorm` that also applies the SiLU
        after it in each residual block and the head, and the time-embedding add before the second one;
        ``skinny_conv="pad8"``/``"pad16"`` the stem and the output convolution, whose input or output has fewer than 8
        channels, for a :class:`~accelbench.models.padded_conv.PaddedConv3d` computing them zero-padded to 8/16
        channels), so the state dict, the optimizer's parameters and the arithmetic are unchanged. Call it before
        ``torch.compile``."""
        _check("attention", attention, ndhwc_ops.ATTENTION_IMPLS)
        _check("upsample", upsample, ndhwc_ops.UPSAMPLE_IMPLS)
        _check("norm", norm, ndhwc_ops.NORM_IMPLS)
        _check("conv_grad", conv_grad, ndhwc_ops.CONV_GRAD_LAYOUTS)
        _check("skinny_conv", skinny_conv, padded_conv.SKINNY_CONV_IMPLS)
        padded_conv.set_skinny_convs(self, skinny_conv)  # before the hooks: they go on the modules that run
        for handle in self._conv_grad_hooks:
            handle.remove()
        self._conv_grad_hooks = (
            [m.register_forward_hook(ndhwc_ops.channels_last_grad) for m in self.modules() if isinstance(m, nn.Conv3d)]
            if conv_grad == "channels_last_3d"
            else []
        )
        for m in self.modules():
            if isinstance(m, SpatialAttention):
                m.impl, m.checkpointed = attention, checkpoint_attention
            elif isinstance(m, Upsample):
                if upsample.startswith("separable") and m.mode != "trilinear":
                    raise ValueError(f"upsample: {upsample!r} is trilinear interpolation, not {m.mode!r}")
                m.impl = upsample
        ndhwc_ops.set_group_norms(self, norm)
        fused = norm == "fused"  # each residual block's SiLUs and the head's go into their GroupNorm's kernel
        for m in self.modules():
            if isinstance(m, ResidualBlock) and fused:
                m.norm1.activation = m.norm2.activation = "silu"
        if fused:
            self.head[0].activation = "silu"
        self.head[1] = nn.Identity() if fused else nn.SiLU()
        return self

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        emb = self.time_mlp(timestep_features(t, self.base_channels))
        h = self.stem(x)
        kept = [h]
        for stage in self.down:
            h = stage(h, emb) if isinstance(stage, _Stage) else stage(h)
            kept.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, emb)), emb)
        for stage in self.up:
            h = stage(torch.cat([h, kept.pop()], dim=1), emb)
        return self.head(h)
