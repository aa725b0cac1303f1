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
    # the tables of these runs hold what they measured; the committed reference runs (reference_runs/, drawn beside
    # every fresh run by default) are tested on their own (tests/test_reference_runs.py)
    cfg["reference_runs"] = False
    cfg["unet3d_profile"].update(warmup=1, repeat=2, quality_sample_steps=2)
    cfg["unet3d_profile"]["scales"]["small"] = {"volume": [16, 16, 16], "base_channels": 8, "norm_groups": 4,
                                                 "attention_resolutions": [2]}
    # SR3 (Study B): 8 -> 32 px, width 8, 3 levels, a few iterations
    cfg["sr3_scaling"].update(precisions=["fp32"], workload_iterations=8, max_iterations=8, warmup=1, quality_images=2,
                              quality_sample_steps=4)
    cfg["sr3_scaling"]["scales"]["small"] = {"hr_size": 32, "inner_channels": 8, "norm_groups": 4, "num_res_blocks": 1,
                                             "channel_mult": [1, 2, 2], "attention_resolutions": [8]}
    # LoRA (Study B): real SmolLM2-135M, 16-token blocks, 1 + 2 optimizer steps per run
    cfg["lora_finetune"]["scales"]["small"] = {"seq_len": 16, "warmup_steps": 1, "timed_steps": 2, "eval_blocks": 2}
    # Quantization (Study B): real SmolLM2-135M, 16/32-token texts, prune sensitivity only, one bit set per method
    cfg["llm_quant"].update(sensitivity_tokens=16, eval_tokens=32, chunk_len=16, sensitivity_metrics=["prune"],
                            submodules="none", throughput={"batch": 1, "seq_len": 16, "warmup": 1, "repeat": 2},
                            bitsets={"fake": [[8, 4, 4]], "torchao": [[16, 8, 8], [8, 4, 4]]})
    return cfg


@pytest.fixture
def systems():
    from accelbench.systems import load_systems

    return load_systems(REPO / "config/systems", REPO / "config/system.schema.yaml")
