"""Study B LoRA summary (:mod:`accelbench.experiments.lora.summary`) and aggregation
(:mod:`accelbench.aggregate.study_b_lora`)."""

import pytest

from accelbench.experiments.lora.summary import project_epoch


def test_projection_is_labelled():
    p = project_epoch(step_ms=1000.0, tokens_per_step=2048, seq_len=512, cfg={"examples": None})
    assert p["label"] == "projection" and p["minutes"] is None and p["minutes_per_million_tokens"] > 0
    q = project_epoch(1000.0, 2048, 512, {"examples": 1000, "tokens_per_example": 300})
    assert q["steps"] == -(-300000 // 2048) and q["minutes"] == pytest.approx(q["steps"] / 60)


# --------------------------------------------------------------------------- aggregation
def test_reference_and_published_gains():
    from accelbench.aggregate import study_b_lora as agg

    ref = agg.read_reference("resources/reference/study_b_finetune_runtime.csv")
    assert set(ref["strategy"]) == {"ddp", "zero3", "fsdp"}
    g = agg.gains_table(agg.result_rows([]), ref, "src")
    gemma_fsdp8 = g[(g["family"] == "gemma-2-27b") & (g["metric"] == "fsdp_slowdown_vs_ddp") & (g["devices"] == 8)]
    assert gemma_fsdp8["value"].iloc[0] == pytest.approx(64 / 20)
    fa = g[(g["hardware"] == "gaudi1") & (g["metric"] == "flash_gain") & (g["devices"] == 2)]
    assert fa["value"].iloc[0] == pytest.approx(137 / 123 - 1)
