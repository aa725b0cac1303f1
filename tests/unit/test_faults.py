"""Hostile inputs and faults, round two: each case fails before its fix."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import fake_results as fr
from accelbench.aggregate import claims_report as claims_mod
from accelbench.experiments.unet3d import tables as study_a

REPO = Path(__file__).resolve().parents[2]
CLAIMS_A = REPO / "resources/reference/study_a_claims.csv"


def _study_a(folder: Path, system: str = "cpu") -> list[str]:
    out = []
    for conf, ms in (("baseline", 100.0), ("tf32", 50.0)):
        p = folder / "unet3d_profile/whole_head" / conf / "result.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(fr.unet3d(system, conf, ms)))
        out.append(str(p))
    return out


# --------------------------------------------------------------------------- 3: two results share a system name
def test_second_cpu_machine_copied_in_gives_tables(tmp_path):
    """results/cpu (this machine) and results/laptop2 (a second machine, also called `cpu`)."""
    paths = _study_a(tmp_path / "results/cpu") + _study_a(tmp_path / "results/laptop2")
    study_a.aggregate(paths, CLAIMS_A, tmp_path / "a")
    df = pd.read_csv(tmp_path / "a/table.csv")
    assert len(df) == 4 and df["hardware"].str.startswith("laptop2: CPU").sum() == 2
    assert (df.set_index("configuration")["speedup_vs_baseline"].loc["tf32"] == 2.0).all()
    out = claims_mod.aggregate(paths, REPO / "resources/reference", tmp_path / "c")
    assert {"cpu", "cpu (laptop2)"} <= set(out["system"])


def test_h200_run_beside_the_committed_reference_run_gives_tables(tmp_path):
    src = next(
        d
        for d in sorted((REPO / "reference_runs").glob("h200-*"))  # a run with Study A results
        if (d / "results/h200/unet3d_profile").is_dir()
    )
    ref = tmp_path / "reference_runs" / src.name
    shutil.copytree(src, ref)
    mine = tmp_path / "results/h200/unet3d_profile"
    shutil.copytree(ref / "results/h200/unet3d_profile", mine)
    paths = sorted(map(str, mine.glob("**/result.json"))) + sorted(
        map(str, (ref / "results/h200/unet3d_profile").glob("**/result.json"))
    )
    study_a.aggregate(paths, CLAIMS_A, tmp_path / "a")
    df = pd.read_csv(tmp_path / "a/table.csv")
    assert df["hardware"].str.startswith("reference run").sum() == len(df) / 2
    out = claims_mod.aggregate(paths, REPO / "resources/reference", tmp_path / "c")
    assert "h200" in set(out["system"])


# --------------------------------------------------------------------------- 2: a redo killed outright
KILLED_REDO = """
import os, signal, sys
from pathlib import Path
from accelbench.core import results
out = Path(sys.argv[1])
with results.superseding(out, "cpu", "sr3_scaling"):
    (out.parent / "samples.npz").write_bytes(b"PK partial")  # a side file of the new run
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _finished(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps({"v": "old"}))
    (folder / "samples.npz").write_bytes(b"PK old")
    (folder / "kernels.csv").write_text("old\n")


