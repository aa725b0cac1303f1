"""Nsight Compute: metric choice per architecture, parsing of a real recorded `ncu --csv` export, the
reduction, and the unsupported paths (Study A's counter-level analysis)."""

import csv
import json
from pathlib import Path

import pytest

from accelbench import measure, ncu
from accelbench.experiments import unet3d_ncu

FIXTURE = Path(__file__).parent / "fixtures" / "ncu_raw.csv"


def _header_metrics() -> set[str]:
    lines = FIXTURE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    return {ncu.base_name(h) for h in next(csv.reader([lines[start]]))}


def test_architecture_from_compute_capability():
    assert [ncu.architecture(cc) for cc in ("7.0", "7.5", "8.0", "8.9", "9.0", "10.0")] == \
        ["volta", "volta", "ampere", "ampere", "hopper", "hopper"]


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
    red = ncu.reduce(kernels, measure.classify_kernel)
    total = red["total"]
    assert total["sm_cycles"] == pytest.approx(sum(k.values["sm_cycles"] for k in kernels))
    assert total["kernels"] == 15 and {"convolution", "normalization", "layout_conversion"} <= set(red["by_class"])
    w = [k.values["sm_cycles"] for k in kernels]
    ipc = sum(k.values["ipc"] * wi for k, wi in zip(kernels, w)) / sum(w)
    assert total["ipc"] == pytest.approx(ipc)  # rates are cycle-weighted means
    assert len(total["top_stalls"]) == 3 and total["top_stalls"][0][1] >= total["top_stalls"][1][1]
    conv = red["by_class"]["convolution"]
    assert conv["tensor_pipe_pct"] > 0  # TF32 convolutions ran on the tensor pipe


def test_parse_rejects_non_csv():
    with pytest.raises(ValueError, match="no ncu CSV header"):
        ncu.parse_csv("==ERROR== something went wrong\n", {"sm_cycles": "sm__cycles_elapsed.max"})


def test_kernel_base_names_and_command():
    assert ncu.kernel_base_name("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, float)") \
        == "RowwiseMomentsCUDAKernel"
    assert ncu.kernel_base_name("sm90_xmma_fprop_implicit_gemm_tf32f32_kernel__5x_cudnn") == \
        "sm90_xmma_fprop_implicit_gemm_tf32f32_kernel__5x_cudnn"
    cmd = ncu.command("ncu", ["sm__cycles_elapsed.max"], ["python", "x.py"], "out.csv", kernel_names=["a", "b"],
                      launch_count=50)
    joined = " ".join(cmd)
    assert "--clock-control none" in joined and "--nvtx-include accelbench_step/" in joined
    assert "regex:^(a|b)$" in joined and "--launch-count 50" in joined and cmd[-3:] == ["--", "python", "x.py"]


def test_select_kernels_by_device_time(tmp_path):
    table = tmp_path / "kernels.csv"
    rows = [("void k1<float>(int)", "convolution", 60.0), ("k2", "normalization", 30.0), ("Memset (Device)", "memory", 5.0),
            ("k3", "elementwise", 5.0)]
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["name", "class", "tensor_core", "calls", "device_time_us", "share"])
        for n, c, t in rows:
            w.writerow([n, c, False, 1, t, t / 100])
    names, share = unet3d_ncu.select_kernels(table, coverage=0.85, max_kernels=10)
    assert names == ["k1", "k2"] and share == pytest.approx(0.9)
    assert unet3d_ncu.select_kernels(table, coverage=1.0, max_kernels=1)[0] == ["k1"]


def test_unsupported_paths(systems, monkeypatch, tmp_path):
    kw = dict(coverage=0.9, max_kernels=4, launch_count=10, warmup=0, timeout_s=60)
    spec = {"configuration": "baseline"}
    out = unet3d_ncu.run(spec, systems["cpu"], "i", "m", None, **kw)
    assert out["status"] == "unsupported" and "NVIDIA GPUs" in out["reason"]
    assert unet3d_ncu.run({"configuration": "tf32"}, systems["v100"], "i", "m", None, **kw)["status"] == "unsupported"
    table = tmp_path / "kernels.csv"
    table.write_text("name,class,tensor_core,calls,device_time_us,share\nk,convolution,False,1,1.0,1.0\n")
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    out = unet3d_ncu.run(spec, systems["h200"], "i", "m", str(table), **kw)
    assert out["status"] == "unsupported" and "ncu (Nsight Compute) not found" in out["reason"]
    json.dumps(out)
