"""Skinny convolutions computed zero-padded (accelbench.models.padded_conv) against the plain convolution in fp64:
output and gradients of input, weight and bias agree to rounding; Med-DDPM's network keeps its state dict with
``skinny_conv`` set; the configuration that runs it records it, and the bare loop builds it."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accelbench.experiments.unet3d.med_ddpm_unet import MedDDPMUNet
from accelbench.models import padded_conv as pc

CL = torch.channels_last_3d
TOL = 1e-12
PADCONV = "bf16_channels_last_3d_ndhwc_fused_gn_padconv_compile_cudagraphs"


def _grads(fn, x, w, b, g):
    x, w, b = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    y = fn(x, w, b)
    return (y.detach(), *torch.autograd.grad((y * g).sum(), [x, w, b]))


@pytest.mark.parametrize(
    "cin, cout, cin_to, cout_to",
    [(64, 1, None, 8), (64, 1, None, 16), (3, 64, 8, None), (2, 3, 8, 16)],
)
@pytest.mark.parametrize("dims", [2, 3])
def test_padded_conv_equals_the_plain_convolution(cin, cout, cin_to, cout_to, dims):
    """Study A's head (64 -> 1) padded to 8/16 output channels, its stem (3 -> 64) to 8 input channels, both sides at
    once; 3-D and 2-D (SR3's head is 64 -> 3), contiguous and channels-last: forward and the gradients of input,
    weight and bias equal the plain convolution's (fp64), and the output keeps its real channels."""
    torch.manual_seed(0)
    conv = {2: F.conv2d, 3: F.conv3d}[dims]
    fmt = {2: torch.channels_last, 3: CL}[dims]
    space = (5, 6, 7)[:dims]
    x = torch.randn(2, cin, *space, dtype=torch.float64)
    w = torch.randn(cout, cin, *(3,) * dims, dtype=torch.float64)
    b = torch.randn(cout, dtype=torch.float64)
    g = torch.randn(2, cout, *space, dtype=torch.float64)
    ref = _grads(lambda x, w, b: conv(x, w, b, 1, 1), x, w, b, g)
    for layout in (torch.contiguous_format, fmt):
        got = _grads(
            lambda x, w, b: pc.padded_conv(
                x, w, b, (1,) * dims, (1,) * dims, (1,) * dims, cin_to=cin_to, cout_to=cout_to
            ),
            x.contiguous(memory_format=layout),
            w.contiguous(memory_format=layout),
            b,
            g,
        )
        assert got[0].shape == ref[0].shape
        for name, a, r in zip(("output", "input", "weight", "bias"), got, ref):
            assert a.shape == r.shape and (a - r).abs().max() <= TOL * r.abs().max(), (name, layout)
    with pytest.raises(ValueError, match="input has 5 channels, the weight"):
        pc.padded_conv(torch.zeros(1, 5, *space), w.float(), None, (1,) * dims, (1,) * dims, (1,) * dims, cout_to=8)


def test_the_padded_output_gradient_keeps_the_outputs_layout(monkeypatch):
    """The gradient reaching the padded convolution's output is zero-padded in that output's layout: channels_last_3d
    for a channels_last_3d output (as cuDNN gives for NDHWC inputs; autograd's plain slice would hand its NDHWC
    backward a contiguous gradient), contiguous for a contiguous one."""
    x = torch.randn(1, 16, 4, 4, 4).contiguous(memory_format=CL)
    w = torch.randn(1, 16, 3, 3, 3).contiguous(memory_format=CL).requires_grad_()
    real = F.conv3d
    for fmt in (CL, torch.contiguous_format):
        seen = []

        def conv(*a, fmt=fmt, seen=seen):
            y = real(*a).contiguous(memory_format=fmt)  # a CPU's conv3d gives NCDHW; cuDNN's NDHWC for NDHWC inputs
            y.register_hook(lambda g: seen.append((g.shape[1], g.is_contiguous(memory_format=fmt))))
            return y

        monkeypatch.setattr(F, "conv3d", conv)
        y = pc.padded_conv(x, w, None, (1,) * 3, (1,) * 3, (1,) * 3, cout_to=8)
        y.sum().backward()
        assert y.shape[1] == 1 and seen == [(8, True)], fmt


@pytest.mark.parametrize("dims", [2, 3])
def test_padded_conv_runs_under_cpu_autocast_as_the_plain_convolution(dims):
    """Under bf16 autocast on the CPU the padded convolution casts its fp32 (padded) weight as a plain ``nn.Conv`` does
    (torch.convolution is not on the CPU's autocast list: it raised "Input type (BFloat16) and weight type (float)
    should be the same" on a bf16 input) and gives the plain module's bf16 output."""
    torch.manual_seed(0)
    plain = (nn.Conv2d if dims == 2 else nn.Conv3d)(16, 1, 3, padding=1)
    x = torch.randn(1, 16, *(4,) * dims).bfloat16()  # a bf16 activation, as the layer before the head gives
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = plain(x)
        got = pc.padded_conv(x, plain.weight, plain.bias, plain.stride, plain.padding, plain.dilation, cout_to=8)
    assert got.dtype == ref.dtype == torch.bfloat16 and got.shape == ref.shape
    assert (got.float() - ref.float()).abs().max() <= 2e-2 * ref.float().abs().max()


def _net(**kw):
    torch.manual_seed(0)
    return MedDDPMUNet(3, 1, base_channels=8, norm_groups=4, attention_levels=(False,) * 3 + (True, False), **kw)


def test_network_option_pads_the_stem_and_head_and_keeps_the_state_dict():
    """``skinny_conv="pad8"`` swaps exactly the stem (3 -> 8) and the output convolution (8 -> 1) for
    PaddedConv3d holding the same parameter tensors (state dict unchanged: the head's weight stays 1x8x3x3x3); the
    network's output and every parameter's gradient equal the plain network's (fp32: the time embedding is fp32 by
    construction; the padded convolution alone is checked in fp64 above); the conv_grad hooks sit on the
    modules that run; ``as_is`` swaps them back; an unknown name is refused in one line."""
    plain, net = _net(), _net()
    params = dict(net.named_parameters())
    net.set_implementations(skinny_conv="pad8", conv_grad="channels_last_3d")
    padded = [n for n, m in net.named_modules() if isinstance(m, pc.PaddedConv3d)]
    assert padded == ["stem", "head.2"] and net.head[2].weight.shape == (1, 8, 3, 3, 3)
    assert {k: v.shape for k, v in net.state_dict().items()} == {k: v.shape for k, v in plain.state_dict().items()}
    assert all(p is params[n] for n, p in net.named_parameters())
    assert net.stem._forward_hooks and net.head[2]._forward_hooks
    x, t = torch.randn(1, 3, 16, 16, 16), torch.tensor([10])
    outs = []
    for model in (plain, net):
        y = model(x.contiguous(memory_format=CL), t)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs.append((y.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (ref, gref), (got, ggot) = outs
    assert (got - ref).abs().max() <= 1e-5 * ref.abs().max()
    for n, g in gref.items():
        assert (ggot[n] - g).abs().max() <= 1e-4 * g.abs().max(), n
    net.set_implementations()
    assert not any(isinstance(m, pc.PaddedConv3d) for m in net.modules()) and type(net.stem) is nn.Conv3d
    assert net.stem.weight is params["stem.weight"]
    with pytest.raises(ValueError, match="skinny_conv: implementation 'pad4' is not one of as_is, pad8, pad16"):
        net.set_implementations(skinny_conv="pad4")


def test_padconv_configuration_records_its_setting():
    """The new configuration is the fused-GroupNorm one plus ``skinny_conv="pad8"`` (the only difference), recorded
    in the result's ``measurements.variant`` (``dataclasses.asdict``) and in the overhead row's settings; every other
    configuration leaves the convolutions as they are."""
    from accelbench.experiments.unet3d.configs import VARIANTS, ModelSettings, no_layout_opt_name
    from accelbench.experiments.unet3d.overhead import settings_text

    v = VARIANTS[PADCONV + "_autotuned"]
    fused = VARIANTS["bf16_channels_last_3d_ndhwc_fused_gn_compile_cudagraphs_autotuned"]
    assert dataclasses.replace(v, name=fused.name, skinny_conv="as_is") == fused
    assert v.network_options["skinny_conv"] == "pad8" and dataclasses.asdict(v)["skinny_conv"] == "pad8"
    assert v.series.startswith("ours") and not VARIANTS[PADCONV].cudnn_benchmark
    assert all(w.skinny_conv == "as_is" for n, w in VARIANTS.items() if "_padconv_" not in n)
    s = ModelSettings("whole_head", "paper", (128,) * 3, (1.5,) * 3, 64, (1, 1, 2, 3, 4), 1, (16,), 1, 1, 2, 1, 32,
                      250, "cosine", 1e-5, 1, network="med_ddpm", micro_batches=2)  # fmt: skip
    text = settings_text(s, v)
    assert text.startswith("whole_head 128x128x128, bf16, compile=True, ") and "norm=fused" in text
    assert text.endswith(", skinny_conv=pad8")
    off = VARIANTS[no_layout_opt_name(PADCONV) + "_autotuned"]
    assert settings_text(s, off) == text + ", layout_optimization=False"


def test_no_layout_opt_configurations_differ_only_there_and_compile_without_it():
    """The ``_no_layout_opt`` configurations are the fused-GroupNorm and padded ones with
    ``layout_optimization=False`` (recorded in measurements.variant); the product's Workload and the bare loop pass
    torch.compile the mode's own Inductor options plus ``layout_optimization: False`` (one compile's options, not
    the global config); every other configuration passes its mode as before."""
    from accelbench.experiments.unet3d import workload
    from accelbench.experiments.unet3d.configs import VARIANTS, no_layout_opt_name

    for base in (PADCONV, "bf16_channels_last_3d_ndhwc_fused_gn_compile_cudagraphs"):
        for tail in ("", "_autotuned"):
            v, w = VARIANTS[no_layout_opt_name(base) + tail], VARIANTS[base + tail]
            assert dataclasses.replace(v, name=w.name, layout_optimization=True) == w and v.cuda_graphs
            assert dataclasses.asdict(v)["layout_optimization"] is False
            assert workload.compile_kwargs(v) == {"options": {"triton.cudagraphs": True, "layout_optimization": False}}
    off = [n for n, v in VARIANTS.items() if not v.layout_optimization]
    # the fused and padded ones, the padded fold and the channels-last upsampling (unfolded, folded), each autotuned
    assert len(off) == 10 and all("_no_layout_opt_" in n for n in off)
    assert workload.compile_kwargs(VARIANTS[PADCONV]) == {"mode": "reduce-overhead"}
    import torch._inductor.config as inductor_config

    before = inductor_config.layout_optimization
    workload.compile_kwargs(VARIANTS[no_layout_opt_name(PADCONV)])
    assert inductor_config.layout_optimization == before  # the global config untouched


@pytest.mark.parametrize("layout_opt, fold", [(True, False), (False, False), (False, True)])
def test_bare_loop_runs_the_padded_convolutions(tiny_config, monkeypatch, layout_opt, fold):
    """The bare loop beside the product's step builds the configuration's network from its variant: the stem and the
    head run padded (2 padded convolutions per forward, 2 micro-batches; folded, one forward of 2 volumes), compiled
    with the variant's options (the product's Workload's own: ``workload.compile_kwargs``)."""
    from accelbench.experiments.unet3d import bare
    from accelbench.experiments.unet3d import job as exp
    from accelbench.experiments.unet3d.configs import VARIANTS, no_layout_opt_name
    from accelbench.experiments.unet3d.workload import compile_kwargs

    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compiled.append(kw) or model)
    n = {"calls": 0}
    real = pc.padded_conv

    def counted(*a, **kw):
        n["calls"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(pc, "padded_conv", counted)
    u = tiny_config["unet3d_profile"]
    s = exp.resolve_settings("whole_head", u["presets"], "small", u["scales"], network="med_ddpm", micro_batches=2)
    image = torch.rand(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    mask = torch.zeros(1, 2, 16, 16, 16)
    name = PADCONV if layout_opt else no_layout_opt_name(PADCONV)
    name = name.replace("_padconv_", "_padconv_upsample_cl_fold_") if fold else name
    v = dataclasses.replace(VARIANTS[name], autocast=None)  # fp32: bf16 is emulated, slowly, on this CPU
    batches = []
    monkeypatch.setattr(pc, "padded_conv", lambda x, *a, **kw: batches.append(x.shape[0]) or counted(x, *a, **kw))

    def one_step(step):
        step()
        return [1.0]

    assert bare.bare_samples(s, v, image, mask, 0, "cpu", one_step) == [1.0]
    assert n["calls"] == 2 * 2 // (2 if fold else 1) and compiled == [compile_kwargs(v)]
    assert set(batches) == {2 if fold else 1}  # volumes per pass
    assert ("options" not in compiled[0]) == layout_opt
