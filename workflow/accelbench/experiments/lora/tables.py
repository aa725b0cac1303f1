"""Study B LoRA aggregation: the run table, the flash-attention / sharding table, and the runtime-vs-devices figure.

Inputs are ``lora_finetune`` result files from any number of systems plus the published series
(``study_b_finetune_runtime.csv``: minutes per epoch read off Study B's Fig. 2, approximate). Hardware labels come
from each result's provenance, with the devices the job used (pairs match on them, not on the devices visible on the
node); rows that did not run carry ``OOM``/``unsupported`` and the reason. An ok row whose result lacks the model's
parameter count (0 or absent) shows no MFU-6N (6N needs N) and says so in ``reason``.

Definitions (same for ours and the published series):
  * flash-attention gain = time(eager) / time(flash) - 1 at equal system, model, strategy and devices;
  * sharding slowdown = time(fsdp or zero3) / time(ddp) at equal system, model, attention and devices
    (single-device runs stand in for 1-device DDP).
Ours use the median optimizer-step time; the published ones the epoch minutes.

Series: ``faithful`` (Study B's job files' runtime) and ``ours`` (the fastest honest step), both in every table
(column ``series``); an ours row says whether its loss curve stays within its recorded tolerance of the faithful run
at the same setting (``loss_vs_faithful``, :func:`.tables_rows.loss_check`). The claims read the faithful series
(:func:`claim_series`).

Modules: the rows in :mod:`.tables_rows`, the figure in :mod:`.tables_figures`, the claims (:data:`CLAIM_CHECKS`, for
the claims table: the flash-attention gain, the sharding slowdown, OOM without sharding, per system) in
:mod:`.tables_claims`; the tables and :func:`aggregate` here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.common import load_results, status_cell, write_table
from accelbench.core import tree
from accelbench.experiments.lora.tables_claims import CLAIM_CHECKS, claim_series
from accelbench.experiments.lora.tables_figures import runtime_figure
from accelbench.experiments.lora.tables_rows import read_reference, result_rows, source_line

__all__ = [
    "CLAIM_CHECKS",
    "aggregate",
    "claim_series",
    "gains_table",
    "read_reference",
    "result_rows",
    "runs_table",
    "runtime_figure",
]


def runs_table(df: pd.DataFrame) -> pd.DataFrame:
    """The run table with ``OOM``/``unsupported`` in place of numbers for cases that did not run."""
    cols = [
        "system",
        "hardware",
        "family",
        "model_name",
        "weights",
        "series",
        "attention",
        "attn_implementation",
        "strategy",
        "devices",
        "precision",
        "precision_note",
        "seq_len",
        "step_ms",
        "step_p10_ms",
        "step_p90_ms",
        "train_runtime_ms_per_step",
        "samples_per_s",
        "tokens_per_s",
        "peak_mem_gib",
        "host_peak_rss_gib",
        "mfu_lora",
        "mfu_6n",
        "eval_loss_before",
        "eval_loss_after",
        "loss_vs_faithful",
        "projected_min_per_mtok",
        "projected_epoch_min",
        "noise",
        "status",
        "reason",
    ]
    out = df.reindex(columns=cols).astype(object)
    for i, status in enumerate(df["status"]):
        if status != "ok":
            out.loc[i, "step_ms"] = status_cell({"status": status})
    return out


def _pairs(df: pd.DataFrame, value: str, key: list[str], vary: str, num: str, den: str) -> list[dict]:
    rows = []
    for k, g in df.groupby(key):
        vals = dict(zip(g[vary], g[value]))
        if num in vals and den in vals and pd.notna(vals[num]) and pd.notna(vals[den]) and vals[den] > 0:
            rows.append({**dict(zip(key, k)), "ratio": vals[num] / vals[den]})
    return rows


def gains_table(ours: pd.DataFrame, ref: pd.DataFrame, ref_source: str) -> pd.DataFrame:
    """Flash-attention gain and sharding slowdown, ours (median step time) beside the published (epoch minutes)."""
    rows = []
    ok = ours[ours["status"] == "ok"].copy() if not ours.empty else ours
    if not ok.empty:
        ok["strategy_ddp"] = ok["strategy"].replace({"single": "ddp"})
        for p in _pairs(
            ok,
            "step_ms",
            ["series", "system", "hardware", "family", "strategy", "devices"],
            "attention",
            "eager",
            "flash",
        ):
            rows.append(
                {
                    "source": p["series"],
                    "system": p["system"],
                    "hardware": p["hardware"],
                    "family": p["family"],
                    "metric": "flash_gain",
                    "strategy": p["strategy"],
                    "devices": p["devices"],
                    "value": p["ratio"] - 1,
                }
            )
        for sharded in ("fsdp", "zero3"):
            for p in _pairs(
                ok,
                "step_ms",
                ["series", "system", "hardware", "family", "attention", "devices"],
                "strategy_ddp",
                sharded,
                "ddp",
            ):
                rows.append(
                    {
                        "source": p["series"],
                        "system": p["system"],
                        "hardware": p["hardware"],
                        "family": p["family"],
                        "metric": f"{sharded}_slowdown_vs_ddp",
                        "strategy": sharded,
                        "devices": p["devices"],
                        "value": p["ratio"],
                    }
                )
        for row in rows:
            sel = ok[
                (ok["hardware"] == row["hardware"])
                & (ok["family"] == row["family"])
                & (ok["devices"] == row["devices"])
                & (ok["series"] == row["source"])
            ]
            flags = set(sel["noise"].dropna())  # the runs the row compares
            row["noise"] = "noisy" if "noisy" in flags else ("quiet" if flags else None)
    r = ref.copy()
    r["attention"] = r["flash_attention"].map({True: "flash", False: "eager"})
    for p in _pairs(r, "minutes", ["accelerator", "model", "strategy", "devices"], "attention", "eager", "flash"):
        rows.append(
            {
                "source": "published (approx.)",
                "system": p["accelerator"],
                "hardware": p["accelerator"],
                "family": p["model"],
                "metric": "flash_gain",
                "strategy": p["strategy"],
                "devices": p["devices"],
                "value": p["ratio"] - 1,
            }
        )
    for sharded in ("fsdp", "zero3"):
        for p in _pairs(r, "minutes", ["accelerator", "model", "attention", "devices"], "strategy", sharded, "ddp"):
            rows.append(
                {
                    "source": "published (approx.)",
                    "system": p["accelerator"],
                    "hardware": p["accelerator"],
                    "family": p["model"],
                    "metric": f"{sharded}_slowdown_vs_ddp",
                    "strategy": sharded,
                    "devices": p["devices"],
                    "value": p["ratio"],
                }
            )
    out = pd.DataFrame(
        rows, columns=["source", "system", "hardware", "family", "metric", "strategy", "devices", "value", "noise"]
    )
    # the gain in percent (one decimal in the shown tables, so -0.0026 reads -0.3, not -0.00); CSV: full precision
    out.insert(
        out.columns.get_loc("value") + 1,
        "flash_gain_pct",
        (100 * out["value"]).where(out["metric"] == "flash_gain").astype(float),
    )
    return out


def aggregate(result_paths: list[str], reference_path: str, out_dir: str | Path) -> dict:
    """Write ``runs.{csv,md,tex}``, ``gains.{csv,md,tex}`` and ``fig_runtime_vs_devices.png`` into ``out_dir``.

    Raises:
        ResultError: a corrupt result file (named); DataError: a bad reference file.
    """
    out = tree.make_output_dir(out_dir)  # below <results>, following no link
    results = [r for r in load_results(result_paths) if r["experiment"] == "lora_finetune"]
    df = result_rows(results)
    ref = read_reference(reference_path)
    src = source_line(reference_path)
    write_table(
        runs_table(df),
        out / "runs",
        "Study B LoRA fine-tuning runs (times in ms per optimizer step; projections labelled projected_*)",
    )
    gains = gains_table(df, ref, src)
    write_table(
        gains,
        out / "gains",
        "Flash-attention gain (eager/flash - 1, at equal strategy and devices; "
        "flash_gain_pct = 100 x gain) and "
        "sharding slowdown (sharded/DDP; a single-device run stands in for 1-device DDP), ours (median step "
        f"time; noise 'noisy' = not measured reliably) and published (epoch minutes). Published: {src.rstrip(':')}",
        empty="No pair of runs to compare.",
    )
    runtime_figure(df, ref, out / "fig_runtime_vs_devices.png", src)
    return {"runs": len(df), "gains": len(gains)}
