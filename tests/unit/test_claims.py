"""The unified claims table: every claim of both studies against every system, with the verdict and its reason."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import fake_results as fr
from accelbench.aggregate import claim_spec as spec
from accelbench.aggregate import claims as cl
from accelbench.aggregate import claims_front as cf
from accelbench.aggregate import claims_report as cr
from accelbench.aggregate import claims_summary as cs
from accelbench.aggregate import claims_table as ct
from accelbench.errors import DataError

REF = Path("resources/reference")
CLAIMS = [REF / "study_a_claims.csv", REF / "study_b_claims.csv"]


def cpu_run() -> list[dict]:
    """What the embedded default gives on a CPU: TF32 unsupported, no counters, no FSDP, no Gaudi FP8."""
    return [
        fr.unet3d("cpu", "baseline", 100.0),
        fr.unet3d("cpu", "channels_last_3d", 97.0),
        fr.unet3d("cpu", "tf32", status="unsupported", reason="TF32 needs an NVIDIA GPU (Ampere or newer)"),
        fr.unet3d("cpu", "tf32_channels_last_3d", status="unsupported", reason="TF32 needs an NVIDIA GPU"),
        fr.sr3("cpu", 1, 100.0),
        fr.sr3("cpu", 2, 110.0),
        fr.lora("cpu", "eager", "single", 1, 1000.0),
        fr.lora("cpu", "flash", "single", 1, 900.0),
        fr.lora("cpu", "flash", "ddp", 2, 1100.0),
        fr.lora("cpu", "flash", "fsdp", 2, status="unsupported", reason="accelerate enables FSDP only on accelerators"),
        fr.quant("cpu", "fp32", "none", ppl=10.0, compression=1.0),
        fr.quant("cpu", "fake", "16_8_4", ppl=10.3, compression=3.43),
        fr.quant("cpu", "fake", "8_8_4", ppl=10.5, compression=4.7),
        fr.quant("cpu", "fake", "8_4_4", ppl=10.9, compression=4.0),  # outside 5.0-6.8: does not hold
        fr.quant("cpu", "torchao", "16_8_8", ppl=10.02, compression=2.5),
        fr.quant("cpu", "inc_fp8", "bf16_fp8", status="unsupported", reason="INC FP8 needs Intel Gaudi"),
        fr.sensitivity("cpu", [9.0, 1.0, 1.2, 0.8, 1.0, 1.1, 0.9, 1.0, 1.3, 6.0]),
    ]


def table(tmp_path, objs: list[dict]) -> pd.DataFrame:
    paths = fr.write(tmp_path / "results", objs)
    df = cr.aggregate(paths, REF, tmp_path / "claims")
    assert (tmp_path / "claims" / "claims.csv").exists() and (tmp_path / "claims" / "fig_claims.png").stat().st_size
    return df


def verdict(df: pd.DataFrame, claim_id: str, system: str | None = None) -> pd.Series:
    rows = df[df["claim_id"] == claim_id]
    if system is not None:
        rows = rows[rows["system"] == system]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_study_b_claims_cover_the_published_statements():
    b = ct.read_claims(REF / "study_b_claims.csv", "B")
    assert len(b) >= 8 and b["claim_id"].is_unique
    assert {
        "compression_x",
        "perplexity_increase_pct",
        "sensitivity_max_over_median",
        "first_last_layer_top_share",
        "flash_gain_pct",
        "fsdp_slowdown_vs_ddp",
        "zero3_slowdown_vs_ddp",
        "oom_without_sharding",
        "scaling_efficiency",
        "throughput_order",
    } <= set(b["quantity"])
    assert (b["source"].str.len() > 0).all() and (b["published"].str.len() > 0).all()
    assert set(b["check"]) <= {"range", "min", "max", "true"}


def test_every_claim_of_both_studies_gets_a_verdict_and_a_reason(tmp_path):
    df = table(tmp_path, cpu_run() + [fr.sr3("h100", 1, 100.0), fr.sr3("h100", 2, 110.0)])
    ids = set(ct.read_claims(CLAIMS[0], "A")["claim_id"]) | set(ct.read_claims(CLAIMS[1], "B")["claim_id"])
    assert set(df["claim_id"]) == ids
    assert set(df["verdict"].map(cl.category)) == set(cl.VERDICTS)
    assert (df["why"].str.len() > 0).all() and (df["hardware"].str.len() > 0).all()
    # Study A's claims are about V100/A100/H100: a CPU is none of them; the values measured here are still shown
    a1 = verdict(df, "a1")
    assert a1["verdict"] == "not measured here (V100/A100/H100 claim)" and "GEMM 70%" in a1["measured"]
    assert "the check on the value measured here passes" in a1["why"]
    a12 = verdict(df, "a12")
    assert a12["verdict"] == "not measured here (A100/H100 claim)" and "unsupported (TF32 needs" in a12["why"]
    assert verdict(df, "a13")["verdict"] == "not measured here (V100 claim)"
    assert "A100 claim" in verdict(df, "a7")["why"]
    assert verdict(df, "b1")["verdict"] == "holds" and "3.43x" in verdict(df, "b1")["measured"]
    b3 = verdict(df, "b3")
    assert b3["verdict"] == "does not hold" and "4.00x" in b3["why"]
    b4 = verdict(df, "b4")  # all three bit sets, TinyLlama on WikiText-2: complete and like for like
    # +9.0% is outside the percentile allocation's published +3.05% (4% margin; the +7.7% was A100 k-means)
    assert b4["verdict"] == "does not hold" and "+9.0%" in b4["measured"] and b4["why"].startswith("2 of 3")
    assert verdict(df, "b5")["verdict"] == "holds"  # max / median = 9
    assert verdict(df, "b6")["verdict"] == "holds"  # layers 0 and 9 rank 1 and 2 of 10
    assert verdict(df, "b7")["verdict"] == "holds"  # +0.2%
    assert "INC FP8 needs Intel Gaudi" in verdict(df, "b8")["why"]
    b9 = verdict(df, "b9")  # a Gaudi claim: the CPU's value shown beside it
    assert b9["verdict"] == "not measured here (Gaudi1/Gaudi2 claim)" and "+11.1%" in b9["measured"]
    # a 1-device pair is named single (it was once labelled "ddp n=1"); spreads apart (+-2%) are not flagged
    assert "single n=1" in b9["measured"] and "overlap" not in b9["measured"]
    assert "accelerate enables FSDP only" in verdict(df, "b10")["why"]
    assert "no zero3 result" in verdict(df, "b11")["why"]
    assert verdict(df, "b12")["verdict"].startswith("not measured here")
    b13 = verdict(df, "b13", "h100")  # 2 devices measured, 4 (Study B's GPUs' other count) missing
    assert b13["verdict"] == "partly measured (1 of 2)" and "0.91" in b13["measured"] and "missing 4" in b13["why"]
    assert "whole-job wall times" in b13["why"]  # the caveat of the comparison ends the row
    b13 = verdict(df, "b13", "cpu")  # a small-scale CPU run is shown, never judged
    assert b13["verdict"].startswith("not measured here (not like for like: device cpu") and b13["measured"]
    assert b13["hardware"].startswith("CPU")
    assert "at least two of gaudi2, gaudi3, a100, h100" in verdict(df, "b14")["why"]


def test_claims_that_fail_and_noisy_results(tmp_path):
    fam = "llama-3.1-8b"
    objs = [
        fr.lora("gaudi2", "eager", "ddp", 2, 900.0, family=fam),
        fr.lora("gaudi2", "flash", "ddp", 2, 1000.0, family=fam),
        fr.sr3("h100", 1, 100.0),
        fr.sr3("h100", 2, 200.0),
        fr.sensitivity("cpu", [1.0, 1.0, 9.0, 1.0, 1.0]),
    ]
    df = table(tmp_path, objs)
    b9 = verdict(df, "b9")  # one failing observation is enough, the missing ones named
    assert b9["verdict"] == "does not hold" and "-10.0%" in b9["why"]
    assert "not measured: llama-3.1-8b/4, llama-3.1-8b/8" in b9["why"]

    assert verdict(df, "b13")["verdict"] == "does not hold"  # efficiency 0.5
    assert verdict(df, "b6")["verdict"] == "does not hold"  # the middle layer is the most sensitive
    assert verdict(df, "b1")["verdict"] == "not measured here"

    objs[3]["measurements"]["noise"] = {"noisy": True, "why": ["other processes used 60% of the cores"]}
    df = table(tmp_path / "noisy", objs)
    b13 = verdict(df, "b13")
    assert b13["verdict"] == "not measured here" and "not measured reliably" in b13["why"]
    assert "60% of the cores" in b13["why"] and b13["measured"]  # the number is still shown

    objs[4]["measurements"]["noise"] = {"noisy": True, "why": ["other processes used 60% of the cores"]}
    df = table(tmp_path / "noisy_sensitivity", objs)  # a sensitivity rank does not depend on timing: still judged
    assert verdict(df, "b6")["verdict"] == "does not hold"


def test_quality_claims_need_pretrained_weights(tmp_path):
    """A random-init model (throughput only) gets no perplexity or sensitivity verdict; its compression still counts
    (the H200 reference run's TinyLlama architecture had "does not hold" for b6 on random weights)."""
    rnd = "random init"
    objs = [
        fr.quant("h100", "fp32", "none", ppl=50000.0, compression=1.0, weights=rnd),
        fr.quant("h100", "fake", "16_8_4", ppl=49000.0, compression=3.43, weights=rnd),
        fr.sensitivity("h100", [1.0, 1.0, 9.0, 1.0, 1.0], weights=rnd),
    ]
    df = table(tmp_path, objs)
    for claim_id in ("b4", "b5", "b6"):
        row = verdict(df, claim_id)
        assert row["verdict"] == "not measured here" and "random-init weights" in row["why"], row
    assert verdict(df, "b1")["verdict"] == "holds"


def test_oom_without_sharding_and_sharded_slowdown(tmp_path):
    fam = "llama-3.3-70b"
    gemma = "gemma-2-27b"
    objs = [
        fr.lora("gaudi2", "flash", "ddp", 2, status="oom", reason="out of device memory: 140 GiB", family=fam),
        fr.lora("gaudi2", "flash", "fsdp", 4, 3000.0, family=fam),
        fr.lora("gaudi2", "flash", "ddp", 4, 1000.0, family=gemma),
        fr.lora("gaudi2", "flash", "fsdp", 4, 3200.0, family=gemma),
        fr.lora("gaudi2", "flash", "zero3", 4, 900.0, family=gemma),
    ]
    df = table(tmp_path, objs)
    b12 = verdict(df, "b12")
    assert b12["verdict"] == "holds" and "fsdp n=4 ok" in b12["measured"] and "Gaudi2" in b12["hardware"]
    b10 = verdict(df, "b10")  # Gemma-2-27B at 4 cards of Study B's 2, 4, 6, 8
    assert b10["verdict"] == "partly measured (1 of 4)" and "3.20x" in b10["measured"]
    assert "missing gemma-2-27b/2, gemma-2-27b/6, gemma-2-27b/8" in b10["why"]
    assert verdict(df, "b11")["verdict"] == "does not hold"
    h100 = [
        fr.lora("h100", "flash", "ddp", 2, status="oom", reason="out of device memory", family=fam),
        fr.lora("h100", "flash", "fsdp", 4, 3000.0, family=fam),
    ]  # a Gaudi2 claim, measured on an H100
    b12 = verdict(table(tmp_path / "h100", h100), "b12")
    assert b12["verdict"] == "not measured here (Gaudi2 claim)" and "fsdp n=4 ok" in b12["measured"]


@pytest.mark.parametrize("h100_ms, expected", [(100.0, "partly measured (2 of 4)"), (300.0, "does not hold")])
def test_throughput_order_across_merged_systems(tmp_path, h100_ms, expected):
    df = table(tmp_path, [fr.sr3("h100", 1, h100_ms), fr.sr3("a100", 1, 200.0), fr.sr3("cpu", 1, 5000.0)])
    b14 = verdict(df, "b14")
    assert b14["verdict"] == expected and "h100 > a100" in b14["why"]
    assert "H100" in b14["hardware"] and "A100" in b14["hardware"]
    assert set(df[df["claim_id"] == "b13"]["system"]) == {"a100", "cpu", "h100"}  # one row per system


def test_hardware_specific_claims_apply_only_there(tmp_path):
    objs = [fr.unet3d("a100", "baseline", 100.0), fr.unet3d("a100", "tf32", 95.0)]
    df = table(tmp_path, objs)
    assert verdict(df, "a13")["verdict"] == "not measured here (V100 claim)"  # a V100 claim on an A100
    assert "unet3d_ncu" in verdict(df, "a7")["why"]  # an A100 claim, but it needs counters


def test_flash_gain_inside_the_spread_says_so(tmp_path):
    """A -0.5% gain whose p10-p90 ranges overlap is evidence neither way (H200 reference run, Llama-3.1-8B DDP -0.3%
    once made b9 "does not hold"): unresolved, listed, left out of the verdict."""
    fam = "llama-3.1-8b"
    df = table(
        tmp_path,
        [
            fr.lora("gaudi2", "eager", "ddp", 2, 1000.0, family=fam),
            fr.lora("gaudi2", "flash", "ddp", 2, 1005.0, family=fam),
        ],
    )
    b9 = verdict(df, "b9")
    assert b9["verdict"] == "not measured here" and "every pair within its timing spread" in b9["why"]
    assert "ddp n=2" in b9["measured"] and "-0.5% (the p10-p90 spreads overlap: unresolved)" in b9["measured"]

    # a second pair at 4 cards, its spreads apart: judged alone; the unresolved 2-card pair does not count as measured
    for flash_ms, expected, why in (
        (900.0, "partly measured (1 of 3)", "measured llama-3.1-8b/4 (within x >= 0)"),
        (1100.0, "does not hold", "1 of 1 outside x >= 0"),
    ):
        df = table(
            tmp_path / expected,
            [
                fr.lora("gaudi2", "eager", "ddp", 2, 1000.0, family=fam),
                fr.lora("gaudi2", "flash", "ddp", 2, 1005.0, family=fam),
                fr.lora("gaudi2", "eager", "ddp", 4, 1000.0, family=fam),
                fr.lora("gaudi2", "flash", "ddp", 4, flash_ms, family=fam),
            ],
        )
        b9 = verdict(df, "b9")
        assert b9["verdict"] == expected and why in b9["why"], b9["why"]
        assert "within its timing spread: 1" in b9["why"] and b9["measured"].count("unresolved") == 1
    gemma = [
        fr.lora("gaudi2", "eager", "ddp", 2, 1000.0, family="gemma-2-27b"),
        fr.lora("gaudi2", "flash", "ddp", 2, 800.0, family="gemma-2-27b"),
    ]  # not the claim's model
    b9 = verdict(table(tmp_path / "gemma", gemma), "b9")
    assert b9["verdict"] == "not measured here" and "none of the needed observations" in b9["why"]


def ncu_run(system: str = "h100", base_share: float = 0.7, tf32_share: float = 0.7, every: bool = False) -> list[dict]:
    """Profiles and counters of baseline and tf32 on one system (tf32: 4x faster, SM cycles 0.2x, instructions 0.1x,
    IPC +5%, tensor pipe 5x); ``*_share``: the step's device time behind the rates, ``every``: rates over every
    kernel."""
    return [
        fr.unet3d(system, "baseline", 100.0),
        fr.unet3d(system, "tf32", 25.0),
        fr.ncu(
            system,
            "baseline",
            1e9,
            2e9,
            ipc=2.0,
            tensor_pipe_pct=2.0,
            rates_time_share=base_share,
            rates_over_every_kernel=every,
        ),
        fr.ncu(
            system,
            "tf32",
            2e8,
            2e8,
            ipc=2.1,
            tensor_pipe_pct=10.0,
            rates_time_share=tf32_share,
            rates_over_every_kernel=every,
        ),
    ]


def test_rate_claims_need_rates_over_most_of_the_step(tmp_path):
    """IPC and tensor-pipe rates over a detail pass covering 7% of a configuration's step are not a measurement of the
    claims a4/a5 (H200 reference run: baseline 69%, tf32 7%): not measured here, the coverage named, values shown."""
    df = table(tmp_path, ncu_run("a100", base_share=0.7, tf32_share=0.07))  # a4/a5 are A100 claims
    for claim_id in ("a4", "a5"):
        row = verdict(df, claim_id)
        assert row["verdict"] == "not measured here", row
        assert "tf32: IPC/tensor-pipe rates cover 7% of the step's device time (detail pass), below 80%" in row["why"]
        assert "baseline: IPC/tensor-pipe rates cover 70%" in row["why"] and row["measured"]
    df = table(tmp_path / "every", ncu_run("a100", base_share=0.7, tf32_share=0.07, every=True))  # rates too
    assert verdict(df, "a4")["verdict"] == "holds" and "(5.00x)" in verdict(df, "a4")["measured"]  # 1.45-9.98
    assert verdict(df, "a5")["verdict"] == "holds" and "ipc change pct 5" in verdict(df, "a5")["measured"]  # +2..+12
    df = table(tmp_path / "detail", ncu_run("a100", base_share=0.9, tf32_share=0.85))  # a detail pass >= 80%: enough
    assert verdict(df, "a4")["verdict"] == "holds" and verdict(df, "a5")["verdict"] == "holds"


def test_claims_about_another_gpu_still_show_the_value_measured_here(tmp_path):
    df = table(tmp_path, ncu_run(every=True))
    for claim_id, gpu, value in (
        ("a7", "A100", "sm cycles ratio 0.2"),
        ("a8", "H100", "sm cycles ratio 0.2"),
        ("a9", "A100", "instructions ratio 0.1"),
        ("a13", "V100", "4.00x training step"),
    ):
        row = verdict(df, claim_id)
        if gpu == "H100":  # an H100 claim on an H100: judged (0.2 is outside 0.29-0.49)
            assert row["verdict"] == "does not hold" and value in row["measured"]
            continue
        assert row["verdict"] == f"not measured here ({gpu} claim)" and f"{gpu} claim; this is" in row["why"], row
        assert value in row["measured"], row


def test_sharded_slowdown_judges_the_direction_only(tmp_path):
    b = ct.read_claims(REF / "study_b_claims.csv", "B").set_index("claim_id")
    for claim_id in ("b10", "b11"):  # the text says what is checked; the published magnitude stays in `published`
        assert "2.5-3.5x" not in b.loc[claim_id, "claim"] and "direction" in b.loc[claim_id, "claim"]
        assert "2.5-3.5x" in b.loc[claim_id, "published"]
    gemma = "gemma-2-27b"
    df = table(
        tmp_path,
        [
            r
            for n in (2, 4, 6, 8)
            for r in (
                fr.lora("gaudi2", "flash", "ddp", n, 1000.0, family=gemma),
                fr.lora("gaudi2", "flash", "fsdp", n, 5620.0, family=gemma),
            )
        ],
    )
    b10 = verdict(df, "b10")
    assert b10["verdict"] == "holds" and "5.62x" in b10["measured"]
    assert b10["why"] == "4 of 4 within x >= 1 (direction; the published magnitude is not judged)"


def test_synthesis_quality_says_it_is_a_proxy(tmp_path):
    """A numerics check of an untrained network is not synthesis quality: never a verdict on a6, its result shown."""
    objs = [fr.unet3d("h100", "baseline", 100.0), fr.unet3d("h100", "channels_last_3d", 97.0)]
    for r in objs:
        r["measurements"]["quality"]["method"] = "proxy: predicted noise of network N vs. the baseline's"
    a6 = verdict(table(tmp_path, objs), "a6")
    assert a6["verdict"] == "not measured here (numerics proxy passes)"
    assert "measured only through a proxy (predicted noise of network N" in a6["why"]
    assert a6["measured"].startswith("(numerics proxy) baseline")
    objs[1]["measurements"]["quality"]["holds"] = False
    assert (
        verdict(table(tmp_path / "fails", objs), "a6")["verdict"] == "not measured here (numerics proxy fails (1 of 2))"
    )
    a6 = verdict(table(tmp_path / "unnamed", objs[:1] + [fr.unet3d("h100", "tf32", 50.0)]), "a6")
    assert "proxy" in a6["why"] and "names no method" in a6["why"]


def test_study_a_claims_vs_measured_agrees_with_the_claims_table(tmp_path):
    """With unet3d_ncu results, study_a/claims_vs_measured shows the counter values and verdicts of claims.csv: no
    "needs Nsight Compute hardware counters" beside counters that exist, no time-ratio stand-in for a2/a7/a8."""
    from accelbench.experiments.unet3d import tables as study_a

    objs = ncu_run(every=True) + [
        fr.unet3d("h100", "tf32_channels_last_3d", 20.0),
        fr.ncu("h100", "tf32_channels_last_3d", 1e8, 1e8, rates_over_every_kernel=True),
    ]
    paths = fr.write(tmp_path / "results", objs)
    claims = cr.aggregate(paths, REF, tmp_path / "claims")
    study_a.aggregate(paths, CLAIMS[0], tmp_path / "study_a")
    vs = pd.read_csv(tmp_path / "study_a" / "claims_vs_measured.csv").set_index("claim_id")
    a = claims[claims["study"] == "A"].set_index("claim_id")
    assert len(vs) == len(a) == 15
    assert (vs["verdict"] == a["verdict"]).all() and (vs["why"] == a["why"]).all()
    for claim_id in ("a2", "a3", "a5", "a7", "a9", "a10"):  # counter claims: the claims table's counter values
        assert vs.loc[claim_id, "measured"] == a.loc[claim_id, "measured"] != "not measured", claim_id
        assert "needs Nsight Compute" not in vs.loc[claim_id, "how"] and "proxy" not in vs.loc[claim_id, "how"]
    assert vs.loc["a2", "measured"] == "tf32_channels_last_3d: sm cycles reduction x 10"  # counters, not 5x in time
    assert vs.loc["a12", "measured"].startswith("5.00x")  # the timing claims keep their own text

    study_a.aggregate(paths[:2], CLAIMS[0], tmp_path / "no_ncu")  # without counters: the proxy, and the verdict says so
    vs = pd.read_csv(tmp_path / "no_ncu" / "claims_vs_measured.csv").set_index("claim_id")
    assert "proxy" in vs.loc["a8", "how"] and vs.loc["a8", "verdict"] == "not measured here"  # an H100 claim, on H100
    assert "no unet3d_ncu results" in vs.loc["a8", "why"]

    unsupported = [
        fr.ncu("h100", c, status="unsupported", reason="ncu: counters not readable (ERR_NVGPUCTRPERM)")
        for c in ("baseline", "tf32")
    ]  # counters tried but not measured: the proxy stays, labelled so
    study_a.aggregate(paths[:2] + fr.write(tmp_path / "unsupported", unsupported), CLAIMS[0], tmp_path / "unsup")
    vs = pd.read_csv(tmp_path / "unsup" / "claims_vs_measured.csv").set_index("claim_id")
    assert "proxy" in vs.loc["a8", "how"] and "ERR_NVGPUCTRPERM" in vs.loc["a8", "why"]


# --------------------------------------------------------------------------- evidence, scope, quotes
def test_one_of_three_needed_observations_is_partly_measured(tmp_path):
    """b4 needs all three bit sets: one measured and passing is not `holds`."""
    objs = [
        fr.quant("cpu", "fp32", "none", ppl=10.0, compression=1.0),
        fr.quant("cpu", "fake", "16_8_4", ppl=10.3, compression=3.43),
    ]
    b4 = verdict(table(tmp_path, objs), "b4")
    assert b4["verdict"] == "partly measured (1 of 3)"
    assert "measured fake/16_8_4" in b4["why"] and "missing fake/8_8_4, fake/8_4_4" in b4["why"]
    assert "+3.0%" in b4["measured"]  # the partial value is shown
    objs.append(fr.quant("cpu", "fake", "8_4_4", ppl=12.0, compression=5.9))  # +20%: a failing one decides
    b4 = verdict(table(tmp_path / "fails", objs), "b4")
    assert b4["verdict"] == "does not hold" and "not measured: fake/8_8_4" in b4["why"]


def test_another_model_or_text_is_not_like_for_like(tmp_path):
    """Perplexity on another model and text (the H200 runs: SmolLM2-135M-Instruct on pydoc) is shown, not judged."""
    objs = [fr.quant("cpu", "fp32", "none", ppl=10.0, model="SmolLM2-135M-Instruct", text="pydoc")] + [
        fr.quant("cpu", "fake", b, ppl=10.3, compression=4.0, model="SmolLM2-135M-Instruct", text="pydoc")
        for b in ("16_8_4", "8_8_4", "8_4_4")
    ]
    b4 = verdict(table(tmp_path, objs), "b4")
    assert b4["verdict"].startswith("not measured here (not like for like: model SmolLM2-135M-Instruct")
    assert "model SmolLM2-135M-Instruct, not *tinyllama*" in b4["why"] and "text pydoc, not wikitext*" in b4["why"]
    assert "the check passes" in b4["why"] and "+3.0%" in b4["measured"]


def test_b4_is_not_holds_on_the_committed_two_gpu_run():
    """The h200x2 reference run measured one bit set of three, on SmolLM2-135M-Instruct and pydoc text."""
    import glob

    run = Path("reference_runs/h200x2-2026-12-01")
    results = cr.load_results(sorted(glob.glob(str(run / "results/**/result.json"), recursive=True)))
    claims = pd.concat([ct.read_claims(p, s) for p, s in zip(CLAIMS, "AB")], ignore_index=True)
    df = ct.claims_table(results, claims, {"sr3_scaling": REF / "study_b_sr3_scaling.csv"})
    b4 = df[df["claim_id"] == "b4"]
    assert len(b4) and not (b4["verdict"] == "holds").any(), b4[["verdict", "why"]]


def test_every_tolerance_can_fail():
    """A tolerance that covers its quantity's whole plausible range passes any measurement: refused."""
    q = pd.read_csv(REF / "claim_quantities.csv", comment="#", keep_default_na=False).set_index("quantity")
    claims = pd.concat([ct.read_claims(p, s) for p, s in zip(CLAIMS, "AB")], ignore_index=True)
    assert set(claims["quantity"]) <= set(q.index), set(claims["quantity"]) - set(q.index)
    for _, c in claims.iterrows():
        if c["check"] == "true":
            continue  # a property: fails when false
        lo, hi = float(q.loc[c["quantity"], "plausible_low"]), float(q.loc[c["quantity"], "plausible_high"])
        t_lo = float(c["low"]) if str(c["low"]).strip() else -float("inf")
        t_hi = float(c["high"]) if str(c["high"]).strip() else float("inf")
        assert not (t_lo <= lo and t_hi >= hi), f"{c['claim_id']}: {spec.tolerance_text(c)} covers {lo}..{hi}"
        assert spec.fails_if(c).startswith("x ")
    # the old a2/a3 tolerance (1 <= x <= 100: any reduction) is what this test exists to refuse
    old = pd.Series({"claim_id": "a3", "check": "range", "low": "1", "high": "100"})
    lo, hi = (float(q.loc["dynamic_instructions_reduction_x", k]) for k in ("plausible_low", "plausible_high"))
    assert float(old["low"]) <= lo and float(old["high"]) >= hi


def test_study_a_quotes_are_the_abstracts_words():
    """The published texts of a2-a6 are the abstract's own words (the sentence is in the CSV's header)."""
    text = (REF / "study_a_claims.csv").read_text()
    sentence = next(line for line in text.splitlines() if "The abstract's sentence, verbatim" in line).split(": ", 1)[1]
    a = ct.read_claims(REF / "study_a_claims.csv", "A").set_index("claim_id")
    assert a.loc["a3", "quote"] == "cut dynamic instructions by 100x"
    assert "up to" not in a.loc["a3", "published"] and a.loc["a3", "published"].startswith('"cut dynamic')
    for cid in ("a2", "a3", "a4", "a4b", "a5", "a6"):
        assert a.loc[cid, "quote"] and a.loc[cid, "quote"] in sentence, cid
        assert a.loc[cid, "quote_source"] == "arXiv 2606.19365 abstract"
    b = ct.read_claims(REF / "study_b_claims.csv", "B").set_index("claim_id")
    assert "550860c" in b.loc["b4", "quote_source"] and "12.94" in b.loc["b4", "quote"]


def test_the_scope_policy_on_an_h200_run(tmp_path):
    """On an H200, every A100 or V100 claim is not measured here with its value shown; H100 claims are judged where
    the H100/H200 evidence lets an H200 count as H100 for the claim's quantity (accelbench.aggregate.scope), else
    not measured here too."""
    from accelbench.aggregate import scope

    df = table(
        tmp_path,
        ncu_run("h200", every=True)
        + [
            fr.unet3d("h200", "tf32_channels_last_3d", 20.0),
            fr.ncu("h200", "tf32_channels_last_3d", 1e8, 1e8, rates_over_every_kernel=True),
        ],
    )
    a = ct.read_claims(REF / "study_a_claims.csv", "A").set_index("claim_id")
    for cid, row in df[df["study"] == "A"].set_index("claim_id").iterrows():
        classes = scope.claim_classes(a.loc[cid, "hardware"])
        if "h100" in classes and scope.h200_judges(a.loc[cid, "quantity"])[0]:
            assert "claim)" not in row["verdict"], (cid, row["verdict"])
        else:
            gpu = scope.label(a.loc[cid, "hardware"])
            assert row["verdict"] == f"not measured here ({gpu} claim)", (cid, row["verdict"])
            assert row["measured"], cid  # the value measured here is shown beside it
    assert verdict(df, "a8")["verdict"] == "does not hold"  # H100 claim: SM cycles 0.2, published 0.39
    assert scope.class_of("reference run (A100 series, 2026-12-01): NVIDIA H200 (1x)")[0] == "h100"
    assert scope.class_of("Intel Gaudi2 (HL-225)")[0] == "gaudi2" and scope.class_of("AMD EPYC")[0] == "other"


def test_counter_floor_ratio_is_not_judged(tmp_path):
    """A tensor-pipe ratio whose baseline sits at the counter's floor (what ncu reads on kernels that cannot use
    tensor cores) divides by noise: both absolute values and the floor shown, no verdict."""
    objs = ncu_run("a100", every=True)
    objs[2]["measurements"]["by_class"]["elementwise"] = {"kernels": 10, "tensor_pipe_pct": 2.5}
    a4 = verdict(table(tmp_path, objs), "a4")
    assert a4["verdict"] == "not measured here (at the counter's floor)"
    assert "2.00% -> 10.00%" in a4["measured"] and "floor 2.50%" in a4["measured"]


def test_one_row_per_claim_names_its_evidence_and_disagreements(tmp_path):
    objs = [fr.sr3("cpu", 1, 100.0), fr.sr3("cpu", 2, 55.0), fr.sr3("h100", 1, 100.0), fr.sr3("h100", 2, 200.0)]
    df = table(tmp_path, objs)
    summary = pd.read_csv(tmp_path / "claims" / "claims_summary.csv", keep_default_na=False).set_index("claim_id")
    ids = set(ct.read_claims(CLAIMS[0], "A")["claim_id"]) | set(ct.read_claims(CLAIMS[1], "B")["claim_id"])
    assert set(summary.index) == ids and len(summary) == len(ids)
    assert summary.loc["b13", "verdict"] == "does not hold"  # the H100's 0.5 fails; the CPU's 0.91 is partial
    assert len(df[df["claim_id"] == "b13"]) == 2
    md = (tmp_path / "claims" / "claims.md").read_text()
    assert md.index("one row per claim, its verdict") < md.index("one row per claim and system")
    rows = [
        {
            "claim_id": "b13",
            "claim": "c",
            "published": "p",
            "scope": "any hardware",
            "verdict": v,
            "hardware": hw,
            "measured": m,
            "why": "w",
            "study": "B",
        }
        for v, hw, m in (
            ("holds", "reference run (X, 2026-01-01): NVIDIA H100", "0.9"),
            ("does not hold", "reference run (Y, 2026-01-02): NVIDIA H100", "0.5"),
        )
    ]
    s = cs.summary_table(pd.DataFrame(rows)).iloc[0]
    assert s["verdict"] == cs.DISAGREE and "holds on 0.9" in s["why"] and "does not hold on 0.5" in s["why"]
    assert "Why they differ" in s["why"]


# --------------------------------------------------------------------------- verdicts round two
def test_a_small_cpu_run_never_judges_a_paper_scale_claim(tmp_path):
    """b13 once read "does not hold" from 2 ranks of a width-16 SR3 on a shared 2-core CPU (efficiency 0.67) and
    outranked both paper-scale H200 runs (0.93, 0.96): a toy run is shown beside, not judged."""
    objs = [fr.sr3("cpu", 1, 100.0), fr.sr3("cpu", 2, 150.0), fr.sr3("h100", 1, 100.0), fr.sr3("h100", 2, 105.0)]
    df = table(tmp_path, objs)
    cpu, gpu = verdict(df, "b13", "cpu"), verdict(df, "b13", "h100")
    unlike = "device cpu, not accelerator; scale small, not paper"
    assert cpu["verdict"] == f"not measured here (not like for like: {unlike})"
    assert "0.67" in cpu["measured"] and "the check fails" in cpu["why"]  # its value shown, never the verdict
    assert gpu["verdict"] == "partly measured (1 of 2)"
    summary = pd.read_csv(tmp_path / "claims" / "claims_summary.csv", keep_default_na=False).set_index("claim_id")
    assert summary.loc["b13", "verdict"] == "partly measured (1 of 2)" and "H100" in summary.loc["b13", "evidence"]
    assert "whole-job wall times" in gpu["why"] and "singularity exec" in gpu["why"]


def test_compression_from_kmeans_on_random_weights_is_not_judged(tmp_path):
    """b2 on h200x2-2026-12-01 held at 4.67x from k-means on a random-init TinyLlama: an allocation from noise
    sensitivities; the percentile buckets the claim's published value used are judged."""
    rnd = "random init"
    objs = [
        fr.quant("h100", "fp32", "none", ppl=5e4, compression=1.0, weights=rnd),
        fr.quant("h100", "fake", "8_8_4", ppl=5e4, compression=4.67, weights=rnd, clustering="kmeans"),
    ]
    b2 = verdict(table(tmp_path, objs), "b2")
    assert b2["verdict"].startswith("not measured here (not like for like: allocation kmeans on random-init weights")
    assert "4.67x" in b2["measured"] and "bit-count accounting" in b2["why"]
    objs[1] = fr.quant("h100", "fake", "8_8_4", ppl=5e4, compression=4.80, weights=rnd, clustering="buckets")
    b2 = verdict(table(tmp_path / "buckets", objs), "b2")
    assert b2["verdict"] == "holds" and "4.80x" in b2["measured"]


def test_b2_is_not_holds_on_the_committed_two_gpu_run():
    import glob

    run = Path("reference_runs/h200x2-2026-12-01")
    results = cr.load_results(sorted(glob.glob(str(run / "results/**/result.json"), recursive=True)))
    claims = pd.concat([ct.read_claims(p, s) for p, s in zip(CLAIMS, "AB")], ignore_index=True)
    df = ct.claims_table(results, claims, {"sr3_scaling": REF / "study_b_sr3_scaling.csv"})
    b2 = df[df["claim_id"] == "b2"]
    assert len(b2) and not (b2["verdict"] == "holds").any(), b2[["verdict", "measured", "why"]]
    assert b2["claim"].str.contains("tinyllama").any()  # the model named per row


def test_digest_claims_say_so_on_every_row(tmp_path):
    """a8/a10 read "does not hold" and a11/a12 "holds" against values of an unverified third-party digest."""
    df = table(tmp_path, ncu_run("h100", every=True) + [fr.unet3d("h100", "channels_last_3d", 97.0)])
    for cid in ("a7", "a8", "a9", "a10", "a11", "a12", "a13"):
        row = verdict(df, cid)
        assert "digest (unverified)" in row["source"] and "digest (unverified)" in row["published"], cid
    for cid in ("a1", "a2", "b1"):
        assert "digest" not in verdict(df, cid)["published"], cid
    a8 = verdict(df, "a8")
    assert "0.190" in a8["why"] and "A100 value (a7, 0.18)" in a8["why"] and "swapped" in a8["why"]
    assert "swapped" in verdict(df, "a10")["why"]


def test_throughput_order_names_the_device_that_measured(tmp_path):
    """b14 once showed the H200 reference run's value as "h100: 20 images/s"."""
    b14 = verdict(table(tmp_path, [fr.sr3("h200", 1, 100.0)]), "b14")
    assert "h100" not in b14["measured"], b14["measured"]  # an H200's SR3 time never stands for an H100's
    df = table(tmp_path / "both", [fr.sr3("h200", 1, 100.0), fr.sr3("h100", 1, 120.0), fr.sr3("a100", 1, 200.0)])
    b14 = verdict(df, "b14")  # the H100 itself, not the H200 counted as one by policy
    assert "h100 (measured on NVIDIA H100" in b14["measured"] and "H200" not in b14["measured"], b14["measured"]


def test_merged_results_keep_their_origin(tmp_path):
    """Results copied in from another machine (ARTIFACT section 6) once read "measured here"."""
    from accelbench.aggregate.common import copied_in

    gpu = [fr.sr3("h100", 1, 100.0), fr.sr3("h100", 2, 105.0)]
    for r in gpu:
        r["environment"]["host"] = "gpu-node-17"
    df = table(tmp_path, gpu + [fr.sr3("cpu", 1, 100.0)])
    shown = pd.read_csv(tmp_path / "claims" / "claims.csv", keep_default_na=False)
    b13 = shown[shown["claim_id"] == "b13"].set_index("system")
    assert b13.loc["h100", "origin"] == "copied in (host gpu-node-17)" and b13.loc["cpu", "origin"] == "measured here"
    assert verdict(df, "b13", "h100")["verdict"] == "partly measured (1 of 2)"  # still judged, as an H100
    assert copied_in({"environment": {"host": "a"}}, host="a", system="") is None
    assert copied_in({}, host="a", system="") is None


def test_origin_inside_a_run_follows_the_runs_system_not_the_host(monkeypatch):
    """On a cluster every job records its own node: inside a run (the Snakefile names its system) a result of the
    run's own system is measured here whatever host it names; another system's result was copied in."""
    from accelbench.aggregate.common import RUN_SYSTEM_ENV, copied_in

    own, merged = fr.sr3("h100", 1, 100.0), fr.sr3("h200", 1, 90.0)
    own["environment"]["host"], merged["environment"]["host"] = "compute-03", "gpu-node-17"
    monkeypatch.setenv(RUN_SYSTEM_ENV, "h100")
    assert copied_in(own, host="login-1") is None
    assert copied_in(merged, host="login-1") == "copied in (h200, host gpu-node-17)"


def test_the_floor_rule_applies_outside_the_claims_hardware_too(tmp_path):
    """a4 on h200x2: the baseline's 0.78% under the counter's floor (1.35%) read "the check on the value measured
    here fails" on the out-of-scope path."""
    objs = ncu_run("h100", every=True)
    objs[2]["measurements"]["by_class"]["elementwise"] = {"kernels": 10, "tensor_pipe_pct": 2.5}
    a4 = verdict(table(tmp_path, objs), "a4")
    assert a4["verdict"] == "not measured here (A100 claim)"
    assert "noise floor, not checked" in a4["why"] and "fails" not in a4["why"], a4["why"]


def test_a_proxy_of_a_configuration_the_claim_does_not_need_is_no_proxy_verdict(tmp_path):
    """a6 read "numerics proxy passes" from a bf16 configuration, none of its four."""
    objs = [fr.unet3d("h100", "baseline", 100.0), fr.unet3d("h100", "bf16_compile", 50.0)]
    for r in objs:
        r["measurements"]["quality"]["method"] = "proxy: predicted noise of network N vs. the baseline's"
    a6 = verdict(table(tmp_path, objs), "a6")
    assert a6["verdict"] == "not measured here (numerics proxy passes)"  # baseline is one of the four
    a6 = verdict(table(tmp_path / "bf16", objs[1:]), "a6")
    assert a6["verdict"] == "not measured here" and "none of the needed observations" in a6["why"], a6


def test_published_texts_of_round_two():
    """a1 quotes the abstract; b6's erratum counts 8 of 9 files; b7/b15 no longer say two thirds; b4's tolerance
    comes from the percentile allocation's published +3.05%."""
    a = ct.read_claims(REF / "study_a_claims.csv", "A").set_index("claim_id")
    assert a.loc["a1", "quote"] == "training is overwhelmingly dominated by cuDNN convolution and implicit-GEMM kernels"
    b = ct.read_claims(REF / "study_b_claims.csv", "B").set_index("claim_id")
    assert "8 of 9 layer-level files" in b.loc["b6", "note"] and "every committed file" not in b.loc["b6", "note"]
    for cid in ("b7", "b15"):
        assert "18 of 22" in b.loc[cid, "note"] and "two thirds of the layers" not in b.loc[cid, "note"], cid
    assert float(b.loc["b4", "high"]) < 7.7 and "+3.05%" in b.loc["b4", "published"]


# --------------------------------------------------------------------------- the summaries' claims
NEW_CLAIMS = {  # id: (quantity, hardware scope as the table writes it)
    "a14": ("best_configuration", "A100/H100"),
    "b16": ("generation_speedup_x", "Gaudi1/Gaudi2"),
    "b17": ("generation_speedup_x", "Gaudi2/Gaudi3"),
    "b18": ("flash_gain_pct", "Gaudi1/Gaudi2"),
    "b19": ("generation_speedup_x", "V100/A100/H100"),
    "b20": ("generation_speedup_x", "Gaudi1/Gaudi2"),
    "b21": ("generation_speedup_x", "Gaudi2/Gaudi3"),
    "b22": ("real_quant_memory_ratio", "any hardware"),
    "b23": ("real_quant_eval_time_ratio", "any hardware"),
    "b24": ("sharded_epoch_over_single_x", "Gaudi2"),
}


def test_the_summaries_claims_have_rows_with_source_and_scope(tmp_path):
    """Each claim a summary of the papers states gets a row marked digest, with its hardware scope, and is judged
    where the hardware allows."""
    objs = cpu_run() + [
        fr.sr3("a100", 1, 240.0),
        fr.sr3("h100", 1, 100.0),
        fr.unet3d("h100", "baseline", 100.0),
        fr.unet3d("h100", "tf32", 20.0),
        fr.unet3d("h100", "channels_last_3d", 97.0),
        fr.unet3d("h100", "tf32_channels_last_3d", 30.0),
    ]
    objs[objs.index(next(o for o in objs if o["config"].get("method") == "torchao"))]["measurements"][
        "peak_mem_gib"
    ] = 0.5
    next(o for o in objs if o["config"].get("method") == "fp32")["measurements"]["peak_mem_gib"] = 1.0
    df = table(tmp_path, objs)
    for cid, (quantity, scope_label) in NEW_CLAIMS.items():
        rows = df[df["claim_id"] == cid]
        assert len(rows), cid
        r = rows.iloc[0]
        assert r["quantity"] == quantity and r["scope"] == scope_label, (cid, r["quantity"], r["scope"])
        assert "digest (unverified)" in r["source"] and r["verdict"], cid
    b19 = verdict(df, "b19")  # A100 -> H100 measured, V100 -> A100 not: partly measured
    assert b19["verdict"] == "partly measured (1 of 2)" and "2.40x" in b19["measured"], b19
    assert verdict(df, "b20")["verdict"] == "not measured here (Gaudi1/Gaudi2 claim)"
    assert verdict(df, "b22", "cpu")["verdict"] == "holds" and "0.50x" in verdict(df, "b22", "cpu")["measured"]
    a14 = verdict(df, "a14", "h100")
    assert a14["verdict"] == "holds" and "fastest: tf32" in a14["measured"]


def front_rows(md: str) -> list[list[str]]:
    """The rows (header first) of claims.md's first table."""
    table = re.search(r"(?:^\|.*\n)+", md, flags=re.M).group(0)
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in table.splitlines() if "---" not in ln]


