"""Every figure, rendered from small fixture results, passes the one figure checker (figure_check.figure_problems):
no text outside the canvas, no overlapping titles/labels/legends, no legend over a bar, every numeric axis labelled
with a unit, a size that fits a page, one colour per class, no annotation over data, each legend entry once, and series
labels that start with exactly "measured here", "reference run (<hardware>)" or "published (<source>)"."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from test_aggregate import CLAIMS, _fake  # noqa: E402

from accelbench.aggregate import figure_check, figures, legend_check  # noqa: E402
from accelbench.experiments.unet3d import tables as study_a


@pytest.fixture
def capture(monkeypatch):
    """Keep each figure open (instead of closing it after saving) so the test can read its legends."""
    kept = {}
    real = figures.save_figure

    def save(fig, path, dpi=150):
        problems = figure_check.figure_problems(fig, dpi)
        fig.savefig(path, dpi=dpi)
        kept[str(path).rsplit("/", 1)[-1]] = (fig, problems)
        return problems

    import pkgutil

    import accelbench.experiments as experiments

    # every module that draws: the engines' and each experiment folder's tables modules (tables*.py)
    mods = ["accelbench.aggregate.claims_report", "accelbench.aggregate.energy"] + [
        f"accelbench.experiments.{folder.name}.{m.name}"
        for folder in pkgutil.iter_modules(experiments.__path__)
        if folder.ispkg
        for m in pkgutil.iter_modules([f"{experiments.__path__[0]}/{folder.name}"])
        if m.name.startswith("tables")
    ]
    for mod in mods:
        monkeypatch.setattr(f"{mod}.save_figure", save, raising=False)
    yield kept
    plt.close("all")
    assert real is figures.save_figure


def _legend_texts(fig):
    out = []
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    for leg in legends:  # a legend's title may name the series once for all its entries
        out += [t.get_text() for t in leg.get_texts()] + (
            [leg.get_title().get_text()] if leg.get_title().get_text() else []
        )
    return out


def assert_readable(kept, name, series_in_legend=True):
    fig, problems = kept[name]
    assert problems == [], f"{name}: {problems}"
    if series_in_legend:
        texts = _legend_texts(fig)
        assert texts, f"{name}: no legend"
        series = [t for t in texts if legend_check.SERIES_LABEL.match(" ".join(t.split()))]  # wrapped labels too
        assert series, f"{name}: no series label names its origin: {texts}"
        for t in series:
            assert "scale" in t, f"{name}: series label without its scale: {t!r}"


# ---------------------------------------------------------------- the checker itself can fail
def test_checker_finds_overflow_overlap_missing_unit_and_covered_bar(tmp_path):
    fig, (a, b) = plt.subplots(1, 2, figsize=(4, 3))
    a.bar([0, 1], [1, 2], label="x")
    a.legend(loc="center")  # over the bars
    a.set_ylabel("time")  # no unit
    b.plot([1, 2], [1, 2])
    b.set_ylabel("time (ms)")
    b.set_xlabel("devices (count)")
    fig.suptitle("a very long title " * 10)  # wider than the canvas
    fig.text(0.9, 0.5, "outside the canvas, to the right")
    problems = " | ".join(figure_check.figure_problems(fig))
    for expected in ("outside the canvas", "legend covers a bar", "states no unit", "x axis without a label"):
        assert expected in problems
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2])
    ax.set_xlabel("devices (count)")
    ax.set_ylabel("time (ms)")
    fig.tight_layout()
    assert figure_check.figure_problems(fig) == []
    plt.close(fig)


def test_checker_finds_size_same_colour_duplicates_annotation_over_data_and_bad_series_labels():
    fig, (a, b) = plt.subplots(1, 2, figsize=(20, 3))  # 3000 px wide at 150 dpi
    a.bar([0, 1], [1, 2], color=["C0", "C0"])
    a.bar([2], [3], color="C0", label="convolution")
    a.bar([3], [3], color="C0", label="other")  # the same colour as convolution
    a.text(1, 1, "noisy")  # over the second bar
    a.set_xticks([0, 1, 2, 3], ["a", "b", "c", "d"])
    a.set_xlabel("configuration")
    a.set_ylabel("speedup (x)")
    a.legend(loc="upper left", bbox_to_anchor=(1, 1))
    b.plot([1, 2], [1, 2], "o-", color="C1", label="measured here: reference run (H200, 2026-11-30): NVIDIA H200")
    b.plot([1, 2], [2, 3], "s-", color="C2", label="published: Gaudi2")  # no source
    b.plot([1, 2], [3, 4], "^-", color="C3", label="published: Gaudi2")  # twice
    b.text(1.5, 1.5, "on the line")
    b.set_xlabel("devices (count)")
    b.set_ylabel("time (min)")
    b.legend(loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    problems = " | ".join(figure_check.figure_problems(fig, dpi=150))
    for expected in (
        "larger than a page",
        "looks the same as 'convolution'",
        "annotation 'noisy' drawn over data",
        "annotation 'on the line' drawn over data",
        "entry 'published: Gaudi2' twice",
        "series label 'measured here: reference run",
        "series label 'published: Gaudi2'",
    ):
        assert expected in problems, (expected, problems)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar([0], [1], color="C0", label=figures.series_label("measured here", "CPU", "small"))
    ax.bar([1], [1], color="C1", label=figures.series_label(figures.published("Study B, Fig. 2"), "Gaudi2", "paper"))
    ax.bar([2], [1], color="C2", label=figures.series_label("reference run (H200, 2026-11-30)", "NVIDIA H200", "paper"))
    ax.text(2.6, 0.5, "beside the bars")
    ax.set_xlim(-0.5, 3.5)
    ax.set_xticks([0, 1, 2], ["tf32", "bf16", "fp32"])
    ax.set_xlabel("configuration")
    ax.set_ylabel("speedup (x)")
    fig.legend(loc="lower left")
    fig.tight_layout(rect=(0, 0.3, 1, 1))
    assert figure_check.figure_problems(fig, dpi=150) == []
    plt.close(fig)


def _series_figure(n_series=3, colours=None, height_in=4.0, empty=None):
    """A figure of ``n_series`` lines (a marker each) in a legend below the axes; ``colours`` per series (default C0,
    C1, ...);
    ``empty``: the index of a series drawn without a finite point."""
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, height_in))
    for i in range(n_series):
        y = [np.nan, np.nan] if i == empty else [i + 1, i + 2]
        ax.plot(
            [1, 2],
            y,
            "osD^v<>phH*"[i % 11] + "-",
            color=(colours or [f"C{k % 10}" for k in range(n_series)])[i],
            label=f"series {i}",
        )
    ax.set_xlabel("devices (count)")
    ax.set_ylabel("time (min)")
    fig.legend(loc="lower left", ncol=4, fontsize=figures.FONT["legend"])
    fig.tight_layout(rect=(0, 0.3, 1, 1))
    return fig


@pytest.mark.parametrize(
    "planted, expected",
    [
        ({"n_series": 11, "colours": [f"#{k:02x}40{255 - 20 * k:02x}" for k in range(11)]}, "11 legend entries"),
        ({"colours": ["C0", "C1", "C0"]}, "'series 2' has the colour of 'series 0'"),
        ({"empty": 1}, "legend entry 'series 1' has no data"),
        ({"height_in": 11.0}, "1200x1650 px at 150 dpi"),
    ],
    ids=["too many legend entries", "a reused colour", "an empty legend entry", "too tall"],
)
def test_checker_fails_a_planted_unreadable_figure(tmp_path, planted, expected):
    """Each defect alone in an otherwise clean figure: more than 10 legend entries, one colour on two
    series (SR3's measured faithful in published Gaudi1's blue), an entry whose bar or line has no finite point
    (Study A's series with no baseline), an image taller than 1,600 px (Study A's 2,613 px). The clean figure
    passes; the planted one fails its aggregation with one line naming the figure and the defect."""
    from accelbench.errors import DataError

    clean = _series_figure()
    assert figure_check.figure_problems(clean, dpi=150) == []
    plt.close(clean)
    fig = _series_figure(**planted)
    problems = figure_check.figure_problems(fig, dpi=150)
    assert len(problems) == 1 and expected in problems[0], problems
    with pytest.raises(DataError, match=rf"^figure check failed: planted\.png: .*{expected[:20]}") as err:
        with figures.checked():
            figures.save_figure(fig, tmp_path / "planted.png")
    assert "\n" not in str(err.value) and (tmp_path / "planted.png").exists()


def test_proxy_legend_entries_count_as_data_by_their_colour_or_hatch():
    """A legend of proxies (a Patch per kernel class, a hatched 'noisy' patch) has data where a drawn bar has the
    proxy's colour or hatch; a proxy of a colour nothing draws has none."""
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar([0, 1], [1, 2], color="C0", hatch="xx", edgecolor="white")
    ax.set_xticks([0, 1], ["a", "b"])
    ax.set_xlabel("configuration")
    ax.set_ylabel("speedup (x)")
    handles = [Patch(color="C0", label="attention"), Patch(facecolor="0.7", hatch="xx", label="noisy (hatched)")]
    fig.legend(handles=handles, loc="lower left")
    fig.tight_layout(rect=(0, 0.3, 1, 1))
    assert figure_check.figure_problems(fig, dpi=150) == []
    handles.append(Patch(color="C3", label="MLP"))
    fig.legends[0].remove()
    fig.legend(handles=handles, loc="lower left")
    assert [p for p in figure_check.figure_problems(fig, dpi=150) if "no data" in p] == [
        "figure legend: legend entry 'MLP' has no data in the figure"
    ]
    plt.close(fig)


