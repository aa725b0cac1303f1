"""Study A aggregation: the profiling table, three figures, and published claims beside measured values.

Inputs are ``unet3d_profile`` result files from any number of systems (and ``unet3d_ncu`` results, which only the
counter claims of ``claims_vs_measured`` read: its verdicts are those of the claims table, same code).
Hardware labels in tables and figures come from each result's provenance. Rows that did not run carry an explicit
``OOM`` or ``unsupported`` cell. Published claims come from ``study_a_claims.csv`` (data with its source).

Claims: the check of every Study A claim for the claims table (:data:`CLAIM_CHECKS`, both experiments: a claim is
judged per profiled (system, model), its counter quantities observed by
:func:`accelbench.experiments.unet3d.tables_ncu.counter_observations`), and the layout of ``study_a_claims.csv``
(:func:`claims_layout`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from accelbench.aggregate import claims as cl
from accelbench.aggregate import scope
from accelbench.aggregate.claims import NotMeasured, Observation, not_run, verdict_row
from accelbench.aggregate.common import joined_labels, load_results, noise_cell, noise_why, status_cell, write_table
from accelbench.aggregate.figures import FONT, origin_of, published, save_figure, series_label, wrap
from accelbench.core.registry import EXPERIMENTS
from accelbench.experiments.unet3d import tables_ncu as study_a_ncu
from accelbench.experiments.unet3d.configs import AUTOTUNED, VARIANTS
from accelbench.experiments.unet3d.tables_ncu import (  # noqa: F401
    KEY,
    NETWORK_LABEL,
    claim_configuration,
    counter_observations,
    key_of,
    ok_row,
    read_claims,
)
from accelbench.measure.timing import current_classes

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


def result_rows(results: list[dict]) -> pd.DataFrame:
    """One row per (system, model, configuration) with the Study A columns; speedups vs. that
    system's baseline. Times in ms, memory in GiB, shares as fractions of device time.

    Kernel classes (``share_*``, ``layout_conversion_kernels``, ``cast_copy_kernels``, ``tensor_core_share``) are those
    of the current classifier (:func:`accelbench.measure.timing.current_classes`): re-derived from the ``kernels.csv`` beside
    the result when it is there, else from the result's top-kernel table (the rest as recorded); ``kernel_classes``
    says which. The result files are not changed."""
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
            "micro_batches": m.get("micro_batches", 1),
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
        "hardware",
        "model",
        "network",
        "volume",
        "configuration",
        "series",
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


# --------------------------------------------------------------------------- the claims table
QUALITY_PROXY = (
    "numerics proxy: the predicted noise of one untrained network compared with the baseline "
    "configuration's (the result names no method); synthesis quality needs a trained network's samples"
)
# quantities that do not depend on timing (a result measured under other load still answers them)
TIMING_FREE = {"synthesis_quality"} | study_a_ncu.TIMING_FREE


def claims_layout(df: pd.DataFrame) -> pd.DataFrame | None:
    """``study_a_claims.csv`` (``metric``, ``configuration``, ``value``, ``gpu``, ``source``, ``note``) in the claims
    table's shape: quantity, selector (the configuration), experiment (``unet3d_ncu`` for the counter quantities),
    claim and published texts. None for a file in another layout."""
    if "metric" not in df or "quantity" in df:
        return None
    conf = df["configuration"]
    published = [
        f'"{q}" ({g.upper()}, {s})' if q else f"{v} ({g.upper()}, {s})"
        for q, v, g, s in zip(df.get("quote", [""] * len(df)), df["value"], df["gpu"], df["source"])
    ]
    return df.assign(
        hardware=["v100/a100/h100" if g.strip().lower() == "all" else g for g in df["gpu"]],
        quantity=df["metric"],
        selector=conf,
        experiment=["unet3d_ncu" if m in study_a_ncu.QUANTITIES else "unet3d_profile" for m in df["metric"]],
        claim=[
            f"{c}: {m.replace('_', ' ')} {v}" + (f" ({n})" if n else "")
            for c, m, v, n in zip(conf, df["metric"], df["value"], df["note"])
        ],
        published=published,
    )


def _claim_key(r: dict) -> tuple:
    """Identity of a unet3d_profile or unet3d_ncu result inside its (system, model) group."""
    return r["experiment"], r["config"]["configuration"]


def observations(claim: pd.Series, prof: pd.DataFrame, ncu: pd.DataFrame, res: dict) -> list[Observation]:
    """Observations of one Study A claim on one (system, model): ``prof`` rows of :func:`result_rows`, ``ncu`` rows
    of study_a_ncu.counter_rows, ``res`` the result dicts by (experiment, configuration). The profile and timing
    quantities are observed here, every other one from the counters (:func:`study_a_ncu.counter_observations`)."""
    q, conf = claim["quantity"], claim_configuration(claim["selector"])
    used = lambda *cs: [res[k] for k in cs if k in res]  # noqa: E731
    if q == "kernel_time_breakdown":
        b = ok_row(prof, "baseline", "unet3d_profile")
        share = b["share_convolution"] + b["share_gemm"]
        top = max(CLASSES, key=lambda c: b[f"share_{c}"])
        return [
            Observation(
                share,
                f"convolution + GEMM {share:.0%} of device time (largest class: {top})",
                used(("unet3d_profile", "baseline")),
            )
        ]
    if q == "synthesis_quality":
        ok = prof[prof["status"] == "ok"]
        if ok.empty:
            raise NotMeasured("no unet3d_profile configuration ran")

        def method(conf):  # each result names how its quality was measured (a proxy)
            r = res.get(("unet3d_profile", conf))
            q = ((r or {}).get("measurements") or {}).get("quality") or {}
            how = q.get("method")
            return f"numerics proxy: {how}" if how and "sample" not in str(how).lower() else how or QUALITY_PROXY

        return [
            Observation(
                bool(r["quality_holds"]),
                f"{r['configuration']}: rel. L2 {r['quality_rel_l2_noise']:.2g}",
                used(("unet3d_profile", r["configuration"])),
                note=method(r["configuration"]),
                key=r["configuration"],
            )
            for _, r in ok.iterrows()
        ]
    if q in ("speedup_x", "throughput_gain"):
        r = ok_row(prof, conf, "unet3d_profile")
        ok_row(prof, "baseline", "unet3d_profile")
        return [
            Observation(
                float(r["speedup_vs_baseline"]),
                f"{conf}: {r['speedup_vs_baseline']:.2f}x training step",
                used(("unet3d_profile", conf), ("unet3d_profile", "baseline")),
            )
        ]
    return counter_observations(claim, ncu, res)


def _network_note(network: str) -> str:
    """What a claim row says about the network: nothing for Med-DDPM's own, the stand-in named."""
    return "" if network == "med_ddpm" else f", {NETWORK_LABEL.get(network, network)}"


