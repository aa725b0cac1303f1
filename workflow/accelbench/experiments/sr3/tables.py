"""Study B SR3 aggregation: scaling table, scaling-efficiency table, scaling figure, sample picture.

Inputs are ``sr3_scaling`` result files from any number of systems, and Study B's published strong-scaling
times (``study_b_sr3_scaling.csv``: minutes for the 40,000-iteration workload per device count; data with
its source in the header lines). Strong-scaling efficiency with iterations x devices constant is
``T(1) / (N * T(N))`` for wall times, which for measured runs equals ``t_iter(1) / t_iter(N)`` (same
per-device batch). Hardware labels come from each result's provenance.

Labels say what the data show: an ``ours`` configuration is labelled :data:`FASTEST` only where it is faster than the
faithful configuration on the same node (:func:`series_labels`), and every minutes column says whether it is a
projection (median iteration x 40,000), a measured-plus-projected total (the iterations run, first-iteration
compilation included, + the median for the rest) or a published wall time (``minutes_kind``).

Claims (:data:`CLAIM_CHECKS`, for the claims table): strong-scaling efficiency per system, and the cross-system
1-device throughput order against the published times.

Modules: the rows in :mod:`.tables_rows`, the figures in :mod:`.tables_figures`, the claims in :mod:`.tables_claims`;
the tables and :func:`aggregate` here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.common import load_results, status_cell, write_table
from accelbench.core import tree
from accelbench.experiments.sr3 import configs as sr3_configs
from accelbench.experiments.sr3.tables_claims import CLAIM_CHECKS
from accelbench.experiments.sr3.tables_figures import fig_samples, fig_scaling
from accelbench.experiments.sr3.tables_rows import (
    FASTEST,
    MINUTES_KIND,
    layout_columns,
    measured_plus_projected_minutes,
    published_efficiency,
    read_reference,
    result_rows,
    series_labels,
)

__all__ = [
    "CLAIM_CHECKS",
    "FASTEST",
    "aggregate",
    "efficiency_table",
    "fig_samples",
    "fig_scaling",
    "layout_columns",
    "measured_plus_projected_minutes",
    "published_times",
    "published_efficiency",
    "read_reference",
    "result_rows",
    "series_labels",
    "table",
]


def published_times(reference_path: str | Path, devices: int = 1) -> pd.DataFrame:
    """Study B's published SR3 times as ms per iteration at ``devices`` devices (``system``, ``step_ms``, ``note``):
    wall minutes of :data:`~accelbench.experiments.sr3.configs.STUDY_B_WORKLOAD` / devices iterations; the energy
    figure draws them without energy (none was published)."""
    ref, _ = read_reference(reference_path)
    ref = ref[ref["devices"] == devices]
    return pd.DataFrame(
        {
            "system": ref["system"],
            "step_ms": ref["minutes"] * 60e3 / (sr3_configs.STUDY_B_WORKLOAD / devices),
            "note": f"{devices} device{'s' if devices > 1 else ''}, time only (no energy)",
        }
    ).reset_index(drop=True)


def table(df: pd.DataFrame) -> pd.DataFrame:
    """The scaling table with ``OOM``/``unsupported`` in place of numbers for rows that did not run."""
    cols = [
        "system",
        "hardware",
        "scale",
        "series",
        "series_label",
        "configuration",
        "precision",
        "attention_levels",
        "cudnn_benchmark",
        "host_syncs_timed",
        "devices",
        "layout",
        "interconnect",
        "iteration_ms",
        "iteration_p10_ms",
        "iteration_p90_ms",
        "images_per_s",
        "iterations_per_device",
        "iterations_run",
        "wall_s",
        "strong_total_s",
        "strong_total_label",
        "study_b_40k_minutes_projection",
        "study_b_40k_minutes_measured_plus_projected",
        "speedup_vs_1",
        "efficiency_vs_1",
        "mfu",
        "loss_vs_faithful",
        "peak_mem_gib",
        "peak_rss_gib",
        "replica_max_abs_diff",
        "psnr_sr3_db",
        "psnr_bicubic_db",
        "ssim_sr3",
        "ssim_bicubic",
        "beats_bicubic",
        "quality_sampler",
        "noise",
        "status",
        "reason",
    ]
    out = df.reindex(columns=cols).astype(object)
    for i, r in df.iterrows():
        if r["status"] != "ok":
            out.loc[i, "iteration_ms"] = status_cell(r.to_dict())
    return out


def efficiency_table(df: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Scaling efficiency per series and device count: this run's results beside published. ``minutes_40k``: a
    measured row's projection from its median iteration, a published row's wall time (``minutes_kind`` says which);
    ``minutes_40k_measured_plus_projected``: a measured row's total with the iterations it ran (compilation
    included), beside its projection; ``cold_start_s``: the first iteration alone (torch.compile, autotuning and
    CUDA-graph recording on the node's compile cache as found), s, where the result records it."""
    rows = []
    for _, r in df.iterrows():
        ok = r["status"] == "ok"
        label = r.get("series_label") or sr3_configs.SERIES.get(r["series"], r["series"])
        device, origin = str(r.get("device", r["hardware"])), str(r.get("origin") or "measured here")
        who = device if device.startswith(origin) else f"{origin}: {device}"  # a reference run's label leads already
        rows.append(
            {
                "system": r["system"],
                "series": f"{who} ({r['scale']}), {label}: {r['configuration']}",
                "precision": r["precision"],
                "devices": r["devices"],
                "layout": r.get("layout"),
                "minutes_40k": r.get("study_b_40k_minutes_projection") if ok else None,
                "minutes_kind": MINUTES_KIND["projection"] if ok else None,
                "minutes_40k_measured_plus_projected": r.get("study_b_40k_minutes_measured_plus_projected")
                if ok
                else None,
                "cold_start_s": r.get("first_iteration_s") if ok else None,
                "efficiency": r.get("efficiency_vs_1") if ok else None,
                "label": "projection" if ok else status_cell(r.to_dict()),
                "noise": r.get("noise"),
                "reason": r.get("reason"),
            }
        )
    cols = [
        "system",
        "series",
        "precision",
        "devices",
        "layout",
        "minutes_40k",
        "minutes_kind",
        "minutes_40k_measured_plus_projected",
        "cold_start_s",
        "efficiency",
        "label",
        "noise",
        "reason",
    ]
    return pd.concat([pd.DataFrame(rows, columns=cols), published_efficiency(ref)], ignore_index=True).reindex(
        columns=cols
    )