def test_series_label_carries_origin_hardware_scale():
    assert (
        figures.series_label(figures.published("Study A"), "NVIDIA A100", "paper", "fp32")
        == "published (Study A): NVIDIA A100, paper scale, fp32"
    )
    assert figures.origin_of({"environment": {}}) == "measured here"
    assert figures.origin_of({"environment": {"origin": "reference run"}}) == "reference run"


# ---------------------------------------------------------------- Study A
def test_study_a_figures(tmp_path, capture):
    paths = [
        _fake(tmp_path, "h200", "baseline", step=100.0),
        _fake(tmp_path, "h200", "tf32", step=25.0),
        _fake(tmp_path, "h200", "tf32_channels_last_3d", step=20.0),
        _fake(tmp_path, "h200", "channels_last_3d", status="oom"),
        _fake(tmp_path, "a100", "baseline", step=300.0, hw="NVIDIA A100-SXM4-80GB"),
        _fake(tmp_path, "a100", "tf32", step=60.0, hw="NVIDIA A100-SXM4-80GB"),
    ]
    study_a.aggregate(paths, CLAIMS, tmp_path / "agg")
    assert_readable(capture, "fig_speedup.png")
    fig, _ = capture["fig_speedup.png"]
    assert "whiskers" in fig.axes[0].get_title(loc="left")  # error bars explained in the figure
    assert any(
        t.startswith("published (Study A digest): A100/H100, paper scale, speedup range") for t in _legend_texts(fig)
    )
    assert_readable(capture, "fig_kernel_breakdown.png", series_in_legend=False)
    assert_readable(capture, "fig_kernel_counts.png", series_in_legend=False)
    for name in ("fig_kernel_breakdown.png", "fig_kernel_counts.png"):
        fig, _ = capture[name]
        notes = fig._suptitle.get_text()
        assert "measured here: NVIDIA H200" in notes and "paper scale" in notes


