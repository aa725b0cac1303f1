"""Container recipes and what they build: parsing a Dockerfile and an Apptainer definition (:func:`parse_dockerfile`,
:func:`parse_apptainer_def`: base image, build arguments, pip pins, whether the project is installed), the agreement
of both recipes of each image with ``containers/versions.yaml``, ``pyproject.toml`` and the systems
(:func:`check_images`, what CI runs), and of a built image's installed packages with the same file
(:func:`check_installed`). The tests (``tests/system/test_containers.py``, ``test_image_build.py``) use these; the
workflow at run time needs only :mod:`accelbench.cluster.containers`.

Example::

    problems = check_images("containers", "pyproject.toml", systems)   # [] when all agree
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from accelbench.errors import ConfigError


# --------------------------------------------------------------------------- recipe parsing
@dataclass
class Recipe:
    """What a Dockerfile or Apptainer definition builds: base image, build arguments, pip pins, project install."""

    path: Path
    base: str
    args: dict[str, str] = field(default_factory=dict)
    pins: dict[str, str] = field(default_factory=dict)
    installs_project: bool = False


_PIN = re.compile(r"""["']?([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([A-Za-z0-9.+!*-]+)["']?""")
_PROJECT = re.compile(r"pip3? install\b[^&;|]*\s-e\s+\.(\s|$)|pip3? install\b[^&;|]*\s\.(\s|$)")


_INSTALL_SH = re.compile(r"(?:^|[\s/])install\.sh\s+(deps|project|all)\b(.*)")


def _pip_facts(lines: list[str], folder: Path) -> tuple[dict[str, str], bool]:
    """Pins and whether the project is installed, from ``pip install`` lines and calls of ``containers/install.sh``
    (its PIN arguments, plus what the script's own ``pip`` lines install in the phases called)."""
    pins, project = {}, False
    for line in lines:
        if re.search(r"\bpip3? install\b|\bpip_install\b", line):
            pins.update({name.lower(): ver for name, ver in _PIN.findall(line)})
            project = project or bool(
                _PROJECT.search(line + " ") or re.search(r"pip_install\b.*\s-e\s+\.(\s|$)", line + " ")
            )
        call = _INSTALL_SH.search(line)
        if call:
            phase, rest = call.groups()
            pins.update({name.lower(): ver for name, ver in _PIN.findall(rest)})
            script = install_script(folder)
            if phase in ("project", "all"):
                own, installs = _pip_facts(_shell_function(script, "project"), folder)
                pins.update(own)
                project = project or installs
    return pins, project


def install_script(folder: Path) -> Path:
    """``containers/install.sh`` seen from a recipe's folder (``containers/<image>/``)."""
    return Path(folder).parent / "install.sh"


def _shell_function(script: Path, name: str) -> list[str]:
    """The lines of shell function ``name() { ... }`` in ``script`` (a missing script or function: none)."""
    if not script.is_file():
        return []
    m = re.search(rf"^{name}\(\)\s*\{{\n(.*?)^\}}", script.read_text(), flags=re.S | re.M)
    return [ln.strip() for ln in m.group(1).splitlines()] if m else []


def parse_dockerfile(path: str | Path) -> Recipe:
    """Read a Dockerfile's FROM, ARGs (``${X}`` substituted) and the ``pip install`` pins of its RUN lines.

    Raises:
        ConfigError: no FROM instruction, or more than one build stage.
    """
    path = Path(path)
    text = re.sub(r"\\\n", " ", path.read_text())
    args, base, run_lines = {}, None, []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        rest = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), rest.strip())
        if word == "ARG":
            name, eq, default = rest.partition("=")
            if eq or name.strip() not in args:  # `ARG X` after FROM re-declares X, keeping its default
                args[name.strip()] = default.strip().strip('"')
        elif word == "FROM":
            if base is not None:
                raise ConfigError(f"{path}: more than one FROM (multi-stage builds are not checked)")
            base = rest.split()[0]
        elif word == "RUN":
            run_lines += [part.strip() for part in re.split(r"&&|;", rest)]
    if base is None:
        raise ConfigError(f"{path}: no FROM instruction")
    pins, project = _pip_facts(run_lines, path.parent)
    return Recipe(path, base, args, pins, project)