def aggregate(result_paths: list[str | Path], reference_path: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Write ``scaling.{csv,md,tex}``, ``efficiency.{csv,md,tex}``, ``fig_scaling.png`` and ``fig_samples.png``.

    Raises:
        ResultError: a missing or corrupt result file. DataError: a missing reference file.
    """
    out_dir = tree.make_output_dir(out_dir)  # below <results>, following no link
    results = [r for r in load_results(result_paths) if r["experiment"] == "sr3_scaling"]
    ref, source = read_reference(reference_path)
    df = result_rows(results)
    write_table(
        table(df),
        out_dir / "scaling",
        "Study B SR3 training per system, precision and device count (iteration: median, ms; totals: s; "
        "study_b_40k_minutes_projection: median iteration x Study B's 40,000 iterations, min; "
        "study_b_40k_minutes_measured_plus_projected: the measured wall time of the iterations run, first-"
        f"iteration compilation included, + the median for the rest, min). series_label: {FASTEST!r} only on "
        "the fastest ours configuration faster than the faithful one on the same node and device count",
    )
    write_table(
        efficiency_table(df, ref),
        out_dir / "efficiency",
        "Strong-scaling efficiency T(1) / (N T(N)): this run's results (minutes_40k projected from the median "
        "iteration; minutes_40k_measured_plus_projected: the iterations run, compilation included, + the "
        "median for the rest; minutes_kind says which; cold_start_s: the first iteration alone, compilation and "
        f"CUDA-graph recording included, s) and published wall times ({source})",
    )
    fig_scaling(df, ref, source, out_dir / "fig_scaling.png")
    fig_samples(df, out_dir / "fig_samples.png")
    return {
        "table": out_dir / "scaling.csv",
        "efficiency": out_dir / "efficiency.csv",
        "scaling": out_dir / "fig_scaling.png",
        "samples": out_dir / "fig_samples.png",
    }
