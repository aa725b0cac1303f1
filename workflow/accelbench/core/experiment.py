"""What an experiment declares about itself: :class:`Experiment`, one entry of the registry.

Each experiment is one folder, ``accelbench/experiments/<package>/``, whose ``__init__.py`` holds ``ENTRIES`` (one
:class:`Experiment` per result kind it makes) and imports nothing heavy: the registry, the config checks, the rule
files and the tables read the entries without importing torch. The entry names the folder's modules:

========================  =========================================================================================
``job`` (``job.py``)      ``Settings.from_spec``, ``run`` (``run_rank`` where ranks run), ``estimate_s``: the job
``verdicts`` (optional)   torch-free: ``known_unsupported(ctx)``, an ``unsupported`` outcome known without measuring
``rules`` (``rules.py``)  torch-free: ``results(rc, system)`` the result paths as configured, ``spec(rc, wildcards)``
                          a job's settings, optional ``check(rc)`` (stops a bad config before any job) and
                          ``model_specs(rc)`` (models to export, by name)
``tables``                torch-free: ``aggregate(results, reference, out_dir)`` and ``CLAIM_CHECKS``
``schema``                the JSON schema of its results (``<name>.schema.json``)
``rules.smk``             its Snakemake rules, included by the Snakefile through the registry
========================  =========================================================================================
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

EXPERIMENTS_PACKAGE = "accelbench.experiments"


@dataclass(frozen=True)
class Experiment:
    """One experiment of the studies (or a diagnostic).

    Attributes:
        name: config key, result folder (``results/<system>/<name>/...``) and the result's ``experiment`` field.
        study: the study it reproduces, whose claims file it shares (``"A"``: arXiv 2606.19365, ``"B"``: arXiv
            2607.05400; a new study takes a new label), or ``"diagnostic"`` (not a study result: not selectable in
            ``experiments:``, no result schema, not aggregated).
        package: its folder under ``accelbench/experiments/``.
        command: the ``accelbench`` command its rule calls.
        variants: the result folders below ``<system>/<name>/``, as Snakemake wildcard patterns (one per rule).
        order: its place in registry order (tables, reports and the claims page follow it).
        job: the module of the folder holding ``Settings``/``run`` (and ``run_rank``/``merge``).
        verdicts: the torch-free module of the folder whose ``known_unsupported(ctx) -> Outcome | None`` the harness
            asks before it imports ``job``: an ``unsupported`` result known from the spec, the system and what is
            installed (no probe, no device), written without importing torch (or None: no such module).
        rules: the torch-free module of the folder with ``results``/``spec`` (and optional ``check``/``model_specs``)
            functions for this experiment, as ``"module:prefix"`` (functions ``<prefix>results``, ``<prefix>spec``...).
        tables: the module of the folder that turns its results into tables, figures and claim checks (or None).
        aggregate: the stem of its aggregation command, ``accelbench <aggregate>-aggregate`` (or None).
        schema: the JSON schema of its results, a file of the folder (None: no schema, diagnostics).
        result: the file the job writes in the variant folder.
        reference: published numbers it is compared with, under ``resources/reference/`` (or None).
        claims: the claims file of its study under ``resources/reference/`` (or None).
        reads: other experiments whose results its aggregation reads too (Study A's claims read the counters).
        side_files: files a job may write beside its result (moved aside with it when it is superseded).
        ranks: True when a job runs several ranks through :mod:`accelbench.core.launcher`.
        inputs: the named inputs its command takes besides ``--spec``/``--out`` (``--image``, ``--data``, ...), passed
            to the run as ``ctx.inputs``.
        targets: the main outputs of its aggregation under the results folder (``rule all`` asks for them).
        rule_seconds: ``(rule, wall seconds)`` its light rules (data preparation, aggregation) add to a run on the
            time estimate's reference machine (:mod:`accelbench.core.estimate`; its measurement jobs have their own
            cost model, ``estimate_s`` of its job module).
        cluster_requests: ``(rule, CPUs, memory in MB)`` of each of its measurement rules at paper scale: what a
            batch scheduler is asked for per job (the Slurm profile, ``slurm/config.yaml``, reads them through
            :func:`accelbench.core.registry.cluster_requests`; a site's ``node_limits`` cap them).
    """

    name: str
    study: str
    package: str
    command: str
    variants: tuple[str, ...]
    order: int = 0
    job: str = "job"
    verdicts: str | None = None
    rules: str = "rules:"
    tables: str | None = None
    aggregate: str | None = None
    schema: str | None = None
    result: str = "result.json"
    reference: str | None = None
    claims: str | None = None
    reads: tuple[str, ...] = ()
    side_files: tuple[str, ...] = ()
    ranks: bool = False
    inputs: tuple[str, ...] = field(default=())
    targets: tuple[str, ...] = field(default=())
    rule_seconds: tuple[tuple[str, float], ...] = field(default=())
    cluster_requests: tuple[tuple[str, int, int], ...] = field(default=())

    @property
    def selectable(self) -> bool:
        """True when the experiment can be named in the config's ``experiments:`` list (study experiments)."""
        return self.study != "diagnostic"

    @property
    def module_path(self) -> str:
        """``accelbench.experiments.<package>``."""
        return f"{EXPERIMENTS_PACKAGE}.{self.package}"

    @property
    def folder(self) -> Path:
        """The experiment's folder (its rule file, schema and captions are there)."""
        return Path(importlib.import_module(self.module_path).__file__).parent

    def load(self) -> ModuleType:
        """Import its job module (``accelbench.experiments.<package>.<job>``; imports torch)."""
        return importlib.import_module(f"{self.module_path}.{self.job}")

    def load_verdicts(self) -> ModuleType | None:
        """Import its torch-free verdicts module (``verdicts``), or None when it has none."""
        return importlib.import_module(f"{self.module_path}.{self.verdicts}") if self.verdicts else None

    def load_tables(self) -> ModuleType:
        """Import its tables module (torch-free). Raises ValueError when it has none."""
        if not self.tables:
            raise ValueError(f"experiment {self.name} has no tables")
        return importlib.import_module(f"{self.module_path}.{self.tables}")

    def rule_function(self, what: str):
        """Its ``what`` function (``results``, ``spec``, ``check``, ``model_specs``) from its rules module, or None."""
        module, _, prefix = self.rules.partition(":")
        name = f"{self.module_path}.{module}"
        if importlib.util.find_spec(name) is None:
            return None
        return getattr(importlib.import_module(name), f"{prefix}{what}", None)

    def schema_path(self) -> Path | None:
        """Its result schema file, or None."""
        return self.folder / self.schema if self.schema else None

    def result_patterns(self, results_dir: str, system: str) -> list[str]:
        """``<results_dir>/<system>/<name>/<variant>/<result>`` for every variant pattern (Snakemake wildcards)."""
        return [f"{results_dir}/{system}/{self.name}/{v}/{self.result}" for v in self.variants]
