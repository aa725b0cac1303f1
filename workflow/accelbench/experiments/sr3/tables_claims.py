"""Study B SR3 claims (:data:`CLAIM_CHECKS`, for the claims table; read through :mod:`.tables`): strong-scaling
efficiency per system (:func:`_observations`), and the cross-system 1-device throughput order against the published
times (:func:`throughput_order_row`). Torch-free."""

from __future__ import annotations

import pandas as pd

from accelbench import backends
from accelbench.aggregate import scope
from accelbench.aggregate.claims import (
    ClaimInputs,
    NotMeasured,
    Observation,
    claim_cells,
    class_ratio_row,
    per_system_rows,
)
from accelbench.aggregate.common import joined_labels, noise_why
from accelbench.errors import DataError
from accelbench.experiments.sr3 import configs as sr3_configs
from accelbench.experiments.sr3.tables_rows import read_reference, result_rows


def _observations(claim: pd.Series, df: pd.DataFrame, res: dict) -> list[Observation]:
    """Observations of one scaling claim on one system: ``df`` its rows of :func:`result_rows`, ``res`` its results
    by (precision, devices)."""
    mine = select_configuration(df, claim["selector"], multi_device=True)
    multi = mine[mine["devices"] > 1]
    if multi.empty:
        raise NotMeasured(
            f"no {claim['selector']} run on more than one device (config sr3_scaling.configurations, "
            "sr3_scaling.devices)"
        )
    ok = (
        multi[(multi["status"] == "ok") & multi["efficiency_vs_1"].notna()] if "efficiency_vs_1" in multi else multi[:0]
    )
    if ok.empty:
        r = multi.iloc[0]
        raise NotMeasured(
            f"{r['devices']} devices: {r['status']} ({r['reason']})"
            if r["status"] != "ok"
            else "no 1-device run to compare with"
        )
    return [
        Observation(
            float(r["efficiency_vs_1"]),
            f"{r['configuration']} ({sr3_configs.SERIES[r['series']]}) "
            f"{r['devices']} devices: efficiency "
            f"{r['efficiency_vs_1']:.2f} (iteration {r['iteration_ms']:.1f} ms)",
            used := [res[k] for k in [(r["configuration"], r["devices"]), (r["configuration"], 1)] if k in res],
            key=str(int(r["devices"])),
            setting=setting_of_run(used, r.get("scale")),
        )
        for _, r in ok.iterrows()
    ]


def setting_of_run(results: list[dict], scale) -> dict[str, str]:
    """What an SR3 point was measured on, for a claim's ``setting``: ``device`` (``accelerator`` for a GPU or Gaudi,
    else the backend, e.g. ``cpu``: from the results' recorded backend) and ``scale`` (``paper`` / ``small``: the
    network and image size of the system file's scale)."""
    kinds = set()
    for r in results:
        backend = ((r.get("environment") or {}).get("hardware") or {}).get("backend")
        ops = backends.lookup(backend)
        kinds.add("accelerator" if ops is not None and ops.accelerator else str(backend or "(not recorded)"))
    return {"device": " + ".join(sorted(kinds)) or "(not recorded)", "scale": str(scale or "(not recorded)")}


def throughput_order_row(claim: pd.Series, sr3: pd.DataFrame, sr3_reference: pd.DataFrame, noise: dict) -> dict:
    """The cross-system claim: measured 1-device throughput order of the claim's ``hardware`` classes vs. the
    published (a system counts as the class the scope policy gives it, :mod:`accelbench.aggregate.scope`).
    ``noise``: why a result is noisy, by (system, precision, devices)."""
    tokens = scope.claim_classes(claim["hardware"])
    pub = sr3_reference[(sr3_reference["devices"] == 1) & sr3_reference["system"].isin(tokens)]
    pub_order = list(pub.sort_values("minutes")["system"])
    measured = {}
    ok = sr3[(sr3["status"] == "ok") & (sr3["devices"] == 1)] if not sr3.empty else sr3
    for _, g in ok.groupby("system") if not ok.empty else []:
        for _, r in select_configuration(g, claim["selector"]).iterrows():
            cls, by_policy = scope.class_of(r["hardware"], claim["quantity"])
            if cls not in tokens or (by_policy and cls in measured and not measured[cls][3]):
                continue  # a device of the class itself (an H100) outranks one counted by policy (an H200)
            measured[cls] = (
                r["images_per_s"],
                f"{r['hardware']} ({r['configuration']})",
                (r["system"], r["configuration"], r["devices"]),
                bool(by_policy),
            )
    base = {
        **claim_cells(claim),
        "system": ", ".join(sorted(set(sr3["system"]))) if not sr3.empty else "(none)",
        "hardware": "; ".join(v[1] for v in measured.values()) or (joined_labels(sr3) if not sr3.empty else "none"),
    }
    if len(measured) < 2:
        return {
            **base,
            "measured": ", ".join(f"{_on(t, v)}: {v[0]:.3g} images/s" for t, v in measured.items()) or "",
            "verdict": "not measured here",
            "why": f"needs 1-device {claim['selector']} SR3 results of at least two of {', '.join(tokens)} "
            f"(found: {', '.join(measured) or 'none'}); copy their results/<system>/ folders here",
        }
    why_noisy = [w for k in (v[2] for v in measured.values()) if (w := noise.get(k))]
    order = sorted(measured, key=lambda t: -measured[t][0])
    expected = [t for t in pub_order if t in measured]
    text = " > ".join(f"{_on(t, measured[t])} {measured[t][0]:.3g} img/s" for t in order)
    if why_noisy:
        return {
            **base,
            "measured": text,
            "verdict": "not measured here",
            "why": "not measured reliably: result flagged noisy (" + why_noisy[0] + ")",
        }
    holds = order == expected
    missing = [t for t in tokens if t not in measured]
    verdict = (
        "does not hold"
        if not holds
        else "holds"
        if not missing
        else f"partly measured ({len(measured)} of {len(tokens)})"
    )
    return {
        **base,
        "measured": text,
        "verdict": verdict,
        "why": f"published order {' > '.join(expected)}; measured {' > '.join(order)}"
        + (f"; missing {', '.join(missing)}" if missing else ""),
    }