# ---------------------------------------------------------------- Study A counters
def _ncu(tmp_path, system, conf, status="ok", cycles=1e9, hw="NVIDIA H200", backend="cuda"):
    from accelbench.core import provenance, results

    env = provenance.collect("cpu")
    env["hardware"].update(
        backend=backend, device_name=hw, device_count=1, device_memory_gib=139.8 if backend == "cuda" else None
    )
    cfg = {
        "system": {"name": system, "scale": "paper" if backend == "cuda" else "small"},
        "model": "whole_head",
        "configuration": conf,
    }
    total = {
        "sm_cycles": cycles,
        "instructions": cycles * 2,
        "ipc": 2.0,
        "tensor_pipe_pct": 10.0,
        "dram_throughput_pct": 50.0,
        "l1_hit_pct": 40.0,
        "l2_hit_pct": 60.0,
        "duration_ns": 5e6,
        "top_stalls": [["long_scoreboard", 0.3]],
    }
    m = (
        {}
        if status != "ok"
        else {
            "total": total,
            "profiled_kernels": 5,
            "architecture": "hopper",
            "by_class": {"convolution": {"kernels": 3, **total}},
        }
    )
    reason = None if status == "ok" else "Nsight Compute needs an NVIDIA GPU; this system's backend is cpu"
    path = tmp_path / system / "unet3d_ncu" / "whole_head" / conf / "result.json"
    results.write_result(results.make_result("unet3d_ncu", status, cfg, env, m, reason), path)
    return path


