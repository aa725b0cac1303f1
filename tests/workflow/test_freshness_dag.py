"""Freshness by contents, on the real DAG (dry runs): a result whose input files now hold other
bytes is redone whatever its time says (Snakemake's restore after a Ctrl-C gives the old result a new time), and a
not-current result of a job without input files is redone too, not only announced."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from dag import snakemake, write_config


def _spec_of(dry: str, result: str) -> str:
    """The `--spec` file the dry run's shell line passes for `result` (the job block whose `output:` is `result`;
    the terminal shortens long shell lines, so the `--out` at their end may be cut)."""
    for block in re.split(r"\n\s*\n", dry):
        spec = re.search(r"--spec (\S+)", block)
        if spec and re.search(rf"output: {re.escape(result)}\b", block):
            return spec.group(1)
    raise AssertionError(f"no job for {result} in:\n{dry[-3000:]}")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_result_made_from_other_input_bytes_is_redone_whatever_its_time(tmp_path, tiny_config):
    """`sr3_scaling.data.held_out_every` changed, the patch set made again, Ctrl-C during `sr3_train`: Snakemake put
    the old result back with a new time and "Nothing to be done" followed (546/39 patches recorded, 402/49 on disk).
    Its recorded digest of the patch set now differs: redone. The control (same digest) stays."""
    write_config(tmp_path, tiny_config, ["sr3_scaling"])
    result = "results/cpu/sr3_scaling/faithful/devices_1/result.json"
    plan = snakemake(tmp_path, result, "-n", "-p")
    assert plan.returncode == 0, plan.stderr[-3000:]
    spec = _spec_of(plan.stdout, result)
    data = tmp_path / "resources/sky/sr3_small.npz"  # the patch set as it is now (made again, older than the result)
    data.parent.mkdir(parents=True)
    data.write_bytes(b"402 training / 49 held-out patches")
    out = tmp_path / result
    out.parent.mkdir(parents=True)
    for made_from, redone in ((b"546 training / 39 held-out patches", True), (data.read_bytes(), False)):
        recorded = {"path": "resources/sky/sr3_small.npz", "sha256": hashlib.sha256(made_from).hexdigest()}
        out.write_text(json.dumps({"spec_sha256": _sha(tmp_path / spec), "inputs_sha256": {"data": recorded}}))
        dry = snakemake(tmp_path, result, "-n")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert ("Nothing to be done" not in dry.stdout + dry.stderr) == redone, dry.stdout[-2000:]
        assert ("1 finished result(s) are not current" in dry.stderr) == redone, dry.stderr[-2000:]


def test_not_current_result_of_a_job_without_inputs_is_redone(tmp_path, tiny_config):
    """A LoRA preset with `source: path` has no input files: marked not current (time set to 1970), it was announced
    as "a run redoes them", then not redone (nothing newer than it, and no record of the failed job)."""
    model = tmp_path / "my_model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    lora = tiny_config["lora_finetune"]
    lora["presets"] = {"mine": {"source": "path", "path": str(model), "family": "llama"}}
    lora.update(models=["mine"], runs=[{"strategy": "single", "attention": ["eager"], "devices": [1]}])
    write_config(tmp_path, tiny_config, ["lora_finetune"])
    result = "results/cpu/lora_finetune/mine/eager/single/n1/result.json"
    plan = snakemake(tmp_path, result, "-n", "-p")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "input:" not in plan.stdout.split("rule lora_finetune:")[1].split("\n\n")[0]  # no input files
    spec = _spec_of(plan.stdout, result)
    out = tmp_path / result
    out.parent.mkdir(parents=True)
    for recorded, redone in (("0" * 64, True), (_sha(tmp_path / spec), False)):
        out.write_text(json.dumps({"spec_sha256": recorded}))
        dry = snakemake(tmp_path, result, "-n")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert ("Nothing to be done" not in dry.stdout + dry.stderr) == redone, dry.stdout[-2000:]
        assert ("1 finished result(s) are not current" in dry.stderr) == redone, dry.stderr[-2000:]
