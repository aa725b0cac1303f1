"""The two stages of a job (``accelbench llm-quant --stage sensitivity | method``): load the model
(:func:`load_model`), cut the text into token chunks, run the sensitivity map (:func:`run_sensitivity_job`) or one
(method, bit set) (:func:`run_method_job`) and return the outcome as a dict; :mod:`.job` hands it to the harness.
"""

from __future__ import annotations

import torch

from accelbench.core import precisions
from accelbench.errors import ConfigError, DataError
from accelbench.experiments.llm_quant.evaluate import Evaluator, load_text, token_chunks
from accelbench.experiments.llm_quant.layers import decoder_layers
from accelbench.experiments.llm_quant.methods import MethodRun, MethodText, run_method, torchao_probe
from accelbench.experiments.llm_quant.sensitivity import allocations, assign_bits, parse_bitset, sensitivity_map
from accelbench.experiments.llm_quant.verdicts import method_reason
from accelbench.measure.flops import PEAK_KEY, eval_peak
from accelbench.measure.timing import StepClock


def load_model(model_spec: dict, model_dir, dtype: str):
    """``(model, tokenizer, info)`` from a folder written by :func:`accelbench.models.export.export_hf_folder`
    (rule ``llm_export``), else from the spec."""
    from pathlib import Path

    from accelbench.models.llm import dtype_kwargs, load_causal_lm, model_label

    if model_dir:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from accelbench.models.export import INFO_FILE, exported_info

        d = Path(model_dir)
        if exported_info(d) is None:
            raise DataError(f"{d} is not an exported model folder (no {INFO_FILE}); rerun its llm_export rule")
        model = AutoModelForCausalLM.from_pretrained(
            d, **dtype_kwargs(getattr(torch, dtype)), local_files_only=True
        ).eval()
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
        info = {**exported_info(d), "dtype": dtype}
        if "label" in info:  # the compute dtype of this job, not of the export
            info["label"] = model_label(info["name"], dtype, info.get("quantized_file"))
        return model, tok, info
    lm = load_causal_lm(model_spec, dtype=dtype)
    if lm.tokenizer is None:
        raise ConfigError("llm_quant needs a tokenizer: give `tokenizer:` in the model spec")
    return lm.model, lm.tokenizer, lm.info


TOKENIZE = {
    "joined": "the split's text joined with blank lines, tokenized once without special tokens (ours)",
    "per_line_bos": "each line (WikiText row) tokenized on its own with the tokenizer's special tokens (BOS where "
    "the tokenizer adds one), then concatenated (Study B's scripts: tokenizer(examples['text']))",
}


def _chunks_for(spec: dict, tokenizer, part: str, max_tokens):
    """Token chunks ``[n, chunk_len]`` of one part of the text, tokenized per ``spec["data"]["tokenize"]``
    (:data:`TOKENIZE`), and the data description (which records the tokenisation)."""
    from itertools import chain

    text, data_info = load_text(spec["data"])
    how = spec["data"]["tokenize"]
    if how == "per_line_bos":
        rows = data_info.pop("rows")[part]
        ids = list(chain.from_iterable(tokenizer(rows)["input_ids"]))
        bos = tokenizer.bos_token_id
        extra = {
            "bos_added": bool(rows) and bos is not None and tokenizer(rows[:1])["input_ids"][0][:1] == [bos],
            "lines": len(rows),
        }
    elif how == "joined":
        data_info.pop("rows", None)
        ids = tokenizer(text[part], add_special_tokens=False)["input_ids"]
        extra = {}
    else:
        raise ConfigError(f"llm_quant.data.tokenize {how!r} unknown ({' | '.join(TOKENIZE)})")
    return token_chunks(ids, spec["chunk_len"], max_tokens), {
        **data_info,
        "part": part,
        "part_tokens": len(ids),
        "tokenize": how,
        "tokenize_how": TOKENIZE[how],
        **extra,
    }


def allocation_for(spec: dict) -> dict:
    """The (metric, clustering) of this method job: ``allocation`` with the per-run override
    ``allocation.per_run["<method>/<bitset>"]`` (Study B's scripts clustered per run, e.g. k-means for the A100
    real-quantization run and the simulated [8,8,4] WikiText run, their percentile buckets elsewhere)."""
    alloc = dict(spec["allocation"])
    per_run = alloc.pop("per_run", None) or {}
    alloc.update(per_run.get(f"{spec['method']}/{spec['bitset']}", {}))
    return alloc