def test_counter_figure_names_unsupported_systems_and_their_reason(tmp_path, capture):
    from accelbench.experiments.unet3d_ncu import tables as study_a_ncu

    paths = [_ncu(tmp_path, "cpu", c, status="unsupported", hw="AMD EPYC", backend="cpu") for c in ("baseline", "tf32")]
    study_a_ncu.aggregate(paths, CLAIMS, tmp_path / "agg")
    assert_readable(capture, "fig_counter_ratios.png")
    fig, _ = capture["fig_counter_ratios.png"]
    note = " ".join(" ".join(t.get_text() for t in fig.texts).split())  # below the panels, over no bar
    assert "unsupported: Nsight Compute needs an NVIDIA GPU" in note
    assert "measured on CPU" not in fig._suptitle.get_text()
    paths = [_ncu(tmp_path / "g", "h200", "baseline"), _ncu(tmp_path / "g", "h200", "tf32", cycles=2e8)]
    study_a_ncu.aggregate(paths, CLAIMS, tmp_path / "agg2")
    assert_readable(capture, "fig_counter_ratios.png")


# ---------------------------------------------------------------- Study B SR3
def _env(hw, backend, threads=2):
    from accelbench.core import provenance

    env = provenance.collect("cpu")
    env["hardware"].update(
        backend=backend,
        device_name=hw,
        device_count=8 if backend == "cuda" else 1,
        device_memory_gib=139.8 if backend == "cuda" else None,
        torch_threads=threads,
    )
    return env


def _sr3(tmp_path, system, devices, scale, it_ms, backend="cpu", hw="AMD EPYC", status="ok"):
    import numpy as np

    from accelbench.core import results

    cfg = {
        "system": {"name": system, "scale": scale},
        "settings": {"scale": scale},
        "precision": "fp32",
        "devices": devices,
    }
    t = {"median": it_ms, "p10": it_ms * 0.9, "p90": it_ms * 1.1, "count": 5, "samples": [it_ms] * 5}
    q = {
        "sr3": {"psnr_db": 20.0, "ssim": 0.5},
        "bicubic": {"psnr_db": 25.0, "ssim": 0.7},
        "beats_bicubic": False,
        "sampler": "ddim",
        "sample_steps": 10,
    }
    m = (
        {}
        if status != "ok"
        else {
            "iteration": t,
            "images_per_s": 4 * devices / it_ms * 1e3,
            "iterations_per_device": 32 // devices,
            "iterations_run": 32 // devices,
            "measured_wall_s": 1.0,
            "strong_scaling_total": {"seconds": it_ms * 32 / devices / 1e3, "label": "measured"},
            "study_b_projection": {"minutes": it_ms * 40000 / devices / 6e4},
            "peak_mem_gib": 1.0,
            "peak_rss_gib_per_rank": [1.0],
            "replica_max_abs_diff": 0.0,
            "quality": q,
        }
    )
    path = tmp_path / system / "sr3_scaling" / "fp32" / f"devices_{devices}" / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    z = np.linspace(0, 1, 64 * 64).reshape(64, 64)
    np.savez(path.with_name("samples.npz"), lr=z[::4, ::4], bicubic=z, sr3=z, truth=z)
    r = results.make_result(
        "sr3_scaling",
        status,
        cfg,
        _env(hw, backend),
        m,
        None if status == "ok" else "more devices than this system has",
        {"samples": "samples.npz"},
    )
    results.write_result(r, path)
    return path


