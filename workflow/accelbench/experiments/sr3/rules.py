"""Rule functions of Study B's SR3 strong scaling (``sr3_scaling``; its rules in ``rules.smk`` beside this file).

Torch-free at import (:mod:`.settings` and :mod:`.configs` are; the multi-node check imports the backends' table
when called): the Snakefile imports it while it plans. Every function takes the run's
:class:`~accelbench.core.rule_context.RuleContext` and returns plain paths and dicts:

* :func:`results`: the result paths of ``sr3_scaling.configurations`` x ``sr3_scaling.devices`` on one system;
* :func:`spec`: one training job's spec (what its result records the sha256 of);
* :func:`data_path`, :func:`prepare_spec`: the sky patch set the jobs read and the spec of the rule that makes it;
* :func:`check`: device counts that do not divide into nodes stop the run before any job;
* :func:`config_errors`: the preset's channels divisible by the norm groups (and the heads) at every scale;
* :func:`config_schema`: the configuration names of the config-schema block (:data:`.configs.CONFIGURATIONS`).
"""

from __future__ import annotations

from accelbench.core.digests import digest
from accelbench.experiments.sr3 import configs

DEVICES_KEY = "sr3_scaling.devices"  # the key a device count that does not divide into nodes is named by
RUN_KEYS = ("workload_iterations", "max_iterations", "warmup", "quality_images", "quality_sample_steps", "seed")


def results(rc, system: str) -> list[str]:
    """``<results>/<system>/sr3_scaling/<configuration>/devices_<n>/result.json`` for every configuration and device
    count of config ``sr3_scaling`` (configurations outer, device counts inner)."""
    u = rc.config["sr3_scaling"]
    return [
        f"{rc.results_dir}/{system}/sr3_scaling/{configuration}/devices_{devices}/result.json"
        for configuration in u["configurations"]
        for devices in u["devices"]
    ]


def data_path(rc) -> str:
    """The sky patch set of the system's scale, ``resources/sky/sr3_<scale>.npz`` (rule ``sr3_prepare`` makes it)."""
    return f"resources/sky/sr3_{rc.system.scale}.npz"


def prepare_spec(rc, wildcards) -> dict:
    """The spec of rule ``sr3_prepare`` at ``wildcards.scale``: ``{hr_size, factor, data}`` (``data``: config
    ``sr3_scaling.data``, a relative ``folder`` made absolute in the repository), and with your own maps
    (``source: folder``) ``folder_sha256``, the digest of the folder's contents (:func:`accelbench.core.digests.
    digest`): a map replaced in the folder (any time stamp) changes the spec, so the patch set is made again and the
    training jobs, whose results record the patch set's digest, are redone.

    Raises:
        ConfigError: the preset's hr_size does not fit its levels (:func:`.settings.resolve_settings`).
    """
    from accelbench.experiments.sr3.settings import resolve_settings

    u = rc.config["sr3_scaling"]
    s = resolve_settings(u["preset"], wildcards.scale, u.get("scales", {}))
    data = dict(u.get("data") or {})
    if data.get("folder"):
        data["folder"] = str(rc.repo_path(data["folder"]))
    spec = {"hr_size": s.hr_size, "factor": s.factor, "data": data}
    if data.get("source") == "folder" and data.get("folder"):  # the maps' contents: a replaced file remakes the set
        spec["folder_sha256"] = digest(data["folder"])
    return spec


def spec(rc, wildcards) -> dict:
    """One training job's spec: the system, noise and energy settings, ``devices``, ``configuration``, a
    configuration's own settings beyond its name only where :func:`.configs.spec_settings` lists them (the faithful
    series' data path, so that the other configurations' specs stay as they were), the emulated-precision entry
    where asked for, ``preset``, ``scales``, ``run`` (the run keys and ``authors_iterations_per_device``) and
    ``ddp`` (only its options that are set, and only when one is).

    Raises:
        ConfigError: an unknown configuration name.
    """
    u = rc.config["sr3_scaling"]
    run = {k: u[k] for k in RUN_KEYS}
    run["authors_iterations_per_device"] = dict(u.get("authors_iterations_per_device") or {})
    ddp = {k: v for k, v in (u.get("ddp") or {}).items() if v is not None}  # in the spec only when set
    return {
        **rc.common_spec(),
        "devices": int(wildcards.devices),
        "configuration": wildcards.configuration,
        **configs.spec_settings(wildcards.configuration),
        **rc.emulated(configs.get(wildcards.configuration).precision),
        "preset": u["preset"],
        "scales": u.get("scales", {}),
        "run": run,
        **({"ddp": ddp} if ddp else {}),
    }


def check(rc) -> None:
    """Every device count of ``sr3_scaling.devices`` fits the system's nodes (:func:`accelbench.cluster.multinode.
    node_plan`).

    Raises:
        ConfigError: a count above the system's devices per node that does not divide into nodes (naming the key).
    """
    from accelbench.cluster.multinode import node_plan  # imports the backends' table (torch)

    for n in rc.config["sr3_scaling"]["devices"]:
        node_plan(rc.system, n, DEVICES_KEY)


def config_errors(config: dict) -> list[str]:
    """The SR3 preset at every scale (``paper``, and ``small`` with ``sr3_scaling.scales.small``): channels
    (inner_channels x channel_mult) divisible by norm_groups, and by num_heads at attention levels; one line per
    problem naming the key (hr_size is checked by :func:`.settings.resolve_settings`)."""
    from accelbench.models.unet_config import divisible_errors

    sr3 = config.get("sr3_scaling") or {}
    out = []
    if sr3.get("preset"):
        for scale in ("paper", "small"):
            p = dict(sr3["preset"], **((sr3.get("scales") or {}).get(scale) or {}))
            where = "sr3_scaling.preset" + (f" with sr3_scaling.scales.{scale}" if scale != "paper" else "")
            channels = [p["inner_channels"] * m for m in p["channel_mult"]]
            attention = [
                c for level, c in enumerate(channels) if p["hr_size"] // 2**level in p["attention_resolutions"]
            ]
            out += divisible_errors(where, "inner_channels x channel_mult", channels, attention, p)
    return out


def config_schema(block: dict) -> None:
    """Fill the names of :data:`.configs.CONFIGURATIONS` into the block's ``configurations`` items as their enum."""
    block["properties"]["configurations"]["items"]["enum"] = list(configs.CONFIGURATIONS)
