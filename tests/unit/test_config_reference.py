"""The schema is the one place a default is written: docs/configuration.md is generated from it and current, names
every key, and config/config.yaml restates no default (it holds only the embedded run's choices)."""

from __future__ import annotations

import copy

import pytest
import yaml

from accelbench.cli import main
from accelbench.core.config import load_schema, read_yaml, validate_config
from accelbench.core.config_reference import DOC, render, restated_defaults
from conftest import REPO

SCHEMA = REPO / "config/config.schema.yaml"


@pytest.fixture(scope="module")
def schema() -> dict:
    return load_schema(SCHEMA)


def leaf_paths(s: dict, defs: dict, path: str = "") -> list[str]:
    """Every leaf key of a schema (walked apart from the generator): properties, free keys (<name>), items ([])."""
    while "$ref" in s:
        s = defs[s["$ref"].rsplit("/", 1)[-1]]
    subs = [(f"{path}.{k}".lstrip("."), v) for k, v in s.get("properties", {}).items()]
    if isinstance(s.get("additionalProperties"), dict):
        subs.append((f"{path}.<name>", s["additionalProperties"]))
    if isinstance(s.get("items"), dict) and ("properties" in s["items"] or "$ref" in s["items"]):
        subs.append((f"{path}[]", s["items"]))
    if not subs:
        return [path]
    return [leaf for p, sub in subs for leaf in leaf_paths(sub, defs, p)]


def test_configuration_doc_is_current(schema):
    assert (REPO / DOC).read_text() == render(schema), (
        f"{DOC} is stale: the config schema changed; run `accelbench config-reference`"
    )


def test_configuration_doc_names_every_leaf_key(schema):
    text = (REPO / DOC).read_text()
    leaves = leaf_paths(schema, schema["$defs"])
    assert (
        len(leaves) > 200 and "lora_finetune.runs[].strategy" in leaves and "llm_quant.models.<name>.source" in leaves
    )
    missing = [leaf for leaf in leaves if f"| `{leaf}` |" not in text]
    assert not missing, f"keys of the schema missing from {DOC}: {missing}"
    # each default as the schema writes it
    assert "| `unet3d_profile.micro_batches` | integer | >= 1; <= 64 | `2` |" in text


def test_config_yaml_restates_no_default(schema):
    restated = restated_defaults(read_yaml(REPO / "config/config.yaml"), schema)
    assert not restated, (
        "config/config.yaml restates these schema defaults (the schema is the one place a default is written; "
        f"remove them): {', '.join(restated)}"
    )


def test_a_restated_default_is_named(schema):
    """The check above can fail: defaults written into a copy of config/config.yaml are each named by key path."""
    config = read_yaml(REPO / "config/config.yaml")
    config["noise"] = {"spread_max": 1.5, "cpu_other_max": 0.2}  # 0.2 differs from the default 0.10
    config["lora_finetune"]["train"] = {"seq_len": 512, "lr": 3e-4, "precision": "fp32"}
    config["unet3d_profile"]["micro_batches"] = 2
    config["sr3_scaling"]["ddp"] = {}
    config["energy"] = {"window_s": 1}  # 1 is the default 1.0 as a config writes it
    config["llm_quant"]["reuse_prefix"] = 1  # not the default `true`: 1 is no boolean
    found = restated_defaults(config, schema)
    assert sorted(found) == sorted(
        [
            "noise.spread_max",
            "lora_finetune.train.seq_len",
            "lora_finetune.train.lr",
            "unet3d_profile.micro_batches",
            "sr3_scaling.ddp",
            "energy.window_s",
        ]
    ), found


def test_the_stripped_config_is_complete_once_validated(default_config):
    """Blocks left out of config/config.yaml come back whole from their schema defaults (what the jobs read)."""
    assert default_config["data"]["mri"] == {"source": "mni152", "folder": None, "case": None, "label_values": [1, 2]}
    assert default_config["lora_finetune"]["train"]["seq_len"] == 512
    assert default_config["unet3d_ncu"]["configurations"] == [
        "baseline",
        "tf32",
        "channels_last_3d",
        "tf32_channels_last_3d",
    ]
    assert default_config["unet3d_profile"]["network"] == "med_ddpm"
    raw = read_yaml(REPO / "config/config.yaml")
    assert "data" not in raw and "network" not in raw["unet3d_profile"]  # stated once, in the schema
    again = validate_config(copy.deepcopy(default_config), SCHEMA)
    assert yaml.safe_dump(again) == yaml.safe_dump(default_config)


def test_config_reference_command_writes_and_checks(tmp_path, capsys):
    out = tmp_path / "configuration.md"
    assert main(["config-reference", "--out", str(out), "--check"]) == 2  # missing: out of date
    assert main(["config-reference", "--out", str(out)]) == 0
    assert out.read_text() == (REPO / DOC).read_text()
    assert main(["config-reference", "--out", str(out), "--check"]) == 0
    out.write_text(out.read_text().replace("`2`", "`3`", 1))
    assert main(["config-reference", "--out", str(out), "--check"]) == 2
    assert "out of date (run `accelbench config-reference`)" in capsys.readouterr().err


def test_lora_settings_defaults_are_the_schemas(schema):
    """LoraSettings (experiments/lora/settings.py) keeps defaults for hand-built settings; they must be the schema's
    `lora_finetune.train` defaults, key for key (the schema is the one place a default is decided)."""
    import dataclasses

    from accelbench.experiments.lora.settings import LoraSettings

    train = schema["properties"]["lora_finetune"]["properties"]["train"]["properties"]
    python = {f.name: f.default for f in dataclasses.fields(LoraSettings)}
    assert set(python) == set(train)
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in python.items()}
    differ = {k: (v, train[k]["default"]) for k, v in plain.items() if v != train[k]["default"]}
    assert not differ, f"LoraSettings defaults that differ from the schema's (Python, schema): {differ}"
