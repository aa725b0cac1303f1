"""Configuration: schema validation of the workflow config and the system files.

The workflow config (``config/config.yaml``) is checked against ``config/config.schema.yaml``
with :func:`snakemake.utils.validate` (which also fills schema defaults). Before that, every
schema violation is collected and reported in one :class:`~accelbench.errors.ConfigError` that
names the key path and the allowed values, so a bad config fails before any rule runs.

Example::

    from accelbench.core.config import load_config
    cfg = load_config("config/config.yaml")
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from accelbench.errors import ConfigError

CONFIG_SCHEMA = Path("config/config.schema.yaml")
SYSTEM_SCHEMA = Path("config/system.schema.yaml")


# YAML is read in core/files.py (the bottom floor: the Slurm site file and system files are read below the core)
from accelbench.core.files import (  # noqa: E402, F401 (the names this module has always offered)
    MAX_EXPANDED_VALUES,
    MAX_YAML_NODES,
    expansion_errors,
    read_yaml,
    yaml_node_count,
)


def key_path(error: jsonschema.ValidationError) -> str:
    """The key of a schema error as a config writes it, e.g. ``lora_finetune.runs[0].devices``."""
    parts: list[str] = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "anyOf" and error.context:  # e.g. `experiments`: `all` or a list
        if isinstance(error.instance, list):  # say what is wrong inside the list
            error = max(
                (e for e in error.context if e.validator != "const" and e.validator != "type"),
                key=lambda e: len(e.absolute_path),
                default=error,
            )
        else:
            where = key_path(error)
            choices = [repr(a["const"]) if "const" in a else f"a list ({a.get('type')})" for a in error.validator_value]
            return f"config key '{where}': {error.instance!r} is not allowed; allowed: {' or '.join(choices)}"
    where = key_path(error)
    if error.validator == "type" and isinstance(error.instance, float):
        if not math.isfinite(error.instance):
            return f"config key '{where}': {error.instance!r} is not allowed (a finite number is needed)"
        if error.instance.is_integer() and "integer" in str(error.validator_value):
            return (
                f"config key '{where}': {error.instance!r} is not an integer (write {int(error.instance)})"
                if abs(error.instance) < 1e15
                else f"config key '{where}': {error.instance!r} is not an integer"
            )
    if error.validator == "type" and isinstance(error.instance, str) and len(error.instance) < 40:
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        parsed = _coerce(error.instance, {"type": wanted}, {})
        if parsed is not error.instance:  # `repeat: "3"` in a config file: YAML's quotes make it a string
            kinds = " or ".join({"integer": "an integer", "number": "a number"}.get(t, t) for t in wanted)
            return f"config key '{where}': {error.instance!r} is a string, not {kinds} (write {json.dumps(parsed)})"
    if error.validator == "enum":
        allowed = ", ".join(repr(v) for v in error.validator_value)
        return f"config key '{where}': {error.instance!r} is not allowed; allowed values: {allowed}"
    if error.validator == "additionalProperties":
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        known = error.schema.get("properties", {})
        extra = [k for k in error.instance if k not in known] if isinstance(error.instance, dict) else []
        if len(extra) > 5:  # 90,000 unknown keys: a few named, the rest counted (not a line of 1 MB)
            named = ", ".join(repr(k)[:80] for k in extra[:5])
            return f"config key '{where}': {len(extra):,} keys are not allowed ({named}, ...); allowed keys: {allowed}"
        return f"config key '{where}': {error.message}; allowed keys: {allowed}"
    return f"config key '{where}': {error.message}"


def load_schema(schema_path: str | Path) -> dict:
    """A JSON schema (YAML or JSON syntax). Names listed in one place only are filled in here: where it has an
    ``experiments`` list (the config schema), the registry's experiments (:mod:`accelbench.core.registry`) and each
    experiment's own block (``experiments/<folder>/<name>.config.schema.yaml`` where the folder has one: its
    properties under the experiment's name, its ``$defs`` beside the others, then its rules module's
    ``config_schema(block)`` hook fills in names it lists itself); where it has a ``backend`` (the system schema), the
    backends' table (:mod:`accelbench.backends`)."""
    from accelbench.backends import BACKENDS
    from accelbench.core import registry

    schema = yaml.safe_load(Path(schema_path).read_text())
    props = schema.get("properties", {})
    for alternative in props.get("experiments", {}).get("anyOf", []):
        if alternative.get("type") == "array":
            alternative["items"]["enum"] = list(registry.names())
            for e in registry.EXPERIMENTS.values():
                path = e.folder / f"{e.name}.config.schema.yaml"
                if path.is_file():
                    block = yaml.safe_load(path.read_text())
                    schema.setdefault("$defs", {}).update(block.pop("$defs", {}))
                    props[e.name] = block
                hook = e.rule_function("config_schema")
                if hook and e.name in props:
                    hook(props[e.name])
    if isinstance(props.get("backend"), dict):
        props["backend"]["enum"] = list(BACKENDS)
    return schema


