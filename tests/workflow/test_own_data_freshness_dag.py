"""Freshness covers every experiment's own data, on the real DAG (dry runs): a file replaced in
Study A's `data.mri.folder`, LoRA's `data.source: file` instruction file or a LoRA preset's `source: path` model
made the dry run say "Nothing to be done" (only SR3's own folder was hashed). Now its digest is in the job's spec,
so the finished result is not current and is redone. A result that records no `spec_sha256` is not current either
(before, it counted as current whenever Snakemake's own record was gone)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from dag import snakemake, write_config


def _spec_of(dry: str, result: str) -> str:
    """The `--spec` file the dry run's shell line passes for `result` (as tests/workflow/test_freshness_dag.py)."""
    for block in re.split(r"\n\s*\n", dry):
        spec = re.search(r"--spec (\S+)", block)
        if spec and re.search(rf"output: {re.escape(result)}\b", block):
            return spec.group(1)
    raise AssertionError(f"no job for {result} in:\n{dry[-3000:]}")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _finished(workdir: Path, result: str, spec: str, older: list[Path] = ()) -> None:
    """``result`` written as a finished result recording ``spec``'s sha256, newer than the files ``older``."""
    for p in older:
        os.utime(p, (1_000_000_000, 1_000_000_000))
    out = workdir / result
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"spec_sha256": _sha(workdir / spec)}))


def _redone(workdir: Path, result: str) -> bool:
    dry = snakemake(workdir, result, "-n", timeout=600)
    assert dry.returncode == 0, dry.stderr[-3000:]
    redone = "Nothing to be done" not in dry.stdout + dry.stderr
    assert ("1 finished result(s) are not current" in dry.stderr) == redone, dry.stderr[-2000:]
    return redone


def test_study_a_scan_replaced_in_its_folder_redoes_the_result(tmp_path, tiny_config):
    scans = tmp_path / "my_scans"
    for kind in ("image", "mask"):
        (scans / kind).mkdir(parents=True)
        (scans / kind / "case1.nii.gz").write_bytes(b"scan one " + kind.encode())
    tiny_config["data"] = dict(tiny_config.get("data") or {}, mri={"source": "folder", "folder": str(scans)})
    model = tiny_config["unet3d_profile"]["models"][0]
    configuration = tiny_config["unet3d_profile"]["configurations"][0]
    tiny_config["unet3d_profile"].update(models=[model], configurations=[configuration])
    write_config(tmp_path, tiny_config, ["unet3d_profile"])
    result = f"results/cpu/unet3d_profile/{model}/{configuration}/result.json"
    plan = snakemake(tmp_path, result, "-n", "-p", timeout=600)
    assert plan.returncode == 0, plan.stderr[-3000:]
    pair = tmp_path / f"resources/mri/{model}_small"  # the pair mri_prepare made from the folder
    pair.mkdir(parents=True)
    for name in ("image.nii.gz", "mask.nii.gz"):
        (pair / name).write_bytes(b"pair")
    _finished(tmp_path, result, _spec_of(plan.stdout, result), [pair / "image.nii.gz", pair / "mask.nii.gz"])
    assert not _redone(tmp_path, result)  # the control: nothing changed
    (scans / "image/case1.nii.gz").write_bytes(b"scan two image")  # another scan, same name
    assert _redone(tmp_path, result)


def _lora(tmp_path: Path, tiny_config: dict) -> tuple[str, Path, Path]:
    """A LoRA run of a local model (`source: path`) on an instruction file (`data.source: file`): no input files."""
    model = tmp_path / "my_model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = tmp_path / "instructions.json"
    data.write_text(json.dumps([{"instruction": "a", "output": "b"}]))
    lora = tiny_config["lora_finetune"]
    lora["presets"] = {"mine": {"source": "path", "path": str(model), "family": "llama"}}
    lora["data"] = dict(lora.get("data") or {}, source="file", path=str(data))
    lora.update(models=["mine"], runs=[{"strategy": "single", "attention": ["eager"], "devices": [1]}])
    write_config(tmp_path, tiny_config, ["lora_finetune"])
    result = "results/cpu/lora_finetune/mine/eager/single/n1/result.json"
    plan = snakemake(tmp_path, result, "-n", "-p", timeout=600)
    assert plan.returncode == 0, plan.stderr[-3000:]
    _finished(tmp_path, result, _spec_of(plan.stdout, result))
    return result, data, model


def test_lora_instruction_file_or_model_replaced_redoes_the_result(tmp_path, tiny_config):
    result, data, model = _lora(tmp_path, tiny_config)
    assert not _redone(tmp_path, result)  # the control
    st = data.stat()
    data.write_text(json.dumps([{"instruction": "c", "output": "d"}]))  # same size, same time: other bytes
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _redone(tmp_path, result)
    plan = snakemake(tmp_path, result, "-n", "-p", timeout=600)  # made again from the new file ...
    _finished(tmp_path, result, _spec_of(plan.stdout, result))
    assert not _redone(tmp_path, result)
    (model / "config.json").write_text('{"n": 1}')  # ... then the model's weights folder changes
    assert _redone(tmp_path, result)


def test_result_without_spec_sha256_is_not_current(tmp_path, tiny_config):
    result, _, _ = _lora(tmp_path, tiny_config)
    (tmp_path / result).write_text(json.dumps({"status": "ok"}))  # no settings recorded, no .snakemake/metadata
    assert _redone(tmp_path, result)
