"""Nsight Compute: metric choice per architecture, parsing of a real recorded `ncu --csv` export, the
reduction, and the unsupported paths (Study A's counter-level analysis)."""

import csv
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest

from accelbench.experiments.unet3d_ncu import job as unet3d_ncu
from accelbench.measure import ncu
from accelbench.measure.kernel_classes import classify_kernel

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ncu_raw.csv"


def _header_metrics() -> set[str]:
    lines = FIXTURE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    return {ncu.base_name(h) for h in next(csv.reader([lines[start]]))}


def test_architecture_from_compute_capability():
    assert [ncu.architecture(cc) for cc in ("7.0", "7.5", "8.0", "8.9", "9.0", "10.0")] == [
        "volta",
        "volta",
        "ampere",
        "ampere",
        "hopper",
        "hopper",
    ]


def test_metric_choice_differs_per_architecture():
    volta, ampere, hopper = (ncu.choose_metrics(a, None) for a in ("volta", "ampere", "hopper"))
    assert volta["tensor_pipe_pct"].startswith("sm__pipe_tensor_cycles_active")
    assert ampere["tensor_pipe_pct"].startswith("sm__pipe_tensor_op_hmma_cycles_active")
    assert hopper["tensor_pipe_pct"].startswith("sm__pipe_tensor_op_gmma_cycles_active")
    assert volta["sm_cycles"] == ampere["sm_cycles"] == hopper["sm_cycles"] == "sm__cycles_elapsed.max"
    # a metric the installed ncu does not offer falls back to the next candidate, or is left out
    only_hmma = {ncu.base_name(m) for m in hopper.values()} - {"sm__pipe_tensor_op_gmma_cycles_active"}
    assert ncu.choose_metrics("hopper", only_hmma)["tensor_pipe_pct"].startswith("sm__pipe_tensor_op_hmma")
    assert "l1_hit_pct" not in ncu.choose_metrics("ampere", {"sm__cycles_elapsed"})


def test_recorded_h200_export_is_parsed_and_reduced():
    metrics = ncu.choose_metrics("hopper", _header_metrics())
    # ncu 2025.3 on the H200 offered no GMMA pipe metric: the HMMA one was the fallback actually recorded
    assert metrics["tensor_pipe_pct"].startswith("sm__pipe_tensor_op_hmma")
    kernels = ncu.parse_csv(FIXTURE.read_text(), metrics)
    assert len(kernels) == 15  # every kernel of the step inside the NVTX range
    assert all(k.values["sm_cycles"] > 0 and k.values["instructions"] >= 0 for k in kernels)
    red = ncu.reduce(kernels, classify_kernel)
    total = red["total"]
    assert total["kernels"] == 15 and {"convolution", "normalization", "layout_conversion"} <= set(red["by_class"])
    assert len(total["top_stalls"]) == 3 and total["top_stalls"][0][1] >= total["top_stalls"][1][1]
    conv = red["by_class"]["convolution"]
    assert conv["tensor_pipe_pct"] > 0  # TF32 convolutions ran on the tensor pipe
    check_reduction_against_raw_export(red)


def _raw_export():
    """The fixture read by pandas, independently of ncu.parse_csv: one row per kernel, numbers as floats."""
    import pandas as pd

    lines = FIXTURE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    df = pd.read_csv(io.StringIO("\n".join(lines[start:])), dtype=str)
    return df[pd.to_numeric(df["ID"], errors="coerce").notna()].reset_index(drop=True)  # drop the units row


