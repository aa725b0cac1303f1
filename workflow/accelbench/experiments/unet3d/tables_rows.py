"""Study A's rows (torch-free): one row per profiled (system, model, configuration) with the table's columns
(:func:`result_rows`; speedups against the baseline of the same series), the published-layout table
(:func:`table`), and Study A's four configurations on Med-DDPM's network beside the MONAI stand-in
(:func:`network_comparison`). The claims (:mod:`.tables_claims`), the figures (:mod:`.tables_figures`) and the files
(:mod:`.tables`) read these rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from accelbench.aggregate.common import noise_cell, noise_why
from accelbench.aggregate.figures import origin_of
from accelbench.experiments.unet3d.configs import BEFORE_THE_KEYS, VARIANTS
from accelbench.experiments.unet3d_ncu.tables import KEY, NETWORK_LABEL, key_of
from accelbench.measure.kernel_classes import current_classes

CLASSES = [
    "convolution",
    "gemm",
    "attention",
    "normalization",
    "layout_conversion",
    "cast_copy",
    "elementwise",
    "optimizer",
    "reduction",
    "memory",
    "other",
]
ORDER = list(VARIANTS)


def _kernel_table(result: dict) -> Path | None:
    """The per-kernel table (``kernels.csv``, ``artefacts.kernel_table``) beside a loaded result, if it names one."""
    name = (result.get("artefacts") or {}).get("kernel_table")
    return Path(result["_path"]).with_name(name) if name and result.get("_path") else None


def micro_batches_of(result: dict) -> int:
    """The micro-batches per Adam step a Study A result ran (the forward/backward passes its training-step times
    cover): ``measurements.micro_batches``, else the resolved ``config.settings`` (a result that did not run), else
    the spec's ``config.micro_batches``; a result made before the key existed ran
    :data:`~accelbench.experiments.unet3d.configs.BEFORE_THE_KEYS` (one)."""
    cfg = result.get("config") or {}
    for value in (
        (result.get("measurements") or {}).get("micro_batches"),
        (cfg.get("settings") or {}).get("micro_batches"),
        cfg.get("micro_batches"),
    ):
        if value is not None:
            return int(value)
    return BEFORE_THE_KEYS["micro_batches"]


def result_rows(results: list[dict]) -> pd.DataFrame:
    """One row per (system, model, configuration) with the Study A columns; speedups vs. that
    system's baseline. Times in ms, memory in GiB, shares as fractions of device time.

    Kernel classes (``share_*``, ``layout_conversion_kernels``, ``cast_copy_kernels``, ``tensor_core_share``) are those
    of the current classifier (:func:`accelbench.measure.kernel_classes.current_classes`): re-derived from the
    ``kernels.csv`` beside the result when it is there, else from the result's top-kernel table (the rest as
    recorded); ``kernel_classes`` says which. The result files are not changed."""
    rows = []
    for r in results:
        cfg, m = r["config"], r["measurements"]
        settings = cfg.get("settings", {})
        row = {
            **key_of(r),
            "hardware": r["_hardware"],
            "software": r["_software"],
            "origin": origin_of(r),
            "scale": settings.get("scale", cfg["system"].get("scale")),
            "volume": "x".join(map(str, settings.get("volume", []))),
            "configuration": cfg["configuration"],
            "series": VARIANTS[cfg["configuration"]].series if cfg["configuration"] in VARIANTS else None,
            "micro_batches": micro_batches_of(r),
            "status": r["status"],
            "reason": r.get("reason"),
            "noise": noise_cell(r),
            "noise_why": noise_why(r),
        }
        if r["status"] == "ok":
            k, row["kernel_classes"] = current_classes(m["kernels"], _kernel_table(r))
            row.update(
                {
                    "train_step_ms": m["train_step"]["median"],
                    "train_step_p10_ms": m["train_step"]["p10"],
                    "train_step_p90_ms": m["train_step"]["p90"],
                    "timed_steps": m["train_step"]["count"],
                    "sample_step_ms": m["sample_step"]["median"],
                    "projected_sample_s": m["sample_projection"]["seconds"],
                    "projection_steps": m["sample_projection"].get("steps"),
                    "kernel_count": k["kernel_count"],
                    "layout_conversion_kernels": k["layout_conversion_count"],
                    "cast_copy_kernels": k.get("cast_copy_count"),
                    "kernel_source": k["source"],
                    **{f"share_{c}": k["class_share"].get(c, 0.0) for c in CLASSES},
                    "tensor_core_share": k["tensor_core_share"],
                    "idle_fraction": k["idle_fraction"],
                    "peak_mem_gib": m.get("peak_mem_gib"),
                    "tflop_per_s": m["train_throughput"]["tflop_per_s"],
                    "mfu": m["train_throughput"]["mfu"],
                    "quality_rel_l2_noise": m["quality"]["predicted_noise"]["rel_l2"],
                    "quality_psnr_db_noise": m["quality"]["predicted_noise"].get("psnr_db"),
                    "quality_ssim_noise": m["quality"]["predicted_noise"].get("ssim"),
                    "quality_holds": m["quality"]["holds"],
                }
            )
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    # the measured columns also where no result ran (e.g. only `unsupported` tf32 on a CPU): empty, not missing
    measured = ["train_step_ms", "kernel_count", "layout_conversion_kernels", "cast_copy_kernels"]
    df = df.reindex(columns=[*df.columns, *(c for c in [*measured, *(f"share_{c}" for c in CLASSES)] if c not in df)])
    df["configuration"] = pd.Categorical(
        df["configuration"], categories=ORDER + sorted(set(df["configuration"]) - set(ORDER)), ordered=True
    )
    df = df.sort_values([*KEY, "configuration"]).reset_index(drop=True)
    df["configuration"] = df["configuration"].astype(str)
    # speedups against the baseline of the same series (cuDNN autotuning off: baseline; on: baseline_autotuned)
    base = df.set_index([*KEY, "configuration"])["train_step_ms"] if "train_step_ms" in df else None
    if base is not None:
        ref = [VARIANTS[c].baseline if c in VARIANTS else "baseline" for c in df["configuration"]]
        df["speedup_vs_baseline"] = [
            base.get((*k, b), np.nan) / t if pd.notna(t) else np.nan
            for k, b, t in zip(df[KEY].itertuples(index=False, name=None), ref, df["train_step_ms"])
        ]
    return df


def table(df: pd.DataFrame) -> pd.DataFrame:
    """The published-layout table: status labels in place of numbers for rows that did not run."""
    cols = [
        "system",
        "hardware",
        "model",
        "network",
        "volume",
        "configuration",
        "series",
        "micro_batches",
        "train_step_ms",
        "speedup_vs_baseline",
        "sample_step_ms",
        "projected_sample_s",
        "kernel_count",
        "layout_conversion_kernels",
        "cast_copy_kernels",
        "share_convolution",
        "share_gemm",
        "share_attention",
        "share_normalization",
        "share_layout_conversion",
        "share_cast_copy",
        "share_elementwise",
        "tensor_core_share",
        "idle_fraction",
        "peak_mem_gib",
        "tflop_per_s",
        "mfu",
        "quality_rel_l2_noise",
        "quality_psnr_db_noise",
        "quality_ssim_noise",
        "quality_holds",
        "noise",
        "kernel_classes",
        "status",
        "reason",
    ]
    out = df.reindex(columns=cols).astype(object)
    for i, status in enumerate(df["status"]):
        if status != "ok":
            out.loc[i, "train_step_ms"] = {"oom": "OOM", "unsupported": "unsupported"}[status]
    return out


# --------------------------------------------------------------------------- Med-DDPM's network vs. the stand-in
STUDY_A_FOUR = ["baseline", "tf32", "channels_last_3d", "tf32_channels_last_3d"]
COMPARED = [
    "train_step_ms",
    "speedup_vs_baseline",
    "kernel_count",
    "layout_conversion_kernels",
    "layout_conversion_per_micro_batch",
    "share_convolution",
    "share_gemm",
    "share_attention",
    "share_normalization",
    "share_layout_conversion",
    "share_elementwise",
    "tensor_core_share",
    "ipc",
    "tensor_pipe_pct",
]


def network_comparison(df: pd.DataFrame, ncu: pd.DataFrame) -> pd.DataFrame:
    """Study A's four configurations on Med-DDPM's own network beside the MONAI stand-in, per system and model: one row
    per (system, model, configuration, network) with the micro-batches per Adam step it ran, the step time, speedup,
    kernel counts (layout conversions also per micro-batch), the kernel-class shares of device time, and IPC /
    tensor-pipe utilisation where unet3d_ncu measured them. Empty unless both networks were measured on one system
    and model (two runs)."""
    columns = ["system", "model", "configuration", "network", "run", "micro_batches", *COMPARED]
    if df.empty or "network" not in df or df["network"].nunique() < 2:
        return pd.DataFrame(columns=columns)
    d = df[df["configuration"].isin(STUDY_A_FOUR) & (df["status"] == "ok")].copy()
    d["layout_conversion_per_micro_batch"] = d["layout_conversion_kernels"] / d["micro_batches"]
    if not ncu.empty and "ipc" in ncu:
        rates = ncu[ncu["status"] == "ok"].set_index([*KEY, "configuration"])[["ipc", "tensor_pipe_pct"]]
        idx = list(d[[*KEY, "configuration"]].itertuples(index=False, name=None))
        d["ipc"] = [rates["ipc"].get(i, np.nan) for i in idx]
        d["tensor_pipe_pct"] = [rates["tensor_pipe_pct"].get(i, np.nan) for i in idx]
    both = d.groupby(["system", "model"])["network"].transform("nunique") > 1
    d = d[both].assign(network=lambda x: x["network"].map(lambda n: NETWORK_LABEL.get(n, n)))
    order = {c: i for i, c in enumerate(STUDY_A_FOUR)}
    d = d.sort_values(
        ["system", "model", "configuration", "network"], key=lambda c: c.map(order) if c.name == "configuration" else c
    )
    return d.reindex(columns=columns).reset_index(drop=True)