APPTAINER_SECTIONS = {
    "setup",
    "files",
    "environment",
    "post",
    "runscript",
    "startscript",
    "test",
    "labels",
    "help",
    "arguments",
    "app",
    "appinstall",
    "appenv",
    "apphelp",
    "apprun",
    "applabels",
    "appfiles",
}
APPTAINER_BOOTSTRAPS = {
    "docker",
    "docker-archive",
    "docker-daemon",
    "library",
    "localimage",
    "oras",
    "shub",
    "yum",
    "debootstrap",
    "arch",
    "busybox",
    "zypper",
    "scratch",
}


def parse_apptainer_def(path: str | Path) -> Recipe:
    """Parse an Apptainer definition file: header (``Bootstrap:``/``From:``) and ``%sections``.

    ``{{ NAME }}`` build arguments are replaced by their ``%arguments`` defaults.

    Raises:
        ConfigError (naming the file and line): a header line that is not ``Key: value``, an unknown bootstrap
            agent, no ``From:`` for an agent that needs one, an unknown or repeated section, or a ``{{ NAME }}``
            without a default in ``%arguments``.
    """
    path = Path(path)
    header: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if current is None and (not line or line.startswith("#")):
            continue
        if line.startswith("%"):
            name = line[1:].split()[0].lower()
            if name not in APPTAINER_SECTIONS:
                raise ConfigError(f"{path}:{n}: unknown section %{name}")
            if name in sections:
                raise ConfigError(f"{path}:{n}: section %{name} appears twice")
            current = name
            sections[name] = []
        elif current is None:
            key, sep, value = line.partition(":")
            if not sep or not key.strip() or " " in key.strip():
                raise ConfigError(f"{path}:{n}: header line {line!r} is not 'Key: value'")
            header[key.strip().lower()] = value.strip()
        else:
            sections[current].append(raw)
    agent = header.get("bootstrap")
    if agent not in APPTAINER_BOOTSTRAPS:
        raise ConfigError(f"{path}: Bootstrap {agent!r} is not one of {sorted(APPTAINER_BOOTSTRAPS)}")
    if agent in (
        "docker",
        "library",
        "localimage",
        "oras",
        "shub",
        "docker-archive",
        "docker-daemon",
    ) and not header.get("from"):
        raise ConfigError(f"{path}: Bootstrap {agent} needs a 'From:' line")
    args = {}
    for line in sections.get("arguments", []):
        if line.strip() and not line.strip().startswith("#"):
            name, _, default = line.strip().partition("=")
            args[name.strip()] = default.strip().strip('"')

    def substitute(text: str) -> str:
        def one(m):
            if m.group(1) not in args:
                raise ConfigError(f"{path}: {{{{ {m.group(1)} }}}} has no default in %arguments")
            return args[m.group(1)]

        return re.sub(r"\{\{\s*(\w+)\s*\}\}", one, text)

    body = [substitute(line) for line in sections.get("post", [])]
    for name in ("environment", "labels", "files"):
        [substitute(line) for line in sections.get(name, [])]
    pins, project = _pip_facts(body, path.parent)
    return Recipe(path, substitute(header.get("from", "")), args, pins, project)


# --------------------------------------------------------------------------- agreement checks
def _project_requirements(pyproject: str | Path) -> tuple[dict[str, Requirement], SpecifierSet]:
    data = tomllib.loads(Path(pyproject).read_text())["project"]
    reqs = [Requirement(r) for r in data.get("dependencies", [])]
    return {r.name.lower(): r for r in reqs}, SpecifierSet(data.get("requires-python", ""))


