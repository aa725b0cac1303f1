"""Study B LoRA claims (:data:`CLAIM_CHECKS`, for the claims table): the flash-attention gain (pairs within their
timing spread left unresolved), the sharding slowdown (its direction only, :data:`DIRECTION_ONLY`) and OOM without
sharding, per system; the claims read the faithful series (:func:`claim_series`)."""

from __future__ import annotations

import pandas as pd

from accelbench.aggregate import scope
from accelbench.aggregate.claims import ClaimInputs, NotMeasured, Observation, class_ratio_row, per_system_rows
from accelbench.errors import DataError
from accelbench.experiments.lora.tables_rows import OLD_SERIES, result_rows

# Claims whose check is the direction only (sharded slower than DDP: x >= 1); the published magnitude is shown, not
# judged.
DIRECTION_ONLY = {"fsdp_slowdown_vs_ddp", "zero3_slowdown_vs_ddp"}
# quantities that do not depend on timing (OOM): still judged on a noisy result
TIMING_FREE = {"oom_without_sharding"}


def _observations(claim: pd.Series, df: pd.DataFrame, res: dict) -> list[Observation]:
    """Observations of one lora_finetune claim on one system: ``df`` its rows of :func:`result_rows`, ``res`` its
    results by (family, attention, strategy, devices).

    Raises:
        NotMeasured: no pair of results the claim compares.
        DataError: an unknown quantity.
    """
    q = claim["quantity"]
    df, prefix = claim_series(df)
    ok = df[df["status"] == "ok"].copy()
    ok["strategy_ddp"] = ok["strategy"].replace({"single": "ddp"})
    if q == "flash_gain_pct":
        return _flash_gain(ok, prefix, res)
    if q in ("fsdp_slowdown_vs_ddp", "zero3_slowdown_vs_ddp"):
        return _sharded_slowdown(q.split("_")[0], df, ok, prefix, res)
    if q == "oom_without_sharding":
        return _oom_without_sharding(df, prefix, res)
    if q == "sharded_epoch_over_single_x":
        return _sharded_epoch_over_single(df, ok, prefix, res)
    raise DataError(f"claim {claim['claim_id']}: unknown quantity {q!r}")


def _used(res: dict, g: pd.DataFrame) -> list:
    """The results of ``res`` behind the rows ``g`` (by family, attention, strategy, devices, series)."""
    return [
        res[k]
        for k in (
            (f, a, s, n, se)
            for f, a, s, n, se in zip(g["family"], g["attention"], g["strategy"], g["devices"], g["series"])
        )
        if k in res
    ]


def _require_run(df: pd.DataFrame, strategy: str) -> None:
    """Nothing where some ``strategy`` run of ``df`` is ok.

    Raises:
        NotMeasured: no run of the strategy, or none ok (with the first one's status and reason).
    """
    mine = df[df["strategy"] == strategy]
    if mine.empty:
        raise NotMeasured(f"no {strategy} result (not in config lora_finetune.runs, or not run yet)")
    r = mine[mine["status"] != "ok"]
    if len(r) == len(mine):
        raise NotMeasured(f"{strategy}: {r['status'].iloc[0]} ({r['reason'].iloc[0]})")


def _flash_gain(ok: pd.DataFrame, prefix: str, res: dict) -> list[Observation]:
    """``flash_gain_pct``: eager over flash step time - 1 (%) per (family, strategy, devices), unresolved where the
    p10-p90 spreads overlap."""
    obs = []
    for (fam, strat, n), g in ok.groupby(["family", "strategy_ddp", "devices"]):
        t = dict(zip(g["attention"], g["step_ms"]))
        spread = dict(zip(g["attention"], zip(g["step_p10_ms"], g["step_p90_ms"])))
        if "eager" in t and "flash" in t:
            v = 100 * (t["eager"] / t["flash"] - 1)
            (e_lo, e_hi), (f_lo, f_hi) = spread["eager"], spread["flash"]
            # spreads that overlap: the difference is inside the measurement spread, evidence neither way
            overlap = not (pd.isna([e_lo, e_hi, f_lo, f_hi]).any() or e_hi < f_lo or f_hi < e_lo)
            label = "single" if n == 1 else strat
            obs.append(
                Observation(
                    v,
                    prefix + f"{fam} {label} n={n}: eager {t['eager']:.0f} ms "
                    f"(p10-p90 {e_lo:.0f}-{e_hi:.0f}), flash {t['flash']:.0f} ms "
                    f"({f_lo:.0f}-{f_hi:.0f}): {v:+.1f}%"
                    + (" (the p10-p90 spreads overlap: unresolved)" if overlap else ""),
                    _used(res, g),
                    unresolved=overlap,
                    key=f"{fam}/{n}",
                )
            )
    if not obs:
        raise NotMeasured("no pair of eager and flash runs at equal model, strategy and devices")
    return obs


def _sharded_slowdown(sharded: str, df: pd.DataFrame, ok: pd.DataFrame, prefix: str, res: dict) -> list[Observation]:
    """``fsdp_slowdown_vs_ddp`` / ``zero3_slowdown_vs_ddp``: the ``sharded`` strategy's step time over DDP's (x) per
    (family, attention, devices); one device counts as DDP."""
    _require_run(df, sharded)
    obs = []
    for (fam, att, n), g in ok.groupby(["family", "attention", "devices"]):
        t = dict(zip(g["strategy_ddp"], g["step_ms"]))
        if sharded in t and "ddp" in t:
            v = t[sharded] / t["ddp"]
            obs.append(
                Observation(
                    v,
                    prefix + f"{fam} {att} n={n}: {sharded} {t[sharded]:.0f} ms / DDP {t['ddp']:.0f} ms = {v:.2f}x",
                    _used(res, g),
                    key=f"{fam}/{n}",
                )
            )
    if not obs:
        raise NotMeasured(f"no {sharded} and DDP runs at equal model, attention and devices")
    return obs


