# Validation of the config and the systems, the resolved system, and the input functions of all rules.
import json
import re
from pathlib import Path

import os

from snakemake_interface_executor_plugins.settings import DeploymentMethod

from accelbench import backends
from accelbench.core import precisions
from accelbench.core.files import read_text as bounded_text, sha256 as bounded_sha256
from accelbench.core import registry, snakemake_hooks  # snakemake_hooks: the only non-public Snakemake API
from accelbench.core.config import read_yaml, validate_config
from accelbench.core.harness import load_spec, spec_path_of
from accelbench.core.tree import find_files, refuse_links as _refuse_links
from accelbench.core.rule_context import RuleContext
from accelbench.core.locks import NOTICE_FD
from accelbench.errors import AccelbenchError, ResultError
from accelbench.cluster.containers import ApptainerWhenRun, apptainer_environment, image_uri
from accelbench.core.systems import load_systems, resolve_system
from accelbench.cluster.multinode import devices_per_node, load_site, node_plan, slurm_resources

REPO = Path(workflow.basedir)


def repo_path(p):
    """Relative paths in the config point into the repository (so `--directory elsewhere` works)."""
    p = Path(p)
    return p if p.is_absolute() else REPO / p


for _file in workflow.configfiles:  # no key given twice, no alias bomb: one line naming the file (and line)
    read_yaml(_file)
# only `--config` values came in as text (coerced to the schema's types); a config file's keep their YAML types
validate_config(config, REPO / "config/config.schema.yaml", text=workflow.config_settings.config)
SYSTEMS = load_systems(repo_path(config["systems_dir"]), REPO / "config/system.schema.yaml")
SYSTEM = resolve_system(config["system"], SYSTEMS)
# The backend is checked where jobs run: before the first job of a local run (`onstart` in cluster.smk) and inside
# every job on its node; planning (`-n`, `--report`) and Slurm submission from a login node without one work.
RESULTS = config["results_dir"]
# Measurement jobs print what they wait for (the machine-wide device lock, accelbench.core.locks.notice) on fd 3, which
# their shell lines point at the terminal (`3>&2`) before sending their own output to the job's log.
os.environ.update({NOTICE_FD: "3"})
REFERENCE_DIR = REPO / "resources/reference"  # published numbers and the studies' claims, as data files


def reference_files():
    """The studies' claims files and every aggregated experiment's published file (the registry names them)."""
    files = [REFERENCE_DIR / f for _, f in registry.claims_files()] + list(
        registry.published_files(REFERENCE_DIR).values()
    )
    return list(dict.fromkeys(files))


# Rules run in the system's image under --software-deployment-method apptainer (see containers/).
CONTAINER = image_uri(SYSTEM, config["container_uri"], REPO / "containers")  # fails naming the fix if absent


if DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method:
    # checked when Snakemake asks, once it knows whether this is a dry run: a dry run plans on any host
    snakemake_hooks.replace_deployment_methods(workflow, lambda methods: ApptainerWhenRun(methods, workflow, CONTAINER))
    os.environ.update(apptainer_environment(SYSTEM, Path.cwd()))  # --nv (CUDA); /dev/accel, HABANA_* (Gaudi)


wildcard_constraints:
    system=SYSTEM.name,
    model="[a-z0-9_]+",
    configuration="[a-z0-9_]+",
    scale="small|paper",


# the system this run measures: an aggregation labels results of other systems "copied in" (accelbench.aggregate.common).
# Set here, never read from the user's environment, so `snakemake --lint`'s envvars rule (for variables a workflow
# needs the user to define) does not apply; written as update() because the lint takes any `os.environ[...]` for a read.
os.environ.update(ACCELBENCH_RUN_SYSTEM=SYSTEM.name)
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
    return snakemake_hooks.cores_or(workflow, 1)


# Multi-node jobs (accelbench.cluster.multinode): device counts above the system's devices_per_node span nodes; a count that
# does not divide stops the run here, before any job, naming the key.
SLURM_SITE = load_site(os.environ.get("ACCELBENCH_SLURM_SITE") or REPO / "slurm/site.yaml")


for _e in registry.EXPERIMENTS.values():  # each selected experiment's own checks (its rules module's `check`)
    if _e.name in config["experiments"] and _e.rule_function("check"):
        _e.rule_function("check")(RC)


def node_resources(key):
    """Resources of a job on `{devices}` ranks: `gpu` on one node; `nodes`, `tasks`, `mpi`, `slurm_extra` (and the
    site's `gres`) across nodes (accelbench.cluster.multinode.slurm_resources; None = not set)."""
    names = ("gpu", "nodes", "tasks", "tasks_per_gpu", "mpi", "slurm_extra", "gres")
    return {
        name: (lambda wildcards, name=name: slurm_resources(SYSTEM, int(wildcards.devices), SLURM_SITE, key).get(name))
        for name in names
    }


def device_resources():
    """Slurm/local resources of a measurement job: one `gpu` where the backend is requested that way (cuda), else 0."""
    return {"gpu": 1 if backends.get(SYSTEM.backend).slurm_gpu_resource else 0}


