"""CONTRIBUTING.md's "Add an experiment", proven end to end: a toy experiment added to a copy of the repository as one
new folder (plus its claims file) runs through the real DAG there: measurement, validation, table, claims.

The toy's files are fixture data at their repository paths under ``tests/toy_experiment/`` (the folder
``workflow/accelbench/experiments/toy/`` and ``resources/reference/toy_claims.csv``). The test copies this checkout's
files (tracked and untracked, not ignored; not the committed reference runs), lays the toy over the copy and runs
Snakemake there with ``PYTHONPATH=<copy>/workflow``, so that the copy's package, not the installed one, plans and runs
every job.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from dag import REPO

TOY = REPO / "tests/toy_experiment"  # the files a contributor adds, at their repository paths
FOLDER = Path("workflow/accelbench/experiments/toy")  # the experiment's one folder
OUTSIDE_MAX = 1  # files added or changed outside the folder (the recipe: its claims file; its tests are in the folder)
TIMEOUT = 1200


def _repo_files() -> list[Path]:
    """This checkout's files as git sees them (tracked and untracked, not ignored), without the committed reference
    runs (not read with ``reference_runs=false``); relative paths of files that exist."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    paths = [Path(p) for p in out.split("\0") if p]
    return [p for p in paths if p.parts[0] != "reference_runs" and (REPO / p).is_file()]


def _copy_repo(dest: Path) -> list[Path]:
    """Copy this checkout's files into ``dest``; returns their relative paths."""
    files = _repo_files()
    for p in files:
        (dest / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / p, dest / p)
    return files


