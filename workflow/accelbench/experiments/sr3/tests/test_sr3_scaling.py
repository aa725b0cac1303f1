"""Study B SR3: patch tiling, strong-scaling split, scheduler round trip, DDP replicas, aggregation."""

from __future__ import annotations

import dataclasses
import socket

import numpy as np
import pytest
import torch

from accelbench.errors import ConfigError, DataError
from accelbench.experiments.sr3 import batches as sr3_batches
from accelbench.experiments.sr3 import configs as sr3_configs
from accelbench.experiments.sr3 import data as sky
from accelbench.experiments.sr3 import job as exp
from accelbench.experiments.sr3 import model as sr3
from accelbench.experiments.sr3 import plan as sr3_plan
from accelbench.experiments.sr3 import rank as sr3_rank
from accelbench.experiments.sr3.quality import image_metrics
from accelbench.experiments.sr3.settings import resolve_settings


def tiny_settings(**kw) -> sr3.SR3Settings:
    preset = dict(
        hr_size=32,
        factor=4,
        inner_channels=8,
        channel_mult=[1, 2, 2],
        num_res_blocks=1,
        attention_resolutions=[8],
        num_heads=1,
        dropout=0.2,
        norm_groups=4,
        timesteps=2000,
        beta_start=1e-6,
        beta_end=1e-2,
        lr=2e-5,
        batch_size=4,
    )
    preset.update(kw)
    return resolve_settings(preset, "small", {})


# --------------------------------------------------------------------------- data
def test_hubble_tiling_is_deterministic_and_heldout_never_overlaps_training():
    img = sky.hubble_gray()
    assert img.shape == (872, 1000) and 0 <= img.min() and img.max() <= 1
    a = sky.make_pairs([img], patch=64, factor=4, held_out_every=5, train_overlap=0.5)
    b = sky.make_pairs([sky.hubble_gray()], patch=64, factor=4, held_out_every=5, train_overlap=0.5)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert a["train_hr"].shape[1:] == (64, 64) and a["train_lr"].shape[1:] == (16, 16)
    assert len(a["heldout_hr"]) == 39 and len(a["train_hr"]) > 300
    train = {(int(y), int(x)) for _, y, x in a["train_origin"]}
    for _, hy, hx in a["heldout_origin"]:
        for y, x in train:  # no training window shares a pixel with a held-out tile
            assert y + 64 <= hy or hy + 64 <= y or x + 64 <= hx or hx + 64 <= x
    # the pairs are real 4x area downsamplings of the patches
    np.testing.assert_allclose(
        a["heldout_lr"][0], a["heldout_hr"][0].reshape(16, 4, 16, 4).mean(axis=(1, 3)), atol=1e-6
    )
    # and the patches are the image's pixels at their origins
    _, y, x = a["heldout_origin"][3]
    np.testing.assert_array_equal(a["heldout_hr"][3], img[y : y + 64, x : x + 64])


def test_paper_scale_tiling_has_both_splits_and_bad_inputs_fail(tmp_path):
    s = sky.prepare(tmp_path / "p.npz", patch=256, factor=4)
    assert s["heldout"] >= 1 and s["train"] >= 8
    assert sky.load(tmp_path / "p.npz")["train_hr"].shape[1:] == (256, 256)
    with pytest.raises(DataError, match="smaller than one"):
        sky.tile_origins((100, 100), 128, 5, 0.5)
    with pytest.raises(DataError, match="not a folder"):
        sky.prepare(tmp_path / "x.npz", 64, 4, source="folder", folder=str(tmp_path / "missing"))
    with pytest.raises(DataError, match="not found"):
        sky.load(tmp_path / "missing.npz")


def test_folder_source_reads_npy_and_png(tmp_path):
    from skimage.io import imsave

    rng = np.random.default_rng(0)
    np.save(tmp_path / "a.npy", rng.normal(size=(128, 128)) * 1e-3 + 5)  # arbitrary units (e.g. K_CMB)
    imsave(tmp_path / "b.png", (rng.uniform(size=(128, 128)) * 255).astype(np.uint8), check_contrast=False)
    s = sky.prepare(tmp_path / "f.npz", patch=32, factor=4, source="folder", folder=str(tmp_path), held_out_every=4)
    d = sky.load(tmp_path / "f.npz")
    assert s["sources"] == ["a.npy", "b.png"] and d["train_hr"].min() >= 0 and d["train_hr"].max() <= 1
    assert set(d["heldout_origin"][:, 0]) == {0, 1}


# --------------------------------------------------------------------------- settings and scaling
@pytest.mark.parametrize("devices", [1, 2, 4, 8, 16, 32, 64])
def test_strong_scaling_split_is_exact(devices):
    per = sr3_plan.split_iterations(40000, devices)
    assert (
        per * devices == 40000 and per == {1: 40000, 2: 20000, 4: 10000, 8: 5000, 16: 2500, 32: 1250, 64: 625}[devices]
    )


@pytest.mark.parametrize("devices", [3, 6, 7, 0])
def test_inexact_split_is_refused(devices):
    with pytest.raises(ConfigError, match="workload_iterations"):
        sr3_plan.split_iterations(40000, devices)


def test_paper_settings_map_sr3(default_config):
    u = default_config["sr3_scaling"]
    s = resolve_settings(u["preset"], "paper", u["scales"]).for_configuration("paper_text")
    assert s.channels == (128, 256, 512, 512, 1024, 1024) and s.lr_size == 64
    assert s.attention_levels == (False, False, False, False, True, False)  # 256 / 2**4 = 16 px
    small = resolve_settings(u["preset"], "small", u["scales"]).for_configuration("paper_text")
    assert small.hr_size // small.lr_size == 4 and small.attention_levels == s.attention_levels
    with pytest.raises(ConfigError, match="hr_size"):
        resolve_settings(u["preset"], "paper", {"paper": {"hr_size": 100}})


