"""benchmarks/harness_overhead.py (the drivers in experiments/<name>/overhead.py, the generic parts in
accelbench.measure.overhead and accelbench.measure.ddp_profile): the interval math of the DDP profile (its 2-rank
CPU runs, which start torchrun, are in tests/workflow/test_harness_overhead_ranks.py)."""

import csv
import dataclasses
import json
import sys
from pathlib import Path

import pytest

from accelbench.experiments.lora import host_attribution as attribution
from accelbench.experiments.lora.overhead import case_of as lora_case
from accelbench.measure import ddp_profile as ddp
from accelbench.measure import overhead

REPO = Path(__file__).resolve().parents[2]


def test_union_and_overlap():
    assert ddp.union([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9), (8, 6)]) == [(0, 4), (5, 7)]
    assert ddp.covered([(0, 2), (1, 3), (10, 11)]) == 4
    assert ddp.overlap([(0, 10)], [(2, 3), (5, 12)]) == 1 + 5
    assert ddp.overlap([(0, 1)], [(1, 2)]) == 0
    # communication 0-10 and 20-30, compute 5-25 (in two overlapping pieces): 5 + 5 exposed
    comm, compute = [(0, 10), (20, 30)], [(5, 15), (12, 25)]
    assert ddp.not_overlapped(comm, compute) == 10
    assert ddp.not_overlapped(comm, []) == 20 and ddp.not_overlapped([], compute) == 0


def test_efficiency_pairs_each_run_with_its_own_one_device_row(tmp_path):
    """The CSV accumulates sessions (other nodes, other days): an N-device row is divided into the 1-device row of the
    same model measured closest in time, not into another session's."""
    fields = ["experiment", "case", "devices", "harness_ms", "bare_ms", "harness_over_bare", "product_ms", "when"]
    rows = [
        ["lora", "llama31_8b flash ddp", 2, 200.0, 200.0, 1.0, 250.0, "2026-11-30T08:13:29Z"],
        ["lora", "llama31_8b flash single", 1, 180.0, 160.0, 1.125, 190.0, "2026-11-30T08:13:48Z"],
        ["lora", "llama31_8b flash single", 1, 300.0, 300.0, 1.0, 280.0, "2026-11-30T13:20:06Z"],
        ["lora", "llama31_8b flash ddp", 2, 400.0, 375.0, 1.067, 350.0, "2026-11-30T13:21:42Z"],
        ["sr3", "fp32", 2, 100.0, 100.0, 1.0, 100.0, "2026-11-30T08:11:34Z"],
    ]  # no 1-device SR3 row: skipped
    path = tmp_path / "h.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        w.writerows(rows)
    assert overhead.efficiency(str(path)) == tmp_path / "h_efficiency.csv"
    out = list(csv.DictReader(open(tmp_path / "h_efficiency.csv")))
    assert [(r["when"], r["one_device_when"]) for r in out] == [
        ("2026-11-30T08:13:29Z", "2026-11-30T08:13:48Z"),
        ("2026-11-30T13:21:42Z", "2026-11-30T13:20:06Z"),
    ]
    assert [float(r["efficiency_harness"]) for r in out] == [0.9, 0.75]
    assert [float(r["efficiency_product"]) for r in out] == [0.76, 0.8]


def test_profile_metrics_from_a_synthetic_trace():
    k = lambda name, ts, dur, cat="kernel": {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}  # noqa: E731
    events = [
        k("gemm", 0, 400),
        k("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300, 300),
        k("Memcpy HtoD", 700, 100, "gpu_memcpy"),
        k("gemm", 900, 100),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5000},
    ]
    m = ddp.profile_metrics(events, steps=2)  # µs in, ms per step out
    assert m["window_ms"] == 0.5  # 0 .. 1000 µs over 2 steps
    assert m["gpu_busy_ms"] == pytest.approx(0.4)  # 0-600, 700-800, 900-1000 = 800 µs
    assert m["nccl_ms"] == 0.15 and m["exposed_comm_ms"] == pytest.approx(0.1)  # 400-600 not under compute
    assert m["compute_ms"] == pytest.approx(0.3) and m["gpu_idle_ms"] == pytest.approx(0.1)  # 600-700, 800-900
    assert m["kernels_per_step"] == 1.5
    classes = json.loads(m["class_ms"])  # kernel time per step by class, largest first
    from accelbench.measure.kernel_classes import classify_kernel

    nccl = classify_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert classes == {"gemm": 0.25, nccl: 0.15} and list(classes) == ["gemm", nccl]
    assert sum(classes.values()) == pytest.approx(0.4)  # 400 + 300 + 100 µs of kernels over 2 steps (copies apart)
    top = json.loads(m["top_kernels"])  # by name, largest first: [name, ms per step, launches per step, class]
    assert top == [["gemm", 0.25, 1.0, "gemm"], ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0.15, 0.5, nccl]]
    assert len(json.loads(ddp.top_kernels(events, 2, n=1))) == 1
    assert len(json.loads(ddp.top_kernels([k("x" * 5000, 0, 1)], 1))[0][0]) == ddp.KERNEL_NAME_CHARS
    assert set(ddp.profile_metrics(events[-1:], 2).values()) == {None}  # no device activity (CPU): no device numbers