def run_sensitivity_job(spec: dict, system, model_dir=None) -> tuple[dict, dict]:
    """The sensitivity job: ``(outcome, tables)``; ``tables`` = ``{"layers": [...], "submodules": [...]}``."""
    from accelbench.backends.device import Device

    device = Device(system.backend)
    torch.manual_seed(spec["seed"])
    model, tok, info = load_model(spec["model_spec"], model_dir, "float32")
    model.to(device.torch_device)
    chunks, data_info = _chunks_for(spec, tok, "validation", spec["sensitivity_tokens"])
    ev = Evaluator(model, chunks, device, batch_size=spec["eval_batch"], reuse_prefix=spec["reuse_prefix"])
    n_layers = len(decoder_layers(model))
    limit = spec["prefix_cache_limit_gib"] * 2**30
    if ev.reuse_prefix and ev.cache_nbytes(model.config.hidden_size, n_layers) > limit:
        ev.reuse_prefix = False
    clock = StepClock(device, wall=True)
    clock.start()
    try:
        sens = sensitivity_map(
            model, ev, spec["sensitivity_metrics"], spec["prune_amount"], spec["group_size"], spec["submodules"]
        )
    except device.out_of_memory_errors() as exc:
        return (
            {
                "status": "oom",
                "measurements": {"device_memory_gib": system.device_memory_gib},
                "reason": f"out of device memory: {str(exc).splitlines()[0]}",
            },
            {"layers": [], "submodules": []},
        )
    clock.stop()
    wall = clock.seconds()
    alloc = allocations(sens["layers"], spec["sensitivity_metrics"], seed=spec["seed"])
    for m, by in alloc.items():
        for c, ranks in by.items():
            for row, r in zip(sens["layers"], ranks):
                row[f"cluster_{m}_{c}"] = r
    measurements = {
        "baseline_ppl": {
            "value": sens["baseline_ppl"],
            "unit": "ppl",
            "tokens": ev.tokens,
            "chunks": int(chunks.shape[0]),
            "chunk_len": int(chunks.shape[1]),
            "split": "validation",
        },
        "layers": sens["layers"],
        "submodules": sens["submodules"],
        "allocation": alloc,
        "sensitivity_time": {
            "value": wall,
            "unit": "s",
            "prefix_reuse": ev.reuse_prefix,
            "evaluations": len(sens["layers"]) * len(spec["sensitivity_metrics"]) + len(sens["submodules"]) + 1,
        },
        "model": info,
        "data": data_info,
    }
    return {"status": "ok", "reason": None, "measurements": measurements}, {
        "layers": sens["layers"],
        "submodules": sens["submodules"],
    }