def test_unsupported_cases_have_reasons(systems):
    assert "no native bf16" in exp.unsupported_reason(systems["v100"], 1, "bf16")
    assert "allows 8 per job" in exp.unsupported_reason(systems["gaudi2"], 16, "bf16")  # 2 nodes, `devices: 8`
    assert exp.unsupported_reason(systems["gaudi1"], 64, "bf16") is None  # Study B: 8 nodes x 8 Gaudi1
    assert "2 nodes x 8; only 4" in exp.unsupported_reason(systems["gaudi1"], 16, "fp32", visible=4)
    assert "visible" in exp.unsupported_reason(systems["gaudi2"], 4, "fp32", visible=1)
    assert exp.unsupported_reason(systems["gaudi2"], 4, "bf16", visible=8) is None
    assert "CPU cores" in exp.unsupported_reason(systems["cpu"], 10_000, "fp32")


def test_unet_has_sr3_dropout_and_io():
    s = tiny_settings()
    model = sr3.build_unet(s)
    x, t = torch.randn(2, 2, 32, 32), torch.tensor([5, 1500])
    model.eval()
    with torch.no_grad():
        a, b = model(x, t), model(x, t)
    assert a.shape == (2, 1, 32, 32) and torch.equal(a, b) and a.abs().sum() > 0
    model.train()
    with torch.no_grad():
        c, d = model(x, t), model(x, t)
    assert not torch.equal(c, d)  # dropout 0.2 acts in training mode


# --------------------------------------------------------------------------- diffusion
def _oracle_chain(sched, x0, steps, ddpm: bool):
    g = torch.Generator().manual_seed(0)
    sched.set_timesteps(steps)
    t0 = int(sched.timesteps[0])
    # noise in float64 (add_noise casts the schedule to the samples' dtype), then a float32 chain like sampling
    x = sched.add_noise(
        original_samples=x0.double(), noise=torch.randn(x0.shape, generator=g).double(), timesteps=torch.tensor([t0])
    ).float()
    ac = sched.alphas_cumprod
    for ts in sched.timesteps:
        ti = int(ts)
        eps = (x - ac[ti].sqrt() * x0) / (1 - ac[ti]).sqrt()  # the oracle knows x0
        x, pred_x0 = sched.step(eps, ti, x, generator=g) if ddpm else sched.step(eps, ti, x)
    return x


def test_scheduler_round_trip_with_oracle_recovers_the_image():
    s = tiny_settings()
    x0 = torch.rand(1, 1, 16, 16) * 2 - 1
    sched = sr3.build_scheduler(s)
    assert torch.allclose(sched.betas[[0, -1]].double(), torch.tensor([1e-6, 1e-2], dtype=torch.double), rtol=1e-5)
    out = _oracle_chain(sched, x0, s.timesteps, ddpm=True)
    assert (out - x0).abs().max() < 1e-3
    assert (_oracle_chain(sr3.build_ddim(s), x0, 25, ddpm=False) - x0).abs().max() < 1e-3
    # a wrong oracle (zero noise) does not recover it: the test can fail
    x = torch.randn_like(x0)
    sched.set_timesteps(s.timesteps)
    for ts in sched.timesteps[:50]:
        x, _ = sched.step(torch.zeros_like(x), int(ts), x)
    assert (x - x0).abs().max() > 0.1


def test_quality_metrics_rank_bicubic_above_noise():
    truth = torch.rand(2, 1, 32, 32)
    good = image_metrics(truth + 0.01 * torch.randn_like(truth), truth)
    bad = image_metrics(torch.rand_like(truth), truth)
    assert good["psnr_db"] > 35 > bad["psnr_db"] and good["ssim"] > bad["ssim"]


def test_quality_check_samples_the_images_and_steps_it_names():
    """quality() with a QualityCheck: ``images`` held-out patches over ``sample_steps`` DDIM steps (fewer than the
    training steps), its seed making the samples repeat; the panel is the first patch at both sizes."""
    from accelbench.backends.device import Device
    from accelbench.experiments.sr3.quality import QualityCheck, quality

    s = tiny_settings()
    torch.manual_seed(0)
    model = sr3.build_unet(s)
    rng = np.random.default_rng(0)
    hr = rng.uniform(size=(4, 32, 32)).astype(np.float32)
    lr = sky.downsample(hr, 4)
    check = QualityCheck(images=3, sample_steps=2, precision="fp32", seed=7)
    metrics, panel = quality(model, s, hr, lr, check, Device("cpu"))
    assert (metrics["images"], metrics["sample_steps"], metrics["sampler"]) == (3, 2, "ddim")
    assert set(metrics["sr3"]) == set(metrics["bicubic"]) == {"psnr_db", "ssim"}
    assert panel["truth"].shape == panel["sr3"].shape == (32, 32) and panel["lr"].shape == (8, 8)
    assert np.array_equal(panel["truth"], hr[0])
    again, twin = quality(model, s, hr, lr, check, Device("cpu"))
    assert np.array_equal(twin["sr3"], panel["sr3"]) and again["sr3"] == metrics["sr3"]


# --------------------------------------------------------------------------- DDP
def test_ddp_options():
    assert sr3.ddp_kwargs(None) == {}
    assert sr3.ddp_kwargs({"bucket_cap_mb": 50, "static_graph": None}) == {"bucket_cap_mb": 50}
    with pytest.raises(ConfigError, match="sr3_scaling.ddp: unknown"):
        sr3.ddp_kwargs({"find_unused_parameters": True})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, queue, compiled: bool = False) -> None:
    import functools
    import os

    import torch.distributed as dist

    from accelbench.backends.device import Device

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    s = tiny_settings()
    rng = np.random.default_rng(0)
    hr = rng.uniform(size=(16, 32, 32)).astype(np.float32)
    ds = sr3.PatchSet(hr, sky.downsample(hr, 4), 32)
    ddp = {"gradient_as_bucket_view": True, "static_graph": True, "bucket_cap_mb": None}  # sr3_scaling.ddp
    conf = sr3_configs.get("fp32")
    if compiled:  # the ours configuration's compiled DDP step; Dynamo's eager backend traces (DDPOptimizer splits
        # the graph at DDP's buckets) without generating code, so this stays fast on a CPU
        torch.compile = functools.partial(torch.compile, backend="eager")
        ddp = {"bucket_cap_mb": 1}  # several buckets: DDPOptimizer splits the graph
        conf = dataclasses.replace(sr3_configs.get("bf16_compile"), precision="fp32")
    tr = sr3.Trainer(s, Device("cpu"), ds, conf, seed=0, rank=rank, world=world, ddp=ddp)
    if not compiled:
        assert tr.net.gradient_as_bucket_view and tr.net.static_graph and tr.net.bucket_bytes_cap == 25 * 2**20
    before = torch.nn.utils.parameters_to_vector(tr.model.parameters()).detach().clone()
    indices = sorted(tr.sampler)
    # the rule's FLOP count before its steps: through the DDP module's own parameters it left static_graph's
    # replicas out of step from the second step on (no error); on a copy they stay identical
    flops = sr3_rank.count_step_flops(tr)["per_device_step"]
    for _ in range(3):
        tr.train_step()
    after = torch.nn.utils.parameters_to_vector(tr.model.parameters()).detach()
    spread = sr3.replica_spread(tr.model)
    graphs = sr3_rank.compiled_graphs() if compiled else None
    queue.put((rank, spread, float((after - before).abs().max()), indices, flops, graphs))
    dist.destroy_process_group()


