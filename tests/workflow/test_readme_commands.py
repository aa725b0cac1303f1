"""Every command the user-facing documents show, parsed from the documents themselves and checked, so that a documented
command cannot rot (about 2-3 min on 2 cores: dry runs, no measurement).

Documents: README.md, ARTIFACT.md, CONTRIBUTING.md, containers/README.md, reference_runs/README.md,
kubernetes/README.md and docs/*.md.
Commands: every line of their fenced ```bash/sh/console/shell blocks (`&&` chains split into parts, leading
`VAR=value` assignments set aside), and inline code spans in their prose that start with `snakemake ` or
`accelbench `. Placeholders such as `<name>` become a real system (h100). Each part gets exactly one check
(:func:`plan`):

- `snakemake ...`: planned, `-n` added (this machine has no GPU/Gaudi, no apptainer and no Slurm; planning is what
  must work from a login node); a target after `--config`/`--configfile` fails here; `snakemake --report` is run up
  to the report (a fresh copy has no figures yet; the report itself is tested end to end);
- `accelbench ...` in a fenced block: run for real (it needs no hardware); named in prose: its sub-command and options
  must exist (`--help`);
- the README's install one-liners: equal to what `.ci/run` runs (the test one) and the same pins (the main one);
- `pip install`: the extras exist in pyproject.toml, or the requirement parses; `$EDITOR <file>`: the file exists;
- `python -m pytest <paths>`: collected (`--collect-only`); `python <script> <sub-command>`: `--help` of it;
  `python -c "..."`: compiled, and the names it imports exist;
- a repository script (`benchmarks/*.sh`, `slurm/*.sh`, `containers/*.sh`): it exists and `bash -n` parses it
  (`containers/push.sh` also runs against a stand-in engine: tests/unit/test_artifact_docs.py);
  `device_run.sh <command>` also checks the command it wraps;
- `docker`/`podman`/`apptainer` build, tag, push, pull, run: the recipes they name exist (no container engine or
  registry here; tests/system builds and runs the image where podman is), and the `snakemake` command an image runs
  is planned here;
- `git clone`, `cd`, `mkdir -p`, `rsync` from another machine: known set-up steps, not run.

Anything else makes :func:`test_every_documented_command_has_a_check` fail: a new command in any of these documents
needs a check here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def checkout_files(folder: str, names: list[str]) -> set[str]:
    """shutil.copytree's ignore: a user's checkout (the committed reference runs included), without this one's
    outputs, caches and environments."""
    top = Path(folder) == REPO
    return {
        n
        for n in names
        if n in (".git", ".venv", "__pycache__", ".snakemake", "report.html", "build")
        or n.endswith(".egg-info")
        or (top and n in ("results", "logs"))
        or (Path(folder) == REPO / "resources" and n in ("mri", "sky", "llm"))
    }


DOCS = sorted(
    {
        REPO / "README.md",
        REPO / "ARTIFACT.md",
        REPO / "CONTRIBUTING.md",
        REPO / "containers/README.md",
        REPO / "reference_runs/README.md",
        REPO / "kubernetes/README.md",
        *(REPO / "docs").glob("*.md"),
    }
)
PLACEHOLDERS = {"<name>": "h100", "<repo>": ".", "<elsewhere>": "elsewhere"}
INSTALL = "python3 -m venv"
SETUP = ("git clone", "cd ", "rsync ")  # set-up steps shown for orientation: never run by a test
ENV = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=(?:\$\([^)]*\)|'[^']*'|\"[^\"]*\"|\S+)\s+)+")


def rel(doc: Path) -> str:
    return doc.relative_to(REPO).as_posix()


def doc_lines(path: Path) -> list[str]:
    """Lines of the fenced shell blocks (comments dropped), then the `snakemake ...`/`accelbench ...` spans of the
    prose."""
    text = path.read_text()
    lines = []
    for block in re.findall(r"^```(?:bash|sh|console|shell)\s*\n(.*?)^```", text, flags=re.S | re.M):
        block = block.replace("\\\n", " ")
        lines += [
            re.sub(r"\s+#.*$", "", ln.strip())
            for ln in block.splitlines()
            if ln.strip() and not ln.strip().startswith("#")
        ]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    lines += [m for m in re.findall(r"`([^`\n]+)`", prose) if m.startswith(("snakemake ", "accelbench "))]
    for key, value in PLACEHOLDERS.items():
        lines = [ln.replace(key, value) for ln in lines]
    return lines


def fenced(path: Path) -> set[str]:
    text = path.read_text()
    out = set()
    for block in re.findall(r"^```(?:bash|sh|console|shell)\s*\n(.*?)^```", text, flags=re.S | re.M):
        out |= {re.sub(r"\s+#.*$", "", ln.strip()) for ln in block.replace("\\\n", " ").splitlines()}
    return out


def plan(part: str, in_block: bool) -> tuple[str, object]:
    """(kind, what to run or check) for one command; ("unknown", part) when no check applies."""
    part = ENV.sub("", part.strip())
    if part.startswith(SETUP):
        return "setup", part
    if part.startswith("accelbench ") and re.search(r"<\w+>", part):  # `accelbench <aggregation> ...`: prose
        return "help", part
    if part.startswith("snakemake"):
        return ("report" if "--report" in part else "dry-run"), part
    if part.startswith("accelbench "):
        return ("run" if in_block else "help"), part
    if part.startswith("pip install"):
        return "pip", part
    if part.startswith("$EDITOR "):
        return "exists", part.split()[1]
    if part == "python -m pytest":  # README command 2's last step: what .ci/run runs (test_install_one_liners...)
        return "ci", part
    if part.startswith("python -m pytest"):
        return "collect", part
    if part.startswith(("python -c ", "python3 -c ")):
        return "python-c", shlex.split(part)[2]
    if re.match(r"python3? [\w/]+\.py \S+", part):
        return "script-help", part
    m = re.match(r"(?:nice )?((?:benchmarks|slurm|containers)/[\w.-]+\.sh)(.*)", part)
    if m:
        return "script", (m.group(1), m.group(2).strip())
    if re.match(r"(docker|podman|apptainer) (build|tag|push|pull|run)\b", part):
        return "container", part
    if part.startswith("mkdir -p "):
        return "setup", part
    return "unknown", part


def parts_of(line: str) -> list[str]:
    """The commands of one documented line: an install one-liner is one (checked against .ci/run) plus its last
    part; other `&&` chains split; `. .venv/bin/activate` is set-up."""
    if line.startswith(INSTALL):
        return [INSTALL, line.split("&&")[-1].strip()]
    return [p.strip() for p in line.split("&&") if p.strip() and not p.strip().startswith(". ")]


def commands() -> list[tuple[str, str, str, object]]:
    """(document, command, kind, payload) for every documented command, duplicates (same kind and command) once."""
    out, seen = [], set()
    for doc in DOCS:
        blocks = fenced(doc)
        for line in doc_lines(doc):
            for part in parts_of(line):
                found = [("install", line)] if part == INSTALL else [plan(part, line in blocks)]
                if found[0][0] == "script" and found[0][1][0].endswith("device_run.sh") and found[0][1][1]:
                    found.append(plan(found[0][1][1], True))  # the command it wraps
                inner = re.search(r" (snakemake .*)$", part) if re.match(r"(docker|podman) run ", part) else None
                if inner:
                    found.append(plan(inner.group(1), True))  # the command the image runs, planned here
                for kind, payload in found:
                    command = payload if kind in ("dry-run", "report") else part
                    # one plan per distinct command: `snakemake -n X` plans what `snakemake X` does
                    key = (
                        kind,
                        "report" if kind == "report" else re.sub(r" (-n|--cores all)(?= |$)", "", str(payload)),
                    )
                    if key not in seen:
                        seen.add(key)
                        out.append((rel(doc), command, kind, payload))
    return out


COMMANDS = commands()


def by_kind(*kinds: str) -> list[tuple[str, str, str, object]]:
    return [c for c in COMMANDS if c[2] in kinds]


def test_every_documented_command_has_a_check():
    unknown = [f"{doc}: {cmd}" for doc, cmd, kind, _ in COMMANDS if kind == "unknown"]
    assert not unknown, (
        "documented commands that no test checks (add a check to tests/workflow/"
        "test_readme_commands.py, or change the document):\n" + "\n".join(unknown)
    )


def test_the_parser_sees_what_it_must():
    """Both quick-start lines, the Slurm and rerun-one-rule commands, ARTIFACT's targeted claim commands, and a
    command of a docs/ page: a parser that found nothing would pass every other test."""
    found = {ENV.sub("", part) for doc in DOCS for line in doc_lines(doc) for part in parts_of(line)}
    docs = {rel(doc) for doc in DOCS if doc_lines(doc)}
    assert {
        "snakemake --cores all",
        "accelbench check-system",
        "snakemake -n --cores all --profile slurm --config system=h100",
    } <= found, found
    assert any("--profile slurm" in c for c in found) and any("results/h100/" in c for c in found), found
    assert "snakemake -n --cores all --profile kubernetes --config system=gaudi2" in found, found
    assert {"accelbench k8s render JOBSCRIPT", "accelbench k8s --site FILE"} <= found, found
    assert (
        sum(1 for c in found if c.startswith("snakemake results/claims") or "results/claims/claims.csv --cores" in c)
        >= 5
    ), found
    assert {"README.md", "ARTIFACT.md", "containers/README.md", "reference_runs/README.md"} <= docs, docs
    assert any(d.startswith("docs/") for d in docs), docs
    assert len([ln for ln in doc_lines(REPO / "README.md") if ln.startswith(INSTALL)]) == 2


def test_readme_is_short_and_links_each_docs_page_once():
    """The README fits a reviewer's first ten minutes; every docs/ page is reachable from it, once."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 200
    assert max(len(line) for line in text.splitlines()) < 400  # no generated wall of text
    for page in (REPO / "docs").glob("*.md"):
        assert text.count(f"](docs/{page.name}") == 1, (
            f"README links docs/{page.name} {text.count(f'](docs/{page.name}')} times"
        )
    assert "## Run it in a container" in text and "](containers/README.md)" in text


