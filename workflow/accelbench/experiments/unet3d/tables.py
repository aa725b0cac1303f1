"""Study A aggregation (the registry's ``tables`` module of both Study A experiments): the profiling table, three
figures, Med-DDPM's network beside the stand-in, and published claims beside measured values (:func:`aggregate`).

Inputs are ``unet3d_profile`` result files from any number of systems (and ``unet3d_ncu`` results, which only the
counter claims of ``claims_vs_measured`` read: its verdicts are those of the claims table, same code).
Hardware labels in tables and figures come from each result's provenance. Rows that did not run carry an explicit
``OOM`` or ``unsupported`` cell. Published claims come from ``study_a_claims.csv`` (data with its source).

The parts, each torch-free: the rows (:mod:`.tables_rows`), the claims (:mod:`.tables_claims`: :data:`CLAIM_CHECKS`
for the claims table, :func:`claims_layout` of ``study_a_claims.csv``), the figures (:mod:`.tables_figures`); the
counters' own table is :mod:`accelbench.experiments.unet3d_ncu.tables`. Their public names are importable from here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.common import joined_labels, load_results, write_table
from accelbench.core import tree
from accelbench.experiments.unet3d.configs import AUTOTUNED, VARIANTS  # noqa: F401  (re-exported)
from accelbench.experiments.unet3d.tables_claims import (  # noqa: F401  (re-exported: the claims engine reads them)
    CLAIM_CHECKS,
    NOT_RELIABLE,
    QUALITY_PROXY,
    TIMING_FREE,
    _measured_for_claim,
    claim_verdicts,
    claims_layout,
    claims_table,
    observations,
    same_gpu,
)
from accelbench.experiments.unet3d.tables_figures import (  # noqa: F401
    CLASS_COLOURS,
    fig_breakdown,
    fig_counts,
    fig_speedup,
    published_speedups,
)
from accelbench.experiments.unet3d.tables_rows import (  # noqa: F401
    CLASSES,
    COMPARED,
    ORDER,
    STUDY_A_FOUR,
    micro_batches_of,
    network_comparison,
    result_rows,
    table,
)
from accelbench.experiments.unet3d_ncu import tables as study_a_ncu
from accelbench.experiments.unet3d_ncu.tables import (  # noqa: F401
    KEY,
    NETWORK_LABEL,
    claim_configuration,
    counter_observations,
    key_of,
    ok_row,
    read_claims,
)


def aggregate(result_paths: list[str | Path], claims_path: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Write table.{csv,md,tex}, claims_vs_measured.{csv,md,tex} and the three figures to ``out_dir``.
    ``result_paths``: unet3d_profile results, and any unet3d_ncu results (used only by the counter claims).

    Raises:
        ResultError: a result file is missing or corrupt.
    """
    out_dir = tree.make_output_dir(out_dir)  # below <results>, following no link
    loaded = load_results(result_paths)
    results = [r for r in loaded if r.get("experiment") != "unet3d_ncu"]  # the counters feed the claims only
    df = result_rows(results)
    hw = joined_labels(df)
    sw = joined_labels(df, "software", "")
    steps = sorted({int(s) for s in df.get("projection_steps", pd.Series(dtype=float)).dropna()})
    steps_text = " or ".join(map(str, steps)) or "the configured timesteps"
    write_table(
        table(df),
        out_dir / "table",
        f"Study A (arXiv 2606.19365) reproduced on {hw} ({sw}). micro_batches: forward/backward passes per Adam "
        f"step, all inside one training step (config unet3d_profile.micro_batches, as the result ran it). Times: "
        f"median of timed steps (ms); "
        f"projected_sample_s = median reverse step x {steps_text} (the configured timesteps; a projection). "
        f"Quality: an untrained network's predicted noise vs. the baseline's (rel. L2, PSNR, SSIM; a proxy "
        f"for synthesis quality). noise: 'noisy' where other processes loaded the host or the timing spread "
        f"p90/median passed the config's threshold (measurements.noise). Kernel classes: the current "
        f"classifier's (same-dtype strided copies count as layout conversion), re-derived from each result's "
        f"kernels.csv, else from its top kernels; kernel_classes says which.",
    )
    claims = claims_table(read_claims(claims_path), df, loaded)
    write_table(
        claims,
        out_dir / "claims_vs_measured",
        f"Study A's published claims ({Path(claims_path).name}) beside values measured on {hw}. A result "
        f"flagged noisy (other load on the host, or a wide timing spread) reads '{NOT_RELIABLE}'. verdict, why: "
        f"as in claims/claims.csv; where unet3d_ncu results exist, the counter claims show the counter values "
        f"judged there.",
        empty="No Study A result to compare with the claims.",
    )
    ncu = study_a_ncu.counter_rows([r for r in loaded if r["experiment"] == "unet3d_ncu"])
    write_table(
        network_comparison(df, ncu),
        out_dir / "network_comparison",
        "Study A's four configurations on Med-DDPM's own network (written from mobaidoctor/med-ddpm: trilinear "
        "upsampling, checkpointed attention with Conv1d projections, its tensor layout) beside the MONAI "
        "stand-in (nearest upsampling, Linear projections, no checkpointing), same system and model: the "
        "micro-batches per Adam step each ran (micro_batches), step time (ms), speedup over that network's "
        "baseline, kernels per step (layout conversions also per micro-batch), shares of device time per kernel "
        "class "
        "(torch.profiler), IPC and tensor-pipe utilisation over every kernel (Nsight Compute) where measured.",
        empty="Only one network measured: the comparison needs Med-DDPM's network and the MONAI stand-in on one "
        "system (e.g. a fresh run beside the committed reference run of the stand-in).",
    )
    fig_speedup(df, out_dir / "fig_speedup.png", read_claims(claims_path))
    fig_breakdown(df, out_dir / "fig_kernel_breakdown.png")
    fig_counts(df, out_dir / "fig_kernel_counts.png")
    return {p.stem: p for p in out_dir.iterdir()}