def specifiers_overlap(a: SpecifierSet, b: SpecifierSet) -> bool:
    """True if some version satisfies both (checked on the versions the clauses name and just above them)."""
    candidates = set()
    for spec in list(a) + list(b):
        v = Version(spec.version.replace(".*", ""))
        rel = ".".join(map(str, v.release))
        candidates |= {rel, f"{rel}.0.1", f"{rel}.1", f"{v.major}.{v.minor + 1}", f"{v.major + 1}"}
    if not candidates:
        return True
    return any(a.contains(c, prereleases=True) and b.contains(c, prereleases=True) for c in candidates)


def check_images(containers_dir: str | Path, pyproject: str | Path, systems: dict | None = None) -> list[str]:
    """Every disagreement between the recipes, ``containers/versions.yaml``, ``pyproject.toml`` and the systems.

    Checked per image: both recipes exist and parse, share the base image and the pip pins that versions.yaml
    lists, and install the project (``pip install -e .``); the image's torch is named by its base tag and satisfies
    the project's torch requirement and every pinned package's torch requirement; the image's Python satisfies
    ``requires-python``; each pin satisfies the project's requirement on that package, and each published
    requirement of a pin overlaps the project's requirement on the same package; each ``resolved`` version (what
    pip installs for an unpinned package of the image, e.g. transformers under optimum-habana) satisfies both the
    project's requirement and every pin's published requirement. Per system: its image exists.

    Returns:
        Messages, each naming the file and the two values that disagree; empty when everything agrees.
    """
    containers_dir = Path(containers_dir)
    facts = yaml.safe_load((containers_dir / "versions.yaml").read_text())
    project, requires_python = _project_requirements(pyproject)
    problems = []
    for image, want in facts.items():
        folder = containers_dir / image
        try:
            recipes = [parse_dockerfile(folder / "Dockerfile"), parse_apptainer_def(folder / f"accelbench-{image}.def")]
        except (OSError, ConfigError) as exc:
            problems.append(f"{image}: {exc}")
            continue
        for r in recipes:
            if r.base != want["base"]:
                problems.append(f"{r.path}: base {r.base!r} != versions.yaml {want['base']!r}")
            if r.pins != {k.lower(): str(v) for k, v in want["pins"].items()}:
                problems.append(f"{r.path}: pip pins {r.pins} != versions.yaml {want['pins']}")
            if not r.installs_project:
                problems.append(f"{r.path}: does not install the project with `pip install -e .` as the README does")
        torch = Version(str(want["torch"]))
        if str(want["torch"]) not in want["base"]:
            problems.append(f"versions.yaml {image}: torch {torch} is not named in the base tag {want['base']!r}")
        if "torch" in project and not project["torch"].specifier.contains(torch, prereleases=True):
            problems.append(f"{image}: image torch {torch} fails pyproject's {project['torch']}")
        if not requires_python.contains(f"{want['python']}.0"):
            problems.append(
                f"{image}: image Python {want['python']} fails pyproject's requires-python {requires_python}"
            )
        for name, version in want["pins"].items():
            req = project.get(name.lower())
            if req and not req.specifier.contains(str(version), prereleases=True):
                problems.append(f"{image}: pin {name}=={version} fails pyproject's {req}")
        for name, reqs in (want.get("requires") or {}).items():
            for text in reqs:
                dep = Requirement(text)
                if dep.name == "torch" and not dep.specifier.contains(torch, prereleases=True):
                    problems.append(f"{image}: {name}=={want['pins'][name]} needs {dep}, the image has torch {torch}")
                other = project.get(dep.name.lower())
                if other and dep.name != "torch" and not specifiers_overlap(dep.specifier, other.specifier):
                    problems.append(
                        f"{image}: {name}=={want['pins'][name]} needs {dep}, pyproject needs {other}: "
                        f"no version satisfies both"
                    )
        for name, version in (want.get("resolved") or {}).items():  # what pip resolves the image's stack to
            req = project.get(name.lower())
            if req and not req.specifier.contains(str(version), prereleases=True):
                problems.append(f"{image}: resolves {name}=={version}, which fails pyproject's {req}")
            for pin, reqs in (want.get("requires") or {}).items():
                for dep in map(Requirement, reqs):
                    if dep.name.lower() == name.lower() and not dep.specifier.contains(str(version), prereleases=True):
                        problems.append(
                            f"{image}: resolves {name}=={version}, but {pin}=={want['pins'][pin]} needs {dep}"
                        )
    for name, system in (systems or {}).items():
        if system.image not in facts or not (containers_dir / system.image / "Dockerfile").is_file():
            problems.append(
                f"system {name!r} names image {system.image!r}, which is not in {containers_dir} (have {sorted(facts)})"
            )
    return problems