def test_install_one_liners_match_ci_and_pyproject():
    lines = [ln for ln in doc_lines(REPO / "README.md") if ln.startswith(INSTALL)]
    main, tests = ([p.strip() for p in ln.split("#")[0].split("&&")] for ln in lines)
    ci = (REPO / ".ci/run").read_text().strip().splitlines()[-1]
    # .ci/run runs exactly the README's test command (the fast tiers), then the system tier
    assert " && ".join(tests) + " && python -m pytest -m system" == ci, "README's test command and .ci/run differ"
    assert tests[-1] == "python -m pytest -m 'not system' -n logical --dist worksteal", tests[-1]  # both cores
    assert main[-1].startswith("snakemake ")
    # the main job installs exactly what the test command installs, without the test extras
    assert [p.replace("-e '.[test]'", "-e .") for p in tests[:-1]] == main[:-1]
    # every other document's install line is one of the two, or its install steps alone
    for doc, _, _kind, line in by_kind("install"):
        parts = [p.strip() for p in line.split("#")[0].split("&&")]
        assert parts in (main, tests, main[:-1], tests[:-1]), f"{doc}: {line} is neither README install line"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    images = yaml.safe_load((REPO / "containers/versions.yaml").read_text())
    from packaging.requirements import Requirement

    deps = {Requirement(d).name: Requirement(d) for d in pyproject["project"]["dependencies"]}
    for part in main:
        for name, version in re.findall(r"([A-Za-z0-9_.-]+)==([^\s'\"]+)", part):
            if name in deps:
                assert deps[name].specifier.contains(version), f"README pins {name}=={version}, pyproject {deps[name]}"
            for image, facts in images.items():
                if name in facts["pins"]:
                    assert str(facts["pins"][name]) == version, (
                        f"README pins {name}=={version}, image {image} pins {facts['pins'][name]}"
                    )


