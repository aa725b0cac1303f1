"""What an experiment declares about itself: :class:`Experiment`, one entry of the registry.

Each experiment is one folder, ``accelbench/experiments/<package>/``, whose ``__init__.py`` holds ``ENTRIES`` (one
:class:`Experiment`, keyword arguments only) and imports nothing heavy: the registry, the config checks, the rule
files and the tables read the entries without importing torch. Every folder has the same rooms, found by their file
names (the entry names none of them):

=========================  ========================================================================================
``job.py``                 ``Settings.from_spec``, ``run`` (``run_rank`` where ranks run), ``estimate_s``: the job
``verdicts.py`` (optional) torch-free: ``known_unsupported(ctx)``, an ``unsupported`` outcome known without measuring
``rules.py``               torch-free: ``results(rc, system)`` the result paths as configured, ``spec(rc, wildcards)``
                           a job's settings, optional ``check(rc)`` (stops a bad config before any job),
                           ``model_specs(rc)`` (models to export, by name), ``config_errors(config)`` and
                           ``config_schema(block)``
``rules.smk``              its Snakemake rules, included by the Snakefile through the registry
``tables.py``/``tables/``  torch-free: ``aggregate(results, reference, out_dir)`` and ``CLAIM_CHECKS``
``<name>.schema.json``     the JSON schema of its results (``schema``); ``<name>.config.schema.yaml`` its config block
``bare.py``, ``data.py``,  where it has them: its bare reference loop, the data and the network it owns
``network.py``
``tests/``                 its tests (tier ``experiments``: the root ``conftest.py`` marks them)
=========================  ========================================================================================
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

EXPERIMENTS_PACKAGE = "accelbench.experiments"
# the modules of an experiment folder that the registry imports by their fixed names (docs/design.md, "The rooms of an
# experiment folder"; ``tables`` may be a package)
ROOMS = ("job", "verdicts", "rules", "tables", "data")


@dataclass(frozen=True, kw_only=True)
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

    def _room(self, room: str) -> ModuleType | None:
        """Its module ``accelbench.experiments.<package>.<room>`` (one of :data:`ROOMS`), or None when the folder has
        no such room."""
        assert room in ROOMS, room
        name = f"{self.module_path}.{room}"
        return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None

    def load(self) -> ModuleType:
        """Import its job module, ``job.py`` (``Settings``/``run``, and ``run_rank``/``merge``; imports torch)."""
        return importlib.import_module(f"{self.module_path}.job")

    def load_verdicts(self) -> ModuleType | None:
        """Import its torch-free verdicts module, ``verdicts.py``, or None when the folder has none: its
        ``known_unsupported(ctx) -> Outcome | None``, asked by the harness before it imports ``job``, is an
        ``unsupported`` result known from the spec, the system and what is installed (no probe, no device)."""
        return self._room("verdicts")

    def load_data(self) -> ModuleType:
        """Import its data module, ``data.py`` (the inputs its preparation command makes: the CLI reaches it here, not
        by name). Raises ValueError when the folder has none."""
        module = self._room("data")
        if module is None:
            raise ValueError(f"experiment {self.name} has no data module (no data.py in {self.module_path})")
        return module

    def load_tables(self) -> ModuleType:
        """Import its tables module (``tables.py`` or the package ``tables/``; torch-free), which turns its results
        into tables, figures and claim checks. Raises ValueError when the folder has none."""
        module = self._room("tables")
        if module is None:
            raise ValueError(f"experiment {self.name} has no tables (no tables.py in {self.module_path})")
        return module

    def rule_function(self, what: str):
        """Its ``what`` function (``results``, ``spec``, ``check``, ``model_specs``, ``config_errors``,
        ``config_schema``) from its torch-free ``rules.py``, or None."""
        module = self._room("rules")
        return getattr(module, what, None) if module is not None else None

    def schema_path(self) -> Path | None:
        """Its result schema file, or None."""
        return self.folder / self.schema if self.schema else None

    def result_patterns(self, results_dir: str, system: str) -> list[str]:
        """``<results_dir>/<system>/<name>/<variant>/<result>`` for every variant pattern (Snakemake wildcards)."""
        return [f"{results_dir}/{system}/{self.name}/{v}/{self.result}" for v in self.variants]
