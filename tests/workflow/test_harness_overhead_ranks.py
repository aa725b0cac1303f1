"""`benchmarks/harness_overhead.py ddp-profile` end to end: real torchrun jobs of 2 gloo ranks then 1 on the CPU (LoRA
and SR3). They start rank processes, so they sit in the workflow tier (the unit tier runs no launcher); the interval
math of the profile is unit-tested in tests/unit/test_harness_overhead.py."""

import csv
import json
import sys
from pathlib import Path

from accelbench.measure import ddp_profile as ddp

REPO = Path(__file__).resolve().parents[2]


def test_ddp_profile_two_gloo_ranks(tmp_path):
    """`ddp-profile` on a tiny LoRA Llama, 2 gloo ranks then 1: one row per rank and DDP variant, step and host times,
    the variants' DDP options, threads per rank."""
    import subprocess

    from accelbench.core.systems import System
    from accelbench.experiments.lora.settings import LoraSettings

    s = LoraSettings(r=4, alpha=4, seq_len=16, warmup_steps=1, timed_steps=2, precision="fp32")
    system = System(name="cpu", backend="cpu", devices=2, precisions=("fp32",), image="cpu", scale="small")
    spec = {
        "model_name": "tiny",
        "attention": "flash",
        "strategy": "ddp",
        "devices": 2,
        "settings": s.to_dict(),
        "system": system.to_dict(),
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
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"status": "ok", "config": spec}))
    out = tmp_path / "profile.csv"
    cmd = [
        sys.executable,
        str(REPO / "benchmarks/harness_overhead.py"),
        "ddp-profile",
        "--experiment",
        "lora",
        "--result",
        str(result),
        "--csv",
        str(out),
        "--nprocs",
        "2,1",
        "--threads",
        "2",
        "--warmup",
        "1",
        "--repeat",
        "2",
        "--profiled",
        "2",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = list(csv.DictReader(out.open()))
    two = [r for r in rows if r["devices"] == "2"]
    variants = ("default", "bucket_view", "static_graph+bucket_view", "one_bucket")
    assert sorted((r["variant"], r["rank"]) for r in two) == sorted((v, str(rk)) for v in variants for rk in (0, 1))
    static = [r for r in two if r["variant"] == "static_graph+bucket_view"]
    assert all("not run" in r["note"] and r["step_ms"] == "" for r in static)  # grad_accum 2: recorded, not run
    two = [r for r in two if r not in static]
    assert [(r["variant"], r["rank"]) for r in rows if r["devices"] == "1"] == [("no_ddp", "0")]
    assert json.loads(next(r for r in two if r["variant"] == "one_bucket")["ddp_kwargs"]) == {
        "bucket_cap_mb": ddp.ONE_BUCKET_MB
    }
    for r in two + [r for r in rows if r["devices"] == "1"]:
        assert float(r["step_ms"]) > 0 and float(r["host_launch_ms"]) > 0 and r["device"] == "cpu"
        assert r["gpu_busy_ms"] == "" and r["when"].endswith("Z")  # no device activity on CPU: left empty
    assert {r["threads_per_rank"] for r in two} == {"1"}  # 2 cores / 2 ranks


def test_ddp_profile_sr3_two_gloo_ranks(tmp_path, default_config, systems):
    """`ddp-profile --experiment sr3` on the small SR3 U-Net (2 gloo ranks): every variant runs (no accumulation)."""
    import subprocess

    from accelbench.experiments.sr3 import data as sky

    u = default_config["sr3_scaling"]
    run = {
        k: u[k]
        for k in ("workload_iterations", "max_iterations", "warmup", "quality_images", "quality_sample_steps", "seed")
    }
    spec = {
        "system": systems["cpu"].to_dict(),
        "devices": 2,
        "precision": "fp32",
        "preset": u["preset"],
        "scales": u["scales"],
        "run": run,
    }
    hr = u["scales"]["small"]["hr_size"]
    sky.prepare(tmp_path / "d.npz", patch=hr, factor=u["preset"]["factor"])
    (tmp_path / "result.json").write_text(json.dumps({"status": "ok", "config": spec}))
    out = tmp_path / "p.csv"
    cmd = [
        sys.executable,
        str(REPO / "benchmarks/harness_overhead.py"),
        "ddp-profile",
        "--experiment",
        "sr3",
        "--result",
        str(tmp_path / "result.json"),
        "--data",
        str(tmp_path / "d.npz"),
        "--csv",
        str(out),
        "--nprocs",
        "2",
        "--threads",
        "2",
        "--warmup",
        "1",
        "--repeat",
        "1",
        "--profiled",
        "1",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 8 and all(float(r["step_ms"]) > 0 and not r["note"] for r in rows)
    assert {r["variant"] for r in rows} == {"default", "bucket_view", "static_graph+bucket_view", "one_bucket"}