def test_killed_redo_leaves_the_folder_not_current_and_the_rerun_puts_the_old_files_back(tmp_path):
    import subprocess
    import sys

    from accelbench.core import results, validate

    out = tmp_path / "results/cpu/sr3_scaling/fp32/devices_1/result.json"
    _finished(out.parent)
    proc = subprocess.run([sys.executable, "-c", KILLED_REDO, str(out)], cwd=tmp_path)
    assert proc.returncode == -9
    out.write_text(json.dumps({"v": "old"}))  # what Snakemake's restore of its backup of result.json brings back
    assert validate.problems(out)[0].startswith("(folder): .redo.json is there: a redo of this result was killed")
    with pytest.raises(RuntimeError):  # the rerun fails too: the old files, all of them, are back in place
        with results.superseding(out, "cpu", "sr3_scaling"):
            (out.parent / "samples.npz").write_bytes(b"PK partial again")
            raise RuntimeError("boom")
    assert sorted(p.name for p in out.parent.iterdir()) == ["kernels.csv", "result.json", "samples.npz"]
    assert (out.parent / "samples.npz").read_bytes() == b"PK old"
    assert not list((tmp_path / "results/cpu/.superseded").rglob("*.*"))
    out2 = tmp_path / "results/cpu/sr3_scaling/fp32/devices_2/result.json"  # killed, then a rerun that succeeds
    _finished(out2.parent)
    subprocess.run([sys.executable, "-c", KILLED_REDO, str(out2)], cwd=tmp_path)
    with results.superseding(out2, "cpu", "sr3_scaling") as moved:
        out2.write_text(json.dumps({"v": "new"}))
    assert sorted(p.name for p in out2.parent.iterdir()) == ["result.json"]
    assert (moved / "samples.npz").read_bytes() == b"PK old" and json.loads((moved / "result.json").read_text())[
        "v"
    ] == "old"


# --------------------------------------------------------------------------- 7, 10, deep nesting: result files
def test_negative_timings_are_refused_by_validation(tmp_path):
    from accelbench.core import validate

    r = fr.sr3("cpu", 1, 641.4)
    r["measurements"]["iteration"].update(median=-641.4, samples=[-641.4, 1.0])
    found = validate.problems_of(json.loads(json.dumps(r)))
    assert "measurements.iteration.median: -641.4 is negative (a duration, count or size cannot be)" in found
    assert any(f.startswith("measurements.iteration.samples.0: -641.4 is negative") for f in found)
    assert validate.problems_of(json.loads(json.dumps(fr.sr3("cpu", 1, 641.4)))) == []


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "deep"])
def test_result_file_that_would_hang_or_exhaust_memory_is_one_line(tmp_path, kind):
    import os

    from accelbench.aggregate.common import load_results
    from accelbench.core import validate
    from accelbench.errors import ResultError

    p = tmp_path / "results/lab/sr3_scaling/fp32/devices_1/result.json"
    p.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev_zero":
        p.symlink_to("/dev/zero")
    else:
        p.write_text("[" * 200_000 + "]" * 200_000)
    # a link (here to /dev/zero) is refused as a link before anything reads it
    why = {"fifo": "not a plain file", "dev_zero": "a link", "deep": "nested too deeply"}[kind]
    with pytest.raises(ResultError, match=f"{p}: \\(file\\): {why}"):
        validate.validate_files([p])
    with pytest.raises(ResultError, match=f"corrupt result file {p}: {why}"):
        load_results([p])


# --------------------------------------------------------------------------- 8, 13, 11 and the config one-liners
BOMB = """
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
"""


@pytest.mark.parametrize(
    "path, value, message",
    [
        (
            "noise.spread_max",
            float("nan"),
            "config key 'noise.spread_max': nan is not allowed (a finite number is needed)",
        ),
        ("noise.cpu_other_max", float("nan"), "config key 'noise.cpu_other_max': nan is not allowed"),
        ("unet3d_profile.quality_rel_l2_max", float("nan"), "config key 'unet3d_profile.quality_rel_l2_max': nan"),
        (
            "sr3_scaling.data.train_overlap",
            float("inf"),
            "config key 'sr3_scaling.data.train_overlap': inf is not allowed",
        ),
        ("unet3d_profile.repeat", 2.0, "config key 'unet3d_profile.repeat': 2.0 is not an integer (write 2)"),
        ("unet3d_profile.repeat", 1e15, "config key 'unet3d_profile.repeat': 1000000000000000.0 is not an integer"),
        (
            "unet3d_profile.repeat",
            10**15,
            "config key 'unet3d_profile.repeat': 1000000000000000 is greater than the maximum of 10000",
        ),
        ("sr3_scaling.devices", [1.0], "config key 'sr3_scaling.devices[0]': 1.0 is not an integer (write 1)"),
        ("results_dir", "/", "config key 'results_dir': '/' (/) is a folder of the operating system"),
        ("results_dir", "/etc", "config key 'results_dir': '/etc' (/etc) is a folder of the operating system"),
        (
            "results_dir",
            "/usr/lib/x",
            "config key 'results_dir': '/usr/lib/x' (/usr/lib/x) is a folder of the operating",
        ),
    ],
)
def test_bad_config_value_is_one_line_naming_the_key(default_config, path, value, message):
    from accelbench.core.config import validate_config
    from accelbench.errors import ConfigError

    *parents, last = path.split(".")
    cur = default_config
    for k in parents:
        cur = cur.setdefault(k, {})
    cur[last] = value
    with pytest.raises(ConfigError) as info:
        validate_config(default_config)
    assert message in str(info.value)


