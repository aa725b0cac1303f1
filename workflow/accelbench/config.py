"""Configuration: schema validation of the workflow config and the system files.

The workflow config (``config/config.yaml``) is checked against ``config/config.schema.yaml``
with :func:`snakemake.utils.validate` (which also fills schema defaults). Before that, every
schema violation is collected and reported in one :class:`~accelbench.errors.ConfigError` that
names the key path and the allowed values, so a bad config fails before any rule runs.

Example::

    from accelbench.config import load_config
    cfg = load_config("config/config.yaml")
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import ConfigError

CONFIG_SCHEMA = Path("config/config.schema.yaml")
SYSTEM_SCHEMA = Path("config/system.schema.yaml")


def _key_path(error: jsonschema.ValidationError) -> str:
    parts: list[str] = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "anyOf" and error.context:  # e.g. `experiments`: `all` or a list
        if isinstance(error.instance, list):  # say what is wrong inside the list
            error = max((e for e in error.context if e.validator != "const" and e.validator != "type"),
                        key=lambda e: len(e.absolute_path), default=error)
        else:
            where = _key_path(error)
            choices = [repr(a["const"]) if "const" in a else f"a list ({a.get('type')})" for a in error.validator_value]
            return f"config key '{where}': {error.instance!r} is not allowed; allowed: {' or '.join(choices)}"
    where = _key_path(error)
    if error.validator == "enum":
        allowed = ", ".join(repr(v) for v in error.validator_value)
        return f"config key '{where}': {error.instance!r} is not allowed; allowed values: {allowed}"
    if error.validator == "additionalProperties":
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        return f"config key '{where}': {error.message}; allowed keys: {allowed}"
    return f"config key '{where}': {error.message}"


def load_schema(schema_path: str | Path) -> dict:
    """A JSON schema (YAML or JSON syntax). Names listed in one place only are filled in here: where it has an
    ``experiments`` list (the config schema), the registry's experiments (:mod:`accelbench.registry`); where it has
    a ``backend`` (the system schema), the backends' table (:mod:`accelbench.backends`); SR3's configuration names
    from :mod:`accelbench.experiments.sr3_configs`."""
    from .backends import BACKENDS
    from .experiments.sr3_configs import CONFIGURATIONS
    from .registry import names

    schema = yaml.safe_load(Path(schema_path).read_text())
    props = schema.get("properties", {})
    for alternative in props.get("experiments", {}).get("anyOf", []):
        if alternative.get("type") == "array":
            alternative["items"]["enum"] = list(names())
    if isinstance(props.get("backend"), dict):
        props["backend"]["enum"] = list(BACKENDS)
    sr3 = props.get("sr3_scaling", {}).get("properties", {}).get("configurations")
    if sr3:
        sr3["items"]["enum"] = list(CONFIGURATIONS)
    return schema


def schema_errors(instance: Any, schema_path: str | Path, what: str = "config") -> list[str]:
    """All schema violations of ``instance`` as one readable line each (empty when valid).

    Args:
        instance: the parsed YAML/JSON object.
        schema_path: path of a JSON schema (YAML or JSON syntax).
        what: name of the checked document, used in the messages.
    """
    validator = jsonschema.Draft202012Validator(load_schema(schema_path))
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{what}: {_describe(e)}" for e in errors]


def _coerce(value: Any, schema: dict, defs: dict) -> Any:
    """``value`` with strings turned into the schema's integer/number/boolean/null where the schema has no string
    type and the string parses (Snakemake hands nested ``--config key={a: 5}`` values over as strings)."""
    if "$ref" in schema:
        schema = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if isinstance(value, dict):
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        return {k: _coerce(v, props.get(k, extra if isinstance(extra, dict) else {}), defs) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_coerce(v, schema["items"], defs) for v in value]
    if isinstance(value, str) and types and "string" not in types:
        parsed = yaml.safe_load(value) if value.strip() else value
        wanted = {"integer": int, "number": (int, float), "boolean": bool, "null": type(None)}
        for t in types:
            if t in wanted and isinstance(parsed, wanted[t]) and not (t != "boolean" and isinstance(parsed, bool)):
                return parsed
    return value


def coerce_to_schema(config: dict, schema_path: str | Path = CONFIG_SCHEMA) -> dict:
    """Coerce string leaves of ``config`` in place to the schema's types (see :func:`_coerce`); returns it."""
    schema = load_schema(schema_path)
    coerced = _coerce(config, schema, schema.get("$defs", {}))
    config.clear()
    config.update(coerced)
    return config


