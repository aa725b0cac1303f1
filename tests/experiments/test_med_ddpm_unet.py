"""Med-DDPM's own U-Net (accelbench.models.med_ddpm_unet, issue 29): counts equal Med-DDPM's, its distinguishing
kernels are there (trilinear upsampling, Conv1d projections, checkpointed attention), its layout, and one training step
of 2 micro-batches runs on the CPU at the tiny size."""

import csv
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accelbench.devices import Device
from accelbench.experiments import unet3d_profile as exp
from accelbench.models.med_ddpm_unet import MedDDPMUNet, SpatialAttention, Upsample

REFERENCE = Path(__file__).resolve().parents[2] / "resources/reference/med_ddpm_network.csv"


def _reference() -> dict[str, dict]:
    with open(REFERENCE) as fh:
        return {r["setting"]: r for r in csv.DictReader(line for line in fh if not line.startswith("#"))}


def _paper(default_config, preset: str, **kw):
    u = default_config["unet3d_profile"]
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
    assert exp.resolve_settings("brats", u["presets"], "paper", u["scales"], network="monai").tensor_shape == \
        (1, 8, 192, 192, 144)


def test_default_config_runs_med_ddpms_network_and_step(default_config):
    u = default_config["unet3d_profile"]
    assert u["network"] == "med_ddpm" and u["micro_batches"] == 2


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
    s = exp.resolve_settings("whole_head", u["presets"], "small", u["scales"], network=u["network"],
                             micro_batches=2)  # Med-DDPM's step (the tiny config runs 1 to save CPU time)
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
        exp.resolve_settings("whole_head", u["presets"], "paper", u["scales"], network="unet2d")
    with pytest.raises(ValueError, match="unet3d_profile.micro_batches"):
        exp.resolve_settings("whole_head", u["presets"], "paper", u["scales"], network="monai", micro_batches=0)
