"""The keys of the embedded default's result.json files, kept across restructurings.

``tests/fixtures/result_keys.json`` was made from the results of ``snakemake --cores all`` (the embedded default)
on main 653f960, before the registry/harness/launcher restructuring, by::

    python tests/result_keys.py results > tests/fixtures/result_keys.json

It holds, per (experiment, kind, status), the key paths of each result down to two levels (``measurements.iteration``,
``config.settings``, ``environment.hardware``, ...): what tables, figures and a reader use. ``kind`` is the
configuration (Study A), the strategy (LoRA), the method or stage (quantization), one kind for SR3.
:func:`check` compares fresh results with it: a key may not disappear, and a new one must be declared in
:data:`ADDED` with what it records.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "result_keys.json"
# keys added since the snapshot, each with why: (experiment, key path)
ADDED = {
    ("sr3_scaling", "measurements.flops"): "SR3 reports FLOPs per step (FlopCounterMode)",
    ("sr3_scaling", "measurements.train_throughput"): "SR3 reports MFU",
    ("llm_quant", "measurements.eval_throughput"): "quantization reports the evaluation's MFU",
    ("sr3_scaling", "measurements.data_path"): "how batches reach the device (pinned memory on CUDA)",
    ("sr3_scaling", "measurements.math_flags"): "TF32 flags, which choose the peak of SR3's MFU",
    ("sr3_scaling", "measurements.configuration"): "the configuration's settings and series",
    ("sr3_scaling", "measurements.host_syncs_timed_per_rank"): "host syncs counted over the timed loop",
    ("sr3_scaling", "measurements.host_syncs_method"): "how the host syncs were counted",
    ("sr3_scaling", "measurements.host_syncs_where"): "where the counted host syncs happened",
    ("sr3_scaling", "measurements.fused_adam"): "Adam's fused kernel (ours)",
    ("sr3_scaling", "measurements.first_iteration_s"): "the cold start: the first warm-up iteration (compile, graphs)",
    ("sr3_scaling", "measurements.compiled"): "what TorchDynamo compiled (a compiled configuration that "
    "compiled nothing ran eager)",
    (
        "lora_finetune",
        "measurements.series",
    ): "the runtime series (faithful/ours) and every setting it ran with",
    ("lora_finetune", "measurements.train_runtime"): "optimum-habana's train_runtime after 3 warm-up steps",
    (
        "lora_finetune",
        "measurements.loss_tolerance",
    ): "ours' loss-curve tolerance against the faithful series",
    ("unet3d_profile", "measurements.energy"): "board energy of the timed steps (accelbench.measure.energy)",
    ("unet3d_profile", "measurements.norm_path"): "which implementation ran a fused-GroupNorm configuration's "
    "GroupNorm (triton, or the torch fallback)",
    ("sr3_scaling", "measurements.energy"): "board energy of the timed steps (accelbench.measure.energy)",
    ("lora_finetune", "measurements.energy"): "board energy of the timed steps (accelbench.measure.energy)",
    ("llm_quant", "measurements.energy"): "board energy of the timed steps (accelbench.measure.energy)",
    ("unet3d_profile", "measurements.clocks"): "SM clock and clock-event reasons during the timed steps "
    "(accelbench.measure.clocks)",
    ("sr3_scaling", "measurements.clocks"): "SM clock and clock-event reasons during the timed steps "
    "(accelbench.measure.clocks)",
    ("lora_finetune", "measurements.clocks"): "SM clock and clock-event reasons during the timed steps "
    "(accelbench.measure.clocks)",
    ("llm_quant", "measurements.clocks"): "SM clock and clock-event reasons during the timed steps "
    "(accelbench.measure.clocks)",
    ("llm_quant", "measurements.settings"): "the Study B-faithful settings of a method job (tokenisation, "
    "16-bit storage, clustering, autocast, INC scale method and calibration)",
    ("unet3d_profile", "measurements.network"): "which U-Net ran (med_ddpm, Med-DDPM's own; monai stand-in)",
    ("unet3d_profile", "measurements.micro_batches"): "micro-batches per optimizer step (Med-DDPM: 2)",
    ("unet3d_profile", "measurements.tensor_shape"): "the network input (B, C, D, H, W) in its layout",
    ("unet3d_profile", "measurements.ema"): "Med-DDPM's EMA settings, recorded (not run)",
    ("unet3d_profile", "inputs_sha256"): "the contents of the job's input files (freshness: redone when they change)",
    (
        "unet3d_profile",
        "inputs_sha256.image",
    ): "the contents of the job's input files (freshness: redone when they change)",
    (
        "unet3d_profile",
        "inputs_sha256.mask",
    ): "the contents of the job's input files (freshness: redone when they change)",
    ("unet3d_ncu", "inputs_sha256"): "the contents of the job's input files (freshness: redone when they change)",
    ("unet3d_ncu", "inputs_sha256.image"): "the contents of the job's input files (freshness: redone when they change)",
    ("unet3d_ncu", "inputs_sha256.mask"): "the contents of the job's input files (freshness: redone when they change)",
    (
        "unet3d_ncu",
        "inputs_sha256.profile_result",
    ): "the contents of the job's input files (freshness: redone when they change)",
    ("sr3_scaling", "inputs_sha256"): "the contents of the job's input files (freshness: redone when they change)",
    ("sr3_scaling", "inputs_sha256.data"): "the contents of the job's input files (freshness: redone when they change)",
    ("llm_quant", "inputs_sha256"): "the contents of the job's input files (freshness: redone when they change)",
    (
        "llm_quant",
        "inputs_sha256.model_dir",
    ): "the contents of the job's input files (freshness: redone when they change)",
    (
        "llm_quant",
        "inputs_sha256.sensitivity",
    ): "the contents of the job's input files (freshness: redone when they change)",
    ("unet3d_profile", "measurements.grad_buffers"): "how a step holds its gradients (kept as zeros with "
    "CUDA graphs and gradient accumulation)",
}


def kind(result: dict) -> str:
    c = result.get("config", {})
    if result.get("experiment") == "sr3_scaling":  # one kind for SR3 in the snapshot (its configurations came later)
        return "all"
    return str(c.get("configuration") or c.get("strategy") or c.get("method") or "all")


def key_paths(obj: dict, depth: int = 2, prefix: str = "") -> set[str]:
    out = set()
    for k, v in obj.items():
        path = f"{prefix}{k}"
        out.add(path)
        if depth > 1 and isinstance(v, dict):
            out |= key_paths(v, depth - 1, path + ".")
    return out


def snapshot(results_dir: str | Path) -> dict:
    """``{"<experiment>/<kind>/<status>": [key paths]}`` of every result.json under ``results_dir`` (dot folders
    skipped)."""
    out: dict[str, set] = {}
    for p in sorted(Path(results_dir).rglob("result.json")):
        if any(part.startswith(".") for part in p.parts):
            continue
        r = json.loads(p.read_text())
        out.setdefault(f"{r['experiment']}/{kind(r)}/{r['status']}", set()).update(key_paths(r))
    return {k: sorted(v) for k, v in sorted(out.items())}


def check(results_dir: str | Path) -> list[str]:
    """Differences between the results under ``results_dir`` and the committed snapshot, for every
    (experiment, kind, status) present in both: keys lost, and keys added that :data:`ADDED` does not declare (the
    ``config`` block, which echoes the job's settings, may gain the optional keys a config sets)."""
    before = json.loads(FIXTURE.read_text())
    now = snapshot(results_dir)
    problems = []
    for group in sorted(set(before) & set(now)):
        experiment = group.split("/")[0]
        lost = set(before[group]) - set(now[group])
        # config.* echoes the job's settings: a test's config may set optional keys (e.g. lora_finetune.ddp)
        added = {
            k
            for k in set(now[group]) - set(before[group])
            if (experiment, k) not in ADDED and not k.startswith("config.")
        }
        problems += [f"{group}: key {k} lost" for k in sorted(lost)]
        problems += [f"{group}: key {k} added (declare it in tests/result_keys.py ADDED)" for k in sorted(added)]
    return problems


if __name__ == "__main__":
    json.dump(snapshot(sys.argv[1]), sys.stdout, indent=1)
    sys.stdout.write("\n")
