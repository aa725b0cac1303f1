"""Copy kernels classed by what they do (kernel_classes.classify_kernel), checked on the real names of the committed
runs, and the class numbers re-derived from a result's kernels.csv for the Study A aggregation
(kernel_classes.reclassify)."""

import csv
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from accelbench.measure import kernel_classes

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
RUNS = REPO / "reference_runs"
COPY = re.compile(r"copy_kernel|LoadWithCast|StoreWithCast|convertTensor")
# Study A's tf32 + channels_last_3d step on Med-DDPM's network (H200, 2026-12-01), whose same-dtype strided copies
# are layout conversions
TF32_CL3D = RUNS / "h200x2-2026-12-01/results/h200/unet3d_profile/whole_head/tf32_channels_last_3d"


def _fixture_names() -> list[dict]:
    with open(FIXTURES / "copy_kernel_names.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _committed_tables() -> list[Path]:
    return sorted(RUNS.glob("*/results/**/kernels.csv"))


@pytest.mark.parametrize("row", _fixture_names(), ids=lambda r: f"{r['class']}:{r['name'][:60]}")
def test_recorded_copy_kernels_are_classed_by_what_they_do(row):
    """Every copy/cast kernel name recorded in the committed runs (verbatim, tests/fixtures/copy_kernel_names.csv):
    same-dtype strided copies (``direct_copy_kernel_cuda`` through ``gpu_kernel_impl_nocast``'s ``elementwise_kernel``,
    in torch.profiler's, Nsight Compute's and the cut SR3 profile's spellings) are layout conversions; the dynamic-cast
    ``unrolled_elementwise_kernel<direct_copy ... LoadWithCast<1>, StoreWithCast<1>>``, ``bfloat16_copy_kernel_cuda``
    and cuDNN's flat ``convertTensor_kernel`` are cast_copy."""
    assert kernel_classes.classify_kernel(row["name"]) == row["class"], row["recorded_in"]


def test_the_fixture_holds_both_classes_and_the_tf32_channels_last_kernel():
    rows = _fixture_names()
    assert {r["class"] for r in rows} == {"layout_conversion", "cast_copy"}
    strided = next(
        r for r in rows if str(TF32_CL3D.relative_to(REPO)) in r["recorded_in"] and r["class"] == "layout_conversion"
    )
    assert (
        strided["name"].startswith(
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
            "at::native::direct_copy_kernel_cuda("
        )
        and "{lambda(float)#1}" in strided["name"]
    )
    assert any(
        "LoadWithCast<1>, at::native::memory::StoreWithCast<1>" in r["name"] and r["class"] == "cast_copy" for r in rows
    )


def test_every_committed_copy_kernel_is_decided():
    """A copy kernel name that a committed kernels.csv holds and the fixture does not is a variant nobody has decided
    on: add it to tests/fixtures/copy_kernel_names.csv with the class its path proves
    (kernel_classes.KERNEL_CLASSES)."""
    known = {r["name"] for r in _fixture_names()}
    tables = _committed_tables()
    assert tables
    seen = set()
    for path in tables:
        for row in kernel_classes.read_kernel_table(path):
            if COPY.search(row["name"]) and not row["name"].startswith("triton_"):
                seen.add(row["name"])
    assert seen and seen <= known, sorted(n[:120] for n in seen - known)


@pytest.mark.parametrize(
    "name,cls",
    [
        # PyTorch's other copy paths, spelled as torch.profiler spells them (not in the committed runs)
        (
            (
                "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::"
                "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
                "operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda("
                "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
                "{lambda(float)#1} const&)::{lambda(int)#1}>(int, ...)"
            ),
            "cast_copy",
        ),  # strided, with a dynamic cast: the dtypes differ
        (
            (
                "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
                "bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}>(at::TensorIteratorBase&, ...)::"
                "{lambda(int)#1}>(int, ...)"
            ),
            "cast_copy",
        ),  # nocast, but the lambda converts float -> bfloat16
        (
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::"
                "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda("
                "float)#1}, std::array<char*, 2ul> >"
            ),
            "cast_copy",
        ),  # contiguous same-dtype copy: no layout change
        (
            (
                "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
                "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda("
                "float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, "
                "TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithoutCast, at::native::memory::"
                "StoreWithoutCast>"
            ),
            "cast_copy",
        ),  # contiguous
        (
            (
                "void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::"
                "native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() "
                "const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(at::"
                "TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)"
            ),
            "layout_conversion",
        ),  # Nsight Systems' spelling
        (
            "void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl<at::native::…",
            "elementwise",
        ),  # cut before the functor: nothing proves a copy
        (
            (
                "void cudnn::engines_precompiled::convertTensor_kernel<__nv_bfloat16, float, float, ("
                "cudnnKernelDataType_t)2>(float, __nv_bfloat16 const*, float, float*, unsigned long)"
            ),
            "cast_copy",
        ),
        ("aten::contiguous", "cast_copy"),  # a CPU operator: the name does not say whether the layout changes
    ],
)
def test_copy_paths_by_hand(name, cls):
    assert kernel_classes.classify_kernel(name) == cls