def _divisible(where: str, what: str, channels: list[int], attention: list[int], p: dict) -> list[str]:
    """MONAI's DiffusionModelUNet needs every level's channels divisible by norm_groups, and the channels of each
    attention level by num_heads (head width = channels / num_heads)."""
    out = []
    for key, checked in (("norm_groups", channels), ("num_heads", attention)):
        bad = [c for c in checked if c % p[key]]
        if bad:
            out.append(f"config key '{where}': channels {bad} ({what}{', attention levels' if key == 'num_heads' else ''})"
                       f" are not multiples of {key} {p[key]}")
    return out


def cross_field_errors(config: dict) -> list[str]:
    """Constraints between keys that a JSON schema cannot express, one line each naming the key (empty: none).

    * ``lora_finetune.models``: every name is a key of ``lora_finetune.presets``;
    * Study A presets at every scale: channels (base_channels x channel_mult) divisible by norm_groups (and by
      num_heads at attention levels);
      each volume side divisible by 2**(levels - 1) (levels = len(channel_mult), so six levels need multiples of 32);
    * SR3 preset at every scale: the same for inner_channels x channel_mult (hr_size is checked by
      ``sr3_scaling.resolve_settings``).
    """
    out = []
    lora = config.get("lora_finetune") or {}
    for i, name in enumerate(lora.get("models", [])):
        if name not in (lora.get("presets") or {}):
            out.append(f"config key 'lora_finetune.models[{i}]': {name!r} is not a key of lora_finetune.presets "
                       f"(known: {', '.join(sorted(lora.get('presets') or {})) or 'none'})")
    u = config.get("unet3d_profile") or {}
    for name, preset in (u.get("presets") or {}).items():
        for scale in ("paper", "small"):
            p = dict(preset, **((u.get("scales") or {}).get(scale) or {}))
            where = f"unet3d_profile.presets.{name}" + (f" with unet3d_profile.scales.{scale}" if scale != "paper" else "")
            channels = [p["base_channels"] * m for m in p["channel_mult"]]
            factors = {p["volume"][0] // r for r in p["attention_resolutions"] if p["volume"][0] % r == 0}
            attention = [c for level, c in enumerate(channels) if 2**level in factors]
            out += _divisible(where, "base_channels x channel_mult", channels, attention, p)
            step = 2 ** (len(p["channel_mult"]) - 1)
            if any(v % step for v in p["volume"]):
                out.append(f"config key '{where}': volume {p['volume']} must be a multiple of {step} per side "
                           f"({len(p['channel_mult'])} U-Net levels halve it {len(p['channel_mult']) - 1} times)")
    sr3 = config.get("sr3_scaling") or {}
    if sr3.get("preset"):
        for scale in ("paper", "small"):
            p = dict(sr3["preset"], **((sr3.get("scales") or {}).get(scale) or {}))
            where = "sr3_scaling.preset" + (f" with sr3_scaling.scales.{scale}" if scale != "paper" else "")
            channels = [p["inner_channels"] * m for m in p["channel_mult"]]
            attention = [c for level, c in enumerate(channels) if p["hr_size"] // 2**level in p["attention_resolutions"]]
            out += _divisible(where, "inner_channels x channel_mult", channels, attention, p)
    return out


def validate_config(config: dict, schema_path: str | Path = CONFIG_SCHEMA) -> dict:
    """Validate ``config`` in place (string leaves coerced to the schema's types, defaults filled) and return it.

    Raises:
        ConfigError: listing every violation (key path and allowed values), then the cross-field ones
            (:func:`cross_field_errors`).
    """
    if config.get("experiments") == "all":  # every study experiment of the registry, in its order
        from .registry import names

        config["experiments"] = list(names())
    coerce_to_schema(config, schema_path)
    problems = schema_errors(config, schema_path)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    from snakemake.utils import validate  # fills defaults declared in the schema

    validate(config, str(schema_path), set_default=True)
    problems = cross_field_errors(config)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return config


def load_config(path: str | Path, schema_path: str | Path = CONFIG_SCHEMA) -> dict:
    """Read a YAML config file and validate it (see :func:`validate_config`).

    Raises:
        ConfigError: the file is missing, not YAML, or fails the schema.
    """
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"config file {path} must hold a mapping, found {type(config).__name__}")
    return validate_config(config, schema_path)


def deep_merge(base: dict, override: dict) -> dict:
    """Return a copy of ``base`` with ``override`` merged in (nested dicts merged, the rest replaced)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
