"""The cluster path without a cluster: where the device check runs, `account: null` with the installed Slurm plugin,
per-job failure lines, and the transformers keyword of the declared range."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
from snakemake_interface_executor_plugins.settings import ExecMode

from accelbench.cluster.node_report import failed_job_summaries, honour_slurm_no_account
from accelbench.core.systems import require_backend_for_local_jobs
from accelbench.errors import SystemMismatchError


class Resources(dict):
    """Snakemake's job.resources: mapping and attribute access."""

    __getattr__ = dict.__getitem__


def fake_workflow(local_exec: bool, mode=ExecMode.DEFAULT, **settings):
    plugin = SimpleNamespace(common_settings=SimpleNamespace(local_exec=local_exec))
    return SimpleNamespace(executor_plugin=plugin, exec_mode=mode, executor_settings=SimpleNamespace(**settings))


def test_device_check_runs_only_where_jobs_run_here(systems, monkeypatch):
    import accelbench.core.systems as sysmod

    monkeypatch.setattr(sysmod, "probe_devices", lambda: {"backend": "cpu", "count": 0, "names": []})
    with pytest.raises(SystemMismatchError, match="system 'h100' needs backend 'cuda'"):
        require_backend_for_local_jobs(fake_workflow(local_exec=True), systems["h100"])
    # Slurm from a login node, and the job-side Snakemake processes: left to `accelbench <cmd>` on the node
    assert require_backend_for_local_jobs(fake_workflow(local_exec=False), systems["h100"]) is None
    assert require_backend_for_local_jobs(fake_workflow(True, ExecMode.REMOTE), systems["h100"]) is None
    assert require_backend_for_local_jobs(fake_workflow(True), systems["cpu"])["backend"] == "cpu"


@pytest.fixture
def slurm_plugin(monkeypatch):
    plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
    monkeypatch.setattr(plugin.Executor, "get_account_arg", plugin.Executor.get_account_arg)  # restored afterwards
    return plugin


def test_no_account_submits_without_account(slurm_plugin, monkeypatch):
    """`--slurm-no-account` (site.yaml `account: null`): no -A, and no guess from sacct that sacctmgr must validate."""
    plugin = slurm_plugin
    original = plugin.Executor.get_account_arg
    if "no_account" in inspect.getsource(original):  # pragma: no cover - a plugin release that reads the flag
        assert honour_slurm_no_account(fake_workflow(False, no_account=True)) is False
        return

    def guessed(*_):
        raise AssertionError("the plugin guessed an account although the site said `account: null`")

    monkeypatch.setattr(plugin, "get_account", guessed)
    job = SimpleNamespace(resources=Resources())
    with pytest.raises(AssertionError, match="guessed"):  # the installed plugin (2.8.0) ignores the flag
        executor = SimpleNamespace(_fallback_account_arg=None, logger=SimpleNamespace(warning=lambda *_: None))
        next(original(executor, job))

    assert honour_slurm_no_account(fake_workflow(False, no_account=False)) is False
    assert plugin.Executor.get_account_arg is original
    assert honour_slurm_no_account(fake_workflow(False, no_account=True)) is True
    assert honour_slurm_no_account(fake_workflow(False, no_account=True)) is False  # once
    assert next(plugin.Executor.get_account_arg(SimpleNamespace(), job)) == ""
    # an explicit per-rule account still goes through the plugin's own validation
    monkeypatch.setattr(plugin, "validate_account", lambda account, logger: account)
    named = SimpleNamespace(resources=Resources(slurm_account="proj42"))
    assert next(plugin.Executor.get_account_arg(SimpleNamespace(logger=None), named)) == " -A proj42"


def test_failed_jobs_named_with_their_error(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs/u.log").write_text(
        "INFO start\naccelbench unet3d-profile: error: system 'h100' needs backend "
        "'cuda' with 1 device(s), but this machine has no accelerator\n"
    )
    log = (
        "Error in rule unet3d_profile:\n    message: SLURM-job '12' failed, SLURM status is: 'FAILED'.\n"
        "    jobid: 3\n    log: logs/u.log (check log file(s) for error details)\n"
        "Error in rule sr3_train:\n    message: SLURM-job '13' failed, SLURM status is: 'NODE_FAIL'.\n"
        "    log: logs/missing.log (check log file(s) for error details)\n"
        "Error in rule mri_prepare:\n    message: SLURM sbatch failed. The error message was 'invalid partition'\n"
    )
    lines = failed_job_summaries(log, tmp_path)
    assert lines == [
        "Job of rule unet3d_profile failed: accelbench unet3d-profile: error: system 'h100' needs backend 'cuda' with "
        "1 device(s), but this machine has no accelerator (log: logs/u.log)",
        "Job of rule sr3_train failed: SLURM-job '13' failed, SLURM status is: 'NODE_FAIL'. (log: logs/missing.log)",
    ]
    assert failed_job_summaries("nothing failed", tmp_path) == []


@pytest.mark.parametrize(
    "version,keyword", [("4.51.3", "torch_dtype"), ("4.55.4", "torch_dtype"), ("4.56.0", "dtype"), ("5.24.0", "dtype")]
)
def test_dtype_keyword_across_declared_transformers_range(monkeypatch, version, keyword):
    import torch
    import transformers

    from accelbench.models.llm import dtype_kwargs

    monkeypatch.setattr(transformers, "__version__", version)
    assert dtype_kwargs(torch.bfloat16) == {keyword: torch.bfloat16}


def test_no_loader_call_names_the_dtype_keyword_itself():
    """`from_pretrained(..., dtype=...)` fails on transformers < 4.56 (the Habana image): every loader call that sets
    the weights' dtype goes through models.llm.dtype_kwargs."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "workflow/accelbench"
    offenders = []
    for path in package.rglob("*.py"):
        text = path.read_text()
        for m in re.finditer(r"\.(from_pretrained|from_config)\(", text):
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            if re.search(r"\b(torch_)?dtype\s*=", text[m.end() : i]):
                offenders.append(f"{path.relative_to(package)}: {text[m.start() : i]}")
    assert offenders == []