# --------------------------------------------------------------------------- re-deriving the class numbers
def _result(folder: Path) -> dict:
    return json.loads((folder / "result.json").read_text())


def _profiled_with_table() -> list[Path]:
    return [p.parent for p in _committed_tables() if (p.parent / "result.json").is_file()]


@pytest.mark.parametrize("folder", _profiled_with_table(), ids=lambda p: f"{p.parents[4].name}/{p.name}")
def test_reclassify_with_the_recorded_classes_gives_the_recorded_numbers(folder, monkeypatch):
    """reclassify is the arithmetic of summarize_kernels: fed the classes each run recorded, the committed kernels.csv
    gives back the run's measurements.kernels numbers (so a difference below comes from the rule alone)."""
    rows = kernel_classes.read_kernel_table(folder / "kernels.csv")
    recorded = {r["name"]: r["class"] for r in rows}
    monkeypatch.setattr(kernel_classes, "classify_kernel", recorded.__getitem__)
    k = _result(folder)["measurements"]["kernels"]
    again = kernel_classes.reclassify(rows)
    assert set(again) == set(kernel_classes.CLASS_FIELDS)
    assert again["class_share"] == pytest.approx(k["class_share"], rel=1e-9, abs=1e-12)
    assert again["class_time_us"] == pytest.approx(k["class_time_us"], rel=1e-9, abs=1e-6)
    assert again["tensor_core_share"] == pytest.approx(k["tensor_core_share"], rel=1e-9, abs=1e-12)
    assert again["layout_conversion_count"] == k["layout_conversion_count"]
    assert again["cast_copy_count"] == k["cast_copy_count"]


def test_reclassify_tf32_channels_last_3d_by_hand():
    """The tf32 + channels_last_3d step: 495 same-dtype strided copies (216.8 ms) join cuDNN's 12 transposes in
    layout_conversion; the 10 flat convertTensor conversions and 2 dtype casts are the cast_copy kernels. Counted here
    from the CSV by hand."""
    rows = kernel_classes.read_kernel_table(TF32_CL3D / "kernels.csv")
    total = sum(r["device_time_us"] for r in rows)
    layout = [
        r
        for r in rows
        if "nchwToNhwcKernel" in r["name"]
        or "nhwcToNchwKernel" in r["name"]
        or (
            "gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda" in r["name"]
            and r["name"].startswith("void at::native::elementwise_kernel<")
        )
    ]
    casts = [r for r in rows if "convertTensor_kernel" in r["name"] or "LoadWithCast" in r["name"]]
    new = kernel_classes.reclassify(rows)
    assert new["layout_conversion_count"] == sum(r["calls"] for r in layout) == 507
    assert new["cast_copy_count"] == sum(r["calls"] for r in casts) == 12
    assert new["class_share"]["layout_conversion"] == pytest.approx(sum(r["device_time_us"] for r in layout) / total)
    assert new["class_share"]["cast_copy"] == pytest.approx(sum(r["device_time_us"] for r in casts) / total)
    assert 0.32 < new["class_share"]["layout_conversion"] < 0.33  # was recorded as 0.3%
    k = _result(TF32_CL3D)["measurements"]["kernels"]
    assert k["class_share"]["layout_conversion"] < 0.004 and k["layout_conversion_count"] == 22  # as recorded
    assert new["tensor_core_share"] == pytest.approx(k["tensor_core_share"])  # not a class: unchanged
    assert sum(new["class_share"].values()) == pytest.approx(1.0)


def test_reclassify_recorded_moves_the_top_rows_only():
    """Without a kernels.csv the result's own top table is reclassified: its rows move; a tail kernel keeps its
    recorded class (here the 10 convertTensor launches, outside the top 25, stay in layout_conversion)."""
    k = _result(TF32_CL3D)["measurements"]["kernels"]
    full = kernel_classes.reclassify(kernel_classes.read_kernel_table(TF32_CL3D / "kernels.csv"))
    top = kernel_classes.reclassify_recorded(k)
    in_top = {r["name"] for r in k["table"]}
    tail_moved = [
        r
        for r in kernel_classes.read_kernel_table(TF32_CL3D / "kernels.csv")
        if r["name"] not in in_top and kernel_classes.classify_kernel(r["name"]) != r["class"]
    ]
    assert [r["name"][:50] for r in tail_moved] == ["void cudnn::engines_precompiled::convertTensor_ker"]
    moved = tail_moved[0]
    assert top["class_time_us"]["layout_conversion"] == pytest.approx(
        full["class_time_us"]["layout_conversion"] + moved["device_time_us"]
    )
    assert top["layout_conversion_count"] == full["layout_conversion_count"] + moved["calls"]
    assert top["cast_copy_count"] == full["cast_copy_count"] - moved["calls"]
    assert sum(top["class_time_us"].values()) == pytest.approx(k["device_time_us"])
    assert k["class_share"]["layout_conversion"] < 0.004  # the result itself is not changed