def test_profile_csv_with_an_older_header_is_rewritten_with_the_new_column(tmp_path):
    """Rows appended to a CSV written before ``class_ms`` existed line up with the header (the old rows kept)."""
    upgrade_header = overhead.upgrade_header
    path = tmp_path / "p.csv"
    old = [f for f in ddp.PROFILE_FIELDS if f not in ("class_ms", "top_kernels")]
    path.write_text(",".join(old) + "\n" + ",".join("x" if f == "case" else "" for f in old) + "\n")
    upgrade_header(path, ddp.PROFILE_FIELDS)
    rows = list(csv.DictReader(path.open()))
    assert (
        list(rows[0]) == ddp.PROFILE_FIELDS
        and rows[0]["case"] == "x"
        and rows[0]["class_ms"] == rows[0]["top_kernels"] == ""
    )
    upgrade_header(path, ddp.PROFILE_FIELDS)  # idempotent
    assert path.read_text().count("\n") == 2


def test_sr3_host_bound_rows(tmp_path, default_config, systems):
    """`sr3-host-bound` on the small SR3 U-Net (CPU, 1 thread): the rule's Trainer in its own data path, with batches
    already on the device and with 1 DataLoader worker; one row each, positive times, the variants named."""
    import subprocess

    from accelbench.experiments.sr3 import data as sky

    u = default_config["sr3_scaling"]
    run = {
        k: u[k]
        for k in ("workload_iterations", "max_iterations", "warmup", "quality_images", "quality_sample_steps", "seed")
    }
    spec = {
        "system": systems["cpu"].to_dict(),
        "devices": 1,
        "precision": "bf16",
        "configuration": "bf16",
        "preset": u["preset"],
        "scales": u["scales"],
        "run": run,
    }
    sky.prepare(tmp_path / "d.npz", patch=u["scales"]["small"]["hr_size"], factor=u["preset"]["factor"])
    (tmp_path / "result.json").write_text(
        json.dumps({"status": "ok", "config": spec, "measurements": {"parameters": 1}})
    )
    out = tmp_path / "h.csv"
    cmd = [
        sys.executable,
        str(REPO / "benchmarks/harness_overhead.py"),
        "sr3-host-bound",
        "--result",
        str(tmp_path / "result.json"),
        "--data",
        str(tmp_path / "d.npz"),
        "--csv",
        str(out),
        "--workers",
        "1",
        "--threads",
        "1",
        "--warmup",
        "1",
        "--repeat",
        "2",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = list(csv.DictReader(out.open()))
    assert [r["variant"] for r in rows] == ["workers=0", "device-resident", "workers=1"]
    assert all(float(r[k]) > 0 for r in rows for k in ("median_ms", "host_ms", "next_batch_host_ms"))
    assert {r["case"] for r in rows} == {"bf16 (ours)"} and rows[0]["steps"] == "2"


def test_sr3_bare_loop_takes_the_faithful_data_path(monkeypatch):
    """For a configuration with the authors' data path the bare loop draws its batches through the same
    kind of DataLoader (workers capped at the rank's cores, blocking copy) as the Trainer; ours' bare loop keeps its
    batches on the device. The row's settings say the data path."""
    import numpy as np
    import torch

    from accelbench.experiments.sr3 import bare as bench
    from accelbench.experiments.sr3 import batches as sr3_batches
    from accelbench.experiments.sr3 import configs as sr3_configs
    from accelbench.experiments.sr3 import model as exp
    from accelbench.experiments.sr3.settings import resolve_settings

    s = resolve_settings(
        dict(
            hr_size=32,
            factor=4,
            inner_channels=8,
            channel_mult=[1, 2, 2],
            num_res_blocks=1,
            attention_resolutions=[8],
            num_heads=1,
            dropout=0.0,
            norm_groups=4,
            timesteps=20,
            beta_start=1e-6,
            beta_end=1e-2,
            lr=2e-5,
            batch_size=4,
        ),
        "small",
        {},
    )
    ds = exp.PatchSet(np.random.rand(8, 32, 32).astype(np.float32), np.random.rand(8, 8, 8).astype(np.float32), 32)
    loaders, copies = [], []
    batch_loader, to_device = exp.batch_loader, exp.to_device
    monkeypatch.setattr(exp, "batch_loader", lambda *a, **kw: loaders.append(kw) or batch_loader(*a, **kw))
    monkeypatch.setattr(
        exp, "to_device", lambda x, dev, fmt, blocking: copies.append(blocking) or to_device(x, dev, fmt, blocking)
    )
    monkeypatch.setattr(sr3_batches, "rank_cores", lambda: 1)  # where batch_loader looks it up
    faithful = sr3_configs.get("faithful")
    step, _ = bench.sr3_bare(s, ds, bench.BareRank(torch.device("cpu")), "fp32", 0, faithful)
    for _ in range(3):  # 8 patches, batch 4: across an epoch boundary
        step()
    assert loaders == [{"pin_memory": False, "workers": 8, "blocking": True}] and copies == [True] * 6
    loaders.clear(), copies.clear()
    step, _ = bench.sr3_bare(s, ds, bench.BareRank(torch.device("cpu")), "bf16", 0, sr3_configs.get("bf16"))
    step()
    assert loaders == [] and copies == []  # ours: batches already on the device
    _, _, d = batch_loader(ds, 4, 0, 1, 0, pin_memory=False, workers=8, blocking=True)
    assert bench.data_path_text(d, True) == (
        "data: DataLoader 1 workers (of 8 requested), pin_memory False, blocking copy (bare loop the same)"
    )
    _, _, d = batch_loader(ds, 4, 0, 1, 0, pin_memory=True)
    assert bench.data_path_text(d, False) == (
        "data: DataLoader 0 workers, pin_memory True, non_blocking copy (bare loop: batches already on the device)"
    )
    # a result made with another data path (the committed faithful result of 2026-12-01: no workers, non-blocking)
    here = {"loader_workers": 1, "copy": "blocking"}
    old_result = {"measurements": {"data_path": {"pin_memory": True, "non_blocking_copies": True, "loader_workers": 0}}}
    assert (
        "the result ran another data path (0 workers, non_blocking copy; here 1, blocking)"
        in bench.result_data_path_differs(old_result, here)
    )
    assert bench.result_data_path_differs({"measurements": {"data_path": here}}, here) == ""


def test_row_cells_are_the_csv_columns(monkeypatch):
    """overhead.Row: its cells are the CSV's columns in order, times to 3 decimals, ratios to 4; no product time
    leaves both product cells empty."""
    from types import SimpleNamespace

    monkeypatch.setattr(overhead, "now", lambda: "2026-01-01T00:00:00Z")
    host = SimpleNamespace(ops=SimpleNamespace(accelerator=False), index=0)
    measured = overhead.Row(
        experiment="sr3",
        case="bf16 (ours)",
        devices=2,
        harness_ms=10.12345,
        bare_ms=9.87654,
        product_ms=10.5,
        steps=30,
        threads_per_rank=4,
        cudnn_benchmark=True,
        settings="batch 4/device",
    )
    cells = measured.cells(host)
    assert list(cells) == overhead.FIELDS
    assert cells == {
        "experiment": "sr3",
        "case": "bf16 (ours)",
        "devices": 2,
        "harness_ms": 10.123,
        "bare_ms": 9.877,
        "harness_over_bare": round(10.12345 / 9.87654, 4),
        "product_ms": 10.5,
        "product_over_bare": round(10.5 / 9.87654, 4),
        "steps": 30,
        "threads_per_rank": 4,
        "cudnn_benchmark": True,
        "settings": "batch 4/device",
        "device": "cpu",
        "when": "2026-01-01T00:00:00Z",
    }
    none = dataclasses.replace(measured, product_ms=None).cells(host)
    assert none["product_ms"] is None and none["product_over_bare"] is None


def test_percentiles():
    assert overhead.percentiles([5.0]) == {"median_ms": 5.0, "p10_ms": 5.0, "p90_ms": 5.0}
    p = overhead.percentiles([float(x) for x in range(1, 12)])  # 1..11: inclusive deciles fall on the values
    assert p == {"median_ms": 6.0, "p10_ms": 2.0, "p90_ms": 10.0}
    with pytest.raises(ValueError):
        overhead.percentiles([])


def test_part_timers_count_outermost_calls_while_enabled_and_restore():
    """`host-overhead` attributes host time with wrappers on the Trainer's parts: a recursive part (Module.train walks
    every module) counts once per outermost call, nothing is counted while disabled, and the originals come back."""

    class Tree:
        def walk(self, n):
            return 1 if n == 0 else 1 + self.walk(n - 1)

    orig = Tree.__dict__["walk"]
    timers = attribution.PartTimers([("walk", Tree, "walk", "trainer", "")])
    assert Tree().walk(3) == 4 and timers.calls["walk"] == 0  # disabled: not counted
    timers.enable()
    assert Tree().walk(5) == 6 and Tree().walk(0) == 1
    timers.disable()
    Tree().walk(2)
    assert timers.calls["walk"] == 2 and timers.ms["walk"] >= 0
    timers.restore()
    assert Tree.__dict__["walk"] is orig


# measurements.series / measurements.trainer_settings of the H200 LoRA results (reference run h200x2-2026-12-01,
# llama31_8b flash single n1: `ours` and `faithful`), the fields the bare loop reads
OURS = {
    "series": {
        "series": "ours",
        "logging_steps": None,
        "no_step_sync": True,
        "fast_host_step": True,
        "non_blocking_copies": True,
        "adapter_dtype": "bf16",
        "compile": True,
        "liger": False,
        "adapters_cast_to": "bfloat16",
    },
    "trainer_settings": {
        "logging_strategy": "no",
        "logging_steps": 500,
        "logging_nan_inf_filter": False,
        "include_num_input_tokens_seen": "no",
        "average_tokens_across_devices": False,
        "lr_scheduler_type": "constant",
        "torch_compile": True,
        "use_liger_kernel": False,
        "optim": "adamw_torch_fused",
        "batch_copy": "non_blocking, pinned",
        "attention_mask_in_batch": False,
        "fast_host_step": True,
        "max_grad_norm": 0.3,
        "gradient_accumulation_steps": 2,
        "per_device_train_batch_size": 2,
    },
}
FAITHFUL = {
    "series": {
        **OURS["series"],
        "series": "faithful",
        "logging_steps": 1,
        "no_step_sync": False,
        "fast_host_step": False,
        "non_blocking_copies": False,
        "compile": False,
    },
    "trainer_settings": {
        **OURS["trainer_settings"],
        "logging_strategy": "steps",
        "logging_steps": 1,
        "logging_nan_inf_filter": True,
        "average_tokens_across_devices": True,
        "torch_compile": False,
        "batch_copy": "accelerate default (blocking)",
        "fast_host_step": False,
    },
}


@pytest.fixture(scope="module")
def lora():
    """The LoRA bare loop and its settings (:mod:`accelbench.experiments.lora.bare`)."""
    from accelbench.experiments.lora import bare

    return bare


# a result's config.series_options as the rules write them (the H200 reference runs' results)
SERIES_OPTIONS = {
    "ours": {"compile": True, "liger": "auto", "loss_tolerance": 0.02},
    "faithful": {"job_set": "2026-03"},
}


def _lora_result(measurements: dict, backend: str = "cpu") -> dict:
    """A LoRA result.json of a tiny random-init Llama on ``backend`` whose measurements are ``measurements``."""
    from accelbench.core.systems import System
    from accelbench.experiments.lora.settings import LoraSettings

    s = LoraSettings(
        r=4,
        alpha=4,
        seq_len=16,
        per_device_batch=2,
        grad_accum=2,
        warmup_steps=1,
        timed_steps=2,
        precision="fp32" if backend == "cpu" else "bf16",
    )
    system = System(name=backend, backend=backend, devices=1, precisions=("fp32", "bf16"), image="cuda", scale="small")
    spec = {
        "model_name": "tiny",
        "attention": "flash",
        "strategy": "single",
        "devices": 1,
        "settings": s.to_dict(),
        "system": system.to_dict(),
        "series": measurements["series"]["series"],
        "series_options": SERIES_OPTIONS[measurements["series"]["series"]],
        "model": {
            "source": "random",
            "config": {
                "model_type": "llama",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 100,
            },
        },
    }
    return {"status": "ok", "config": spec, "measurements": measurements}


def test_lora_bare_settings_are_the_results(lora):
    """The bare loop's settings come from the result it is compared with (the H200 `ours` result: compiled, pinned
    non-blocking copies, no logging; `faithful`: eager, blocking copies, the loss read every step), and the CSV's
    settings column states them."""
    from accelbench.core.harness import system_from
    from accelbench.experiments.lora.settings import Plan

    plan = Plan(strategy="single", devices=1, attention="flash", attn_implementation="sdpa", precision="bf16")
    ours_r, faithful_r = _lora_result(OURS, "cuda"), _lora_result(FAITHFUL, "cuda")
    s = lora_case(ours_r)[2]
    ours = lora.bare_settings(ours_r, s, plan, system_from(ours_r["config"]))
    assert (ours.compile, ours.compile_backend, ours.fused_adamw, ours.adapters_bf16, ours.batch_copy) == (
        True,
        "inductor",
        True,
        True,
        "non_blocking",
    )
    assert (ours.log_every, ours.nan_inf_filter, ours.average_tokens, ours.max_grad_norm) == (None, False, False, 0.3)
    assert not ours.not_reproduced
    text = lora.settings_text(s, plan, ours)
    assert "compile True (inductor)" in text and "batch copy non_blocking" in text and "attention flash (sdpa)" in text
    faithful = lora.bare_settings(faithful_r, lora_case(faithful_r)[2], plan, system_from(faithful_r["config"]))
    assert (
        faithful.compile,
        faithful.batch_copy,
        faithful.log_every,
        faithful.nan_inf_filter,
        faithful.average_tokens,
    ) == (False, "blocking", 1, True, True)
    assert any("fast_host_step False" in n for n in faithful.not_reproduced)  # stated, not silently left out
    text = lora.settings_text(s, plan, faithful)
    assert "compile False" in text and "logging every 1 step(s)" in text and "not reproduced: Trainer's" in text
    # a harness run that does not compile against a compiled result: said in the row
    harness = {"trainer_settings": {**OURS["trainer_settings"], "torch_compile": False}, "series": OURS["series"]}
    differs = lora.harness_differences(OURS, harness)
    assert differs == ["torch_compile False here, True in the result"]
    assert "harness run differs from the result: torch_compile False" in lora.settings_text(s, plan, ours, differs)
    bad = _lora_result({**OURS, "trainer_settings": {**OURS["trainer_settings"], "gradient_accumulation_steps": 4}})
    with pytest.raises(SystemExit, match="gradient_accumulation_steps"):
        lora.bare_settings(bad, s, plan, system_from(bad["config"]))


def test_lora_bare_loop_takes_the_folded_batch_of_a_fold_result(lora):
    """A result of an ours variant with ``fold_grad_accum`` (the Trainer ran one micro-batch of 4 x 1 per optimizer
    step for the setting's 2 x 2): the case the bare loop mirrors is read through the same settings (4 x 1), its
    recorded Trainer batch agrees with them, the loop's step draws one [4, seq] micro-batch per optimizer step, and
    the CSV's settings say 4x1; a result whose Trainer settings say 2 x 2 under that config is refused (not the same
    work)."""
    ts = {**OURS["trainer_settings"], "torch_compile": False}
    ts.update(per_device_train_batch_size=4, gradient_accumulation_steps=1)
    result = _lora_result({**OURS, "trainer_settings": ts})
    result["measurements"]["series"] = {**OURS["series"], "series": "ours_fold", "fold_grad_accum": True}
    result["config"]["series"] = "ours_fold"  # ours_variants.fold as the rules write its options
    result["config"]["series_options"] = {**SERIES_OPTIONS["ours"], "liger": False, "fold_grad_accum": True}
    spec, system, s, plan = lora_case(result)
    assert (s.per_device_batch, s.grad_accum) == (4, 1)
    mirror = lora.bare_settings(result, s, plan, system)
    step, _ = lora.lora_bare(spec, system, plan, s, mirror=mirror)
    assert step.grad_accum == 1
    step.before()
    assert [tuple(ids.shape) for ids, _ in step.batches] == [(4, s.seq_len)]
    step.body()
    assert step.steps == 1
    assert "batch 4x1/device" in lora.settings_text(s, plan, mirror)
    unfolded = {**result, "measurements": {**result["measurements"], "trainer_settings": OURS["trainer_settings"]}}
    with pytest.raises(SystemExit, match="per_device_train_batch_size 2 differs from its config's 4"):
        lora.bare_settings(unfolded, s, plan, system)


def test_lora_bare_loop_applies_the_results_liger_kernels_and_compile_mode(lora, monkeypatch):
    """A result whose Trainer applied some of Liger's kernels (TrainingArguments.liger_kernel_config) and compiled in a
    mode (torch_compile_mode) gets a bare loop that applies those kernels, no others, and compiles in that mode; the
    bare loop applied Liger's default kernels (with the fused linear cross-entropy, which fails under the Trainer on an
    H200) and torch.compile's default mode whatever the result ran."""
    import importlib.util
    import sys
    import types

    import torch

    config = {
        "rope": True,
        "rms_norm": False,
        "swiglu": True,
        "fused_linear_cross_entropy": False,
        "cross_entropy": False,
    }
    ts = {**OURS["trainer_settings"], "use_liger_kernel": True, "liger_kernel_config": config}
    ts["torch_compile_mode"] = "reduce-overhead"
    result = _lora_result({**OURS, "trainer_settings": ts}, "cuda")
    spec, system, s, plan = lora_case(result)
    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "liger_kernel" else find(n, *a))
    mirror = lora.bare_settings(result, s, plan, system)
    assert mirror.liger and mirror.liger_kernels == ("rope", "swiglu") and mirror.compile_mode == "reduce-overhead"
    assert "compile True (inductor, reduce-overhead), liger True (rope, swiglu)" in lora.settings_text(s, plan, mirror)
    flce = lora.with_liger_kernels(mirror, "fused_linear_cross_entropy")  # --liger-kernels: the isolation's kernel
    assert flce.liger_kernels == ("fused_linear_cross_entropy",) and "--liger-kernels" in flce.describe()
    # the loop, built on the CPU: the kernels named reach Liger, the mode reaches torch.compile
    applied, compiled = [], []
    fake = types.ModuleType("liger_kernel.transformers")
    fake._apply_liger_kernel_to_instance = lambda model, **kw: applied.append(kw)
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", fake)
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compiled.append(kw) or model)
    spec, system, s, plan = lora_case(_lora_result({**OURS, "trainer_settings": ts}))
    lora.lora_bare(spec, system, plan, s, mirror=mirror)
    assert applied == [config]
    assert compiled == [{"backend": "inductor", "mode": "reduce-overhead"}]


