"""Rule functions of Study A's profile experiment (``unet3d_profile``; its rules in ``rules.smk`` beside this file; the
Nsight Compute experiment's are in :mod:`accelbench.experiments.unet3d_ncu.rules`, which reads :func:`spec` and
:func:`mri_inputs` from here).

Torch-free: the Snakefile imports it while it plans. Every function takes the run's
:class:`~accelbench.core.rule_context.RuleContext` and returns plain paths and dicts:

* :func:`results`: the result paths of one system as configured;
* :func:`spec`: one job's spec (what its result records the sha256 of);
* :func:`mri_inputs`, :func:`mri_spec`: the MRI image/mask pair a job reads, and the spec of rule ``mri_prepare``
  that makes it; :func:`own_data_digest`: the digest of your own scans' folder in these specs (freshness);
* :func:`config_errors`: every preset at every scale builds a U-Net (channels divisible by the norm groups
  and heads, volume sides by the levels' halvings);
* :func:`config_schema`: the configuration names of the config-schema block.
"""

from __future__ import annotations

from accelbench.experiments.unet3d.configs import VARIANTS, resolve_settings
from accelbench.models.unet_config import divisible_errors

RUN_KEYS = ("warmup", "repeat", "profile_steps", "quality_sample_steps", "quality_rel_l2_max", "seed")


def results(rc, system: str) -> list[str]:
    """One result path per (model, configuration) of config ``unet3d_profile``:
    ``<results>/<system>/unet3d_profile/<model>/<configuration>/result.json``, models first."""
    u = rc.config["unet3d_profile"]
    return [
        f"{rc.results_dir}/{system}/unet3d_profile/{model}/{configuration}/result.json"
        for model in u["models"]
        for configuration in u["configurations"]
    ]


def spec(rc, wildcards) -> dict:
    """The spec of one unet3d_profile job (``wildcards.model``, ``wildcards.configuration``): the system, noise and
    energy settings, the model and configuration (with ``run_emulated_precisions`` only where the configuration's
    autocast precision is asked to run emulated), the network and micro-batches, the model's preset, the scale
    overrides, the MRI data settings and the run parameters (:data:`RUN_KEYS`)."""
    u = rc.config["unet3d_profile"]
    return {
        **rc.common_spec(),
        "model": wildcards.model,
        "configuration": wildcards.configuration,
        **rc.emulated(VARIANTS[wildcards.configuration].autocast),
        "network": u["network"],
        "micro_batches": u["micro_batches"],
        "presets": {wildcards.model: u["presets"][wildcards.model]},
        "scales": u.get("scales", {}),
        "data": rc.config["data"]["mri"],
        **own_data_digest(rc),
        "run": {k: u[k] for k in RUN_KEYS},
    }


def own_data_digest(rc) -> dict:
    """``{"data_sha256": <digest of the folder's contents>}`` with your own scans (config ``data.mri.source:
    folder``, :func:`accelbench.core.digests.digest`), else ``{}`` (the bundled template: specs stay as they were).
    In the specs of the profile and Nsight jobs and of rule ``mri_prepare``: a scan replaced in the folder (any time
    stamp) changes them, so the pair is made again and the results are redone (their recorded ``spec_sha256``
    differs). Digests of big files are kept across DAG builds by their stamp (``accelbench.core.digests.STAMPS``)."""
    from accelbench.core.digests import digest

    data = rc.config["data"]["mri"]
    if data.get("source") != "folder" or not data.get("folder"):
        return {}
    return {"data_sha256": digest(rc.repo_path(data["folder"]))}


def mri_inputs(rc, wildcards) -> dict[str, str]:
    """The MRI pair of ``wildcards.model`` at the system's scale (rule ``mri_prepare`` makes it):
    ``{"image": resources/mri/<model>_<scale>/image.nii.gz, "mask": .../mask.nii.gz}``."""
    stem = f"resources/mri/{wildcards.model}_{rc.system.scale}"
    return {"image": f"{stem}/image.nii.gz", "mask": f"{stem}/mask.nii.gz"}


def mri_spec(rc, wildcards) -> dict:
    """The spec of rule ``mri_prepare`` for ``wildcards.model`` at ``wildcards.scale``: the volume (voxels per side)
    and spacing (mm) of the model's settings at that scale, config ``data.mri`` (a relative ``folder`` made
    absolute in the repository, like every path setting) and, with your own scans, ``data_sha256``
    (:func:`own_data_digest`)."""
    u = rc.config["unet3d_profile"]
    s = resolve_settings(
        wildcards.model,
        u["presets"],
        wildcards.scale,
        u.get("scales", {}),
        network=u["network"],
        micro_batches=u["micro_batches"],
    )
    data = dict(rc.config["data"]["mri"])
    if data.get("folder"):
        data["folder"] = str(rc.repo_path(data["folder"]))
    return {"volume": list(s.volume), "spacing_mm": list(s.spacing_mm), "data": data, **own_data_digest(rc)}


def config_errors(config: dict) -> list[str]:
    """Every preset of ``unet3d_profile.presets`` at every scale (its own, and with ``unet3d_profile.scales.small``)
    builds a U-Net: channels (base_channels x channel_mult) divisible by norm_groups, and by num_heads at attention
    levels (:func:`accelbench.models.unet_config.divisible_errors`); each volume side divisible by 2**(levels - 1)
    (levels = len(channel_mult): six levels need multiples of 32). One line per violation, naming the key."""
    u = config.get("unet3d_profile") or {}
    out = []
    for name, preset in (u.get("presets") or {}).items():
        for scale in ("paper", "small"):
            p = dict(preset, **((u.get("scales") or {}).get(scale) or {}))
            where = f"unet3d_profile.presets.{name}" + (
                f" with unet3d_profile.scales.{scale}" if scale != "paper" else ""
            )
            channels = [p["base_channels"] * m for m in p["channel_mult"]]
            factors = {p["volume"][0] // r for r in p["attention_resolutions"] if p["volume"][0] % r == 0}
            attention = [c for level, c in enumerate(channels) if 2**level in factors]
            out += divisible_errors(where, "base_channels x channel_mult", channels, attention, p)
            step = 2 ** (len(p["channel_mult"]) - 1)
            if any(v % step for v in p["volume"]):
                out.append(
                    f"config key '{where}': volume {p['volume']} must be a multiple of {step} per side "
                    f"({len(p['channel_mult'])} U-Net levels halve it {len(p['channel_mult']) - 1} times)"
                )
    return out


def config_schema(block: dict) -> None:
    """Fill the names of :data:`~accelbench.experiments.unet3d.configs.VARIANTS` into the ``unet3d_profile`` block's
    ``configurations`` items as their enum."""
    block["properties"]["configurations"]["items"]["enum"] = list(VARIANTS)
