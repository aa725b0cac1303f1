"""Med-DDPM's own U-Net (accelbench.experiments.unet3d.med_ddpm_unet): counts equal Med-DDPM's, its distinguishing
kernels are there (trilinear upsampling, Conv1d projections, checkpointed attention), its layout, and one training step
of 2 micro-batches runs on the CPU at the tiny size."""

import csv
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accelbench.backends.device import Device
from accelbench.experiments.unet3d import job as exp
from accelbench.experiments.unet3d.configs import passes_per_step
from accelbench.experiments.unet3d.med_ddpm_unet import MedDDPMUNet, SpatialAttention, Upsample

REFERENCE = Path(__file__).resolve().parents[5] / "resources/reference/med_ddpm_network.csv"


def _reference() -> dict[str, dict]:
    with open(REFERENCE) as fh:
        return {r["setting"]: r for r in csv.DictReader(line for line in fh if not line.startswith("#"))}


def _paper(default_config, preset: str, **kw):
    u = default_config["unet3d_profile"]
    kw.setdefault("micro_batches", u["micro_batches"])
    return exp.resolve_settings(preset, u["presets"], "paper", u["scales"], network="med_ddpm", **kw)


@pytest.mark.parametrize("preset", ["whole_head", "brats"])
def test_parameters_and_forward_flops_equal_med_ddpm(default_config, preset):
    """Counted on the meta device (no memory, no arithmetic): the network built from the default config's preset has
    Med-DDPM's parameter count and forward FLOPs at batch 1, in Med-DDPM's tensor layout (counted on its own code)."""
    ref = _reference()[preset]
    s = _paper(default_config, preset)
    assert list(s.tensor_shape) == [int(v) for v in ref["input_shape"].split("x")]
    with torch.device("meta"):
        net = exp.build_network(s)
        x, t = torch.empty(s.tensor_shape), torch.zeros(1, dtype=torch.long)
    assert sum(p.numel() for p in net.parameters()) == int(ref["parameters"])
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        out = net(x, t)
    assert counter.get_total_flops() / 1e9 == pytest.approx(float(ref["forward_gflop"]), rel=1e-9)
    assert out.shape == (1, s.out_channels, *s.tensor_shape[2:])


def test_brats_layout_is_med_ddpms_and_monai_keeps_the_data_order(default_config):
    assert _paper(default_config, "brats").tensor_shape == (1, 8, 144, 192, 192)
    u = default_config["unet3d_profile"]
    brats = exp.resolve_settings(
        "brats", u["presets"], "paper", u["scales"], network="monai", micro_batches=u["micro_batches"]
    )
    assert brats.tensor_shape == (
        1,
        8,
        192,
        192,
        144,
    )


def test_default_config_runs_med_ddpms_network_and_step(default_config):
    """Med-DDPM's network everywhere; its step (2 micro-batches per Adam step) is the schema's default and every GPU
    example config's, while the CPU-sized embedded run (config/config.yaml) takes 1."""
    import yaml

    u = default_config["unet3d_profile"]
    assert u["network"] == "med_ddpm" and u["micro_batches"] == 1
    repo = Path(__file__).resolve().parents[5]
    schema = yaml.safe_load(Path(exp.__file__).with_name("unet3d_profile.config.schema.yaml").read_text())
    assert schema["properties"]["micro_batches"]["default"] == 2
    for f in sorted((repo / "config/examples").glob("gpu_*.yaml")):
        study_a = yaml.safe_load(f.read_text()).get("unet3d_profile")
        assert study_a is None or study_a.get("micro_batches") == 2, f.name


def test_distinguishing_layers_and_checkpointed_attention():
    """Trilinear upsampling, 1x1 Conv1d projections; the checkpointed attention's forward is recomputed in the
    backward pass (sabotage: without checkpointing the training step counts exactly that many FLOPs fewer)."""
    kw = dict(in_channels=3, out_channels=1, base_channels=8, norm_groups=4)
    with torch.device("meta"):
        net, plain = MedDDPMUNet(**kw), MedDDPMUNet(**kw, checkpoint_attention=False)
        x, t = torch.empty(1, 3, 16, 16, 16), torch.zeros(1, dtype=torch.long)
    ups = [m for m in net.modules() if isinstance(m, Upsample)]
    attn = [m for m in net.modules() if isinstance(m, SpatialAttention)]
    assert len(ups) == 4 and {m.mode for m in ups} == {"trilinear"}
    assert len(attn) == 4  # level 3: 1 encoder + 2 decoder blocks; the middle block
    assert all(isinstance(m.qkv, torch.nn.Conv1d) and isinstance(m.proj, torch.nn.Conv1d) for m in attn)
    assert not any(isinstance(m, torch.nn.Linear) for a in attn for m in a.modules())

    def step_flops(model) -> int:
        with FlopCounterMode(display=False) as c:
            model(x, t).abs().mean().backward()
        return c.get_total_flops()

    shapes = []
    hooks = [a.register_forward_pre_hook(lambda m, args: shapes.append((m, args[0].shape))) for a in attn]
    with FlopCounterMode(display=False) as c, torch.no_grad():
        net(x, t)
    fwd_all = c.get_total_flops()
    for h in hooks:
        h.remove()
    with FlopCounterMode(display=False) as c, torch.no_grad():
        for a, shape in shapes:  # the attention blocks alone, at the shapes they saw
            a(torch.empty(shape, device="meta"))
    attn_fwd = c.get_total_flops()
    assert 0 < attn_fwd < fwd_all
    assert step_flops(net) - step_flops(plain) == attn_fwd