def test_claims_md_opens_with_one_line_per_claim(tmp_path):
    """claims.md's first table: one line per claim of the claims files, in their order, the short text of each (at
    most 80 characters, from the files' `short` column), a verdict word, no footnote marker; the counts are a small
    table (origin x verdict), not a paragraph; the long form follows."""
    table(
        tmp_path, [fr.sr3("cpu", 1, 100.0), fr.sr3("cpu", 2, 55.0), fr.sr3("h100", 1, 100.0), fr.sr3("h100", 2, 200.0)]
    )
    md = (tmp_path / "claims" / "claims.md").read_text()
    claims = pd.concat([ct.read_claims(p, s) for p, s in zip(CLAIMS, "AB")], ignore_index=True)
    rows = front_rows(md)
    assert rows[0] == cf.FRONT_COLUMNS
    assert [r[0] for r in rows[1:]] == list(claims["claim_id"])  # one line each, the last claim last
    assert [r[1] for r in rows[1:]] == list(claims["short"]) and all(0 < len(r[1]) <= 80 for r in rows[1:])
    assert {r[4] for r in rows[1:]} <= set(cs.SUMMARY_VERDICTS)
    assert not [r for r in rows if re.search(r"\[\d+\]", " ".join(r))], "a footnote marker in the first table"
    b13 = next(r for r in rows if r[0] == "b13")
    assert b13[4] == "does not hold" and "(NVIDIA H100" in b13[3] and b13[5] == "measured here", b13
    counts = md[md.index("### Verdict counts") :]
    assert re.search(r"^\| one verdict per claim \| \d+", counts, flags=re.M) and "| measured here |" in counts
    assert (
        md.index("## " + cf.FRONT_TITLE)
        < md.index("one row per claim, its verdict")
        < md.index("one row per claim and system")
    )


