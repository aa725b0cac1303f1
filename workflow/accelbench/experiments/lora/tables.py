"""Study B LoRA aggregation: the run table, the flash-attention / sharding table, and the runtime-vs-devices figure.

Inputs are ``lora_finetune`` result files from any number of systems plus the published series
(``study_b_finetune_runtime.csv``: minutes per epoch read off Study B's Fig. 2, approximate). Hardware labels come
from each result's provenance, with the devices the job used (pairs match on them, not on the devices visible on the
node); rows that did not run carry ``OOM``/``unsupported`` and the reason. An ok row whose result lacks the model's
parameter count (0 or absent) shows no MFU-6N (6N needs N) and says so in ``reason``.

Definitions (same for ours and the published series):
  * flash-attention gain = time(eager) / time(flash) - 1 at equal system, model, strategy and devices;
  * sharding slowdown = time(fsdp or zero3) / time(ddp) at equal system, model, attention and devices
    (single-device runs stand in for 1-device DDP).
Ours use the median optimizer-step time; the published ones the epoch minutes.

Series: ``faithful`` (Study B's job files' runtime) and ``ours`` (the fastest honest step), both in every table
(column ``series``); an ours row says whether its loss curve stays within its recorded tolerance of the faithful run
at the same setting (``loss_vs_faithful``, :func:`loss_check`). The claims read the faithful series
(:func:`claim_series`).

Claims (:data:`CLAIM_CHECKS`, for the claims table): the flash-attention gain (pairs within their timing spread left
unresolved), the sharding slowdown (its direction only, :data:`DIRECTION_ONLY`) and OOM without sharding, per system.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from accelbench.aggregate.claims import ClaimInputs, NotMeasured, Observation, per_system_rows
from accelbench.aggregate.common import load_results, model_display, noise_cell, status_cell, write_table
from accelbench.aggregate.figures import FONT, origin_of, published, save_figure, series_label, wrap
from accelbench.errors import DataError

DEVICE_COLUMNS = ["1", "2", "4", "6", "8"]
# results written before the series existed (issue 25) ran the no-sync runtime with a constant_with_warmup schedule
OLD_SERIES = "ours (before issue 25)"
DEFAULT_LOSS_TOLERANCE = 0.02  # only for ours results that did not record theirs (lora_finetune.ours.loss_tolerance)
# an ok result whose model.parameters is 0 or absent (e.g. counted after ZeRO-3 partitioned the weights, before
# parameters were counted by ds_numel): its MFU-6N cell stays empty and the row says why
PARAMS_MISSING = "MFU-6N not shown: parameters not recorded in the result"


def read_reference(path: str | Path) -> pd.DataFrame:
    """Published series in long form: ``series, model, accelerator, strategy, flash_attention, devices, minutes``.

    Raises:
        DataError: the file is missing or lacks the expected columns.
    """
    try:
        wide = pd.read_csv(path, comment="#")
    except FileNotFoundError:
        raise DataError(f"published LoRA runtimes not found: {path}") from None
    need = {"series", "model", "accelerator", "strategy", "flash_attention", *DEVICE_COLUMNS}
    if not need <= set(wide.columns):
        raise DataError(f"{path}: expected columns {sorted(need)}, found {list(wide.columns)}")
    long = wide.melt(
        id_vars=["series", "model", "accelerator", "strategy", "flash_attention"],
        value_vars=DEVICE_COLUMNS,
        var_name="devices",
        value_name="minutes",
    ).dropna(subset=["minutes"])
    long["devices"] = long["devices"].astype(int)
    long["flash_attention"] = long["flash_attention"].astype(str).str.lower() == "true"
    long["strategy"] = long["strategy"].replace({"deepspeed_zero3": "zero3"})
    return long.reset_index(drop=True)


def source_line(path: str | Path) -> str:
    """The first comment line of the reference file (its source)."""
    for line in Path(path).read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return str(path)


def result_rows(results: list[dict]) -> pd.DataFrame:
    """One row per result. Times in ms, memory in GiB, throughput in samples/s and tokens/s."""
    rows = []
    for r in results:
        cfg, m = r["config"], r["measurements"]
        row = {
            "system": cfg["system"]["name"],
            "hardware": r["_hardware"],
            "device": r.get("_device", r["_hardware"]),
            "software": r["_software"],
            "model": cfg["model_name"],
            "family": cfg.get("family", cfg["model_name"]),
            # what ran, from the result's record (e.g. "SmolLM2-135M-Instruct (Q4_1-dequantized)")
            "model_name": model_display(r, cfg.get("family")),
            "attention": cfg["attention"],
            "strategy": cfg["strategy"],
            "devices": int(cfg["devices"]),
            "series": cfg.get("series", OLD_SERIES),
            "status": r["status"],
            "reason": r.get("reason"),
            "origin": origin_of(r),
            "scale": cfg["system"].get("scale"),
            "noise": noise_cell(r),
        }
        if r["status"] == "ok":
            proj = m["projection"]
            row.update(
                {
                    "weights": m["model"].get("weights"),
                    "attn_implementation": m["attn_implementation"],
                    "precision": m["precision"],
                    "seq_len": m["data"]["seq_len"],
                    # why bf16 became fp32 (a system or a CPU without native bf16, issue 42), as a footnote
                    "precision_note": "; ".join(n for n in m.get("notes") or () if "fp32 used" in n) or None,
                    "step_ms": m["step"]["median"],
                    "step_p10_ms": m["step"]["p10"],
                    "step_p90_ms": m["step"]["p90"],
                    "timed_steps": m["step"]["count"],
                    "slowest_rank_step_ms": m["step_slowest_rank_median_ms"],
                    "samples_per_s": m["samples_per_s"],
                    "tokens_per_s": m["tokens_per_s"],
                    "peak_mem_gib": m.get("peak_mem_gib_max"),
                    "host_peak_rss_gib": m.get("host_peak_rss_gib_max"),
                    "mfu_6n": m["throughput_6n"]["mfu"],
                    "tflop_per_s_6n": m["throughput_6n"]["tflop_per_s"],
                    "mfu_lora": m.get("throughput_lora", {}).get("mfu"),
                    "trainable_params": m["lora_parameters"]["trainable"],
                    "params": m["model"].get("parameters"),
                    "loss_first": m["loss"]["first_mean"],
                    "loss_last": m["loss"]["last_mean"],
                    "eval_loss_before": m["loss"]["eval_before"],
                    "eval_loss_after": m["loss"]["eval_after"],
                    "projected_min_per_mtok": proj["minutes_per_million_tokens"],
                    "projected_epoch_min": proj.get("minutes"),
                    "train_runtime_ms_per_step": (m.get("train_runtime") or {}).get("ms_per_step"),
                    "loss_per_step": m["loss"].get("per_step"),
                    "loss_tolerance": m.get("loss_tolerance"),
                }
            )
            if not m["model"].get("parameters"):  # 6N needs N: without it MFU-6N is wrong, not small
                row.update({"mfu_6n": None, "tflop_per_s_6n": None, "reason": PARAMS_MISSING})
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values(["system", "family", "strategy", "attention", "devices", "series"]).reset_index(drop=True)
        df["loss_vs_faithful"] = loss_check(df)
    return df


def loss_check(df: pd.DataFrame) -> list:
    """Per row: for an ``ours`` run (or a variant ``ours_<name>``), whether its loss curve stays within its recorded relative tolerance of the faithful
    run at equal system, model, attention, strategy and devices over the steps both ran (``within 1.3% <= 2%`` /
    ``beyond ...``), else None. Both series train the same model on the same data with the same seed and
    hyper-parameters, so the curves differ only by the kernels' and the reduction order's rounding."""
    out = []
    key = ["system", "family", "attention", "strategy", "devices"]
    faithful = {
        tuple(r[k] for k in key): r for _, r in df[(df["series"] == "faithful") & (df["status"] == "ok")].iterrows()
    }
    for _, r in df.iterrows():
        f = faithful.get(tuple(r[k] for k in key))
        ours = r["series"] == "ours" or str(r["series"]).startswith("ours_")
        if not ours or r["status"] != "ok" or f is None or not isinstance(r.get("loss_per_step"), list):
            out.append(None)
            continue
        n = min(len(r["loss_per_step"]), len(f["loss_per_step"]))
        tol = r.get("loss_tolerance") or DEFAULT_LOSS_TOLERANCE
        worst = max(
            (abs(a - b) / abs(b) for a, b in zip(r["loss_per_step"][:n], f["loss_per_step"][:n]) if b), default=None
        )
        out.append(
            None
            if worst is None
            else f"{'within' if worst <= tol else 'beyond'} {100 * worst:.2f}% {'<=' if worst <= tol else '>'} "
            f"{100 * tol:g}% over {n} steps"
        )
    return out


def runs_table(df: pd.DataFrame) -> pd.DataFrame:
    """The run table with ``OOM``/``unsupported`` in place of numbers for cases that did not run."""
    cols = [
        "hardware",
        "family",
        "model_name",
        "weights",
        "series",
        "attention",
        "attn_implementation",
        "strategy",
        "devices",
        "precision",
        "precision_note",
        "seq_len",
        "step_ms",
        "step_p10_ms",
        "step_p90_ms",
        "train_runtime_ms_per_step",
        "samples_per_s",
        "tokens_per_s",
        "peak_mem_gib",
        "host_peak_rss_gib",
        "mfu_lora",
        "mfu_6n",
        "eval_loss_before",
        "eval_loss_after",
        "loss_vs_faithful",
        "projected_min_per_mtok",
        "projected_epoch_min",
        "noise",
        "status",
        "reason",
    ]
    out = df.reindex(columns=cols).astype(object)
    for i, status in enumerate(df["status"]):
        if status != "ok":
            out.loc[i, "step_ms"] = status_cell({"status": status})
    return out


def _pairs(df: pd.DataFrame, value: str, key: list[str], vary: str, num: str, den: str) -> list[dict]:
    rows = []
    for k, g in df.groupby(key):
        vals = dict(zip(g[vary], g[value]))
        if num in vals and den in vals and pd.notna(vals[num]) and pd.notna(vals[den]) and vals[den] > 0:
            rows.append({**dict(zip(key, k)), "ratio": vals[num] / vals[den]})
    return rows


def _series_style(series: str) -> str:
    """Line style of a LoRA series in the figure: faithful solid, ours dotted, each other ours variant its own."""
    styles = {"faithful": "-", "ours": ":"}
    others = ["-.", "--"]  # format strings (ax.plot) and line styles (Line2D) both
    return styles.get(series, others[sum(map(ord, str(series))) % len(others)])


def gains_table(ours: pd.DataFrame, ref: pd.DataFrame, ref_source: str) -> pd.DataFrame:
    """Flash-attention gain and sharding slowdown, ours (median step time) beside the published (epoch minutes)."""
    rows = []
    ok = ours[ours["status"] == "ok"].copy() if not ours.empty else ours
    if not ok.empty:
        ok["strategy_ddp"] = ok["strategy"].replace({"single": "ddp"})
        for p in _pairs(
            ok, "step_ms", ["series", "hardware", "family", "strategy", "devices"], "attention", "eager", "flash"
        ):
            rows.append(
                {
                    "source": p["series"],
                    "hardware": p["hardware"],
                    "family": p["family"],
                    "metric": "flash_gain",
                    "strategy": p["strategy"],
                    "devices": p["devices"],
                    "value": p["ratio"] - 1,
                }
            )
        for sharded in ("fsdp", "zero3"):
            for p in _pairs(
                ok, "step_ms", ["series", "hardware", "family", "attention", "devices"], "strategy_ddp", sharded, "ddp"
            ):
                rows.append(
                    {
                        "source": p["series"],
                        "hardware": p["hardware"],
                        "family": p["family"],
                        "metric": f"{sharded}_slowdown_vs_ddp",
                        "strategy": sharded,
                        "devices": p["devices"],
                        "value": p["ratio"],
                    }
                )
        for row in rows:
            sel = ok[
                (ok["hardware"] == row["hardware"])
                & (ok["family"] == row["family"])
                & (ok["devices"] == row["devices"])
                & (ok["series"] == row["source"])
            ]
            flags = set(sel["noise"].dropna())  # the runs the row compares
            row["noise"] = "noisy" if "noisy" in flags else ("quiet" if flags else None)
    r = ref.copy()
    r["attention"] = r["flash_attention"].map({True: "flash", False: "eager"})
    for p in _pairs(r, "minutes", ["accelerator", "model", "strategy", "devices"], "attention", "eager", "flash"):
        rows.append(
            {
                "source": "published (approx.)",
                "hardware": p["accelerator"],
                "family": p["model"],
                "metric": "flash_gain",
                "strategy": p["strategy"],
                "devices": p["devices"],
                "value": p["ratio"] - 1,
            }
        )
    for sharded in ("fsdp", "zero3"):
        for p in _pairs(r, "minutes", ["accelerator", "model", "attention", "devices"], "strategy", sharded, "ddp"):
            rows.append(
                {
                    "source": "published (approx.)",
                    "hardware": p["accelerator"],
                    "family": p["model"],
                    "metric": f"{sharded}_slowdown_vs_ddp",
                    "strategy": sharded,
                    "devices": p["devices"],
                    "value": p["ratio"],
                }
            )
    out = pd.DataFrame(
        rows, columns=["source", "hardware", "family", "metric", "strategy", "devices", "value", "noise"]
    )
    # the gain in percent (one decimal in the shown tables, so -0.0026 reads -0.3, not -0.00); CSV: full precision
    out.insert(
        out.columns.get_loc("value") + 1,
        "flash_gain_pct",
        (100 * out["value"]).where(out["metric"] == "flash_gain").astype(float),
    )
    return out


PUBLISHED_MARKERS = "o^vD<>"
MEASURED_MARKERS = "sPX*hp"


def runtime_figure(ours: pd.DataFrame, ref: pd.DataFrame, path: str | Path, ref_source: str) -> list[str]:
    """Runtime vs. devices, one row of panels per model family. Left: wall time per epoch (min), the published
    series (dashed) and ours where the epoch size is known (projected epoch minutes: the same quantity on the same
    axis, solid). Right, only where ours lack the epoch size: ours in minutes per million training tokens (another
    quantity, its own axis, said in the title). Colour: strategy and attention (the same in every panel); marker:
    the hardware of the series (published Gaudi generations, ours by origin and device); one legend for the figure,
    each entry once. Returns the figure's problems (:func:`figures.figure_problems`)."""
    from matplotlib.lines import Line2D

    ok = ours[ours["status"] == "ok"] if not ours.empty else ours
    ref = ref.assign(attention=ref["flash_attention"].map(lambda f: "flash" if f else "eager"))
    fams = list(dict.fromkeys(list(ref["model"]) + (list(ok["family"]) if not ok.empty else [])))
    combos = list(
        dict.fromkeys(
            [(s, a) for s, a in zip(ref["strategy"], ref["attention"])]
            + ([(s, a) for s, a in zip(ok["strategy"], ok["attention"])] if not ok.empty else [])
        )
    )
    colour = {c: f"C{i % 10}" for i, c in enumerate(combos)}
    pub_hw = list(dict.fromkeys(ref["accelerator"]))
    pub_marker = {h: PUBLISHED_MARKERS[i % len(PUBLISHED_MARKERS)] for i, h in enumerate(pub_hw)}
    ours_keys = list(dict.fromkeys(zip(ok["origin"], ok["device"], ok["scale"]))) if not ok.empty else []
    our_marker = {k: MEASURED_MARKERS[i % len(MEASURED_MARKERS)] for i, k in enumerate(ours_keys)}
    per_tok_any = not ok.empty and ok["projected_epoch_min"].isna().any()
    ncols = 2 if per_tok_any else 1
    fig, axes = plt.subplots(
        max(1, len(fams)), ncols, figsize=(5.6 * ncols, 2.9 * max(1, len(fams)) + 1.6), squeeze=False
    )
    used_combos, used_pub, used_ours, used_series = set(), set(), set(), set()
    for row, fam in enumerate(fams):
        mine = ok[ok["family"] == fam] if not ok.empty else ok
        ax_e = axes[row, 0]
        pub = ref[ref["model"] == fam]
        xs_e: set = set()
        for _, g in pub.groupby("series", sort=False):
            g = g.sort_values("devices")
            key = (g["strategy"].iloc[0], g["attention"].iloc[0])
            hw = g["accelerator"].iloc[0]
            ax_e.plot(g["devices"], g["minutes"], "--", marker=pub_marker[hw], ms=4, color=colour[key], alpha=0.8)
            used_combos.add(key)
            used_pub.add(hw)
            xs_e |= set(g["devices"])
        epoch = mine[mine["projected_epoch_min"].notna()] if not mine.empty else mine
        per_tok = mine[mine["projected_epoch_min"].isna()] if not mine.empty else mine
        for d, ax, col, xs in (
            (epoch, ax_e, "projected_epoch_min", xs_e),
            (per_tok, axes[row, 1] if ncols > 1 else None, "projected_min_per_mtok", set()),
        ):
            if ax is None or d.empty:
                continue
            d = d.assign(series=d["series"].fillna("faithful")) if "series" in d else d.assign(series="faithful")
            for (strat, att, origin, hw, scale, ser), g in d.groupby(
                ["strategy", "attention", "origin", "device", "scale", "series"]
            ):
                g = g.sort_values("devices")
                ax.plot(
                    g["devices"],
                    g[col],
                    _series_style(ser),
                    marker=our_marker[(origin, hw, scale)],
                    ms=6,
                    lw=1.8,
                    color=colour[(strat, att)],
                )
                used_series.add(ser)
                used_combos.add((strat, att))
                used_ours.add((origin, hw, scale))
                xs |= set(g["devices"])
            if ax is not ax_e:
                ax.set_title(f"{fam}: ours, per million tokens (epoch size unknown)", fontsize=FONT["label"])
                ax.set_ylabel("time per 1M training tokens\n(min, projected)")
                ax.set_xlabel("devices (count)")
                ax.set_xticks(sorted(xs))
                ax.grid(alpha=0.3)
        if ax_e.get_lines():
            ax_e.set_title(
                f"{fam}: wall time per epoch" + (" (published)" if epoch.empty else ""), fontsize=FONT["label"]
            )
            ax_e.set_ylabel("wall time per epoch (min)")
            ax_e.set_xlabel("devices (count)")
            ax_e.set_xticks(sorted(xs_e))
            ax_e.grid(alpha=0.3)
    for ax in list(axes.flat):  # no empty panel
        if not ax.get_lines():
            ax.remove()
    handles = [
        Line2D([], [], color=colour[c], lw=2, label=f"{c[0]}, {c[1]} attention") for c in combos if c in used_combos
    ]
    src = "Study B, Fig. 2, read off"
    handles += [
        Line2D(
            [],
            [],
            color="k",
            ls="--",
            marker=pub_marker[h],
            ms=5,
            label=series_label(published(src), h.capitalize(), "paper"),
        )
        for h in pub_hw
        if h in used_pub
    ]
    handles += [
        Line2D(
            [],
            [],
            color="k",
            ls="-",
            marker=our_marker[k],
            ms=6,
            label=series_label(k[0], k[1], k[2], "projected from the median step"),
        )
        for k in ours_keys
        if k in used_ours
    ]
    if len(used_series) > 1:  # ours in two series (issue 25): the line style tells them apart
        handles += [
            Line2D([], [], color="0.4", ls=_series_style(ser), lw=1.8, label=f"our runs, series: {ser}")
            for ser in sorted(used_series)
        ]
    if handles:
        fig.legend(
            handles=handles,
            fontsize=FONT["legend"] + 1,
            loc="lower left",
            bbox_to_anchor=(0.01, 0.01),
            ncol=2 if ncols > 1 else 1,
        )
    rows = (len(handles) + 1) // (2 if ncols > 1 else 1)
    fig.suptitle(
        wrap(
            f"Study B LoRA fine-tuning runtime vs. devices. Published series: {ref_source.rstrip(':')}",
            fig,
            FONT["title"],
        ),
        fontsize=FONT["title"],
    )
    fig.tight_layout(rect=(0, min(0.5, (0.2 * rows + 0.3) / fig.get_figheight()), 1, 1))
    return save_figure(fig, path, dpi=130)