def test_one_training_step_of_two_micro_batches_on_cpu(tiny_config):
    """The tiny setting (16^3, width 8): one optimizer step = 2 forward/backward passes and one Adam step; every
    parameter gets a gradient and moves; the loss is finite."""
    u = tiny_config["unet3d_profile"]
    s = exp.resolve_settings(
        "whole_head", u["presets"], "small", u["scales"], network=u["network"], micro_batches=2
    )  # Med-DDPM's step (the tiny config runs 1 to save CPU time)
    assert s.network == "med_ddpm" and s.micro_batches == 2
    torch.manual_seed(0)
    model = exp.build_network(s)
    assert isinstance(model, MedDDPMUNet)
    image = torch.rand(1, 1, 16, 16, 16) * 2 - 1
    mask = torch.zeros(1, 2, 16, 16, 16)
    mask[:, 0, 4:12, 4:12, 4:12] = 1
    w = exp.Workload(model, s, exp.VARIANTS["baseline"], Device("cpu"), image, mask, seed=0)
    calls, steps = [], []
    model.register_forward_hook(lambda *_: calls.append(1))
    w.opt.register_step_post_hook(lambda *_: steps.append(1))
    before = [p.detach().clone() for p in model.parameters()]
    with exp.math_mode(False):
        loss = w.train_step()
    assert len(calls) == 2 and len(steps) == 1 and torch.isfinite(loss)
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_unknown_network_is_one_clear_line(default_config):
    u = default_config["unet3d_profile"]
    with pytest.raises(ValueError, match="unet3d_profile.network"):
        exp.resolve_settings(
            "whole_head", u["presets"], "paper", u["scales"], network="unet2d", micro_batches=u["micro_batches"]
        )
    with pytest.raises(ValueError, match="unet3d_profile.micro_batches"):
        exp.resolve_settings("whole_head", u["presets"], "paper", u["scales"], network="monai", micro_batches=0)


def test_cuda_graph_modes_are_torchs():
    """Variant.cuda_graphs agrees with inductor's own mode table (``triton.cudagraphs``): reduce-overhead and
    max-autotune run CUDA graphs, max-autotune-no-cudagraphs does not."""
    from torch._inductor import list_mode_options

    for v in exp.VARIANTS.values():
        uses = bool(list_mode_options(v.compile_mode).get("triton.cudagraphs")) if v.compile else False
        assert v.cuda_graphs is uses, v.name
    assert exp.VARIANTS["bf16_compile_cudagraphs_autotuned"].cuda_graphs
    assert exp.VARIANTS["bf16_channels_last_3d_compile_max_autotune"].cuda_graphs
    assert not exp.VARIANTS["bf16_compile_max_autotune"].cuda_graphs and not exp.VARIANTS["bf16_compile"].cuda_graphs


