"""The claim checks of Study B's quantization (the claims table, :mod:`accelbench.aggregate.claims`), torch-free:
compression, perplexity increase, accuracy drop (beside chance and the majority class) and layer sensitivity per
(system, model); the quality claims need pretrained weights. :data:`CLAIM_CHECKS` is read through :mod:`.tables`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from accelbench.aggregate.claims import ClaimInputs, NotMeasured, Observation, not_run, verdict_row
from accelbench.errors import DataError
from accelbench.experiments.llm_quant.tables_cells import ACCURACY_TASKS, TASK_NAME
from accelbench.experiments.llm_quant.tables_rows import measured_rows, sensitivity_rows

ACCURACY_DROP = "accuracy_drop_pts"  # FP32 accuracy - quantized accuracy, percentage points, per task
# quantities that measure model quality (meaningless for random-init weights)
QUALITY_QUANTITIES = (
    "sensitivity_max_over_median",
    "first_last_layer_top_share",
    "perplexity_increase_pct",
    ACCURACY_DROP,
)


def _observations(claim: pd.Series, rows: pd.DataFrame, sens: pd.DataFrame, res: dict) -> list[Observation]:
    """Observations of one llm_quant claim on one (system, model): ``rows`` of :func:`measured_rows`, ``sens`` of
    :func:`sensitivity_rows`, ``res`` its results by :func:`_claim_key`."""
    q, sel = claim["quantity"], claim["selector"]
    setting = _setting(res)
    if q in QUALITY_QUANTITIES:  # a quality claim says nothing on random weights (compression does not depend on them)
        weights = {str(r.get("measurements", {}).get("model", {}).get("weights", "")) for r in res.values()}
        if "weights" in rows:
            weights |= {str(w) for w in rows["weights"].dropna()}
        if any("random" in w for w in weights):
            raise NotMeasured(
                "random-init weights (a throughput-only model): perplexity, accuracy and sensitivity "
                "claims need pretrained weights"
            )
    if q in ("sensitivity_max_over_median", "first_last_layer_top_share"):
        if sens.empty:
            st = res.get(("sensitivity",))
            raise NotMeasured(f"sensitivity: {st['status']} ({st.get('reason')})" if st else "no sensitivity result")
        s = sens.sort_values("layer")
        prune = s["prune"].astype(float).to_numpy()
        used = [res[("sensitivity",)]] if ("sensitivity",) in res else []
        if q == "sensitivity_max_over_median":
            med = float(np.median(prune))
            v = float(prune.max() / med) if med > 0 else math.inf
            return [
                Observation(
                    v,
                    f"max/median of {len(prune)} layers = {v:.3g} (max {prune.max():.3g}, "
                    f"median {med:.3g} ppl increase)",
                    used,
                    setting=setting,
                )
            ]
        order = list(np.argsort(-prune, kind="stable"))
        n = len(prune)
        first, last = order.index(0) + 1, order.index(n - 1) + 1
        top = math.ceil(0.2 * n)
        return [
            Observation(
                first <= top and last <= top,
                f"rank of layer 0: {first}/{n}, of layer {n - 1}: {last}/{n} (top 20% = {top})",
                used,
                setting=setting,
            )
        ]
    if q in REAL_QUANT_RATIOS:
        return _real_quant_ratios(claim, rows, res, setting)
    if q == ACCURACY_DROP:
        return _accuracy_drops(claim, rows, res, setting)
    method, _, bitset = sel.partition("/")
    mine = rows[rows["method"] == method]
    if bitset != "*":
        mine = mine[mine["bitset"].astype(str) == bitset]
    if mine.empty:
        raise NotMeasured(f"{sel}: no result (not in config llm_quant.methods / bitsets, or not run yet)")
    bad = mine[mine["status"] != "ok"]
    if len(bad) == len(mine):
        r = bad.iloc[0]
        raise NotMeasured(f"{r['method']}/{r['bitset']}: {r['status']} ({r['reason']})")
    ok = mine[mine["status"] == "ok"]
    used = lambda r: [res[k] for k in [(r["method"], str(r["bitset"])), ("fp32", "none")] if k in res]  # noqa: E731
    if q == "compression_x":
        return [
            Observation(
                float(r["compression_x"]),
                f"{setting.get('model', '(model not recorded)')}: {r['method']}/{r['bitset']}: "
                f"{float(r['compression_x']):.2f}x ({_allocation(res.get((r['method'], str(r['bitset']))), setting)})",
                used(r),
                key=f"{r['method']}/{r['bitset']}",
                setting={
                    **setting,
                    "allocation": _allocation(res.get((r["method"], str(r["bitset"]))), setting),
                },
            )
            for _, r in ok.iterrows()
        ]
    if q == "perplexity_increase_pct":
        base = rows[(rows["method"] == "fp32") & (rows["status"] == "ok")]
        if base.empty:
            raise NotMeasured("no FP32 baseline result (method fp32)")
        p0 = float(base["perplexity"].iloc[0])
        return [
            Observation(
                100 * (float(r["perplexity"]) / p0 - 1),
                f"{r['method']}/{r['bitset']}: {p0:.2f} -> {float(r['perplexity']):.2f} "
                f"({100 * (float(r['perplexity']) / p0 - 1):+.1f}%)",
                used(r),
                key=f"{r['method']}/{r['bitset']}",
                setting=setting,
            )
            for _, r in ok.iterrows()
        ]
    raise DataError(f"claim {claim['claim_id']}: unknown quantity {q!r}")


# quantized / full precision on the real (weight-storing) methods: (what is compared, its value in a result)
REAL_QUANT_RATIOS = {
    "real_quant_memory_ratio": ("peak device memory", lambda m: m.get("peak_mem_gib")),
    "real_quant_eval_time_ratio": ("evaluation time", lambda m: (m.get("eval_time") or {}).get("value")),
}


def _real_quant_ratios(claim: pd.Series, rows: pd.DataFrame, res: dict, setting: dict) -> list[Observation]:
    """quantized / FP32 peak memory or evaluation time of each real-quantization method of the claim's
    ``selector`` (``torchao|int8_dq``: methods that store INT8 weights; the simulated ``fake`` path saves no
    memory: it rounds FP32 weights in place), same system and model."""
    what, value = REAL_QUANT_RATIOS[claim["quantity"]]
    base = res.get(("fp32", "none"))
    v0 = value((base or {}).get("measurements") or {}) if base and base["status"] == "ok" else None
    if not v0:
        raise NotMeasured(f"no FP32 baseline with its {what} (method fp32)")
    obs = []
    for method in str(claim["selector"]).split("|"):
        for (m, bitset), r in sorted((k, r) for k, r in res.items() if len(k) == 2 and k[0] == method.strip()):
            v = value(r.get("measurements") or {}) if r["status"] == "ok" else None
            if v:
                obs.append(
                    Observation(
                        float(v) / float(v0),
                        f"{setting.get('model', '(model not recorded)')}: {m}/{bitset} {what} {float(v):.3g} vs "
                        f"FP32 {float(v0):.3g} = {float(v) / float(v0):.2f}x",
                        [r, base],
                        key=f"{m}/{bitset}",
                        setting=setting,
                    )
                )
    if not obs:
        raise NotMeasured(f"no ok result of {claim['selector']} with its {what} (config llm_quant.methods)")
    return obs


def _number(value) -> float | None:
    """A table cell as a float; None for a label (``unsupported``), a blank or NaN."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


