"""The one verdict per claim ranks its evidence by likeness to the claim (device class, setting) before the order
of the runs: a small CPU run measured here never replaces a paper-scale accelerator run (committed reference run or
a GPU result) in claims_summary.csv or the first screen's "measured (on)" and "judged by"."""

from __future__ import annotations

import pandas as pd

from accelbench.aggregate import claims_front as cf
from accelbench.aggregate import claims_summary as cs

H100 = "reference run (H100 1-GPU, 2026-12-05): NVIDIA H100 80GB HBM3 (1x, 79.18 GiB)"
H200 = "reference run (H200, 2026-11-30): NVIDIA H200 (1x, 139.8 GiB)"
H200_B = "reference run (H200 series, 2026-12-01): NVIDIA H200 (1x, 139.8 GiB)"
CPU = "CPU: AMD EPYC 7763 (2 threads) [cpu: 2-core VM]"


def rows(claim_id: str, scope: str, *runs: tuple[str, str, str]) -> pd.DataFrame:
    """Claims-table rows of one claim: (hardware, verdict, measured) per run, the CPU's system name ``cpu`` sorting
    first as in the real table (systems in name order)."""
    out = [
        {
            "study": "A",
            "claim_id": claim_id,
            "claim": "c",
            "published": "p",
            "scope": scope,
            "system": "cpu" if hw.startswith("CPU") else f"ref{i}",
            "hardware": hw,
            "measured": measured,
            "verdict": verdict,
            "why": f"why {i}",
        }
        for i, (hw, verdict, measured) in enumerate(runs)
    ]
    df = pd.DataFrame(out).sort_values("system", kind="stable").reset_index(drop=True)
    return df.assign(origin=cs.origin_column(df))


def front(df: pd.DataFrame) -> pd.Series:
    return cf.front_table(df, cs.summary_table(df), {df["claim_id"].iloc[0]: "short"}).iloc[0]


def test_out_of_scope_claim_keeps_the_gpu_value_and_run():
    """a4/a5/a7/a9 (A100 claims): both the H100 reference run and the CPU are outside the claim; the H100's value
    and run stay the evidence (the old code took the first specific row: the CPU's, "measured here")."""
    df = rows(
        "a5",
        "A100",
        (H100, "not measured here (A100 claim)", "tf32: ipc change pct -36.4"),
        (CPU, "not measured here (A100 claim)", "tf32: ipc change pct 2.1"),
    )
    s = cs.summary_table(df).iloc[0]
    assert s["measured"] == "tf32: ipc change pct -36.4" and "H100" in s["evidence"]
    f = front(df)
    assert f["judged by"] == "reference run (H100 1-GPU, 2026-12-05)"
    assert "NVIDIA H100 80GB HBM3" in f["measured (on)"] and "measured here" not in f["judged by"]


def test_in_scope_proxy_on_the_gpu_outranks_the_cpu_outside_the_claim():
    """a6 (a V100/A100/H100 claim): the H100's numerics proxy reading stays, not the CPU's "(V100/A100/H100 claim)"."""
    df = rows(
        "a6",
        "V100/A100/H100",
        (H100, "not measured here (numerics proxy passes)", "(numerics proxy) tf32: rel. L2 0.0013"),
        (CPU, "not measured here (V100/A100/H100 claim)", "(numerics proxy) tf32: rel. L2 0.0001"),
    )
    assert cs.summary_table(df).iloc[0]["verdict"] == "not measured here (numerics proxy passes)"
    assert front(df)["judged by"] == "reference run (H100 1-GPU, 2026-12-05)"


def test_cpu_does_not_hold_never_overturns_the_accelerator_runs():
    """b23 (any hardware): a CPU timing on 2 documents reads "does not hold"; the paper-scale H200 runs decide, the
    CPU's row stays in the per-run table and counts."""
    df = rows(
        "b23",
        "any hardware",
        (H200, "holds", "torchao: 1.26x"),
        (H200_B, "holds", "torchao: 1.31x"),
        (CPU, "does not hold", "torchao: 0.62x on 2 documents"),
    )
    s = cs.summary_table(df).iloc[0]
    assert s["verdict"] == "holds" and "CPU" not in s["evidence"] and "1 does not hold" in s["runs"]
    assert "measured here" not in front(df)["judged by"]