def run_method_job(spec: dict, system, sensitivity: dict, model_dir=None, stats_dir=".") -> dict:
    """One (method, bit set) job: load, quantize, measure. ``sensitivity`` = the sensitivity result.json."""
    from accelbench.backends.device import Device

    method = spec["method"]
    reason = method_reason(method, system)  # INC FP8 off Gaudi, torchao missing (the harness asks it first)
    if reason:
        return {"status": "unsupported", "measurements": {}, "allocation": {}, "reason": reason}
    if sensitivity["status"] != "ok":
        return {
            "status": "unsupported",
            "measurements": {},
            "allocation": {},
            "reason": f"the sensitivity job did not run: {sensitivity.get('reason')}",
        }
    device = Device(system.backend)
    dtype = {
        "fp32": "float32",
        "fake": "float32",
        "int8_dq": "float32",
        "inc_fp8": "bfloat16",
        "torchao": spec["torchao_dtype"].get(system.backend, "bfloat16"),
    }[method]
    alloc = allocation_for(spec)
    if method == "torchao":  # check the kernels before spending time on loading the model
        ranks = sensitivity["measurements"]["allocation"][alloc["metric"]][alloc["clustering"]]
        layer_bits = assign_bits(ranks, parse_bitset(spec["bitset"]))
        for b in sorted(set(layer_bits) - {16}):
            reason = torchao_probe(b, device, getattr(torch, dtype), spec["group_size"])
            if reason:
                return {
                    "status": "unsupported",
                    "reason": reason,
                    "measurements": {},
                    "allocation": {"bits": parse_bitset(spec["bitset"]), "layer_bits": layer_bits},
                }
    torch.manual_seed(spec["seed"])
    model, tok, info = load_model(spec["model_spec"], model_dir, dtype)
    model.to(device.torch_device)
    test, data_info = _chunks_for(spec, tok, "test", spec["eval_tokens"])
    calib = None
    inc = dict(spec["inc"])
    if method == "inc_fp8":  # ours: the calibration part (train split); Study B's scripts: the validation split
        calib, _ = _chunks_for(spec, tok, inc["calibration_split"], spec["calibration_tokens"])
    acc = spec["accuracy"]
    if acc and acc.get("tasks") and info.get("weights") == "random init":  # chance level, whatever the method
        acc = {**acc, "skip_reason": "random-init weights (a throughput-only model): accuracy would be chance level"}
    run = MethodRun(
        method=method,
        bitset=spec["bitset"],
        chunk_len=spec["chunk_len"],
        eval_tokens=spec["eval_tokens"],
        group_size=spec["group_size"],
        clustering=alloc["clustering"],
        metric=alloc["metric"],
        throughput=spec["throughput"],
        eval_batch=spec["eval_batch"],
        seed=spec["seed"],
        accuracy=acc,
        sixteen_bit=spec["sixteen_bit"],
        inc=inc,
        autocast=spec["int8_dq"]["autocast"] if method == "int8_dq" else None,
    )
    device.reset_peak_memory()
    try:
        text = MethodText(vocab_size=len(tok), test_chunks=test, calib_chunks=calib, tokenizer=tok)
        out = run_method(model, text, sensitivity["measurements"], run, device, stats_dir)
    except device.out_of_memory_errors() as exc:
        return {
            "status": "oom",
            "measurements": {"device_memory_gib": system.device_memory_gib},
            "allocation": {},
            "reason": f"out of device memory: {str(exc).splitlines()[0]}",
        }
    if out["status"] == "ok":
        m = out["measurements"]
        m.update(
            {
                "model": info,
                "data": data_info,
                "dtype": dtype,
                "settings": {
                    "tokenize": data_info["tokenize"],
                    "sixteen_bit": run.sixteen_bit if method == "fake" else None,
                    "clustering": run.clustering if method in ("fake", "torchao", "int8_dq") else None,
                    "metric": run.metric if method in ("fake", "torchao", "int8_dq") else None,
                    "autocast": run.autocast,
                    "eval_batch": run.eval_batch,
                    "inc_scale_method": inc["scale_method"] if method == "inc_fp8" else None,
                    "inc_calibration_split": inc["calibration_split"] if method == "inc_fp8" else None,
                },
            }
        )
        # Study B's fp16 autocast runs where fp16 is only emulated too (a CPU without AVX512-FP16/AMX-FP16): its
        # perplexity and accuracy are what the claims read; its speed is then the emulation's, said here
        emulated = precisions.emulation(system, PEAK_KEY.get(run.autocast)) if run.autocast else None
        m["settings"]["autocast_emulated"] = (
            (
                f"{PEAK_KEY[run.autocast]} is emulated here ({emulated[0]}): a probe "
                f"measured it {emulated[1]:.1f}x the fp32 time"
            )
            if emulated
            else None
        )
        compute, peak = eval_peak(system.peak_tflops, dtype, run.autocast)
        m["eval_throughput"] = {
            **eval_mfu(info, spec["chunk_len"], m["eval_tokens_per_s"]["value"], peak),
            "peak_dtype": compute,
        }
    return out


def eval_mfu(info: dict, seq_len: int, tokens_per_s: float | None, peak_tflops: float | None) -> dict:
    """Achieved TFLOP/s and MFU of the perplexity evaluation (Study B's throughput, evaluation tokens / s), from the
    forward FLOPs per token (:func:`accelbench.measure.flops.forward_flops_per_token`) at ``seq_len``; the peak is the
    system's for the compute dtype (weight-only quantization computes in it)."""
    from accelbench.measure.flops import forward_flops_per_token, throughput_and_mfu

    if not (info.get("parameters") and info.get("layers") and info.get("hidden_size") and tokens_per_s):
        return {**throughput_and_mfu(None, 0.0, peak_tflops), "flops_per_token": None}
    fpt = forward_flops_per_token(info["parameters"], info["layers"], info["hidden_size"], seq_len)
    # throughput_and_mfu takes FLOPs per step and ms per step: one "step" here is one second of evaluation
    return {**throughput_and_mfu(fpt["value"] * tokens_per_s, 1e3, peak_tflops), "flops_per_token": fpt}
