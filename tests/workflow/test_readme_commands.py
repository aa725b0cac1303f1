"""Every command the READMEs show, parsed from the READMEs themselves and run, so that a documented command cannot rot.

Parsed: the fenced ```bash blocks of README.md and containers/README.md, and inline code spans in their prose that
start with `snakemake ` or `accelbench ` (placeholders such as `<name>` become a real system, h100). Each line that
starts with `snakemake` or `accelbench` is run from a copy of the repository, as a user would type it there:

- `snakemake ...` as a dry run (`-n` added): this machine has no GPU/Gaudi, no apptainer and no Slurm, and planning is
  what must work from a login node (a fake `singularity` that answers `--version` stands in for apptainer, which a
  dry run never executes); a command that puts a target after `--config`/`--configfile` fails here;
- `accelbench ...` for real (it needs no hardware); `snakemake --report ...` for real up to the report, which in a
  fresh copy stops at the first figure that no run has made yet (the report itself is tested end to end).

The install one-liners of the quick start are checked instead of run (they install packages): the test one equals
what `.ci/run` runs, the main one installs the same pins, and its final `snakemake --cores all` is planned like the
others. `pip install -e '.[extra]'` lines name extras that pyproject.toml defines, and `$EDITOR <file>` names a file
that exists. Other lines (docker/apptainer build and push) are left alone.
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
DOCS = [REPO / "README.md", REPO / "containers/README.md", REPO / "CONTRIBUTING.md"]
PLACEHOLDERS = {"<name>": "h100"}
INSTALL = "python3 -m venv"


def doc_lines(path: Path) -> list[str]:
    """Lines of the fenced bash blocks, then the inline `snakemake ...`/`accelbench ...` spans of the prose."""
    text = path.read_text()
    lines = []
    for block in re.findall(r"^```(?:bash|sh|console)\s*\n(.*?)^```", text, flags=re.S | re.M):
        lines += [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    lines += [m for m in re.findall(r"`([^`\n]+)`", prose) if m.startswith(("snakemake ", "accelbench "))]
    for key, value in PLACEHOLDERS.items():
        lines = [ln.replace(key, value) for ln in lines]
    return lines


def commands() -> list[tuple[str, str]]:
    """(README, command) for every `snakemake`/`accelbench` command, including the final one of install one-liners."""
    out = []
    for doc in DOCS:
        for line in doc_lines(doc):
            line = re.sub(r"\s+#.*$", "", line)  # a trailing comment
            if line.startswith(INSTALL):
                line = line.split("&&")[-1].strip()
            if line.startswith(("snakemake", "accelbench")) and not re.search(r"<\w+>", line):  # `<cmd>`: prose
                if line not in [c for _, c in out]:
                    out.append((doc.relative_to(REPO).as_posix(), line))
    return out


def test_readmes_show_the_commands_this_test_runs():
    """The parser sees what it must: both quick-start lines, and the Slurm and rerun-one-rule commands."""
    found = [cmd for _, cmd in commands()]
    assert "snakemake --cores all" in found and "accelbench check-system" in found, found
    assert any("--profile slurm" in c for c in found) and any("results/h100/" in c for c in found), found
    assert len([ln for ln in doc_lines(REPO / "README.md") if ln.startswith(INSTALL)]) == 2


def test_install_one_liners_match_ci_and_pyproject():
    lines = [ln for ln in doc_lines(REPO / "README.md") if ln.startswith(INSTALL)]
    main, tests = ([p.strip() for p in ln.split("#")[0].split("&&")] for ln in lines)
    ci = (REPO / ".ci/run").read_text().strip().splitlines()[-1]
    assert " && ".join(tests) == ci, "README's test command and .ci/run differ"
    assert tests[-1] == "python -m pytest" and main[-1].startswith("snakemake ")
    # the main job installs exactly what the test command installs, without the test extras
    assert [p.replace("-e '.[test]'", "-e .") for p in tests[:-1]] == main[:-1]
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
                    assert str(facts["pins"][name]) == version, f"README pins {name}=={version}, image {image} " \
                                                                f"pins {facts['pins'][name]}"


def test_install_and_edit_lines_name_what_exists():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    checked = 0
    for doc in DOCS:
        for line in doc_lines(doc):
            line = line.split("#")[0].strip()
            for extra in re.findall(r"pip install -e '?\.\[([^\]]+)\]'?", line):
                assert all(e in extras for e in extra.split(",")), f"{doc.name}: {line}: unknown extra {extra}"
                checked += 1
            if line.startswith("$EDITOR "):
                assert (REPO / line.split()[1]).is_file(), f"{doc.name}: {line}"
                checked += 1
    assert checked >= 2


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> Path:
    """The repository's sources (no results, venv or git) and a PATH with a stand-in `singularity`."""
    root = tmp_path_factory.mktemp("readme") / "accelbench"
    shutil.copytree(REPO, root, ignore=shutil.ignore_patterns(
        ".git", ".venv", "results", "logs", ".snakemake", "report.html", "__pycache__", "*.egg-info", "mri", "sky",
        "llm", "build"))
    fake = root.parent / "bin" / "singularity"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "apptainer version 1.3.4" && exit 0\n'
                    'echo "stand-in singularity of tests/workflow/test_readme_commands.py" >&2; exit 1\n')
    fake.chmod(0o755)
    return root


@pytest.mark.parametrize("doc,command", commands(), ids=[c for _, c in commands()])
def test_readme_command_runs(repo_copy, doc, command):
    argv = shlex.split(command, comments=True)
    env = {**os.environ, "PATH": f"{repo_copy.parent / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ACCELBENCH_SLURM_SITE", None)  # the README's profile reads slurm/site.yaml
    if argv[0] == "snakemake":
        run = [sys.executable, "-m", "snakemake", *argv[1:]]
        if "--report" not in argv:
            run.insert(3, "-n")  # plan only: this machine lacks the hardware (and Slurm, apptainer)
    else:
        run = [str(Path(sys.executable).parent / argv[0]), *argv[1:]]
    proc = subprocess.run(run, cwd=repo_copy, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    if "--report" in argv:
        # well-formed and parsed up to the report; in a fresh copy the figures do not exist yet (the report of a real
        # run is tested in the end-to-end tests)
        assert proc.returncode == 0 or ("Creating report..." in out and "marked for report but does not exist" in out), \
            f"{doc}: `{command}` failed:\n{out[-3000:]}"
        return
    assert proc.returncode == 0, f"{doc}: `{command}` failed:\n{out[-3000:]}"
    if argv[0] == "snakemake":
        assert "This was a dry-run" in out or "Nothing to be done" in out, out[-2000:]
        targets = [a for a in argv[1:] if a.startswith("results/")]
        for target in targets:  # a target the command names is planned, not swallowed by --config
            assert target in out, f"{doc}: `{command}` did not plan {target}:\n{out[-2000:]}"
