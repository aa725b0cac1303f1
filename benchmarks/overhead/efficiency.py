"""Efficiency (``efficiency``): time at 1 device / time at N from the harness-overhead CSV."""

from __future__ import annotations

import json
from pathlib import Path


def efficiency(args) -> None:
    """Time at 1 device / time at N (per-device batch fixed) for the harness, the bare loop and the product; printed
    and written beside the CSV as ``<name>_efficiency.csv``. The CSV accumulates runs: each N-device row is paired
    with the 1-device row of the same experiment and model measured closest in time (the same session's run)."""
    import pandas as pd

    df = pd.read_csv(args.csv)
    df = df[~df["case"].astype(str).str.startswith("efficiency")].reset_index(drop=True)
    rows = []
    when = pd.to_datetime(df["when"], utc=True, errors="coerce")
    model = df["case"].astype(str).str.split().str[:2].str.join(" ")  # e.g. "llama31_8b flash", "fp32"
    for i, r in df[df["experiment"].isin(["sr3", "lora"]) & (df["devices"] > 1)].iterrows():
        ones = df[(df["experiment"] == r["experiment"]) & (df["devices"] == 1) & (model == model[i])]
        if ones.empty:
            continue
        one = ones.loc[(when[ones.index] - when[i]).abs().idxmin()]
        rows.append(
            {
                "experiment": r["experiment"],
                "case": r["case"],
                "devices": int(r["devices"]),
                "efficiency_harness": round(one["harness_ms"] / r["harness_ms"], 4),
                "efficiency_bare": round(one["bare_ms"] / r["bare_ms"], 4),
                "efficiency_product": round(one["product_ms"] / r["product_ms"], 4)
                if pd.notna(r["product_ms"]) and pd.notna(one["product_ms"])
                else None,
                "goal": 0.95,
                "one_device_when": one.get("when"),
                "when": r.get("when"),
            }
        )
        print(json.dumps(rows[-1]))
    out = Path(args.csv).with_name(Path(args.csv).stem + "_efficiency.csv")
    pd.DataFrame(rows).to_csv(out, index=False)