def test_pip_editor_script_and_container_lines_name_what_exists():
    """Checked, not run: they install, edit, build or push (no container engine or registry here)."""
    from packaging.requirements import Requirement

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for doc, cmd, kind, payload in by_kind("pip", "exists", "script", "container"):
        if kind == "pip":
            for extra in re.findall(r"-e '?\.\[([^\]]+)\]'?", cmd):
                assert all(e in extras for e in extra.split(",")), f"{doc}: {cmd}: unknown extra {extra}"
            for req in re.findall(r"'([^']+)'", cmd):
                if not req.startswith("."):
                    Requirement(req)  # parses
        elif kind == "exists":
            assert (REPO / payload).is_file(), f"{doc}: {cmd}: no {payload}"
        elif kind == "script":
            script = REPO / payload[0]
            assert script.is_file() and os.access(script, os.X_OK), (
                f"{doc}: {cmd}: {payload[0]} missing or not executable"
            )
            proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
            assert proc.returncode == 0, f"{doc}: {payload[0]}: {proc.stderr}"
        else:
            for word in shlex.split(cmd):
                if word.startswith("containers/"):
                    assert (REPO / word).is_file(), f"{doc}: {cmd}: no {word}"
            if " build " in f" {cmd} ":
                assert re.search(r"containers/\w+/(Dockerfile|accelbench-\w+\.def)", cmd), f"{doc}: {cmd}"