def _oom_without_sharding(df: pd.DataFrame, prefix: str, res: dict) -> list[Observation]:
    """``oom_without_sharding``: per family that ran out of memory unsharded (single/DDP), whether a sharded run
    (FSDP/ZeRO-3) fits."""
    obs = []
    for fam, g in df.groupby("family"):
        unsharded_oom = g[g["strategy"].isin(["single", "ddp"]) & (g["status"] == "oom")]
        if unsharded_oom.empty:
            continue
        sharded = g[g["strategy"].isin(["fsdp", "zero3"])]
        if sharded.empty:
            continue
        fits = sharded[sharded["status"] == "ok"]
        obs.append(
            Observation(
                not fits.empty,
                prefix
                + f"{fam}: OOM with {', '.join(sorted(set(unsharded_oom['strategy'])))}; sharded "
                + (
                    ", ".join(f"{s} n={n} ok" for s, n in zip(fits["strategy"], fits["devices"]))
                    or "runs: " + ", ".join(sorted(set(sharded["status"])))
                ),
                _used(res, g),
                key=fam,
            )
        )
    if not obs:
        raise NotMeasured(
            "no model ran out of memory without sharding here (with sharded runs beside it): "
            "add a model that does not fit one device (e.g. llama33_70b) to lora_finetune.models"
        )
    return obs


def _sharded_epoch_over_single(df: pd.DataFrame, ok: pd.DataFrame, prefix: str, res: dict) -> list[Observation]:
    """``sharded_epoch_over_single_x``: an N-device sharded epoch's time over the single-device epoch's (x), at equal
    family and attention: (step_N / N) / step_1."""
    single = ok[ok["strategy"] == "single"]
    if single.empty:
        raise NotMeasured("no 1-device (single) run: the model must fit one device for this claim")
    obs = []
    for _, s1 in single.iterrows():
        same = ok[
            (ok["family"] == s1["family"])
            & (ok["attention"] == s1["attention"])
            & ok["strategy"].isin(["fsdp", "zero3"])
        ]
        for _, r in same.iterrows():
            # an epoch of N devices runs 1/N of the steps: epoch time ratio = (step_N / N) / step_1
            v = (float(r["step_ms"]) / int(r["devices"])) / float(s1["step_ms"])
            obs.append(
                Observation(
                    v,
                    prefix + f"{s1['family']} {s1['attention']}: {r['strategy']} n={r['devices']} "
                    f"{r['step_ms']:.0f} ms/step / {r['devices']} vs single {s1['step_ms']:.0f} ms = {v:.2f}x "
                    "the single-device epoch",
                    _used(res, pd.DataFrame([s1, r])),
                )
            )
    if not obs:
        _require_run(df, "fsdp")
        raise NotMeasured("no sharded (FSDP/ZeRO-3) run beside a single-device run of the same model")
    return obs


def _claim_key(r: dict) -> tuple:
    """Identity of a result inside its system's group: (family, attention, strategy, devices, series)."""
    c = r["config"]
    return (
        c.get("family", c.get("model_name")),
        c["attention"],
        c["strategy"],
        int(c["devices"]),
        c.get("series", OLD_SERIES),
    )


CLAIM_SERIES = ("faithful", "ours", OLD_SERIES)  # the series a claim reads: the first a system has


def claim_series(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of one system that the claims read: the faithful series (Study B's runtime, what the published ratios
    measured) where the system has it; else the first series it has (:data:`CLAIM_SERIES`), named in a prefix."""
    for name in CLAIM_SERIES:
        rows = df[df["series"] == name] if "series" in df else df
        if not rows.empty:
            return rows.reset_index(drop=True), ("" if name == "faithful" else f"[{name} series: no faithful result] ")
    return df, ""


def _claim_rows(claim: pd.Series, inputs: ClaimInputs) -> list[dict]:
    """The claims-table rows of one lora_finetune claim: one per system, or one across systems for a
    generation speedup (:func:`generation_row`)."""
    if claim["quantity"] == "generation_speedup_x":
        return [generation_row(claim, inputs.rows(result_rows, claim["experiment"]))]
    return per_system_rows(
        claim, inputs, result_rows, _claim_key, _observations, timing_free=TIMING_FREE, direction_only=DIRECTION_ONLY
    )


CLAIM_CHECKS = {"lora_finetune": _claim_rows}


def generation_row(claim: pd.Series, df: pd.DataFrame) -> dict:
    """A cross-generation fine-tuning speedup claim (:func:`accelbench.aggregate.claims.class_ratio_row`): step
    times of each system's claim series at equal model, attention, strategy and devices."""
    points = []
    for _, g in df.groupby("system") if not df.empty else []:
        rows, _ = claim_series(g)
        for _, r in rows[rows["status"] == "ok"].iterrows():
            what = f"{r['family']} {r['attention']} {r['strategy']} n={r['devices']}"
            points.append((scope.class_of(r["hardware"])[0], r["hardware"], what, float(r["step_ms"])))
    return class_ratio_row(claim, points, ", ".join(sorted(set(df["system"]))) if not df.empty else "(none)")
