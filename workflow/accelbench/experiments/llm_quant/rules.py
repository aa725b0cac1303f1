"""The rule functions of Study B's quantization (``llm_quant``), torch-free: what its rules (``rules.smk`` of this
folder) and rule ``llm_export`` (``workflow/rules/llm_models.smk``) read from the config.

Each takes the :class:`accelbench.core.rule_context.RuleContext` (``rc``) and returns plain paths and dicts. A spec
(:func:`spec`) is written as a content-addressed file whose sha256 the result records: its keys, their order and
values are the job's settings, so any change to them reruns the job.
"""

from __future__ import annotations

from pathlib import Path

from accelbench.models.rule_specs import EXPORTED_MODELS, with_tokenizer_dir

EXPERIMENT = "llm_quant"
# methods run once per configured bit set; the others have one fixed bit-set folder
BITSET_METHODS = ("fake", "torchao", "int8_dq")
FIXED_BITSET = {"fp32": "none", "inc_fp8": "bf16_fp8"}
# config keys of the job's spec, in the spec's order
SPEC_KEYS = (
    "chunk_len",
    "sensitivity_tokens",
    "eval_tokens",
    "calibration_tokens",
    "eval_batch",
    "prune_amount",
    "sensitivity_metrics",
    "submodules",
    "group_size",
    "allocation",
    "throughput",
    "torchao_dtype",
    "reuse_prefix",
    "prefix_cache_limit_gib",
    "seed",
    "accuracy",
    "sixteen_bit",
    "int8_dq",
    "inc",
)
# keys only method jobs use: out of the sensitivity spec, so that changing them reruns only the method jobs
METHOD_ONLY_KEYS = (
    "eval_tokens",
    "calibration_tokens",
    "allocation",
    "throughput",
    "torchao_dtype",
    "accuracy",
    "sixteen_bit",
    "int8_dq",
    "inc",
)


def variants(config: dict) -> list[tuple[str, str]]:
    """``[(method, bit set folder)]`` of config ``llm_quant``: fp32 -> ``none``, fake/torchao/int8_dq -> each configured
    bit set (``[8, 4, 4]`` -> ``8_4_4``), inc_fp8 -> ``bf16_fp8``; ``[]`` without the section."""
    u = config.get(EXPERIMENT, {})
    out = []
    for method in u.get("methods", []):
        if method in BITSET_METHODS:
            out += [(method, "_".join(map(str, b))) for b in u.get("bitsets", {}).get(method, [])]
        else:
            out.append((method, FIXED_BITSET[method]))
    return out


def results(rc, system: str) -> list[str]:
    """``<results>/<system>/llm_quant/<model>/sensitivity/result.json`` and
    ``.../<model>/<method>/<bitset>/result.json`` of every configured model and variant (:func:`variants`)."""
    out = []
    for model in rc.config.get(EXPERIMENT, {}).get("models", {}):
        base = f"{rc.results_dir}/{system}/{EXPERIMENT}/{model}"
        out.append(f"{base}/sensitivity/result.json")
        out += [f"{base}/{method}/{bitset}/result.json" for method, bitset in variants(rc.config)]
    return out


def model_spec(rc, model: str) -> dict:
    """The loader spec (:func:`accelbench.models.llm.load_causal_lm`) of ``llm_quant.models.<model>``: a local
    ``path`` made absolute in the repository where it exists there (else a hub id in the local cache), a random-init
    model's ``tokenizer: smollm2_gguf`` replaced by its folder
    (:func:`accelbench.models.rule_specs.with_tokenizer_dir`).

    Raises:
        KeyError: no such model in the config.
    """
    spec = dict(rc.config[EXPERIMENT]["models"][model])
    if spec.get("source") == "path" and spec.get("path"):
        spec["path"] = rc.existing_repo_path(spec["path"])  # else a hub id in the local cache
    return with_tokenizer_dir(rc, spec)


def model_specs(rc) -> dict[str, dict]:
    """``{name: model_spec(rc, name)}`` of every ``llm_quant.models`` entry: the models rule ``llm_export`` may
    export."""
    return {name: model_spec(rc, name) for name in rc.config.get(EXPERIMENT, {}).get("models", {})}


def model_input(rc, wildcards) -> dict[str, str]:
    """The model a job reads: ``{"model_dir": resources/llm/<model>}`` (the folder rule ``llm_export`` writes, for
    GGUF and random-init sources); for a local-path model ``{"model_path": folder}`` (loaded directly, a dependency so
    that a changed checkpoint reruns the jobs); ``{}`` for a hub id in the local cache."""
    spec = model_spec(rc, wildcards.model)
    if spec.get("source") == "path":
        return {"model_path": spec["path"]} if Path(spec["path"]).is_dir() else {}
    return {"model_dir": f"{EXPORTED_MODELS}/{wildcards.model}"}


def model_dir_option(wildcards, input) -> list[str]:
    """``["--model-dir", folder]`` for an exported model folder, ``[]`` for a local-path model (its spec names the
    folder): a list, so that ``{params.model_dir:q}`` quotes each word and an absent option leaves no empty word."""
    return ["--model-dir", input.model_dir] if "model_dir" in input.keys() else []


def spec(rc, wildcards) -> dict:
    """A job's spec: the common part (system, noise, energy), the model and its loader spec, the text (``data``, a
    local ``path`` made absolute where it exists), the method (``sensitivity`` for the sensitivity stage) and bit set
    (``none`` there), and the config's ``llm_quant`` settings (:data:`SPEC_KEYS`; the sensitivity stage's without
    :data:`METHOD_ONLY_KEYS`). Accuracy task folders are made absolute in the repository where they exist there."""
    u = rc.config[EXPERIMENT]
    data = dict(u["data"])
    if data.get("path"):
        data["path"] = rc.existing_repo_path(data["path"])
    method = wildcards.get("method", "sensitivity")
    keys = SPEC_KEYS if method != "sensitivity" else tuple(k for k in SPEC_KEYS if k not in METHOD_ONLY_KEYS)
    settings = {k: u[k] for k in keys if k in u}
    if settings.get("accuracy", {}).get("data"):
        settings["accuracy"] = {
            **settings["accuracy"],
            "data": {t: rc.existing_repo_path(p) for t, p in settings["accuracy"]["data"].items()},
        }
    return {
        **rc.common_spec(),
        "model": wildcards.model,
        "model_spec": model_spec(rc, wildcards.model),
        "data": data,
        "method": method,
        "bitset": wildcards.get("bitset", "none"),
        **settings,
        **own_data_digests(data, settings),
    }


def own_data_digests(data: dict, settings: dict) -> dict:
    """``{"data_sha256": {name: digest}}`` of your own text and accuracy-task files or folders that exist
    (``data.path``, ``accuracy.data.<task>``; :func:`accelbench.core.digests.digest`), ``{}`` without any (specs
    stay as they were): a file replaced there (any time stamp) changes the spec, so the results are redone. (A
    local-path model is an input file of the jobs: its digest is recorded in the result, ``inputs_sha256``.)"""
    from accelbench.core.digests import digest

    paths = {"data": data.get("path"), **(settings.get("accuracy", {}).get("data") or {})}
    out = {name: digest(p) for name, p in paths.items() if isinstance(p, str) and p and Path(p).exists()}
    return {"data_sha256": out} if out else {}
