"""Shared fixtures: repository paths, a tiny Study A config, and a CPU system."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    """Package defaults (config/..., resources/...) are relative to the repository root."""
    monkeypatch.chdir(REPO)


@pytest.fixture
def default_config() -> dict:
    return yaml.safe_load((REPO / "config/config.yaml").read_text())


@pytest.fixture
def tiny_config(default_config) -> dict:
    """The embedded default shrunk to 16^3 and width 8: seconds per configuration on a CPU."""
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"].update(warmup=1, repeat=2, quality_sample_steps=2)
    cfg["unet3d_profile"]["scales"]["small"] = {"volume": [16, 16, 16], "base_channels": 8, "norm_groups": 4,
                                                 "attention_resolutions": [2]}
    return cfg


@pytest.fixture
def systems():
    from accelbench.systems import load_systems

    return load_systems(REPO / "config/systems", REPO / "config/system.schema.yaml")
