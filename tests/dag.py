"""Helpers of the end-to-end tests: run the real Snakemake DAG in a temporary working directory."""

from __future__ import annotations

import os
import shutil
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


SMOLLM2 = "resources/llm/smollm2_135m"


def export_smollm2(workdir: Path, config: dict) -> Path:
    """``<workdir>/resources/llm/smollm2_135m`` made by the real DAG (rule ``llm_export``: the bundled GGUF exported
    to float32 safetensors, about 30-60 s on 2 cores). Returns the folder; AssertionError with the DAG's output when
    the export fails. The ``smollm2_export`` fixture (conftest.py) runs it once per session."""
    write_config(workdir, config, ["llm_quant", "lora_finetune"])
    proc = snakemake(workdir, SMOLLM2)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    folder = workdir / SMOLLM2
    assert (folder / "model.safetensors").stat().st_size > 0 and (folder / "config.json").is_file()
    assert (workdir / "logs/llm_export/smollm2_135m.log").is_file()
    return folder


def link_smollm2(folder: Path, workdir: Path) -> None:
    """An export (:func:`export_smollm2`) at ``<workdir>/resources/llm/smollm2_135m``, hard-linked (no copy of the
    0.5 GB of weights): the DAG there finds its input made and runs only the experiment's jobs."""
    shutil.copytree(folder, workdir / SMOLLM2, copy_function=os.link)
