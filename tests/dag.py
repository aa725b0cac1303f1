"""Helpers of the end-to-end tests: run the real Snakemake DAG in a temporary working directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2"]


def write_config(workdir: Path, config: dict, experiments: list[str]) -> None:
    """``<workdir>/config.yaml``: ``config`` restricted to ``experiments`` (each has an end-to-end test of its own)."""
    (workdir / "config.yaml").write_text(yaml.safe_dump(dict(config, experiments=experiments)))


def snakemake(workdir: Path, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    """``snakemake <args>`` on the repository's Snakefile with ``<workdir>/config.yaml``, run in ``workdir``.
    Targets go first: ``--configfile`` takes every argument after it."""
    return subprocess.run(
        [*SNAKEMAKE, *args, "-d", str(workdir), "--configfile", str(workdir / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