def test_sr3_small_scale_never_shares_the_published_time_axis(tmp_path, capture):
    from accelbench.experiments.sr3 import tables as study_b_sr3

    paths = [
        _sr3(tmp_path, "cpu", 1, "small", 100.0),
        _sr3(tmp_path, "cpu", 2, "small", 60.0),
        _sr3(tmp_path, "cpu", 4, "small", 0, status="unsupported"),
        _sr3(tmp_path, "h200", 1, "paper", 171.0, backend="cuda", hw="NVIDIA H200"),
        _sr3(tmp_path, "h200", 2, "paper", 100.0, backend="cuda", hw="NVIDIA H200"),
    ]
    study_b_sr3.aggregate(paths, "resources/reference/study_b_sr3_scaling.csv", tmp_path / "agg")
    assert_readable(capture, "fig_scaling.png")
    fig, _ = capture["fig_scaling.png"]
    time_ax, speed_ax = fig.axes[:2]
    time_labels = [ln.get_label() for ln in time_ax.get_lines()]
    assert not any("small scale" in lb for lb in time_labels)  # only paper-scale series on the time axis
    assert any("measured here: NVIDIA H200" in lb and "paper scale" in lb for lb in time_labels)
    assert any("small scale" in ln.get_label() for ln in speed_ax.get_lines())  # normalised instead
    assert "(min)" in time_ax.get_ylabel() and "(x)" in speed_ax.get_ylabel()
    assert_readable(capture, "fig_samples.png", series_in_legend=False)


# ---------------------------------------------------------------- Study B LoRA
def _lora(tmp_path, attention, strategy, devices, step_ms, epoch_min=None, status="ok"):
    from accelbench.core import results

    cfg = {
        "system": {"name": "cpu", "scale": "small"},
        "model_name": "smollm2_135m",
        "family": "smollm2-135m",
        "attention": attention,
        "strategy": strategy,
        "devices": devices,
    }
    t = {"median": step_ms, "p10": step_ms * 0.9, "p90": step_ms * 1.1, "count": 4, "samples": [step_ms] * 4}
    m = (
        {}
        if status != "ok"
        else {
            "projection": {"minutes_per_million_tokens": step_ms / 1e3, "minutes": epoch_min},
            "model": {"weights": "pretrained", "parameters": 1.35e8},
            "attn_implementation": "sdpa",
            "precision": "bf16",
            "data": {"seq_len": 128},
            "step": t,
            "step_slowest_rank_median_ms": step_ms,
            "samples_per_s": 1.0,
            "tokens_per_s": 100.0,
            "peak_mem_gib_max": None,
            "host_peak_rss_gib_max": 1.0,
            "throughput_6n": {"mfu": None, "tflop_per_s": 0.01},
            "lora_parameters": {"trainable": 1e6},
            "loss": {"first_mean": 3.0, "last_mean": 2.5, "eval_before": 3.0, "eval_after": 2.6},
        }
    )
    path = tmp_path / f"{attention}_{strategy}_{devices}" / "result.json"
    results.write_result(
        results.make_result(
            "lora_finetune",
            status,
            cfg,
            _env("AMD EPYC", "cpu"),
            m,
            None if status == "ok" else "FSDP needs an accelerator",
        ),
        path,
    )
    return path


def test_lora_figure_no_blank_axis_and_readable_fonts(tmp_path, capture):
    from accelbench.experiments.lora import tables as study_b_lora

    paths = [
        _lora(tmp_path, "eager", "single", 1, 700.0),
        _lora(tmp_path, "flash", "single", 1, 650.0),
        _lora(tmp_path, "flash", "ddp", 2, 500.0),
        _lora(tmp_path, "flash", "fsdp", 2, 0, status="unsupported"),
    ]
    study_b_lora.aggregate(paths, "resources/reference/study_b_finetune_runtime.csv", tmp_path / "agg")
    assert_readable(capture, "fig_runtime_vs_devices.png")
    fig, _ = capture["fig_runtime_vs_devices.png"]
    for ax in fig.axes:
        assert ax.get_lines(), f"panel {ax.get_title()!r} is empty"
        assert ax.get_yaxis().get_visible() and ax.get_ylabel()
        assert min(t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()) >= figures.FONT["tick"]
    assert not fig._suptitle.get_text().rstrip().endswith(":")
    assert any("smollm2" in ax.get_title() and "per million tokens" in ax.get_title() for ax in fig.axes)


