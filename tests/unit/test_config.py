import copy

import pytest
import yaml

from accelbench.core.config import deep_merge, load_config, validate_config
from accelbench.errors import ConfigError


def test_default_config_is_valid_and_gets_defaults(default_config):
    cfg = copy.deepcopy(default_config)
    del cfg["unet3d_profile"]["warmup"]
    validate_config(cfg)
    assert cfg["unet3d_profile"]["warmup"] == 2  # filled from the schema


def test_bad_enum_names_key_and_allowed_values(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"]["configurations"] = ["baseline", "tf33"]
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    msg = str(err.value)
    assert "unet3d_profile.configurations[1]" in msg and "'tf33'" in msg
    assert "'tf32_channels_last_3d'" in msg  # the allowed values are listed


def test_unknown_key_lists_allowed_keys(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"]["repeats"] = 3
    with pytest.raises(ConfigError, match=r"unet3d_profile.*'repeats'.*allowed keys:.*repeat"):
        validate_config(cfg)


def test_wrong_type_and_all_errors_reported(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"]["repeat"] = 0
    cfg["data"]["mri"]["source"] = "hub"
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert "unet3d_profile.repeat" in str(err.value) and "data.mri.source" in str(err.value)


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("system: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_volume_must_be_divisible_by_16(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"]["scales"]["small"]["volume"] = [30, 32, 32]
    with pytest.raises(ConfigError, match=r"scales.small.volume\[0\]"):
        validate_config(cfg)


def test_deep_merge():
    assert deep_merge({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"b": 3}}) == {"a": {"b": 3, "c": 2}, "d": 1}


def test_tiny_example_is_what_the_tests_run_and_validates(default_config, tiny_config):
    """config/examples/tiny.yaml (what `snakemake --configfile config/examples/tiny.yaml` merges over the default)
    holds overrides of known keys only, and the merged tiny configuration validates against the schema."""
    from accelbench.core.config import schema_errors
    from conftest import REPO, TINY

    tiny = yaml.safe_load(TINY.read_text())
    assert tiny and set(tiny) <= set(default_config)
    assert schema_errors(copy.deepcopy(tiny_config), REPO / "config/config.schema.yaml") == []
    validate_config(copy.deepcopy(tiny_config))
    assert tiny_config["unet3d_profile"]["scales"]["small"]["volume"] == [16, 16, 16]
