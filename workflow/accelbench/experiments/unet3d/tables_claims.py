"""Study A's claims (torch-free): the check of every Study A claim for the claims table (:data:`CLAIM_CHECKS`, both
experiments: a claim is judged per profiled (system, model), its counter quantities observed by
:func:`accelbench.experiments.unet3d_ncu.tables.counter_observations`), the layout of ``study_a_claims.csv``
(:func:`claims_layout`), and ``claims_vs_measured`` (:func:`claims_table`: each published claim beside what each
system measured, with the claims table's verdict).
"""

from __future__ import annotations

import pandas as pd

from accelbench.aggregate import claims as cl
from accelbench.aggregate import scope
from accelbench.aggregate.claims import NotMeasured, Observation, not_run, verdict_row
from accelbench.aggregate.claims_table import claims_frame
from accelbench.core.registry import EXPERIMENTS
from accelbench.experiments.unet3d.configs import AUTOTUNED
from accelbench.experiments.unet3d.tables_rows import CLASSES, result_rows
from accelbench.experiments.unet3d_ncu import tables as study_a_ncu
from accelbench.experiments.unet3d_ncu.tables import KEY, NETWORK_LABEL, key_of
from accelbench.experiments.unet3d_ncu.tables_claims import claim_configuration, counter_observations, ok_row

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
    if q == "best_configuration":  # the selector's configuration is the fastest of the four
        four = ("baseline", "tf32", "channels_last_3d", "tf32_channels_last_3d")
        rows = {c: ok_row(prof, c, "unet3d_profile") for c in four}
        speed = {c: float(r["speedup_vs_baseline"]) for c, r in rows.items()}
        best = max(speed, key=speed.get)
        return [
            Observation(
                best == conf,
                "; ".join(f"{c} {v:.2f}x" for c, v in speed.items()) + f" (fastest: {best})",
                used(*(("unet3d_profile", c) for c in four)),
            )
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


def same_gpu(claim_gpu: str, hardware: str, quantity: str | None = None) -> bool:
    """Whether ``hardware`` (a provenance label) is in the hardware class a claim was made on (``all`` = Study A's
    V100/A100/H100), by the one scope policy (:func:`accelbench.aggregate.scope.in_scope`: an H200 is H100 class for
    the quantities its evidence allows)."""
    gpus = "v100/a100/h100" if claim_gpu.strip().lower() == "all" else claim_gpu
    return scope.in_scope(gpus, hardware, quantity)[0]


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
    for _, c in claims_frame(claims, "A").iterrows():
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
                "same_gpu": same_gpu(str(claim["gpu"]), sysdf["hardware"].iloc[0], claim.get("metric")),
            }
            if tuned.any() and not counters:  # our series beside it, same claim on the _autotuned configurations
                auto = sysdf[tuned].assign(configuration=sysdf.loc[tuned, "configuration"].str.removesuffix(AUTOTUNED))
                row["measured_autotuned"] = _measured_for_claim(claim, auto)[0]
            row["verdict"], row["why"] = verdict.get("verdict"), verdict.get("why")
            rows.append(row)
    return pd.DataFrame(rows)
