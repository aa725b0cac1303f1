"""Study B LoRA aggregation: the run table, the flash-attention / sharding table, and the runtime-vs-devices figure.

Inputs are ``lora_finetune`` result files from any number of systems plus the published series
(``study_b_finetune_runtime.csv``: minutes per epoch read off Study B's Fig. 2, approximate). Hardware labels come
from each result's provenance; rows that did not run carry ``OOM``/``unsupported`` and the reason.

Definitions (same for ours and the published series):
  * flash-attention gain = time(eager) / time(flash) - 1 at equal system, model, strategy and devices;
  * sharding slowdown = time(fsdp or zero3) / time(ddp) at equal system, model, attention and devices
    (single-device runs stand in for 1-device DDP).
Ours use the median optimizer-step time; the published ones the epoch minutes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..errors import DataError  # noqa: E402
from .common import load_results, status_cell, write_table  # noqa: E402

DEVICE_COLUMNS = ["1", "2", "4", "6", "8"]


def read_reference(path: str | Path) -> pd.DataFrame:
    """Published series in long form: ``series, model, accelerator, strategy, flash_attention, devices, minutes``.

    Raises:
        DataError: the file is missing or lacks the expected columns.
    """
    try:
        wide = pd.read_csv(path, comment="#")
    except FileNotFoundError:
        raise DataError(f"published LoRA runtimes not found: {path}") from None
    need = {"series", "model", "accelerator", "strategy", "flash_attention", *DEVICE_COLUMNS}
    if not need <= set(wide.columns):
        raise DataError(f"{path}: expected columns {sorted(need)}, found {list(wide.columns)}")
    long = wide.melt(id_vars=["series", "model", "accelerator", "strategy", "flash_attention"],
                     value_vars=DEVICE_COLUMNS, var_name="devices", value_name="minutes").dropna(subset=["minutes"])
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
        row = {"system": cfg["system"]["name"], "hardware": r["_hardware"], "software": r["_software"],
               "model": cfg["model_name"], "family": cfg.get("family", cfg["model_name"]),
               "attention": cfg["attention"], "strategy": cfg["strategy"], "devices": int(cfg["devices"]),
               "status": r["status"], "reason": r.get("reason")}
        if r["status"] == "ok":
            proj = m["projection"]
            row.update({
                "weights": m["model"].get("weights"), "attn_implementation": m["attn_implementation"],
                "precision": m["precision"], "seq_len": m["data"]["seq_len"],
                "step_ms": m["step"]["median"], "step_p10_ms": m["step"]["p10"], "step_p90_ms": m["step"]["p90"],
                "timed_steps": m["step"]["count"], "slowest_rank_step_ms": m["step_slowest_rank_median_ms"],
                "samples_per_s": m["samples_per_s"], "tokens_per_s": m["tokens_per_s"],
                "peak_mem_gib": m.get("peak_mem_gib_max"), "host_peak_rss_gib": m.get("host_peak_rss_gib_max"),
                "mfu_6n": m["throughput_6n"]["mfu"], "tflop_per_s_6n": m["throughput_6n"]["tflop_per_s"],
                "mfu_lora": m.get("throughput_lora", {}).get("mfu"),
                "trainable_params": m["lora_parameters"]["trainable"], "params": m["model"]["parameters"],
                "loss_first": m["loss"]["first_mean"], "loss_last": m["loss"]["last_mean"],
                "eval_loss_before": m["loss"]["eval_before"], "eval_loss_after": m["loss"]["eval_after"],
                "projected_min_per_mtok": proj["minutes_per_million_tokens"],
                "projected_epoch_min": proj.get("minutes"),
            })
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values(["system", "family", "strategy", "attention", "devices"]).reset_index(drop=True)
    return df


def runs_table(df: pd.DataFrame) -> pd.DataFrame:
    """The run table with ``OOM``/``unsupported`` in place of numbers for cases that did not run."""
    cols = ["hardware", "family", "weights", "attention", "attn_implementation", "strategy", "devices", "precision",
            "seq_len", "step_ms", "step_p10_ms", "step_p90_ms", "samples_per_s", "tokens_per_s", "peak_mem_gib",
            "host_peak_rss_gib", "mfu_lora", "mfu_6n", "eval_loss_before", "eval_loss_after", "projected_min_per_mtok",
            "projected_epoch_min", "status", "reason"]
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
        for p in _pairs(ok, "step_ms", ["hardware", "family", "strategy_ddp", "devices"], "attention", "eager", "flash"):
            rows.append({"source": "ours", "hardware": p["hardware"], "family": p["family"], "metric": "flash_gain",
                         "strategy": p["strategy_ddp"], "devices": p["devices"], "value": p["ratio"] - 1})
        for sharded in ("fsdp", "zero3"):
            for p in _pairs(ok, "step_ms", ["hardware", "family", "attention", "devices"], "strategy_ddp", sharded, "ddp"):
                rows.append({"source": "ours", "hardware": p["hardware"], "family": p["family"],
                             "metric": f"{sharded}_slowdown_vs_ddp", "strategy": sharded, "devices": p["devices"],
                             "value": p["ratio"]})
    r = ref.copy()
    r["attention"] = r["flash_attention"].map({True: "flash", False: "eager"})
    for p in _pairs(r, "minutes", ["accelerator", "model", "strategy", "devices"], "attention", "eager", "flash"):
        rows.append({"source": "published (approx.)", "hardware": p["accelerator"], "family": p["model"],
                     "metric": "flash_gain", "strategy": p["strategy"], "devices": p["devices"], "value": p["ratio"] - 1})
    for sharded in ("fsdp", "zero3"):
        for p in _pairs(r, "minutes", ["accelerator", "model", "attention", "devices"], "strategy", sharded, "ddp"):
            rows.append({"source": "published (approx.)", "hardware": p["accelerator"], "family": p["model"],
                         "metric": f"{sharded}_slowdown_vs_ddp", "strategy": sharded, "devices": p["devices"],
                         "value": p["ratio"]})
    return pd.DataFrame(rows, columns=["source", "hardware", "family", "metric", "strategy", "devices", "value"])


def runtime_figure(ours: pd.DataFrame, ref: pd.DataFrame, path: str | Path, ref_source: str) -> None:
    """Runtime vs. devices, one panel per model family: published series (dashed, left axis, epoch minutes) and ours
    (solid; projected epoch minutes on the left axis when known, else minutes per million tokens on a right axis)."""
    ok = ours[ours["status"] == "ok"] if not ours.empty else ours
    families = list(dict.fromkeys(list(ref["model"]) + (list(ok["family"]) if not ok.empty else [])))
    fig, axes = plt.subplots(1, len(families), figsize=(4.6 * len(families), 4.0), squeeze=False)
    for ax, fam in zip(axes[0], families):
        for series, g in ref[ref["model"] == fam].groupby("series", sort=False):
            g = g.sort_values("devices")
            ax.plot(g["devices"], g["minutes"], "--o", ms=3, alpha=0.7,
                    label=f"published {g['accelerator'].iloc[0]} {g['strategy'].iloc[0]}"
                          f"{' FA' if g['flash_attention'].iloc[0] else ''}")
        mine = ok[ok["family"] == fam] if not ok.empty else ok
        right = None
        for (hw, strat, att), g in (mine.groupby(["hardware", "strategy", "attention"]) if not mine.empty else []):
            g = g.sort_values("devices")
            label = f"ours: {hw} {strat} {att}"
            if g["projected_epoch_min"].notna().all():
                ax.plot(g["devices"], g["projected_epoch_min"], "-s", label=label + " (projected epoch)")
            else:
                right = right or ax.twinx()
                right.plot(g["devices"], g["projected_min_per_mtok"], "-s", label=label)
                right.set_ylabel("ours: minutes per 1M tokens (projected from step time)")
        ax.set_title(fam)
        ax.set_xlabel("devices")
        xs = sorted(set(ref.loc[ref["model"] == fam, "devices"]) | (set(mine["devices"]) if not mine.empty else set()))
        ax.set_xticks(xs)
        if ref[ref["model"] == fam].empty and (mine.empty or mine["projected_epoch_min"].isna().all()):
            ax.get_yaxis().set_visible(False)  # only the right axis (ours, per million tokens) carries data
        else:
            ax.set_ylabel("wall time per epoch [min]")
        handles, labels = ax.get_legend_handles_labels()
        if right is not None:
            h2, l2 = right.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
        if handles:
            ax.legend(handles, labels, fontsize=6, loc="best")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Study B LoRA fine-tuning runtime. Published: {ref_source}", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def aggregate(result_paths: list[str], reference_path: str, out_dir: str | Path) -> dict:
    """Write ``runs.{csv,md,tex}``, ``gains.{csv,md,tex}`` and ``fig_runtime_vs_devices.png`` into ``out_dir``.

    Raises:
        ResultError: a corrupt result file (named); DataError: a bad reference file.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = [r for r in load_results(result_paths) if r["experiment"] == "lora_finetune"]
    df = result_rows(results)
    ref = read_reference(reference_path)
    src = source_line(reference_path)
    write_table(runs_table(df), out / "runs", "Study B LoRA fine-tuning runs (times in ms per optimizer step; "
                "projections labelled projected_*)")
    gains = gains_table(df, ref, src)
    write_table(gains, out / "gains", "Flash-attention gain (eager/flash - 1) and sharding slowdown (sharded/DDP), "
                f"ours (median step time) and published (epoch minutes; {src})")
    runtime_figure(df, ref, out / "fig_runtime_vs_devices.png", src)
    return {"runs": len(df), "gains": len(gains)}
