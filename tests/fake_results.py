"""Hand-made result objects of every experiment, written through the real writers (``results.make_result`` with the
provenance of ``provenance.collect``), with the fields the aggregations read. Used by the schema and claims tests;
``tests/unit/test_validate.py`` checks that each of them matches its schema, so they cannot drift from the schemas."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

from accelbench.core import provenance, results
from accelbench.measure.timing import Timing

SYSTEMS = {
    "cpu": {"name": "cpu", "backend": "cpu", "devices": 1, "scale": "small"},
    "h100": {"name": "h100", "backend": "cuda", "devices": 8, "scale": "paper"},
    "a100": {"name": "a100", "backend": "cuda", "devices": 8, "scale": "paper"},
    "h200": {"name": "h200", "backend": "cuda", "devices": 8, "scale": "paper"},
    "gaudi2": {"name": "gaudi2", "backend": "hpu", "devices": 8, "scale": "paper"},
}
DEVICE_NAMES = {
    "h100": "NVIDIA H100 80GB HBM3",
    "a100": "NVIDIA A100-SXM4-80GB",
    "h200": "NVIDIA H200",
    "gaudi2": "Intel Gaudi2 (HL-225)",
}


def timing(median: float, n: int = 3) -> dict:
    return Timing.from_samples([median * f for f in (0.98, 1.0, 1.02)][:n], warmup=1, method="test").to_dict()


@cache
def _collected(system: str) -> str:
    return json.dumps(provenance.collect("cpu", SYSTEMS[system], {}))


def _environment(system: str) -> dict:
    env = json.loads(_collected(system))  # the real provenance, collected once per system
    if system in DEVICE_NAMES:
        env["hardware"].update(
            backend=SYSTEMS[system]["backend"], device_name=DEVICE_NAMES[system], device_count=8, device_memory_gib=79.1
        )
    return env


def result(
    experiment: str,
    system: str,
    config: dict,
    measurements: dict | None = None,
    status: str = "ok",
    reason: str | None = None,
) -> dict:
    cfg = {"system": SYSTEMS[system], **config}
    return results.make_result(experiment, status, cfg, _environment(system), measurements or {}, reason)


def unet3d(
    system: str, configuration: str, step_ms: float = 100.0, status: str = "ok", reason=None, conv_share: float = 0.6
) -> dict:
    m = None
    if status == "ok":
        shares = {"convolution": conv_share, "gemm": 0.1, "normalization": 0.1, "elementwise": 0.9 - conv_share - 0.1}
        m = {
            "train_step": timing(step_ms),
            "sample_step": timing(step_ms / 3),
            "sample_projection": {"label": "projection", "steps": 250, "seconds": step_ms / 3 * 0.25},
            "peak_mem_gib": 1.0,
            "flops": {"train_step": 1e9, "forward": 3e8},
            "train_throughput": {"tflop_per_s": 0.01, "mfu": None},
            "kernels": {
                "source": "cpu",
                "steps": 1,
                "kernel_count": 120.0,
                "distinct_kernels": 10,
                "device_time_us": step_ms * 1e3,
                "span_us": step_ms * 1e3,
                "idle_fraction": 0.0,
                "class_time_us": {},
                "class_share": shares,
                "tensor_core_share": 0.0,
                "layout_conversion_count": 4.0 if "channels_last" in configuration else 0.0,
                "table": [],
            },
            "quality": {"holds": True, "predicted_noise": {"rel_l2": 1e-3}, "sample": {"psnr_db": 60.0, "ssim": 1.0}},
        }
    return result(
        "unet3d_profile",
        system,
        {
            "model": "whole_head",
            "configuration": configuration,
            "settings": {"scale": SYSTEMS[system]["scale"], "volume": [16, 16, 16]},
        },
        m,
        status,
        reason,
    )


def ncu(
    system: str,
    configuration: str,
    sm_cycles: float = 1e9,
    instructions: float = 2e9,
    ipc: float = 2.0,
    tensor_pipe_pct: float = 10.0,
    rates_time_share: float | None = 0.7,
    rates_over_every_kernel: bool = False,
    status: str = "ok",
    reason=None,
) -> dict:
    """An unet3d_ncu result with a coverage pass (SM cycles and instructions over every kernel of the step) and, as
    ``measurements.total``, IPC and tensor pipe over every kernel too (``rates_over_every_kernel``) or only over the
    detail pass's kernels, which take ``rates_time_share`` of the step's device time."""
    m = None
    if status == "ok":
        every = ["sm_cycles", "instructions", "duration_ns"] + (
            ["ipc", "tensor_pipe_pct"] if rates_over_every_kernel else []
        )
        total = {
            "sm_cycles": sm_cycles,
            "instructions": instructions,
            "ipc": ipc,
            "tensor_pipe_pct": tensor_pipe_pct,
            "dram_throughput_pct": 10.0,
            "l1_hit_pct": 20.0,
            "l2_hit_pct": 50.0,
            "duration_ns": 1e8,
            "top_stalls": [["long_scoreboard", 1.0]],
            "kernels": 1000,
            "rate_kernels": 100,
            "coverage_counters": every,
            "rates_time_share": rates_time_share,
        }
        m = {
            "architecture": "hopper",
            "metrics": {},
            "kernel_selection": {"device_time_share": 0.85},
            "profiled_kernels": 1000,
            "total": total,
            "by_class": {"convolution": {"kernels": 100, **total}},
            "coverage": {
                "target": 0.8,
                "device_time_share": 1.0,
                "coverage": {"device_time_share": 1.0, "kernels_profiled": 1000, "kernels_in_step": 1000.0},
            },
        }
    return result("unet3d_ncu", system, {"model": "whole_head", "configuration": configuration}, m, status, reason)


def sr3(
    system: str, devices: int, iteration_ms: float, precision: str = "fp32", status: str = "ok", reason=None
) -> dict:
    m = None
    if status == "ok":
        q = {"psnr_db": 20.0, "ssim": 0.5}
        m = {
            "iteration": timing(iteration_ms),
            "images_per_s": 4 * devices / (iteration_ms / 1e3),
            "iterations_per_device": 8 // devices,
            "iterations_run": 8 // devices,
            "measured_wall_s": 1.0,
            "strong_scaling_total": {"label": "measured", "seconds": 1.0},
            "study_b_projection": {"label": "projection", "minutes": iteration_ms * 40000 / devices / 6e4},
            "peak_mem_gib": None,
            "peak_rss_gib_per_rank": [1.0] * devices,
            "replica_max_abs_diff": 0.0,
            "quality": {"sr3": q, "bicubic": q, "beats_bicubic": False, "sampler": "ddim", "sample_steps": 4},
        }
    return result(
        "sr3_scaling",
        system,
        {"precision": precision, "devices": devices, "settings": {"scale": SYSTEMS[system]["scale"]}},
        m,
        status,
        reason,
    )


def lora(
    system: str,
    attention: str,
    strategy: str,
    devices: int,
    step_ms: float = 1000.0,
    status: str = "ok",
    reason=None,
    family: str = "smollm2-135m",
) -> dict:
    m = None
    if status == "ok":
        t = timing(step_ms)
        m = {
            "strategy": strategy,
            "devices": devices,
            "attention": attention,
            "attn_implementation": "sdpa",
            "precision": "bf16",
            "model": {"parameters": 135e6, "weights": "pretrained"},
            "lora_parameters": {"trainable": 1e6},
            "data": {"seq_len": 32},
            "step": t,
            "step_slowest_rank_median_ms": step_ms,
            "samples_per_s": 4 / (step_ms / 1e3),
            "tokens_per_s": 128 / (step_ms / 1e3),
            "throughput_6n": {"tflop_per_s": 0.01, "mfu": None},
            "peak_mem_gib_max": None,
            "host_peak_rss_gib_max": 1.0,
            "loss": {"first_mean": 3.0, "last_mean": 2.5, "eval_before": 3.0, "eval_after": 2.9},
            "projection": {"label": "projection", "minutes_per_million_tokens": 1.0, "minutes": None},
            "per_rank": [{"rank": r, "timing": t} for r in range(devices)],
        }
    return result(
        "lora_finetune",
        system,
        {
            "model_name": family.replace("-", "_"),
            "family": family,
            "attention": attention,
            "strategy": strategy,
            "devices": devices,
        },
        m,
        status,
        reason,
    )


STUDY_B_MODEL = "TinyLlama-1.1B"  # what Study B's perplexity claims were measured on (like for like by default)


def quant(
    system: str,
    method: str,
    bitset: str,
    ppl: float = 10.0,
    compression: float = 1.0,
    status: str = "ok",
    reason=None,
    weights: str = "pretrained",
    model: str = STUDY_B_MODEL,
    text: str = "wikitext2",
    clustering: str = "buckets",
) -> dict:
    m = None
    if status == "ok":
        m = {
            "perplexity": {"value": ppl, "unit": "ppl", "tokens": 512},
            "eval_time": {"value": 1.0, "unit": "s"},
            "throughput": {
                "forward_step": timing(10.0),
                "tokens_per_step": 128,
                "tokens_per_s": 12800.0,
                "unit": "tokens/s",
            },
            "size": {"unit": "bytes"},
            "compression_x": {"value": compression, "unit": "x"},
            "model_compression_x": {"value": compression / 2, "unit": "x"},
            "model": {"name": model, "weights": weights},
        }
        if method not in ("fp32", "none"):  # how the method allocated its bit widths (as the real jobs record)
            m["allocation"] = {"metric": "prune", "clustering": clustering}
    return result(
        "llm_quant",
        system,
        {"model": "smollm2_135m", "method": method, "bitset": bitset, "data": {"source": text}},
        m,
        status,
        reason,
    )


def sensitivity(
    system: str, prune: list[float], weights: str = "pretrained", model: str = STUDY_B_MODEL, text: str = "wikitext2"
) -> dict:
    n = len(prune)
    clusters = [0 if p >= sorted(prune)[-max(1, n // 3)] else 2 for p in prune]
    m = {
        "baseline_ppl": {"value": 10.0, "unit": "ppl", "tokens": 128},
        "layers": [{"layer": i, "prune": p} for i, p in enumerate(prune)],
        "submodules": [],
        "allocation": {"prune": {"percentile": clusters}},
        "sensitivity_time": {"value": 1.0, "unit": "s"},
        "model": {"name": model, "weights": weights},
    }
    return result(
        "llm_quant",
        system,
        {"model": "smollm2_135m", "method": "sensitivity", "bitset": "none", "data": {"source": text}},
        m,
    )


def write(results_dir: Path, objs: list[dict]) -> list[str]:
    """Write each result to its own ``<results_dir>/<i>/result.json``; return the paths."""
    paths = []
    for i, r in enumerate(objs):
        p = Path(results_dir) / r["config"]["system"]["name"] / r["experiment"] / str(i) / "result.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(r))
        paths.append(str(p))
    return paths


def mutate(obj: dict, path: str, value=None, delete=False) -> dict:
    """A deep copy of result ``obj`` with the dotted ``path`` set to ``value`` (or deleted)."""
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    cur = obj
    for k in parents:
        cur = cur[int(k)] if isinstance(cur, list) else cur[k]
    if delete:
        del cur[last]
    else:
        cur[int(last) if isinstance(cur, list) else last] = value
    return obj