def _is_integer(checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)  # 2.0 is not a count (JSON Schema says it is)


def _is_number(checker, instance) -> bool:
    return isinstance(instance, (int, float)) and not isinstance(instance, bool) and math.isfinite(instance)


# The config's types, stricter than JSON Schema's: `integer` is an integer literal (not 2.0 or 1e15), `number` a
# finite one (`.nan` and `.inf` pass every `minimum`/`maximum` otherwise: a NaN threshold never flags anything).
Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    ),
)


def schema_errors(instance: Any, schema_path: str | Path, what: str = "config") -> list[str]:
    """All schema violations of ``instance`` as one readable line each (empty when valid). Types are strict
    (:data:`Validator`): ``repeat: 2.0`` and ``.nan`` are refused.

    Args:
        instance: the parsed YAML/JSON object.
        schema_path: path of a JSON schema (YAML or JSON syntax).
        what: name of the checked document, used in the messages.
    """
    validator = Validator(load_schema(schema_path))
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{what}: {_describe(e)}" for e in errors]


def _coerce(value: Any, schema: dict, defs: dict, text: Any = True) -> Any:
    """``value`` with strings turned into the schema's integer/number/boolean/null where the schema has no string
    type and the string parses (Snakemake hands nested ``--config key={a: 5}`` values over as strings).

    ``text`` says which values came in as text: ``True`` every one, a mapping only those under its keys (Snakemake's
    ``--config`` entries), ``None`` none; a YAML config file's values keep their types, so its ``repeat: "3"`` stays
    a string and the schema refuses it."""
    if text is None:
        return value
    if "$ref" in schema:
        schema = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if isinstance(value, dict):
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        extra = extra if isinstance(extra, dict) else {}
        if isinstance(text, Mapping):  # only the keys given as text, each with its own part of ``text``
            return {k: _coerce(v, props.get(k, extra), defs, text[k]) if k in text else v for k, v in value.items()}
        return {k: _coerce(v, props.get(k, extra), defs) for k, v in value.items()}
    if isinstance(text, Mapping):  # given as a mapping, now something else: not the text it was given as
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_coerce(v, schema["items"], defs) for v in value]
    if isinstance(value, str) and types and "string" not in types:
        parsed = yaml.safe_load(value) if value.strip() else value
        wanted = {"integer": int, "number": (int, float), "boolean": bool, "null": type(None)}
        for t in types:
            if t in wanted and isinstance(parsed, wanted[t]) and not (t != "boolean" and isinstance(parsed, bool)):
                return parsed
    return value


def coerce_to_schema(config: dict, schema_path: str | Path = CONFIG_SCHEMA, text: Any = True) -> dict:
    """Coerce string leaves of ``config`` in place to the schema's types (see :func:`_coerce`; ``text``: which
    values came in as text); returns it."""
    schema = load_schema(schema_path)
    coerced = _coerce(config, schema, schema.get("$defs", {}), text)
    config.clear()
    config.update(coerced)
    return config


