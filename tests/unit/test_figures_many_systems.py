"""Every figure of the studies stays within a page however many systems' results are merged (ARTIFACT section 5 adds
a system by copying ``cpu.yaml``, section 6 merges machines by copying folders). Each study's aggregation runs over
1, 3 and 8 CPU systems' worth of synthetic results (``cpu0`` ... ``cpu7``, each its own hardware label) inside
:func:`accelbench.aggregate.figures.checked`, the way the aggregation rules run: any figure problem (a page's size,
more than 10 legend entries, overlaps...) fails it. Before the figures bounded themselves, a second CPU system made
``fig_samples`` 1100x2169 px, ``fig_runtime_vs_devices`` 1344x1606 px and ``fig_sensitivity_submodules`` 2700x810 px
(the page: 2400x1600 px)."""

import copy

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.image import imread  # noqa: E402

import fake_results as fr  # noqa: E402
from accelbench.aggregate import figures  # noqa: E402
from accelbench.aggregate.figure_check import MAX_HEIGHT_PX, MAX_WIDTH_PX  # noqa: E402

COUNTS = (1, 3, 8)
REF = "resources/reference"


def _as(obj: dict, system: str) -> dict:
    """``obj`` (a fake result of system ``cpu``) as a result of CPU system ``system`` (a copy of cpu.yaml)."""
    obj = copy.deepcopy(obj)
    obj["config"]["system"] = {**obj["config"]["system"], "name": system, "description": f"lab VM {system}"}
    return obj


def _write(tmp_path, objs: list[dict]) -> list[str]:
    return fr.write(tmp_path / "results", objs)


def _samples(paths: list[str]) -> list[str]:
    """Give each SR3 result its samples file (low resolution, bicubic, SR3, ground truth of one patch)."""
    import json
    from pathlib import Path

    rng = np.random.default_rng(0)
    for p in paths:
        p = Path(p)
        np.savez(p.with_name("samples.npz"), **{k: rng.random((16, 16)) for k in ("lr", "bicubic", "sr3", "truth")})
        obj = json.loads(p.read_text())
        obj["artefacts"] = {"samples": "samples.npz"}
        p.write_text(json.dumps(obj))
    return paths


