"""Published vs measured on the studies' own GPU (``results/claims/h100_vs_published``): only a real H100's results
fill it (an H200 counted as H100 by the scope policy does not), with the difference in percent and the setting that
differs (Study B's minutes are whole-job wall times)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from test_claims import table

import fake_results as fr
from accelbench.aggregate import h100_table as ht

REF = Path(__file__).resolve().parents[2] / "resources" / "reference"


def _written(tmp_path, objs) -> pd.DataFrame:
    table(tmp_path, objs)
    return pd.read_csv(tmp_path / "claims" / "h100_vs_published.csv", keep_default_na=False)


def test_sr3_minutes_of_a_real_h100_beside_study_bs_and_never_an_h200s(tmp_path):
    h100 = fr.sr3("h100", 1, 100.0)
    df = _written(tmp_path / "h100", [h100])
    one = df[df["what"].str.startswith("SR3 strong scaling, 1 device")].iloc[0]
    minutes = h100["measurements"]["study_b_projection"]["minutes"]
    assert one["published"] == "132 min" and one["measured_on_h100"].startswith(f"{minutes:.1f} min")
    assert float(one["difference_pct"]) == round(100 * (minutes - 132) / 132, 1)
    assert "whole-job wall time" in one["what_differs"] and "NVIDIA H100" in one["h100"]
    two = df[df["what"].str.startswith("SR3 strong scaling, 2 device")].iloc[0]
    assert two["measured_on_h100"] == ht.NOT_MEASURED and two["published"] == "72 min"

    only_h200 = _written(tmp_path / "h200", [fr.sr3("h200", 1, 90.0)])
    assert (only_h200["measured_on_h100"] == ht.NOT_MEASURED).all()  # an H200 is no H100 here
    assert set(only_h200["h100"]) == {""}


def test_two_h100_nodes_each_get_their_sr3_row_with_their_origin(tmp_path):
    """Two H100 nodes measured the same work 17% apart (reference runs h100x1 and h100x1b, 2026-12-05): both rows
    are shown, fastest first, each naming its origin; picking one would hide the node-to-node spread."""
    slow, fast = fr.sr3("h100", 1, 219.9), fr.sr3("h100", 1, 188.1)
    rows = ht.sr3_rows(
        [
            {**slow, "_hardware": "reference run (H100 1-GPU, 2026-12-05): NVIDIA H100 80GB HBM3 (1x, 79.18 GiB)"},
            {
                **fast,
                "_hardware": "reference run (H100 1-GPU, node 2, 2026-12-05): NVIDIA H100 80GB HBM3 (1x, 79.18 GiB)",
            },
        ],
        pd.DataFrame({"system": ["h100", "h100"], "devices": [1, 2], "minutes": [132.0, 72.0]}),
    )
    one = [r for r in rows if r["what"].startswith("SR3 strong scaling, 1 device")]
    assert [r["h100"] for r in one] == [
        "NVIDIA H100 80GB HBM3 (1x, 79.18 GiB); reference run (H100 1-GPU, node 2, 2026-12-05)",
        "NVIDIA H100 80GB HBM3 (1x, 79.18 GiB); reference run (H100 1-GPU, 2026-12-05)",
    ]
    minutes = [r["measurements"]["study_b_projection"]["minutes"] for r in (fast, slow)]
    assert [r["difference_pct"] for r in one] == [round(100 * (m - 132) / 132, 1) for m in minutes]
    two = [r for r in rows if r["what"].startswith("SR3 strong scaling, 2 device")]
    assert len(two) == 1 and two[0]["measured_on_h100"] == ht.NOT_MEASURED


def test_every_h100_claim_has_a_row_with_its_published_value():
    claims = pd.read_csv(REF / "study_a_claims.csv", comment="#", keep_default_na=False)
    h100_claims = claims[claims["gpu"].str.contains("h100") | (claims["gpu"] == "all")]["claim_id"]
    shown = pd.DataFrame(
        [
            {"claim_id": c, "claim": c, "scope": "V100/A100/H100", "published": "0.39 (H100, digest)", "why": ""}
            | {"hardware": "NVIDIA H200 (1x)", "measured": "tf32: sm cycles ratio 0.18", "verdict": "holds"}
            for c in h100_claims
        ]
    )
    df = ht.h100_table([], shown, None)
    assert list(df["what"].str.split(":").str[0]) == list(h100_claims)
    assert (df["measured_on_h100"] == ht.NOT_MEASURED).all()  # the H200 rows do not stand for an H100


def test_numbers_are_read_from_one_number_cells_only():
    assert ht._one_number("0.39 (H100, digest); digest (unverified)") == 0.39
    assert ht._one_number("3 to 5 (A100/H100, digest)") is None  # a range: no single difference
    assert ht._measured_number("tf32_channels_last_3d: 3.36x training step") == 3.36
    assert ht._measured_number("baseline 1.00x; tf32 4.98x") is None