# --------------------------------------------------------------------------- claims
# Claims whose check is the direction only (sharded slower than DDP: x >= 1); the published magnitude is shown, not
# judged.
DIRECTION_ONLY = {"fsdp_slowdown_vs_ddp", "zero3_slowdown_vs_ddp"}
# quantities that do not depend on timing (OOM): still judged on a noisy result
TIMING_FREE = {"oom_without_sharding"}


def _observations(claim: pd.Series, df: pd.DataFrame, res: dict) -> list[Observation]:
    """Observations of one lora_finetune claim on one system: ``df`` its rows of :func:`result_rows`, ``res`` its
    results by (family, attention, strategy, devices)."""
    q = claim["quantity"]
    df, prefix = claim_series(df)
    ok = df[df["status"] == "ok"].copy()
    ok["strategy_ddp"] = ok["strategy"].replace({"single": "ddp"})

    def used(g):
        return [
            res[k]
            for k in (
                (f, a, s, n, se)
                for f, a, s, n, se in zip(g["family"], g["attention"], g["strategy"], g["devices"], g["series"])
            )
            if k in res
        ]

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
                obs.append(
                    Observation(
                        v,
                        prefix + f"{fam} {label} n={n}: eager {t['eager']:.0f} ms "
                        f"(p10-p90 {e_lo:.0f}-{e_hi:.0f}), flash {t['flash']:.0f} ms "
                        f"({f_lo:.0f}-{f_hi:.0f}): {v:+.1f}%"
                        + (" (the p10-p90 spreads overlap: unresolved)" if overlap else ""),
                        used(g),
                        unresolved=overlap,
                        key=f"{fam}/{n}",
                    )
                )
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
                obs.append(
                    Observation(
                        v,
                        prefix + f"{fam} {att} n={n}: {sharded} {t[sharded]:.0f} ms / DDP {t['ddp']:.0f} ms = {v:.2f}x",
                        used(g),
                        key=f"{fam}/{n}",
                    )
                )
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
            obs.append(
                Observation(
                    not fits.empty,
                    prefix
                    + f"{fam}: OOM with {', '.join(sorted(set(unsharded_oom['strategy'])))}; sharded "
                    + (
                        ", ".join(f"{s} n={n} ok" for s, n in zip(fits["strategy"], fits["devices"]))
                        or "runs: " + ", ".join(sorted(set(sharded["status"])))
                    ),
                    used(g),
                    key=fam,
                )
            )
        if not obs:
            raise NotMeasured(
                "no model ran out of memory without sharding here (with sharded runs beside it): "
                "add a model that does not fit one device (e.g. llama33_70b) to lora_finetune.models"
            )
        return obs
    raise DataError(f"claim {claim['claim_id']}: unknown quantity {q!r}")


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
    """The claims-table rows of one lora_finetune claim: one per system."""
    return per_system_rows(
        claim, inputs, result_rows, _claim_key, _observations, timing_free=TIMING_FREE, direction_only=DIRECTION_ONLY
    )


