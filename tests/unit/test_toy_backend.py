"""CONTRIBUTING.md's "Add a backend", proven: a toy backend added to a copy of the package as two new files (its
module and a system file), edits of nothing, is found by discovery, accepted by the system and result schemas, chosen
by name and by ``system: auto``, usable by the measurement core, and passes the protocol test.

The two files are fixture data at their repository paths under ``tests/toy_backend/``
(``workflow/accelbench/backends/toyaccel.py``, ``config/systems/toyaccel.yaml``). The checks run in a subprocess with
``PYTHONPATH=<copy>/workflow``, so that the copy's package, not the installed one, is imported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

TOY = REPO / "tests/toy_backend"  # the files a contributor adds, at their repository paths
COPIED = ("workflow", "config", "pyproject.toml", "tests/conftest.py", "tests/unit/test_backends.py")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")

CHECK = """
import json, os, sys
import accelbench
from accelbench import backends
from accelbench.backends.device import Device
from accelbench.core.config import SYSTEM_SCHEMA, load_schema
from accelbench.core.systems import load_systems, require_backend, resolve_system
from accelbench.core.validate import _schemas
from accelbench.measure.timing import time_steps

out = {"package": accelbench.__file__, "backends": list(backends.BACKENDS)}
out["system_enum"] = load_schema(SYSTEM_SCHEMA)["properties"]["backend"]["enum"]
result = _schemas()["result.json"]["$defs"]
out["result_enum"] = result["environment"]["properties"]["hardware"]["properties"]["backend"]["enum"]
systems = load_systems("config/systems", SYSTEM_SCHEMA)  # every system file, validated against the schema
out["by_name"] = resolve_system("toyaccel", systems).backend
out["seen_without"] = backends.get("toyaccel").probe()
os.environ["TOYACCEL_DEVICES"] = "2"
out["detected"] = backends.detect()
out["auto"] = resolve_system("auto", systems).name
out["required"] = require_backend(systems["toyaccel"], devices=2)["count"]
device = Device("toyaccel")
timing = time_steps(lambda: None, device, 1, 3, energy=False)
out["timing"] = [str(device.torch_device), timing.method, timing.count]
print(json.dumps(out))
"""


def _copy(dest: Path) -> set[Path]:
    """Copy the package, the config and the protocol test into ``dest``; returns the relative paths of the files."""
    for name in COPIED:
        src = REPO / name
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=SKIP)
        else:
            shutil.copy2(src, dest / name)
    return {p.relative_to(dest) for p in dest.rglob("*") if p.is_file()}


def _run(copy: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy / "workflow")}
    env.pop("TOYACCEL_DEVICES", None)
    return subprocess.run(list(argv), cwd=copy, env=env, capture_output=True, text=True, timeout=600)


def test_toy_backend_is_two_new_files_and_keeps_the_protocol(tmp_path):
    copy = tmp_path / "repo"
    before = _copy(copy)
    added = [p.relative_to(TOY) for p in sorted(TOY.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    for p in added:
        (copy / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(TOY / p, copy / p)

    # the recipe's promise: two new files, no file of the package or the config edited
    after = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file()}
    assert sorted(after - before) == sorted(added) and len(added) <= 2, sorted(after - before)
    assert not any(p in before or (REPO / p).exists() for p in added)  # new files, none replaces one

    proc = _run(copy, sys.executable, "-c", CHECK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["package"]).is_relative_to(copy), out["package"]  # the copy's package, not the installed one
    assert "toyaccel" in out["backends"] and {"cpu", "cuda", "hpu"} <= set(out["backends"])
    assert out["system_enum"] == out["result_enum"] == out["backends"]  # both schemas take the table's names
    assert out["by_name"] == "toyaccel" and out["seen_without"] is None
    assert out["detected"] == {"backend": "toyaccel", "count": 2, "names": ["Toy Accelerator T1"] * 2}
    assert out["auto"] == "toyaccel" and out["required"] == 2
    assert out["timing"] == ["cpu", "synchronize+perf_counter", 3]

    # the protocol test of tests/unit/test_backends.py, run in the copy, checks the toy like every backend
    proc = _run(
        copy,
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rA",
        "-p",
        "no:cacheprovider",
        "tests/unit/test_backends.py",
        "-k",
        "whole_protocol or schema_enums",
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "PASSED tests/unit/test_backends.py::test_every_backend_implements_the_whole_protocol[toyaccel]" in (
        proc.stdout
    ), proc.stdout[-3000:]