def test_claims_file_without_a_short_text_is_named(tmp_path):
    text = CLAIMS[1].read_text()
    short = '"[16,8,4] mixed precision compresses decoder weights 3.47x"'
    assert f"b1,{short}," in text
    bad = tmp_path / "study_b_claims.csv"
    bad.write_text(text.replace(f"b1,{short},", "b1,,"))  # b1 without its short text
    with pytest.raises(DataError, match=r"study_b_claims.csv: claim b1: column short"):
        ct.read_claims(bad, "B")
    bad.write_text(text.replace(f"b1,{short},", "b1," + "x" * 81 + ","))
    with pytest.raises(DataError, match=r"claim b1: column short must be 1-80 characters, not 81"):
        ct.read_claims(bad, "B")


def test_the_end_of_a_run_names_claims_md_the_counts_and_the_report(tmp_path):
    assert cr.closing_lines(tmp_path / "claims") == [
        "accelbench: the HTML report of every table and figure: snakemake --report report.html"
    ]  # no claims table made: the report command alone
    table(
        tmp_path, [fr.sr3("cpu", 1, 100.0), fr.sr3("cpu", 2, 55.0), fr.sr3("h100", 1, 100.0), fr.sr3("h100", 2, 200.0)]
    )
    lines = cr.closing_lines(tmp_path / "claims")
    assert (
        lines[0].startswith("accelbench: done. Read the claims first: ")
        and str(tmp_path / "claims/claims.md") in lines[0]
    )
    n = len(pd.read_csv(tmp_path / "claims/claims_summary.csv"))
    assert lines[1] == f"accelbench: one verdict per claim ({n} claims): 1 does not hold, {n - 1} not measured here"
    assert lines[2].endswith("snakemake --report report.html")