def claim_verdicts(
    claim: pd.Series, prof: pd.DataFrame, ncu: pd.DataFrame, results: list[dict]
) -> list[tuple[tuple, dict]]:
    """(:data:`KEY` tuple, claims-table row) of one Study A claim (in the claims table's shape) per group of
    ``prof`` (:func:`result_rows`); ``ncu``: study_a_ncu.counter_rows; ``results``: the unet3d_profile and unet3d_ncu
    results. Used by the claims table and by :func:`claims_table` (claims_vs_measured), so both tables say the same."""
    out = []
    for key, g in prof.groupby(KEY) if not prof.empty else []:
        system, model = key[0], key[-1]
        res = {_claim_key(r): r for r in results if tuple(key_of(r).values()) == key}
        n = ncu[(ncu[KEY] == pd.Series(key, index=KEY)).all(axis=1)] if not ncu.empty else ncu
        row = verdict_row(
            claim,
            system,
            g["hardware"].iloc[0],
            lambda c=claim, g=g, n=n, res=res: observations(c, g, n, res),
            timing_free=TIMING_FREE,
        )
        row["claim"] = f"{claim['claim']} [{model}{_network_note(key[2])}]"
        out.append((key, row))
    return out


def _claim_rows(claim: pd.Series, inputs: cl.ClaimInputs) -> list[dict]:
    """The claims-table rows of one Study A claim (of unet3d_profile, or of unet3d_ncu: judged per profiled system and
    model all the same); one ``not_run`` row when neither experiment it needs has a result."""
    profiles, counters = inputs.of("unet3d_profile"), inputs.of("unet3d_ncu")
    if not (profiles or (claim["experiment"] == "unet3d_ncu" and counters)):
        return [not_run(claim, claim["experiment"])]
    prof, ncu = inputs.rows(result_rows, "unet3d_profile"), inputs.rows(study_a_ncu.counter_rows, "unet3d_ncu")
    return [row for _, row in claim_verdicts(claim, prof, ncu, profiles + counters)]


