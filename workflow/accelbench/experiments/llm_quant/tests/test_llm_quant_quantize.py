"""llm_quant.quantize: the group-wise quantizer, its error bound and the byte counts of its packed storage."""

import pytest
import torch

from accelbench.experiments.llm_quant.quantize import (
    dequantize,
    expected_nbytes,
    fake_quantize,
    qmax,
    quantize_groupwise,
)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("shape", [(8, 256), (5, 200), (3, 64)])
def test_quantizer_round_trip_within_error_bound(bits, shape):
    torch.manual_seed(0)
    w = torch.randn(shape) * 0.05
    w[0, :3] = torch.tensor([1.0, -1.0, 0.0])  # outliers and an exact zero
    qt = quantize_groupwise(w, bits, group_size=128)
    back = dequantize(qt)
    assert back.shape == w.shape
    scale = qt.scales.float().repeat_interleave(128, dim=1)[:, : shape[1]]
    err = (w - back).abs()
    # |w - deq| <= scale/2, plus the FP16 rounding of the scale (relative 2^-11) times the largest code
    assert torch.all(err <= scale / 2 + w.abs() * 2**-10 + 1e-8)
    codes_max = qmax(bits)
    assert err.max() <= w.abs().max() / codes_max  # and never more than one step
    assert back[0, 2] == 0.0


def test_quantizer_rejects_unknown_bits():
    with pytest.raises(ValueError, match="4, 8 or 16"):
        quantize_groupwise(torch.randn(2, 8), 3)


@pytest.mark.parametrize(
    "bits,group,shape,expected",
    [
        (8, 128, (256, 256), 256 * 256 + 256 * 2 * 2),
        (4, 128, (256, 256), 256 * 256 // 2 + 256 * 2 * 2),
        (4, 64, (256, 256), 256 * 256 // 2 + 256 * 4 * 2),
        (4, 128, (10, 576), 10 * 576 // 2 + 10 * 5 * 2),  # 576 = 4.5 groups -> 5 scales per row
        (8, 128, (3, 100), 300 + 3 * 1 * 2),
    ],
)
def test_byte_counts_from_the_stored_tensors(bits, group, shape, expected):
    qt = quantize_groupwise(torch.randn(shape), bits, group)
    assert qt.nbytes() == expected == expected_nbytes(shape, bits, group)


def test_fake_quantize_16_and_32_bits():
    w = torch.randn(4, 8)
    w16, b16 = fake_quantize(w, 16)
    assert b16 == 4 * 8 * 2 and torch.equal(w16, w.half().float())
    w32, b32 = fake_quantize(w, 32)
    assert b32 == 4 * 8 * 4 and torch.equal(w32, w)


def test_study_b_16_bit_layers_are_group_codes_counted_16_plus_16_over_128_bits():
    """Study B's scripts count a 16-bit layer as 16 bits + 16/128 for an FP16 group scale (LinearLSQGroupWise):
    with their 7/7/8 buckets, [16,8,4] on the TinyLlama-1.1B architecture is the published 3.47x (FP16 without a
    scale, ours: 3.49x); [8,8,4] and [8,4,4] give 4.80x and 5.93x either way."""
    w = torch.randn(16, 256)
    back, stored = fake_quantize(w, 16, 128, "int16_group")
    assert stored == 16 * 256 * 2 + 16 * 2 * 2 == expected_nbytes((16, 256), 16, 128, "int16_group")
    assert (back - w).abs().max() <= w.abs().max() * 2**-10  # 32767 levels: below the FP16 scale's rounding
    # TinyLlama-1.1B: hidden 2048, 4 KV heads of 64, MLP 5632, 22 layers
    shapes = [(2048, 2048), (256, 2048), (256, 2048), (2048, 2048), (5632, 2048), (5632, 2048), (2048, 5632)]
    fp32 = 22 * sum(4 * o * i for o, i in shapes)

    def ratio(bits, sixteen):
        layers = [bits[0]] * 7 + [bits[1]] * 7 + [bits[2]] * 8
        return fp32 / sum(expected_nbytes(s, b, 128, sixteen) for b in layers for s in shapes)

    assert round(ratio([16, 8, 4], "int16_group"), 2) == 3.47
    assert round(ratio([16, 8, 4], "fp16"), 3) == 3.487
    assert round(ratio([8, 8, 4], "int16_group"), 2) == 4.80 and round(ratio([8, 4, 4], "fp16"), 2) == 5.93
