"""The configuration reference, ``docs/configuration.md``, written from the merged config schema
(:func:`accelbench.core.config.load_schema`: ``config/config.schema.yaml`` plus each experiment's own block): every
key path, its type, allowed values and bounds, default and description. The schema is the one place a default is
written; ``config/config.yaml`` holds only the embedded CPU run's choices (:func:`restated_defaults` finds a key
that restates its default).

Example::

    accelbench config-reference                 # writes docs/configuration.md
    accelbench config-reference --check         # exit 2 when it is not current
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

DOC = Path("docs/configuration.md")
BOUNDS = {
    "minimum": ">= {}",
    "exclusiveMinimum": "> {}",
    "maximum": "<= {}",
    "exclusiveMaximum": "< {}",
    "multipleOf": "multiple of {}",
    "minItems": "at least {} item(s)",
    "maxItems": "at most {} item(s)",
    "minProperties": "at least {} key(s)",
}
HEADER = """# Configuration reference

Back to the [README](../README.md).

Every setting of the workflow configuration: its key path, type, allowed values, default and meaning, generated
from the schema (`config/config.schema.yaml` and each experiment's
`workflow/accelbench/experiments/<folder>/<name>.config.schema.yaml`), the one place a default is written.
`config/config.yaml` (the embedded CPU run) sets only what differs from these defaults and the keys without one;
a key left out of a config takes its default. `<name>` stands for a key of your choosing, `[]` for each item of a
list. Regenerate this page after changing a schema (a test fails while it is stale):

```bash
accelbench config-reference
```
"""


def _resolve(schema: dict, defs: dict) -> dict:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
    return schema if isinstance(schema, dict) else {}


def _children(schema: dict, defs: dict) -> Iterator[tuple[str, dict, bool]]:
    """(suffix, subschema, required) of an object's properties, its free keys (``.<name>``) and a list's items
    (``[]``)."""
    for key, sub in schema.get("properties", {}).items():
        yield f".{key}", _resolve(sub, defs), key in schema.get("required", [])
    extra = _resolve(schema.get("additionalProperties"), defs)
    if extra:
        yield ".<name>", extra, False
    items = _resolve(schema.get("items"), defs)
    if items.get("properties") or items.get("additionalProperties"):
        yield "[]", items, False


def walk(schema: dict, defs: dict, path: str = "") -> Iterator[tuple[str, dict, bool]]:
    """Every key path of ``schema`` with its (resolved) subschema and whether it is required, parents first."""
    for suffix, sub, required in _children(schema, defs):
        here = (path + suffix).lstrip(".")
        yield here, sub, required
        yield from walk(sub, defs, here)


def _value(v: Any) -> str:
    """``v`` as a config writes it (YAML flow style)."""
    return yaml.safe_dump(v, default_flow_style=True, width=10**6, sort_keys=False).removesuffix("...\n").strip()


def _type(s: dict, defs: dict) -> str:
    if "anyOf" in s:
        return " or ".join(_type(_resolve(a, defs), defs) for a in s["anyOf"])
    if "const" in s:
        return _value(s["const"])
    names = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}
    types = s.get("type") or " or ".join(dict.fromkeys(names.get(type(v), "any") for v in s.get("enum", []))) or "any"
    types = " or ".join(types) if isinstance(types, list) else types
    items = _resolve(s.get("items"), defs)
    if types == "array" and items and not items.get("properties"):
        types += f" of {_type(items, defs)}"
    return types


def _allowed(s: dict, defs: dict) -> str:
    out = []
    if "enum" in s:
        out.append(" | ".join(f"`{_value(v)}`" for v in s["enum"]))
    out += [fmt.format(_value(s[k])) for k, fmt in BOUNDS.items() if k in s]
    if "pattern" in s:
        out.append(f"matches `{s['pattern']}`")
    if s.get("uniqueItems"):
        out.append("no repeats")
    if "pattern" in s.get("propertyNames", {}):
        out.append(f"keys match `{s['propertyNames']['pattern']}`")
    for alternative in s.get("anyOf", []):
        out.append(_allowed(_resolve(alternative, defs), defs))
    items = _resolve(s.get("items"), defs)
    if items and not items.get("properties") and _allowed(items, defs):
        out.append(f"each: {_allowed(items, defs)}")
    return "; ".join(o for o in out if o)


def _cell(text: str) -> str:
    """One table cell: one line, ``|`` escaped, a ``<`` that would open an HTML tag escaped outside code spans."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else re.sub(r"<(?=[A-Za-z/!?])", "&lt;", p) for i, p in enumerate(parts))