def _on(cls: str, point: tuple) -> str:
    """``h100 (measured on NVIDIA H200 (1x, 139.8 GiB))``: the class a point counts as and the device that measured
    it, so a value counted by the scope policy never reads as the class's own device."""
    return f"{cls} (measured on {scope.device_part(point[1].rsplit(' (', 1)[0])})"


def _claim_key(r: dict) -> tuple:
    """Identity of a result inside its system's group: (configuration, devices)."""
    return sr3_configs.of_result(r).name, int(r["config"]["devices"])


def select_configuration(df: pd.DataFrame, selector: str | None, multi_device: bool = False) -> pd.DataFrame:
    """The rows of the first configuration in ``selector`` (``"faithful|fp32"``: the faithful series where it was run,
    else the paper-text one; the chosen name is in each row) that has ok results (on more than one device with
    ``multi_device``); all rows without a selector."""
    if not selector or df.empty:
        return df
    names = [n.strip() for n in str(selector).split("|") if n.strip()]
    for name in names:
        rows = df[df["configuration"] == name]
        ok = rows[rows["status"] == "ok"]
        if len(ok[ok["devices"] > 1] if multi_device else ok):
            return rows
    return df[df["configuration"] == names[0]] if names else df


def _claim_rows(claim: pd.Series, inputs: ClaimInputs) -> list[dict]:
    """The claims-table rows of one sr3_scaling claim: one per system, or one row across systems for the
    throughput order (against the published SR3 times, the experiment's published file in the claims table's
    ``published``)."""
    exp = claim["experiment"]
    group = inputs.of(exp)
    if claim["quantity"] == "throughput_order":
        if "sr3_scaling" not in inputs.published:
            raise DataError(
                f"claim {claim['claim_id']}: the throughput order needs Study B's published SR3 times "
                "(study_b_sr3_scaling.csv)"
            )
        noise = {(r["config"]["system"]["name"], *_claim_key(r)): w for r in group if (w := noise_why(r))}
        ref, _ = read_reference(inputs.published["sr3_scaling"])
        return [throughput_order_row(claim, inputs.rows(result_rows, exp), ref, noise)]
    if claim["quantity"] == "generation_speedup_x":
        return [generation_row(claim, inputs.rows(result_rows, exp))]
    return per_system_rows(claim, inputs, result_rows, _claim_key, _observations)


def generation_row(claim: pd.Series, sr3: pd.DataFrame) -> dict:
    """A cross-generation SR3 speedup claim (:func:`accelbench.aggregate.claims.class_ratio_row`) from the 1-device
    iteration times of the ``faithful|fp32`` series of each system, at paper scale on an accelerator."""
    points = []
    ok = sr3[(sr3["status"] == "ok") & (sr3["devices"] == 1)] if not sr3.empty else sr3
    for _, g in ok.groupby("system") if not ok.empty else []:
        for _, r in select_configuration(g, "faithful|fp32").iterrows():
            if r["status"] == "ok" and str(r.get("scale")) == "paper":
                cls = scope.class_of(r["hardware"], claim["quantity"])[0]
                points.append((cls, r["hardware"], "1 device", float(r["iteration_ms"])))
    return class_ratio_row(claim, points, ", ".join(sorted(set(sr3["system"]))) if not sr3.empty else "(none)")


CLAIM_CHECKS = {"sr3_scaling": _claim_rows}
