"""Group-wise symmetric weight quantizer (Study B's simulated quantization) and packed storage.

Symmetric min-max, round-to-nearest, weight-only, per group of ``group_size`` consecutive input features,
FP16 scales; 16 bits = FP16 rounding. Codes are stored packed (int8 codes; two 4-bit codes per byte).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class QuantizedTensor:
    """Group-wise symmetric integer codes of a 2-D weight ``[out_features, in_features]``.

    ``codes``: uint8, ``bits`` = 16: one int16 code per two bytes (viewed as uint8); ``bits`` = 8: one int8 code
    per byte (viewed as uint8); ``bits`` = 4: two codes per byte (low nibble first), codes offset by 8. ``scales``:
    float16 ``[out_features, ceil(in_features / group_size)]``.
    """

    codes: torch.Tensor
    scales: torch.Tensor
    shape: tuple[int, int]
    bits: int
    group_size: int

    def nbytes(self) -> int:
        """Bytes of the stored tensors (codes + scales)."""
        return self.codes.numel() * self.codes.element_size() + self.scales.numel() * self.scales.element_size()


def qmax(bits: int) -> int:
    """Largest code magnitude of a symmetric ``bits``-bit quantizer (32767 for 16, 127 for 8, 7 for 4)."""
    return 2 ** (bits - 1) - 1


def _grouped(w: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[out, in]`` -> ``[out, n_groups, group_size]``, zero-padded at the end of each row."""
    out_f, in_f = w.shape
    pad = (-in_f) % group_size
    if pad:
        w = F.pad(w, (0, pad))
    return w.reshape(out_f, -1, group_size)


def quantize_groupwise(w: torch.Tensor, bits: int, group_size: int = 128) -> QuantizedTensor:
    """Symmetric min-max round-to-nearest quantization per group of ``group_size`` input features.

    scale = max|w| over the group / qmax(bits), stored in FP16; code = clamp(round(w / scale), -qmax, qmax).
    Error bound per element: |w - dequantize(q)| <= scale / 2 (up to the FP16 rounding of the scale).
    Rows whose length is not a multiple of ``group_size`` get a shorter last group (zero padding).

    Args:
        w: 2-D float tensor ``[out_features, in_features]``.
        bits: 8 or 4; 16 = Study B's 16-bit layers (16-bit integer codes with the same FP16 group scales,
            stored as 16 + 16/group_size bits per weight: the authors' ``LinearLSQGroupWise`` with ``nbits_w`` 16).

    Raises:
        ValueError: other bit widths or a non-2-D tensor.
    """
    if bits not in (4, 8, 16):
        raise ValueError(f"integer quantization supports 4, 8 or 16 bits, not {bits}")
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(w.shape)}")
    g = _grouped(w.detach().float(), group_size)
    q = qmax(bits)
    scales = (g.abs().amax(dim=-1, keepdim=True) / q).to(torch.float16)
    s = scales.float()
    codes = torch.where(s > 0, torch.round(g / torch.where(s > 0, s, 1.0)), 0.0).clamp_(-q, q)
    codes = codes.reshape(w.shape[0], -1)[:, : w.shape[1]].to(torch.int16 if bits == 16 else torch.int8)
    if bits == 16:
        packed = codes.reshape(-1).view(torch.uint8)
    elif bits == 8:
        packed = codes.view(torch.uint8).reshape(-1)
    else:
        u = (codes.reshape(-1) + 8).to(torch.uint8)
        if u.numel() % 2:
            u = torch.cat([u, u.new_zeros(1)])
        packed = u[0::2] | (u[1::2] << 4)
    return QuantizedTensor(packed, scales.squeeze(-1), tuple(w.shape), bits, group_size)


def dequantize(qt: QuantizedTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of :func:`quantize_groupwise` up to rounding: codes x scales, shape ``qt.shape``."""
    out_f, in_f = qt.shape
    if qt.bits == 16:
        codes = qt.codes.view(torch.int16)[: out_f * in_f]
    elif qt.bits == 8:
        codes = qt.codes.view(torch.int8)[: out_f * in_f]
    else:
        lo, hi = (qt.codes & 0x0F), (qt.codes >> 4)
        codes = torch.stack([lo, hi], dim=-1).reshape(-1)[: out_f * in_f].to(torch.int16) - 8
    codes = codes.reshape(out_f, in_f).float()
    g = _grouped(codes, qt.group_size) * qt.scales.float().unsqueeze(-1)
    return g.reshape(out_f, -1)[:, :in_f].to(dtype)


def expected_nbytes(shape: tuple[int, int], bits: int, group_size: int, sixteen_bit: str = "fp16") -> int:
    """Storage bytes of a ``shape`` weight at ``bits`` (16: FP16 without scales, or with ``sixteen_bit`` =
    ``int16_group`` 16-bit codes + FP16 group scales; 32: FP32), group-wise FP16 scales."""
    out_f, in_f = shape
    if bits == 32 or (bits == 16 and sixteen_bit == "fp16"):
        return out_f * in_f * bits // 8
    return math.ceil(out_f * in_f * bits / 8) + out_f * math.ceil(in_f / group_size) * 2


SIXTEEN_BIT = {
    "fp16": "16-bit layers rounded to FP16, stored without scales (ours)",
    "int16_group": "16-bit layers as 16-bit integer codes + FP16 per-group scales, 16 + 16/group_size bits per weight "
    "(Study B's scripts: LinearLSQGroupWise)",
}


def fake_quantize(
    w: torch.Tensor, bits: int, group_size: int = 128, sixteen_bit: str = "fp16"
) -> tuple[torch.Tensor, int]:
    """Simulated quantization: ``(dequantized weight in w's dtype, stored bytes)``.

    bits 4/8: :func:`quantize_groupwise` then :func:`dequantize`; 16: FP16 rounding (``sixteen_bit`` ``fp16``)
    or 16-bit group-wise codes (``int16_group``, :data:`SIXTEEN_BIT`); 32: unchanged.
    """
    if bits == 32:
        return w.detach().clone(), w.numel() * 4
    if bits == 16 and sixteen_bit == "fp16":
        h = w.detach().to(torch.float16)
        return h.to(w.dtype), h.numel() * h.element_size()
    qt = quantize_groupwise(w, bits, group_size)
    return dequantize(qt, w.dtype).to(w.device), qt.nbytes()


def quantize_(linears: dict[str, torch.nn.Linear], bits: int, group_size: int, sixteen_bit: str = "fp16") -> int:
    """Replace the weights of ``linears`` by their simulated ``bits``-bit version in place; returns stored bytes."""
    stored = 0
    with torch.no_grad():
        for mod in linears.values():
            w, b = fake_quantize(mod.weight, bits, group_size, sixteen_bit)
            mod.weight.copy_(w)
            stored += b
    return stored