def results_dir_errors(value) -> list[str]:
    """``results_dir`` must not be ``/`` nor lie in a folder of the operating system
    (:data:`accelbench.core.files.SYSTEM_DIRS`: results would be written among its files, as root), judged after
    following every link (``results -> /etc``) from the working directory, relative folders included; a ``~`` that
    names no home here, or a home that is no folder (``~nobody`` is ``/nonexistent``), is refused
    (:func:`validate_config` checks it before it expands ``~/x``), and so is a path whose top folder does not exist
    (``/nonexistent/x``: it would be created at the filesystem's root, as root)."""
    import os

    from accelbench.core.files import os_folder

    if not isinstance(value, str) or not value.strip():
        return []
    if value.startswith("~"):
        user = value.split("/")[0]
        home = os.path.expanduser(user)
        if home.startswith("~"):
            return [
                f"config key 'results_dir': {value!r}: {user} is no home folder here; "
                f"give the full path (default: results)"
            ]
        if not os.path.isdir(home):  # nobody's home is /nonexistent: a new top folder would be made as root
            return [
                f"config key 'results_dir': {value!r}: the home folder of {user} ({home}) does not exist or is not a"
                f" folder; give the full path of a folder of your own (default: results)"
            ]
    top = os.path.join("/", *os.path.abspath(os.path.expanduser(value)).split("/")[1:2])
    if not os.path.isdir(top):  # `/nonexistent/x`: never a new folder at the filesystem's root
        return [
            f"config key 'results_dir': {value!r}: its top folder {top} does not exist (it would be created at the"
            f" filesystem's root); give a folder inside an existing one (default: results)"
        ]
    resolved = os_folder(os.path.expanduser(value))
    if resolved:
        return [
            f"config key 'results_dir': {value!r} ({resolved}) is a folder of the operating system;"
            f" give a folder of your own (default: results)"
        ]
    return []


def cross_field_errors(config: dict) -> list[str]:
    """Constraints between keys that a JSON schema cannot express, one line each naming the key (empty: none):
    ``results_dir`` not a folder of the operating system (:func:`results_dir_errors`), then each experiment's own
    (its rules module's ``config_errors(config)``, e.g. Study A's channels divisible by the norm groups)."""
    from accelbench.core import registry

    out = results_dir_errors(config.get("results_dir"))
    for e in registry.EXPERIMENTS.values():
        hook = e.rule_function("config_errors")
        if hook:
            out += hook(config)
    return out


@contextlib.contextmanager
def merged_schema_file(schema_path: str | Path) -> Iterator[Path]:
    """:func:`load_schema` of ``schema_path`` (the experiments' own blocks merged in) as a JSON file that Snakemake's
    ``validate`` can read (it takes a path), built for this call in a private folder of its own
    (``tempfile.TemporaryDirectory``, mode 700) and removed after: never a predictable name in a shared temp folder
    that another user could plant first or that would block another user."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory(prefix="accelbench-schema-") as folder:
        path = Path(folder) / "config.schema.json"
        path.write_text(json.dumps(load_schema(schema_path)))
        yield path


def validate_config(config: dict, schema_path: str | Path = CONFIG_SCHEMA, text: Any = True) -> dict:
    """Validate ``config`` in place (string leaves coerced to the schema's types, defaults filled) and return it.

    ``text``: which values came in as text and are coerced (:func:`_coerce`): ``True`` all of them, or the
    mapping of Snakemake's ``--config`` entries (``workflow.config_settings.config``), so that a config file's
    quoted ``repeat: "3"`` is refused naming its key rather than read as 3.

    Raises:
        ConfigError: listing every violation (key path and allowed values), then the cross-field ones
            (:func:`cross_field_errors`).
    """
    problems = expansion_errors(config)  # before anything walks or writes it out
    if problems:
        raise ConfigError(problems[0])
    if config.get("experiments") == "all":  # every study experiment of the registry, in its order
        from accelbench.core.registry import names

        config["experiments"] = list(names())
    coerce_to_schema(config, schema_path, text)
    problems = schema_errors(config, schema_path)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    from snakemake.utils import validate  # fills defaults declared in the schema

    with merged_schema_file(schema_path) as merged:
        validate(config, str(merged), set_default=True)
    if isinstance(config.get("results_dir"), str) and config["results_dir"].startswith("~"):
        import os

        problems = results_dir_errors(config["results_dir"])  # the `~user` said as given, before it is expanded
        if problems:
            raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
        config["results_dir"] = os.path.expanduser(config["results_dir"])  # the home's x, not a folder named `~`
    problems = cross_field_errors(config)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return config


def load_config(path: str | Path, schema_path: str | Path = CONFIG_SCHEMA) -> dict:
    """Read a YAML config file and validate it (see :func:`validate_config`).

    Raises:
        ConfigError: the file is missing, not YAML (:func:`read_yaml`: duplicate keys, alias bombs), or fails the
            schema.
    """
    path = Path(path)
    config = read_yaml(path)
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
