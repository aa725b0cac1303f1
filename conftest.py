"""Shared fixtures (repository paths, the tiny config, a CPU system) and the tier markers, for every test of the
repository (this file sits at its root, so that the tests inside the experiment folders see them too).

The tests live in tiers that mirror the package: tests/unit (single modules), experiments (one experiment's code:
each experiment's own tests in ``workflow/accelbench/experiments/<folder>/tests/``, beside its code, and in
tests/experiments the tests of code that several experiments share), tests/workflow (the real Snakemake DAG),
tests/system (system packages or a second environment: Slurm, containers, a browser, image pins). Each test is marked
with its tier's name (`pytest -m unit`, `-m experiments`, ...; :func:`tier_of`); `python -m pytest` runs them all
(pyproject's ``testpaths``). The shared helpers (dag.py, fake_results.py, *_helpers.py) stay in tests/.
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from accelbench.core.config import deep_merge, validate_config

REPO = Path(__file__).resolve().parent
TESTS = REPO / "tests"
EXPERIMENTS = REPO / "workflow/accelbench/experiments"  # each folder's own tests: <folder>/tests/
TIERS = ("unit", "experiments", "workflow", "system")
TINY = REPO / "config/examples/tiny.yaml"

# the recipes' toy additions are fixture data at their repository paths (their tests run in the copies they are laid
# over: tests/workflow/test_toy_experiment_dag.py, tests/unit/test_toy_backend.py), not tests of this tree
collect_ignore = ["tests/toy_experiment", "tests/toy_backend", "tests/toy_rocm_backend"]

if str(TESTS) not in sys.path:  # the helpers import as top-level modules from every tier's folder
    sys.path.insert(0, str(TESTS))


def tier_of(path: Path) -> str:
    """The tier of a test file: the folder under tests/ that holds it, ``experiments`` for a test in an experiment
    folder's ``tests/``, else ``""``."""
    path = path.resolve()
    if path.is_relative_to(EXPERIMENTS):
        return "experiments" if path.relative_to(EXPERIMENTS).parts[1:2] == ("tests",) else ""
    parts = path.relative_to(TESTS).parts if path.is_relative_to(TESTS) else ()
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else ""


def pytest_collection_modifyitems(config, items):
    """One marker per tier (:func:`tier_of`). The tiers run longest first
    (system, workflow, experiments, unit; each file's order kept), so that with pytest-xdist (README command 2 runs
    ``-n logical --dist worksteal``) the minutes-long DAG tests start at once and the last minutes are spread over
    many short unit tests instead of one worker finishing a DAG alone."""
    tiers = {}
    for item in items:
        tiers[item] = tier_of(Path(str(item.path)))
        if tiers[item]:
            item.add_marker(getattr(pytest.mark, tiers[item]))
    order = {name: i for i, name in enumerate(reversed(TIERS))}
    items.sort(key=lambda item: order.get(tiers[item], len(TIERS)))


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    """Package defaults (config/..., resources/...) are relative to the repository root."""
    monkeypatch.chdir(REPO)


@functools.cache
def _validated(*overlays: Path) -> dict:
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    for overlay in overlays:
        config = deep_merge(config, yaml.safe_load(overlay.read_text()))
    # plain dicts (Snakemake's validation fills defaults as OrderedDicts), as a config file would hold them
    return json.loads(json.dumps(validate_config(config, REPO / "config/config.schema.yaml")))


@pytest.fixture
def default_config() -> dict:
    """config/config.yaml as the workflow sees it: validated, every schema default filled in (the file itself holds
    only the embedded run's choices; the schema is the one place a default is written)."""
    return copy.deepcopy(_validated())


@pytest.fixture
def tiny_config() -> dict:
    """config/examples/tiny.yaml merged onto the default and validated, as `snakemake --configfile
    config/examples/tiny.yaml` does: 16^3 volumes, width 8, a few iterations; seconds per configuration on a CPU."""
    return copy.deepcopy(_validated(TINY))


@pytest.fixture
def systems():
    from accelbench.core.systems import load_systems

    return load_systems(REPO / "config/systems", REPO / "config/system.schema.yaml")


@pytest.fixture(scope="session")
def smollm2_export(tmp_path_factory) -> Path:
    """SmolLM2-135M exported once per session by the real DAG (tests/dag.py `export_smollm2`) for the end-to-end
    tests that read it (LoRA, quantization); a test puts it in its work dir with `dag.link_smollm2`. Under
    pytest-xdist the workers share one export (the first makes it under a file lock in their common base temp
    folder, the others wait for it and read it)."""
    import os

    from filelock import FileLock

    from dag import SMOLLM2, export_smollm2

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's base, shared by the workers
    workdir = root / "smollm2_export_shared"
    with FileLock(str(workdir) + ".lock"):
        if (workdir / "export.done").is_file():
            return workdir / SMOLLM2
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir()
        folder = export_smollm2(workdir, _validated(TINY))
        (workdir / "export.done").write_text("")
        return folder