@pytest.mark.parametrize("measurements,compiled,reads", [(OURS, True, 0), (FAITHFUL, False, 2)])
def test_lora_bare_loop_runs_the_results_settings(lora, monkeypatch, measurements, compiled, reads):
    """The bare loop built from an `ours` result (compile True) compiles its model as Trainer does (torch.compile
    around the model, backend inductor; recorded here, not compiled), a `faithful` one stays eager and reads the loss
    and the grad norm on the host after every optimizer step (logging_steps 1)."""
    import torch

    calls = []

    def fake_compile(model, **kw):
        calls.append((model, kw))
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    result = _lora_result(measurements)
    spec, system, s, plan = lora_case(result)
    mirror = lora.bare_settings(result, s, plan, system)
    step, net = lora.lora_bare(spec, system, plan, s, mirror=mirror)
    assert [kw for _, kw in calls] == ([{"backend": "inductor"}] if compiled else [])
    assert not calls or calls[0][0] is net
    items = []
    item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda t: items.append(1) or item(t))
    step()
    step()
    assert len(items) == 2 * reads
    # the timed part (the window of the product's step timer) makes no logging reads: they come after it
    items.clear()
    step.before()
    step.body()
    assert items == []
    step.after()
    assert len(items) == reads
    assert f"compile {compiled}" in lora.settings_text(s, plan, mirror)


