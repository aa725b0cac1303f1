"""The WEAK list of inputs and the one-line errors: each case ends in one line naming the key, file or argument
(tracebacks only with --verbose / ACCELBENCH_VERBOSE=1), or behaves as docs/running.md says."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from accelbench.cli import main
from accelbench.errors import ConfigError, DataError
from conftest import REPO

SR3_RESULT = sorted(REPO.glob("reference_runs/*/results/*/sr3_scaling/faithful/devices_1/result.json"))[0]
SR3_REFERENCE = REPO / "resources/reference/study_b_sr3_scaling.csv"


def _err_lines(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


def test_nan_in_a_mask_is_one_line_naming_the_mask(tmp_path):
    from accelbench.experiments.unet3d import data as mri

    folder = tmp_path / "d"
    (folder / "image").mkdir(parents=True)
    (folder / "mask").mkdir()
    labels = np.zeros((20, 20, 20), np.float32)
    labels[5:15, 5:15, 5:15], labels[3, 4, 5] = 1, np.nan
    nib.save(nib.Nifti1Image(np.ones((20, 20, 20), np.float32), np.eye(4)), str(folder / "image/case.nii.gz"))
    nib.save(nib.Nifti1Image(labels, np.eye(4)), str(folder / "mask/case.nii.gz"))
    with pytest.raises(DataError, match=r"mask .*mask/case.nii.gz has 1 NaN/Inf voxel\(s\) .* at voxel \(3, 4, 5\)"):
        mri.prepare(tmp_path / "i.nii.gz", tmp_path / "m.nii.gz", [16] * 3, [1] * 3, source="folder", folder=folder)


@pytest.mark.parametrize(
    "uri, message",
    [
        ("docker://r/{image}{x}", "has the placeholder {x}: only {image} is filled in"),
        ("docker://r/{image}:{0}", "has the placeholder {0}"),
        ("docker://r/{image}{", "Single '{' encountered"),
    ],
)
def test_container_uri_with_another_placeholder_names_it(uri, message):
    from accelbench.cluster.containers import image_uri

    with pytest.raises(ConfigError, match="container_uri ") as info:
        image_uri(SimpleNamespace(image="cuda", name="h100"), uri, REPO / "containers")
    assert message in str(info.value)
    assert image_uri(SimpleNamespace(image="cuda", name="h100"), "docker://r/{image}:{{x}}", REPO / "containers") == (
        "docker://r/cuda:{x}"
    )


def test_newline_in_a_device_name_keeps_the_markdown_row(tmp_path):
    from accelbench.aggregate.common import write_table

    write_table(pd.DataFrame({"hardware": ["CPU: a\nb|c"], "x_ms": [1.0]}), tmp_path / "t", "caption")
    lines = (tmp_path / "t.md").read_text().strip().splitlines()
    assert lines[-1].startswith("| CPU: a b\\|c") and lines[-1].count("|") - lines[-1].count("\\|") == 3


def test_dollar_text_from_data_does_not_stop_a_figure(tmp_path):
    import matplotlib.pyplot as plt

    from accelbench.aggregate.figures import save_figure

    fig, ax = plt.subplots()
    ax.barh([r"$\foo$: CPU"], [1.0], label=r"measured here: $\foo$")
    ax.set_xlabel("time (ms)")
    ax.set_title(r"copied in from $\foo$")
    save_figure(fig, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0


def test_sr3_aggregate_of_a_folder_named_like_mathtext(tmp_path):
    for folder in ("h200", r"$\foo$"):
        dest = tmp_path / "results" / folder / "sr3_scaling/faithful/devices_1/result.json"
        dest.parent.mkdir(parents=True)
        dest.write_bytes(SR3_RESULT.read_bytes())
    results = [str(p) for p in sorted((tmp_path / "results").rglob("result.json"))]
    code = main(
        [
            "study-b-sr3-aggregate",
            "--results",
            *results,
            "--reference",
            str(SR3_REFERENCE),
            "--out-dir",
            str(tmp_path / "o"),
        ]
    )
    assert code == 0 and any((tmp_path / "o").glob("*.png"))


def test_old_result_in_an_aggregation_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ACCELBENCH_VERBOSE", raising=False)
    result = json.loads(SR3_RESULT.read_text())
    del result["measurements"]["quality"]["sampler"]
    old = tmp_path / "cpu/sr3_scaling/faithful/devices_1/result.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps(result))
    args = [
        "study-b-sr3-aggregate",
        "--results",
        str(old),
        "--reference",
        str(SR3_REFERENCE),
        "--out-dir",
        str(tmp_path),
    ]
    assert main(args) == 1
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert f"result {old} lacks 'sampler', which this version reads: an older accelbench wrote it" in lines[0]
    saved = lines[0].rsplit("(traceback: ", 1)[1].rstrip(")")
    assert "KeyError: 'sampler'" in Path(saved).read_text()
    Path(saved).unlink()
    monkeypatch.setenv("ACCELBENCH_VERBOSE", "1")  # asked for: the traceback, then the same line last
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.strip().splitlines()[-1].startswith("accelbench study-b-sr3-aggregate")


def _spec_args(tmp_path, kind: str) -> list[str]:
    out = ["--out", str(tmp_path / "r/result.json")]
    if kind == "bad_json":
        return ["sr3-train", "--spec", "{bad", *out]
    if kind == "empty_spec":
        return ["sr3-train", "--spec", "{}", *out]
    if kind == "negative_threads":
        return ["sr3-train", "--spec", "{}", "--threads", "-3", *out]
    (tmp_path / "ref.csv").write_bytes(bytes(range(256)) * 8)
    return ["study-b-sr3-aggregate", "--results", str(SR3_RESULT), "--reference", str(tmp_path / "ref.csv")] + [
        "--out-dir",
        str(tmp_path / "o"),
    ]


@pytest.mark.parametrize(
    "kind, message",
    [
        ("bad_json", "error: --spec: the inline JSON object is not valid JSON (Expecting property name"),
        ("empty_spec", "error: --spec (inline) lacks the key 'system': not a spec of an sr3_scaling job"),
        ("negative_threads", "error: argument --threads: '-3' is not a number of CPU cores"),
        ("binary_reference", "error: --reference "),
    ],
)
def test_hand_called_commands_end_in_one_line(tmp_path, capsys, kind, message):
    try:
        code = main(_spec_args(tmp_path, kind))
    except SystemExit as exc:  # argparse's usage error
        code = exc.code
    lines = _err_lines(capsys)
    assert code == 2 and message in lines[-1] and not any("Traceback" in ln or ln.startswith("  File") for ln in lines)
    if kind == "binary_reference":
        assert "ref.csv" in lines[-1] and "UTF-8" in lines[-1] and not (tmp_path / "o").exists()


def test_ctrl_c_stops_the_command_with_one_line_and_sigint(tmp_path):
    """A job interrupted by Ctrl-C dies of SIGINT (not an ordinary failure), as Snakemake and shells expect, so the
    run stops instead of going on to the next job (docs/running.md)."""
    script = (
        "import sys, accelbench.cli as c\n"
        "def stop(args):\n    raise KeyboardInterrupt\n"
        "c.cmd_validate_results = stop\n"
        f"sys.exit(c.main(['validate-results', '--out', {str(tmp_path / 'v.json')!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGINT
    assert done.stderr.strip().splitlines()[-1] == (
        "accelbench validate-results: interrupted (Ctrl-C); no result was recorded for this job"
    )
    assert "Traceback" not in done.stderr


def test_sky_tiling_of_a_large_map_is_fast_and_announced(tmp_path, monkeypatch):
    import time

    from accelbench.experiments.sr3 import data as sky

    def windows(shape, patch, every, overlap):  # the definition, one window at a time
        h, w = shape
        grid = [(y, x) for y in range(0, h - patch + 1, patch) for x in range(0, w - patch + 1, patch)]
        held = [o for i, o in enumerate(grid) if i % every == every // 2]
        stride = max(1, round(patch * (1.0 - overlap)))
        return [
            (y, x)
            for y in range(0, h - patch + 1, stride)
            for x in range(0, w - patch + 1, stride)
            if all(y + patch <= hy or hy + patch <= y or x + patch <= hx or hx + patch <= x for hy, hx in held)
        ], held

    for shape, patch, every, overlap in [((100, 130), 16, 5, 0.5), ((77, 64), 8, 3, 0.25), ((64, 64), 9, 2, 0.9)]:
        assert sky.tile_origins(shape, patch, every, overlap) == windows(shape, patch, every, overlap)
    start = time.perf_counter()
    train, held = sky.tile_origins((6000, 6000), 64, 5, 0.5)  # 37 s before: windows x held-out tiles in Python
    assert time.perf_counter() - start < 3 and len(train) == 19137 and len(held) == 1730
    np.save(tmp_path / "map.npy", np.random.default_rng(0).random((300, 300)))
    monkeypatch.setattr(sky, "NOTICE_MIB", 0)
    said: list[str] = []
    sky.prepare(tmp_path / "p.npz", patch=32, factor=4, source="folder", folder=str(tmp_path), notify=said.append)
    assert len(said) == 1 and "held-out 32x32 patches from 1 image(s)" in said[0] and "compressing them to" in said[0]


def test_long_job_is_named_on_the_estimate_line(tmp_path, monkeypatch):
    from accelbench.core import estimate

    monkeypatch.setattr(estimate, "LOG", tmp_path / "job_times.jsonl")
    monkeypatch.setattr(estimate, "calibrate", lambda repeat=7, threads=None: estimate.REFERENCE["calibration_s"])

    class Job(SimpleNamespace):
        __hash__ = object.__hash__
        __eq__ = object.__eq__

    jobs = [Job(rule=SimpleNamespace(name=n), output=[f"{n}.txt"], params=SimpleNamespace()) for n in ("claims", "x")]
    dag = SimpleNamespace(needrun_jobs=lambda: jobs, _running=set(), _finished=set())
    p = estimate.Progress(dag, cores=2)
    assert "longest job" not in p.first_line()
    p.estimates[jobs[1]] = 9 * 3600.0
    assert p.first_line().endswith("; longest job: x, about 9 h 0 min")


def test_bert_generation_is_refused_naming_the_model_type():
    from accelbench.models.llm import load_causal_lm

    tiny = {"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = {"model_type": "bert-generation", **tiny, "intermediate_size": 32}
    with pytest.raises(DataError, match="model_type 'bert-generation' builds BertGenerationDecoder, causal only with"):
        load_causal_lm({"source": "random", "config": config})
    assert load_causal_lm({"source": "random", "config": {**config, "is_decoder": True}}).info["layers"] == 1
    assert load_causal_lm({"source": "random", "config": {"model_type": "gpt_neox", **tiny}}).info["layers"] == 1
