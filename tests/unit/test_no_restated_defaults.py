"""Job code restates no schema default: specs are built from the validated config, so every key with a schema default
is present and code reads it as ``spec["key"]``; a ``.get("key", <the schema's default>)`` would be a second place the
default is written, silently used when a key goes missing. A fallback kept for committed results that predate a key
carries the comment ``results older than <key>`` on its line."""

from __future__ import annotations

import ast

import pytest

from accelbench.core.config import load_schema
from conftest import REPO

SCHEMA = REPO / "config/config.schema.yaml"
EXPERIMENTS = REPO / "workflow/accelbench/experiments"
SCANNED = (
    EXPERIMENTS / "llm_quant/stages.py",
    EXPERIMENTS / "lora/data.py",
    EXPERIMENTS / "lora/series.py",
    EXPERIMENTS / "lora/job.py",
    EXPERIMENTS / "llm_quant/accuracy.py",
    EXPERIMENTS / "llm_quant/evaluate.py",
    EXPERIMENTS / "llm_quant/methods.py",
    EXPERIMENTS / "llm_quant/measurements.py",
)


def schema_defaults(s, defs: dict, out: dict | None = None) -> dict[str, list]:
    """``{key: [scalar defaults]}`` of every property of the schema with a scalar default, at any depth."""
    out = {} if out is None else out
    if isinstance(s, dict):
        while "$ref" in s:
            s = defs[s["$ref"].rsplit("/", 1)[-1]]
        for key, sub in (s.get("properties") or {}).items():
            if isinstance(sub, dict) and "default" in sub and not isinstance(sub["default"], (dict, list)):
                out.setdefault(key, []).append(sub["default"])
        for value in s.values():
            if isinstance(value, (dict, list)):
                schema_defaults(value, defs, out)
    elif isinstance(s, list):
        for item in s:
            schema_defaults(item, defs, out)
    return out


def restated(source: str, defaults: dict[str, list], name: str = "<source>") -> list[str]:
    """``name:line: .get("key", value)`` for each ``.get`` whose fallback equals the schema default of its key (type
    and value), except on lines that say ``results older than``."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
            continue
        if len(node.args) != 2 or not isinstance(node.args[0], ast.Constant) or node.args[0].value not in defaults:
            continue
        try:
            fallback = ast.literal_eval(node.args[1])
        except ValueError:
            continue
        key = node.args[0].value
        same = any(type(d) is type(fallback) and d == fallback for d in defaults[key])
        if same and "results older than" not in lines[node.lineno - 1]:
            found.append(f"{name}:{node.lineno}: .get({key!r}, {fallback!r})")
    return found


@pytest.fixture(scope="module")
def defaults() -> dict[str, list]:
    schema = load_schema(SCHEMA)
    return schema_defaults(schema, schema.get("$defs", {}))


def test_job_code_restates_no_schema_default(defaults):
    found = [hit for path in SCANNED for hit in restated(path.read_text(), defaults, str(path.relative_to(REPO)))]
    assert not found, "schema defaults restated as fallbacks (read spec[key]):\n" + "\n".join(found)


def test_a_restated_default_is_found_and_named(defaults):
    assert {"seed", "eval_batch", "reuse_prefix", "job_set", "liger", "eval_fraction"} <= set(defaults)
    source = (
        'a = spec.get("seed", 0)\n'
        'b = cfg.get("liger", False)\n'
        'c = cfg.get("reuse_prefix", 1)\n'  # not the default's type: not a restatement
        'd = cfg.get("seed", 0)  # results older than seed\n'
        'e = cfg["eval_batch"]\n'
    )
    assert restated(source, defaults, "m.py") == ["m.py:1: .get('seed', 0)", "m.py:2: .get('liger', False)"]
