"""The few places the workflow reaches past Snakemake's public API, in one module (``workflow/rules/common.smk`` and
:class:`accelbench.cluster.containers.ApptainerWhenRun` use them; nothing else does).

Snakemake (9.x) offers no public way to do these; each function names what it touches, and
``tests/unit/test_snakemake_hooks.py`` fails when a Snakemake release changes any of it (an attribute renamed or
gone, a settings field dropped), so an upgrade breaks a unit test here instead of a run:

* :func:`force_files`: the DAG's forced files (``workflow.dag.forcefiles``, what ``--forcerun FILE`` fills): results
  that are not current are redone without adding a target.
* :func:`add_input_function`: an input function added to a rule after its ``rule:`` block was read
  (``Rule.set_input``, ``Rule.input_modifier``/``output_modifier``): every measurement rule gets one.
* :func:`executor_known` (``workflow.executor_plugin``): whether Snakemake has chosen how jobs run yet (it has not
  while the Snakefile is being read), so that a dry run is known.
* :func:`replace_deployment_methods`: the deployment methods Snakemake asks about
  (``workflow.deployment_settings.deployment_method``, a set of ``DeploymentMethod``) replaced by a set-like object
  that decides once the run's kind is known.
* :func:`command_line_dry_run`: ``snakemake -n`` while the Snakefile is read (``workflow.output_settings.dryrun``;
  ``workflow.dryrun`` is False until the executor is set up).

Public API needs no wrapper: ``workflow.cores`` (it raises ``WorkflowError`` without ``--cores``: :func:`cores_or`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def cores_or(workflow, fallback: int = 1) -> int:
    """``--cores`` of the run (``workflow.cores``, public), or ``fallback`` where none is given (dry runs,
    ``--report``)."""
    from snakemake.exceptions import WorkflowError

    try:
        return workflow.cores
    except WorkflowError:
        return fallback


def command_line_dry_run(workflow) -> bool:
    """True for ``snakemake -n``, also while the Snakefile is still read (before the dry-run executor exists)."""
    return bool(getattr(workflow.output_settings, "dryrun", False)) or bool(workflow.dryrun)


def executor_known(workflow) -> bool:
    """Whether Snakemake has set up its executor (False while the Snakefile is read): ``workflow.dryrun`` means
    something only then."""
    return workflow.executor_plugin is not None


def force_files(workflow, files: Iterable[str]) -> None:
    """Have the DAG redo ``files`` (its forced files, as ``--forcerun FILE``); nothing before the DAG exists."""
    if workflow.dag is not None:
        workflow.dag.forcefiles.update(files)


def add_input_function(rule, function: Callable) -> None:
    """Add the input function ``function`` (its dict unpacked: named inputs) to ``rule`` after the Snakefile defined
    it; a rule without an ``input:`` section gets the output's path modifier first, as Snakemake gives it one with
    the section."""
    from snakemake.io import unpack

    if rule.input_modifier is None:
        rule.input_modifier = rule.output_modifier
    rule.set_input(unpack(function))


def replace_deployment_methods(workflow, wrap: Callable[[set], set]) -> None:
    """``workflow.deployment_settings.deployment_method`` becomes ``wrap(methods)`` (a set-like object Snakemake
    asks ``DeploymentMethod.X in ...``)."""
    settings = workflow.deployment_settings
    settings.deployment_method = wrap(settings.deployment_method)
