"""Hostile inputs and faults, round two (issue 27): each case fails before its fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import fake_results as fr
from accelbench.aggregate import claims as claims_mod
from accelbench.aggregate import study_a

REPO = Path(__file__).resolve().parents[2]
CLAIMS_A = REPO / "resources/reference/study_a_claims.csv"
CLAIMS_B = REPO / "resources/reference/study_b_claims.csv"
SR3_REF = REPO / "resources/reference/study_b_sr3_scaling.csv"


def _study_a(folder: Path, system: str = "cpu") -> list[str]:
    out = []
    for conf, ms in (("baseline", 100.0), ("tf32", 50.0)):
        p = folder / "unet3d_profile/whole_head" / conf / "result.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(fr.unet3d(system, conf, ms)))
        out.append(str(p))
    return out


# --------------------------------------------------------------------------- 3: two results share a system name
def test_second_cpu_machine_copied_in_gives_tables(tmp_path):
    """results/cpu (this machine) and results/laptop2 (a second machine, also called `cpu`)."""
    paths = _study_a(tmp_path / "results/cpu") + _study_a(tmp_path / "results/laptop2")
    study_a.aggregate(paths, CLAIMS_A, tmp_path / "a")
    df = pd.read_csv(tmp_path / "a/table.csv")
    assert len(df) == 4 and df["hardware"].str.startswith("laptop2: CPU").sum() == 2
    assert (df.set_index("configuration")["speedup_vs_baseline"].loc["tf32"] == 2.0).all()
    out = claims_mod.aggregate(paths, [CLAIMS_A, CLAIMS_B], SR3_REF, tmp_path / "c")
    assert {"cpu", "cpu (laptop2)"} <= set(out["system"])


def test_h200_run_beside_the_committed_reference_run_gives_tables(tmp_path):
    src = next((REPO / "reference_runs").glob("h200-*"))
    ref = tmp_path / "reference_runs" / src.name
    shutil.copytree(src, ref)
    mine = tmp_path / "results/h200/unet3d_profile"
    shutil.copytree(ref / "results/h200/unet3d_profile", mine)
    paths = sorted(map(str, mine.glob("**/result.json"))) + sorted(
        map(str, (ref / "results/h200/unet3d_profile").glob("**/result.json")))
    study_a.aggregate(paths, CLAIMS_A, tmp_path / "a")
    df = pd.read_csv(tmp_path / "a/table.csv")
    assert df["hardware"].str.startswith("reference run").sum() == len(df) / 2
    out = claims_mod.aggregate(paths, [CLAIMS_A, CLAIMS_B], SR3_REF, tmp_path / "c")
    assert "h200" in set(out["system"])