@pytest.mark.timeout(180)
def test_two_process_gloo_ddp_keeps_replicas_identical():
    """2 gloo ranks, DDP with static_graph and bucket views: the FLOP count and 3 steps leave identical replicas."""
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    torch.multiprocessing.start_processes(
        _ddp_worker, args=(2, _free_port(), queue), nprocs=2, join=True, start_method="spawn"
    )
    out = sorted(queue.get() for _ in range(2))
    assert [r for r, *_ in out] == [0, 1]
    assert all(spread == 0.0 for _, spread, *_ in out)  # identical after 3 steps on different batches and noise
    assert all(moved > 0 for _, _, moved, *_ in out)  # and the steps did change the weights
    assert out[0][4] == out[1][4] > 0  # both ranks counted the same FLOPs
    assert not set(out[0][3]) & set(out[1][3]) and len(out[0][3]) == 8  # disjoint halves of the 16 patches


@pytest.mark.timeout(300)
def test_two_process_gloo_compiled_ddp_step_compiles_and_keeps_replicas_identical():
    """Ours on 2 ranks: the compiled step wrapped in DDP (``torch.compile(DDP(model))``), the FLOP count
    first (on a copy of the plain module), then 3 steps: TorchDynamo compiled the network's forward (one graph, which
    DDPOptimizer splits at DDP's buckets; DDP's own forward wrapper stays eager: Dynamo breaks at its logger and at
    ``_inside_ddp_forward``, which it skips by design) and the replicas stay identical."""
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    torch.multiprocessing.start_processes(
        _ddp_worker, args=(2, _free_port(), queue, True), nprocs=2, join=True, start_method="spawn"
    )
    out = sorted(queue.get() for _ in range(2))
    assert all(spread == 0.0 for _, spread, *_ in out) and all(moved > 0 for _, _, moved, *_ in out)
    assert out[0][4] == out[1][4] > 0  # both ranks counted the same FLOPs
    for *_, graphs in out:  # counted through the compiled DDP module (the defect), Dynamo still reports 6 frames
        # from DDP's wrapper but no graph: unique_graphs 0
        assert graphs["frames_compiled"] >= 1 and graphs["unique_graphs"] >= 1, graphs


# --------------------------------------------------------------------------- aggregation
def test_published_efficiency_matches_study_b_claims():
    from accelbench.experiments.sr3.tables import published_efficiency, read_reference

    ref, source = read_reference("resources/reference/study_b_sr3_scaling.csv")
    assert "Voyager_Gaudi_Benchmarks" in source
    eff = published_efficiency(ref).set_index(["series", "devices"])["efficiency"]
    assert eff[("published Gaudi1", 64)] == pytest.approx(0.94, abs=0.005)  # "94% at 64 cards"
    assert eff[("published H100", 4)] == pytest.approx(0.77, abs=0.005)  # "77% at 4 cards"


# --------------------------------------------------------------------------- the job (sr3-train: harness + launcher)
def _spec(default_config, systems, devices):
    u = default_config["sr3_scaling"]
    run = {
        k: u[k]
        for k in ("workload_iterations", "max_iterations", "warmup", "quality_images", "quality_sample_steps", "seed")
    }
    return {
        "system": systems["cpu"].to_dict(),
        "devices": devices,
        "configuration": "faithful",
        "preset": u["preset"],
        "scales": u["scales"],
        "run": run,
    }


# what an ok result has measured since before the harness and the launcher, plus the launch and noise records
OK_KEYS = {
    "parameters",
    "clocks",
    "precision",
    "devices",
    "collective_backend",
    "per_device_batch",
    "global_batch",
    "iterations_per_device",
    "iterations_run",
    "complete",
    "iteration",
    "images_per_s",
    "images_per_s_per_device",
    "measured_wall_s",
    "first_iteration_s",
    "strong_scaling_total",
    "weak_scaling_total",
    "study_b_projection",
    "peak_mem_gib_per_rank",
    "peak_mem_gib",
    "peak_rss_gib_per_rank",
    "threads_per_rank",
    "placement_per_rank",
    "cudnn_benchmark",
    "ddp_options",
    "rank_median_ms",
    "rank_nodes",
    "replica_max_abs_diff",
    "loss",
    "quality",
    "train_patches",
    "heldout_patches",
    "launch",
    "noise",
    "flops",
    "train_throughput",
    "data_path",
    "math_flags",
    # the configuration and its series, the host syncs counted over the timed loop, fused Adam
    "configuration",
    "host_syncs_timed_per_rank",
    "host_syncs_method",
    "host_syncs_where",
    "fused_adam",
    "energy",  # board energy
    "compiled",  # what TorchDynamo compiled (None: not a compiled configuration)
}  # also: the FLOPs of a step (FlopCounterMode) and MFU