def test_ordinary_results_dirs_are_accepted():
    from accelbench.core.config import results_dir_errors

    assert [results_dir_errors(v) for v in ("results", "/tmp/x", "~/r", "/usr/src/app/results")] == [[]] * 4
    # `/results` (a container's mount) where it exists; where not, it would be made at `/` (test_weak_inputs_four.py)
    assert (results_dir_errors("/results") == []) == os.path.isdir("/results")


def test_yaml_alias_bomb_and_duplicate_keys_are_refused(tmp_path, default_config):
    import time

    import yaml

    from accelbench.core.config import read_yaml, validate_config
    from accelbench.errors import ConfigError

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    t = time.perf_counter()
    with pytest.raises(ConfigError, match=f"{bomb}: more than 1,000,000 values once its YAML aliases"):
        read_yaml(bomb)
    default_config["lora_finetune"]["presets"]["smollm2_135m"]["config"] = yaml.safe_load(BOMB)  # as Snakemake loads it
    with pytest.raises(ConfigError, match="config: more than 1,000,000 values"):
        validate_config(default_config)
    assert time.perf_counter() - t < 5
    dup = tmp_path / "dup.yaml"
    dup.write_text("unet3d_profile:\n  repeat: 10\n  warmup: 2\n  repeat: 3\n")
    with pytest.raises(
        ConfigError, match=f"{dup}: line 4: key 'repeat' is given twice in one mapping \\(first on line 2\\)"
    ):
        read_yaml(dup)


# --------------------------------------------------------------------------- 4-6: garbage stops at prepare
def _mri(folder: Path, image=None, mask=None, mask_affine=None) -> Path:
    import nibabel as nib
    import numpy as np

    image = np.random.default_rng(0).random((20, 20, 20)) if image is None else image
    if mask is None:
        mask = np.zeros((20, 20, 20), np.uint8)
        mask[5:15, 5:15, 5:15] = 1
        mask[8:11, 8:11, 8:11] = 2
    (folder / "image").mkdir(parents=True)
    (folder / "mask").mkdir()
    nib.save(nib.Nifti1Image(image.astype(np.float32), np.eye(4)), str(folder / "image/case.nii.gz"))
    nib.save(
        nib.Nifti1Image(mask.astype(np.uint8), np.eye(4) if mask_affine is None else mask_affine),
        str(folder / "mask/case.nii.gz"),
    )
    return folder


def _prepare_mri(tmp_path, folder, volume=16):
    from accelbench.experiments.unet3d import data as mri

    return mri.prepare(
        tmp_path / "i.nii.gz", tmp_path / "m.nii.gz", [volume] * 3, [1] * 3, source="folder", folder=str(folder)
    )


def test_sky_map_with_a_nan_or_inf_pixel_stops_at_prepare(tmp_path):
    import numpy as np

    from accelbench.errors import DataError
    from accelbench.experiments.sr3 import data as sky

    arr = np.random.default_rng(0).random((64, 64))
    arr[3, 4] = np.nan
    arr[10, 10] = np.inf
    np.save(tmp_path / "map.npy", arr)
    with pytest.raises(DataError, match=r"map.npy has 2 NaN/Inf pixel\(s\) \(first: nan at \(3, 4\)\)"):
        sky.prepare(tmp_path / "o.npz", patch=16, factor=4, source="folder", folder=str(tmp_path))
    assert not (tmp_path / "o.npz").exists()


