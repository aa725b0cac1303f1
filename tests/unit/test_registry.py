"""The registry is the one place that names the experiments: everything else reads it."""

from __future__ import annotations

import ast
import itertools
import json
import re
from pathlib import Path

import pytest
import yaml

from accelbench.core import registry
from conftest import REPO

PACKAGE = REPO / "workflow/accelbench"
NAMES = set(registry.EXPERIMENTS)


def test_the_result_schema_and_the_config_schema_take_their_names_from_the_registry():
    """The schema files list no experiment; the loaders fill the names in from the registry."""
    from accelbench.core.config import load_schema, schema_errors
    from accelbench.core.validate import _schemas

    raw = json.loads((PACKAGE / "schemas/result.json").read_text())
    assert "enum" not in raw["properties"]["experiment"]
    assert tuple(_schemas()["result.json"]["properties"]["experiment"]["enum"]) == registry.names()
    path = REPO / "config/config.schema.yaml"
    assert "enum" not in yaml.safe_load(path.read_text())["properties"]["experiments"]["anyOf"][1]["items"]
    assert tuple(load_schema(path)["properties"]["experiments"]["anyOf"][1]["items"]["enum"]) == registry.names()
    assert not [e for e in schema_errors({"experiments": "all"}, path) if "experiments" in e]
    bad = schema_errors({"experiments": ["net_smoke"]}, path)  # a diagnostic is not a selectable experiment
    assert any("net_smoke" in e and "unet3d_profile" in e for e in bad), bad
    assert {p.name for p in (PACKAGE / "schemas").glob("*.json")} == {"result.json"}  # the common part only
    for e in registry.EXPERIMENTS.values():  # each experiment's schema in its own folder, with its config block
        assert (e.schema_path() is not None and e.schema_path().is_file()) == e.selectable, e.name
        if e.selectable:
            assert (e.folder / f"{e.name}.config.schema.yaml").is_file(), e.name
            assert e.name in load_schema(path)["properties"], e.name


@pytest.mark.parametrize("name", list(registry.EXPERIMENTS))
def test_every_experiment_module_keeps_the_contract(name):
    """``Settings.from_spec`` and ``run`` (``run_rank`` too where the job runs ranks), its name, its tables module
    (``aggregate`` and claim checks, torch-free), its rule file and its rules module's ``results``/``spec``."""
    e = registry.get(name)
    module = e.load()
    assert module.EXPERIMENT == name
    assert callable(module.Settings.from_spec) and callable(module.run)
    assert callable(getattr(module, "run_rank", None)) == e.ranks
    if e.selectable:
        assert callable(e.load_tables().aggregate) and e.aggregate
    assert (e.folder / "rules.smk").is_file() and e.folder.parent == PACKAGE / "experiments"
    assert callable(e.rule_function("results")) and callable(e.rule_function("spec"))
    assert (REPO / "resources/reference" / e.reference).exists() if e.reference else True


ROOMS = ("__init__.py", "job.py", "rules.py", "rules.smk")  # every experiment folder's rooms (docs/design.md)


def room_problems(experiments) -> list[str]:
    """Entries that share a folder, and folders without a fixed room (``tables.py`` or ``tables/`` too where the entry
    aggregates): one line each."""
    out, seen = [], {}
    for e in experiments:
        if e.folder in seen:
            out.append(f"{e.name} shares the folder {e.folder.name}/ with {seen[e.folder]}")
        seen[e.folder] = e.name
        rooms = ROOMS + (("tables.py", "tables/__init__.py"),) if e.aggregate else ROOMS
        for room in rooms:
            options = room if isinstance(room, tuple) else (room,)
            if not any((e.folder / r).is_file() for r in options):
                out.append(f"{e.name}: no {' or '.join(options)} in {e.folder.name}/")
    return out