def _record(rank: int, samples_ms: list[float], **kw) -> dict:
    """A rank's record as :func:`exp.train_rank` returns it (rank 0 with the quality, loss and counts)."""
    r = {
        "rank": rank,
        "samples_ms": samples_ms,
        "median_ms": sorted(samples_ms)[len(samples_ms) // 2],
        "method": "synchronize+perf_counter",
        "warmup": 1,
        "wall_s": 1.0 + rank,
        "peak_mem_gib": None,
        "peak_rss_gib": 0.5,
        "threads": 1,
        "node": f"n{rank}",
        "placement": {"threads": 1},
        "cudnn_benchmark": False,
        "replica_max_abs_diff": 0.0,
        "collective_backend": "gloo",
        "flops": {"per_device_step": 2_000_000, "method": "torch FlopCounterMode"},
        **kw,
    }
    if rank == 0:
        r.update(
            parameters=123,
            loss={"first": 1.0, "last10_mean": 0.5, "rank": 0},
            quality={"psnr_db": 20.0},
            train_patches=16,
            heldout_patches=4,
        )
    return r


def test_merge_takes_the_slowest_rank_per_iteration(default_config):
    s = tiny_settings()
    records = [
        _record(0, [10.0, 30.0, 10.0], first_iteration_s=4.0),
        _record(1, [20.0, 10.0, 20.0], first_iteration_s=5.5),
    ]
    run = {"workload_iterations": 8, "max_iterations": 3, "warmup": 1}
    m = exp.merge(exp.Settings(s, 2, sr3_configs.get("fp32"), run, ddp={"bucket_cap_mb": 5}), records)
    assert m["iteration"]["samples"] == [20.0, 30.0, 20.0] and m["iteration"]["median"] == 20.0
    assert m["iteration"]["warmup"] == 1 and m["iteration"]["method"].endswith("max over 2 ranks")
    assert (m["iterations_per_device"], m["iterations_run"], m["complete"]) == (4, 3, False)
    assert m["first_iteration_s"] == 5.5  # the cold start: the slowest rank's first warm-up iteration
    assert m["measured_wall_s"] == 2.0 and m["strong_scaling_total"]["seconds"] == pytest.approx(2.0 + 0.020)
    assert m["images_per_s"] == pytest.approx(2 * s.batch_size / 0.020) and m["global_batch"] == 2 * s.batch_size
    assert m["rank_median_ms"] == [10.0, 20.0] and m["rank_nodes"] == ["n0", "n1"] and m["peak_mem_gib"] is None
    assert m["ddp_options"] == {"bucket_cap_mb": 5} and m["quality"] == {"psnr_db": 20.0} and m["parameters"] == 123
    assert set(m) == OK_KEYS - {
        "launch",
        "noise",
        "flops",
        "train_throughput",
    }  # data_path: from the records  # those two: run(), with the system


def _job(tmp_path, monkeypatch, default_config, systems, devices):
    """cwd, lock folder and spec file of a sr3-train call inside ``tmp_path``; returns the sr3-train argv."""
    import json

    monkeypatch.chdir(tmp_path)  # spec and rank folders (.snakemake/accelbench/...) under the test's folder
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path / "locks"))
    spec = tmp_path / f"spec{devices}.json"
    spec.write_text(json.dumps(_spec(default_config, systems, devices)))
    out = tmp_path / "results" / "cpu" / "sr3_scaling" / "faithful" / f"devices_{devices}" / "result.json"
    return ["sr3-train", "--spec", str(spec), "--data", "d.npz", "--out", str(out)], out


def _ranks_here(monkeypatch, calls: list):
    """Replace torchrun (multinode.run_tee) by running each rank of the launch command in this process, in turn,
    through :func:`accelbench.core.harness.rank_main` (placement stubbed: no affinity or parent-death signal here)."""
    from accelbench import cli
    from accelbench.cluster import multinode
    from accelbench.cluster import processes as launch
    from accelbench.core import harness

    monkeypatch.setattr(launch, "place_this_rank", lambda threads=None: {"threads": 1, "cpus": None})

    def fake_torchrun(cmd, env=None, **kw):
        calls.append((cmd, env))
        n = int(next(a for a in cmd if a.startswith("--nproc_per_node=")).split("=")[1])
        args = cli.build_parser().parse_args(cmd[cmd.index("accelbench") + 1 :])
        codes = []
        for r in range(n):
            monkeypatch.setenv("RANK", str(r))
            monkeypatch.setenv("LOCAL_RANK", str(r))
            monkeypatch.setenv("WORLD_SIZE", str(n))
            inputs = dict(item.split("=", 1) for item in args.input)
            codes.append(harness.rank_main(args.experiment, args.spec, args.out, args.rank_dir, args.threads, inputs))
        return max(codes), ""

    monkeypatch.setattr(multinode, "run_tee", fake_torchrun)


def test_unsupported_case_is_recorded_before_launching(tmp_path, default_config, systems, monkeypatch):
    import json

    from accelbench import cli

    argv, out = _job(tmp_path, monkeypatch, default_config, systems, 100_000)
    calls = []
    _ranks_here(monkeypatch, calls)
    assert cli.main(argv) == 0 and not calls
    r = json.loads(out.read_text())
    assert r["status"] == "unsupported" and "100000 devices requested" in r["reason"] and r["environment"]["git"]
    assert r["measurements"] == {"devices": 100_000, "precision": "fp32"} and r["config"]["settings"]["hr_size"]