SIGNAL_SE = 2  # FP32 must lie this many binomial standard errors above max(chance, majority) to show a loss


def _signal(task: str, acc: float, row: pd.Series) -> str:
    """Why ``task``'s FP32 accuracy ``acc`` (%) of table row ``row`` cannot show an accuracy loss, "" where it can:
    it must lie more than :data:`SIGNAL_SE` binomial standard errors (at the baseline's rate, over the ``<task>_n``
    documents scored) above the larger of chance (1 / choices) and the majority-class rate, both from the task's
    gold labels (:func:`.tables_cells.baseline_cells`, never typed). A model at chance, or under the majority class,
    cannot lose accuracy to quantization."""
    name = TASK_NAME.get(task, task)
    chance, major, n = (_number(row.get(f"{task}_{k}")) for k in ("chance_pct", "majority_pct", "n"))
    if chance is None or major is None or not n:
        return f"{name}: no chance / majority-class baseline of the documents scored (shown, not judged)"
    floor = max(chance, major)
    p = floor / 100.0
    margin = SIGNAL_SE * 100.0 * math.sqrt(p * (1.0 - p) / n)
    if acc > floor + margin:
        return ""
    return (
        f"{name}: FP32 {acc:.1f}% is not above chance {chance:.1f}% / majority class {major:.1f}% by "
        f"{SIGNAL_SE} standard errors ({margin:.1f} pts over {int(n):,} documents): a model at chance or under "
        "the majority class cannot show an accuracy loss"
    )