# ---------------------------------------------------------------- Study B quantization
def _quant_sens(tmp_path, per_layer=True):
    from accelbench.core import results

    n = 6
    layers = [
        {
            "layer": i,
            "prune_ppl": 16 + i,
            "prune": [-0.4, 0.2, 1.5, 3.0, 30.0, 0.05][i],
            "quant4_ppl": 16.1,
            "quant4": [0.1, -0.05, 0.3, 0.5, 2.0, 0.0][i],
        }
        for i in range(n)
    ]
    sub = [
        {"layer": str(i) if per_layer else "all", "module": m, "prune_ppl": 17.0, "prune": 0.5 * (j - 2) + i * 0.1}
        for i in (range(n) if per_layer else ["all"])
        for j, m in enumerate(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    ]
    clusters = [0, 0, 1, 1, 2, 0]
    m = {
        "baseline_ppl": {"value": 28.2},
        "layers": layers,
        "submodules": sub,
        "allocation": {"prune": {"percentile": clusters}},
    }
    cfg = {
        "system": {"name": "cpu", "scale": "small"},
        "model": "smollm2_135m",
        "method": "sensitivity",
        "bitset": "none",
    }
    path = tmp_path / "sens" / "result.json"
    results.write_result(results.make_result("llm_quant", "ok", cfg, _env("AMD EPYC", "cpu"), m), path)
    return path


def test_lora_ours_variants_keep_their_own_line_style():
    """Each ours variant of the LoRA figure has its own line style (the name's hash gave ours_eager and
    ours_liger_no_flce the same), a figure's only variant keeps the style it had, and the checker tells dash patterns
    apart (matplotlib reports every one of them as "--")."""
    from matplotlib.lines import Line2D

    from accelbench.experiments.lora.tables_figures import _series_style

    names = ["ours (until 2026-11-30)", "ours_eager", "ours_liger_no_flce", "ours_cudagraphs"]
    styles = [_series_style(n, names) for n in names]
    assert len({str(s) for s in styles}) == len(names) and _series_style("ours", names) == ":"
    assert (_series_style("ours_eager", ["ours_eager"]), _series_style(names[0], names[:2])) == ("-.", "--")
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2], [1, 2], color="C0")
    ax.set(xlabel="devices", ylabel="time (min)")
    handles = [Line2D([], [], color="0.4", ls=s, label=f"our runs, series: {n}") for n, s in zip(names, styles)]
    ax.legend(handles=handles, fontsize=6)
    assert not [p for p in figure_check.figure_problems(fig, 150) if "looks the same" in p]
    plt.close(fig)


def test_quant_figures_label_negative_ticks_units_and_colours(tmp_path, capture):
    from accelbench.experiments.llm_quant import tables as study_b_quant

    study_b_quant.aggregate([_quant_sens(tmp_path)], "resources/reference/study_b_quantization.csv", tmp_path / "agg")
    assert_readable(capture, "fig_sensitivity_layers.png")
    assert_readable(capture, "fig_sensitivity_submodules.png")
    fig, _ = capture["fig_sensitivity_layers.png"]
    ax = fig.axes[0]
    neg = [t for t, v in zip(ax.get_yticklabels(), ax.get_yticks()) if v < 0 and ax.get_ylim()[0] <= v]
    assert neg and all(t.get_text() for t in neg)  # the symlog axis labels its negative side
    assert "validation split" in ax.get_title() and "test split" in ax.get_title()
    fig, _ = capture["fig_sensitivity_submodules.png"]
    assert fig.axes[0].get_xlabel()
    texts = _legend_texts(fig)
    assert any("attention" in t for t in texts) and any("MLP" in t for t in texts)