def test_a_rank_out_of_memory_makes_an_oom_result(tmp_path, default_config, systems, monkeypatch):
    import json
    import os

    from accelbench import cli

    def rank(s, ctx):  # rank 1 runs out of device memory; rank 0 would have finished
        if os.environ["RANK"] == "1":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\n(details)")
        return _record(0, [1.0, 2.0])

    monkeypatch.setattr(exp, "run_rank", rank)
    calls = []
    _ranks_here(monkeypatch, calls)
    argv, out = _job(tmp_path, monkeypatch, default_config, systems, 2)
    assert cli.main(argv + ["--threads", "4"]) == 0
    r = json.loads(out.read_text())
    assert r["status"] == "oom" and r["reason"] == (
        "out of device memory: rank 1: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert r["measurements"]["devices"] == 2 and r["measurements"]["precision"] == "fp32"
    assert r["config"]["settings"]["hr_size"] and r["artefacts"] == {}
    [(cmd, env)] = calls
    assert "--nproc_per_node=2" in cmd and "--standalone" in cmd and cmd[cmd.index("accelbench") + 1] == "rank"
    assert ["--input", "data=d.npz"] == cmd[cmd.index("--input") : cmd.index("--input") + 2]
    assert env["OMP_NUM_THREADS"] == "1"  # a CPU "device" is one core (launch.rank_threads), whatever --threads says
    assert not list((tmp_path / ".snakemake/accelbench/ranks").iterdir())  # the rank files went with their folder


def test_ranks_are_merged_into_one_ok_result(tmp_path, default_config, systems, monkeypatch):
    import json
    import os

    from accelbench import cli

    def rank(s, ctx):
        r = int(os.environ["RANK"])
        if r == 0:
            with ctx.side_file("samples.npz", "samples") as tmp:
                exp.save_panel({"sr3": np.zeros((2, 2))}, tmp)
        return _record(r, [5.0, 4.0] if r else [3.0, 6.0], placement=ctx.placement)

    monkeypatch.setattr(exp, "run_rank", rank)
    _ranks_here(monkeypatch, [])
    argv, out = _job(tmp_path, monkeypatch, default_config, systems, 2)
    assert cli.main(argv) == 0
    r = json.loads(out.read_text())
    m = r["measurements"]
    assert r["status"] == "ok" and set(m) == OK_KEYS and r["artefacts"] == {"samples": "samples.npz"}
    assert m["iteration"]["samples"] == [5.0, 6.0] and m["rank_nodes"] == ["n0", "n1"]
    assert m["flops"]["iteration"] == 4_000_000 and m["train_throughput"]["tflop_per_s"] > 0  # 2 ranks' FLOPs
    assert m["launch"]["world_size"] == 2 and m["launch"]["launcher"] == "torchrun --standalone"
    assert m["placement_per_rank"] == [{"threads": 1, "cpus": None}] * 2
    assert set(r["config"]) >= {"devices", "precision", "preset", "run", "settings", "configuration", "series"}
    assert (r["config"]["configuration"], r["config"]["series"], r["config"]["precision"]) == (
        "faithful",
        "faithful",
        "fp32",
    )
    assert np.load(out.with_name("samples.npz"))["sr3"].shape == (2, 2)


def test_failed_ranks_fail_the_job(tmp_path, default_config, systems, monkeypatch):
    from accelbench import cli
    from accelbench.cluster import multinode

    monkeypatch.setattr(multinode, "run_tee", lambda cmd, env=None, **kw: (1, "RuntimeError: boom\n"))
    argv, out = _job(tmp_path, monkeypatch, default_config, systems, 2)
    assert cli.main(argv) == 2 and not out.exists()


def test_batches_come_from_pinned_memory_where_copies_overlap(default_config, monkeypatch):
    """The DataLoader pins host memory on a backend whose copies overlap the device's work (CUDA), so
    `.to(non_blocking=True)` never makes the host wait; elsewhere it does not pin (nothing to overlap)."""
    from accelbench import backends
    from accelbench.backends.device import Device

    s = tiny_settings()
    data = sr3.PatchSet(
        np.zeros((8, s.hr_size, s.hr_size), np.float32), np.zeros((8, s.lr_size, s.lr_size), np.float32), s.hr_size
    )
    cpu = sr3.Trainer(s, Device("cpu"), data, sr3_configs.get("fp32"), seed=0)
    assert cpu.pin_memory is False and cpu.loader.pin_memory is False
    monkeypatch.setattr(backends.get("cpu"), "non_blocking_copies", True)  # as the cuda backend says
    pinned = sr3.Trainer(s, Device("cpu"), data, sr3_configs.get("fp32"), seed=0)
    assert pinned.pin_memory is True and pinned.loader.pin_memory is True
    assert backends.get("cuda").non_blocking_copies and not backends.get("hpu").non_blocking_copies


def _trainer(conf_name: str, s=None, device=None) -> sr3.Trainer:
    """A tiny CPU Trainer in configuration ``conf_name``'s data path (workers, copy) and host syncs."""
    from accelbench.backends.device import Device

    s = s or tiny_settings()
    c = sr3_configs.get(conf_name)
    data = sr3.PatchSet(
        np.random.rand(16, s.hr_size, s.hr_size).astype(np.float32),
        np.random.rand(16, s.lr_size, s.lr_size).astype(np.float32),
        s.hr_size,
    )
    return sr3.Trainer(
        s,
        device or Device("cpu"),
        data,
        dataclasses.replace(
            sr3_configs.get("fp32"),
            precision=c.precision,
            host_syncs=c.host_syncs,
            loader_workers=c.loader_workers,
            blocking_copies=c.blocking_copies,
        ),
        seed=0,
    )


def test_faithful_batches_take_the_authors_data_path_capped_at_the_ranks_cores(monkeypatch):
    """The faithful series' DataLoader has the authors' 8 workers (config/sr_sr3_64_256_set2.json) capped at
    the cores this rank has (its threads, set by launch.place_this_rank, at most its CPU affinity), pins where the
    device pins, and the batch is copied with a blocking .to(device) (their set_device); every setting is recorded
    with its source."""
    import os

    from accelbench import backends

    faithful = sr3_configs.get("faithful")
    assert (faithful.loader_workers, faithful.blocking_copies, faithful.authors_data_path) == (8, True, True)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert sr3.rank_cores() == 1
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4096)  # more threads than CPUs: the affinity caps
    assert sr3.rank_cores() == len(os.sched_getaffinity(0))
    monkeypatch.undo()
    copies = []
    to_device = sr3.to_device
    monkeypatch.setattr(
        sr3, "to_device", lambda x, dev, fmt, blocking: copies.append(blocking) or to_device(x, dev, fmt, blocking)
    )
    monkeypatch.setattr(sr3_batches, "rank_cores", lambda: 2)  # this rank's share (batch_loader's lookup)
    tr = _trainer("faithful")
    assert tr.loader.num_workers == 2 and tr.loader.pin_memory is False and tr.loader.persistent_workers is True
    d = tr.data_path
    assert (d["loader_workers_requested"], d["loader_workers"], d["rank_cores"]) == (8, 2, 2)
    assert "8 workers requested, 2 core(s)" in d["capped"] and d["copy"] == "blocking"
    assert d["persistent_workers"] is True and "whole training set" in d["persistent_workers_why"]
    assert (d["pin_memory_requested"], d["pin_memory"]) == (True, False)  # the CPU does not pin
    assert "config/sr_sr3_64_256_set2.json" in d["source"] and "set_device" in d["source"]
    cond, target = tr.next_batch()
    assert copies == [True, True] and cond.shape == target.shape == (4, 1, 32, 32)
    tr.train_step()  # a step through the worker processes
    monkeypatch.setattr(sr3_batches, "rank_cores", lambda: 16)  # enough cores: the authors' 8, not capped
    monkeypatch.setattr(backends.get("cpu"), "non_blocking_copies", True)  # as the cuda backend says: pinned
    tr = _trainer("faithful")
    assert tr.loader.num_workers == 8 and tr.data_path["capped"] is None and tr.loader.pin_memory is True
    del tr


