"""Study B quantization aggregation (``accelbench study-b-quant-aggregate``): the table in Study B's layout (published
TinyLlama numbers beside ours), the per-layer sensitivity map of every system/model, and two figures.

Inputs are ``llm_quant`` result files (sensitivity and method jobs, any number of systems),
``study_b_quantization.csv`` (published numbers, with their source in its header lines) and, beside it,
``model_cards.csv`` (the scores the model cards publish for the models we run, with their source). Models are
labelled by name everywhere, from each result's record of what ran (``measurements.model``,
:func:`accelbench.aggregate.common.model_display`: e.g. ``SmolLM2-135M-Instruct (Q4_1-dequantized)``): the
published rows are TinyLlama-1.1B, ours whatever the config ran.
Accuracies stand beside their chance and majority-class baselines (:func:`.tables_cells.baseline_cells`) and the
model card's number. The evaluation's MFU is recomputed from the stored TFLOP/s against the peak of the compute dtype
(:func:`.tables_cells.mfu_cells`); what cannot be shown says why in ``flag``. Rows that did not run carry
``unsupported``/``OOM`` and the reason.

Claims (:data:`CLAIM_CHECKS`, for the claims table, :mod:`.tables_claims`): compression, perplexity increase and
layer sensitivity per (system, model); the quality ones need pretrained weights.

The parts, all torch-free: :mod:`.tables_cells` (columns, cells, baselines, MFU), :mod:`.tables_rows` (published,
measured and sensitivity rows), :mod:`.tables_figures` (the two figures), :mod:`.tables_claims` (the claim checks).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.common import csv_frame, load_results, write_table
from accelbench.core import tree
from accelbench.experiments.llm_quant.tables_cells import (
    COLUMNS,
    MODEL_CARDS,
    baseline_caveat,
    baseline_cells,
    baselines_caption,
    read_model_cards,
)
from accelbench.experiments.llm_quant.tables_claims import CLAIM_CHECKS
from accelbench.experiments.llm_quant.tables_figures import fig_layers, fig_submodules
from accelbench.experiments.llm_quant.tables_rows import (
    measured_rows,
    order_rows,
    read_reference,
    sensitivity_rows,
    submodule_rows,
)

__all__ = ["CLAIM_CHECKS", "aggregate"]


def aggregate(result_paths: list[str | Path], reference_path: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Write ``table.{csv,md,tex}``, ``sensitivity_layers.csv``, ``sensitivity_submodules.csv`` and the two figures.

    Raises:
        ResultError: a missing or corrupt result or reference file (named).
    """
    out_dir = tree.make_output_dir(out_dir)  # below <results>, following no link
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
    table = order_rows(
        pd.concat([measured_rows(results, cards), published.reindex(columns=COLUMNS)], ignore_index=True)
    )
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
        "validation calibration (Gaudi2 FP8). Measured rows: our models and text (see each result's provenance; "
        "eval_tokens says how much text). "
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
    with tree.open_output(out_dir / "sensitivity_layers.csv", "w", newline="") as fh:  # no link followed
        csv_frame(sens).to_csv(fh, index=False)
    sub = submodule_rows(results)
    with tree.open_output(out_dir / "sensitivity_submodules.csv", "w", newline="") as fh:
        csv_frame(sub).to_csv(fh, index=False)
    fig_layers(sens, out_dir / "fig_sensitivity_layers.png")
    fig_submodules(sub, out_dir / "fig_sensitivity_submodules.png")
    return {"table": out_dir / "table.csv", "sensitivity": out_dir / "sensitivity_layers.csv"}