def _sensitivity(system: str) -> dict:
    obj = fr.sensitivity("cpu", [0.5, 2.0, -0.3, 8.0])
    obj["measurements"]["submodules"] = [
        {"layer": str(i), "module": m, "prune_ppl": 11.0, "prune": 0.3 * j - 0.5 + i * 0.1}
        for i in range(4)
        for j, m in enumerate(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    ]
    return _as(obj, system)


def _study(name: str, systems: list[str], tmp_path):
    """(result paths, aggregation, reference path, figure files) of study ``name`` over ``systems``."""
    from accelbench.experiments.llm_quant import tables as quant
    from accelbench.experiments.lora import tables as lora
    from accelbench.experiments.sr3 import tables as sr3
    from accelbench.experiments.unet3d import tables as study_a

    if name == "study_a":
        confs = ("baseline", "tf32", "channels_last_3d", "tf32_channels_last_3d", "bf16")
        objs = [
            _as(fr.unet3d("cpu", c, 100.0 / (1 + k) + i), s) for i, s in enumerate(systems) for k, c in enumerate(confs)
        ]
        figs = ("fig_speedup.png", "fig_kernel_breakdown.png", "fig_kernel_counts.png")
        return _write(tmp_path, objs), study_a.aggregate, f"{REF}/study_a_claims.csv", figs
    if name == "sr3":
        objs = [
            _as(fr.sr3("cpu", n, ms * (1 + 0.1 * i), prec), s)
            for i, s in enumerate(systems)
            for n, ms, prec in ((1, 100.0, "fp32"), (2, 60.0, "fp32"), (1, 50.0, "bf16"), (2, 30.0, "bf16"))
        ]
        figs = ("fig_scaling.png", "fig_samples.png")
        return _samples(_write(tmp_path, objs)), sr3.aggregate, f"{REF}/study_b_sr3_scaling.csv", figs
    if name == "lora":
        runs = (("eager", "single", 1), ("flash", "single", 1), ("flash", "ddp", 2), ("flash", "fsdp", 2))
        objs = [
            _as(fr.lora("cpu", a, st, n, 700.0 - 50 * n + i, family=fam), s)
            for i, s in enumerate(systems)
            for a, st, n in runs
            for fam in ("smollm2-135m", "llama-2-7b")
        ]
        figs = ("fig_runtime_vs_devices.png",)
        return _write(tmp_path, objs), lora.aggregate, f"{REF}/study_b_finetune_runtime.csv", figs
    objs = [_sensitivity(s) for s in systems] + [_as(fr.quant("cpu", "fp32", "none"), s) for s in systems]
    figs = ("fig_sensitivity_layers.png", "fig_sensitivity_submodules.png")
    return _write(tmp_path, objs), quant.aggregate, f"{REF}/study_b_quantization.csv", figs


@pytest.mark.parametrize("n", COUNTS)
@pytest.mark.parametrize("study", ["study_a", "sr3", "lora", "quant"])
def test_every_figure_fits_a_page_however_many_systems_are_merged(tmp_path, study, n):
    from accelbench.aggregate.common import load_results

    systems = [f"cpu{i}" for i in range(n)]
    paths, aggregate, reference, figs = _study(study, systems, tmp_path)
    assert len({r["_hardware"] for r in load_results(paths)}) >= n  # n hardware labels, not one
    with figures.checked():  # what the aggregation rule runs: any figure's problem fails it, named
        aggregate(paths, reference, tmp_path / "agg")
    for name in figs:
        h, w = imread(tmp_path / "agg" / name).shape[:2]
        assert w <= MAX_WIDTH_PX and h <= MAX_HEIGHT_PX, (name, w, h)


def test_a_figure_left_out_of_says_what_and_where():
    """The note a bounded figure carries: how many are left out, at most two names, and the file with every run."""
    import pandas as pd

    df = pd.DataFrame(
        {"_hardware": [f"hw{i}" for i in range(5) for _ in range(2)], "scale": ["small"] * 8 + ["paper"] * 2}
    )
    kept, left = figures.most_relevant_hardware(df, 2)
    assert kept["_hardware"].nunique() == 2 and "hw4" in set(kept["_hardware"])  # paper scale first
    note = figures.left_out_note(left, "hardware", "table.csv")
    assert note.startswith("Not drawn: 3 more hardware (") and "+1 more" in note and note.endswith("table.csv.")
    assert figures.left_out_note([], "hardware", "table.csv") == ""


@pytest.mark.parametrize("panels", [1, 2, 3, 4])
def test_submodule_panels_with_the_real_model_label_pass_the_figure_check(tmp_path, panels):
    """README command 1 stopped at study_b_quant_aggregate once the sub-module panels shrank to 5.2 x 4.8 in, three a
    row: with SmolLM2's real label ("SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute): ...") a title ran off
    the canvas and the rotated ticks met the legend. Panels alternate the two kinds (one layer, all at once)."""
    import pandas as pd

    from accelbench.experiments.llm_quant.tables_figures import SUBMODULES, fig_submodules

    rows = []
    for p in range(panels):
        layers = [str(i) for i in range(4)] if p % 2 else ["all"]
        rows += [
            {
                "model": "smollm2_135m",
                "hardware": f"hardware {p}: a host CPU or accelerator of a lent VM (2 threads)",
                "model_label": "SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)",
                "origin": "measured here" if p == 0 else f"reference run (H200 {p}, 2026-11-30)",
                "scale": "small" if p == 0 else "paper",
                "weights": "pretrained",
                "layer": layer,
                "module": m,
                "prune": 0.3 * j - 0.5 + k * 0.1,
            }
            for k, layer in enumerate(layers)
            for j, m in enumerate(SUBMODULES)
        ]
    assert fig_submodules(pd.DataFrame(rows), tmp_path / "fig_sensitivity_submodules.png") == []


@pytest.mark.parametrize("n", [1, 3, 5])
def test_study_a_kernel_figures_with_long_names_fit_a_page(tmp_path, n):
    """README command 1 stopped at study_a_aggregate once a reference run of ours' longest configuration joined the
    merged figures: bf16_channels_last_3d_ndhwc_fused_gn_padconv_compile_no_layout_opt_cudagraphs_autotuned beside
    a long run name wraps to three lines, and every bar's row was sized for three (fig_kernel_breakdown.png and
    fig_kernel_counts.png 1500x1696 px; the page: 2400x1600). The figures are at most a page tall."""
    from accelbench.experiments.unet3d import tables as study_a

    long_conf = "bf16_channels_last_3d_ndhwc_fused_gn_padconv_compile_no_layout_opt_cudagraphs_autotuned"
    confs = ("baseline", "tf32", "channels_last_3d", "tf32_channels_last_3d", long_conf)
    objs = []
    for i in range(n):
        for k, c in enumerate(confs):
            obj = _as(fr.unet3d("cpu", c, 100.0 / (1 + k) + i), f"cpu{i}")
            obj["config"]["system"]["description"] = f"lab VM {i} of the H100 1-GPU kind, padded convolutions and fold"
            objs.append(obj)
    paths = _write(tmp_path, objs)
    with figures.checked():
        study_a.aggregate(paths, f"{REF}/study_a_claims.csv", tmp_path / "agg")
    for name in ("fig_kernel_breakdown.png", "fig_kernel_counts.png"):
        h, w = imread(tmp_path / "agg" / name).shape[:2]
        assert w <= MAX_WIDTH_PX and h <= MAX_HEIGHT_PX, (name, w, h)