def _row(defs: dict, path: str, s: dict, required: bool, description: bool = True) -> str:
    default = f"`{_value(s['default'])}`" if "default" in s else ("required" if required else "—")
    cells = [f"`{path}`", _type(s, defs), _allowed(s, defs), default, s.get("description", "") if description else ""]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def render(schema: dict) -> str:
    """The reference page of a merged schema: the top-level settings in one table, then one table per block."""
    defs = schema.get("$defs", {})
    table = ["| key | type | allowed | default | description |", "| --- | --- | --- | --- | --- |"]
    tops = {key: (sub, required) for key, sub, required in _children(schema, defs)}
    blocks = [key for key, (sub, _) in tops.items() if sub.get("type") == "object"]
    lines = [HEADER, "## Top level", "", *table]
    lines += [_row(defs, key.lstrip("."), *tops[key]) for key in tops if key not in blocks]
    for key in blocks:
        sub, required = tops[key]
        lines += ["", f"## `{key.lstrip('.')}`", ""]
        if sub.get("description"):
            lines += [_cell(sub["description"]), ""]
        lines += [*table, _row(defs, key.lstrip("."), sub, required, description=False)]
        lines += [_row(defs, *row) for row in walk(sub, defs, key.lstrip("."))]
    return "\n".join(lines) + "\n"


def _same(a: Any, b: Any) -> bool:
    """Equal as a config means it: 1 and 1.0 alike, True never equal to 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b and isinstance(a, (int, float)) == isinstance(b, (int, float))


def restated_defaults(config: Any, schema: dict, defs: dict | None = None, path: str = "") -> list[str]:
    """Key paths of ``config`` (raw, as read) whose value equals its schema default: a default written twice."""
    defs = schema.get("$defs", {}) if defs is None else defs
    out: list[str] = []
    if isinstance(config, dict):
        props, extra = schema.get("properties", {}), _resolve(schema.get("additionalProperties"), defs)
        for key, value in config.items():
            sub = _resolve(props[key], defs) if key in props else extra
            here = f"{path}.{key}" if path else str(key)
            if "default" in sub and _same(value, sub["default"]):
                out.append(here)
            else:
                out += restated_defaults(value, sub, defs, here)
    elif isinstance(config, list) and _resolve(schema.get("items"), defs):
        for i, value in enumerate(config):
            out += restated_defaults(value, _resolve(schema["items"], defs), defs, f"{path}[{i}]")
    return out


def write(out: Path = DOC, schema_path: str | Path | None = None, check: bool = False) -> bool:
    """Write (or with ``check`` compare) the reference page; returns whether it was current."""
    from accelbench.core.config import CONFIG_SCHEMA, load_schema

    text = render(load_schema(schema_path or CONFIG_SCHEMA))
    current = out.is_file() and out.read_text() == text
    if not check and not current:
        from accelbench.core import tree

        tree.write_text(out.parent, out, text)  # atomic; a link or hard-linked file at `out` refused, not written
    return current


def cmd_config_reference(args: argparse.Namespace) -> None:
    from accelbench.errors import AccelbenchError

    current = write(Path(args.out), check=args.check)
    if args.check and not current:
        raise AccelbenchError(f"{args.out} is out of date (run `accelbench config-reference`)")
    print(f"{args.out}: {'current' if current else 'written'}")


def add_parser(sub) -> None:
    """``accelbench config-reference``, added to ``sub`` (the ``accelbench`` parser's subparsers)."""
    s = sub.add_parser(
        "config-reference",
        help="write docs/configuration.md from the config schema: every key, its type, allowed values, default",
    )
    s.add_argument("--out", default=str(DOC), help="the page to write")
    s.add_argument("--check", action="store_true", help="only check that it is current (exit 2 otherwise)")
    s.set_defaults(func=cmd_config_reference)
