"""The scope policy's evidence (``resources/reference/h100_h200_evidence.csv``): each quantity's H100 and H200 values
recomputed from the committed reference runs, and the policy (``accelbench.aggregate.scope``) deciding as the file
says: an H200 counts as H100 only for the quantities whose ``h200_judges`` is ``yes``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from accelbench.aggregate import scope

REPO = Path(__file__).resolve().parents[2]
EVIDENCE = REPO / "resources" / "reference" / scope.EVIDENCE_FILE
RUNS = {
    "h100": REPO / "reference_runs/h100x1-2026-12-05/results/h100",
    "h200": REPO / "reference_runs/h200x2-2026-12-01/results/h200",
}  # named in the file's header
H200 = "reference run (H200 series, 2026-12-01): NVIDIA H200 (1x, 139.8 GiB)"
H100 = "reference run (H100 1-GPU, 2026-12-05): NVIDIA H100 80GB HBM3 (1x, 79.18 GiB)"


def read_evidence(text: str | None = None) -> pd.DataFrame:
    text = EVIDENCE.read_text() if text is None else text
    return pd.read_csv(io.StringIO(text), comment="#", keep_default_na=False, dtype=str)


def _key(folder: Path, key: str) -> float:
    value = json.loads((folder / "result.json").read_text())["measurements"]
    for part in key.split("."):
        value = value[part]
    return float(value)


def recompute(spec: str, root: Path) -> float:
    """One value of the file's ``value`` column (its header says how) from the results under ``root``."""
    kind, where, key = spec.split(":")
    if kind == "ratio":
        parts = where.split("/")
        half = len(parts) // 2
        a, b = root.joinpath(*parts[:half]), root.joinpath(*parts[half:])
        return _key(a, key) / _key(b, key)
    if kind == "share":
        share = json.loads((root / where / "result.json").read_text())["measurements"]["kernels"]["class_share"]
        return sum(float(share[c]) for c in key.split("+"))
    if kind == "value":
        return _key(root / where, key)
    raise ValueError(f"unknown value kind {kind!r}")


def disagreements(df: pd.DataFrame) -> list[str]:
    """Rows whose stated H100 or H200 value is not what the committed results give (to the digits stated)."""
    out = []
    for _, r in df.iterrows():
        for gpu in ("h100", "h200"):
            stated = str(r[gpu])
            digits = len(stated.split(".")[1]) if "." in stated else 0
            got = recompute(r["value"], RUNS[gpu])
            if abs(got - float(stated)) > 0.6 * 10**-digits:
                out.append(f"{r['quantity']} {gpu}: file {stated}, results {got:.{digits + 2}f}")
    return out


def test_the_evidence_table_equals_the_committed_h100_and_h200_results():
    df = read_evidence()
    assert len(df) >= 6 and set(df["h200_judges"]) == {"yes", "no"}
    assert disagreements(df) == []


def test_a_stated_value_that_the_results_do_not_give_is_caught():
    df = read_evidence()
    df.loc[df["quantity"] == "sm_cycles_ratio", "h200"] = "0.390"  # the digest's H100 value planted as the H200's
    assert disagreements(df) == ["sm_cycles_ratio h200: file 0.390, results 0.17673"]


@pytest.mark.parametrize("row", read_evidence().to_dict("records"), ids=lambda r: r["quantity"])
def test_the_policy_decides_as_the_evidence_says(row):
    cls, why = scope.class_of(H200, row["quantity"])
    assert (cls == "h100") == (row["h200_judges"] == "yes"), why
    assert scope.class_of(H100, row["quantity"])[0] == "h100"  # a real H100 is H100 for every quantity
    ok, sentence = scope.in_scope("h100", H200, row["quantity"])
    assert ok == (row["h200_judges"] == "yes") and "H200" in sentence


def test_a_quantity_without_evidence_is_not_judged_on_an_h200():
    cls, why = scope.class_of(H200, "some_new_quantity")
    assert cls == scope.OTHER and "no H100-beside-H200 evidence" in why
    assert scope.class_of(H200)[0] == "h100"  # without a quantity (a label, a figure's grouping) it is H100 class
    assert scope.in_scope("any", H200, "some_new_quantity")[0]  # a claim on any hardware needs no evidence


def test_a_throughput_order_is_not_judged_from_an_h200_as_h100(tmp_path):
    """b14's H100 point: an H200's SR3 time stands for an H100 no more (the file says no, 12% apart)."""
    from test_claims import table, verdict

    import fake_results as fr

    objs = [fr.sr3("h200", 1, 100.0), fr.sr3("a100", 1, 300.0)]
    b14 = verdict(table(tmp_path, objs), "b14")
    assert "h100" not in b14["measured"].split(":")[0], b14
