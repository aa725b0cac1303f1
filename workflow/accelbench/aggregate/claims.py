"""One claims table for both studies: every published claim checked against every system's results.

Inputs: the result files of every experiment (any systems, validated first by rule ``validate_results``), the
claims of Study A (``study_a_claims.csv``) and Study B (``study_b_claims.csv``), and Study B's SR3 reference times
(for the published throughput order). Each claim row names the measured quantity and a check (data, not code):

* ``range``: ``low <= measured <= high``; ``min``: ``measured >= low``; ``max``: ``measured <= high``;
* ``true``: the measured property holds.

A system is checked on every observation the claim covers (each bit set, device count, model family...);
``holds`` needs all of them to pass. The verdict is one of :data:`VERDICTS`; ``not measured here`` always says
why: the experiment was not run, the case was ``unsupported``/``OOM`` (with the result's reason), the claim is
about other hardware (``applies_to``; the value measured here is still shown), a rate counter (IPC, tensor pipe)
covers less than :data:`RATE_COVERAGE_MIN` of a compared configuration's step device time, every pair of a
flash-attention gain lies within its timing spread, or the result was flagged noisy (``measurements.noise.noisy``: not
measured reliably). Hardware labels come from each result's provenance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..errors import DataError  # noqa: E402
from . import study_a, study_a_ncu, study_b_lora, study_b_quant, study_b_sr3  # noqa: E402
from .common import joined_labels, load_results, write_table  # noqa: E402

VERDICTS = ("holds", "does not hold", "not measured here")
COLUMNS = ["study", "claim_id", "claim", "source", "quantity", "tolerance", "published", "system", "hardware",
           "measured", "verdict", "why"]


class NotMeasured(Exception):
    """A claim cannot be checked on a system; the message says why, ``measured`` what was observed all the same."""

    def __init__(self, why: str, measured: str = ""):
        super().__init__(why)
        self.measured = measured


@dataclass
class Observation:
    """One measured value a claim is checked on (``value``: float or bool), its description and the results used."""

    value: float | bool
    text: str
    results: list[dict] = field(default_factory=list)
    unresolved: bool = False  # inside the measurement spread: evidence neither way, left out of the verdict
    note: str = ""  # how it was measured, when that is not what the claim names (a proxy); shown in measured and why


# --------------------------------------------------------------------------- reading
def read_claims(path: str | Path, study: str) -> pd.DataFrame:
    """A claims CSV (``#`` lines are its source notes) in one shape: ``study, claim_id, claim, source, experiment,
    quantity, selector, check, low, high, published, applies_to, note``.

    Raises:
        DataError: the file is missing or lacks a ``check`` column.
    """
    try:
        df = pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise DataError(f"claims file not found: {path}") from None
    return claims_frame(df, study, str(path))


def claims_frame(df: pd.DataFrame, study: str, name: str = "claims") -> pd.DataFrame:
    """:func:`read_claims` on a claims table already read (``name`` labels it in errors)."""
    if "check" not in df:
        raise DataError(f"{name}: no 'check' column (each claim needs check, low, high)")
    df = df.copy()
    if "metric" in df and "quantity" not in df:  # Study A's layout
        conf = df["configuration"]
        df = df.assign(
            quantity=df["metric"], selector=conf,
            experiment=["unet3d_ncu" if m in NCU_QUANTITIES else "unet3d_profile" for m in df["metric"]],
            claim=[f"{c}: {m.replace('_', ' ')} {v}" + (f" ({n})" if n else "")
                   for c, m, v, n in zip(conf, df["metric"], df["value"], df["note"])],
            published=[f"{v} ({g.upper()}, {s})" for v, g, s in zip(df["value"], df["gpu"], df["source"])])
    df.insert(0, "study", study)
    return df


def _applies(claim: pd.Series, system: str, hardware: str) -> bool:
    tokens = [t for t in str(claim.get("applies_to", "") or "").lower().split("/") if t]
    return not tokens or system.lower() in tokens or any(t in hardware.lower() for t in tokens)


def tolerance_text(claim: pd.Series) -> str:
    c, lo, hi = claim["check"], claim.get("low", ""), claim.get("high", "")
    return {"range": f"{lo} <= x <= {hi}", "min": f"x >= {lo}", "max": f"x <= {hi}", "true": "property holds"}.get(c, c)


def passes(claim: pd.Series, value: float | bool) -> bool:
    """Whether ``value`` satisfies the claim's check. Raises DataError on an unknown check."""
    c = claim["check"]
    if c == "true":
        return bool(value)
    v = float(value)
    lo = float(claim["low"]) if str(claim.get("low", "")).strip() else -math.inf
    hi = float(claim["high"]) if str(claim.get("high", "")).strip() else math.inf
    if c in ("range", "min", "max"):
        return lo <= v <= hi
    raise DataError(f"claim {claim['claim_id']}: unknown check {c!r} (range, min, max, true)")


def noise_why(result: dict) -> str | None:
    """Why a result is flagged noisy (``measurements.noise.noisy``), None when it is not or says nothing."""
    noise = (result.get("measurements") or {}).get("noise")
    if not isinstance(noise, dict) or not noise.get("noisy"):
        return None
    why = noise.get("why") or noise.get("reasons") or "flagged noisy"
    return "; ".join(map(str, why)) if isinstance(why, (list, tuple)) else str(why)


# --------------------------------------------------------------------------- Study A
NCU_QUANTITIES = {"sm_cycles_reduction_x", "dynamic_instructions_reduction_x", "tensor_core_utilization_gain_x",
                  "ipc_change_pct", "sm_cycles_ratio", "instructions_ratio"}
_CONF = {"tf32+channels_last_3d": "tf32_channels_last_3d"}


def _row(df: pd.DataFrame, conf: str):
    r = df[df["configuration"] == conf]
    return r.iloc[0] if len(r) else None


def _ok_row(df: pd.DataFrame, conf: str, what: str):
    r = _row(df, conf)
    if r is None:
        raise NotMeasured(f"{what}: configuration {conf} not run (config {what}.configurations)")
    if r["status"] != "ok":
        raise NotMeasured(f"{conf}: {r['status']} ({r['reason']})")
    return r


# A rate (IPC, tensor-pipe utilisation) describes the kernels it was measured over: a claim comparing two
# configurations' rates is judged only when each covers at least this share of the step's device time (the ncu coverage target).
RATE_COVERAGE_MIN = 0.8
QUALITY_PROXY = ("proxy: the predicted noise of one untrained network compared with the baseline configuration's "
                 "(the result names no method)")


def rate_coverage(row: pd.Series, rate: str) -> tuple[float | None, str]:
    """(share of the step's device time a rate column of a study_a_ncu.counter_rows row was measured over, basis):
    1.0 when the coverage pass measured it over every kernel (``rates_over_every_kernel``), else ``rates_time_share``
    (the detail pass on the top kernels), else ``device_time_covered`` (no coverage pass: the profiled kernels);
    (None, "unknown") when the row says nothing."""
    every = [c.strip() for c in str(row.get("rates_over_every_kernel") or "").split(",")]
    if rate in every:
        return 1.0, "every kernel"
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
            short.append(f"{conf}: IPC/tensor-pipe rates cover {share:.0%} of the step's device time ({basis}), "
                         f"below {RATE_COVERAGE_MIN:.0%}")
    if short:
        raise NotMeasured("; ".join(short), measured)


def study_a_observations(claim: pd.Series, prof: pd.DataFrame, ncu: pd.DataFrame, res: dict) -> list[Observation]:
    """Observations of one Study A claim on one (system, model): ``prof`` rows of study_a.result_rows, ``ncu`` rows
    of study_a_ncu.counter_rows, ``res`` the result dicts by (experiment, configuration)."""
    q, conf = claim["quantity"], _CONF.get(claim["selector"], claim["selector"])
    used = lambda *cs: [res[k] for k in cs if k in res]  # noqa: E731
    if q == "kernel_time_breakdown":
        b = _ok_row(prof, "baseline", "unet3d_profile")
        share = b["share_convolution"] + b["share_gemm"]
        top = max(study_a.CLASSES, key=lambda c: b[f"share_{c}"])
        return [Observation(share, f"convolution + GEMM {share:.0%} of device time (largest class: {top})",
                            used(("unet3d_profile", "baseline")))]
    if q == "synthesis_quality":
        ok = prof[prof["status"] == "ok"]
        if ok.empty:
            raise NotMeasured("no unet3d_profile configuration ran")
        def method(conf):  # each result names how its quality was measured (a proxy)
            r = res.get(("unet3d_profile", conf))
            q = ((r or {}).get("measurements") or {}).get("quality") or {}
            return q.get("method") or QUALITY_PROXY

        return [Observation(bool(r["quality_holds"]), f"{r['configuration']}: rel. L2 {r['quality_rel_l2_noise']:.2g}",
                            used(("unet3d_profile", r["configuration"])), note=method(r["configuration"]))
                for _, r in ok.iterrows()]
    if q in ("speedup_x", "throughput_gain"):
        r = _ok_row(prof, conf, "unet3d_profile")
        _ok_row(prof, "baseline", "unet3d_profile")
        return [Observation(float(r["speedup_vs_baseline"]), f"{conf}: {r['speedup_vs_baseline']:.2f}x training step",
                            used(("unet3d_profile", conf), ("unet3d_profile", "baseline")))]
    # Nsight Compute counters
    if ncu.empty:
        raise NotMeasured("no unet3d_ncu results (experiment unet3d_ncu not run)")
    r = _ok_row(ncu, conf, "unet3d_ncu")
    b = _ok_row(ncu, "baseline", "unet3d_ncu")
    pair = used(("unet3d_ncu", conf), ("unet3d_ncu", "baseline"))
    col, invert = {"sm_cycles_reduction_x": ("sm_cycles_ratio", True), "sm_cycles_ratio": ("sm_cycles_ratio", False),
                   "dynamic_instructions_reduction_x": ("instructions_ratio", True),
                   "instructions_ratio": ("instructions_ratio", False),
                   "ipc_change_pct": ("ipc_change_pct", False)}.get(q, (None, False))
    if q == "tensor_core_utilization_gain_x":
        if not (pd.notna(r.get("tensor_pipe_pct")) and pd.notna(b.get("tensor_pipe_pct")) and b["tensor_pipe_pct"] > 0):
            raise NotMeasured("tensor-pipe utilisation not read by ncu on this GPU")
        v = r["tensor_pipe_pct"] / b["tensor_pipe_pct"]
        text = f"{conf}: tensor pipe {b['tensor_pipe_pct']:.1f}% -> {r['tensor_pipe_pct']:.1f}% ({v:.2f}x)"
        _check_rate_coverage("tensor_pipe_pct", {"baseline": b, conf: r}, text)
        return [Observation(v, text, pair)]
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


# --------------------------------------------------------------------------- Study B
# quantities that measure model quality (meaningless for random-init weights)
QUALITY_QUANTITIES = ("sensitivity_max_over_median", "first_last_layer_top_share", "perplexity_increase_pct")


def _quant_obs(claim: pd.Series, rows: pd.DataFrame, sens: pd.DataFrame, res: dict) -> list[Observation]:
    q, sel = claim["quantity"], claim["selector"]
    if q in QUALITY_QUANTITIES:  # a quality claim says nothing on random weights (compression does not depend on them)
        weights = {str(r.get("measurements", {}).get("model", {}).get("weights", "")) for r in res.values()}
        if "weights" in rows:
            weights |= {str(w) for w in rows["weights"].dropna()}
        if any("random" in w for w in weights):
            raise NotMeasured("random-init weights (a throughput-only model): perplexity and sensitivity "
                              "claims need pretrained weights")
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
            return [Observation(v, f"max/median of {len(prune)} layers = {v:.3g} (max {prune.max():.3g}, "
                                   f"median {med:.3g} ppl increase)", used)]
        order = list(np.argsort(-prune, kind="stable"))
        n = len(prune)
        first, last = order.index(0) + 1, order.index(n - 1) + 1
        top = math.ceil(0.2 * n)
        return [Observation(first <= top and last <= top,
                            f"rank of layer 0: {first}/{n}, of layer {n - 1}: {last}/{n} (top 20% = {top})", used)]
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
        return [Observation(float(r["compression_x"]), f"{r['method']}/{r['bitset']}: {float(r['compression_x']):.2f}x",
                            used(r)) for _, r in ok.iterrows()]
    if q == "perplexity_increase_pct":
        base = rows[(rows["method"] == "fp32") & (rows["status"] == "ok")]
        if base.empty:
            raise NotMeasured("no FP32 baseline result (method fp32)")
        p0 = float(base["perplexity"].iloc[0])
        return [Observation(100 * (float(r["perplexity"]) / p0 - 1),
                            f"{r['method']}/{r['bitset']}: {p0:.2f} -> {float(r['perplexity']):.2f} "
                            f"({100 * (float(r['perplexity']) / p0 - 1):+.1f}%)", used(r)) for _, r in ok.iterrows()]
    raise DataError(f"claim {claim['claim_id']}: unknown quantity {q!r}")


def _lora_obs(claim: pd.Series, df: pd.DataFrame, res: dict) -> list[Observation]:
    q = claim["quantity"]
    ok = df[df["status"] == "ok"].copy()
    ok["strategy_ddp"] = ok["strategy"].replace({"single": "ddp"})

    def used(g):
        return [res[k] for k in ((f, a, s, n) for f, a, s, n in zip(g["family"], g["attention"], g["strategy"],
                                                                      g["devices"])) if k in res]

    def absent(strategy):
        mine = df[df["strategy"] == strategy]
        if mine.empty:
            raise NotMeasured(f"no {strategy} result (not in config lora_finetune.runs, or not run yet)")
        r = mine[mine["status"] != "ok"]
        if len(r) == len(mine):
            raise NotMeasured(f"{strategy}: {r['status'].iloc[0]} ({r['reason'].iloc[0]})")

    obs = []
    if q == "flash_gain_pct":
        for (fam, strat, n), g in ok.groupby(["family", "strategy_ddp", "devices"]):
            t = dict(zip(g["attention"], g["step_ms"]))
            spread = dict(zip(g["attention"], zip(g["step_p10_ms"], g["step_p90_ms"])))
            if "eager" in t and "flash" in t:
                v = 100 * (t["eager"] / t["flash"] - 1)
                (e_lo, e_hi), (f_lo, f_hi) = spread["eager"], spread["flash"]
                # spreads that overlap: the difference is inside the measurement spread, evidence neither way
                overlap = not (pd.isna([e_lo, e_hi, f_lo, f_hi]).any() or e_hi < f_lo or f_hi < e_lo)
                label = "single" if n == 1 else strat
                obs.append(Observation(v, f"{fam} {label} n={n}: eager {t['eager']:.0f} ms "
                                          f"(p10-p90 {e_lo:.0f}-{e_hi:.0f}), flash {t['flash']:.0f} ms "
                                          f"({f_lo:.0f}-{f_hi:.0f}): {v:+.1f}%"
                                          + (" (the p10-p90 spreads overlap: unresolved)" if overlap else ""),
                                       used(g), unresolved=overlap))
        if not obs:
            raise NotMeasured("no pair of eager and flash runs at equal model, strategy and devices")
        return obs
    if q in ("fsdp_slowdown_vs_ddp", "zero3_slowdown_vs_ddp"):
        sharded = q.split("_")[0]
        absent(sharded)
        for (fam, att, n), g in ok.groupby(["family", "attention", "devices"]):
            t = dict(zip(g["strategy_ddp"], g["step_ms"]))
            if sharded in t and "ddp" in t:
                v = t[sharded] / t["ddp"]
                obs.append(Observation(v, f"{fam} {att} n={n}: {sharded} {t[sharded]:.0f} ms / DDP {t['ddp']:.0f} ms "
                                          f"= {v:.2f}x", used(g)))
        if not obs:
            raise NotMeasured(f"no {sharded} and DDP runs at equal model, attention and devices")
        return obs
    if q == "oom_without_sharding":
        for fam, g in df.groupby("family"):
            unsharded_oom = g[g["strategy"].isin(["single", "ddp"]) & (g["status"] == "oom")]
            if unsharded_oom.empty:
                continue
            sharded = g[g["strategy"].isin(["fsdp", "zero3"])]
            if sharded.empty:
                continue
            fits = sharded[sharded["status"] == "ok"]
            obs.append(Observation(not fits.empty,
                                   f"{fam}: OOM with {', '.join(sorted(set(unsharded_oom['strategy'])))}; sharded "
                                   + (", ".join(f"{s} n={n} ok" for s, n in zip(fits["strategy"], fits["devices"]))
                                      or "runs: " + ", ".join(sorted(set(sharded["status"])))), used(g)))
        if not obs:
            raise NotMeasured("no model ran out of memory without sharding here (with sharded runs beside it): "
                              "add a model that does not fit one device (e.g. llama33_70b) to lora_finetune.models")
        return obs
    raise DataError(f"claim {claim['claim_id']}: unknown quantity {q!r}")


def _sr3_obs(claim: pd.Series, df: pd.DataFrame, res: dict) -> list[Observation]:
    mine = df[df["precision"] == claim["selector"]] if claim["selector"] else df
    multi = mine[mine["devices"] > 1]
    if multi.empty:
        raise NotMeasured(f"no {claim['selector']} run on more than one device (config sr3_scaling.devices)")
    ok = multi[(multi["status"] == "ok") & multi["efficiency_vs_1"].notna()] if "efficiency_vs_1" in multi else multi[:0]
    if ok.empty:
        r = multi.iloc[0]
        raise NotMeasured(f"{r['devices']} devices: {r['status']} ({r['reason']})" if r["status"] != "ok"
                          else "no 1-device run to compare with")
    return [Observation(float(r["efficiency_vs_1"]), f"{r['precision']} {r['devices']} devices: efficiency "
                                                     f"{r['efficiency_vs_1']:.2f} (iteration {r['iteration_ms']:.1f} ms)",
                        [res[k] for k in [(r["precision"], r["devices"]), (r["precision"], 1)] if k in res])
            for _, r in ok.iterrows()]


def throughput_order_row(claim: pd.Series, sr3: pd.DataFrame, sr3_reference: pd.DataFrame, noise: dict) -> dict:
    """The cross-system claim: measured 1-device throughput order of the ``applies_to`` systems vs. the published."""
    tokens = [t for t in claim["applies_to"].lower().split("/") if t]
    pub = sr3_reference[(sr3_reference["devices"] == 1) & sr3_reference["system"].isin(tokens)]
    pub_order = list(pub.sort_values("minutes")["system"])
    measured = {}
    ok = sr3[(sr3["status"] == "ok") & (sr3["devices"] == 1) & (sr3["precision"] == claim["selector"])] if not sr3.empty else sr3
    for _, r in ok.iterrows():
        for t in tokens:
            if r["system"].lower() == t or t in r["hardware"].lower():
                measured[t] = (r["images_per_s"], r["hardware"], (r["system"], r["precision"], r["devices"]))
    base = {**_claim_cells(claim), "system": ", ".join(sorted(set(sr3["system"]))) if not sr3.empty else "(none)",
            "hardware": "; ".join(h for _, h, _ in measured.values()) or (joined_labels(sr3) if not sr3.empty else "none")}
    if len(measured) < 2:
        return {**base, "measured": ", ".join(f"{t}: {v[0]:.3g} images/s" for t, v in measured.items()) or "",
                "verdict": "not measured here",
                "why": f"needs 1-device {claim['selector']} SR3 results of at least two of {', '.join(tokens)} "
                       f"(found: {', '.join(measured) or 'none'}); copy their results/<system>/ folders here"}
    why_noisy = [w for k in (v[2] for v in measured.values()) if (w := noise.get(("sr3_scaling",) + k))]
    order = sorted(measured, key=lambda t: -measured[t][0])
    expected = [t for t in pub_order if t in measured]
    text = " > ".join(f"{t} {measured[t][0]:.3g} img/s" for t in order)
    if why_noisy:
        return {**base, "measured": text, "verdict": "not measured here",
                "why": "not measured reliably: result flagged noisy (" + why_noisy[0] + ")"}
    holds = order == expected
    return {**base, "measured": text, "verdict": "holds" if holds else "does not hold",
            "why": f"published order {' > '.join(expected)}; measured {' > '.join(order)}"}


# --------------------------------------------------------------------------- the table
def _claim_cells(claim: pd.Series) -> dict:
    return {"study": claim["study"], "claim_id": claim["claim_id"], "claim": claim["claim"], "source": claim["source"],
            "quantity": claim["quantity"], "tolerance": tolerance_text(claim), "published": claim["published"]}


# Quantities that do not depend on timing (sizes, perplexity, accuracy, sensitivity ranks, quality, OOM): a result
# measured under other load still answers them, so its noise flag does not make them "not measured reliably".
TIMING_FREE = {"compression_x", "perplexity_increase_pct", "sensitivity_max_over_median", "first_last_layer_top_share",
               "synthesis_quality", "oom_without_sharding", "dynamic_instructions_reduction_x", "instructions_ratio"}


# Claims whose check is the direction only (sharded slower than DDP: x >= 1); the published magnitude is shown, not
# judged.
DIRECTION_ONLY = {"fsdp_slowdown_vs_ddp", "zero3_slowdown_vs_ddp"}


def _measured_text(obs: list[Observation]) -> str:
    notes = list(dict.fromkeys(o.note for o in obs if o.note))
    return (f"({' / '.join(notes)}) " if notes else "") + "; ".join(o.text for o in obs)


def verdict_row(claim: pd.Series, system: str, hardware: str, evaluate) -> dict:
    """Evaluate one claim on one system: ``evaluate()`` returns the observations or raises NotMeasured.

    A claim about other hardware (``applies_to``) is ``not measured here`` with the value measured here still shown.
    Observations marked ``unresolved`` (inside their timing spread) are listed but left out of the verdict; if all
    are, the claim is ``not measured here``."""
    row = {**_claim_cells(claim), "system": system, "hardware": hardware, "measured": ""}
    if not _applies(claim, system, hardware):
        why = f"the claim is about {claim['applies_to'].upper()}; this is {hardware}"
        try:
            row["measured"] = _measured_text(evaluate())
        except NotMeasured as exc:
            row["measured"], why = exc.measured, f"{why} (and here: {exc})"
        return {**row, "verdict": "not measured here", "why": why}
    try:
        obs = evaluate()
    except NotMeasured as exc:
        return {**row, "measured": exc.measured, "verdict": "not measured here", "why": str(exc)}
    row["measured"] = _measured_text(obs)
    noisy = [w for o in obs for r in o.results if (w := noise_why(r))]
    if noisy and claim["quantity"] not in TIMING_FREE:
        return {**row, "verdict": "not measured here", "why": f"not measured reliably: result flagged noisy ({noisy[0]})"}
    unresolved = [o for o in obs if o.unresolved]
    judged = [o for o in obs if not o.unresolved]
    if not judged:
        return {**row, "verdict": "not measured here", "why": "every pair within its timing spread (p10-p90 overlap)"}
    of = f"{len(judged)} resolved pair{'s' if len(judged) > 1 else ''}" if unresolved else str(len(judged))
    tail = (f"; {len(unresolved)} pair{'s' if len(unresolved) > 1 else ''} within "
            f"{'their' if len(unresolved) > 1 else 'its'} timing spread") if unresolved else ""
    if claim["quantity"] in DIRECTION_ONLY:
        tail += " (direction; the published magnitude is not judged)"
    notes = list(dict.fromkeys(o.note for o in obs if o.note))
    if notes:
        tail += "; measured with a proxy, not the claimed quantity: " + " / ".join(
            n.removeprefix("proxy: ") for n in notes)
    failed = [o for o in judged if not passes(claim, o.value)]
    if failed:
        return {**row, "verdict": "does not hold",
                "why": f"{len(failed)} of {of} " + ("false" if claim["check"] == "true" else
                                                     f"outside {tolerance_text(claim)}") + f": {failed[0].text}{tail}"}
    within = "true" if claim["check"] == "true" else f"within {tolerance_text(claim)}"
    return {**row, "verdict": "holds", "why": f"{len(judged)} of {of} {within}{tail}"}


def _by_experiment(results: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in results:
        out.setdefault(r["experiment"], []).append(r)
    return out


def _key(r: dict) -> tuple:
    """Identity of a result inside its (experiment, system[, model]) group."""
    c = r["config"]
    return {"unet3d_profile": lambda: (r["experiment"], c["configuration"]),
            "unet3d_ncu": lambda: (r["experiment"], c["configuration"]),
            "llm_quant": lambda: ((c.get("method", "sensitivity"),) if c.get("method", "sensitivity") == "sensitivity"
                                  else (c["method"], str(c["bitset"]))),
            "lora_finetune": lambda: (c.get("family", c.get("model_name")), c["attention"], c["strategy"],
                                      int(c["devices"])),
            "sr3_scaling": lambda: (c["precision"], int(c["devices"]))}[r["experiment"]]()


def study_a_verdicts(claim: pd.Series, prof: pd.DataFrame, ncu: pd.DataFrame,
                     results: list[dict]) -> list[tuple[str, str, dict]]:
    """(system, model, claims-table row) of one Study A claim per (system, model) of ``prof``
    (study_a.result_rows); ``ncu``: study_a_ncu.counter_rows; ``results``: the unet3d_profile and unet3d_ncu results.
    Also used by study_a's claims_vs_measured table, so both tables say the same."""
    out = []
    for (system, model), g in prof.groupby(["system", "model"]) if not prof.empty else []:
        res = {_key(r): r for r in results
               if r["config"]["system"]["name"] == system and r["config"]["model"] == model}
        n = ncu[(ncu["system"] == system) & (ncu["model"] == model)] if not ncu.empty else ncu
        row = verdict_row(claim, system, g["hardware"].iloc[0],
                          lambda c=claim, g=g, n=n, res=res: study_a_observations(c, g, n, res))
        row["claim"] = f"{claim['claim']} [{model}]"
        out.append((system, model, row))
    return out


def _not_run(claim: pd.Series, experiment: str) -> dict:
    return {**_claim_cells(claim), "system": "(none)", "hardware": "none", "measured": "",
            "verdict": "not measured here",
            "why": f"no {experiment} results (add {experiment} to config `experiments`, or copy results in)"}


def claims_table(results: list[dict], claims: pd.DataFrame, sr3_reference: pd.DataFrame) -> pd.DataFrame:
    """Every claim against every system's results (see the module docstring for the verdicts)."""
    by = _by_experiment(results)
    rows = []
    prof = study_a.result_rows(by.get("unet3d_profile", []))
    ncu = study_a_ncu.counter_rows(by.get("unet3d_ncu", []))
    quant = study_b_quant.measured_rows(by.get("llm_quant", []))
    sens = study_b_quant.sensitivity_rows(by.get("llm_quant", []))
    lora = study_b_lora.result_rows(by.get("lora_finetune", []))
    sr3 = study_b_sr3.result_rows(by.get("sr3_scaling", []))
    for _, claim in claims.iterrows():
        exp = claim["experiment"]
        if claim["quantity"] == "throughput_order":
            sr3_noise = {("sr3_scaling", r["config"]["system"]["name"], *_key(r)): w
                         for r in by.get("sr3_scaling", []) if (w := noise_why(r))}
            rows.append(throughput_order_row(claim, sr3, sr3_reference, sr3_noise))
            continue
        group = by.get("unet3d_profile" if exp == "unet3d_ncu" else exp, []) or by.get(exp, [])
        if not group:
            rows.append(_not_run(claim, exp))
            continue
        if exp in ("unet3d_profile", "unet3d_ncu"):
            rows += [row for _, _, row in study_a_verdicts(claim, prof, ncu, by.get("unet3d_profile", [])
                                                             + by.get("unet3d_ncu", []))]
        elif exp == "llm_quant":
            models = sorted({(r["config"]["system"]["name"], r["config"]["model"]) for r in group})
            for system, model in models:
                mine = [r for r in group if r["config"]["system"]["name"] == system and r["config"]["model"] == model]
                res = {_key(r): r for r in mine}
                q = quant[(quant["system"] == system) & (quant["model"] == model)] if not quant.empty else quant
                s = sens[(sens["system"] == system) & (sens["model"] == model)] if not sens.empty else sens
                hw = mine[0]["_hardware"]
                rows.append(verdict_row(claim, system, hw, lambda c=claim, q=q, s=s, res=res: _quant_obs(c, q, s, res)))
                rows[-1]["claim"] = f"{claim['claim']} [{model}]"
        elif exp == "lora_finetune":
            for system, g in lora.groupby("system"):
                res = {_key(r): r for r in group if r["config"]["system"]["name"] == system}
                rows.append(verdict_row(claim, system, g["hardware"].iloc[0],
                                        lambda c=claim, g=g, res=res: _lora_obs(c, g, res)))
        elif exp == "sr3_scaling":
            for system, g in sr3.groupby("system"):
                res = {_key(r): r for r in group if r["config"]["system"]["name"] == system}
                rows.append(verdict_row(claim, system, g["hardware"].iloc[0],
                                        lambda c=claim, g=g, res=res: _sr3_obs(c, g, res)))
        else:
            raise DataError(f"claim {claim['claim_id']}: unknown experiment {exp!r}")
    df = pd.DataFrame(rows, columns=COLUMNS)
    if not (df["verdict"].isin(VERDICTS).all() and (df["why"].astype(str).str.len() > 0).all()):
        raise DataError("claims table: a row without a verdict or a reason (a bug in accelbench.aggregate.claims)")
    return df


# --------------------------------------------------------------------------- figure
VERDICT_COLOUR = {"holds": "#b7e1b0", "does not hold": "#f4b6b6", "not measured here": "#e6e6e6"}


def fig_claims(df: pd.DataFrame, path: str | Path) -> None:
    """The claims table as a compact picture: one line per (claim, system), the verdict cell coloured."""
    def cut(s, n):
        s = str(s)
        return s if len(s) <= n else s[: n - 1] + "…"

    cells = [[r["claim_id"], cut(r["claim"], 68), cut(r["system"], 10), cut(r["published"], 38),
              cut(r["measured"], 52), r["verdict"], cut(r["why"], 72)] for _, r in df.iterrows()]
    cells = cells or [["-", "no claims", "", "", "", "not measured here", ""]]
    fig, ax = plt.subplots(figsize=(20, 0.22 * len(cells) + 0.6))
    ax.axis("off")
    t = ax.table(cellText=cells, colLabels=["id", "claim", "system", "published", "measured", "verdict", "why"],
                 loc="upper center", cellLoc="left", colLoc="left",
                 colWidths=[0.025, 0.25, 0.045, 0.15, 0.2, 0.07, 0.26])
    t.auto_set_font_size(False)
    t.set_fontsize(6.5)
    for i, row in enumerate(cells, start=1):
        t[i, 5].set_facecolor(VERDICT_COLOUR.get(row[5], "white"))
    counts = df["verdict"].value_counts().to_dict() if not df.empty else {}
    ax.set_title("Claims of Study A (arXiv 2606.19365) and Study B (arXiv 2607.05400) on "
                 f"{joined_labels(df[df['hardware'] != 'none']) if not df.empty else 'none'}: "
                 + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS), fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def aggregate(result_paths: list[str | Path], claims_paths: list[str | Path], sr3_reference: str | Path,
              out_dir: str | Path) -> pd.DataFrame:
    """Write ``claims.{csv,md,tex}`` and ``fig_claims.png`` into ``out_dir``; ``claims_paths``: Study A's, Study B's.

    Raises:
        ResultError: a missing or corrupt result (named); DataError: a bad claims or reference file.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = load_results(result_paths)
    claims = pd.concat([read_claims(p, s) for p, s in zip(claims_paths, ("A", "B"))], ignore_index=True)
    ref, _ = study_b_sr3.read_reference(sr3_reference)
    df = claims_table(results, claims, ref)
    write_table(df, out / "claims", "Published claims of Study A (arXiv 2606.19365) and Study B (arXiv 2607.05400) "
                "checked against each system's results: holds / does not hold / not measured here (why).")
    fig_claims(df, out / "fig_claims.png")
    return df
