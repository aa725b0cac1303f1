# Validation of the config and the systems, the resolved system, and the input functions of all rules.
import json
from pathlib import Path

from accelbench.config import validate_config
from accelbench.systems import load_systems, require_backend, resolve_system

REPO = Path(workflow.basedir)


def repo_path(p):
    """Relative paths in the config point into the repository (so `--directory elsewhere` works)."""
    p = Path(p)
    return p if p.is_absolute() else REPO / p


validate_config(config, REPO / "config/config.schema.yaml")
SYSTEMS = load_systems(repo_path(config["systems_dir"]), REPO / "config/system.schema.yaml")
SYSTEM = resolve_system(config["system"], SYSTEMS)
if workflow.local_exec:
    # Fails before any job runs when the backend is absent (on a cluster each job checks on its node).
    require_backend(SYSTEM)
RESULTS = config["results_dir"]
CLAIMS_A = REPO / "resources/reference/study_a_claims.csv"

# Rules run in the system's image under --software-deployment-method apptainer (see containers/).
CONTAINER = config["container_uri"].format(image=SYSTEM.image)


wildcard_constraints:
    system=SYSTEM.name,
    model="[a-z0-9_]+",
    configuration="[a-z0-9_]+",
    scale="small|paper",


def device_resources():
    """Slurm/local resources of a measurement job: one accelerator (none on CPU)."""
    return {"gpu": 0 if SYSTEM.backend != "cuda" else 1}


# --------------------------------------------------------------------------- Study A
def unet3d_results(system=SYSTEM.name):
    u = config["unet3d_profile"]
    return expand(f"{RESULTS}/{system}/unet3d_profile/{{model}}/{{configuration}}/result.json",
                  model=u["models"], configuration=u["configurations"])


def other_systems_results(experiment):
    """Results of other systems copied into results/ (merging machines = copying folders)."""
    found = sorted(Path(RESULTS).glob(f"*/{experiment}/**/result.json"))
    return [str(p) for p in found if p.relative_to(RESULTS).parts[0] != SYSTEM.name]


def mri_inputs(wildcards):
    stem = f"resources/mri/{wildcards.model}_{SYSTEM.scale}"
    return {"image": f"{stem}/image.nii.gz", "mask": f"{stem}/mask.nii.gz"}


def mri_spec(wildcards):
    from accelbench.experiments.unet3d_profile import resolve_settings

    u = config["unet3d_profile"]
    s = resolve_settings(wildcards.model, u["presets"], wildcards.scale, u.get("scales", {}))
    return json.dumps({"volume": list(s.volume), "spacing_mm": list(s.spacing_mm), "data": config["data"]["mri"]})


def unet3d_spec(wildcards):
    u = config["unet3d_profile"]
    run = {k: u[k] for k in ("warmup", "repeat", "profile_steps", "quality_sample_steps", "quality_rel_l2_max", "seed")}
    return json.dumps({"system": SYSTEM.to_dict(), "model": wildcards.model, "configuration": wildcards.configuration,
                       "presets": {wildcards.model: u["presets"][wildcards.model]}, "scales": u.get("scales", {}),
                       "data": config["data"]["mri"], "run": run})


def unet3d_ncu_results(system=SYSTEM.name):
    return expand(f"{RESULTS}/{system}/unet3d_ncu/{{model}}/{{configuration}}/result.json",
                  model=config["unet3d_profile"]["models"], configuration=config["unet3d_ncu"]["configurations"])


def unet3d_ncu_spec(wildcards):
    spec = json.loads(unet3d_spec(wildcards))
    spec["ncu"] = {k: v for k, v in config["unet3d_ncu"].items() if k != "configurations"}
    return json.dumps(spec)


# --------------------------------------------------------------------------- targets
def get_final_output():
    out = []
    if "unet3d_profile" in config["experiments"]:
        out += unet3d_results()
        out += [f"{RESULTS}/study_a/table.csv", f"{RESULTS}/study_a/claims_vs_measured.csv"]
    if "unet3d_ncu" in config["experiments"]:
        out += unet3d_ncu_results() + [f"{RESULTS}/study_a/counters.csv"]
    return out