def check_reduction_against_raw_export(red: dict) -> None:
    """Independent measures of the reduction of the recorded H200 export. Raises AssertionError on a mismatch.

    - sums: totals equal the column sums that pandas reads from the raw CSV;
    - IPC: every kernel's ``sm__inst_executed.avg.per_cycle_active`` is per SM and per *active* cycle, so it is
      at least its instructions / (SMs x elapsed cycles) and at most the device's IPC limit per SM (both from
      other columns of the export); a cycle-weighted mean of them obeys the same bounds over the whole set.
    """
    raw = _raw_export()
    num = lambda col: raw[col].astype(str).str.replace(",", "").astype(float)  # noqa: E731
    total = red["total"]
    assert total["kernels"] == len(raw)
    assert total["sm_cycles"] == pytest.approx(num("sm__cycles_elapsed.max").sum())
    assert total["instructions"] == pytest.approx(num("smsp__inst_executed.sum").sum())
    assert total["duration_ns"] == pytest.approx(num("gpu__time_duration.sum").sum())
    assert sum(c["sm_cycles"] for c in red["by_class"].values()) == pytest.approx(total["sm_cycles"])
    n_sm = num("device__attribute_multiprocessor_count").iloc[0]
    ipc_max = num("device__attribute_max_ipc_per_multiprocessor").iloc[0]
    assert n_sm == 132 and ipc_max == 4  # H200
    lower = num("smsp__inst_executed.sum") / (n_sm * num("sm__cycles_elapsed.max"))
    assert (lower <= num("sm__inst_executed.avg.per_cycle_active") + 0.01).all()
    assert total["instructions"] / (n_sm * total["sm_cycles"]) <= total["ipc"] <= ipc_max
    ipc = num("sm__inst_executed.avg.per_cycle_active")
    assert ipc.min() <= total["ipc"] <= ipc.max()
    # rates: numpy's weighted average of the raw columns, SM cycles as weights; stalls ranked from the same
    cycles = num("sm__cycles_elapsed.max").to_numpy()
    for counter, col in (
        ("ipc", "sm__inst_executed.avg.per_cycle_active"),
        ("l2_hit_pct", "lts__t_sector_hit_rate.pct"),
    ):
        assert total[counter] == pytest.approx(np.average(num(col).to_numpy(), weights=cycles))
    stalls = {
        c.split("stalled_")[1].split("_per_issue")[0]: np.average(num(c).to_numpy(), weights=cycles)
        for c in raw.columns
        if c.startswith("smsp__average_warps_issue_stalled_")
        and c.endswith(".ratio")
        and c.split("stalled_")[1].split("_per_issue")[0] in ncu.STALL_REASONS
    }
    top3 = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
    assert [k for k, _ in total["top_stalls"]] == [k for k, _ in top3] and top3[0][1] > top3[2][1]


def test_sabotage_ncu_reduction_is_caught(monkeypatch):
    """Sabotage: IPC as instructions / cycles (no SM count, what the old docstring said) or summed instead of
    averaged must fail the independent check."""
    metrics = ncu.choose_metrics("hopper", _header_metrics())
    kernels = ncu.parse_csv(FIXTURE.read_text(), metrics)
    red = ncu.reduce(kernels, classify_kernel)
    docstring_ipc = {**red, "total": {**red["total"], "ipc": red["total"]["instructions"] / red["total"]["sm_cycles"]}}
    with pytest.raises(AssertionError):
        check_reduction_against_raw_export(docstring_ipc)
    monkeypatch.setitem(ncu.COUNTERS, "ipc", {**ncu.COUNTERS["ipc"], "agg": "sum"})
    with pytest.raises(AssertionError):
        check_reduction_against_raw_export(ncu.reduce(kernels, classify_kernel))


def test_kernels_without_cycles_get_no_weight():
    """A kernel without sm_cycles does not weigh in a rate; with no weights at all, rates are plain means."""
    ks = [
        ncu.KernelCounters("a", {"sm_cycles": 100.0, "l2_hit_pct": 50.0}),
        ncu.KernelCounters("b", {"l2_hit_pct": 10.0}),
    ]
    assert ncu.reduce(ks, lambda n: "other")["total"]["l2_hit_pct"] == pytest.approx(50.0)
    ks = [
        ncu.KernelCounters("a", {"l2_hit_pct": 50.0}),
        ncu.KernelCounters("b", {"l2_hit_pct": 10.0}),
        ncu.KernelCounters("c", {"l2_hit_pct": 30.0}),
    ]
    assert ncu.reduce(ks, lambda n: "other")["total"]["l2_hit_pct"] == pytest.approx(30.0)
    ks = [ncu.KernelCounters("a", {"sm_cycles": 1.0}), ncu.KernelCounters("b", {"sm_cycles": 2.0, "ipc": 3.0})]
    total = ncu.reduce(ks, lambda n: "other")["total"]
    assert total["ipc"] == 3.0 and total["sm_cycles"] == 3.0  # a kernel without a counter is skipped, not zero