# --------------------------------------------------------------------------- b25: accuracy kept
def _with_accuracy(obj: dict, hellaswag: float, boolq: float, n: int = 1000, boolq_majority: float = 0.62) -> dict:
    """``obj`` (a :func:`fake_results.quant` result) with HellaSwag acc_norm and BoolQ acc over ``n`` documents,
    each with the baselines lm-eval's samples give (chance 1 / choices; the majority class of the gold labels)."""

    def task(value: float, metric: str, chance: float, majority: float, label: str) -> dict:
        baselines = {"chance": chance, "majority": majority, "majority_label": label, "n": n}
        return {"status": "ok", "metric": metric, "value": value, "samples": n, "baselines": baselines}

    obj["measurements"]["accuracy"] = {
        "hellaswag": task(hellaswag, "acc_norm", 0.25, 0.257, "ending 0"),
        "boolq": task(boolq, "acc", 0.5, boolq_majority, "yes"),
    }
    return obj


def test_b25_accuracy_drop_is_judged_only_where_the_task_carries_signal(tmp_path):
    """b25 (a summary's claim: quantized models stay nearly as accurate on HellaSwag/BoolQ) is judged on FP32 -
    quantized accuracy per task, shown beside chance and the majority class; a task whose FP32 accuracy is at chance
    or under the majority class (read from the result, not typed) cannot show a loss: shown, not judged."""
    q = lambda s, m, b, **kw: fr.quant(s, m, b, text="pydoc")  # noqa: E731
    objs = [
        # h100: HellaSwag 45% (signal), BoolQ 40% under its majority 62%: only HellaSwag judges -> 1 of 2
        _with_accuracy(q("h100", "fp32", "none"), 0.45, 0.40),
        _with_accuracy(q("h100", "fake", "16_8_4"), 0.44, 0.30),
        _with_accuracy(q("h100", "torchao", "16_8_8"), 0.448, 0.41),
        # a100: both tasks carry signal, the simulated model loses 5 pts of HellaSwag -> does not hold
        _with_accuracy(q("a100", "fp32", "none"), 0.45, 0.70),
        _with_accuracy(q("a100", "fake", "8_4_4"), 0.40, 0.69),
        # h200: BoolQ 70% but its majority class recorded at 72%: no signal there (majority from the data)
        _with_accuracy(q("h200", "fp32", "none"), 0.45, 0.70, boolq_majority=0.72),
        _with_accuracy(q("h200", "fake", "8_4_4"), 0.445, 0.40, boolq_majority=0.72),
        # cpu: the embedded default's 2 documents per task carry no signal at all
        _with_accuracy(q("cpu", "fp32", "none"), 0.5, 1.0, n=2),
        _with_accuracy(q("cpu", "fake", "16_8_4"), 0.0, 0.5, n=2),
    ]
    df = table(tmp_path, objs)
    h100 = verdict(df, "b25", "h100")
    assert h100["verdict"] == "partly measured (1 of 2)", h100
    assert "HellaSwag fake/16_8_4 45.0 -> 44.0% (-1.0 pts; chance 25.0%, majority 25.7%; n=1,000)" in h100["measured"]
    assert "BoolQ fake/16_8_4 40.0 -> 30.0%" in h100["measured"] and "majority 62.0%" in h100["measured"]
    assert "missing boolq:*" in h100["why"] and "cannot show an accuracy loss" in h100["why"], h100["why"]
    assert "digest (unverified)" in h100["published"] and h100["scope"] == "any hardware"
    a100 = verdict(df, "b25", "a100")
    assert a100["verdict"] == "does not hold" and "HellaSwag fake/8_4_4 45.0 -> 40.0% (-5.0 pts" in a100["why"], a100
    h200 = verdict(df, "b25", "h200")
    assert h200["verdict"] == "partly measured (1 of 2)" and "majority class 72.0%" in h200["why"], h200["why"]
    cpu = verdict(df, "b25", "cpu")
    assert cpu["verdict"] == "not measured here (no signal)" and "over 2 documents" in cpu["why"], cpu
    assert "HellaSwag fake/16_8_4 50.0 -> 0.0%" in cpu["measured"]  # shown, not judged