def _overlay(dest: Path) -> list[Path]:
    """Lay the toy's files over the copy; returns their relative paths."""
    added = [p.relative_to(TOY) for p in sorted(TOY.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    for p in added:
        (dest / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(TOY / p, dest / p)
    return added


def _env(copy: Path) -> dict:
    """The copy's package first on the path; the venv's ``accelbench`` command on PATH; no time estimate."""
    return {
        **os.environ,
        "PYTHONPATH": str(copy / "workflow"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ACCELBENCH_ESTIMATE": "0",
    }


def _run(copy: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=timeout)


def test_toy_experiment_is_one_folder_and_runs_through_the_dag(tmp_path):
    copy = tmp_path / "repo"
    original = _copy_repo(copy)
    added = _overlay(copy)

    # the recipe's promise: one new folder, and at most OUTSIDE_MAX files added or changed anywhere else
    known = set(original)
    outside_new = [p for p in added if not p.is_relative_to(FOLDER) and p not in known]
    changed = [p for p in added if p in known and not filecmp.cmp(REPO / p, TOY / p, shallow=False)]
    assert not (REPO / FOLDER).exists() and all(p not in known for p in added if p.is_relative_to(FOLDER))
    assert len(outside_new) + len(changed) <= OUTSIDE_MAX, (outside_new, changed)
    assert changed == [], changed  # the toy edits no file of the repository

    # the copy's package shadows the installed one, and its registry finds the toy
    probe = _run(
        copy,
        sys.executable,
        "-c",
        "import accelbench; from accelbench.core import registry; "
        "print(accelbench.__file__); print(registry.get('toy_matmul').folder)",
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    package, folder = probe.stdout.split()
    assert Path(package).is_relative_to(copy) and Path(folder) == copy / FOLDER, probe.stdout

    # its command exists
    helped = _run(copy, "accelbench", "toy-matmul", "--help")
    assert helped.returncode == 0 and "--spec" in helped.stdout, helped.stderr[-3000:]

    # the repository's guards hold with the toy in: the registry's contract (checked on the toy like on every
    # experiment), no second list of names, no import cycle and every module on its floor
    guards = _run(
        copy,
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rA",
        "-p",
        "no:cacheprovider",
        "-m",
        "unit or experiments",
        "tests/unit/test_registry.py",
        "tests/unit/test_import_graph.py",
        str(FOLDER / "tests"),
    )
    assert guards.returncode == 0, (guards.stdout + guards.stderr)[-3000:]
    assert "PASSED tests/unit/test_registry.py::test_every_experiment_module_keeps_the_contract[toy_matmul]" in (
        guards.stdout
    ), guards.stdout[-3000:]
    # its own tests, in its folder, are found and marked with the experiments tier (else `-m` deselects them)
    assert f"PASSED {FOLDER.as_posix()}/tests/test_toy.py::test_one_result_and_one_spec_per_size" in guards.stdout, (
        guards.stdout[-3000:]
    )

    # the whole DAG with the toy selected: its jobs, their validation, its table, the claims and energy tables
    dag = _run(
        copy,
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(copy / "Snakefile"),
        "--cores",
        "2",
        "-d",
        str(copy),
        "--config",
        "experiments=[toy_matmul]",
        "reference_runs=false",
        "system=cpu",
        timeout=TIMEOUT,
    )
    assert dag.returncode == 0, (dag.stdout + dag.stderr)[-5000:]

    # one ok result per configured size (the config block's defaults), each consistent with its own timing
    sizes = [64, 256]
    paths = [copy / f"results/cpu/toy_matmul/n{n}/result.json" for n in sizes]
    results = [json.loads(p.read_text()) for p in paths]
    for n, r in zip(sizes, results):
        assert r["experiment"] == "toy_matmul" and r["status"] == "ok", r.get("reason")
        assert r["config"]["size"] == n and r["spec_sha256"]
        m = r["measurements"]
        t = m["matmul"]
        assert t["unit"] == "ms" and t["count"] == len(t["samples"]) == r["config"]["repeat"] and t["median"] > 0
        assert m["flop"] == 2 * n**3
        assert abs(m["gflop_per_s"] - m["flop"] / (t["median"] / 1e3) / 1e9) <= 1e-9 * m["gflop_per_s"]

    # validated by the package's schemas: in the DAG's stamp, and by `accelbench validate-results` directly
    stamp = json.loads((copy / "results/validation/toy_matmul.json").read_text())
    assert {v["path"] for v in stamp["validated"]} == {str(p.relative_to(copy)) for p in paths}, stamp
    check = _run(
        copy, "accelbench", "validate-results", "--results", *map(str, paths), "--out", str(tmp_path / "valid.json")
    )
    assert check.returncode == 0, check.stderr[-3000:]
    assert json.loads((tmp_path / "valid.json").read_text())["count"] == len(paths)

    # the toy's table: one row per result, the numbers of the results
    table = pd.read_csv(copy / "results/toy/table.csv")
    assert list(table["size"]) == sizes and set(table["status"]) == {"ok"} and set(table["system"]) == {"cpu"}
    for (_, row), r in zip(table.iterrows(), results):
        for key in ("median", "p10", "p90"):  # ms in the result, us in the table (rounded to the digits measured)
            assert abs(row[f"{key}_us"] - 1e3 * r["measurements"]["matmul"][key]) <= r["measurements"]["matmul"][key]
        assert abs(row["gflops"] - r["measurements"]["gflop_per_s"]) <= 1e-3 * r["measurements"]["gflop_per_s"]
    assert (copy / "results/toy/table.md").is_file()

    # the energy table reads the toy's results like any other: its step time, and its energy or why there is none
    energy = pd.read_csv(copy / "results/energy/energy.csv")
    mine = energy[energy["experiment"] == "toy_matmul"]
    assert len(mine) == len(sizes) and set(mine["energy"]) <= {"ok", "unsupported", "off"}, mine
    medians = sorted(r["measurements"]["matmul"]["median"] for r in results)
    assert all(abs(a - b) <= 1e-3 * b for a, b in zip(sorted(mine["step_ms"]), medians)), (mine["step_ms"], medians)

    # the claims table has the toy's claim, judged on this system's results by the toy's own check
    claims = pd.read_csv(copy / "results/claims/claims.csv", dtype=str, keep_default_na=False)
    toy = claims[claims["claim_id"] == "t1"]
    assert len(toy) == 1, claims[["study", "claim_id", "system"]]
    row = toy.iloc[0]
    assert row["study"] == "toy" and row["system"] == "cpu" and row["origin"] == "measured here", row.to_dict()
    assert row["verdict"].split(" (")[0] in ("holds", "does not hold", "not measured here"), row.to_dict()
    assert f"n={sizes[0]}: " in row["measured"] and f"n={sizes[-1]}: " in row["measured"], row.to_dict()
    assert "GFLOP/s" in row["measured"] and row["why"], row.to_dict()
    ratio = results[1]["measurements"]["gflop_per_s"] / results[0]["measurements"]["gflop_per_s"]
    assert f"{ratio:.2f}x" in row["measured"], (ratio, row["measured"])
    if row["verdict"] in ("holds", "does not hold"):  # a decisive verdict follows the claim's check on the ratio
        assert (row["verdict"] == "holds") == (ratio >= 1.0), (ratio, row.to_dict())
