"""llm_quant.quantize: the group-wise quantizer, its error bound and the byte counts of its packed storage."""

import pytest
import torch

from accelbench.experiments.llm_quant.quantize import dequantize, expected_nbytes, fake_quantize, qmax, quantize_groupwise


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
    with pytest.raises(ValueError, match="4 or 8"):
        quantize_groupwise(torch.randn(2, 8), 3)


@pytest.mark.parametrize("bits,group,shape,expected", [
    (8, 128, (256, 256), 256 * 256 + 256 * 2 * 2),
    (4, 128, (256, 256), 256 * 256 // 2 + 256 * 2 * 2),
    (4, 64, (256, 256), 256 * 256 // 2 + 256 * 4 * 2),
    (4, 128, (10, 576), 10 * 576 // 2 + 10 * 5 * 2),  # 576 = 4.5 groups -> 5 scales per row
    (8, 128, (3, 100), 300 + 3 * 1 * 2),
])
def test_byte_counts_from_the_stored_tensors(bits, group, shape, expected):
    qt = quantize_groupwise(torch.randn(shape), bits, group)
    assert qt.nbytes() == expected == expected_nbytes(shape, bits, group)


def test_fake_quantize_16_and_32_bits():
    w = torch.randn(4, 8)
    w16, b16 = fake_quantize(w, 16)
    assert b16 == 4 * 8 * 2 and torch.equal(w16, w.half().float())
    w32, b32 = fake_quantize(w, 32)
    assert b32 == 4 * 8 * 4 and torch.equal(w32, w)
