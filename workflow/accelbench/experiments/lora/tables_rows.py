"""Study B LoRA aggregation, the rows: the published series (:func:`read_reference`) and one row per result
(:func:`result_rows`, with the ours-vs-faithful loss check :func:`loss_check`).

Times in ms per optimizer step, memory in GiB, throughput in samples/s and tokens/s; the published series in minutes
per epoch (``study_b_finetune_runtime.csv``, read off Study B's Fig. 2, approximate). An ok row whose result lacks the
model's parameter count (0 or absent) shows no MFU-6N (6N needs N) and says so in ``reason``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.common import model_display, noise_cell
from accelbench.aggregate.figures import origin_of
from accelbench.core import files
from accelbench.errors import DataError

DEVICE_COLUMNS = ["1", "2", "4", "6", "8"]
# results written before the series existed (commit 73bf7c3, 2026-12-01; the last ones are reference run
# h200-2026-11-30's) ran the no-sync runtime with a constant_with_warmup schedule: the label says until when
OLD_SERIES = "ours (until 2026-11-30)"
DEFAULT_LOSS_TOLERANCE = 0.02  # only for ours results that did not record theirs (lora_finetune.ours.loss_tolerance)
# an ok result whose model.parameters is 0 or absent (e.g. counted after ZeRO-3 partitioned the weights, before
# parameters were counted by ds_numel): its MFU-6N cell stays empty and the row says why
PARAMS_MISSING = "MFU-6N not shown: parameters not recorded in the result"


def read_reference(path: str | Path) -> pd.DataFrame:
    """Published series in long form: ``series, model, accelerator, strategy, flash_attention, devices, minutes``.

    Raises:
        DataError: the file is missing or lacks the expected columns.
    """
    wide = files.read_frame(path, "published LoRA runtimes", error=DataError, comment="#")  # missing: "... not found"
    need = {"series", "model", "accelerator", "strategy", "flash_attention", *DEVICE_COLUMNS}
    if not need <= set(wide.columns):
        raise DataError(f"{path}: expected columns {sorted(need)}, found {list(wide.columns)}")
    long = wide.melt(
        id_vars=["series", "model", "accelerator", "strategy", "flash_attention"],
        value_vars=DEVICE_COLUMNS,
        var_name="devices",
        value_name="minutes",
    ).dropna(subset=["minutes"])
    long["devices"] = long["devices"].astype(int)
    long["flash_attention"] = long["flash_attention"].astype(str).str.lower() == "true"
    long["strategy"] = long["strategy"].replace({"deepspeed_zero3": "zero3"})
    return long.reset_index(drop=True)


def source_line(path: str | Path) -> str:
    """The first comment line of the reference file (its source)."""
    for line in Path(path).read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return str(path)


def result_rows(results: list[dict]) -> pd.DataFrame:
    """One row per result. Times in ms, memory in GiB, throughput in samples/s and tokens/s."""
    rows = []
    for r in results:
        cfg, m = r["config"], r["measurements"]
        row = {
            "system": cfg["system"]["name"],
            "hardware": r["_hardware"],
            "device": r.get("_device", r["_hardware"]),
            "software": r["_software"],
            "model": cfg["model_name"],
            "family": cfg.get("family", cfg["model_name"]),
            # what ran, from the result's record (e.g. "SmolLM2-135M-Instruct (Q4_1-dequantized)")
            "model_name": model_display(r, cfg.get("family")),
            "attention": cfg["attention"],
            "strategy": cfg["strategy"],
            "devices": int(cfg["devices"]),
            "series": cfg.get("series", OLD_SERIES),
            "status": r["status"],
            "reason": r.get("reason"),
            "origin": origin_of(r),
            "scale": cfg["system"].get("scale"),
            "noise": noise_cell(r),
        }
        if r["status"] == "ok":
            proj = m["projection"]
            row.update(
                {
                    "weights": m["model"].get("weights"),
                    "attn_implementation": m["attn_implementation"],
                    "precision": m["precision"],
                    "seq_len": m["data"]["seq_len"],
                    # why bf16 became fp32 (a system or a CPU without native bf16), as a footnote
                    "precision_note": "; ".join(n for n in m.get("notes") or () if "fp32 used" in n) or None,
                    "step_ms": m["step"]["median"],
                    "step_p10_ms": m["step"]["p10"],
                    "step_p90_ms": m["step"]["p90"],
                    "timed_steps": m["step"]["count"],
                    "slowest_rank_step_ms": m["step_slowest_rank_median_ms"],
                    "samples_per_s": m["samples_per_s"],
                    "tokens_per_s": m["tokens_per_s"],
                    "peak_mem_gib": m.get("peak_mem_gib_max"),
                    "host_peak_rss_gib": m.get("host_peak_rss_gib_max"),
                    "mfu_6n": m["throughput_6n"]["mfu"],
                    "tflop_per_s_6n": m["throughput_6n"]["tflop_per_s"],
                    "mfu_lora": m.get("throughput_lora", {}).get("mfu"),
                    "trainable_params": m["lora_parameters"]["trainable"],
                    "params": m["model"].get("parameters"),
                    "loss_first": m["loss"]["first_mean"],
                    "loss_last": m["loss"]["last_mean"],
                    "eval_loss_before": m["loss"]["eval_before"],
                    "eval_loss_after": m["loss"]["eval_after"],
                    "projected_min_per_mtok": proj["minutes_per_million_tokens"],
                    "projected_epoch_min": proj.get("minutes"),
                    "train_runtime_ms_per_step": (m.get("train_runtime") or {}).get("ms_per_step"),
                    "loss_per_step": m["loss"].get("per_step"),
                    "loss_tolerance": m.get("loss_tolerance"),
                }
            )
            if not m["model"].get("parameters"):  # 6N needs N: without it MFU-6N is wrong, not small
                row.update({"mfu_6n": None, "tflop_per_s_6n": None, "reason": PARAMS_MISSING})
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values(["system", "family", "strategy", "attention", "devices", "series"]).reset_index(drop=True)
        df["loss_vs_faithful"] = loss_check(df)
    return df


def loss_check(df: pd.DataFrame) -> list:
    """Per row: for an ``ours`` run (or a variant ``ours_<name>``), whether its loss curve stays within its recorded
    relative tolerance of the faithful run at equal system, model, attention, strategy and devices over the steps both
    ran (``within 1.3% <= 2%`` / ``beyond ...``), else None. Both series train the same model on the same data with
    the same seed and hyper-parameters, so the curves differ only by the kernels' and the reduction order's
    rounding."""
    out = []
    key = ["system", "family", "attention", "strategy", "devices"]
    faithful = {
        tuple(r[k] for k in key): r for _, r in df[(df["series"] == "faithful") & (df["status"] == "ok")].iterrows()
    }
    for _, r in df.iterrows():
        f = faithful.get(tuple(r[k] for k in key))
        ours = r["series"] == "ours" or str(r["series"]).startswith("ours_")
        if not ours or r["status"] != "ok" or f is None or not isinstance(r.get("loss_per_step"), list):
            out.append(None)
            continue
        n = min(len(r["loss_per_step"]), len(f["loss_per_step"]))
        tol = r.get("loss_tolerance") or DEFAULT_LOSS_TOLERANCE
        worst = max(
            (abs(a - b) / abs(b) for a, b in zip(r["loss_per_step"][:n], f["loss_per_step"][:n]) if b), default=None
        )
        out.append(
            None
            if worst is None
            else f"{'within' if worst <= tol else 'beyond'} {100 * worst:.2f}% {'<=' if worst <= tol else '>'} "
            f"{100 * tol:g}% over {n} steps"
        )
    return out
