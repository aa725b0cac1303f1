"""Skinny convolutions (fewer than 8 input or output channels) computed with their channels zero-padded, the same
parameters and the same result, so that cuDNN runs its tensor-core kernels on them.

cuDNN is poor at a convolution with one output channel or three input channels: on an H100 (bf16, channels_last_3d,
cuDNN autotuning; ``benchmarks/conv_shapes.py --networks study_a``) Med-DDPM's output convolution ``head.2`` (Conv3d
64 -> 1, 3x3x3, on 1 x 64 x 128^3) took 1.13 ms forward + 0.77 ms dgrad + 1.84 ms wgrad, 0.4-1 % of the bf16 peak,
while reading its 268 MB input at the memory's speed takes about 0.08 ms; the stem (Conv3d 3 -> 64) 0.71 ms forward +
0.52 ms wgrad, 3 % of the peak.

:func:`padded_conv` pads the skinny side on the fly: output channels with zero filters (and zero biases), the output
sliced back to the real channels; input channels with zero channels of the input and zero weights. The extra products
are exact zeros (a zero filter's output is sliced off and gets a zero gradient; a zero input channel meets a zero
weight), so the output and the gradients of the input, weight and bias are those of the plain convolution (the
summation order inside cuDNN may differ, as between two of its algorithms). The parameters keep their shapes:
:class:`PaddedConv3d` holds the plain ``nn.Conv3d``'s own weight and bias (same state dict, same optimizer state), the
padded copies are made in each forward (and their gradients sliced back by autograd).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# MedDDPMUNet's ``skinny_conv`` implementations (the first, Med-DDPM's, the default): the convolution as it is, or its
# sides with fewer than SKINNY channels padded to 8 or 16
SKINNY_CONV_IMPLS = ("as_is", "pad8", "pad16")
SKINNY = 8


def is_skinny(in_channels: int, out_channels: int, groups: int = 1) -> bool:
    """Whether a convolution has fewer than :data:`SKINNY` input or output channels (and one group: padding the
    channels of a grouped convolution would mix its groups)."""
    return groups == 1 and min(in_channels, out_channels) < SKINNY


def padded_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride,
    padding,
    dilation,
    *,
    cin_to: int | None = None,
    cout_to: int | None = None,
) -> torch.Tensor:
    """``F.conv{1,2,3}d(x, weight, bias, ...)`` (one group) with the input channels zero-padded to
    ``cin_to`` and the output channels to ``cout_to`` (None, or a count at or below the real one: that side as it is).

    Shapes: ``x`` (N, C_in, *spatial), ``weight`` (C_out, C_in, *kernel), ``bias`` (C_out,) or None -> (N, C_out,
    *out_spatial): with ``cout_to`` a view of the first C_out channels of the padded output (its strides those of a
    ``cout_to``-channel tensor). ``F.pad`` keeps a channels-last input channels-last.

    Raises:
        ValueError: ``x``'s channels are not the weight's ``C_in``.
    """
    cout, cin = weight.shape[:2]
    if x.shape[1] != cin:
        raise ValueError(f"padded_conv: input has {x.shape[1]} channels, the weight {cin}")
    keep = (0, 0) * (weight.dim() - 2)  # no padding of the spatial axes
    pin, pout = max((cin_to or 0) - cin, 0), max((cout_to or 0) - cout, 0)
    if pin:
        x = F.pad(x, (*keep, 0, pin))
        weight = F.pad(weight, (*keep, 0, pin))
    if pout:
        weight = F.pad(weight, (*keep, 0, 0, 0, pout))
        bias = None if bias is None else F.pad(bias, (0, pout))
    # F.conv2d/conv3d, not torch.convolution: autocast casts conv2d/conv3d on the CPU and CUDA, aten::convolution on
    # CUDA only (on the CPU a bf16 input met the fp32 padded weight: "Input type ... and weight type ... should be the
    # same")
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[weight.dim() - 2]
    y = conv(x, weight, bias, stride, padding, dilation, 1)
    return _FirstChannels.apply(y, cout) if pout else y


class _FirstChannels(torch.autograd.Function):
    """``y[:, :c]`` (a view) whose backward zero-pads the incoming gradient back to ``y``'s channels in ``y``'s memory
    format (autograd's own slice backward fills a contiguous tensor: a channels-last convolution's backward would
    get it NCDHW and convert it)."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, c: int) -> torch.Tensor:
        ctx.pad = y.shape[1] - c
        ctx.fmt = _memory_format(y)
        return y.narrow(1, 0, c)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        keep = (0, 0) * (g.dim() - 2)
        return F.pad(g, (*keep, 0, ctx.pad)).contiguous(memory_format=ctx.fmt), None


