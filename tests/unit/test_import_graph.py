"""No import circle in the package: the import graph of ``accelbench``, read from its source files, has no strongly
connected component of more than one module.

The graph is built with :mod:`ast` (no import is executed): every ``import a.b`` and ``from .x import y`` anywhere in
a file (inside functions too), relative ones resolved; ``from p import n`` counts as an import of the module ``p.n``
when that is a module of the package, else of ``p``. Importing a module is not counted as importing its parent
packages (``accelbench/__init__.py`` imports nothing).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "accelbench"
ROOT = Path(__file__).resolve().parents[2] / "workflow" / PACKAGE

# A cycle that involves one of these modules (or packages) fails test_no_import_cycle_in_the_aggregation_layer.
CHECKED = ("accelbench.aggregate", "accelbench.aggregate.reference_runs")


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name (an experiment folder's ``tests/`` are tests, not modules)."""
    return {
        module_name(p): p
        for p in sorted(ROOT.rglob("*.py"))
        if not {"__pycache__", "tests"} & set(p.relative_to(ROOT).parts)
    }


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` (at ``path``) imports, anywhere in the file."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]  # the package relative imports start from
    out: set[str] = set()

    def resolve(dotted: str) -> str | None:  # the longest prefix that is a module of the package
        parts = dotted.split(".")
        while parts:
            if ".".join(parts) in known:
                return ".".join(parts)
            parts.pop()
        return None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {m for a in node.names if (m := resolve(a.name))}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else list(here)
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:
                    out.add(sub)
                elif m := resolve(target):
                    out.add(m)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted by their smallest member."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out, key=min)


def _checked(comp: frozenset[str]) -> bool:
    return any(m == c or m.startswith(c + ".") for m in comp for c in CHECKED)


def _describe(comps) -> str:
    return "\n".join("  " + " <-> ".join(sorted(c)) for c in comps)


def test_graph_sees_relative_and_function_level_imports():
    """The reader resolves relative imports (``..x``, ``from . import x``) and finds imports inside functions."""
    graph = import_graph()
    assert "accelbench.aggregate.common" in graph["accelbench.experiments.unet3d.tables"]  # from .common import ...
    assert "accelbench.errors" in graph["accelbench.aggregate.reference_runs"]  # from .errors import ...
    assert "accelbench.aggregate.claims_report" in graph["accelbench.cli"]  # from .aggregate import x, in a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_no_import_cycle_in_the_aggregation_layer():
    """No cycle touches accelbench.aggregate or accelbench.aggregate.reference_runs (see CHECKED: the rest is a
    TODO)."""
    bad = [c for c in cycles(import_graph()) if _checked(c)]
    assert not bad, "import cycles through the aggregation layer:\n" + _describe(bad)


def test_no_import_cycle_anywhere():
    """The whole package: no import cycle at all (imports inside functions included)."""
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + _describe(found)


# --------------------------------------------------------------------------- floors: arrows only point down
# The rooms of the package from the bottom up; a module may import its own room and rooms below it, never above.
# Experiments sit above the engines that run and aggregate them, and the CLI above everything.
FLOORS = (
    # core.files: the one bounded read of a user's file (imports only errors), used on every floor, with the parts
    # split off it (plain_files, yaml_files, os_folders); core.tree: the one way to write under the results tree
    # (imports only errors), with its parts (tree_folder, tree_links); these import only errors and each other;
    # core.snakemake_hooks: the non-public Snakemake API in one place (imports only snakemake)
    (
        "accelbench.errors",
        "accelbench.quiet",
        "accelbench.terminal_fd",
        "accelbench.core.files",
        "accelbench.core.plain_files",
        "accelbench.core.yaml_files",
        "accelbench.core.os_folders",
        "accelbench.core.tree",
        "accelbench.core.tree_folder",
        "accelbench.core.tree_links",
        "accelbench.core.snakemake_hooks",
    ),
    ("accelbench.backends",),
    ("accelbench.measure",),
    ("accelbench.cluster", "accelbench.data", "accelbench.models"),
    ("accelbench.core",),
    ("accelbench.aggregate",),
    ("accelbench.experiments",),
    ("accelbench.cli", "accelbench.__main__"),
)
# The core and the engines read the registry only: none of them imports an experiment's module.
NAME_NO_EXPERIMENT = tuple(room for floor in FLOORS[:6] for room in floor) + ("accelbench.cli",)


def floor_of(module: str) -> int:
    for i, floor in enumerate(FLOORS):
        if any(module == room or module.startswith(room + ".") for room in floor):
            return i
    raise AssertionError(f"{module}: in no room of FLOORS (add its folder there)")


def arrows_up(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} (floor {floor_of(a)}) -> {b} (floor {floor_of(b)})"
        for a, targets in graph.items()
        if a != "accelbench"
        for b in targets
        if b != "accelbench" and floor_of(b) > floor_of(a)
    )


def test_every_module_is_on_a_floor_and_no_arrow_points_up():
    graph = import_graph()
    bad = arrows_up(graph)
    assert not bad, "imports from a lower floor into a higher one:\n  " + "\n  ".join(bad)
    assert arrows_up({"accelbench.core.harness": {"accelbench.experiments.sr3.job"}})  # the check can fail


def test_the_core_and_the_engines_import_no_experiment():
    """config, rules, cli, the job core, the aggregate engine and the claims engine find experiments through the
    registry (which imports each folder's light ``__init__`` by discovery, not by name)."""
    graph = import_graph()
    bad = sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        if any(a == r or a.startswith(r + ".") for r in NAME_NO_EXPERIMENT)
        for b in targets
        if b.startswith("accelbench.experiments.")
    )
    assert not bad, "the core names an experiment:\n  " + "\n  ".join(bad)


def test_tables_and_rule_functions_import_without_torch():
    """Tables come from result files only and the rule functions run while Snakemake plans: neither loads torch."""
    import subprocess
    import sys

    from accelbench.core import registry

    modules = {"accelbench.aggregate.claims_report", "accelbench.aggregate.energy", "accelbench.core.registry"}
    for e in registry.EXPERIMENTS.values():
        modules.add(f"{e.module_path}.rules")
        if e.aggregate:
            modules.add(f"{e.module_path}.tables")
    code = f"import sys\nfor m in {sorted(modules)!r}:\n    __import__(m)\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False", f"one of {sorted(modules)} imports torch"
