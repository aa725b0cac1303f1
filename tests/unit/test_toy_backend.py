"""CONTRIBUTING.md's "Add a backend", proven for two toys: each added to a copy of the package as two new files (its
module and a system file), edits of nothing, is found by discovery, accepted by the system and result schemas, chosen
by name and by ``system: auto``, and passes the recipe's command (the backend tests, which iterate over whatever
backends exist). ``toyaccel`` computes on the host (a subclass of the cpu backend) and runs the measurement core;
``toyrocm`` is a CUDA-device backend under another vendor's name (a subclass of the cuda backend): its tensors and
autocast take the device type ``cuda``, never its name.

The files are fixture data at their repository paths under ``tests/toy_backend/`` and ``tests/toy_rocm_backend/``
(``workflow/accelbench/backends/<toy>.py``, ``config/systems/<toy>.yaml``). The checks run in a subprocess with
``PYTHONPATH=<copy>/workflow``, so that the copy's package, not the installed one, is imported.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

TOY = REPO / "tests/toy_backend"  # the files a contributor adds, at their repository paths
TOY_ROCM = REPO / "tests/toy_rocm_backend"
COPIED = ("workflow", "config", "pyproject.toml", "conftest.py", "tests/unit/test_backends.py")
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
    env.pop("TOYROCM_DEVICES", None)
    return subprocess.run(list(argv), cwd=copy, env=env, capture_output=True, text=True, timeout=600)


def _add(copy: Path, toy: Path) -> None:
    """Copy the repository's files into ``copy``, then the toy's; the recipe's promise: two new files, no file of
    the package, the config or the tests edited."""
    before = _copy(copy)
    added = [p.relative_to(toy) for p in sorted(toy.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    for p in added:
        (copy / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(toy / p, copy / p)
    after = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file()}
    assert sorted(after - before) == sorted(added) and len(added) == 2, sorted(after - before)
    assert not any(p in before or (REPO / p).exists() for p in added)  # new files, none replaces one


def recipe_commands() -> list[str]:
    """The commands of CONTRIBUTING.md's "Recipe: add a backend" (its fenced shell blocks)."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    section = re.search(r"^## Recipe: add a backend.*?(?=^## )", text, flags=re.S | re.M).group(0)
    blocks = re.findall(r"^```(?:bash|sh|console|shell)\s*\n(.*?)^```", section, flags=re.S | re.M)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _run_recipe(copy: Path, toy: str) -> None:
    """Run every command of the recipe in ``copy`` as a contributor would after adding ``toy``: each passes, and the
    backend tests check the toy as they check every backend (no test edited to name it)."""
    commands = recipe_commands()
    assert commands, "CONTRIBUTING.md's backend recipe shows no command"
    for command in commands:
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "pytest"], f"no check here for the recipe's command {command!r}"
        proc = _run(copy, sys.executable, *argv[1:], "-q", "-rA", "-p", "no:cacheprovider")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        for test in ("test_every_backend_implements_the_whole_protocol", "test_detect_returns_the_first_backend"):
            assert re.search(rf"^PASSED \S+::{test}\w*\[{toy}\]$", proc.stdout, flags=re.M), proc.stdout[-3000:]


def test_toy_backend_is_two_new_files_and_keeps_the_protocol(tmp_path):
    copy = tmp_path / "repo"
    _add(copy, TOY)

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

    _run_recipe(copy, "toyaccel")


CHECK_ROCM = """
import contextlib, json, os
import torch
from accelbench import backends
from accelbench.backends.device import Device
from accelbench.core.config import SYSTEM_SCHEMA, load_schema
from accelbench.core.systems import load_systems, require_backend, resolve_system
from accelbench.core.validate import _schemas

calls = []
# recorded (no GPU here): the device type torch.autocast is given
def autocast(device_type, dtype=None, **kw):
    calls.append((device_type, str(dtype)))
    return contextlib.nullcontext()
torch.autocast = autocast
out = {"backends": list(backends.BACKENDS)}
out["system_enum"] = load_schema(SYSTEM_SCHEMA)["properties"]["backend"]["enum"]
out["result_enum"] = _schemas()["result.json"]["$defs"]["system"]["properties"]["backend"]["enum"]
systems = load_systems("config/systems", SYSTEM_SCHEMA)
out["by_name"] = resolve_system("toyrocm", systems).backend
out["seen_without"] = backends.get("toyrocm").probe()
os.environ["TOYROCM_DEVICES"] = "2"
out["detected"] = backends.detect()
out["auto"] = resolve_system("auto", systems).name
out["required"] = require_backend(systems["toyrocm"], devices=2)["count"]
device = Device("toyrocm", 1)
out["torch_device"] = str(device.torch_device)
with device.autocast(torch.bfloat16):
    pass
out["autocast"] = calls
ops = device.ops
out["inherited"] = [ops.device_type, ops.collective, ops.uses_device_events, ops.slurm_gpu_resource]
out["inherited"].append(ops.device_index(3))
out["stated"] = [ops.visible_devices_var, ops.nsight_compute, ops.energy_counter(), ops.apptainer_env(".", {})]
print(json.dumps(out))
"""


def test_toy_rocm_backend_is_two_new_files_and_autocasts_as_cuda(tmp_path):
    """A CUDA-device backend under another vendor's name: it states what differs from the cuda backend, inherits the
    rest, and its tensors and autocast use the device type ``cuda``, never ``toyrocm``."""
    copy = tmp_path / "repo"
    _add(copy, TOY_ROCM)

    proc = _run(copy, sys.executable, "-c", CHECK_ROCM)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "toyrocm" in out["backends"] and out["system_enum"] == out["result_enum"] == out["backends"]
    assert out["by_name"] == "toyrocm" and out["seen_without"] is None
    assert out["detected"] == {"backend": "toyrocm", "count": 2, "names": ["Toy Instinct MI0"] * 2}
    assert out["auto"] == "toyrocm" and out["required"] == 2
    assert out["torch_device"] == "cuda:1"
    assert out["autocast"] == [["cuda", "torch.bfloat16"]]  # torch.autocast is given the device type, not the name
    assert out["inherited"] == ["cuda", "nccl", True, True, 3]
    assert out["stated"] == ["HIP_VISIBLE_DEVICES", False, None, {"APPTAINER_ROCM": "1", "SINGULARITY_ROCM": "1"}]

    _run_recipe(copy, "toyrocm")