def test_accelerators_that_disagree_still_disagree_beside_a_cpu():
    df = rows(
        "b23",
        "any hardware",
        (H200, "holds", "1.26x"),
        (H200_B, "does not hold", "0.8x"),
        (CPU, "holds", "1.1x"),
    )
    s = cs.summary_table(df).iloc[0]
    assert s["verdict"] == cs.DISAGREE and "measured here" not in s["evidence"]


def test_a_model_at_paper_scale_outranks_a_small_one_outside_the_claim():
    """b9/b18 (Gaudi claims): Llama-3.1-8B on the H100 stays the value shown, not SmolLM2 on the CPU."""
    df = rows(
        "b9",
        "Gaudi1/Gaudi2",
        (H100, "not measured here (Gaudi1/Gaudi2 claim)", "llama-3.1-8b single n=1: +14.2%"),
        (CPU, "not measured here (Gaudi1/Gaudi2 claim)", "smollm2-135m single n=1: -3.0%"),
    )
    assert cs.summary_table(df).iloc[0]["measured"].startswith("llama-3.1-8b")


def test_partly_measured_on_the_gpu_outranks_a_cpu_covering_more():
    df = rows(
        "b13",
        "any hardware",
        (H200, "partly measured (1 of 2)", "fp32 2 devices: efficiency 0.93"),
        (CPU, "partly measured (2 of 2)", "2 ranks: efficiency 0.9"),
    )
    s = cs.summary_table(df).iloc[0]
    assert s["verdict"] == "partly measured (1 of 2)" and "H200" in s["evidence"]


def test_the_cpu_is_shown_where_there_is_no_better_evidence():
    """Where only the CPU measured (no reference run of the experiment), its row is the evidence, as before."""
    df = rows(
        "b16",
        "any hardware",
        ("none", "not measured here", ""),
        (CPU, "holds", "1.2x"),
    )
    s = cs.summary_table(df).iloc[0]
    assert s["verdict"] == "holds" and s["evidence"].startswith("measured here")
    assert front(df)["judged by"] == "measured here"


def test_own_class_before_a_class_by_policy_and_like_for_like_kept():
    """An H100 claim: the H100's decisive verdict judges it before an H200 counted as H100 (the older rule,
    kept); a claim of any hardware keeps both."""
    runs = ((H100, "holds", "0.2"), (H200, "does not hold", "0.5"))
    assert cs.summary_table(rows("a8", "H100", *runs)).iloc[0]["verdict"] == "holds"
    assert cs.summary_table(rows("a8", "any hardware", *runs)).iloc[0]["verdict"] == cs.DISAGREE


def test_every_first_screen_column_has_a_width_within_the_budget():
    """At 1400 px the report once cut off "measured (on)" and "judged by" ("what it says" had no width bound): every
    column of the first table now has a max-width, and their sum with the cells' padding fits FRONT_WIDTH_PX (1060
    px, measured 1045 px in headless Chromium at 1400x1000, last verdict row at 788 px)."""
    import re

    df = rows("a5", "A100", (H100, "not measured here (A100 claim)", "x" * 300))
    html = cf.front_html(front(df).to_frame().T, cs.count_table(df, cs.summary_table(df)))
    style = re.search(r"<style>(.*?)</style>", html).group(1)
    widths = {int(i): int(px) for i, px in re.findall(r"td\.c-(\d+)\{max-width:(\d+)px", style)}
    cells = re.search(r'<tr data-claim="a5">(.*?)</tr>', html).group(1)
    classes = [int(c) for c in re.findall(r'<td class="c-(\d+)', cells)]
    assert len(classes) == len(cf.FRONT_COLUMNS) and set(classes) <= set(widths)
    assert sum(widths[c] + cf.CELL_PAD_PX for c in classes) <= cf.FRONT_WIDTH_PX <= 1400 - 300