def _padded_micro_batches(steps: int, grad_accum: int, batch: int, seq: int, vocab: int) -> list:
    """``steps x grad_accum`` micro-batches ``(input_ids, labels)`` [batch, seq] whose label tails are -100 (padding),
    of a length that differs from one micro-batch to the next: the label-token counts differ between them."""
    import torch

    g = torch.Generator().manual_seed(7)
    out = []
    for i in range(steps * grad_accum):
        ids = torch.randint(1, vocab, (batch, seq), generator=g)
        labels = ids.clone()
        labels[:, seq - (1 + 5 * (i % grad_accum)) - i % 3 :] = -100
        out.append((ids, labels))
    return out


def test_lora_bare_loop_loss_is_the_trainers_with_num_items_in_batch(lora, tmp_path):
    """The bare loop calls the model as the result's Trainer does (transformers 5.x ``compute_loss`` passes
    ``num_items_in_batch``, the step's label-token count, into the forward of a model that accepts loss kwargs;
    ``training_step`` then leaves the loss undivided by the accumulation): on micro-batches with -100 label tails of
    different lengths and grad_accum 2, the bare loop's loss of every optimizer step equals the product's Trainer's
    (``LossCurveMixin``) on the same model copy and batches. Turned off (``--no-num-items-in-batch``, the bare loop
    before it mirrored the call: each micro-batch's mean / grad_accum), the first step's loss already differs."""
    import copy

    import torch
    from transformers import Trainer

    from accelbench.experiments.lora.trainer import loss_curve_trainer, training_arguments_kwargs

    ts = {**OURS["trainer_settings"], "torch_compile": False}
    result = _lora_result({**OURS, "trainer_settings": ts})
    spec, system, s, plan = lora_case(result)
    s = dataclasses.replace(s, dropout=0.0)  # LoRA dropout draws masks from each side's own generator state
    mirror = lora.bare_settings(result, s, plan, system)
    assert mirror.num_items_in_batch is None and "num_items_in_batch as the model accepts loss kwargs" in (
        mirror.describe()
    )
    steps = 3
    batches = _padded_micro_batches(steps, s.grad_accum, s.per_device_batch, s.seq_len, 100)

    def bare_losses(settings):
        step, net = lora.lora_bare(spec, system, plan, s, mirror=settings)
        trainer_copy = copy.deepcopy(net)  # the Trainer's model: the same weights and adapters, before any step
        step.fetch = iter(batches).__next__
        losses = []
        for _ in range(steps):
            step()
            losses.append(step.tr_loss.item())
        return step, losses, trainer_copy

    step, mirrored, model = bare_losses(mirror)
    assert step.mirror.num_items_in_batch is True  # Llama's forward takes **kwargs: Trainer passes the count
    assert "num_items_in_batch True" in lora.settings_text(s, plan, step.mirror)
    off = lora.without_num_items_in_batch(mirror)
    assert "num_items_in_batch False" in off.describe() and "--no-num-items-in-batch" in off.describe()
    _, unmirrored, _ = bare_losses(off)

    kw = training_arguments_kwargs(plan, s, "cpu", str(tmp_path), steps)
    kw.update(optim="adamw_torch_fused" if mirror.fused_adamw else "adamw_torch", train_sampling_strategy="sequential")
    kw.update(disable_tqdm=True, average_tokens_across_devices=mirror.average_tokens)
    from transformers import TrainingArguments

    samples = [{"input_ids": i, "labels": la} for ids, labels in batches for i, la in zip(ids, labels)]
    trainer = loss_curve_trainer(Trainer)(model=model, args=TrainingArguments(**kw), train_dataset=samples)
    assert trainer.model_accepts_loss_kwargs
    trainer.train()
    product = trainer.loss_curve()
    assert len(product) == steps
    torch.testing.assert_close(mirrored, product, rtol=1e-6, atol=1e-6)
    assert abs(unmirrored[0] - product[0]) > 1e-3, (unmirrored, product)