def _volume_and_twin_networks(s):
    """A 16^3 volume in [-1, 1], its one-hot mask, and the network of ``s`` with a deep copy (the same weights)."""
    image = torch.rand(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    mask = torch.zeros(1, 2, 16, 16, 16)
    mask[:, 0, 4:12, 4:12, 4:12] = 1
    torch.manual_seed(0)
    model = exp.build_network(s)
    return image, mask, model, exp.copy.deepcopy(model)


@pytest.mark.parametrize(
    "mode, micro_batches, kept",
    [
        ("reduce-overhead", 2, True),
        ("max-autotune", 2, True),
        ("max-autotune-no-cudagraphs", 2, False),
        ("reduce-overhead", 1, False),
    ],
)
def test_cuda_graph_gradient_accumulation_keeps_grad_buffers(tiny_config, monkeypatch, mode, micro_batches, kept):
    """CUDA graphs with gradient accumulation (H200, torch 2.11: "accessing tensor output of CUDAGraphs that has been
    overwritten by a subsequent run" in the second micro-batch's backward): every .grad exists before the first
    micro-batch's backward, outside the compiled model, and stays the same tensor across micro-batches and steps
    (zeroed in place), so autograd accumulates into it and never adopts the compiled backward's output. Without CUDA
    graphs, or with one micro-batch, the step is unchanged (.grad set to None). The gradients and the updated weights
    equal the baseline's bit for bit. torch.compile is the identity here (no compiler on the CPU)."""
    monkeypatch.setattr(exp.torch, "compile", lambda model, **kw: model)
    u = tiny_config["unet3d_profile"]
    s = exp.resolve_settings(
        "whole_head", u["presets"], "small", u["scales"], network="med_ddpm", micro_batches=micro_batches
    )
    variant = exp.dataclasses.replace(exp.VARIANTS["baseline"], name="compiled", compile=True, compile_mode=mode)
    assert variant.cuda_graphs is (mode != "max-autotune-no-cudagraphs")
    image, mask, model, ref_model = _volume_and_twin_networks(s)
    w = exp.Workload(model, s, variant, Device("cpu"), image, mask, seed=0)
    ref = exp.Workload(ref_model, s, exp.VARIANTS["baseline"], Device("cpu"), image, mask, seed=0)
    params = list(model.parameters())
    first = [p.grad for p in params]
    seen = []  # at each micro-batch's forward: the .grad tensors (None where autograd has not made one)
    model.register_forward_pre_hook(lambda *_: seen.append([p.grad for p in params]))
    grads, ref_grads = [], []
    for wl, out in ((w, grads), (ref, ref_grads)):
        wl.opt.register_step_pre_hook(
            lambda opt, *_, out=out: out.append([p.grad.clone() for g in opt.param_groups for p in g["params"]])
        )
    with exp.math_mode(False):
        for _ in range(2):
            w.train_step()
            ref.train_step()
    assert w.stable_grads is kept and len(seen) == 2 * micro_batches
    if kept:
        assert all(g is not None and not g.any() for g in first)
        assert all(all(g is f for g, f in zip(at_forward, first)) for at_forward in seen)
        assert all(p.grad is f and not p.grad.any() for p, f in zip(params, first))  # zeroed in place after the step
    else:
        assert all(g is None for g in first) and all(g is None for g in seen[0]) and all(p.grad is None for p in params)
    assert all(torch.equal(a, b) for step, ref_step in zip(grads, ref_grads) for a, b in zip(step, ref_step))
    assert all(torch.equal(a, b) for a, b in zip(params, ref_model.parameters()))


def test_folded_micro_batches_give_the_accumulated_gradients(tiny_config, monkeypatch):
    """Variant.fold_micro_batches: one forward/backward of 2 volumes per optimizer step, no kept .grad buffers even
    with CUDA graphs; its gradients equal Med-DDPM's accumulation (loss / 2 per micro-batch) over the same timesteps
    and noise, each micro-batch passed alone (fp32 on the CPU: equal up to the sums' order). torch.compile is the
    identity here (no compiler on the CPU)."""
    monkeypatch.setattr(exp.torch, "compile", lambda model, **kw: model)
    u = tiny_config["unet3d_profile"]
    s = exp.resolve_settings("whole_head", u["presets"], "small", u["scales"], network="med_ddpm", micro_batches=2)
    folded = exp.VARIANTS["bf16_channels_last_3d_ndhwc_fused_gn_padconv_fold_compile_no_layout_opt_cudagraphs"]
    assert folded.fold_micro_batches and folded.cuda_graphs and passes_per_step(folded, s) == (1, 2)
    assert passes_per_step(exp.VARIANTS["baseline"], s) == (2, 1)
    variant = exp.dataclasses.replace(
        exp.VARIANTS["baseline"], name="folded", compile=True, compile_mode="reduce-overhead", fold_micro_batches=True
    )
    image, mask, model, ref_model = _volume_and_twin_networks(s)
    w = exp.Workload(model, s, variant, Device("cpu"), image, mask, seed=0)
    assert not w.stable_grads and w.train_image.shape[0] == 2 and w.image.shape[0] == 1  # sampling keeps batch 1
    drawn, calls, grads = [], [], []
    add_noise = w.scheduler.add_noise
    monkeypatch.setattr(
        w.scheduler, "add_noise", lambda **kw: drawn.append((kw["noise"], kw["timesteps"])) or add_noise(**kw)
    )
    model.register_forward_pre_hook(lambda m, args: calls.append(args[0].shape[0]))
    w.opt.register_step_pre_hook(lambda opt, *_: grads.append([p.grad.clone() for p in model.parameters()]))
    with exp.math_mode(False):
        w.train_step()
    assert calls == [2] and len(drawn) == 1
    noise, t = drawn[0]
    for i in range(2):  # the accumulation over the same draws, one volume a pass
        x0 = w.train_image[i : i + 1]
        x_t = w.scheduler.add_noise(original_samples=x0, noise=noise[i : i + 1], timesteps=t[i : i + 1])
        pred = ref_model(torch.cat([x_t, w.train_mask[i : i + 1]], dim=1), t[i : i + 1])
        (torch.nn.functional.l1_loss(pred, noise[i : i + 1]) / 2).backward()
    for g, p in zip(grads[0], ref_model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)