# --------------------------------------------------------------------------- results copied in from other machines
def other_systems_results(experiment):
    """Results on disk that this run does not make: other systems' copied into results/ (merging machines = copying
    folders), this system's finished results of an experiment the config does not select (so a targeted run, e.g.
    `--config experiments=[unet3d_profile]`, keeps every claim that earlier runs judged), and the committed reference
    runs' results (reference_runs/, drawn as their own labelled series; config `reference_runs`). Dot folders (such
    as `<system>/.superseded/`) are skipped. Any folder name is safe: shell lines quote every path. No link is
    followed: one on the way, at any depth, or a result.json that is one stops the plan in one line naming it
    (accelbench.core.tree.find_files)."""
    from accelbench.aggregate.reference_runs import result_paths

    made_here = experiment in config["experiments"]
    found = find_files(RESULTS, ("*", experiment, "**", "result.json"))
    refs = result_paths(REPO / "reference_runs", experiment) if config.get("reference_runs", True) else []
    return [
        str(p)
        for p in found
        if not (made_here and p.relative_to(RESULTS).parts[0] == SYSTEM.name)
        and not any(part.startswith(".") for part in p.relative_to(RESULTS).parts)
    ] + refs


_MANIFESTS = {}


def copied_results(experiment):
    """other_systems_results(experiment) as one input: a manifest file (content-addressed, spec_file) listing their
    paths and the sha256 of each. The jobs' printed `input:`/`reason:` lines then name one file instead of every
    committed reference-run result, and a changed, added or removed result changes the manifest's name (a new input
    file), so the aggregations still rerun. results_file expands it back into the paths. [] when there are none."""
    if experiment not in _MANIFESTS:
        paths = other_systems_results(experiment)
        # bounded reads (accelbench.core.files): a FIFO or a link to /dev/zero there is one line, even on a dry run
        digests = {p: bounded_sha256(p, "copied-in result file", error=ResultError, follow=False) for p in paths}
        _MANIFESTS[experiment] = (
            [spec_file({"manifest_of": experiment, "results": paths, "sha256": digests})] if paths else []
        )
    return _MANIFESTS[experiment]


# --------------------------------------------------------------------------- validation (rule validate_results)
# Every experiment of the registry (accelbench.core.registry) gives `results`/`spec` in its folder's rules module.
EXPERIMENTS = registry.names()


def results_of(experiment, system=SYSTEM.name):
    """This system's results of ``experiment`` as configured: its registry entry's ``results(rc, system)``."""
    return list(registry.get(experiment).rule_function("results")(RC, system))


def spec_of(experiment):
    """The ``params.spec`` input function of ``experiment``'s jobs: its registry entry's ``spec(rc, wildcards)`` as a
    content-addressed spec file (spec_file)."""
    function = registry.get(experiment).rule_function("spec")
    return lambda wildcards: spec_file(function(RC, wildcards))


def experiment_results(experiment):
    """Every result of ``experiment`` an aggregation reads: this system's as configured (when the config selects the
    experiment) and every other one on disk (copied_results: other machines', this system's of an unselected
    experiment, the reference runs'). With `experiments=[]` a run measures nothing and aggregates what is there."""
    return (results_of(experiment) if experiment in config["experiments"] else []) + copied_results(experiment)


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
        paths += json.loads(bounded_text(p, "manifest"))["results"] if p in _manifest_paths() else [p]
    return spec_file({"results": paths})


def _manifest_paths():
    return {m for ms in _MANIFESTS.values() for m in ms}


# --------------------------------------------------------------------------- targets
def get_final_output(results=True):
    """Every configured experiment's results and the main outputs of its aggregation (the registry's ``targets``),
    then the claims table and the energy table (energy_aggregate). ``results=False``, for the default target, gives
    an experiment's results only where it has no targets of its own (the aggregations and the claims depend on the
    rest through validate_results), so that the printed `input:` of the default target stays short. With
    `experiments: []` (merging machines: measure nothing), the aggregations of every experiment with results on
    disk (copied_results), then the claims and energy tables."""
    out = []
    for name in EXPERIMENTS:
        targets = [f"{RESULTS}/{t}" for t in registry.get(name).targets]
        if name in config["experiments"]:
            out += (results_of(name) if results or not targets else []) + targets
        elif not config["experiments"] and copied_results(name):
            out += targets
    if out:
        out += [f"{RESULTS}/claims/claims.csv", f"{RESULTS}/energy/energy.csv"]
    return out