def test_cycle_weighted_ipc_is_instructions_over_cycles_when_sms_stay_active():
    """With every SM active for all of a kernel's cycles, per-kernel IPC = instructions / (SMs x cycles), and the
    cycle-weighted mean that reduce() takes equals instructions / (SMs x cycles) of the whole set."""
    n_sm = 132
    spec = [(1.0e6, 2000.0), (5.0e4, 900.0), (3.3e7, 41000.0)]  # (instructions, cycles)
    kernels = [
        ncu.KernelCounters(f"k{i}", {"instructions": inst, "sm_cycles": cyc, "ipc": inst / (n_sm * cyc)})
        for i, (inst, cyc) in enumerate(spec)
    ]
    total = ncu.reduce(kernels, lambda name: "other")["total"]
    assert total["ipc"] == pytest.approx(sum(i for i, _ in spec) / (n_sm * sum(c for _, c in spec)))


def test_parse_rejects_non_csv():
    with pytest.raises(ValueError, match="no ncu CSV header"):
        ncu.parse_csv("==ERROR== something went wrong\n", {"sm_cycles": "sm__cycles_elapsed.max"})


def test_kernel_base_names_and_command():
    assert (
        ncu.kernel_base_name("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, float)")
        == "RowwiseMomentsCUDAKernel"
    )
    assert (
        ncu.kernel_base_name("sm90_xmma_fprop_implicit_gemm_tf32f32_kernel__5x_cudnn")
        == "sm90_xmma_fprop_implicit_gemm_tf32f32_kernel__5x_cudnn"
    )
    cmd = ncu.command(
        "ncu", ["sm__cycles_elapsed.max"], ["python", "x.py"], "out.csv", kernel_names=["a", "b"], launch_count=50
    )
    joined = " ".join(cmd)
    assert "--clock-control none" in joined and "--nvtx-include accelbench_step/" in joined
    assert "--nvtx-include accelbench_step --nvtx-include" in joined  # the start/end range (backward thread too)
    assert "regex:^(a|b)$" in joined and "--launch-count 50" in joined and cmd[-3:] == ["--", "python", "x.py"]


def test_select_kernels_by_device_time(tmp_path):
    table = tmp_path / "kernels.csv"
    rows = [
        ("void k1<float>(int)", "convolution", 60.0),
        ("k2", "normalization", 30.0),
        ("Memset (Device)", "memory", 5.0),
        ("k3", "elementwise", 5.0),
    ]
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["name", "class", "tensor_core", "calls", "device_time_us", "share"])
        for n, c, t in rows:
            w.writerow([n, c, False, 1, t, t / 100])
    names, share = unet3d_ncu.select_kernels(table, coverage=0.85, max_kernels=10)
    assert names == ["k1", "k2"] and share == pytest.approx(0.9)
    assert unet3d_ncu.select_kernels(table, coverage=1.0, max_kernels=1)[0] == ["k1"]


def test_ncu_settings_are_the_config_block(default_config):
    """unet3d_ncu.run builds NcuSettings from the job spec's ``ncu`` (config ``unet3d_ncu`` without its
    configurations, the schema's defaults filled in): every key of the block is a field and every field a key."""
    block = {k: v for k, v in default_config["unet3d_ncu"].items() if k != "configurations"}
    settings = unet3d_ncu.NcuSettings(**block)
    assert {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)} == block


def test_unsupported_paths(systems, monkeypatch, tmp_path):
    kw = unet3d_ncu.NcuSettings(coverage=0.9, max_kernels=4, launch_count=10, warmup=0, timeout_s=60)
    spec = {"configuration": "baseline"}
    out = unet3d_ncu.profile_counters(spec, systems["cpu"], "i", "m", None, kw)
    assert out["status"] == "unsupported" and "NVIDIA GPUs" in out["reason"]
    assert (
        unet3d_ncu.profile_counters({"configuration": "tf32"}, systems["v100"], "i", "m", None, kw)["status"]
        == "unsupported"
    )
    table = tmp_path / "kernels.csv"
    table.write_text("name,class,tensor_core,calls,device_time_us,share\nk,convolution,False,1,1.0,1.0\n")
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    out = unet3d_ncu.profile_counters(spec, systems["h200"], "i", "m", str(table), kw)
    assert out["status"] == "unsupported" and "ncu (Nsight Compute) not found" in out["reason"]
    json.dumps(out)


