"""Toy aggregation (torch-free): one row per ``toy_matmul`` result (:func:`result_rows`), written as
``table.{csv,md,tex,html}`` (:func:`aggregate`), and the toy's claim check (:data:`CLAIM_CHECKS`).

The claim (``resources/reference/toy_claims.csv``, quantity ``matmul_gflops_ratio_x``): the rate (GFLOP/s at the
median time) at the largest size measured over the rate at the smallest, per system. Where the rates' spreads
(from the p10/p90 times) overlap, the observation is left unresolved (evidence neither way).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.claims import ClaimInputs, NotMeasured, Observation, per_system_rows
from accelbench.aggregate.common import joined_labels, load_results, noise_cell, write_table
from accelbench.errors import DataError

EXPERIMENT = "toy_matmul"
COLUMNS = ["system", "hardware", "size", "status", "median_us", "p10_us", "p90_us", "gflops", "noise"]


def result_rows(results: list[dict]) -> pd.DataFrame:
    """One row per result (:data:`COLUMNS`; times in microseconds, ``gflops`` the rate in GFLOP/s at the median
    time), by system and size."""
    rows = []
    for r in results:
        m = r.get("measurements") or {}
        t = m.get("matmul") or {}
        rows.append(
            {
                "system": r["config"]["system"]["name"],
                "hardware": r["_hardware"],
                "size": int(r["config"]["size"]),
                "status": r["status"],
                **{f"{k}_us": t[k] * 1e3 if t.get(k) is not None else None for k in ("median", "p10", "p90")},
                "gflops": m.get("gflop_per_s"),
                "noise": noise_cell(r),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["system", "size"], kind="stable").reset_index(drop=True)


def aggregate(result_paths: list[str], reference_path: str, out_dir: str | Path) -> dict:
    """Write ``table.{csv,md,tex,html}`` into ``out_dir``; ``reference_path``: the toy's claims file (named in the
    caption). Returns ``{"rows": n}``.

    Raises:
        ResultError: a corrupt result file (named).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = result_rows([r for r in load_results(result_paths) if r["experiment"] == EXPERIMENT])
    write_table(
        df,
        out / "table",
        "Toy float32 matmul n x n @ n x n: median time over the timed repeats (us, p10/p90 beside it) and the rate at "
        f"the median (GFLOP/s = 2 n^3 / time). Hardware: {joined_labels(df)}. Claim: {Path(reference_path).name}.",
        empty="No toy_matmul result.",
    )
    return {"rows": len(df)}


def _rate(row: pd.Series, column: str) -> float:
    """GFLOP/s of ``row``'s matmul at its time ``column`` (us)."""
    return 2 * row["size"] ** 3 / (row[column] / 1e6) / 1e9


def _observations(claim: pd.Series, rows: pd.DataFrame, res: dict) -> list[Observation]:
    """The one observation of the claim on one system: the largest size's rate over the smallest's."""
    if claim["quantity"] != "matmul_gflops_ratio_x":
        raise DataError(f"claim {claim['claim_id']}: unknown quantity {claim['quantity']!r}")
    ok = rows[rows["status"] == "ok"]
    if ok["size"].nunique() < 2:
        raise NotMeasured("fewer than two sizes measured (config toy_matmul.sizes)")
    small, large = ok.loc[ok["size"].idxmin()], ok.loc[ok["size"].idxmax()]
    ratio = large["gflops"] / small["gflops"]
    # rates from the p90 (slow) and p10 (fast) times: spreads that overlap decide nothing
    overlap = not (_rate(large, "p90_us") > _rate(small, "p10_us") or _rate(large, "p10_us") < _rate(small, "p90_us"))
    text = (
        f"n={small['size']}: {small['gflops']:.3g} GFLOP/s, n={large['size']}: {large['gflops']:.3g} "
        f"GFLOP/s: {ratio:.2f}x" + (" (the p10-p90 spreads overlap: unresolved)" if overlap else "")
    )
    used = [res[int(small["size"])], res[int(large["size"])]]
    return [Observation(float(ratio), text, used, unresolved=overlap)]


def _claim_rows(claim: pd.Series, inputs: ClaimInputs) -> list[dict]:
    """The claims-table rows of one toy_matmul claim: one per system (the engine's verdict)."""
    return per_system_rows(claim, inputs, result_rows, lambda r: int(r["config"]["size"]), _observations)


CLAIM_CHECKS = {EXPERIMENT: _claim_rows}
