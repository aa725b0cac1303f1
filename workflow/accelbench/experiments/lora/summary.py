"""Study B LoRA: the result's measurements from the ranks' records (:func:`summarize`) and the labelled projection
of Study B's epoch (:func:`project_epoch`)."""

from __future__ import annotations

import math

from accelbench.experiments.lora.settings import LoraSettings, Plan
from accelbench.measure.flops import flops_per_token, throughput_and_mfu


def summarize(ranks: list[dict], plan: Plan, settings: LoraSettings, system, projection_cfg: dict) -> dict:
    """Combine per-rank measurements into the result's ``measurements``: step time Timing (per step the slowest rank,
    :func:`accelbench.measure.timing.merge_ranks`; each rank's own Timing under ``per_rank``, the largest median
    beside it), throughput, MFU, memory per rank, loss curve, held-out loss, and the labelled projection of Study B's
    epoch."""
    from accelbench.measure import clocks, energy
    from accelbench.measure import timing as measure

    ranks = sorted(ranks, key=lambda r: r["rank"])
    r0 = ranks[0]["measurements"]
    w = settings.warmup_steps
    per_rank = []
    for r in ranks:
        rm = r["measurements"]
        t = measure.Timing.from_samples(rm["step_samples_ms"][w:], warmup=w, method=rm["timing_method"])
        per_rank.append(
            {
                "rank": r["rank"],
                "step_median_ms": t.median,
                "peak_mem_gib": rm["peak_mem_gib"],
                "host_peak_rss_gib": rm["host_peak_rss_gib"],
                "timing": t.to_dict(),
                "threads": rm.get("threads"),
                "placement": rm.get("placement"),
                "setup_s": rm.get("setup_s"),
                "model_built_on": rm.get("model_built_on"),
            }
        )
    # the step time of the job, as for every multi-rank experiment: per step, the slowest rank (measure.merge_ranks)
    timing = measure.merge_ranks(
        [r["measurements"]["step_samples_ms"][w:] for r in ranks], w, r0["timing_method"]
    ).to_dict()
    slowest = max(p["step_median_ms"] for p in per_rank)
    world = plan.devices
    samples_per_step = settings.per_device_batch * settings.grad_accum * world
    tokens_per_step = samples_per_step * settings.seq_len
    info = r0["model"]
    fpt = flops_per_token(
        info["parameters"],
        r0["lora_parameters"]["trainable"],
        info["layers"] or 0,
        info["hidden_size"] or 0,
        settings.seq_len,
        r0.get("flop_counts"),
    )
    peak = system.peak_tflops.get(plan.precision)
    peak_total = peak * world if peak else None
    step_ms = timing["median"]
    mfu = {k: throughput_and_mfu(fpt[k] * tokens_per_step, step_ms, peak_total) for k in ("6n", "lora")}
    losses = r0["loss_curve"]
    k = max(1, len(losses) // 4)
    loss = {
        "per_step": losses,
        "first_mean": sum(losses[:k]) / k,
        "last_mean": sum(losses[-k:]) / k,
        "eval_before": r0["eval_loss_before"],
        "eval_after": r0["eval_loss_after"],
    }
    loss["eval_decreased"] = (loss["eval_after"] < loss["eval_before"]) if loss["eval_before"] is not None else None
    return {
        "strategy": plan.strategy,
        "devices": world,
        "attention": plan.attention,
        "attn_implementation": r0["attn_implementation"],
        "precision": plan.precision,
        "wrapped_as": r0.get("wrapped_as"),  # the model class Trainer trained (DDP/FSDP wrapper or the peft model)
        "distributed": r0.get("distributed"),  # accelerate's distributed type, process group, DDP's options as used
        "model": info,
        "lora_parameters": r0["lora_parameters"],
        "data": r0["data"],
        "step": timing,
        "step_slowest_rank_median_ms": slowest,
        "samples_per_step": samples_per_step,
        "tokens_per_step": tokens_per_step,
        "samples_per_s": samples_per_step / (step_ms / 1e3),
        "tokens_per_s": tokens_per_step / (step_ms / 1e3),
        "flops_per_token": fpt,
        "throughput_6n": mfu["6n"],
        "throughput_lora": mfu["lora"],
        "peak_tflops_per_device": peak,
        "per_rank": per_rank,
        "threads_per_rank": [p["threads"] for p in per_rank],
        "cudnn_benchmark": r0.get("cudnn_benchmark"),
        "trainer_settings": r0.get("trainer_settings"),  # what keeps host syncs out of the step; DDP options
        "peak_mem_gib_max": max((p["peak_mem_gib"] or 0) for p in per_rank) if r0["peak_mem_gib"] is not None else None,
        "host_peak_rss_gib_max": max(p["host_peak_rss_gib"] for p in per_rank),
        "loss": loss,
        "train_wall_s": r0["train_wall_s"],
        # where the (random-init) model was built, and each set-up phase's wall seconds, slowest rank (per rank above)
        "model_built_on": r0.get("model_built_on"),
        "setup_s": {k: max((p["setup_s"] or {}).get(k, 0.0) for p in per_rank) for k in (r0.get("setup_s") or {})},
        # the runtime series (faithful: Study B's job files; ours) with every setting it ran with, and
        # optimum-habana's train_runtime throughput over the same steps (rank 0's host clock)
        "series": r0.get("series"),
        "train_runtime": r0.get("train_runtime"),
        "loss_tolerance": (r0.get("series") or {}).get("loss_tolerance"),
        "projection": project_epoch(step_ms, tokens_per_step, settings.seq_len, projection_cfg),
        "notes": plan.notes,
        # the SM clock, temperature and clock-event reasons of the timed optimizer steps (accelbench.measure.clocks)
        "clocks": clocks.report({"step": clocks.merge_ranks([r["measurements"].get("clocks") for r in ranks])}, "step"),
        # board energy of the timed optimizer steps, summed over the job's devices (accelbench.measure.energy)
        "energy": energy.report(
            {"step": energy.merge_ranks([r["measurements"].get("energy") for r in ranks])},
            "step",
            {
                "token": ("step", tokens_per_step, "J/token", 1, "measured"),
                "step": ("step", 1, "J/optimizer step", 1, "measured"),
            },
            {"tokens_per_s_per_w": (tokens_per_step / (step_ms / 1e3), "step", "tokens/s/W")},
            step_ms=step_ms,
        ),
    }


def project_epoch(step_ms: float, tokens_per_step: int, seq_len: int, cfg: dict) -> dict:
    """Projected wall time of one epoch of Study B's dataset at the measured step time. A projection, not a
    measurement: ``steps = ceil(epoch_tokens / tokens_per_step)``; ``minutes = steps * step_ms / 60e3``.
    ``epoch_tokens`` = ``cfg["examples"] * cfg["tokens_per_example"]`` when both are set (else unknown: only
    minutes per million tokens are given)."""
    per_m = 1e6 / tokens_per_step * step_ms / 60e3
    out = {
        "label": "projection",
        "dataset": cfg.get("name"),
        "source": cfg.get("source"),
        "minutes_per_million_tokens": per_m,
        "seq_len": seq_len,
    }
    ex, tpe = cfg.get("examples"), cfg.get("tokens_per_example")
    if ex and tpe:
        tokens = ex * tpe
        steps = math.ceil(tokens / tokens_per_step)
        out.update(
            {
                "epoch_tokens": tokens,
                "steps": steps,
                "minutes": steps * step_ms / 60e3,
                "method": "ceil(examples * tokens_per_example / tokens_per_step) x median step time",
            }
        )
    else:
        out.update(
            {
                "epoch_tokens": None,
                "minutes": None,
                "method": "dataset size unknown (set lora_finetune.projection.examples and tokens_per_example)",
            }
        )
    return out