def _memory_format(t: torch.Tensor) -> torch.memory_format:
    """``t``'s channels-last format where it is laid out so (4-D/5-D), else ``torch.contiguous_format``."""
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(t.dim())
    return (
        fmt
        if fmt is not None and not t.is_contiguous() and t.is_contiguous(memory_format=fmt)
        else (torch.contiguous_format)
    )


class PaddedConv3d(nn.Conv3d):
    """An ``nn.Conv3d`` (one group, zero spatial padding mode) whose skinny sides (fewer than :data:`SKINNY`
    channels) are computed zero-padded to ``channels_to`` channels (:func:`padded_conv`). Its parameters are the plain
    module's own tensors, their shapes unchanged: (C_out, C_in, kD, kH, kW) and (C_out,)."""

    channels_to: int = SKINNY

    @classmethod
    def of(cls, conv: nn.Conv3d, channels_to: int) -> PaddedConv3d:
        """A PaddedConv3d holding ``conv``'s own parameter tensors (not copies).

        Raises:
            ValueError: ``conv`` is grouped or pads its border other than with zeros."""
        if conv.groups != 1 or conv.padding_mode != "zeros":
            raise ValueError(
                f"PaddedConv3d: groups {conv.groups}, padding_mode {conv.padding_mode!r}: only one group, zeros"
            )
        new = _holding(cls, conv)
        new.channels_to = int(channels_to)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.padding, str):  # "same"/"valid": leave it to nn.Conv3d's own handling
            return super().forward(x)
        to = self.channels_to
        return padded_conv(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.dilation,
            cin_to=to if self.in_channels < SKINNY else None,
            cout_to=to if self.out_channels < SKINNY else None,
        )


def plain_conv3d(conv: PaddedConv3d) -> nn.Conv3d:
    """An ``nn.Conv3d`` holding ``conv``'s own parameter tensors (the way back from :class:`PaddedConv3d`)."""
    return _holding(nn.Conv3d, conv)


def _holding(kind: type[nn.Conv3d], conv: nn.Conv3d) -> nn.Conv3d:
    """A ``kind`` module with ``conv``'s geometry holding ``conv``'s own parameter tensors (built on the meta device,
    so nothing is allocated) in ``conv``'s training mode."""
    new = kind(
        conv.in_channels,
        conv.out_channels,
        conv.kernel_size,
        stride=conv.stride,
        padding=conv.padding,
        dilation=conv.dilation,
        bias=conv.bias is not None,
        device="meta",
    )
    new.weight, new.bias = conv.weight, conv.bias
    new.train(conv.training)
    return new


def set_skinny_convs(model: nn.Module, impl: str) -> nn.Module:
    """Every skinny ``nn.Conv3d`` of ``model`` (:func:`is_skinny`) computed as ``impl`` (one of
    :data:`SKINNY_CONV_IMPLS`) says, in place: ``pad8``/``pad16`` swap each for a :class:`PaddedConv3d` padding to 8/16
    channels, ``as_is`` each back (:func:`plain_conv3d`); the parameter tensors stay the same (same state dict). Call
    it before ``torch.compile``.

    Raises:
        ValueError: an unknown ``impl``."""
    if impl not in SKINNY_CONV_IMPLS:
        raise ValueError(f"skinny_conv: implementation {impl!r} is not one of {', '.join(SKINNY_CONV_IMPLS)}")
    to = None if impl == "as_is" else int(impl.removeprefix("pad"))
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Conv3d) or not is_skinny(child.in_channels, child.out_channels, child.groups):
                continue
            if to is None and isinstance(child, PaddedConv3d):
                setattr(parent, name, plain_conv3d(child))
            elif to is not None and child.padding_mode == "zeros":
                setattr(parent, name, PaddedConv3d.of(child, to))
    return model