def test_ours_keeps_its_data_path():
    """Ours: batches made in the rank's process (no workers), copied with non_blocking=True; recorded as such."""
    for name in (
        "fp32",
        "bf16",
        "bf16_compile",
        "bf16_compile_channels_last",
        "bf16_compile_cudagraphs",
        "bf16_compile_channels_last_cudagraphs",
        "bf16_compile_layout_opt_cudagraphs",
        "bf16_compile_layout_opt_channel_sums_cudagraphs",
    ):
        c = sr3_configs.get(name)
        assert (c.loader_workers, c.blocking_copies, c.authors_data_path) == (None, False, False)
    tr = _trainer("bf16")
    assert tr.loader.num_workers == 0 and not tr.blocking_copies
    assert tr.data_path == {
        "loader_workers_requested": 0,
        "loader_workers": 0,
        "rank_cores": sr3.rank_cores(),
        "capped": None,
        "pin_memory_requested": False,
        "pin_memory": False,
        "persistent_workers": False,
        "persistent_workers_why": None,
        "copy": "non_blocking",
        "source": sr3_configs.OURS_DATA_SOURCE,
    }


def test_only_the_faithful_spec_carries_the_data_path():
    """The spec (rule sr3_train; its sha256 says whether a result is current) gains the authors' data path for the
    faithful series only, so its results made before are redone and no other configuration's are."""
    assert sr3_configs.spec_settings("faithful") == {
        "data_path": {"loader_workers": 8, "pin_memory": True, "copy": "blocking"}
    }
    assert all(sr3_configs.spec_settings(n) == {} for n in sr3_configs.CONFIGURATIONS if n != "faithful")


def test_mfu_counts_every_rank_against_the_peak_of_the_math_that_ran():
    """fp32 with cuDNN's TF32 on (PyTorch's default on CUDA) is judged against the TF32 peak: on one H200 the
    FP32 peak gave an MFU of 1.64 (found on the GPU); bf16 against bf16's; N ranks do N x one rank's FLOPs."""
    peaks = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}
    first = {"flops": {"per_device_step": 18.5e12, "method": "m"}, "math_flags": {"cudnn_tf32": True}}
    f, t = exp.job_mfu(first, "fp32", 2, 200.0, peaks)
    assert f["iteration"] == 37e12 and t["peak_of"] == "tf32" and t["mfu"] == pytest.approx(185 / (2 * 494.7))
    assert exp.job_mfu({**first, "math_flags": {"cudnn_tf32": False}}, "fp32", 1, 1000.0, peaks)[1]["peak_of"] == "fp32"
    assert exp.job_mfu(first, "bf16", 1, 100.0, peaks)[1]["mfu"] == pytest.approx(185 / 989.4)
    assert (
        exp.job_mfu({"flops": {"per_device_step": None, "method": "failed"}}, "bf16", 1, 1.0, peaks)[1]["mfu"] is None
    )


# --------------------------------------------------------------------------- the series and their settings
def _paper(default_config, attention: str):
    u = default_config["sr3_scaling"]
    return resolve_settings(u["preset"], "paper", u["scales"]).for_configuration(attention)


