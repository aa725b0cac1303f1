"""The three NDHWC rewrites of Med-DDPM's network (accelbench.models.ndhwc_ops) against the modules they replace, in
fp64: forward and gradients (input and parameters) agree to rounding, a channels_last_3d input gives a
channels_last_3d output, and the parameters are the same tensors."""

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accelbench.experiments.unet3d.med_ddpm_unet import MedDDPMUNet, SpatialAttention, Upsample
from accelbench.models import ndhwc_ops

CL = torch.channels_last_3d
TOL = 1e-12
# Med-DDPM's attention takes its softmax in fp32 (``w.float()``) even for fp64 scores: agreement to fp32 rounding
ATOL = 1e-5


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls of the rewritten attention and upsampling (so that a test sees the rewrite ran)."""
    n = {"tokens_sdpa_attention": 0, "trilinear_up2": 0}
    for name in n:
        fn = getattr(ndhwc_ops, name)

        def counted(*a, _fn=fn, _name=name, **kw):
            n[_name] += 1
            return _fn(*a, **kw)

        monkeypatch.setattr(ndhwc_ops, name, counted)
    return n


def _grads(module, x, g, params):
    """(output, d<out * g>/dx, d<out * g>/dparams)."""
    x = x.detach().clone().requires_grad_(True)
    y = module(x)
    grads = torch.autograd.grad((y * g).sum(), [x, *params])
    return y.detach(), grads[0], grads[1:]


def test_separable_upsample_equals_trilinear_interpolation(calls):
    torch.manual_seed(0)
    x = torch.randn(2, 8, 5, 6, 7, dtype=torch.float64)
    g = torch.randn(2, 8, 10, 12, 14, dtype=torch.float64)
    ref, gref, _ = _grads(lambda t: F.interpolate(t, scale_factor=2, mode="trilinear"), x, g, [])
    for inp in (x, x.contiguous(memory_format=CL)):
        y, gx, _ = _grads(ndhwc_ops.trilinear_up2, inp, g, [])
        assert y.shape == (2, 8, 10, 12, 14)
        assert (y - ref).abs().max() < TOL and (gx - gref).abs().max() < TOL
        assert y.is_contiguous(memory_format=CL) is (inp is not x)
    # bf16: computed in fp32, rounded once (as the CUDA kernel's fp32 accumulation)
    xb = x.to(torch.bfloat16)
    yb = ndhwc_ops.trilinear_up2(xb)
    assert yb.dtype == torch.bfloat16
    assert torch.equal(yb, F.interpolate(xb.float(), scale_factor=2, mode="trilinear").to(torch.bfloat16))
    # the module: the same convolution after either
    up = Upsample(8).double().to(memory_format=CL)
    sep = copy.deepcopy(up)
    sep.impl = "separable"
    params = list(up.parameters())
    y0, gx0, gp0 = _grads(up, x.contiguous(memory_format=CL), g, params)
    n = calls["trilinear_up2"]
    y1, gx1, gp1 = _grads(sep, x.contiguous(memory_format=CL), g, list(sep.parameters()))
    assert calls["trilinear_up2"] == n + 1
    assert (y1 - y0).abs().max() < TOL and (gx1 - gx0).abs().max() < TOL
    assert all((a - b).abs().max() < 1e-10 for a, b in zip(gp0, gp1))
    with pytest.raises(ValueError, match="'separable' is trilinear"):
        Upsample(8, mode="nearest", impl="separable")


def test_channels_last_upsample_equals_trilinear_and_never_transposes():
    """trilinear_up2_channels_last: F.interpolate's values and input gradient (fp64) from either input layout, a
    channels_last_3d result, bf16 rounded once; every 5-D tensor its forward makes keeps the channels innermost
    (stride 1 on C, the (B, D, H, W, C) view), where trilinear_up2's passes run channels-outermost."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Strides(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.channel_strides = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.dim() == 5 and out.shape[-1] == 8:  # (B, D, H, W, C=8) views
                self.channel_strides.append(out.stride(-1))
            elif isinstance(out, torch.Tensor) and out.dim() == 5 and out.shape[1] == 8:  # (B, C=8, D, H, W)
                self.channel_strides.append(out.stride(1))
            return out

    torch.manual_seed(0)
    x = torch.randn(2, 8, 5, 6, 7, dtype=torch.float64)
    g = torch.randn(2, 8, 10, 12, 14, dtype=torch.float64)
    ref, gref, _ = _grads(lambda t: F.interpolate(t, scale_factor=2, mode="trilinear"), x, g, [])
    for inp in (x, x.contiguous(memory_format=CL)):
        y, gx, _ = _grads(ndhwc_ops.trilinear_up2_channels_last, inp, g, [])
        assert (y - ref).abs().max() < TOL and (gx - gref).abs().max() < TOL
        assert y.is_contiguous(memory_format=CL)
    xb = x.to(torch.bfloat16).contiguous(memory_format=CL)
    assert torch.equal(ndhwc_ops.trilinear_up2_channels_last(xb), ndhwc_ops.trilinear_up2(xb))
    seen = {}
    for fn in (ndhwc_ops.trilinear_up2_channels_last, ndhwc_ops.trilinear_up2):
        with Strides() as mode:
            fn(x.contiguous(memory_format=CL))
        seen[fn.__name__] = set(mode.channel_strides)
    assert seen["trilinear_up2_channels_last"] == {1}
    assert seen["trilinear_up2"] != {1}  # its passes run channels-outermost (then one transpose)
    up = Upsample(8).double()  # the module: the same convolution after either
    cl = copy.deepcopy(up)
    cl.impl = "separable_channels_last"
    assert (cl(x.contiguous(memory_format=CL)) - up(x)).abs().max() < TOL
    with pytest.raises(ValueError, match="'separable_channels_last' is trilinear"):
        Upsample(8, mode="nearest", impl="separable_channels_last")


