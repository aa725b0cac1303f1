"""Study A's counter claims (torch-free): the quantities of ``study_a_claims.csv`` that Nsight Compute measures
(:data:`QUANTITIES`), observed on the rows of :func:`accelbench.experiments.unet3d_ncu.tables.counter_rows`
(:func:`counter_observations`, with the rate-coverage rule of :data:`RATE_COVERAGE_MIN` and the tensor pipe's noise
floor, :func:`tensor_pipe_floor`); they are judged per profiled (system, model) by the Study A check of
:mod:`accelbench.experiments.unet3d.tables_claims` (so :data:`CLAIM_CHECKS` is empty here). Also the claims file's
reader (:func:`read_claims`) and its configuration names (:func:`claim_configuration`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.claims import NotMeasured, Observation
from accelbench.core import files
from accelbench.errors import DataError

# the quantities of study_a_claims.csv measured by Nsight Compute (experiment unet3d_ncu)
QUANTITIES = {
    "sm_cycles_reduction_x",
    "dynamic_instructions_reduction_x",
    "tensor_core_utilization_gain_x",
    "tensor_core_utilization_pct",
    "ipc_change_pct",
    "sm_cycles_ratio",
    "instructions_ratio",
}
# kernel classes that cannot use the tensor pipe: what ncu reads for them is the counter's floor (noise)
NO_TENSOR_CORE_CLASSES = (
    "elementwise",
    "normalization",
    "cast_copy",
    "layout_conversion",
    "reduction",
    "optimizer",
    "memory",
)
# counter quantities that do not depend on timing: a result measured under other load still answers them
TIMING_FREE = {"dynamic_instructions_reduction_x", "instructions_ratio"}
CLAIM_CHECKS: dict = {}  # judged by tables_claims' check (per profiled system and model), from counter_observations
_CONF = {"tf32+channels_last_3d": "tf32_channels_last_3d"}


def read_claims(path: str | Path) -> pd.DataFrame:
    """The published claims CSV (``#`` lines are its source notes)."""
    return files.read_frame(path, "claims file", error=DataError, comment="#", dtype=str, keep_default_na=False)


def claim_configuration(selector: str) -> str:
    """Our configuration name of a configuration named in study_a_claims.csv (``tf32+channels_last_3d``)."""
    return _CONF.get(selector, selector)


def _row(df: pd.DataFrame, conf: str):
    r = df[df["configuration"] == conf]
    return r.iloc[0] if len(r) else None


def ok_row(df: pd.DataFrame, conf: str, what: str):
    """The row of configuration ``conf`` (in rows of experiment ``what``) that ran; NotMeasured says why not."""
    r = _row(df, conf)
    if r is None:
        raise NotMeasured(f"{what}: configuration {conf} not run (config {what}.configurations)")
    if r["status"] != "ok":
        raise NotMeasured(f"{conf}: {r['status']} ({r['reason']})")
    return r


# A rate (IPC, tensor-pipe utilisation) describes the kernels it was measured over: a claim comparing two
# configurations' rates is judged only when each covers at least this share of the step's device time (the ncu
# coverage target).
RATE_COVERAGE_MIN = 0.8


def rate_coverage(row: pd.Series, rate: str) -> tuple[float | None, str]:
    """(share of the step's device time a rate column of a study_a_ncu.counter_rows row was measured over, basis):
    the coverage pass's share (``coverage_time_share``: 1.0 over every kernel; less where a bounded pass failed) when
    it measured the rate (``rates_over_every_kernel``), else ``rates_time_share``
    (the detail pass on the top kernels), else ``device_time_covered`` (no coverage pass: the profiled kernels);
    (None, "unknown") when the row says nothing."""
    every = [c.strip() for c in str(row.get("rates_over_every_kernel") or "").split(",")]
    if rate in every:  # the coverage pass(es): as much of the step as they covered (bounded passes may miss one)
        cov = row.get("coverage_time_share")
        share = float(cov) if cov is not None and pd.notna(cov) else 1.0
        return share, "every kernel" if share >= 1.0 - 1e-9 else "coverage passes"
    for col, basis in (("rates_time_share", "detail pass"), ("device_time_covered", "profiled kernels")):
        v = row.get(col)
        if v is not None and pd.notna(v):
            return float(v), basis
    return None, "unknown"


def _check_rate_coverage(rate: str, rows: dict, measured: str) -> None:
    """Raise NotMeasured (with ``measured`` kept) unless the ``rate`` of every row (by configuration) covers at least
    RATE_COVERAGE_MIN of its step's device time."""
    short = []
    for conf, row in rows.items():
        share, basis = rate_coverage(row, rate)
        if share is None:
            short.append(f"{conf}: the share of the step's device time behind its IPC/tensor-pipe rates is unknown")
        elif share < RATE_COVERAGE_MIN:
            short.append(
                f"{conf}: IPC/tensor-pipe rates cover {share:.0%} of the step's device time ({basis}), "
                f"below {RATE_COVERAGE_MIN:.0%}"
            )
    if short:
        raise NotMeasured("; ".join(short), measured)


def counter_observations(claim: pd.Series, ncu: pd.DataFrame, res: dict) -> list[Observation]:
    """Observations of one counter claim (any quantity of Study A but its timing and profile ones) on one (system,
    model): ``ncu`` its rows of :func:`counter_rows`, ``res`` the result dicts by (experiment, configuration)."""
    q, conf = claim["quantity"], claim_configuration(claim["selector"])
    used = lambda *cs: [res[k] for k in cs if k in res]  # noqa: E731
    if ncu.empty:
        raise NotMeasured("no unet3d_ncu results (experiment unet3d_ncu not run)")
    r = ok_row(ncu, conf, "unet3d_ncu")
    b = ok_row(ncu, "baseline", "unet3d_ncu")
    pair = used(("unet3d_ncu", conf), ("unet3d_ncu", "baseline"))
    col, invert = {
        "sm_cycles_reduction_x": ("sm_cycles_ratio", True),
        "sm_cycles_ratio": ("sm_cycles_ratio", False),
        "dynamic_instructions_reduction_x": ("instructions_ratio", True),
        "instructions_ratio": ("instructions_ratio", False),
        "ipc_change_pct": ("ipc_change_pct", False),
    }.get(q, (None, False))
    if q in ("tensor_core_utilization_gain_x", "tensor_core_utilization_pct"):
        if not (pd.notna(r.get("tensor_pipe_pct")) and pd.notna(b.get("tensor_pipe_pct")) and b["tensor_pipe_pct"] > 0):
            raise NotMeasured("tensor-pipe utilisation not read by ncu on this GPU")
        v = r["tensor_pipe_pct"] / b["tensor_pipe_pct"]
        floor = tensor_pipe_floor(res.get(("unet3d_ncu", "baseline")))
        at = f"; floor {floor:.2f}% (the most ncu reads on kernels that cannot use the tensor pipe)" if floor else ""
        text = f"{conf}: tensor pipe {b['tensor_pipe_pct']:.2f}% -> {r['tensor_pipe_pct']:.2f}% ({v:.2f}x){at}"
        _check_rate_coverage("tensor_pipe_pct", {"baseline": b, conf: r}, text)
        if q == "tensor_core_utilization_pct":  # the absolute reading: the configuration's own utilisation
            return [Observation(float(r["tensor_pipe_pct"]), text, pair)]
        low = (
            (f"the baseline's tensor pipe {b['tensor_pipe_pct']:.2f}% is at or under the counter's floor {floor:.2f}%")
            if floor and b["tensor_pipe_pct"] <= floor
            else ""
        )
        return [Observation(v, text, pair, floor=low)]
    if col is None:
        raise DataError(f"claim {claim['claim_id']}: unknown quantity {q!r}")
    v = r.get(col)
    if v is None or pd.isna(v):
        raise NotMeasured(f"{col} not available from the ncu results (see counters.csv)")
    v = 1 / v if invert else float(v)
    text = f"{conf}: {q.replace('_', ' ')} {v:.3g}"
    if q == "ipc_change_pct":
        _check_rate_coverage("ipc", {"baseline": b, conf: r}, text)
    return [Observation(v, text, pair)]


def tensor_pipe_floor(result: dict | None) -> float | None:
    """The tensor-pipe utilisation (%) ncu reads on kernels that cannot use the tensor pipe (the highest over the
    classes of :data:`NO_TENSOR_CORE_CLASSES` in ``measurements.by_class``): the counter's noise floor for one
    result; None when the result has no per-class reading."""
    by_class = (((result or {}).get("measurements") or {}).get("by_class")) or {}
    values = [
        float(c["tensor_pipe_pct"])
        for k, c in by_class.items()
        if k in NO_TENSOR_CORE_CLASSES and isinstance(c, dict) and c.get("tensor_pipe_pct") is not None
    ]
    return max(values) if values else None