def test_python_snippets_compile_and_import_what_they_name():
    """`python -c "..."` lines (they write data files): compiled, and every name they import exists."""
    import ast
    import importlib

    for doc, cmd, _, code in by_kind("python-c"):
        tree = ast.parse(code)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{doc}: {cmd}: {node.module} has no {alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> Path:
    """The repository's sources (no results, venv or git), as a user's checkout."""
    root = tmp_path_factory.mktemp("readme") / "accelbench"
    shutil.copytree(REPO, root, ignore=checkout_files)
    return root


def _env() -> dict:
    env = dict(os.environ)
    env.pop("ACCELBENCH_SLURM_SITE", None)  # the documents' profile reads slurm/site.yaml
    return env


@pytest.mark.parametrize(
    "doc,command",
    [(d, c) for d, c, _, _ in by_kind("dry-run", "report")],
    ids=[c for _, c, _, _ in by_kind("dry-run", "report")],
)
def test_documented_snakemake_command_plans(repo_copy, doc, command):
    argv = shlex.split(command)
    run = [sys.executable, "-m", "snakemake", *argv[1:]]
    if "--report" not in argv and "-n" not in argv:
        run.insert(3, "-n")  # plan only: this machine lacks the hardware (and Slurm, apptainer)
    proc = subprocess.run(run, cwd=repo_copy, env=_env(), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    if "--report" in argv:
        # well-formed and parsed up to the report; in a fresh copy the figures do not exist yet (the report of a real
        # run is tested in the end-to-end tests)
        assert proc.returncode == 0 or (
            "Creating report..." in out and "marked for report but does not exist" in out
        ), f"{doc}: `{command}` failed:\n{out[-3000:]}"
        return
    assert proc.returncode == 0, f"{doc}: `{command}` failed:\n{out[-3000:]}"
    if "--lint" in argv:  # a lint plans nothing: it reports, and a clean workflow says so
        assert "your workflow is in a good condition" in out, out[-2000:]
        return
    assert "This was a dry-run" in out or "Nothing to be done" in out, out[-2000:]
    for target in [a for a in argv[1:] if a.startswith(("results/", "resources/"))]:
        # a target the command names is planned, not swallowed by --config
        assert target in out, f"{doc}: `{command}` did not plan {target}:\n{out[-2000:]}"
    if doc == "ARTIFACT.md" and "experiments=" in command:
        # a claim's command runs only what the claim needs (the whole gpu_paper.yaml plans about 90 jobs)
        total = re.search(r"^total\s+(\d+)", out, flags=re.M)
        assert total and int(total.group(1)) <= 25, f"{doc}: `{command}` plans {total and total.group(1)} jobs"


@pytest.mark.parametrize(
    "doc,command,kind",
    [(d, c, k) for d, c, k, _ in by_kind("run", "help", "collect", "script-help")],
    ids=[c for _, c, _, _ in by_kind("run", "help", "collect", "script-help")],
)
def test_documented_cli_command_runs(repo_copy, doc, command, kind):
    argv = shlex.split(command)
    bin_dir = Path(sys.executable).parent
    if kind == "run":
        run = [str(bin_dir / argv[0]), *argv[1:]]
    elif kind == "help":  # named in prose: the sub-command and its options exist
        sub = [] if re.search(r"<\w+>", argv[1]) else argv[1:2]  # `accelbench <command> ...`: any sub-command
        run = [str(bin_dir / "accelbench"), *sub, "--help"]
    elif kind == "collect":
        run = [sys.executable, *argv[1:], "--collect-only", "-q", "-p", "no:cacheprovider"]
    else:
        run = [sys.executable, argv[1], argv[2], "--help"]
    proc = subprocess.run(run, cwd=repo_copy, env=_env(), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{doc}: `{command}` failed:\n{out[-3000:]}"
    if kind == "script-help" or (kind == "help" and not re.search(r"<\w+>", argv[1])):
        for option in re.findall(r"(?<!\S)(--[a-z][\w-]*)", command):
            assert option in out, f"{doc}: `{command}`: {option} is no option of it:\n{out[-2000:]}"
    if kind == "collect":
        assert re.search(r"\d+ tests? collected", out), out[-2000:]