def test_channel_sum_group_norm_equals_group_norm():
    torch.manual_seed(0)
    gn = nn.GroupNorm(8, 64).double()
    nn.init.normal_(gn.weight)
    nn.init.normal_(gn.bias)
    cs = ndhwc_ops.ChannelSumGroupNorm.of(gn)
    assert cs.weight is gn.weight and cs.bias is gn.bias and cs.eps == gn.eps and cs.num_groups == 8
    x = (torch.randn(2, 64, 5, 6, 7, dtype=torch.float64) * 3 + 1).contiguous(memory_format=CL)
    g = torch.randn(2, 64, 5, 6, 7, dtype=torch.float64)
    ref, gref, gpref = _grads(gn, x, g, [gn.weight, gn.bias])
    y, gx, gp = _grads(cs, x, g, [cs.weight, cs.bias])
    assert (y - ref).abs().max() < TOL and (gx - gref).abs().max() < 1e-10
    assert all((a - b).abs().max() < 1e-10 for a, b in zip(gp, gpref))
    assert y.is_contiguous(memory_format=CL)  # (CUDA's native_group_norm returns NCDHW)
    # bf16 input: fp32 output, as group_norm under autocast
    assert cs.float()(x.to(torch.bfloat16)).dtype == torch.float32
    back = ndhwc_ops.plain_group_norm(cs)
    assert type(back) is nn.GroupNorm and back.weight is gn.weight