def test_mri_with_nan_voxels_stops_at_prepare(tmp_path):
    import numpy as np

    from accelbench.errors import DataError

    image = np.random.default_rng(0).random((20, 20, 20))
    image[1, 2, 3] = np.nan
    with pytest.raises(
        DataError, match=r"image/case.nii.gz has 1 NaN/Inf voxel\(s\) \(first: nan at voxel \(1, 2, 3\)\)"
    ):
        _prepare_mri(tmp_path, _mri(tmp_path / "d", image=image))


def test_mask_off_the_image_grid_or_of_another_shape_stops_at_prepare(tmp_path):
    import numpy as np

    from accelbench.errors import DataError

    shifted = np.eye(4)
    shifted[:3, 3] = 500.0  # the mask lies 500 mm away: resampled onto the image's grid it would be all zero
    with pytest.raises(DataError, match=r"mask/case.nii.gz lies on another grid than its image .*affines differ"):
        _prepare_mri(tmp_path, _mri(tmp_path / "a", mask_affine=shifted))
    small = np.zeros((18, 20, 20), np.uint8)
    small[5:15, 5:15, 5:15] = 1
    with pytest.raises(DataError, match=r"mask/case.nii.gz has shape \(18, 20, 20\), its image .* \(20, 20, 20\)"):
        _prepare_mri(tmp_path, _mri(tmp_path / "b", mask=small))
    corner = np.zeros((20, 20, 20), np.uint8)
    corner[0, 0, 0] = 1  # on the grid of the source, outside the centred 8^3 grid prepared from it
    with pytest.raises(DataError, match=r"mask/case.nii.gz is all zero on the \(8, 8, 8\) grid"):
        _prepare_mri(tmp_path, _mri(tmp_path / "c", mask=corner), volume=8)


# --------------------------------------------------------------------------- 12: overlapping device sets
@pytest.mark.parametrize(
    "first, second, exclusive",
    [
        (None, "0", True),
        ("0", "0,1", True),
        ("0,1", "1,0", True),
        ("0, 1", "1", True),
        ("1", None, True),
        ("0", "1", False),
        ("0,1", "2,3", False),
    ],
)
def test_overlapping_device_sets_exclude_each_other(tmp_path, monkeypatch, first, second, exclusive):
    import threading

    from accelbench.core import locks

    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path))
    env = lambda v: {} if v is None else {"CUDA_VISIBLE_DEVICES": v}  # noqa: E731
    got = threading.Event()

    def second_job():
        with locks.device_lock(locks.device_set("cuda", env(second)), "second"):
            got.set()

    with locks.device_lock(locks.device_set("cuda", env(first)), "first"):
        t = threading.Thread(target=second_job, daemon=True)
        t.start()
        assert got.wait(1.5) is not exclusive
    t.join(10)
    assert got.is_set()


def test_unusable_lock_folder_is_one_line(tmp_path, monkeypatch):
    from accelbench.core import locks
    from accelbench.errors import AccelbenchError

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path / "file/locks"))
    with pytest.raises(
        AccelbenchError, match=r"device lock .*file/locks/accelbench-cpu.lock cannot be used .*ACCELBENCH_LOCK_DIR"
    ):
        with locks.device_lock("cpu", "x"):
            pass


# --------------------------------------------------------------------------- 9: an encoder-only model
def test_encoder_only_model_is_not_loaded_as_a_causal_lm():
    from transformers import BertConfig, LlamaConfig

    from accelbench.errors import DataError
    from accelbench.models.llm import load_causal_lm, not_causal

    tiny = {
        "model_type": "bert",
        "vocab_size": 64,
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
    }
    with pytest.raises(DataError, match="'random' is not a causal LM: bert is an encoder .*decoder-only model"):
        load_causal_lm({"source": "random", "config": tiny})
    assert "hold no causal LM" in not_causal(BertConfig(architectures=["BertForMaskedLM"], is_decoder=True))
    assert not_causal(LlamaConfig(architectures=["LlamaForCausalLM"])) is None
    assert not_causal(BertConfig(is_decoder=True)) is None


