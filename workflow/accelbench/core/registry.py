"""The registry of experiments: every folder under ``accelbench/experiments/`` declares its own (``ENTRIES`` in its
``__init__.py``, :class:`~accelbench.core.experiment.Experiment`), and this module collects them.

Every other part of accelbench reads this table instead of listing experiment names: the CLI (one measurement
command per entry), config validation (``experiments:`` of ``config/config.yaml``), the Snakefile (each folder's
``rules.smk``), the rules' generic input functions (``workflow/rules/common.smk``), result validation (each entry's
schema), the aggregations, the claims and the reference-run tables. ``tests/unit/test_registry.py`` fails if a list
of experiment names appears anywhere else in the package or the rules.

Adding an experiment is one new folder (see CONTRIBUTING.md, "Add an experiment").

Example::

    >>> from accelbench.core.registry import EXPERIMENTS, get
    >>> get("sr3_scaling").command
    'sr3-train'
    >>> [e.name for e in EXPERIMENTS.values() if e.study == "A"]
    ['unet3d_profile', 'unet3d_ncu']
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path, PurePath

from accelbench.core.experiment import EXPERIMENTS_PACKAGE, Experiment
from accelbench.errors import ConfigError

__all__ = [
    "EXPERIMENTS",
    "ConfigError",
    "Experiment",
    "aggregated",
    "claims_files",
    "cluster_requests",
    "experiment_of",
    "published_files",
    "get",
    "names",
    "rule_files",
]


def _discover() -> tuple[Experiment, ...]:
    """The ``ENTRIES`` of every folder under ``accelbench/experiments/``, in their ``order``.

    Raises:
        ConfigError: two entries share a name.
    """
    package = importlib.import_module(EXPERIMENTS_PACKAGE)
    found: list[Experiment] = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:
            found += getattr(importlib.import_module(f"{EXPERIMENTS_PACKAGE}.{info.name}"), "ENTRIES", ())
    names = [e.name for e in found]
    if len(set(names)) != len(names):
        raise ConfigError(f"experiment names given twice in accelbench/experiments/*/__init__.py: {sorted(names)}")
    return tuple(sorted(found, key=lambda e: (e.order, e.name)))


_ENTRIES = _discover()
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


def claims_files() -> list[tuple[str, str]]:
    """``(study, claims file under resources/reference/)`` of every study, in registry order, each once."""
    return list(dict.fromkeys((e.study, e.claims) for e in _ENTRIES if e.claims))


def published_files(reference_dir: str | Path) -> dict[str, Path]:
    """``{experiment: its published reference file under reference_dir}`` of every aggregated experiment that has
    one (what the claim checks and the energy figure read, by experiment)."""
    return {e.name: Path(reference_dir) / e.reference for e in _ENTRIES if e.aggregate and e.reference}


# the core's own accelerator rule (workflow/rules/cluster.smk): one process listing the devices
CORE_CLUSTER_REQUESTS = {"gpu_smoke": {"cpus": 1, "mem_mb": 2000}}


def cluster_requests() -> dict[str, dict[str, int]]:
    """``{rule: {"cpus": n, "mem_mb": m}}`` of every rule that holds accelerators: the core's ``gpu_smoke`` and
    every experiment's measurement rules (their ``cluster_requests``), what the Slurm and Kubernetes profiles
    (``slurm/config.yaml``, ``kubernetes/config.yaml``) ask per job.

    Raises:
        ConfigError: a rule is given twice.
    """
    out: dict[str, dict[str, int]] = dict(CORE_CLUSTER_REQUESTS)
    for e in _ENTRIES:
        for rule, cpus, mem_mb in e.cluster_requests:
            if rule in out:
                raise ConfigError(f"rule {rule!r} has two cluster_requests rows (experiment {e.name})")
            out[rule] = {"cpus": int(cpus), "mem_mb": int(mem_mb)}
    return out


def rule_files() -> list[str]:
    """The rule file of every experiment folder (``rules.smk``), in registry order, each once."""
    files = [str(e.folder / "rules.smk") for e in _ENTRIES if (e.folder / "rules.smk").is_file()]
    return list(dict.fromkeys(files))


def experiment_of(path: str) -> str | None:
    """The experiment a result path belongs to: the registry name among its folder names (last one wins), or None."""
    hits = [p for p in PurePath(path).parts if p in EXPERIMENTS]
    return hits[-1] if hits else None