@pytest.mark.parametrize("heads", [1, 2])
def test_tokens_sdpa_attention_equals_spatial_attention(heads, calls):
    torch.manual_seed(0)
    a = SpatialAttention(64, heads, 8, checkpointed=False).double()
    for p in a.parameters():
        nn.init.normal_(p, std=0.2)
    t = copy.deepcopy(a)
    t.impl = "tokens_sdpa"
    x = torch.randn(2, 64, 3, 4, 5, dtype=torch.float64)
    g = torch.randn(2, 64, 3, 4, 5, dtype=torch.float64)
    ref, gref, gpref = _grads(a, x, g, list(a.parameters()))
    assert calls["tokens_sdpa_attention"] == 0
    for inp in (x, x.contiguous(memory_format=CL)):
        y, gx, gp = _grads(t, inp, g, list(t.parameters()))
        assert (y - ref).abs().max() < ATOL and (gx - gref).abs().max() < ATOL
        assert all((p - q).abs().max() < ATOL for p, q in zip(gp, gpref))
    assert t(x.contiguous(memory_format=CL)).is_contiguous(memory_format=CL)
    assert calls["tokens_sdpa_attention"] == 3
    # checkpointed or not, the same numbers
    t.checkpointed = True
    y2, gx2, _ = _grads(t, x, g, list(t.parameters()))
    assert (y2 - y).abs().max() < TOL and (gx2 - gx).abs().max() < TOL


def _net(**kw):
    torch.manual_seed(0)
    return MedDDPMUNet(3, 1, base_channels=8, norm_groups=4, attention_levels=(False,) * 3 + (True, False), **kw)


def test_network_options_keep_parameters_and_outputs(calls):
    """MedDDPMUNet's options: the defaults are Med-DDPM's modules; the rewrites keep the parameters (same tensors,
    same state dict), the outputs and the channels_last_3d layout, and switch back."""
    plain = _net()
    assert {type(m) for m in plain.modules() if isinstance(m, nn.GroupNorm)} == {nn.GroupNorm}
    assert all(m.impl == "conv1d_einsum" and m.checkpointed for m in plain.modules() if isinstance(m, SpatialAttention))
    assert all(m.impl == "interpolate" for m in plain.modules() if isinstance(m, Upsample))
    built = _net(attention="tokens_sdpa", upsample="separable", norm="channel_sums", checkpoint_attention=False)
    net = copy.deepcopy(plain)
    before = {n: p for n, p in net.named_parameters()}
    net.set_implementations(attention="tokens_sdpa", upsample="separable", norm="channel_sums")
    assert {n: p for n, p in net.named_parameters()} == before  # the same tensors
    assert list(net.state_dict()) == list(plain.state_dict()) == list(built.state_dict())
    assert sum(isinstance(m, ndhwc_ops.ChannelSumGroupNorm) for m in net.modules()) == sum(
        isinstance(m, nn.GroupNorm) for m in plain.modules()
    )
    x, t = torch.randn(1, 3, 16, 16, 16), torch.tensor([10])
    ref = plain(x, t)
    assert calls == {"tokens_sdpa_attention": 0, "trilinear_up2": 0}
    cl = net.to(memory_format=CL)(x.contiguous(memory_format=CL), t)
    assert (cl - ref).abs().max() < 1e-4 * ref.abs().max() and cl.is_contiguous(memory_format=CL)
    assert calls == {"tokens_sdpa_attention": 4, "trilinear_up2": 4}  # level 3 (1 down, 2 up) + middle; 4 ups
    assert torch.equal(built(x, t), net(x, t))
    net.set_implementations()
    assert {type(m) for m in net.modules() if isinstance(m, nn.GroupNorm)} == {nn.GroupNorm}
    assert torch.equal(net(x, t), plain(x, t))
    with pytest.raises(ValueError, match="norm: implementation 'batch_norm' is not one of"):
        net.set_implementations(norm="batch_norm")