def _meta_forward(s, batch: int = 4) -> tuple[int, float]:
    """Parameters and forward GFLOP of the paper-width U-Net, on the meta device (shapes only: no memory, no math)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = sr3.build_unet(s)
        x, t = torch.zeros(batch, 2, s.hr_size, s.hr_size), torch.zeros(batch, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(x, t)
    return sum(p.numel() for p in model.parameters()), counter.get_total_flops() / 1e9


def test_faithful_attention_sits_where_the_authors_code_put_it(default_config):
    """The authors' unet.py counts attention levels from the JSON's image_size 128 (data: 256 px), so attn_res [16]
    lands on the 32-px level with 512 channels: forward FLOPs equal their network's (6,225 GFLOP at batch 4) and
    the parameters are within 2% of its 542.7 M (MONAI's blocks differ slightly; resources/reference README)."""
    s = _paper(default_config, "as_run")
    assert s.attention_levels == (False, False, False, True, False, False) and s.channels[3] == 512
    assert s.hr_size // 2**3 == 32
    params, gflop = _meta_forward(s)
    assert gflop == pytest.approx(6225, abs=1)
    assert params == pytest.approx(542.7e6, rel=0.02)
    text = _paper(default_config, "paper_text")  # the paper's text: the 16-px level
    assert text.attention_levels == (False, False, False, False, True, False)
    small = resolve_settings(default_config["sr3_scaling"]["preset"], "small", default_config["sr3_scaling"]["scales"])
    assert small.attention_levels == s.attention_levels  # the CPU size keeps the level


def test_configurations_record_what_each_series_runs():
    faithful = sr3_configs.get("faithful")
    assert (faithful.series, faithful.precision, faithful.attention) == ("faithful", "fp32", "as_run")
    assert faithful.cudnn_benchmark and faithful.host_syncs and not faithful.compile
    text = sr3_configs.get("fp32")
    assert (text.series, text.attention, text.cudnn_benchmark, text.host_syncs) == (
        "paper_text",
        "paper_text",
        False,
        False,
    )
    for name in ("bf16", "bf16_compile", "bf16_compile_channels_last"):
        c = sr3_configs.get(name)
        assert c.series == "ours" and c.attention == "as_run" and not c.host_syncs and c.precision == "bf16"
    assert sr3_configs.get("bf16_compile").compile and sr3_configs.get("bf16_compile").fused_adam
    both = sr3_configs.get("bf16_compile_channels_last_cudagraphs")  # NHWC and CUDA graphs together
    assert (both.series, both.channels_last, both.compile_mode, both.fused_adam) == (
        "ours",
        True,
        "reduce-overhead",
        True,
    )
    opt = sr3_configs.get("bf16_compile_layout_opt_cudagraphs")  # NCHW network, Inductor's layout optimization forced
    assert (opt.series, opt.channels_last, opt.layout_optimization, opt.compile_mode) == (
        "ours",
        False,
        True,
        "reduce-overhead",
    )
    assert opt.to_dict()["layout_optimization"] is True and not both.layout_optimization  # recorded in the result
    with pytest.raises(ConfigError, match="sr3_scaling.configurations: unknown configuration 'fp16'"):
        sr3_configs.get("fp16")
    assert sr3_configs.of_result({"config": {"precision": "bf16"}}).name == "bf16"  # results from before the series
    assert sr3_configs.environment("faithful", "hpu") == {"PT_HPU_LAZY_MODE": "1", "PT_HPU_MAX_COMPOUND_OP_SIZE": "2"}
    assert sr3_configs.environment("faithful", "cuda") == {} and sr3_configs.environment("bf16", "hpu") == {}


def test_layout_optimization_reaches_this_compile_call_only():
    """``force_layout_optimization`` goes to the configuration's own ``torch.compile`` call, beside the mode's options
    (``torch.compile`` takes a mode or options, not both); Inductor's process-wide config is left alone."""
    import torch._inductor.config as inductor

    assert sr3.compile_options("reduce-overhead") == {"mode": "reduce-overhead"}
    assert sr3.compile_options(None) == {"mode": None}
    forced = {"layout_optimization": True, "force_layout_optimization": True}
    assert sr3.compile_options("reduce-overhead", True) == {"options": {"triton.cudagraphs": True, **forced}}
    assert sr3.compile_options(None, True) == {"options": forced}
    assert inductor.force_layout_optimization is False


def test_flop_count_leaves_the_compiled_step_compiled(monkeypatch):
    """The FLOP count before the timed run must not leave ``torch.compile``'s frame uncompiled. Counted through the
    compiled module under FlopCounterMode, TorchDynamo ran the step eagerly for good: on the H200 every compiled SR3
    configuration of the rule ran eager (bf16_compile_cudagraphs: the rule's median 197.2 ms, the same Trainer in the
    overhead benchmark 77.7 ms). Dynamo's ``eager`` backend keeps this fast (it traces, it does not generate code)."""
    import functools

    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    s = tiny_settings()
    data = sr3.PatchSet(np.random.rand(16, 32, 32).astype(np.float32), np.random.rand(16, 8, 8).astype(np.float32), 32)
    from accelbench.backends.device import Device

    conf = dataclasses.replace(sr3_configs.get("bf16_compile"), precision="fp32")
    tr = sr3.Trainer(s, Device("cpu"), data, conf, seed=0)
    before = [p.detach().clone() for p in tr.model.parameters()]
    f = sr3_rank.count_step_flops(tr)
    assert f["per_device_step"] > 0 and "plain" in f["method"]
    assert all(torch.equal(a, b) for a, b in zip(before, tr.model.parameters()))  # counted, not trained
    assert all(p.grad is None for p in tr.model.parameters())
    assert sr3_rank.compiled_graphs()["unique_graphs"] == 0  # nothing compiled by the count
    tr.train_step()
    got = sr3_rank.compiled_graphs()
    assert got["frames_compiled"] >= 1 and got["unique_graphs"] >= 1, got  # the step compiled after the count
    torch._dynamo.reset()


def test_the_authors_64_card_run_has_620_iterations_per_card(default_config):
    authors = default_config["sr3_scaling"]["authors_iterations_per_device"]
    faithful, ours = sr3_configs.get("faithful"), sr3_configs.get("bf16")
    assert sr3_configs.study_b_iterations(faithful, 64, 40000, authors) == 620  # "n_iter": 62e1
    assert sr3_configs.study_b_iterations(ours, 64, 40000, authors) == 625
    assert sr3_configs.study_b_iterations(faithful, 8, 40000, authors) == 5000
    s = tiny_settings()
    records = [_record(r, [10.0, 10.0]) for r in range(2)]
    run = {"workload_iterations": 8, "max_iterations": 2, "warmup": 0, "authors_iterations_per_device": {"2": 7}}
    m = exp.merge(exp.Settings(s, 2, faithful, run), records)
    assert m["study_b_projection"]["iterations"] == 7 and "job file" in m["study_b_projection"]["method"]
    assert m["configuration"]["series"] == "faithful" and m["configuration"]["host_syncs"]
    assert (m["configuration"]["loader_workers"], m["configuration"]["blocking_copies"]) == (8, True)
    data_path = {"loader_workers_requested": 8, "loader_workers": 1, "copy": "blocking"}
    m = exp.merge(
        exp.Settings(s, 2, faithful, {"workload_iterations": 8, "max_iterations": 1, "warmup": 0}),
        [_record(0, [1.0], data_path=data_path), _record(1, [1.0], data_path=data_path)],
    )
    assert m["data_path"] == data_path  # rank 0's record (model.batch_loader)


def test_faithful_step_makes_the_authors_host_syncs_and_ours_none(monkeypatch):
    """The faithful step reads the loss (loss.item()) and, distributed, waits at a barrier every iteration; ours
    returns the loss as a device tensor and never waits (the timed loop adds no host synchronisation)."""
    from accelbench.backends.device import Device

    s = tiny_settings()
    data = sr3.PatchSet(
        np.zeros((8, s.hr_size, s.hr_size), np.float32), np.zeros((8, s.lr_size, s.lr_size), np.float32), s.hr_size
    )
    item = torch.Tensor.item
    reads = []
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append(self.numel()) or item(self))
    counts = {}
    for syncs in (True, False):  # the difference: the authors' loss read (Adam reads its step counts either way)
        tr = sr3.Trainer(s, Device("cpu"), data, dataclasses.replace(sr3_configs.get("fp32"), host_syncs=syncs), seed=0)
        reads.clear()
        tr.train_step()
        counts[syncs] = len(reads)
    assert counts[True] == counts[False] + 1
    tr = sr3.Trainer(s, Device("cpu"), data, dataclasses.replace(sr3_configs.get("bf16"), channels_last=True), seed=0)
    reads.clear()
    tr.train_step()
    assert len(reads) == counts[False]