CLAIM_CHECKS = {"lora_finetune": _claim_rows}


def aggregate(result_paths: list[str], reference_path: str, out_dir: str | Path) -> dict:
    """Write ``runs.{csv,md,tex}``, ``gains.{csv,md,tex}`` and ``fig_runtime_vs_devices.png`` into ``out_dir``.

    Raises:
        ResultError: a corrupt result file (named); DataError: a bad reference file.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = [r for r in load_results(result_paths) if r["experiment"] == "lora_finetune"]
    df = result_rows(results)
    ref = read_reference(reference_path)
    src = source_line(reference_path)
    write_table(
        runs_table(df),
        out / "runs",
        "Study B LoRA fine-tuning runs (times in ms per optimizer step; projections labelled projected_*)",
    )
    gains = gains_table(df, ref, src)
    write_table(
        gains,
        out / "gains",
        "Flash-attention gain (eager/flash - 1, at equal strategy and devices; "
        "flash_gain_pct = 100 x gain) and "
        "sharding slowdown (sharded/DDP; a single-device run stands in for 1-device DDP), ours (median step "
        f"time; noise 'noisy' = not measured reliably) and published (epoch minutes). Published: {src.rstrip(':')}",
        empty="No pair of runs to compare.",
    )
    runtime_figure(df, ref, out / "fig_runtime_vs_devices.png", src)
    return {"runs": len(df), "gains": len(gains)}
