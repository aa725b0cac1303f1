"""Rule functions of Study A's Nsight Compute experiment (``unet3d_ncu``; its rules in ``rules.smk`` beside this file).

Torch-free, like :mod:`accelbench.experiments.unet3d.rules` (whose job spec and MRI inputs each counter job reuses):

* :func:`results`: the result paths of one system as configured;
* :func:`spec`: one job's spec (its configuration's profile spec plus ``ncu``);
* :func:`config_schema`: the configuration names of the ``unet3d_ncu`` config-schema block.
"""

from __future__ import annotations

from accelbench.experiments.unet3d import rules as profile
from accelbench.experiments.unet3d.configs import VARIANTS


def results(rc, system: str) -> list[str]:
    """One result path per (model of ``unet3d_profile.models``, configuration of ``unet3d_ncu.configurations``):
    ``<results>/<system>/unet3d_ncu/<model>/<configuration>/result.json``, models first."""
    return [
        f"{rc.results_dir}/{system}/unet3d_ncu/{model}/{configuration}/result.json"
        for model in rc.config["unet3d_profile"]["models"]
        for configuration in rc.config["unet3d_ncu"]["configurations"]
    ]


def spec(rc, wildcards) -> dict:
    """The spec of one unet3d_ncu job: its configuration's unet3d_profile spec
    (:func:`accelbench.experiments.unet3d.rules.spec`) plus ``ncu``, config ``unet3d_ncu`` without its
    ``configurations``."""
    return {
        **profile.spec(rc, wildcards),
        "ncu": {k: v for k, v in rc.config["unet3d_ncu"].items() if k != "configurations"},
    }


def config_schema(block: dict) -> None:
    """Fill the names of :data:`~accelbench.experiments.unet3d.configs.VARIANTS` into the ``unet3d_ncu`` block's
    ``configurations`` items as their enum."""
    block["properties"]["configurations"]["items"]["enum"] = list(VARIANTS)