def test_conv_grad_hook_makes_each_conv_gradient_channels_last_and_keeps_values():
    """conv_grad="channels_last_3d": every Conv3d's output gradient reaches its backward channels_last_3d (seen by a
    tensor hook on the output), the parameter gradients and the output are those of Med-DDPM's network (same
    state dict, no module added), and switching back removes the hooks."""
    plain = _net()
    net = copy.deepcopy(plain).set_implementations(conv_grad="channels_last_3d")
    assert list(net.state_dict()) == list(plain.state_dict())
    x, t = torch.randn(1, 3, 16, 16, 16), torch.tensor([10])

    def grads(model):
        seen = []

        def watch(module, inputs, out):
            out.register_hook(lambda g: seen.append(g.is_contiguous(memory_format=CL)))

        handles = [m.register_forward_hook(watch, prepend=True) for m in model.modules() if isinstance(m, nn.Conv3d)]
        model.zero_grad()
        (model(x, t) ** 2).sum().backward()
        for h in handles:
            h.remove()
        return seen, {n: p.grad.clone() for n, p in model.named_parameters()}

    seen_plain, g_plain = grads(plain)
    seen_cl, g_cl = grads(net)
    assert len(seen_cl) == sum(isinstance(m, nn.Conv3d) for m in net.modules()) and all(seen_cl)
    assert not all(seen_plain)  # NCDHW network: its gradients are not channels_last_3d
    for n, g in g_plain.items():
        assert torch.allclose(g_cl[n], g, rtol=1e-5, atol=1e-6), n
    net.set_implementations()
    assert not all(grads(net)[0])
    with pytest.raises(ValueError, match="conv_grad: implementation 'nhwc' is not one of"):
        net.set_implementations(conv_grad="nhwc")


# --------------------------------------------------------------------------- the configuration that runs them
NDHWC = "bf16_channels_last_3d_ndhwc_compile_cudagraphs"


def _tiny(tiny_config, network="med_ddpm", micro_batches=2):
    from accelbench.experiments.unet3d import job as exp

    u = tiny_config["unet3d_profile"]
    return exp.resolve_settings(
        "whole_head", u["presets"], "small", u["scales"], network=network, micro_batches=micro_batches
    )