def test_current_classes_says_where_its_numbers_come_from(tmp_path):
    k = _result(TF32_CL3D)["measurements"]["kernels"]
    before = json.dumps(k, sort_keys=True)
    new, source = kernel_classes.current_classes(k, TF32_CL3D / "kernels.csv")
    assert source == kernel_classes.CLASSES_FROM_TABLE and new["layout_conversion_count"] == 507
    assert new["kernel_count"] == k["kernel_count"] and new["table"] == k["table"]  # the other fields as recorded
    new, source = kernel_classes.current_classes(k, tmp_path / "kernels.csv")  # named, but not kept
    assert source == kernel_classes.CLASSES_FROM_TOP and new["layout_conversion_count"] == 517
    bare = {f: v for f, v in k.items() if f != "table"}
    assert kernel_classes.current_classes(bare, None) == (bare, kernel_classes.CLASSES_AS_RECORDED)
    assert json.dumps(k, sort_keys=True) == before  # nothing written back into the result
    bad = tmp_path / "bad.csv"
    bad.write_text("name,class,calls,device_time_us\nk,other,x,1\n")
    with pytest.raises(ValueError, match="bad.csv: line 2"):
        kernel_classes.read_kernel_table(bad)


# --------------------------------------------------------------------------- Study A reads the current classes
def _study_a_rows(run: str):
    from accelbench.aggregate.common import load_results
    from accelbench.experiments.unet3d import tables as study_a

    paths = sorted(str(p) for p in (RUNS / run / "results").glob("*/unet3d_profile/**/result.json"))
    loaded = load_results(paths)
    return study_a, study_a.result_rows(loaded)


def _claim(configuration: str, metric: str):
    """A Study A claim as _measured_for_claim reads it (a11: channels_last_3d throughput gain; a12: tf32 +
    channels_last_3d speedup, in resources/reference/study_a_claims.csv)."""
    return pd.Series({"configuration": configuration, "metric": metric})


def test_study_a_rows_and_mechanism_text_use_the_current_classes():
    """Study A's rows of the committed 2026-12-01 run: layout conversion is 32% of the tf32 + channels_last_3d step
    (not 0.3%), and the a11/a12 mechanism text counts the strided copies as layout conversions."""
    study_a, df = _study_a_rows("h200x2-2026-12-01")
    rows = df.set_index("configuration")
    assert set(rows["kernel_classes"].dropna()) == {kernel_classes.CLASSES_FROM_TABLE}
    cl3d = rows.loc["tf32_channels_last_3d"]
    assert (cl3d["layout_conversion_kernels"], cl3d["cast_copy_kernels"]) == (507, 12)
    assert cl3d["share_layout_conversion"] == pytest.approx(0.3247, abs=5e-4)
    assert rows.loc["channels_last_3d", "layout_conversion_kernels"] == 1177
    assert rows.loc["channels_last_3d", "share_layout_conversion"] == pytest.approx(0.0923, abs=5e-4)
    assert rows.loc["tf32", "share_layout_conversion"] == pytest.approx(0.0848, abs=5e-4)
    assert sum(cl3d[f"share_{c}"] for c in study_a.CLASSES) == pytest.approx(1.0)
    assert "kernel_classes" in study_a.table(df)
    sysdf = df[~df["configuration"].str.endswith(study_a.AUTOTUNED)]
    a12, _ = study_a._measured_for_claim(_claim("tf32+channels_last_3d", "speedup_x"), sysdf)
    assert a12.endswith(
        "x, 507 layout-conversion kernels/step (+12 cast/copy kernels, counted apart), 32% of "
        "device time in layout conversion"
    )
    a11, _ = study_a._measured_for_claim(_claim("channels_last_3d", "throughput_gain"), sysdf)
    assert a11.endswith(
        "x, 1177 layout-conversion kernels/step (+2 cast/copy kernels, counted apart), 9% of "
        "device time in layout conversion"
    )


def test_study_a_rows_without_a_kept_kernel_table():
    """The 2026-11-30 run kept kernels.csv for some configurations only: the others are reclassified from their top
    25 kernels, and say so."""
    _, df = _study_a_rows("h200-2026-11-30")
    rows = df.set_index("configuration")
    auto = rows.loc["tf32_channels_last_3d_autotuned"]
    assert auto["kernel_classes"] == kernel_classes.CLASSES_FROM_TOP and auto["share_layout_conversion"] > 0.3
    assert rows.loc["tf32_channels_last_3d", "kernel_classes"] == kernel_classes.CLASSES_FROM_TABLE
    assert rows.loc["tf32_channels_last_3d", "share_layout_conversion"] > 0.3