# --------------------------------------------------------------------------- coverage pass (every kernel of the step)
def _fixture_kernels(metrics=None):
    return ncu.parse_csv(FIXTURE.read_text(), metrics or ncu.choose_metrics("hopper", _header_metrics()))


def _profiler_table(kernels, path):
    """A torch.profiler kernel table (kernels.csv) of the same step: one launch per recorded kernel, plus a memset."""
    rows = {}
    for k in kernels:
        r = rows.setdefault(k.name, {"calls": 0, "t": 0.0})
        r["calls"] += 1
        r["t"] += k.values["duration_ns"] / 1e3
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["name", "class", "tensor_core", "calls", "device_time_us", "share"])
        for n, r in rows.items():
            w.writerow([n, classify_kernel(n), False, r["calls"], r["t"], 0])
        w.writerow(["Memset (Device)", "memory", False, 1, 50.0, 0])
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_unnamed_namespace_base_name():
    assert (
        ncu.kernel_base_name("void at::<unnamed>::RowwiseMomentsCUDAKernel<float>(long, T1)")
        == "RowwiseMomentsCUDAKernel"
    )


def test_coverage_pass_totals_and_time_share(tmp_path):
    kernels = _fixture_kernels()
    detail = sorted(kernels, key=lambda k: -k.values["duration_ns"])[:3]  # a bounded detail pass: top 3 kernels
    rows = _profiler_table(kernels, tmp_path / "kernels.csv")
    full, part = ncu.time_coverage(rows, kernels), ncu.time_coverage(rows, detail)
    assert full["device_time_share"] == pytest.approx(1.0) and full["kernels_in_step"] == 15
    dur = lambda ks: sum(k.values["duration_ns"] for k in ks)  # noqa: E731
    # kernels sharing a base name count by launches: the profiler's time of that name times profiled/launched
    assert 0.5 < part["device_time_share"] < 1.0 and part["kernels_profiled"] == 3
    assert part["device_time_share"] >= dur(detail) / dur(kernels) - 1e-9
    cov_metrics = {
        c: m for c, m in ncu.choose_metrics("hopper", _header_metrics()).items() if c in ncu.COVERAGE_COUNTERS
    }
    coverage = [ncu.KernelCounters(k.name, {c: k.values[c] for c in cov_metrics}) for k in kernels]
    merged = ncu.merge_coverage(ncu.reduce(detail, classify_kernel), coverage, classify_kernel)
    t = merged["total"]
    assert t["sm_cycles"] == pytest.approx(sum(k.values["sm_cycles"] for k in kernels))  # measured over all kernels
    assert t["instructions"] == pytest.approx(sum(k.values["instructions"] for k in kernels))
    assert t["kernels"] == 15 and t["rate_kernels"] == 3
    every = ncu.reduce(kernels, classify_kernel)["total"]
    top = ncu.reduce(detail, classify_kernel)["total"]
    assert every["ipc"] != pytest.approx(top["ipc"])  # the fixture tells the two apart
    assert t["ipc"] == pytest.approx(every["ipc"])  # IPC and tensor pipe: measured over every kernel
    assert t["tensor_pipe_pct"] == pytest.approx(every["tensor_pipe_pct"])
    assert t["l2_hit_pct"] == pytest.approx(top["l2_hit_pct"])  # the other rates: the detail pass
    assert {"ipc", "tensor_pipe_pct", "sm_cycles"} <= set(t["coverage_counters"])
    assert t["rates_time_share"] == pytest.approx(dur(detail) / dur(kernels))
    conv = merged["by_class"]["convolution"]
    assert conv["sm_cycles"] == pytest.approx(
        sum(k.values["sm_cycles"] for k in kernels if classify_kernel(k.name) == "convolution")
    )