def _case():
    image = torch.rand(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    mask = torch.zeros(1, 2, 16, 16, 16)
    mask[:, 0, 4:12, 4:12, 4:12] = 1
    return image, mask


def test_ndhwc_configuration_is_named_and_the_others_are_unchanged():
    from accelbench.experiments.unet3d.configs import NETWORK_DEFAULTS, VARIANTS

    assert NETWORK_DEFAULTS == {
        "attention": "conv1d_einsum",
        "upsample": "interpolate",
        "norm": "group_norm",
        "checkpoint_attention": True,
        "conv_grad": "as_computed",
        "skinny_conv": "as_is",
    }
    fused = "bf16_channels_last_3d_ndhwc_fused_gn_compile_cudagraphs"  # the same with norm "fused"
    padconv = "bf16_channels_last_3d_ndhwc_fused_gn_padconv_compile_cudagraphs"  # and the skinny convolutions padded
    no_opt = [n.replace("_compile_cudagraphs", "_compile_no_layout_opt_cudagraphs") for n in (fused, padconv)]
    fold = no_opt[1].replace("_padconv_", "_padconv_fold_")  # and the two micro-batches as one pass
    up_cl = no_opt[1].replace("_padconv_", "_padconv_upsample_cl_")  # the upsampling's passes channels innermost
    ours = {NDHWC, fused, padconv, *no_opt, fold, up_cl, up_cl.replace("_upsample_cl_", "_upsample_cl_fold_")}
    eager = "bf16_channels_last_3d_ndhwc_fused_gn"  # the fused configuration eager: the embedded default's ours
    ours |= {n + "_autotuned" for n in ours | {eager}} | {eager}
    assert all(v.network_options == NETWORK_DEFAULTS for n, v in VARIANTS.items() if n not in ours)
    e, f = VARIANTS[eager], VARIANTS[fused]
    assert e.network_options == f.network_options and not (e.compile or e.cuda_graphs or e.fused_adam)
    v = VARIANTS[NDHWC + "_autotuned"]
    assert v.cudnn_benchmark and v.channels_last_3d and v.autocast == "bf16" and v.cuda_graphs and v.fused_adam
    assert v.network_options == {
        "attention": "tokens_sdpa",
        "upsample": "separable",
        "norm": "channel_sums",
        "checkpoint_attention": False,
        "conv_grad": "channels_last_3d",
        "skinny_conv": "as_is",
    }
    assert v.attention in ndhwc_ops.ATTENTION_IMPLS and v.upsample in ndhwc_ops.UPSAMPLE_IMPLS
    assert v.norm in ndhwc_ops.NORM_IMPLS and v.conv_grad in ndhwc_ops.CONV_GRAD_LAYOUTS and v.rewrites_network


def test_ndhwc_configuration_runs_its_rewrites_and_records_them(tiny_config, systems, tmp_path, monkeypatch, calls):
    """The configuration through Study A's profile on the CPU (torch.compile the identity: no compiler here; fp32:
    bf16 convolutions are emulated, minutes, on this CPU): the rewrites run, the result records which implementation
    ran, and the quality check against the baseline holds."""
    from accelbench.experiments.unet3d import job as exp

    monkeypatch.setattr(exp.torch, "compile", lambda model, **kw: model)
    image, mask = _case()
    params = dict(
        warmup=1,
        repeat=1,
        profile_steps=1,
        quality_sample_steps=1,
        quality_rel_l2_max=0.05,
        seed=0,
    )
    variant = dataclasses.replace(exp.VARIANTS[NDHWC + "_autotuned"], autocast=None)
    job = exp.Settings(_tiny(tiny_config, micro_batches=1), variant, params)
    out = exp.profile(job, systems["cpu"], image, mask, tmp_path / "trace.json.gz")
    assert out["status"] == "ok", out["reason"]
    m = out["measurements"]
    rec = m["variant"]
    assert (rec["attention"], rec["upsample"], rec["norm"], rec["checkpoint_attention"]) == (
        "tokens_sdpa",
        "separable",
        "channel_sums",
        False,
    )
    assert rec["channels_last_3d"] and rec["fused_adam"] and rec["compile_mode"] == "reduce-overhead"
    assert m["quality"]["holds"] and m["quality"]["predicted_noise"]["rel_l2"] > 0
    assert calls["tokens_sdpa_attention"] > 0 and calls["trilinear_up2"] > 0


def test_ndhwc_configuration_is_unsupported_on_the_monai_stand_in(tiny_config, systems, tmp_path):
    from accelbench.experiments.unet3d import job as exp
    from accelbench.experiments.unet3d import network

    image, mask = _case()
    s = _tiny(tiny_config, network="monai")
    v = exp.VARIANTS[NDHWC]
    reason = exp.network_reason(v, s)
    assert reason.startswith("network monai: ") and "\n" not in reason
    assert exp.network_reason(v, _tiny(tiny_config)) is None and exp.network_reason(exp.VARIANTS["bf16"], s) is None
    params = dict(warmup=1, repeat=1, profile_steps=1, quality_sample_steps=1, quality_rel_l2_max=0.05, seed=0)
    out = exp.profile(exp.Settings(s, v, params), systems["cpu"], image, mask, tmp_path / "t.json.gz")
    assert out == {"status": "unsupported", "reason": reason, "measurements": {}}
    with pytest.raises(ValueError, match="Med-DDPM's network"):
        network.set_implementations(nn.Conv3d(1, 1, 1), v)
    assert isinstance(network.set_implementations(nn.Conv3d(1, 1, 1), exp.VARIANTS["bf16"]), nn.Conv3d)


def test_bare_loop_runs_the_same_rewrites(tiny_config, monkeypatch, calls):
    """The bare loop beside the product's step (unet3d/bare.py) builds the configuration's network: the rewrites run
    there too, with the channels_last_3d model."""
    from accelbench.experiments.unet3d import bare
    from accelbench.experiments.unet3d.configs import VARIANTS

    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)
    image, mask = _case()
    seen = []

    def one_step(step):
        step()
        seen.append(1)
        return [1.0]

    v = dataclasses.replace(VARIANTS[NDHWC], autocast=None)  # fp32: bf16 is emulated, slowly, on this CPU
    assert bare.bare_samples(_tiny(tiny_config), v, image, mask, 0, "cpu", one_step) == [1.0]
    assert seen == [1] and calls["tokens_sdpa_attention"] == 2 * 4 and calls["trilinear_up2"] == 2 * 4
