"""Study B (arXiv 2607.05400): SR3 super-resolution training time and its strong scaling over devices.

Workload: SR3 (Saharia et al., arXiv 2104.07636) as Study B ran it (javierhndev/Super-Resolution-SR3):
a conditional DDPM that super-resolves 64 -> 256 px grayscale sky images. The low-resolution image is
bicubic-upsampled to 256 px and concatenated with the noisy image (2 input channels); the U-Net predicts
the noise (1 output channel). Linear beta schedule, 2000 steps, beta 1e-6 .. 1e-2; L1 loss on epsilon;
Adam lr 2e-5; per-device batch 4; FP32 as published, bf16 autocast as ours.

Mapping of SR3's settings onto MONAI's ``DiffusionModelUNet(spatial_dims=2)`` and ``DDPMScheduler``:

=================================  ====================================  =================================
SR3 (Study B)                      MONAI / here                          value (paper scale)
=================================  ====================================  =================================
inner_channel=128,                 channels = inner * mult               (128, 256, 512, 512, 1024, 1024)
channel_multiplier=[1,2,4,4,8,8]
res_blocks=3                       num_res_blocks (per level)            (3, 3, 3, 3, 3, 3)
attn_res=[16]                      attention_levels: level l has         level 4 (256/2**4 = 16)
                                   attention iff hr_size / 2**l is
                                   listed (middle block: always)
1 attention head                   num_head_channels = channels/level    one head per attention block
GroupNorm(32) + Swish              norm_num_groups=32, SiLU              same
dropout=0.2 (before the 2nd conv   forward pre-hook on each resnet       p = 0.2, train mode only
of every resnet block)             block's conv2 (MONAI has none)
in 2 (condition + noisy) / out 1   in_channels / out_channels            2 / 1
linear schedule 2000, 1e-6..1e-2   DDPMScheduler(schedule=linear_beta)   same betas
=================================  ====================================  =================================

What differs from SR3's code: SR3 conditions the U-Net on a continuous noise level (sqrt(alpha_bar)
drawn uniformly between two neighbouring steps), MONAI on the discrete timestep (sinusoidal embedding);
SR3's loss is an L1 *sum*, here the L1 mean (Adam is nearly scale-invariant); MONAI upsamples with
nearest neighbour + conv (SR3 the same) and adds an output projection to attention blocks; no EMA.
Sampling for the quality check uses SR3's full ancestral DDPM chain when ``quality_sample_steps``
equals the training steps, otherwise MONAI's ``DDIMScheduler`` (eta = 0) with that many strided steps
(MONAI's DDPM step is not defined for strided chains): a short chain, labelled in the result.

Parallelism: DDP, one process per device, launched with torchrun through :mod:`accelbench.core.launcher` (Study B
used mpirun): NCCL on CUDA, gloo on CPU, HCCL on Gaudi (lazy mode, ``mark_step`` after backward and after the
optimizer step). A ``DistributedSampler`` gives each rank its share of the patches. Strong scaling (Study B)
keeps iterations x devices constant (40,000 at paper scale) at a per-device batch of 4; weak scaling (ours)
keeps the iterations per device constant. Since the per-device batch is fixed in both, one measured iteration
time per device count gives both: the totals differ only in the iteration counts. On the ``cpu`` backend a
"device" is one gloo process with one intra-op thread (one core: the thread policy of
:func:`accelbench.cluster.processes.rank_threads`), so that adding devices adds compute as on GPUs, and the device
count is limited by the usable cores. (Splitting a fixed number of cores over more ranks instead would measure
OpenMP's scaling, and an oversubscribed OpenMP team slows down many-fold on a shared host.) On a host shared
with other jobs, CPU times are noisy.

Modules: the job here (:class:`Settings`, :func:`run`, :func:`run_rank`, the ranks' records merged by :func:`merge`,
:func:`estimate_s`); its plan before any rank starts in :mod:`.plan`; one rank's run in :mod:`.rank`; the network,
data and Trainer in :mod:`.model`; the settings in :mod:`.settings`; the quality check in :mod:`.quality`; the
configurations in :mod:`.configs`; the bare reference loop the Trainer is checked against in :mod:`.bare`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from accelbench import backends
from accelbench.core import precisions
from accelbench.core.outcome import Outcome
from accelbench.experiments.sr3 import configs as sr3_configs
from accelbench.experiments.sr3.configs import STUDY_B_WORKLOAD, Configuration
from accelbench.experiments.sr3.model import ddp_kwargs
from accelbench.experiments.sr3.plan import iteration_plan, unsupported_reason
from accelbench.experiments.sr3.rank import save_panel, train_rank
from accelbench.experiments.sr3.settings import SR3Settings, resolve_settings
from accelbench.measure import clocks, energy, flops
from accelbench.measure import timing as measure

EXPERIMENT = "sr3_scaling"


def merge(s: Settings, records: list[dict]) -> dict:
    """The job's measurements from every rank's record (:func:`train_rank`; rank order, rank 0 first), for the job
    ``s`` (its SR3 settings, device count, configuration, run parameters ``workload_iterations``, ``max_iterations``,
    ``warmup`` and ``authors_iterations_per_device``, and DDP options).

    The slowest rank sets the pace of a synchronous DDP step: the iteration time is the per-iteration maximum over
    ranks (:func:`accelbench.measure.timing.merge_ranks`). Times in ms (iterations) or s (totals), memory in GiB,
    throughput in images/s.
    """
    settings, devices, conf, run_params = s.sr3, s.devices, s.conf, s.params
    workload_iterations = run_params["workload_iterations"]
    first, precision = records[0], conf.precision
    iters, run_iters, warm = iteration_plan(
        devices, workload_iterations, run_params["max_iterations"], run_params["warmup"]
    )
    study_b_iters = sr3_configs.study_b_iterations(
        conf, devices, STUDY_B_WORKLOAD, run_params.get("authors_iterations_per_device")
    )
    it = measure.merge_ranks([r["samples_ms"] for r in records], warm, first["method"])
    wall_max = max(r["wall_s"] for r in records)
    it_s = it.median / 1e3
    complete = run_iters == iters
    images_per_iter = devices * settings.batch_size
    peaks = [r["peak_mem_gib"] for r in records]
    return {
        "parameters": first["parameters"],
        "precision": precision,
        "devices": devices,
        "configuration": conf.to_dict(),
        "host_syncs_timed_per_rank": [r.get("host_syncs_timed") for r in records],
        "host_syncs_method": first.get("host_syncs_method"),
        "host_syncs_where": first.get("host_syncs_where"),
        "fused_adam": first.get("fused_adam"),
        "compiled": first.get("compiled"),  # what TorchDynamo compiled (compiled_graphs); None: not compiled
        "collective_backend": first["collective_backend"],
        "per_device_batch": settings.batch_size,
        "global_batch": images_per_iter,
        "iterations_per_device": iters,
        "iterations_run": run_iters,
        "complete": complete,
        "iteration": it.to_dict(),
        "images_per_s": images_per_iter / it_s,
        "images_per_s_per_device": settings.batch_size / it_s,
        "measured_wall_s": wall_max,
        # the first warm-up iteration, slowest rank (s): torch.compile, autotuning and CUDA-graph recording on the
        # node's compile cache as found (cold on a fresh node); None without warm-up
        "first_iteration_s": max((r.get("first_iteration_s") for r in records), default=None, key=lambda v: v or 0),
        "strong_scaling_total": {
            "label": "measured" if complete else "projection",
            "iterations": iters,
            "workload_iterations": workload_iterations,
            "seconds": wall_max if complete else wall_max + it_s * (iters - run_iters),
            "method": (
                "wall time of all iterations (incl. warm-up)"
                if complete
                else f"measured wall time of {run_iters} iterations + median iteration x {iters - run_iters} more"
            ),
        },
        "weak_scaling_total": {
            "label": "projection",
            "iterations": workload_iterations,
            "seconds": it_s * workload_iterations,
            "method": f"median iteration x {workload_iterations} iterations per device (constant per-device work)",
        },
        "study_b_projection": {
            "label": "projection",
            "workload_iterations": STUDY_B_WORKLOAD,
            "iterations": study_b_iters,
            "minutes": it_s * study_b_iters / 60,
            "scale": settings.scale,
            "method": f"median iteration x {study_b_iters} (Study B: "
            + ("the authors' job file's count" if study_b_iters != STUDY_B_WORKLOAD // devices else "40,000")
            + f" / {devices} devices) at {settings.scale} scale",
        },
        "peak_mem_gib_per_rank": peaks,
        "peak_mem_gib": max(peaks) if all(p is not None for p in peaks) else None,
        "peak_rss_gib_per_rank": [r["peak_rss_gib"] for r in records],
        "threads_per_rank": [r["threads"] for r in records],
        "placement_per_rank": [r["placement"] for r in records],
        "cudnn_benchmark": first["cudnn_benchmark"],
        "ddp_options": ddp_kwargs(s.ddp) if devices > 1 else None,  # sr3_scaling.ddp (empty: DDP's defaults)
        "rank_median_ms": [r["median_ms"] for r in records],
        "data_path": first.get("data_path"),  # how batches reach the device (model.batch_loader)
        "math_flags": first.get("math_flags"),
        "rank_nodes": [r["node"] for r in records],  # Slurm node name (host name outside Slurm) of each rank
        "replica_max_abs_diff": first["replica_max_abs_diff"],
        "loss": first["loss"],
        "quality": first["quality"],
        "train_patches": first["train_patches"],
        "heldout_patches": first["heldout_patches"],
        # board energy of the timed iterations, summed over the job's devices (accelbench.measure.energy)
        # the SM clock, temperature and clock-event reasons of the timed iterations (accelbench.measure.clocks)
        "clocks": clocks.report({"iteration": clocks.merge_ranks([r.get("clocks") for r in records])}, "iteration"),
        "energy": energy.report(
            {"iteration": energy.merge_ranks([r.get("energy") for r in records])},
            "iteration",
            {
                "iteration": ("iteration", 1, "J/iteration", 1, "measured"),
                "image": ("iteration", images_per_iter, "J/image", 1, "measured"),
                "study_b_workload": (
                    "iteration",
                    1,
                    "kJ/Study B workload",
                    STUDY_B_WORKLOAD // devices / 1e3,
                    "projection",
                ),
            },
            {"images_per_s_per_w": (images_per_iter / it_s, "iteration", "images/s/W")},
            step_ms=it.median,
        ),
    }


# --------------------------------------------------------------------------- the job (accelbench.core.harness)
@dataclass(frozen=True)
class Settings:
    """One sr3_scaling job (one ``<configuration>/devices_<devices>`` result): the SR3 settings at the system's scale
    (:class:`SR3Settings`, with the configuration's attention placement), the device count and configuration
    (:mod:`.configs`), the run parameters (``workload_iterations``,
    ``max_iterations``, ``warmup``, ``quality_images``, ``quality_sample_steps``, ``seed``: config ``sr3_scaling``)
    and the DDP options (``sr3_scaling.ddp``; None: DDP's defaults)."""

    sr3: SR3Settings
    devices: int
    conf: Configuration
    params: dict
    ddp: dict | None = None

    @property
    def precision(self) -> str:
        return self.conf.precision

    @classmethod
    def from_spec(cls, spec: dict, system) -> Settings:
        """From the rule's spec: ``{devices, configuration, preset, scales, run, ddp?}`` (``configuration``: a name of
        :data:`.configs.CONFIGURATIONS`; its attention placement is applied to the resolved settings)."""
        conf = sr3_configs.get(spec["configuration"])
        sr3 = resolve_settings(spec["preset"], system.scale, spec.get("scales", {})).for_configuration(conf.attention)
        return cls(sr3, int(spec["devices"]), conf, dict(spec["run"]), spec.get("ddp"))


def prepare_environment(spec: dict, system) -> None:
    """Before the device runtime loads: the configuration's environment (:func:`.configs.environment`: the
    authors' Gaudi variables for the faithful series on ``hpu``); a variable the user set is kept."""
    for key, value in sr3_configs.environment(spec["configuration"], system.backend).items():
        os.environ.setdefault(key, value)


def job_mfu(first: dict, precision: str, devices: int, iteration_ms: float, peak_tflops: dict) -> tuple[dict, dict]:
    """FLOPs per iteration and MFU of a job: every rank runs the same step, so the job does ``devices`` x one rank's
    FLOPs (``first["flops"]``) per iteration, against ``devices`` x the peak of the math the convolutions (SR3's
    FLOPs) ran in: TF32 for ``fp32`` where cuDNN allows it (``first["math_flags"]``; PyTorch's default, kept by
    Study B's code), else the precision's. Returns ``(flops, train_throughput)``."""
    step, math = first["flops"], first.get("math_flags") or {}
    peak_key = "tf32" if precision == "fp32" and math.get("cudnn_tf32") else precision
    per_device, peak = step["per_device_step"], peak_tflops.get(peak_key)
    total = per_device * devices if per_device else None
    return (
        {**step, "iteration": total},
        {**flops.throughput_and_mfu(total, iteration_ms, peak * devices if peak else None), "peak_of": peak_key},
    )


# cost model of a job (accelbench.core.estimate), fitted to the embedded default's jobs on the reference machine:
# each rank trains on one core, so a job's wall time follows the iterations per rank
COST = {"startup_s": 9.0, "ranks_s": 6.0, "iteration_s": 0.3, "sample_step_s": 0.02, "reference_work": 64**2 * 16**2}


def estimate_s(spec: dict) -> float:
    """Wall seconds of the job on the reference machine: start-up, torchrun's start of the ranks (more than one),
    the iterations one rank runs and the quality sample's reverse steps, each x the work per image (pixels x
    width^2, relative to the default's); start-up alone where it will only write ``unsupported``."""
    from accelbench.core.estimate import STARTUP_S
    from accelbench.core.harness import system_from

    system = system_from(spec)
    s = Settings.from_spec(spec, system)
    if unsupported_reason(system, s.devices, s.precision) or precisions.emulated_reason(
        system, s.precision, precisions.run_emulated(spec)
    ):
        return STARTUP_S
    r = s.params
    run_iters = iteration_plan(s.devices, r["workload_iterations"], r["max_iterations"], r["warmup"])[1]
    work = s.sr3.hr_size**2 * s.sr3.inner_channels**2 / COST["reference_work"]
    return (
        COST["startup_s"]
        + (COST["ranks_s"] if s.devices > 1 else 0.0)
        + work
        * (run_iters * COST["iteration_s"] + r["quality_images"] * r["quality_sample_steps"] * COST["sample_step_s"])
    )


def _case(s: Settings, ctx) -> tuple[dict, dict]:
    """``(measurements, config)`` that every result of the job carries, ``unsupported`` ones included."""
    config = {
        "settings": s.sr3.to_dict(),
        "configuration": s.conf.name,
        "series": s.conf.series,
        "precision": s.precision,
        "environment": sr3_configs.environment(s.conf.name, ctx.system.backend),
    }
    return {"devices": s.devices, "precision": s.precision}, config


def unsupported_outcome(s: Settings, ctx) -> Outcome | None:
    """``unsupported`` known without measuring (written without the device lock): the configuration's precision is
    one this host only emulates, slowly (bf16 on a CPU without AVX512-BF16/AMX, unless the config's
    ``run_emulated_precisions`` lists it: :func:`accelbench.core.precisions.emulated_reason`, a short probe)."""
    reason = precisions.emulated_reason(ctx.system, s.precision, precisions.run_emulated(ctx.spec))
    return None if reason is None else Outcome.unsupported(reason, *_case(s, ctx))


def run(s: Settings, ctx) -> Outcome:
    """One strong-scaling point: ``unsupported`` where the system cannot run it (:func:`unsupported_reason`, against
    the devices visible on this node), else ``s.devices`` DDP ranks (:func:`run_rank`, launched through
    ``ctx.run_ranks``) merged into one result (:func:`merge`); ``oom`` when a rank ran out of device memory. The
    result's ``config.settings`` holds the resolved SR3 settings; ``samples.npz`` (rank 0's sample panel) goes
    beside it."""
    from accelbench.core.systems import probe_devices

    case, config = _case(s, ctx)
    visible = probe_devices()["count"] if backends.get(ctx.system.backend).accelerator else None
    reason = unsupported_reason(ctx.system, s.devices, s.precision, visible)
    if reason:
        return Outcome.unsupported(reason, case, config)
    ranks = ctx.run_ranks(s, s.devices, "sr3_scaling.devices")
    if isinstance(ranks, Outcome):  # oom, or a multi-node plan this job cannot start
        ranks.measurements = {**case, **ranks.measurements}
        ranks.config = {**config, **ranks.config}
        return ranks
    m = merge(s, ranks.records)
    m["launch"] = ranks.launch
    m["flops"], m["train_throughput"] = job_mfu(
        ranks.records[0], s.precision, s.devices, m["iteration"]["median"], ctx.system.peak_tflops
    )
    return Outcome("ok", m, config=config)


def run_rank(s: Settings, ctx) -> dict:
    """One DDP rank (in each process ``ctx.run_ranks`` started): :func:`train_rank` on the patch set
    ``ctx.inputs["data"]``; rank 0 writes the sample panel through ``ctx.side_file`` (``samples.npz``). Returns the
    rank's record."""
    from accelbench.experiments.sr3 import data as sky

    record, panel = train_rank(s, ctx.system, sky.load(ctx.inputs["data"]), placement=ctx.placement)
    if panel is not None:
        with ctx.side_file("samples.npz", "samples") as tmp:  # numpy keeps the .npz suffix of ".partial.samples.npz"
            save_panel(panel, tmp)
    return record