CLAIM_CHECKS = {e.name: _claim_rows for e in EXPERIMENTS.values() if e.study == "A"}  # every Study A experiment


# --------------------------------------------------------------------------- claims beside measured values
NOT_RELIABLE = "not measured reliably"


def _noisy(row: pd.Series) -> bool:
    """A result flagged ``noisy`` (measurements.noise.noisy): its timings are not evidence for or against a claim."""
    return row.get("noise") == "noisy"


def same_gpu(claim_gpu: str, hardware: str) -> bool:
    """Whether ``hardware`` (a provenance label) is in the hardware class a claim was made on (``all`` = Study A's
    V100/A100/H100), by the one scope policy (:func:`accelbench.aggregate.scope.in_scope`: an H200 is H100 class)."""
    return scope.in_scope("v100/a100/h100" if claim_gpu.strip().lower() == "all" else claim_gpu, hardware)[0]


def _measured_for_claim(claim: pd.Series, sysdf: pd.DataFrame) -> tuple[str, str]:
    """(measured value, how it was measured) for one published claim on one system's rows."""

    def row(conf):
        r = sysdf[sysdf["configuration"] == conf]
        return r.iloc[0] if len(r) else None

    conf = claim_configuration(claim["configuration"])
    metric = claim["metric"]
    if metric == "kernel_time_breakdown":
        b = row("baseline")
        if b is None or b["status"] != "ok":
            return "not measured", "baseline missing"
        if _noisy(b):
            return NOT_RELIABLE, f"baseline noisy: {b.get('noise_why')}"
        shares = {c: b[f"share_{c}"] for c in CLASSES}
        top = max(shares, key=shares.get)
        conv = "" if top == "convolution" else f"; convolution {shares['convolution']:.0%}"
        return f"largest class: {top} ({shares[top]:.0%}){conv}", "measured (torch.profiler)"
    if metric == "synthesis_quality":
        ok = sysdf[sysdf["status"] == "ok"]
        if ok.empty:
            return "not measured", "no configuration ran"
        return (
            f"holds for {int(ok['quality_holds'].sum())}/{len(ok)} configurations "
            f"(max rel. L2 of predicted noise {ok['quality_rel_l2_noise'].max():.2g})",
            "proxy: an untrained network's predicted noise compared across configurations (vs. baseline); "
            "synthesis quality itself needs a trained checkpoint and sample metrics (e.g. FID/MS-SSIM)",
        )
    r = row(conf)
    if r is None:
        return "not measured", f"configuration {conf} not run"
    if r["status"] != "ok":
        return {"oom": "OOM", "unsupported": "unsupported"}[r["status"]], str(r["reason"])
    noisy = [x for x in (r, row("baseline")) if x is not None and _noisy(x)]
    if noisy and metric != "synthesis_quality":
        return NOT_RELIABLE, "noisy: " + "; ".join(f"{x['configuration']}: {x.get('noise_why')}" for x in noisy)
    if metric in ("speedup_x", "throughput_gain"):
        extra = ""
        if "channels_last" in conf:
            # layout conversions as the current classifier counts them (result_rows: same-dtype strided copies too)
            extra = f", {r['layout_conversion_kernels']:.0f} layout-conversion kernels/step"
            if pd.notna(r.get("cast_copy_kernels")):
                extra += f" (+{r['cast_copy_kernels']:.0f} cast/copy kernels, counted apart)"
            extra += f", {r['share_layout_conversion']:.0%} of device time in layout conversion"
        return f"{r['speedup_vs_baseline']:.2f}x{extra}", "measured (training-step time)"
    if metric in ("sm_cycles_ratio", "sm_cycles_reduction_x"):
        ratio = 1 / r["speedup_vs_baseline"]
        val = f"{ratio:.2f}" if metric == "sm_cycles_ratio" else f"{1 / ratio:.2f}x"
        return val, "proxy: training-step time ratio (SM cycles need Nsight Compute)"
    if metric == "tensor_core_utilization_gain_x":
        b = row("baseline")
        if b is None or b["status"] != "ok":
            return "not measured", "baseline missing"
        return (
            f"tensor-core kernel share {b['tensor_core_share']:.0%} -> {r['tensor_core_share']:.0%}",
            "proxy: share of device time in tensor-core kernels (utilisation needs Nsight Compute)",
        )
    return "not measured", "needs Nsight Compute hardware counters"