# ---------------------------------------------------------------- captions in the report
def test_every_figure_in_the_report_has_a_caption_saying_what_it_shows_and_what_not():
    import re
    from pathlib import Path

    workflow = Path(__file__).resolve().parents[2] / "workflow"
    found = []  # the shared rule files and each experiment folder's (captions relative to the rule file)
    for smk in [*(workflow / "rules").glob("*.smk"), *(workflow / "accelbench" / "experiments").glob("*/rules.smk")]:
        for png, caption in re.findall(r'report\(\s*f?"([^"]+\.png)",\s*caption="([^"]+)"', smk.read_text()):
            text = (smk.parent / caption).read_text()
            found.append(png)
            assert "What it shows" in text and "What it does not show" in text, (png, caption)
    assert len(found) >= 9, found


# ---------------------------------------------------------------- defects fail the job; bars name their run
def test_a_defective_figure_fails_its_aggregation_after_it_is_written(tmp_path):
    """figures.checked: the figure is still written (to be looked at), then one line names it and its problem;
    before the fix the problems were only logged."""
    from accelbench.errors import DataError

    with pytest.raises(DataError, match=r"figure check failed: bad\.png: .*no unit"):
        with figures.checked():
            fig, ax = plt.subplots()
            ax.plot([1, 2], [3, 4])
            ax.set_xlabel("devices (count)")
            ax.set_ylabel("time")  # no unit
            figures.save_figure(fig, tmp_path / "bad.png")
            fig, ax = plt.subplots()
            ax.plot([1, 2], [3, 4])
            ax.set_xlabel("devices (count)")
            ax.set_ylabel("time (ms)")
            figures.save_figure(fig, tmp_path / "good.png")
    assert (tmp_path / "bad.png").stat().st_size > 0 and (tmp_path / "good.png").stat().st_size > 0
    with figures.checked():  # nothing left over from the failed one
        pass


def test_study_a_bars_name_their_run_and_network_not_one_repeated_device():
    """Bars of two runs and two networks on one H200 read "(<run>, <network>)", not "(NVIDIA H200)" each."""
    import pandas as pd

    from accelbench.experiments.unet3d.tables_figures import _bar_labels

    rows = pd.DataFrame(
        {
            "configuration": ["baseline", "baseline", "tf32"],
            "hardware": ["reference run (H200, 2026-11-30): NVIDIA H200 (1x, 139.8 GiB)"] * 3,
            "run": ["reference run (H200, 2026-11-30)", "measured", "measured"],
            "network": ["monai", "med_ddpm", "med_ddpm"],
        }
    )
    assert _bar_labels(rows) == [
        "baseline (H200, 2026-11-30, MONAI stand-in)",
        "baseline (measured here, Med-DDPM network)",
        "tf32 (measured here, Med-DDPM network)",
    ]
    assert _bar_labels(rows.iloc[1:]) == ["baseline", "tf32"]  # nothing to tell apart: the configuration alone


@pytest.mark.parametrize("runs", [1, 2, 6])
def test_claims_figure_title_is_whole_with_few_or_many_bars(runs):
    """The verdicts figure of 1, 2 or all committed reference runs (2 to 20 bars) passes the checker: the title is
    the figure's, above the axes, neither clipped by long origin labels nor over the y label."""
    import glob

    import pandas as pd

    from accelbench.aggregate import claims_report

    files = sorted(
        glob.glob(str(figures.Path(__file__).resolve().parents[2] / "reference_runs/*/tables/claims/claims.csv"))
    )
    df = pd.concat([pd.read_csv(f) for f in files[:runs]], ignore_index=True)
    if runs == 1:
        df = df[df["study"] == df["study"].iloc[0]]  # one study: the shortest figure
    fig_problems = []
    real = figures.save_figure

    def keep(fig, path, dpi=150):
        fig_problems.extend(figure_check.figure_problems(fig, dpi))
        plt.close(fig)
        return fig_problems

    claims_report.save_figure = keep
    try:
        claims_report.fig_claims(df, "unused.png")
    finally:
        claims_report.save_figure = real
    assert fig_problems == []