def test_two_pass_run_reaches_the_counters_table(systems, monkeypatch, tmp_path):
    """unet3d_ncu.run with a stand-in ncu replaying the recorded H200 export: the coverage pass sees all 15
    kernels, the detail pass (kernel-name filter) 3; the counters table reports the coverage."""
    import stat
    import sys
    import textwrap

    import torch

    from accelbench.experiments.unet3d_ncu import tables as study_a_ncu

    fake = tmp_path / "ncu"
    fake.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        a = sys.argv[1:]
        if "--version" in a:
            print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.0.0 (stand-in)"); sys.exit(0)
        import os
        if "--kernel-name" not in a and os.environ.get("FAKE_NCU_FAIL_COVERAGE"):
            print("==ERROR== simulated failure", file=sys.stderr); sys.exit(3)
        lines = open({str(FIXTURE)!r}).read().splitlines()
        if "--kernel-name" in a:  # detail pass: keep the header, units row and three kernels
            start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
            lines = lines[:start + 5]
        open(a[a.index("--log-file") + 1], "w").write("\\n".join(lines) + "\\n")
        """)
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(ncu, "ncu_path", lambda: str(fake))
    monkeypatch.setattr(ncu, "query_metrics", lambda exe: _header_metrics())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    table = tmp_path / "kernels.csv"
    _profiler_table(_fixture_kernels(), table)
    settings = unet3d_ncu.NcuSettings(coverage=0.9, max_kernels=4, launch_count=10, warmup=0, timeout_s=120)
    out = unet3d_ncu.profile_counters(
        {"configuration": "baseline"},
        systems["h200"],
        "i",
        "m",
        str(table),
        settings,
    )
    assert out["status"] == "ok", out["reason"]
    m = out["measurements"]
    assert m["profiled_kernels"] == 15 and m["detail_kernels"] == 3
    assert m["coverage"]["device_time_share"] == pytest.approx(1.0) and m["coverage"]["meets_target"]
    assert m["coverage"]["detail"]["kernels_profiled"] == 3 and m["coverage"]["detail"]["device_time_share"] < 1
    assert "--kernel-name" not in m["commands"]["coverage"] and "--kernel-name" in m["commands"]["detail"]
    stall = "smsp__average_warps_issue_stalled"
    assert stall not in m["commands"]["coverage"] and stall in m["commands"]["detail"]  # reduced metric set
    json.dumps(out)
    result = {
        "config": {"system": {"name": "h200"}, "model": "whole_head", "configuration": "baseline"},
        "status": "ok",
        "reason": None,
        "measurements": m,
        "_hardware": "NVIDIA H200",
        "_path": str(tmp_path / "x"),
    }
    row = study_a_ncu.table(study_a_ncu.counter_rows([result])).iloc[0]
    assert row["coverage_time_share"] == pytest.approx(1.0) and row["coverage_kernels"] == "15/15"
    assert row["sm_cycles_step_est"] == pytest.approx(m["total"]["sm_cycles"])  # as measured, not extrapolated
    assert 0 < row["rates_time_share"] < 1 and row["rates_over_every_kernel"] == "ipc, tensor_pipe_pct"
    assert "sm__inst_executed.avg.per_cycle_active" in m["commands"]["coverage"]
    off = unet3d_ncu.profile_counters(
        {"configuration": "baseline"},
        systems["h200"],
        "i",
        "m",
        str(table),
        dataclasses.replace(settings, coverage_pass=False),
    )
    assert off["measurements"]["profiled_kernels"] == 3 and not off["measurements"]["coverage"]["meets_target"]
    monkeypatch.setenv("FAKE_NCU_FAIL_COVERAGE", "1")  # a failed coverage pass: detail only, the error recorded
    failed = unet3d_ncu.profile_counters(
        {"configuration": "baseline"},
        systems["h200"],
        "i",
        "m",
        str(table),
        settings,
    )
    fc = failed["measurements"]["coverage"]
    assert failed["status"] == "ok" and "simulated failure" in fc["coverage_error"] and not fc["meets_target"]
    assert failed["measurements"]["profiled_kernels"] == 3 and "partial" in fc["totals_from"]


def test_extrapolation_states_that_its_two_sides_differ(tmp_path):
    """The coverage share divides ncu replay time by torch.profiler step time: the table says so and gives the
    share with both sides from torch.profiler beside it."""
    from accelbench.core import provenance, results
    from accelbench.experiments.unet3d_ncu import tables as study_a_ncu

    env = provenance.collect("cpu")
    paths = []
    for conf, inst in (("baseline", 1e9), ("tf32", 1e8)):
        cfg = {"system": {"name": "h200"}, "model": "whole_head", "configuration": conf}
        base = tmp_path / "h200"
        prof = results.make_result("unet3d_profile", "ok", cfg, env, {"kernels": {"device_time_us": 1000.0}}, None)
        results.write_result(prof, base / "unet3d_profile" / "whole_head" / conf / "result.json")
        m = {
            "total": {"sm_cycles": 1e6, "instructions": inst, "ipc": 1.0, "duration_ns": 500e3},
            "profiled_kernels": 10,
            "architecture": "hopper",
            "by_class": {},
            "kernel_selection": {"device_time_share": 0.8},
        }
        p = base / "unet3d_ncu" / "whole_head" / conf / "result.json"
        results.write_result(results.make_result("unet3d_ncu", "ok", cfg, env, m, None), p)
        paths.append(p)
    df = study_a_ncu.counter_rows(study_a_ncu.load_results(paths)).set_index("configuration")
    assert df.loc["tf32", "device_time_covered"] == pytest.approx(0.5)  # 500 us of ncu replay / 1000 us profiled
    assert df.loc["tf32", "device_time_covered_profiler"] == pytest.approx(0.8)
    assert "mixed" in df.loc["tf32", "device_time_covered_basis"] and "torch.profiler" in study_a_ncu.COVERAGE_BASIS
    assert df.loc["tf32", "instructions_ratio"] == pytest.approx(0.1)


def test_coverage_pass_plan_and_next_pass():
    """Bounded coverage passes: the plan splits the step's launches; past the plan one more pass runs while
    the last came back full (ncu saw more launches than the profiler); a short pass ends the range."""
    assert ncu.plan_coverage_passes(15, None) == [ncu.PassPlan(0, 0, None)]
    assert ncu.plan_coverage_passes(15, 20) == [ncu.PassPlan(0, 0, None)]
    plan = ncu.plan_coverage_passes(15, 4)
    assert [(p.launch_skip, p.launch_count) for p in plan] == [(0, 4), (4, 4), (8, 4), (12, 4)]
    assert ncu.next_pass(plan, []) == plan[0]
    assert ncu.next_pass(plan, [4, 4]) == plan[2]
    assert ncu.next_pass(plan, [4, 2]) is None  # the range ended inside pass 1
    assert ncu.next_pass(plan, [4, None]) == plan[2]  # a failed pass leaves the others
    assert ncu.next_pass(plan, [4, 4, 4, 3]) is None
    assert ncu.next_pass(plan, [4, 4, 4, 4]) == ncu.PassPlan(4, 16, 4)  # more launches than the profiler counted
    assert ncu.next_pass(plan, [4, 4, 4, None]) is None
    assert ncu.next_pass([ncu.PassPlan(0, 0, None)], [15]) is None
    with pytest.raises(ValueError, match="coverage_pass_launches"):
        ncu.plan_coverage_passes(15, 0)
    cmd = ncu.command("ncu", ["m"], ["prog"], "log.csv", launch_skip=8, launch_count=4)
    assert cmd[cmd.index("--launch-skip") + 1] == "8" and cmd[cmd.index("--launch-count") + 1] == "4"
    assert "--launch-skip" not in ncu.command("ncu", ["m"], ["prog"], "log.csv")


def _scripted_ncu(tmp_path) -> Path:
    """A stand-in ncu that replays the recorded H200 export (15 kernels) honouring --launch-skip/--launch-count and
    the detail pass's name filter (3 kernels); FAKE_NCU_FAIL_SKIP=<n> fails the coverage pass that skips n launches."""
    import stat
    import sys
    import textwrap

    fake = tmp_path / "ncu"
    fake.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys
        a = sys.argv[1:]
        if "--version" in a:
            print("Version 2025.3.0.0 (stand-in)"); sys.exit(0)
        lines = open({str(FIXTURE)!r}).read().splitlines()
        start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
        head, rows = lines[:start + 2], lines[start + 2:]
        if "--kernel-name" in a:
            rows = rows[:3]
        else:
            skip = int(a[a.index("--launch-skip") + 1]) if "--launch-skip" in a else 0
            if os.environ.get("FAKE_NCU_FAIL_SKIP") == str(skip):
                print("==ERROR== simulated failure", file=sys.stderr); sys.exit(3)
            count = int(a[a.index("--launch-count") + 1]) if "--launch-count" in a else len(rows)
            rows = rows[skip:skip + count]
        if not rows:
            print("==WARNING== No kernels were profiled."); sys.exit(0)
        open(a[a.index("--log-file") + 1], "w").write("\\n".join(head + rows) + "\\n")
        """)
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def test_bounded_coverage_passes_merge_to_the_single_pass(systems, monkeypatch, tmp_path):
    """Coverage split into passes of 4 launches (4 + 4 + 4 + 3): the merged totals and the two rates over every
    kernel equal one pass over all 15; each pass is recorded. A failed pass leaves the others and says so."""
    import torch

    monkeypatch.setattr(ncu, "ncu_path", lambda: str(_scripted_ncu(tmp_path)))
    monkeypatch.setattr(ncu, "query_metrics", lambda exe: _header_metrics())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    table = tmp_path / "kernels.csv"
    _profiler_table(_fixture_kernels(), table)
    run = unet3d_ncu.NcuSettings(coverage=0.9, max_kernels=4, launch_count=10, warmup=0, timeout_s=300)
    one = unet3d_ncu.profile_counters({"configuration": "baseline"}, systems["h200"], "i", "m", str(table), run)
    split = unet3d_ncu.profile_counters(
        {"configuration": "baseline"},
        systems["h200"],
        "i",
        "m",
        str(table),
        dataclasses.replace(run, coverage_pass_launches=4, coverage_pass_timeout_s=60),
    )
    assert one["status"] == split["status"] == "ok", (one["reason"], split["reason"])
    m1, m4 = one["measurements"], split["measurements"]
    passes = m4["coverage"]["coverage"]["passes"]
    assert [(p["launch_skip"], p["launch_count"], p["kernels"]) for p in passes] == [
        (0, 4, 4),
        (4, 4, 4),
        (8, 4, 4),
        (12, 4, 3),
    ] and not any(p["error"] for p in passes)
    assert m4["profiled_kernels"] == 15 and m4["coverage"]["device_time_share"] == pytest.approx(1.0)
    for counter in ("sm_cycles", "instructions", "duration_ns", "ipc", "tensor_pipe_pct"):
        assert m4["total"][counter] == pytest.approx(m1["total"][counter]), counter
    assert m4["by_class"].keys() == m1["by_class"].keys()
    monkeypatch.setenv("FAKE_NCU_FAIL_SKIP", "4")
    failed = unet3d_ncu.profile_counters(
        {"configuration": "baseline"},
        systems["h200"],
        "i",
        "m",
        str(table),
        dataclasses.replace(run, coverage_pass_launches=4),
    )["measurements"]
    fc = failed["coverage"]
    assert failed["profiled_kernels"] == 11 and "pass 1" in fc["coverage_error"] and "some failed" in fc["totals_from"]
    assert 0 < fc["device_time_share"] < 1  # the totals say what they hold


def test_rate_coverage_of_partial_coverage_passes():
    """A rate the coverage passes measured covers what they covered: all of the step, or less where one failed."""
    import pandas as pd

    from accelbench.experiments.unet3d_ncu import tables as study_a_ncu

    full = pd.Series({"rates_over_every_kernel": "ipc, tensor_pipe_pct", "coverage_time_share": 1.0})
    part = pd.Series({"rates_over_every_kernel": "ipc, tensor_pipe_pct", "coverage_time_share": 0.6})
    assert study_a_ncu.rate_coverage(full, "ipc") == (1.0, "every kernel")
    assert study_a_ncu.rate_coverage(part, "ipc") == (0.6, "coverage passes")
    assert study_a_ncu.rate_coverage(pd.Series({"rates_time_share": 0.07}), "ipc") == (0.07, "detail pass")