# --------------------------------------------------------------------------- tracebacks that are now one line
def _model_folder(folder: Path, weights: str) -> dict:
    import torch
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True)
    PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")), unk_token="<unk>"
    ).save_pretrained(folder)
    cfg = LlamaConfig(vocab_size=2, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    st = folder / "model.safetensors"
    st.write_bytes(st.read_bytes()[: st.stat().st_size // 2] if weights == "truncated" else b"\x00garbage" * 64)
    return {"source": "path", "path": str(folder)}


def _case(kind: str, tmp_path: Path):
    """(a callable that must raise an AccelbenchError, the message it must contain)."""
    import nibabel as nib
    import numpy as np

    from accelbench.experiments.lora.data import build_pairs
    from accelbench.models.llm import load_causal_lm

    if kind in ("safetensors_truncated", "safetensors_garbage"):
        spec = _model_folder(tmp_path / "m", kind.split("_")[1])
        return lambda: load_causal_lm(spec), f"model '{tmp_path / 'm'}' not available offline or unreadable: "
    if kind == "model_path_missing":
        return (
            lambda: load_causal_lm({"source": "path", "path": "/no/such/model"}),
            "model path '/no/such/model' does not exist",
        )
    if kind == "parquet_binary":
        (tmp_path / "d.parquet").write_bytes(b"\x00\x01binary, not parquet" * 10)
        return (
            lambda: build_pairs("file", str(tmp_path / "d.parquet")),
            f"instruction file {tmp_path / 'd.parquet'} is not a readable parquet file",
        )
    if kind == "json_object":
        (tmp_path / "d.json").write_text(json.dumps({"instruction": "a", "output": "b"}))
        return (
            lambda: build_pairs("file", str(tmp_path / "d.json")),
            f"instruction file {tmp_path / 'd.json'} holds a JSON dict; a list of objects is needed",
        )
    if kind == "nifti_truncated":
        folder = _mri(tmp_path / "d")
        img = folder / "image/case.nii"
        nib.save(nib.Nifti1Image(np.zeros((20, 20, 20), np.float32), np.eye(4)), str(img))
        (folder / "image/case.nii.gz").unlink()
        img.write_bytes(img.read_bytes()[:1000])
        (folder / "mask/case.nii.gz").rename(folder / "mask/case.nii")
        return (lambda: _prepare_mri(tmp_path, folder), f"MRI input {img} is unreadable as NIfTI: ")
    if kind == "mask_5_channels":
        folder = _mri(tmp_path / "d", mask=np.zeros((20, 20, 20, 5), np.uint8))
        return (
            lambda: _prepare_mri(tmp_path, folder),
            f"mask {folder / 'mask/case.nii.gz'} is one-hot with 5 channels; data.mri.label_values has 2",
        )
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "safetensors_truncated",
        "safetensors_garbage",
        "model_path_missing",
        "parquet_binary",
        "json_object",
        "nifti_truncated",
        "mask_5_channels",
    ],
)
def test_bad_input_is_one_line_naming_the_file(tmp_path, kind):
    from accelbench.errors import AccelbenchError

    call, message = _case(kind, tmp_path)
    with pytest.raises(AccelbenchError) as info:
        call()
    text = str(info.value)
    assert message in text and "\n" not in text and not text.rstrip().endswith(": ")


def test_pipe_in_a_hardware_label_keeps_the_markdown_row(tmp_path):
    from accelbench.aggregate.common import write_table

    write_table(pd.DataFrame({"hardware": ["CPU: a|b"], "x_ms": [1.0]}), tmp_path / "t", "caption")
    row = (tmp_path / "t.md").read_text().splitlines()[-1]
    assert row.count("|") - row.count("\\|") == 3 and "a\\|b" in row
    assert "a|b" in (tmp_path / "t.tex").read_text()