# --------------------------------------------------------------------------- what a built image holds
def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_installed(
    installed: dict[str, str],
    python: str,
    image: str,
    containers_dir: str | Path,
    constraints: str | Path | None = None,
    build: str | None = None,
) -> list[str]:
    """Every contradiction between what a built image holds and ``containers/versions.yaml`` (and constraints.txt).

    Args:
        installed: ``{distribution: version}`` as pip lists them inside the image (``pip list --format=json``).
        python: the image's Python version (``3.11.2``).
        image: the recipe folder (``cuda``, ``habana``).
        build: a build of that recipe described under ``<image>.<build>`` in versions.yaml (``cpu_build``: the CPU
            image CI builds from the CUDA recipe), whose ``python`` and ``torch`` replace the image's; None: the
            image as released.
        constraints: the constraints file the install used; a package it pins must have that version when present.

    Checked: Python (major.minor), torch (release, without a local label such as ``+cpu``), every ``pins`` and
    ``resolved`` version, the project at pyproject's version.

    Returns:
        One message per contradiction, naming the package, the image's version and the file's; empty when none.
    """
    containers_dir = Path(containers_dir)
    facts = yaml.safe_load((containers_dir / "versions.yaml").read_text())[image]
    want = {**facts, **(facts.get(build) or {})} if build else facts
    have = {_norm(k): v for k, v in installed.items()}
    where = f"versions.yaml {image}" + (f".{build}" if build else "")
    problems = []
    if ".".join(python.split(".")[:2]) != str(want["python"]):
        problems.append(f"{image} image: Python {python}, {where} says {want['python']}")
    torch = have.get("torch")
    if torch is None or Version(torch).public != str(want["torch"]):
        problems.append(f"{image} image: torch {torch}, {where} says {want['torch']}")
    expected = {
        **{k: (str(v), "pins") for k, v in want.get("pins", {}).items()},
        **{k: (str(v), "resolved") for k, v in (want.get("resolved") or {}).items()},
    }
    for name, (version, key) in expected.items():
        if have.get(_norm(name)) != version:
            problems.append(
                f"{image} image: {name} {have.get(_norm(name), 'not installed')}, {where} {key} says {version}"
            )
    for line in Path(constraints).read_text().splitlines() if constraints else []:
        name, sep, version = (part.strip() for part in line.split("#")[0].strip().partition("=="))
        # torch, the pins and what they resolve follow versions.yaml (install.sh drops them from the lock); the lock
        # pins public versions, which a local build (2.13.0+cpu) satisfies
        held = _norm(name) == "torch" or _norm(name) in {_norm(k) for k in expected}
        if sep and _norm(name) in have and not held and Version(have[_norm(name)]).public != Version(version).public:
            problems.append(
                f"{image} image: {name.strip()} {have[_norm(name)]}, {Path(constraints).name} says {version.strip()}"
            )
    project = tomllib.loads((containers_dir.parent / "pyproject.toml").read_text())["project"]
    if have.get(_norm(project["name"])) != project["version"]:
        problems.append(
            f"{image} image: {project['name']} {have.get(_norm(project['name']), 'not installed')}, "
            f"pyproject.toml says {project['version']}"
        )
    return problems
