"""A result known ``unsupported`` from the spec, the system and what is installed (ncu on a CPU, TF32 on a CPU, INC
FP8 off Gaudi, FSDP on a CPU, ZeRO-3 without deepspeed) is written by the real ``accelbench`` command without
importing torch or transformers: the experiment folder's ``verdicts.py`` answers before the harness imports the job
module, and the provenance reads nothing through torch (what only torch tells is listed under ``not_read``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelbench.core import registry
from accelbench.core.provenance import NOT_READ, hardware_label
from accelbench.core.rule_context import RuleContext
from accelbench.core.validate import problems
from conftest import REPO

HEAVY = ("torch", "transformers", "peft", "accelerate", "numpy", "pandas")
# at the job's exit, the heavy modules it imported, into the file $LOADED_OUT names
SITECUSTOMIZE = f"""
import atexit, os, sys
def _loaded():
    with open(os.environ["LOADED_OUT"], "w") as fh:
        fh.write("\\n".join(m for m in {HEAVY!r} if m in sys.modules))
atexit.register(_loaded)
"""


class Wildcards(dict):
    __getattr__ = dict.__getitem__


CASES = {  # experiment, wildcards, extra arguments of its command, the reason's start
    "unet3d_ncu": (
        {"model": "whole_head", "configuration": "baseline"},
        ["--image", "in/image.nii.gz", "--mask", "in/mask.nii.gz", "--profile-result", "in/result.json"],
        "Nsight Compute profiles NVIDIA GPUs; system 'cpu' has backend 'cpu'",
    ),
    "unet3d_profile": (
        {"model": "whole_head", "configuration": "tf32"},
        ["--image", "in/image.nii.gz", "--mask", "in/mask.nii.gz", "--threads", "2"],
        "cpu has no TF32 tensor cores",
    ),
    "llm_quant": (
        {"model": "smollm2_135m", "method": "inc_fp8", "bitset": "bf16_fp8"},
        ["--stage", "method", "--model-dir", "in/model", "--sensitivity", "in/result.json", "--threads", "2"],
        "Intel Neural Compressor FP8 needs Intel Gaudi",
    ),
    "lora_finetune": (
        {"model": "smollm2_135m", "attention": "flash", "strategy": "fsdp", "devices": "2"},
        ["--threads", "2"],
        "FSDP through transformers' Trainer needs an accelerator",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_known_unsupported_result_imports_no_torch(name, default_config, systems, tmp_path):
    wildcards, args, reason = CASES[name]
    experiment = registry.get(name)
    spec = experiment.rule_function("spec")(
        RuleContext(default_config, systems["cpu"], "results", REPO), Wildcards(**wildcards)
    )
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "in").mkdir()
    for f in ("image.nii.gz", "mask.nii.gz", "result.json"):
        (tmp_path / "in" / f).write_text("{}")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    out = tmp_path / "results" / "cpu" / name / "case" / "result.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]),
        "LOADED_OUT": str(tmp_path / "loaded.txt"),
    }
    command = [sys.executable, "-m", "accelbench", experiment.command, "--spec", "spec.json", "--out", str(out)]
    proc = subprocess.run(command + args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (tmp_path / "loaded.txt").read_text() == "", "heavy modules imported for a verdict known without measuring"
    result = json.loads(out.read_text())
    assert result["status"] == "unsupported" and result["reason"].startswith(reason)
    hardware = result["environment"]["hardware"]
    assert hardware["not_read"]["precision_support"] == NOT_READ and "precision_support" not in hardware
    assert hardware["torch_threads"] == (2 if "--threads" in args else None)
    assert result["environment"]["software"]["libraries"]["torch"]  # its version, read without importing it
    assert problems(out) == []  # the result schema and the experiment's accept it
    label = hardware_label(result["environment"])  # a CPU's thread count where the job was given one, else none
    assert ("(2 threads)" in label) if "--threads" in args else ("threads" not in label)


def test_lora_zero3_without_deepspeed_is_known_without_the_probe(default_config, systems, monkeypatch):
    """The plan made without the precision probe says so in its notes; a case that may run is left to the job."""
    import importlib.util

    from accelbench.core.harness import JobContext
    from accelbench.experiments.lora import verdicts

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "deepspeed" else real(n, *a))
    rc = RuleContext(default_config, systems["cpu"], "results", REPO)
    spec_of = registry.get("lora_finetune").rule_function("spec")

    def verdict(strategy, devices):
        wildcards = Wildcards(model="smollm2_135m", attention="flash", strategy=strategy, devices=devices)
        spec = spec_of(rc, wildcards)
        ctx = JobContext(registry.get("lora_finetune"), spec, "spec.json", None, systems["cpu"], Path("r.json"))
        return verdicts.known_unsupported(ctx)

    zero3 = verdict("zero3", "2")
    assert zero3.status == "unsupported" and zero3.reason == "deepspeed not installed"
    assert zero3.config["plan"]["notes"] == ["bf16: whether this host only emulates it was not probed"]
    assert verdict("ddp", "2") is None and verdict("single", "1") is None


def test_every_verdicts_module_is_torch_free():
    """Each registry entry's ``verdicts`` module has ``known_unsupported`` and imports no heavy module."""
    with_verdicts = [e for e in registry.EXPERIMENTS.values() if (e.folder / "verdicts.py").is_file()]
    assert {e.name for e in with_verdicts} >= set(CASES)
    code = (
        "import sys\nfrom accelbench.core import registry\n"
        f"for n in {[e.name for e in with_verdicts]!r}:\n"
        "    assert callable(registry.get(n).load_verdicts().known_unsupported), n\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == ""
    assert registry.get("sr3_scaling").load_verdicts() is None  # an experiment without one: the job module decides