def test_figures_of_every_committed_reference_run_at_once_pass_the_checker(tmp_path, capture):
    """What the embedded default draws: each experiment's figures over every committed reference run's results (the
    main DAG reads them all) beside CPU results. The Study A kernel figures (a bar per configuration and run, 55
    bars), the LoRA figure (seven runs in its legend) and the SR3 figure (20 series) ran off their canvases when one
    more run was committed; they grow with their bars, legends and titles and stay within a page."""
    from accelbench.experiments.lora import tables as study_b_lora
    from accelbench.experiments.sr3 import tables as study_b_sr3

    runs = figures.Path(__file__).resolve().parents[2] / "reference_runs"
    found = {e: sorted(str(p) for p in runs.glob(f"*/results/*/{e}/**/result.json")) for e in ("unet3d_profile",)}
    study_a.aggregate(
        found["unet3d_profile"] + [_fake(tmp_path, "cpu", "baseline", step=900.0)], CLAIMS, tmp_path / "a"
    )
    assert len(found["unet3d_profile"]) >= 29
    for name in ("fig_kernel_breakdown.png", "fig_kernel_counts.png"):
        assert_readable(capture, name, series_in_legend=False)
    lora = sorted(str(p) for p in runs.glob("*/results/*/lora_finetune/**/result.json"))
    study_b_lora.aggregate(lora, "resources/reference/study_b_finetune_runtime.csv", tmp_path / "l")
    assert_readable(capture, "fig_runtime_vs_devices.png")
    sr3 = sorted(str(p) for p in runs.glob("*/results/*/sr3_scaling/**/result.json"))
    study_b_sr3.aggregate(sr3, "resources/reference/study_b_sr3_scaling.csv", tmp_path / "s")
    assert_readable(capture, "fig_scaling.png")
    # every figure of the committed runs (before: SR3 26 legend entries and a reused colour, Study A's
    # speedup an entry without a bar and 2,376 px tall, LoRA 22 entries, energy 14)
    assert_readable(capture, "fig_speedup.png")
    from accelbench.aggregate import energy

    energy.aggregate(
        sorted(str(p) for p in runs.glob("*/results/**/result.json")), "resources/reference", tmp_path / "e"
    )
    assert_readable(capture, "fig_time_vs_energy.png", series_in_legend=False)
    for name, (_fig, problems) in capture.items():
        assert problems == [], (name, problems)


def _written(tmp_path, obj: dict, rel: str) -> str:
    """``obj`` as a result file at ``tmp_path/results/<rel>/result.json`` (where a job of this machine writes it)."""
    import json

    path = tmp_path / "results" / rel / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return str(path)


def test_the_embedded_defaults_figures_over_every_reference_run_and_this_cpu_pass(tmp_path, capture):
    """README command 1 draws each figure over every committed reference run beside this CPU's own results: with the
    H100 run committed its SR3 figure had 11 legend entries (6 published + best faithful and ours of H100, H200 and
    the CPU), the claims figure 1,620 px and the quantization layers 1,950 px, and the main run failed. Every figure
    holds at most 10 legend entries and a page, whatever the number of runs."""
    import fake_results as fr
    from accelbench.aggregate import claims_report
    from accelbench.experiments.sr3 import tables as study_b_sr3

    runs = figures.Path(__file__).resolve().parents[2] / "reference_runs"
    repo_ref = figures.Path(__file__).resolve().parents[2] / "resources" / "reference"
    sr3_ref = sorted(str(p) for p in runs.glob("*/results/*/sr3_scaling/**/result.json"))
    cpu = [
        _written(tmp_path, fr.sr3("cpu", n, ms, prec), f"cpu/sr3_scaling/{prec}/devices_{n}")
        for n, ms, prec in ((1, 100.0, "fp32"), (2, 60.0, "fp32"), (1, 50.0, "bf16"), (2, 30.0, "bf16"))
    ]
    study_b_sr3.aggregate(sr3_ref + cpu, repo_ref / "study_b_sr3_scaling.csv", tmp_path / "s")
    assert_readable(capture, "fig_scaling.png")
    every = sorted(str(p) for p in runs.glob("*/results/**/result.json"))
    claims_report.aggregate(every + cpu, repo_ref, tmp_path / "claims")
    assert_readable(capture, "fig_claims.png", series_in_legend=False)
    for name, (_fig, problems) in capture.items():
        assert problems == [], (name, problems)