@pytest.mark.parametrize("flag,mirrored", [([], True), (["--no-num-items-in-batch"], False)])
def test_lora_bare_only_command_runs_the_bare_loop_alone(tmp_path, monkeypatch, capsys, flag, mirrored):
    """The documented ``lora --bare-only [--no-num-items-in-batch]`` command (the isolation experiment's two sides):
    the bare loop of the result alone (no Trainer run: where it fails it would leave the device unusable), each
    step's loss printed, the loss call as asked."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import harness_overhead
    from accelbench.experiments.lora import train

    monkeypatch.setattr(train, "train_rank", lambda *a, **k: pytest.fail("the Trainer ran"))
    path = tmp_path / "result.json"
    path.write_text(
        json.dumps(_lora_result({**OURS, "trainer_settings": {**OURS["trainer_settings"], "torch_compile": False}}))
    )
    harness_overhead.main(["lora", "--bare-only", *flag, "--result", str(path), "--csv", str(tmp_path / "h.csv")])
    out = capsys.readouterr().out
    assert f"num_items_in_batch {mirrored}" in out.split("bare loop as run:")[1]
    assert "bare step 3: loss " in out and "bare loop median step" in out
    assert not (tmp_path / "h.csv").exists()
    # --liger-kernels: one clear line for an unknown name, and for Liger off here (no liger_kernel, no CUDA device)
    for kernels, match in (("fused_linear_cross_entropy,flce", "unknown kernel 'flce'"), ("rope", "Liger is off")):
        with pytest.raises(SystemExit, match=match):
            harness_overhead.main(["lora", "--bare-only", "--liger-kernels", kernels, "--result", str(path)])


def test_sr3_bare_loop_compiles_as_the_trainer_does(monkeypatch):
    """The bare loop's ``torch.compile`` gets the configuration's mode and Inductor options (the forced layout
    optimization of ``bf16_compile_layout_opt_cudagraphs``), the same keyword arguments as the rule's Trainer: a bare
    loop compiled without them measured the plain CUDA-graph step (78.2 ms on an H200, against the rule's 65.2)."""
    import numpy as np
    import torch

    from accelbench.backends.device import Device
    from accelbench.experiments.sr3 import bare as bench
    from accelbench.experiments.sr3 import configs as sr3_configs
    from accelbench.experiments.sr3 import model as exp
    from accelbench.experiments.sr3.settings import resolve_settings

    s = resolve_settings(
        dict(
            hr_size=32,
            factor=4,
            inner_channels=8,
            channel_mult=[1, 2, 2],
            num_res_blocks=1,
            attention_resolutions=[8],
            num_heads=1,
            dropout=0.0,
            norm_groups=4,
            timesteps=20,
            beta_start=1e-6,
            beta_end=1e-2,
            lr=2e-5,
            batch_size=4,
        ),
        "small",
        {},
    )
    ds = exp.PatchSet(np.random.rand(8, 32, 32).astype(np.float32), np.random.rand(8, 8, 8).astype(np.float32), 32)
    calls = []
    monkeypatch.setattr(torch, "compile", lambda net, **kw: calls.append(kw) or net)  # record, do not compile
    conf = sr3_configs.get("bf16_compile_layout_opt_cudagraphs")
    bench.sr3_bare(s, ds, bench.BareRank(torch.device("cpu")), "bf16", 0, conf)
    exp.Trainer(s, Device("cpu"), ds, conf, seed=0)  # the configuration's own precision: bf16
    forced = {"triton.cudagraphs": True, "layout_optimization": True, "force_layout_optimization": True}
    assert calls[0] == calls[1] == {"options": forced}


def test_host_overhead_command_runs_end_to_end_on_a_one_layer_llama(tmp_path):
    """The documented ``host-overhead`` command (benchmarks/harness_overhead.py's docstring), run as a user runs it
    from the repository root on a 1-layer Llama with the fewest steps: it writes both sides' rows. It failed with
    KeyError 'liger' while its spec lacked the rule's series options."""
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "host.csv"
    argv = ["host-overhead", "--layers", "1", "--rounds", "1", "--warmup", "1", "--repeat", "2", "--no-before"]
    run = subprocess.run(
        [sys.executable, "benchmarks/harness_overhead.py", *argv, "--csv", str(out)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    sides = {r["side"] for r in csv.DictReader(out.open())}
    assert {"trainer_window", "bare"} <= sides, sides
