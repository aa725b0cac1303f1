"""The rows of the Study B quantization table and of the sensitivity tables, torch-free: the published rows
(:func:`read_reference`, ``study_b_quantization.csv``), one row per measured method result (:func:`measured_rows`),
their order, and the per-layer and per-sub-module sensitivity of every sensitivity result (:func:`sensitivity_rows`,
:func:`submodule_rows`). Cells: :mod:`.tables_cells`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.common import model_display, noise_cell, status_cell
from accelbench.aggregate.figures import origin_of
from accelbench.core import files
from accelbench.errors import ResultError
from accelbench.experiments.llm_quant.tables_cells import (
    ACCURACY_TASKS,
    COLUMNS,
    METHOD_LABEL,
    METHOD_ORDER,
    PUBLISHED_HARDWARE,
    PUBLISHED_MODEL,
    SETTING_COLUMNS,
    accuracy_cells,
    baseline_cells,
    card_cells,
    mfu_cells,
    run_label,
)


def read_reference(path: str | Path) -> tuple[pd.DataFrame, str]:
    """``(published rows in the table's columns, source text from the header lines)`` (WikiText-2 only)."""
    path = Path(path)
    lines = files.read_text(path, "reference file", error=ResultError).splitlines()  # missing: "... not found: path"
    source = " ".join(line.lstrip("# ").strip() for line in lines if line.startswith("#"))
    ref = files.read_frame(path, "reference file", error=ResultError, comment="#")
    wt = ref[ref["dataset"] == "wikitext2"].set_index("metric")
    acc = {t: ref[(ref["dataset"] == t) & (ref["metric"] == "accuracy_pct")] for t in ACCURACY_TASKS}
    rows = []
    for col in [c for c in ref.columns if c not in ("dataset", "metric")]:
        parts = col.split("_")
        system = parts[-1]
        if parts[0] == "fp32":
            method, bitset, label = "fp32", "none", "FP32 baseline"
        elif parts[0] == "fake":
            method, bitset, label = "fake", "_".join(parts[1:-1]), "simulated (RTN, g=128)"
        else:
            method = "real_fp8" if "fp8" in parts else "real_int8"
            bitset = "_".join(parts[1:-1])
            label = "INC FP8 (half of MLP) + BF16" if method == "real_fp8" else "INT8 weight-only + FP16"
        rows.append(
            {
                "source": "published",
                "model": PUBLISHED_MODEL,
                "model_name": PUBLISHED_MODEL,
                "hardware": PUBLISHED_HARDWARE.get(system, system),
                "system": system,
                "method": method,
                "bitset": bitset,
                "label": label,
                "text": "WikiText-2 test",
                "perplexity": wt.loc["perplexity", col],
                "compression_x": wt.loc["compression_x", col],
                "throughput_tok_per_s": wt.loc["throughput_tok_per_s", col],
                "eval_time_s": wt.loc["eval_time_s", col],
                **{f"{t}_acc_pct": float(a[col].iloc[0]) for t, a in acc.items() if len(a)},
                "chunk_len": 512,
                "weights": "pretrained",
                "status": "ok",
            }
        )
    return pd.DataFrame(rows), source


def measured_rows(results: list[dict], cards: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per method result (sensitivity results are skipped), Study B's columns; ``cards``: the model cards'
    published scores (:func:`read_model_cards`) for the ``<task>_card_pct`` columns."""
    rows = []
    for r in results:
        cfg, m = r["config"], r["measurements"]
        if cfg.get("method", "sensitivity") == "sensitivity":
            continue
        model_info = m.get("model", {})
        label = METHOD_LABEL.get(cfg["method"], cfg["method"])
        if cfg["method"] == "fp32" and model_info.get("label"):
            label = run_label(model_info, m.get("dtype"))  # "SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)"
        weights = model_info.get("weights")
        if weights and model_info.get("quantized_file"):
            weights = f"{weights}, {model_info['quantized_file']} dequantized"
        data = m.get("data") or {}
        text = " ".join(str(x) for x in (data.get("name"), data.get("part")) if x) or None
        row = {
            "source": r.get("_series", "measured"),
            "model": cfg["model"],
            "model_name": model_display(r),
            "hardware": r["_hardware"],
            "system": cfg["system"]["name"],
            "method": cfg["method"],
            "bitset": cfg["bitset"],
            "label": label,
            "text": text,
            "weights": weights,
            "status": r["status"],
            "reason": r.get("reason"),
            "noise": noise_cell(r),
        }
        if r["status"] == "ok":
            row.update(
                {
                    "perplexity": m["perplexity"]["value"],
                    "eval_tokens": m["perplexity"]["tokens"],
                    "chunk_len": m["perplexity"].get("chunk_len"),
                    "compression_x": m["compression_x"]["value"],
                    "model_compression_x": m["model_compression_x"]["value"],
                    "throughput_tok_per_s": (m.get("eval_tokens_per_s") or {}).get("value"),
                    "eval_time_s": m["eval_time"]["value"],
                    "forward_bench_tok_per_s": (m.get("forward_benchmark") or m.get("throughput", {})).get(
                        "tokens_per_s"
                    ),
                    **accuracy_cells(m.get("accuracy")),
                    **card_cells(model_info, m.get("accuracy"), cards),
                    **mfu_cells(r),
                    **{k: v for k, v in (m.get("settings") or {}).items() if k in SETTING_COLUMNS and v is not None},
                }
            )
            row.update(baseline_cells(row, m.get("accuracy")))
        else:
            row["perplexity"] = status_cell(r)
        rows.append(row)
    extra = list(dict.fromkeys(k for r in rows for k in r if k not in COLUMNS))  # configured tasks beyond Study B's
    return pd.DataFrame(rows, columns=COLUMNS[:-4] + extra + COLUMNS[-4:])


def order_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows by source, model, system, method (:data:`~.tables_cells.METHOD_ORDER`) and bit set."""
    key = df["method"].map({m: i for i, m in enumerate(METHOD_ORDER)}).fillna(99)
    return (
        df.assign(_k=key, _b=df["bitset"].astype(str))
        .sort_values(["source", "model", "system", "_k", "_b"])
        .drop(columns=["_k", "_b"])
        .reset_index(drop=True)
    )


def _allocation_used(results: list[dict]) -> dict:
    """``{(system, model): (metric, clustering)}`` as used by the method jobs (default prune/percentile)."""
    used = {}
    for r in results:
        cfg = r["config"]
        if cfg.get("method") in ("fake", "torchao", "int8_dq") and cfg.get("allocation"):
            used.setdefault(
                (cfg["system"]["name"], cfg["model"]), (cfg["allocation"]["metric"], cfg["allocation"]["clustering"])
            )
    return used


def sensitivity_rows(results: list[dict]) -> pd.DataFrame:
    """Per-layer sensitivity of every sensitivity result, with the cluster of each layer under the allocation
    the method jobs used (prune/percentile when there are none)."""
    frames = []
    used = _allocation_used(results)
    for r in results:
        cfg = r["config"]
        if cfg.get("method") != "sensitivity" or r["status"] != "ok":
            continue
        m = r["measurements"]
        layers = pd.DataFrame(m["layers"])
        metric, clustering = used.get((cfg["system"]["name"], cfg["model"]), ("prune", "percentile"))
        if metric not in m["allocation"]:
            metric = next(iter(m["allocation"]))
        layers["cluster"] = m["allocation"][metric][clustering]
        layers.insert(0, "hardware", r["_hardware"])
        layers.insert(0, "origin", origin_of(r))
        layers.insert(0, "scale", cfg["system"].get("scale"))
        layers.insert(0, "system", cfg["system"]["name"])
        layers.insert(0, "model", cfg["model"])
        layers["baseline_ppl"] = m["baseline_ppl"]["value"]
        layers["chunk_len"] = m["baseline_ppl"].get("chunk_len")
        layers["model_label"] = run_label(m.get("model", {}), m.get("dtype")) or model_display(r) or cfg["model"]
        layers["weights"] = m.get("model", {}).get("weights")
        layers["allocation"] = f"{metric}/{clustering}"
        frames.append(layers)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def submodule_rows(results: list[dict]) -> pd.DataFrame:
    frames = []
    for r in results:
        if r["config"].get("method") != "sensitivity" or r["status"] != "ok" or not r["measurements"]["submodules"]:
            continue
        d = pd.DataFrame(r["measurements"]["submodules"])
        d.insert(0, "hardware", r["_hardware"])
        d.insert(0, "origin", origin_of(r))
        d.insert(0, "scale", r["config"]["system"].get("scale"))
        d.insert(0, "system", r["config"]["system"]["name"])
        d.insert(0, "model", r["config"]["model"])
        d["model_label"] = (
            run_label(r["measurements"].get("model", {}), r["measurements"].get("dtype"))
            or model_display(r)
            or r["config"]["model"]
        )
        d["weights"] = r["measurements"].get("model", {}).get("weights")
        frames.append(d)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
