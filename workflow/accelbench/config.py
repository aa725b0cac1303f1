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
    where = _key_path(error)
    if error.validator == "enum":
        allowed = ", ".join(repr(v) for v in error.validator_value)
        return f"config key '{where}': {error.instance!r} is not allowed; allowed values: {allowed}"
    if error.validator == "additionalProperties":
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        return f"config key '{where}': {error.message}; allowed keys: {allowed}"
    return f"config key '{where}': {error.message}"


def schema_errors(instance: Any, schema_path: str | Path, what: str = "config") -> list[str]:
    """All schema violations of ``instance`` as one readable line each (empty when valid).

    Args:
        instance: the parsed YAML/JSON object.
        schema_path: path of a JSON schema (YAML or JSON syntax).
        what: name of the checked document, used in the messages.
    """
    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{what}: {_describe(e)}" for e in errors]


def validate_config(config: dict, schema_path: str | Path = CONFIG_SCHEMA) -> dict:
    """Validate ``config`` in place (defaults filled) and return it.

    Raises:
        ConfigError: listing every violation (key path and allowed values).
    """
    problems = schema_errors(config, schema_path)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    from snakemake.utils import validate  # fills defaults declared in the schema

    validate(config, str(schema_path), set_default=True)
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