def test_each_entry_has_its_own_folder_and_its_rooms_by_their_fixed_names():
    """The registry finds a folder's modules by their file names: every entry has its own folder holding
    ``job.py``, ``rules.py``, ``rules.smk`` (and ``tables.py`` where it aggregates); the entry names no module and
    takes keyword arguments only."""
    import dataclasses

    from accelbench.core.experiment import Experiment

    assert room_problems(registry.EXPERIMENTS.values()) == []
    assert not {"job", "verdicts", "rules", "tables"} & {f.name for f in dataclasses.fields(Experiment)}
    with pytest.raises(TypeError):
        Experiment("x", "A", "x", "x", ("v",))  # keyword-only: no entry depends on the order of the fields
    # the check can fail: a second entry in a folder (the old unet3d), a folder without a room its entry needs
    unet3d = registry.get("unet3d_profile")
    twin = dataclasses.replace(registry.get("unet3d_ncu"), package=unet3d.package)
    assert room_problems([unet3d, twin]) == ["unet3d_ncu shares the folder unet3d/ with unet3d_profile"]
    problems = room_problems([dataclasses.replace(unet3d, package="net_smoke", aggregate="x")])
    assert problems == ["unet3d_profile: no tables.py or tables/__init__.py in net_smoke/"], problems


def test_every_experiment_has_a_command_rule_inputs_and_spec():
    from accelbench.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    smk = {str(p): p.read_text() for p in (REPO / "workflow/rules").glob("*.smk")}
    smk.update({f: Path(f).read_text() for f in registry.rule_files()})  # each experiment folder's rules.smk
    common = smk[str(REPO / "workflow/rules/common.smk")]
    for e in registry.EXPERIMENTS.values():
        assert e.command in commands
        assert any(f"accelbench {e.command} " in text for text in smk.values()), e.command
        # its rules module's results/spec (experiments/<package>/rules.py); common.smk names no experiment
        assert e.rule_function("results") and e.rule_function("spec"), e.name
        assert f"def {e.name}_" not in common, e.name


def test_unknown_names_are_refused_with_the_known_ones():
    with pytest.raises(registry.ConfigError, match="unknown experiment 'nope'; known: unet3d_profile"):
        registry.get("nope")
    assert registry.experiment_of("results/h200/llm_quant/m/fake/8_4_4/result.json") == "llm_quant"
    assert registry.experiment_of("results/x/y.json") is None


# --------------------------------------------------------------------------- no second list of names
def _where(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _name_lists_in_python(path: Path) -> list[str]:
    """Literal lists, tuples, sets and dict keys in ``path`` that hold two or more experiment names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        elements = (
            node.elts
            if isinstance(node, (ast.List, ast.Tuple, ast.Set))
            else node.keys
            if isinstance(node, ast.Dict)
            else []
        )
        named = {e.value for e in elements if isinstance(e, ast.Constant) and e.value in NAMES}
        if len(named) >= 2:
            found.append(f"{_where(path)}:{node.lineno}: {sorted(named)}")
    return found


_QUOTED = re.compile(r"""["']([a-z0-9_]+)["']""")
_SPAN = re.compile(r"[\[\(\{][^\[\]\(\)\{\}]*[\]\)\}]")


def _name_lists_in_text(path: Path) -> list[str]:
    """Two experiment names quoted within one bracketed span of a line of a rule file (Snakemake is not plain
    Python)."""
    found = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        for span in _SPAN.findall(line):
            named = {m for m in _QUOTED.findall(span) if m in NAMES}
            if len(named) >= 2:
                found.append(f"{_where(path)}:{lineno}: {sorted(named)}")
    return found


def test_no_list_of_experiment_names_outside_the_registry():
    sources = [
        p for p in PACKAGE.rglob("*.py") if p.name != "registry.py" and "tests" not in p.relative_to(PACKAGE).parts
    ]
    found = list(itertools.chain.from_iterable(_name_lists_in_python(p) for p in sources))
    rules = [*(REPO / "workflow/rules").glob("*.smk"), REPO / "Snakefile"]
    found += itertools.chain.from_iterable(_name_lists_in_text(p) for p in rules)
    assert not found, "experiment names listed outside accelbench/core/registry.py:\n" + "\n".join(found)


def test_the_name_list_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'EXPERIMENTS = ("unet3d_profile", "sr3_scaling")\nOWN = {"llm_quant": 1, "lora_finetune": 2}\n'
        'ONE = ["llm_quant", "other"]\n'
    )
    assert len(_name_lists_in_python(bad)) == 2
    smk = tmp_path / "bad.smk"
    smk.write_text('x = expand("{e}", e=["unet3d_ncu", "llm_quant"])\ny = ["sr3_scaling"]\n')
    assert len(_name_lists_in_text(smk)) == 1
