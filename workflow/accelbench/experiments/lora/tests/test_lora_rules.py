"""The rule functions of Study B's LoRA fine-tuning (experiments/lora/rules.py) and of the network smoke test
(experiments/net_smoke/rules.py), without Snakemake: result paths, specs, model inputs, exported models, checks."""

import json
from pathlib import Path

import pytest

from accelbench.core.config import validate_config
from accelbench.core.rule_context import RuleContext
from accelbench.errors import ConfigError
from accelbench.experiments.lora import rules
from accelbench.experiments.net_smoke import rules as net_smoke_rules

REPO = Path(__file__).resolve().parents[5]


class Wildcards(dict):
    __getattr__ = dict.__getitem__


def _rc(config, systems, system="cpu"):
    return RuleContext(validate_config(config), systems[system], "results", REPO)


def test_results_follow_the_runs_and_series(tiny_config, systems):
    cfg = dict(tiny_config, experiments=["lora_finetune"])
    cfg["lora_finetune"] = dict(
        cfg["lora_finetune"],
        series=["faithful", "ours"],
        runs=[
            {"strategy": "single", "attention": ["eager", "flash"], "devices": [1]},
            {"strategy": "ddp", "attention": ["flash"], "devices": [2], "series": ["ours"]},
        ],
    )
    rc = _rc(cfg, systems)
    model = cfg["lora_finetune"]["models"][0]
    base = f"results/cpu/lora_finetune/{model}"
    assert rules.results(rc, "cpu") == [
        f"{base}/faithful/eager/single/n1/result.json",
        f"{base}/faithful/flash/single/n1/result.json",
        f"{base}/eager/single/n1/result.json",  # ours: no series level
        f"{base}/flash/single/n1/result.json",
        f"{base}/flash/ddp/n2/result.json",
    ]


def test_spec_reads_the_series_from_the_path_and_is_json(tiny_config, systems):
    cfg = dict(tiny_config, experiments=["lora_finetune"])
    rc = _rc(cfg, systems)
    model = cfg["lora_finetune"]["models"][0]
    w = Wildcards(model=model, attention="flash", strategy="ddp", devices="2")
    ours = rules.spec(rc, w)
    faithful = rules.spec(rc, Wildcards(w, series="faithful"))
    assert list(ours)[:3] == ["system", "noise", "energy"] and ours["devices"] == 2
    assert (ours["series"], faithful["series"]) == ("ours", "faithful")
    assert ours["model"] == rules.model_spec(rc, model)
    json.dumps(ours)  # the spec file is its JSON


def test_bundled_model_is_read_from_its_export_and_listed_for_export(default_config, systems):
    rc = _rc(dict(default_config), systems)
    presets = default_config["lora_finetune"]["presets"]
    gguf = next(name for name, p in presets.items() if p["source"] == "smollm2_gguf")
    assert rules.model_spec(rc, gguf) == {"source": "path", "path": f"resources/llm/{gguf}"}
    assert rules.model_input(rc, Wildcards(model=gguf)) == {"model_dir": f"resources/llm/{gguf}"}
    specs = rules.model_specs(rc)
    assert set(specs) == set(presets) and all("family" not in s for s in specs.values())
    random = [name for name, p in presets.items() if p.get("tokenizer") == "smollm2_gguf"]
    for name in random:  # SmolLM2's tokenizer from its folder, never the GGUF
        assert specs[name]["tokenizer"] != "smollm2_gguf"
        assert rules.model_input(rc, Wildcards(model=name)) == {"tokenizer_dir": specs[name]["tokenizer"]}


def test_check_and_config_errors_name_the_key(tiny_config, systems):
    cfg = dict(tiny_config, experiments=["lora_finetune"])
    cfg["lora_finetune"] = dict(
        cfg["lora_finetune"], runs=[{"strategy": "ddp", "attention": ["flash"], "devices": [6]}]
    )
    with pytest.raises(ConfigError, match="lora_finetune.runs devices: 6 devices do not fill whole nodes"):
        rules.check(_rc(cfg, systems, "a100"))
    errors = rules.config_errors({"lora_finetune": {"models": ["nope"], "presets": {"a": {}}}})
    assert errors == ["config key 'lora_finetune.models[0]': 'nope' is not a key of lora_finetune.presets (known: a)"]
    assert rules.config_errors({}) == []


def test_net_smoke_is_asked_by_path_only(default_config, systems):
    rc = _rc(dict(default_config), systems)
    assert net_smoke_rules.results(rc, "cpu") == []
    assert net_smoke_rules.spec(rc, Wildcards(devices="4")) == {"system": systems["cpu"].to_dict(), "devices": 4}


@pytest.mark.parametrize("value", [1_000_000_000, float("nan"), 0, 2.5])
def test_per_scale_overrides_are_typed_and_bounded_as_train_is(tiny_config, value):
    """`lora_finetune.scales.small.timed_steps: 1000000000` (or `.nan`) planned a job past the
    10,000-step maximum of `train`; the per-scale override is now typed and bounded as `train` is."""
    cfg = json.loads(json.dumps(tiny_config))
    cfg["lora_finetune"]["scales"]["small"]["timed_steps"] = value
    with pytest.raises(ConfigError, match=r"lora_finetune\.scales\.small\.timed_steps"):
        validate_config(cfg)
    cfg = json.loads(json.dumps(tiny_config))
    cfg["lora_finetune"]["scales"]["paper"] = {"timed_steps": 10000}  # the same bound, reached: valid, no defaults
    validate_config(cfg)
    assert cfg["lora_finetune"]["scales"]["paper"] == {"timed_steps": 10000}
