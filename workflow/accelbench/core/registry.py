"""The registry of experiments: the one place that names them.

Every other part of accelbench reads this table instead of listing experiment names: the CLI (one measurement
command per entry), config validation (``experiments:`` of ``config/config.yaml``), the rules' input functions
(``workflow/rules/common.smk``), result validation (the ``experiment`` enum of ``schemas/result.json`` is checked
against it by a test), the aggregations, the claims and the reference-run tables.
``tests/unit/test_registry.py`` fails if a list of experiment names appears anywhere else in the package or the
rules.

Adding an experiment is one entry here plus its module (see CONTRIBUTING.md, "Add an experiment").

Example::

    >>> from accelbench.core.registry import EXPERIMENTS, get
    >>> get("sr3_scaling").command
    'sr3-train'
    >>> [e.name for e in EXPERIMENTS.values() if e.study == "A"]
    ['unet3d_profile', 'unet3d_ncu']
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType

from accelbench.errors import ConfigError


@dataclass(frozen=True)
class Experiment:
    """One experiment of the studies (or a diagnostic).

    Attributes:
        name: config key, result folder (``results/<system>/<name>/...``) and the result's ``experiment`` field.
        study: ``"A"`` (arXiv 2606.19365), ``"B"`` (arXiv 2607.05400) or ``"diagnostic"`` (not a study result:
            not selectable in ``experiments:``, no result schema, not aggregated).
        module: the module under ``accelbench.experiments`` that holds its ``Settings``/``run`` (or
            ``run_rank``/``merge``) entry points.
        command: the ``accelbench`` command its rule calls.
        variants: the result folders below ``<system>/<name>/``, as Snakemake wildcard patterns (one per rule).
        result: the file the job writes in the variant folder.
        aggregate: module under ``accelbench.aggregate`` that turns its results into tables and figures (or None).
        reference: published numbers it is compared with, under ``resources/reference/`` (or None).
        reads: other experiments whose results its aggregation reads too (Study A's claims read the counters).
        side_files: files a job may write beside its result (moved aside with it when it is superseded).
        ranks: True when a job runs several ranks through :mod:`accelbench.core.launcher` (SR3, LoRA, net_smoke).
        targets: the main outputs of its aggregation under the results folder (``rule all`` asks for them).
        inputs: the named inputs its command takes besides ``--spec``/``--out`` (``--image``, ``--data``, ...), passed
            to the run as ``ctx.inputs``.
    """

    name: str
    study: str
    module: str
    command: str
    variants: tuple[str, ...]
    result: str = "result.json"
    aggregate: str | None = None
    reference: str | None = None
    reads: tuple[str, ...] = ()
    side_files: tuple[str, ...] = ()
    ranks: bool = False
    inputs: tuple[str, ...] = field(default=())
    targets: tuple[str, ...] = field(default=())

    @property
    def selectable(self) -> bool:
        """True when the experiment can be named in the config's ``experiments:`` list (study experiments)."""
        return self.study != "diagnostic"

    def load(self) -> ModuleType:
        """Import its experiment module (``accelbench.experiments.<module>``)."""
        return importlib.import_module(f"accelbench.experiments.{self.module}")

    def result_patterns(self, results_dir: str, system: str) -> list[str]:
        """``<results_dir>/<system>/<name>/<variant>/<result>`` for every variant pattern (Snakemake wildcards)."""
        return [f"{results_dir}/{system}/{self.name}/{v}/{self.result}" for v in self.variants]


_ENTRIES = (
    Experiment(
        "unet3d_profile",
        "A",
        "unet3d_profile",
        "unet3d-profile",
        ("{model}/{configuration}",),
        aggregate="study_a",
        reference="study_a_claims.csv",
        reads=("unet3d_ncu",),
        side_files=("kernels.csv", "trace.json.gz"),
        inputs=("image", "mask"),
        targets=("study_a/table.csv", "study_a/claims_vs_measured.csv"),
    ),
    Experiment(
        "unet3d_ncu",
        "A",
        "unet3d_ncu",
        "unet3d-ncu",
        ("{model}/{configuration}",),
        aggregate="study_a_ncu",
        reference="study_a_claims.csv",
        reads=("unet3d_profile",),
        inputs=("image", "mask", "profile_result"),
        targets=("study_a/counters.csv",),
    ),
    Experiment(
        "sr3_scaling",
        "B",
        "sr3_scaling",
        "sr3-train",
        ("{configuration}/devices_{devices}",),
        aggregate="study_b_sr3",
        reference="study_b_sr3_scaling.csv",
        side_files=("samples.npz",),
        ranks=True,
        inputs=("data",),
        targets=("study_b_sr3/scaling.csv", "study_b_sr3/fig_scaling.png"),
    ),
    Experiment(
        "llm_quant",
        "B",
        "llm_quant",
        "llm-quant",
        ("{model}/sensitivity", "{model}/{method}/{bitset}"),
        aggregate="study_b_quant",
        reference="study_b_quantization.csv",
        side_files=("sensitivity_layers.csv", "sensitivity_submodules.csv"),
        inputs=("stage", "model_dir", "sensitivity"),
        targets=("study_b_quant/table.csv", "study_b_quant/fig_sensitivity_layers.png"),
    ),
    Experiment(
        "lora_finetune",
        "B",
        "lora",
        "lora-finetune",
        ("{model}/{attention}/{strategy}/n{devices}", "{model}/{series}/{attention}/{strategy}/n{devices}"),
        aggregate="study_b_lora",
        reference="study_b_finetune_runtime.csv",
        ranks=True,
        targets=("study_b_lora/runs.csv", "study_b_lora/fig_runtime_vs_devices.png"),
    ),
    Experiment(
        "net_smoke",
        "diagnostic",
        "net_smoke",
        "net-smoke",
        ("devices_{devices}",),
        result="allreduce.json",
        side_files=("allreduce.csv",),
        ranks=True,
    ),
)

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in _ENTRIES}


def names(selectable_only: bool = True) -> tuple[str, ...]:
    """Experiment names in registry order (by default those a config may select: the study experiments)."""
    return tuple(e.name for e in _ENTRIES if e.selectable or not selectable_only)


def get(name: str) -> Experiment:
    """The entry of ``name``.

    Raises:
        ConfigError: no such experiment (names the known ones).
    """
    try:
        return EXPERIMENTS[name]
    except KeyError:
        raise ConfigError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}") from None


def aggregated() -> tuple[Experiment, ...]:
    """Experiments with an aggregation, in registry order (the reference-run tables and the report follow it)."""
    return tuple(e for e in _ENTRIES if e.aggregate)


def experiment_of(path: str) -> str | None:
    """The experiment a result path belongs to: the registry name among its folder names (last one wins), or None."""
    from pathlib import PurePath

    hits = [p for p in PurePath(path).parts if p in EXPERIMENTS]
    return hits[-1] if hits else None
