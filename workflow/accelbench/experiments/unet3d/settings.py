"""A unet3d_profile job before it measures (torch-free: the harness and the run-time estimate read it without the
device): its :class:`Settings` from the rule's spec, why a configuration cannot run on a system
(:func:`unsupported_reason`; :func:`unsupported_outcome`: known without measuring; the harness's early verdict is
:func:`accelbench.experiments.unet3d.verdicts.known_unsupported`) and the
job's wall time on the reference machine (:func:`estimate_s`). The job itself
(:func:`accelbench.experiments.unet3d.job.run`) re-exports them."""

from __future__ import annotations

from dataclasses import dataclass

from accelbench.core import precisions
from accelbench.core.outcome import Outcome
from accelbench.experiments.unet3d.configs import NOT_ON_MONAI, VARIANTS, ModelSettings, Variant, settings_of


@dataclass(frozen=True)
class Settings:
    """One unet3d_profile job: the model at the system's scale, the configuration, and the run parameters
    (``warmup``, ``repeat``, ``profile_steps``, ``quality_sample_steps``, ``quality_rel_l2_max``, ``seed``)."""

    model: ModelSettings
    variant: Variant
    params: dict

    @classmethod
    def from_spec(cls, spec: dict, system) -> Settings:
        """From the rule's spec: ``{model, configuration, network, micro_batches, presets, scales, run}`` (config
        ``unet3d_profile``; the model settings at the system's scale: :func:`~accelbench.experiments.unet3d.configs.
        settings_of`)."""
        return cls(settings_of(spec, system.scale), VARIANTS[spec["configuration"]], dict(spec["run"]))


def unsupported_outcome(s: Settings, ctx) -> Outcome | None:
    """The job's ``unsupported`` outcome when the system lacks the configuration's precision (TF32 on a CPU or
    V100, bf16 on V100), the network lacks its module rewrites (the MONAI stand-in: :func:`network_reason`), or this
    host only emulates its precision, slowly (bf16 on a CPU without AVX512-BF16/AMX, unless the
    config's ``run_emulated_precisions`` lists it: :func:`accelbench.core.precisions.emulated_reason`, a short probe):
    known without measuring, so the harness writes it without taking the device lock."""
    reason = (
        unsupported_reason(s.variant, ctx.system)
        or network_reason(s.variant, s.model)
        or precisions.emulated_reason(ctx.system, s.variant.autocast, precisions.run_emulated(ctx.spec))
    )
    return None if reason is None else Outcome("unsupported", {}, reason, {"settings": s.model.to_dict()})


# cost model of a job (accelbench.core.estimate): seconds per forward-pass unit of the reference work (a 32^3
# volume at width 16, Med-DDPM's U-Net) on the reference machine, fitted to the embedded default's jobs
COST = {"startup_s": 10.0, "unit_s": 0.42, "compile_s": 90.0, "bf16_x": 0.35, "reference_work": 32**3 * 16**2}


def estimate_s(spec: dict) -> float:
    """Wall seconds of the job on the reference machine (:data:`accelbench.core.estimate.REFERENCE`): forward-pass units
    (a training step = 3 per micro-batch; the quality probe's and the timed sampling steps 1 each) x the work per
    pass (voxels x width^2, relative to the default's) x :data:`COST` ``unit_s``, x ``bf16_x`` under native bf16
    autocast (x the probe's slowdown where emulated bf16 is asked for); start-up alone where the job will only write
    ``unsupported`` (:func:`unsupported_outcome`'s reasons)."""
    from accelbench.core.estimate import STARTUP_S
    from accelbench.core.harness import system_from

    system, variant = system_from(spec), VARIANTS[spec["configuration"]]
    m = settings_of(spec, system.scale)
    if (
        unsupported_reason(variant, system)
        or network_reason(variant, m)
        or precisions.emulated_reason(system, variant.autocast, precisions.run_emulated(spec))
    ):
        return STARTUP_S
    r = spec["run"]
    units = (
        3 * m.micro_batches * (1 + r["warmup"] + r["repeat"] + r["profile_steps"])
        + r["warmup"]
        + r["repeat"]
        + 2 * r["quality_sample_steps"]
        + 1
    )
    work = m.volume[0] * m.volume[1] * m.volume[2] * m.base_channels**2 / COST["reference_work"]
    if variant.autocast == "bf16":
        emulated = precisions.emulation(system, "bf16")
        work *= emulated[1] if emulated else COST["bf16_x"]
    return COST["startup_s"] + COST["unit_s"] * units * work + (COST["compile_s"] if variant.compile else 0.0)


def network_reason(variant: Variant, model: ModelSettings) -> str | None:
    """Why ``variant`` cannot run on the network ``model`` names (None if it can): its module rewrites
    (:attr:`Variant.rewrites_network`) exist for Med-DDPM's network only."""
    if variant.rewrites_network and model.network != "med_ddpm":
        return f"network {model.network}: {NOT_ON_MONAI}"
    return None


def unsupported_reason(variant: Variant, system) -> str | None:
    """Why ``variant`` cannot run on ``system`` (None if it can)."""
    if variant.tf32 and not system.supports("tf32"):
        return f"{system.name} has no TF32 tensor cores (supported precisions: {', '.join(system.precisions)})"
    if variant.autocast == "bf16" and not system.supports("bf16"):
        return f"{system.name} has no native bf16 (supported precisions: {', '.join(system.precisions)})"
    return None