COUNTER_HOW = "Nsight Compute counters (unet3d_ncu), the value and verdict of claims/claims.csv"


def claims_table(claims: pd.DataFrame, df: pd.DataFrame, results: list[dict] | None = None) -> pd.DataFrame:
    """Each published claim beside what each measured system shows (or why it is not measured), with the verdict and
    reason of the claims table (:func:`claim_verdicts`, same code). ``results``: the loaded unet3d_profile and
    unet3d_ncu results; where a (system, model) has measured unet3d_ncu counters (status ok) its counter claims show
    the counter values of the claims table, not a time-ratio proxy."""
    results = results or []
    ncu = study_a_ncu.counter_rows([r for r in results if r["experiment"] == "unet3d_ncu"])
    judged = {}
    for _, c in cl.claims_frame(claims, "A").iterrows():
        for key, row in claim_verdicts(c, df, ncu, results):
            judged[(c["claim_id"], key)] = row
    rows = []
    for _, claim in claims.iterrows():
        for key, sysdf in df.groupby(KEY) if not df.empty else []:
            system, model = key[0], key[-1]
            tuned = sysdf["configuration"].str.endswith(AUTOTUNED)
            value, how = _measured_for_claim(claim, sysdf[~tuned])
            verdict = judged.get((claim["claim_id"], key), {})
            counters = (
                claim["metric"] in study_a_ncu.QUANTITIES
                and not ncu.empty
                and ((ncu[KEY] == pd.Series(key, index=KEY)).all(axis=1) & (ncu["status"] == "ok")).any()
            )
            if counters:  # the counters measured it: the claims table's value, no proxy beside it
                value, how = verdict.get("measured") or "not measured", COUNTER_HOW
            row = {
                "claim_id": claim["claim_id"],
                "source": claim["source"],
                "claim_gpu": claim["gpu"],
                "configuration": claim["configuration"],
                "metric": claim["metric"],
                "published": claim["value"],
                "measured_on": sysdf["hardware"].iloc[0],
                "system": system,
                "model": model,
                "network": key[2],
                "measured": value,
                "how": how + "; Study A-faithful series (cuDNN autotuning off)",
                "measured_autotuned": None,
                "same_gpu": same_gpu(str(claim["gpu"]), sysdf["hardware"].iloc[0]),
            }
            if tuned.any() and not counters:  # our series beside it, same claim on the _autotuned configurations
                auto = sysdf[tuned].assign(configuration=sysdf.loc[tuned, "configuration"].str.removesuffix(AUTOTUNED))
                row["measured_autotuned"] = _measured_for_claim(claim, auto)[0]
            row["verdict"], row["why"] = verdict.get("verdict"), verdict.get("why")
            rows.append(row)
    return pd.DataFrame(rows)


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
    per (system, model, configuration, network) with the step time, speedup, kernel counts (layout conversions also
    per micro-batch: Med-DDPM's step has 2), the kernel-class shares of device time, and IPC / tensor-pipe utilisation
    where unet3d_ncu measured them. Empty unless both networks were measured on one system and model (two runs)."""
    if df.empty or "network" not in df or df["network"].nunique() < 2:
        return pd.DataFrame(columns=["system", "model", "configuration", "network", "run", *COMPARED])
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
    return d.reindex(columns=["system", "model", "configuration", "network", "run", *COMPARED]).reset_index(drop=True)


# --------------------------------------------------------------------------- figures
def _title(df: pd.DataFrame, what: str) -> str:
    models = ", ".join(f"{m} ({v})" for m, v in df[["model", "volume"]].drop_duplicates().itertuples(index=False))
    return f"Study A, Med-DDPM U-Net {models}:\n{what}"


def _series(g: pd.DataFrame, model: str | None = None) -> str:
    """Legend text of one (hardware, model) group: origin, hardware, scale (volume), model."""
    r = g.iloc[0]
    net = "" if r.get("network", "med_ddpm") == "med_ddpm" else f", {NETWORK_LABEL.get(r['network'], r['network'])}"
    return series_label(
        r.get("origin", "measured here"), r["hardware"], r["scale"], f"{model or r['model']} {r['volume']}{net}"
    )


SOURCE_NAMES = {"digest": "Study A digest", "abstract": "Study A abstract"}
# one colour per kernel class (tab20 pairs, "other" grey): never two classes alike
CLASS_COLOURS = {
    "convolution": "#1f77b4",
    "gemm": "#aec7e8",
    "attention": "#2ca02c",
    "normalization": "#d62728",
    "layout_conversion": "#9467bd",
    "cast_copy": "#8c564b",
    "elementwise": "#e377c2",
    "optimizer": "#bcbd22",
    "reduction": "#17becf",
    "memory": "#ff7f0e",
    "other": "#7f7f7f",
}


def published_speedups(claims: pd.DataFrame | None) -> pd.DataFrame:
    """The published speedup ranges of ``study_a_claims.csv`` (metric ``speedup_x``): configuration (ours), low,
    high, gpu, source."""
    if claims is None or claims.empty:
        return pd.DataFrame(columns=["configuration", "low", "high", "gpu", "source"])
    c = claims[claims["metric"] == "speedup_x"]
    return pd.DataFrame(
        {
            "configuration": [claim_configuration(x) for x in c["configuration"]],
            "low": pd.to_numeric(c["low"]),
            "high": pd.to_numeric(c["high"]),
            "gpu": c["gpu"].str.upper(),
            "source": c["source"],
        }
    )


def fig_speedup(df: pd.DataFrame, path: str | Path, claims: pd.DataFrame | None = None) -> list[str]:
    """Horizontal grouped bars: speedup over baseline per configuration (rows), one colour per (hardware, model)
    series; whiskers span the speedups implied by the p90 and p10 step times; results flagged noisy are hatched
    (a legend entry says so, nothing is written over a bar); published speedup ranges (``claims``, metric
    ``speedup_x``) as black range markers on their configuration's row. Returns the figure's problems."""
    from matplotlib.patches import Patch

    confs = [c for c in ORDER if c in set(df["configuration"])]
    groups = list(df.groupby([*KEY, "hardware"]))  # two systems may share a hardware label
    pub = published_speedups(claims)
    pub = pub[pub["configuration"].isin(confs)]
    height = 0.8 / max(1, len(groups))
    fig, ax = plt.subplots(figsize=(10, 2.4 + 0.32 * len(confs) * max(1, len(groups)) ** 0.5))
    y0 = np.arange(len(confs))[::-1]  # first configuration on top
    row = dict(zip(confs, y0))
    any_noisy = False
    missing: dict[str, list[str]] = {}
    for gi, (gkey, g) in enumerate(groups):
        hw = gkey[-1]
        label = _series(g)
        g = g.set_index("configuration")
        for c in confs:
            if c not in g.index:
                continue
            r = g.loc[c]
            y = row[c] - gi * height
            if r["status"] != "ok":  # said in the row's label, never written over a bar
                missing.setdefault(c, []).append(f"{_short(hw)}: {status_cell({'status': r['status']})}")
                continue
            s = r["speedup_vs_baseline"]
            base = "baseline" + AUTOTUNED if c.endswith(AUTOTUNED) else "baseline"  # each series' own baseline
            lo = s - g.loc[base, "train_step_ms"] / r["train_step_p90_ms"] if base in g.index else 0
            hi = g.loc[base, "train_step_ms"] / r["train_step_p10_ms"] - s if base in g.index else 0
            noisy = r.get("noise") == "noisy"  # measurements.noise: other load on the host or a wide spread
            any_noisy |= noisy
            ax.barh(
                y,
                s,
                height,
                color=f"C{gi}",
                xerr=[[max(lo, 0)], [max(hi, 0)]],
                capsize=2,
                label=label,
                hatch="xx" if noisy else None,
                edgecolor="white" if noisy else None,
            )
            label = None
    for k, (_, p) in enumerate(pub.iterrows()):  # a shaded band behind the configuration's bars
        y = row[p["configuration"]] - height * (len(groups) - 1) / 2
        ax.fill_betweenx(
            [y - 0.45, y + 0.45],
            p["low"],
            p["high"],
            color=("0.55", "#e6a000", "#8c564b")[k % 3],
            alpha=0.5,
            zorder=3,
            lw=0.8,
            edgecolor="k",
            hatch="//",
            label=series_label(
                published(SOURCE_NAMES.get(p["source"], p["source"])), p["gpu"], "paper", "speedup range"
            ),
        )
    ax.axvline(1.0, color="k", lw=0.8, ls="--")
    ax.set_yticks(
        y0 - height * (len(groups) - 1) / 2,
        [f"{c} ({'; '.join(missing[c])})" if c in missing else c for c in confs],
        fontsize=FONT["tick"],
    )
    ax.set_ylabel("configuration")
    ax.set_xlabel("training-step speedup over baseline (x)")
    ax.set_title(
        wrap(
            _title(
                df,
                "training-step speedup over each system's baseline (bar: median step time; "
                "whiskers: speedup at the p90 and p10 step times)",
            ),
            fig,
            FONT["label"],
            0.6,
        ),
        fontsize=FONT["label"],
        loc="left",
    )
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    if any_noisy:
        uniq["noisy (hatched): other load on the host or a wide spread; not reliable"] = Patch(
            facecolor="0.7", hatch="xx", edgecolor="white"
        )
    if uniq:
        fig.legend(
            list(uniq.values()),
            list(uniq.keys()),
            fontsize=FONT["legend"],
            loc="lower left",
            bbox_to_anchor=(0.01, 0.01),
        )
    fig.tight_layout(rect=(0, min(0.5, (0.25 * len(uniq) + 0.2) / fig.get_figheight()), 1, 1))
    return save_figure(fig, path)


def _short(hardware: str) -> str:
    """``NVIDIA H200`` of ``reference run (H200, 2026-11-30): NVIDIA H200 (1x, 139.8 GiB)``, ``CPU: AMD EPYC`` of
    ``CPU: AMD EPYC (2 threads)``."""
    if hardware.startswith("reference run (") and "): " in hardware:
        hardware = hardware.split("): ", 1)[1]
    return hardware.split(" (")[0][:22]


def _bar_labels(rows: pd.DataFrame) -> list[str]:
    """``configuration`` and the short hardware name, one per bar."""
    many = rows["hardware"].nunique() > 1
    return [f"{c} ({_short(h)})" if many else c for c, h in zip(rows["configuration"], rows["hardware"])]


def _series_note(ok: pd.DataFrame) -> str:
    """Note naming the series of the bars (origin, hardware, scale)."""
    return "\n".join(_series(g) for _, g in ok.groupby(["hardware", "model"])) if not ok.empty else "nothing measured"


def _hbar_figure(ok: pd.DataFrame) -> tuple:
    """A figure of one horizontal bar per (hardware, configuration), first on top, 10 in wide."""
    fig, ax = plt.subplots(figsize=(10, 2.6 + 0.28 * max(1, len(ok))))
    return fig, ax, np.arange(len(ok))[::-1]


def _hbar_finish(fig, ax, ok: pd.DataFrame, y, df: pd.DataFrame, what: str) -> None:
    ax.set_yticks(y, _bar_labels(ok), fontsize=FONT["tick"])
    ax.set_ylabel("configuration" + ("" if ok["hardware"].nunique() <= 1 else " (hardware)"))
    fig.suptitle(
        wrap(_title(df, what) + "\n" + _series_note(ok), fig, FONT["label"]), fontsize=FONT["label"], x=0.01, ha="left"
    )
    ax.legend(fontsize=FONT["legend"], bbox_to_anchor=(1.01, 1), loc="upper left", title_fontsize=FONT["legend"])
    fig.tight_layout()


def fig_breakdown(df: pd.DataFrame, path: str | Path) -> list[str]:
    """Stacked horizontal bars: share of device time per kernel class (one colour each, :data:`CLASS_COLOURS`),
    one bar per (hardware, configuration)."""
    ok = df[df["status"] == "ok"]
    fig, ax, y = _hbar_figure(ok)
    left = np.zeros(len(ok))
    for cls in CLASSES:
        vals = ok[f"share_{cls}"].to_numpy(dtype=float)
        ax.barh(y, vals, left=left, color=CLASS_COLOURS[cls], label=cls.replace("_", " "))
        left += vals
    ax.set_xlabel("share of device time (fraction)")
    ax.set_xlim(0, 1)
    _hbar_finish(fig, ax, ok, y, df, "kernel-time breakdown of one training step")
    ax.get_legend().set_title("kernel class")
    return save_figure(fig, path)


def fig_counts(df: pd.DataFrame, path: str | Path) -> list[str]:
    """Horizontal bars: kernel launches per training step, with the layout-conversion and cast/copy parts hatched."""
    ok = df[df["status"] == "ok"]
    fig, ax, y = _hbar_figure(ok)
    ax.barh(y, ok["kernel_count"], color="C0", label="all kernels")
    ax.barh(y, ok["layout_conversion_kernels"], color="C3", hatch="//", label="layout-conversion kernels")
    if "cast_copy_kernels" in ok:
        ax.barh(
            y,
            ok["cast_copy_kernels"].fillna(0),
            left=ok["layout_conversion_kernels"],
            color="C1",
            hatch="..",
            label="cast / copy kernels",
        )
    ax.set_xlabel("kernels per training step (count)")
    _hbar_finish(fig, ax, ok, y, df, "kernel launches per training step")
    return save_figure(fig, path)


def aggregate(result_paths: list[str | Path], claims_path: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Write table.{csv,md,tex}, claims_vs_measured.{csv,md,tex} and the three figures to ``out_dir``.
    ``result_paths``: unet3d_profile results, and any unet3d_ncu results (used only by the counter claims).

    Raises:
        ResultError: a result file is missing or corrupt.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
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
        f"Study A (arXiv 2606.19365) reproduced on {hw} ({sw}). Times: median of timed steps (ms); "
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
        "upsampling, checkpointed attention with Conv1d projections, its tensor layout, 2 micro-batches per "
        "step) beside the MONAI stand-in (nearest upsampling, Linear projections, no checkpointing, 1 "
        "micro-batch), same system and model: step time (ms), speedup over that network's baseline, kernels "
        "per step (layout conversions also per micro-batch), shares of device time per kernel class "
        "(torch.profiler), IPC and tensor-pipe utilisation over every kernel (Nsight Compute) where measured.",
        empty="Only one network measured: the comparison needs Med-DDPM's network and the MONAI stand-in on one "
        "system (e.g. a fresh run beside the committed reference run of the stand-in).",
    )
    fig_speedup(df, out_dir / "fig_speedup.png", read_claims(claims_path))
    fig_breakdown(df, out_dir / "fig_kernel_breakdown.png")
    fig_counts(df, out_dir / "fig_kernel_counts.png")
    return {p.stem: p for p in out_dir.iterdir()}