def _accuracy_drops(claim: pd.Series, rows: pd.DataFrame, res: dict, setting: dict) -> list[Observation]:
    """FP32 accuracy minus each quantized method's (the claim's ``selector``, ``fake|torchao|...``), in percentage
    points, per accuracy task (HellaSwag acc_norm, BoolQ acc) scored on the same documents, same system and model;
    each observation keyed ``<task>:<method>/<bitset>`` and shown beside the task's chance and majority-class rates.
    A task whose FP32 accuracy carries no signal (:func:`_signal`) is shown, not judged.

    Raises:
        NotMeasured: no FP32 accuracy, or no quantized accuracy on the same documents.
    """
    base = rows[(rows["method"] == "fp32") & (rows["status"] == "ok")] if not rows.empty else rows
    if base.empty:
        raise NotMeasured("no FP32 baseline result (method fp32)")
    b = base.iloc[0]
    methods = {m.strip() for m in str(claim["selector"]).split("|")}
    quantized = rows[rows["method"].isin(methods) & (rows["status"] == "ok")]
    model = setting.get("model", "(model not recorded)")
    obs, why = [], []
    for task in ACCURACY_TASKS:
        name = TASK_NAME.get(task, task)
        a0, n0 = _number(b.get(f"{task}_acc_pct")), _number(b.get(f"{task}_n"))
        if a0 is None:
            cell = b.get(f"{task}_acc_pct")
            why.append(f"{name}: FP32 {cell if isinstance(cell, str) else 'not scored'}")
            continue
        no_signal = _signal(task, a0, b)
        chance, major = _number(b.get(f"{task}_chance_pct")), _number(b.get(f"{task}_majority_pct"))
        known = chance is not None and major is not None
        beside = f"chance {chance:.1f}%, majority {major:.1f}%" if known else "no baseline"
        for _, r in quantized.sort_values(["method", "bitset"]).iterrows():
            a = _number(r.get(f"{task}_acc_pct"))
            if a is None or _number(r.get(f"{task}_n")) != n0:  # not scored, or on other documents
                continue
            key = (r["method"], str(r["bitset"]))
            obs.append(
                Observation(
                    a0 - a,
                    f"{model}: {name} {key[0]}/{key[1]} {a0:.1f} -> {a:.1f}% ({a - a0:+.1f} pts; {beside}; "
                    f"n={int(n0):,})",
                    [x for x in (res.get(key), res.get(("fp32", "none"))) if x],
                    key=f"{task}:{key[0]}/{key[1]}",
                    setting=setting,
                    no_signal=no_signal,
                )
            )
    if not obs:
        raise NotMeasured(
            f"no accuracy of FP32 and of {claim['selector']} on the same documents"
            + (f" ({'; '.join(why)})" if why else "")
            + " (config llm_quant.accuracy)"
        )
    return obs


def _allocation(result: dict | None, setting: dict) -> str:
    """How a method result allocated its bit widths, for a compression claim's ``setting``: ``buckets`` (percentile
    buckets: the bucket sizes alone fix the compression), ``kmeans`` (clusters of the measured sensitivities), and
    ``kmeans on random-init weights (noise sensitivities)`` where the sensitivities it clustered are noise, so the
    compression is too (as b5/b6 refuse for the sensitivities themselves)."""
    m = (result or {}).get("measurements") or {}
    clustering = str((m.get("allocation") or {}).get("clustering") or (m.get("settings") or {}).get("clustering") or "")
    if not clustering:
        return "(allocation not recorded)"
    clustering = {"percentile": "buckets"}.get(clustering, clustering)  # the older name of the percentile buckets
    if clustering != "buckets" and "random" in str(setting.get("weights", "")):
        return f"{clustering} on random-init weights (noise sensitivities)"
    return clustering


def _setting(res: dict) -> dict[str, str]:
    """What one (system, model)'s results were measured on, for the claims' ``setting``: ``model`` (the loaded
    model's name, e.g. ``SmolLM2-135M-Instruct``), ``weights`` (``pretrained`` / ``random init``) and ``text``
    (the text source: ``pydoc``, ``wikitext2``)."""
    for r in res.values():
        m, c = r.get("measurements") or {}, r["config"]
        model = m.get("model") or {}
        if model.get("name"):
            return {
                "model": str(model["name"]),
                "weights": str(model.get("weights", "")),
                "text": str((c.get("data") or {}).get("source", "")),
            }
    return {}


# quantities that do not depend on timing (sizes, perplexity, sensitivity ranks): still judged on a noisy result
TIMING_FREE = {
    "compression_x",
    "perplexity_increase_pct",
    "sensitivity_max_over_median",
    "first_last_layer_top_share",
    ACCURACY_DROP,
}


def _claim_key(r: dict) -> tuple:
    """Identity of a result inside its (system, model) group: ``("sensitivity",)`` or (method, bit set)."""
    c = r["config"]
    return (
        (c.get("method", "sensitivity"),)
        if c.get("method", "sensitivity") == "sensitivity"
        else (c["method"], str(c["bitset"]))
    )


def _claim_rows(claim: pd.Series, inputs: ClaimInputs) -> list[dict]:
    """The claims-table rows of one llm_quant claim: one per (system, model)."""
    exp = claim["experiment"]
    group = inputs.of(exp)
    if not group:
        return [not_run(claim, exp)]
    quant, sens = inputs.rows(measured_rows, exp), inputs.rows(sensitivity_rows, exp)
    rows = []
    for system, model in sorted({(r["config"]["system"]["name"], r["config"]["model"]) for r in group}):
        mine = [r for r in group if r["config"]["system"]["name"] == system and r["config"]["model"] == model]
        res = {_claim_key(r): r for r in mine}
        q = quant[(quant["system"] == system) & (quant["model"] == model)] if not quant.empty else quant
        s = sens[(sens["system"] == system) & (sens["model"] == model)] if not sens.empty else sens
        rows.append(
            verdict_row(
                claim,
                system,
                mine[0]["_hardware"],
                lambda c=claim, q=q, s=s, res=res: _observations(c, q, s, res),
                timing_free=TIMING_FREE,
            )
        )
        rows[-1]["claim"] = f"{claim['claim']} [{model}]"
    return rows


CLAIM_CHECKS = {"llm_quant": _claim_rows}
