"""accelbench.core.snakemake_hooks against the installed Snakemake: each test fails when a Snakemake release renames,
drops or changes what one of the hooks reaches past the public API for (so an upgrade fails here, not in a run)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import snakemake.api  # noqa: F401  (imports snakemake.workflow without its import circle)
from snakemake.dag import DAG
from snakemake.exceptions import WorkflowError
from snakemake.rules import Rule
from snakemake.settings.types import DeploymentSettings, OutputSettings
from snakemake.workflow import Workflow

from accelbench.core import snakemake_hooks


class _Cores:
    """Just what ``Workflow.cores`` reads (``_cores``), with Snakemake's own property."""

    cores = Workflow.cores

    def __init__(self, cores):
        self._cores = cores


def test_cores_or_uses_the_public_property_and_its_error():
    assert snakemake_hooks.cores_or(_Cores(4)) == 4
    assert snakemake_hooks.cores_or(_Cores(None), fallback=1) == 1
    with pytest.raises(WorkflowError):  # what cores_or catches: Snakemake's own error without --cores
        _ = _Cores(None).cores


def test_workflow_still_has_what_the_hooks_read():
    for name in ("dag", "executor_plugin", "dryrun", "output_settings", "deployment_settings", "rules"):
        assert hasattr(Workflow, name) or name in inspect.getsource(Workflow.__init__), name
    assert isinstance(inspect.getattr_static(Workflow, "dag"), property)
    assert isinstance(inspect.getattr_static(Workflow, "executor_plugin"), property)
    assert "dryrun" in {f.name for f in dataclasses.fields(OutputSettings)}
    assert "deployment_method" in {f.name for f in dataclasses.fields(DeploymentSettings)}


def test_dag_keeps_its_forced_files_as_a_set():
    assert "self.forcefiles = set(" in inspect.getsource(DAG.__init__)


def test_rule_input_function_hooks_exist():
    source = inspect.getsource(Rule.__init__)
    assert "self.input_modifier = " in source and "self.output_modifier = " in source
    kinds = [p.kind for p in inspect.signature(Rule.set_input).parameters.values()]
    assert kinds == [
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    ]


def test_hooks_do_what_they_say_on_stand_ins():
    class Dag:
        forcefiles: set

    class Flow:
        dag = None
        executor_plugin = None
        dryrun = False
        output_settings = type("O", (), {"dryrun": True})()
        deployment_settings = type("D", (), {"deployment_method": {"apptainer"}})()

    flow = Flow()
    snakemake_hooks.force_files(flow, ["a"])  # no DAG yet: nothing
    flow.dag = Dag()
    flow.dag.forcefiles = set()
    snakemake_hooks.force_files(flow, ["a", "b"])
    assert flow.dag.forcefiles == {"a", "b"}
    assert snakemake_hooks.command_line_dry_run(flow) and not snakemake_hooks.executor_known(flow)
    snakemake_hooks.replace_deployment_methods(flow, frozenset)
    assert flow.deployment_settings.deployment_method == frozenset({"apptainer"})