# --------------------------------------------------------------------------- superseded results
def stale_results():
    """Finished results of this system (the final targets) that are not current: their recorded settings
    (`spec_sha256`, the sha256 of the job's spec file, which holds the digests of the experiment's own data files:
    SR3's maps, Study A's scans, LoRA's instruction file and local model) differ from the config's now or are not
    recorded, the contents of the input
    files they were made from (`inputs_sha256`) differ from the files' now (accelbench.core.digests: Snakemake's
    restore of a result after a failed job gives it a new time), or a redo of them was killed
    (the journal `.redo.json` beside them, accelbench.core.results.redo_journal). Each is marked not current
    (accelbench.core.results.mark_current: its time set to 1970, so Snakemake reruns its job whatever settings it
    recorded for it, e.g. after an interrupted redo put the old files back); its job first moves it (with its side
    files) to `<results_dir>/<system>/.superseded/<UTC time>/` (accelbench.core.results.superseding). Returns paths."""
    from snakemake.io import regex_from_filepattern

    from accelbench.errors import ResultError
    from accelbench.core.results import mark_current, read_json, redo_journal
    from accelbench.core.digests import changed as input_digests_changed

    class Wildcards(dict):  # what the spec functions read: `w.model` and `w.get("method", ...)` (any Snakemake 9)
        __getattr__ = dict.__getitem__

    patterns = [
        (pattern, spec_of(name))
        for name in EXPERIMENTS
        for pattern in registry.get(name).result_patterns(RESULTS, SYSTEM.name)
    ]
    stale = []
    for target in get_final_output():
        if not Path(target).is_file():
            continue
        for pattern, spec_function in patterns:
            m = re.fullmatch(regex_from_filepattern(pattern).replace(".+)", "[^/]+)"), target)
            if m:
                try:
                    made = read_json(target)  # a plain file of bounded size
                    recorded, inputs = made.get("spec_sha256"), made.get("inputs_sha256")
                except (ResultError, AttributeError):  # unreadable: validate_results names it (one line)
                    made, recorded, inputs = None, None, None
                # the spec file as the job reads it (bounded; one whose bytes no longer hash to its name: one line)
                current = load_spec(spec_function(Wildcards(m.groupdict())))[1]
                # a result that records no settings (no `spec_sha256`) is not current: nothing shows it was made
                # with the config's settings now (Snakemake's own record, .snakemake/metadata, may be gone)
                is_current = (
                    (made is None or current == recorded)
                    and not redo_journal(target).exists()
                    and not input_digests_changed(inputs)
                )  # contents, not times (accelbench.core.digests)
                if not is_current:
                    stale.append(target)
                if not DRY_RUN:  # a dry run changes nothing on disk (the DAG redoes `stale` either way)
                    mark_current(target, is_current, root=RESULTS)
                break
    return stale


# `snakemake -n`: the Snakefile is read before Snakemake sets up its dry-run executor, so workflow.dryrun is not yet
# True; the command line's setting is
DRY_RUN = snakemake_hooks.command_line_dry_run(workflow)
_STALE = []  # the not-current results this invocation found (stale_results), which its DAG redoes (_redo_stale)


def _redo_stale(wildcards):
    """An input function of every measurement job (force_stale_results) that adds no input. When Snakemake creates a
    job, before it decides what to run, it has the DAG redo the not-current results (the DAG's forced files, what
    `--forcerun <file>` gives). The 1970 time alone reruns only a job with input files, and Snakemake keeps no record
    of a job it saw fail (Ctrl-C), so a job without inputs (a LoRA preset with `source: path`) would stay as it is.
    Only jobs of this run's DAG are affected: no target is added."""
    if _STALE:
        snakemake_hooks.force_files(workflow, _STALE)
    return {}


def force_stale_results():
    """Give every measurement rule (outputs `<results>/{system...}/.../result.json`) the input function _redo_stale;
    called by the Snakefile once every experiment's rules are included."""
    for each in workflow.rules:
        if any(str(o).startswith(f"{RESULTS}/{{system") and Path(str(o)).name == "result.json" for o in each.output):
            snakemake_hooks.add_input_function(each, _redo_stale)


# The results tree is untrusted ground (a results folder may be copied in from elsewhere): Snakemake itself creates an
# output's folders and deletes an old output before its job, following links, before any of our code runs. A link one
# or two levels below it (`results/claims -> /etc`, `results/cpu -> elsewhere`), a `.superseded` link at any depth,
# or a link on the way of a final output or at one is refused here, in one line naming it, before anything is planned
# or touched (accelbench.core.tree.refuse_links; each job's own writes are checked again at the moment of use); so is
# a final output that is a FIFO or device (Snakemake takes it as done). The results every aggregation of this run reads
# are gathered here too (copied_results: a link on their way at any depth, a FIFO or device among them, a reference
# run's run.yaml that is not a plain file), dry run included. Raised from this top level, so that Snakemake prints
# the one line with a single frame (this file's) rather than every frame down to the check.
try:
    _refuse_links(RESULTS, get_final_output())
    for _e in sorted({x for name in (config["experiments"] or EXPERIMENTS) for x in reads(name)}):
        copied_results(_e)
except AccelbenchError as _refused:
    raise _refused.with_traceback(None) from None


if workflow.is_main_process:
    _stale = stale_results()
    if _stale:
        import sys

        print(
            f"accelbench: {len(_stale)} finished result(s) are not current (made with other settings than the "
            f"config's now or from other input files, or a redo of them was killed); "
            f"a run redoes them and first moves each (with its side files) to "
            f"{RESULTS}/{SYSTEM.name}/.superseded/<UTC time>/ (superseded, never deleted):\n  " + "\n  ".join(_stale),
            file=sys.stderr,
        )
    _STALE += _stale