def test_ours_loss_curve_is_checked_against_the_faithful_run():
    ok = sr3_configs.loss_agreement([1.0, 0.9, 0.8], [1.0, 0.92, 0.81])
    assert ok["within"] and ok["iterations"] == 3 and ok["tolerance"] == sr3_configs.LOSS_TOLERANCE
    off = sr3_configs.loss_agreement([1.0, 0.5], [1.0, 1.0, 1.0])
    assert off["within"] is False and off["iterations"] == 2 and off["relative_difference"] == pytest.approx(0.25)
    assert off["worst_iteration_difference"] == pytest.approx(0.5)
    assert ok["worst_iteration_difference"] == pytest.approx(0.02 / 0.92)
    assert sr3_configs.loss_agreement([], [1.0])["within"] is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the sync debug mode is CUDA's)")
def test_timed_loop_of_ours_makes_no_host_sync_on_cuda():
    """On a GPU: the host synchronisations inside the timed loop are counted (torch.cuda.set_sync_debug_mode):
    none for ours, at least one per iteration for the faithful series (its loss.item())."""
    from accelbench.backends.device import Device
    from accelbench.measure import phase

    s = tiny_settings()
    data = sr3.PatchSet(
        np.random.rand(16, s.hr_size, s.hr_size).astype(np.float32),
        np.random.rand(16, s.lr_size, s.lr_size).astype(np.float32),
        s.hr_size,
    )
    device = Device("cuda", 0)
    for conf, expect_syncs in (("bf16", False), ("faithful", True)):
        c = sr3_configs.get(conf)
        only_syncs = dataclasses.replace(sr3_configs.get("fp32"), precision=c.precision, host_syncs=c.host_syncs)
        tr = sr3.Trainer(s, device, data, only_syncs, seed=0)
        assert tr.loader.pin_memory
        got = phase.train_phase(tr.train_step, device, 2, 5, extra=(phase.HostSyncs(device),))
        syncs = got.values["host_syncs"]
        # not the measurement's own explicit torch.cuda.synchronize after the warm-up (seen on the H200: 1 per run)
        ours = sum(
            n
            for where, n in syncs["where"].items()
            if not any(m in where for m in ("measure/phase.py", "backends/", "torch/cuda/__init__.py"))
        )
        assert (ours >= 7) if expect_syncs else ours == 0, (conf, syncs)


def test_channel_sums_configuration_swaps_every_group_norm_in_the_trainer_and_the_bare_loop(monkeypatch):
    """``bf16_compile_layout_opt_channel_sums_cudagraphs``: the rule's Trainer and the bare loop both compute every
    GroupNorm of SR3's U-Net from per-channel sums (same parameter tensors and state dict as MONAI's network), the
    network's output equals the GroupNorm one's (fp32, 1e-5), the setting is recorded, and an unknown name is one
    line naming it."""
    import torch

    from accelbench.errors import ConfigError
    from accelbench.experiments.sr3 import bare as bench
    from accelbench.models.ndhwc_ops import ChannelSumGroupNorm

    conf = sr3_configs.get("bf16_compile_layout_opt_channel_sums_cudagraphs")
    assert conf.norm == "channel_sums" and conf.to_dict()["norm"] == "channel_sums" and conf.layout_optimization
    assert sr3_configs.get("bf16_compile_layout_opt_cudagraphs").norm == "group_norm"
    monkeypatch.setattr(torch, "compile", lambda net, **kw: net)  # no compiler on the CPU runner
    s = tiny_settings(dropout=0.0)
    plain = sr3.build_unet(s)
    torch.manual_seed(0)
    swapped = sr3.set_norm(sr3.build_unet(s), "channel_sums")
    swapped.load_state_dict(plain.state_dict())
    assert list(swapped.state_dict()) == list(plain.state_dict())
    n_gn = sum(type(m) is torch.nn.GroupNorm for m in plain.modules())
    assert n_gn > 0 and sum(isinstance(m, ChannelSumGroupNorm) for m in swapped.modules()) == n_gn
    assert not any(type(m) is torch.nn.GroupNorm for m in swapped.modules())
    x, t = torch.randn(2, 2, s.hr_size, s.hr_size), torch.tensor([3, 7])
    ref = plain(x, t)
    assert (swapped(x, t) - ref).abs().max() <= 1e-5 * ref.abs().max()
    tr = sr3.Trainer(
        s,
        __import__("accelbench.backends.device", fromlist=["Device"]).Device("cpu"),
        sr3.PatchSet(np.random.rand(8, 32, 32).astype(np.float32), np.random.rand(8, 8, 8).astype(np.float32), 32),
        dataclasses.replace(conf, precision="fp32"),
        seed=0,
    )
    assert sum(isinstance(m, ChannelSumGroupNorm) for m in tr.model.modules()) == n_gn
    ds = sr3.PatchSet(np.random.rand(8, 32, 32).astype(np.float32), np.random.rand(8, 8, 8).astype(np.float32), 32)
    _, model = bench.sr3_bare(s, ds, bench.BareRank(torch.device("cpu")), "fp32", 0, conf)
    assert sum(isinstance(m, ChannelSumGroupNorm) for m in model.modules()) == n_gn
    with pytest.raises(ConfigError, match="sr3 norm: 'layer_norm' is not one of group_norm, channel_sums"):
        sr3.set_norm(sr3.build_unet(s), "layer_norm")
