"""ARTIFACT.md section 2 (kick the tires), read as an evaluator runs it: its install line installs every program its
later commands call (the old line installed `-e .` only, so its first check, `python -m pytest`, failed with
`No module named pytest`), and what it says the claims table reads for a1, a6 and a11 is what section 7's generated
table of the committed reference runs gives."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
SETUP = ("git clone", "cd ", ". ")


def section(text: str, number: int) -> str:
    return text.split(f"\n## {number}. ", 1)[1].split(f"\n## {number + 1}. ", 1)[0]


def commands(text: str) -> list[str]:
    """Every command of the section's fenced shell blocks, `&&` chains split, comments dropped."""
    out = []
    for block in re.findall(r"^```(?:bash|sh)\s*\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s+)#.*$", "", line).strip()
            out += [p.strip() for p in line.split("&&") if p.strip()]
    return out


def missing_programs(cmds: list[str], pyproject: dict) -> list[str]:
    """Commands whose program the section's own `pip install` lines do not install: a `python -m M` module or a
    console command must be a distribution of the installed requirements (the project's dependencies, plus each
    extra named as `-e '.[extra]'`) or a script of the project."""
    project = pyproject["project"]
    installed: set[str] = set()
    for cmd in cmds:
        if not cmd.startswith("pip install"):
            continue
        words = cmd.split()
        installed |= {Requirement(w).name.lower() for w in words[2:] if re.match(r"[A-Za-z][\w.-]*==", w)}
        for spec in re.findall(r"-e '?\.(?:\[([\w,]+)\])?'?(?:\s|$)", cmd + " "):
            installed |= {Requirement(d).name.lower() for d in project["dependencies"]}
            installed |= set(project.get("scripts", {}))
            for extra in filter(None, spec.split(",")):
                installed |= {Requirement(d).name.lower() for d in project["optional-dependencies"][extra]}
    missing = []
    for cmd in cmds:
        if cmd.startswith(SETUP) or cmd.startswith(("pip install", "python3 -m venv")):
            continue
        m = re.match(r"python3? -m ([\w.]+)", cmd)
        program = m.group(1) if m else cmd.split()[0]
        if program.lower() not in installed:
            missing.append(f"{cmd}: {program} is not installed by the section's install line")
    return missing


def test_section_2_installs_what_its_commands_run():
    text = section((REPO / "ARTIFACT.md").read_text(), 2)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    cmds = commands(text)
    assert any(c.startswith("python -m pytest") for c in cmds) and any(c.startswith("snakemake") for c in cmds), cmds
    assert missing_programs(cmds, pyproject) == []
    # the install line of old: the package without its test extras
    old = [c.replace("-e '.[test]'", "-e .") for c in cmds]
    assert old != cmds
    assert missing_programs(old, pyproject) == [
        "python -m pytest tests/unit/test_claims.py tests/unit/test_validate.py: pytest is not installed by the "
        "section's install line"
    ]


def generated_verdicts(text: str) -> dict[str, str]:
    """claim -> verdict of section 7's generated table (`<!-- claims:begin ... -->` to `<!-- claims:end -->`)."""
    block = text.split("<!-- claims:begin", 1)[1].split("<!-- claims:end -->", 1)[0]
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in block.splitlines() if ln.startswith("|")]
    header = rows[0]
    claim, verdict = header.index("claim"), header.index("verdict")
    return {r[claim]: r[verdict] for r in rows[2:]}


def stated_verdicts(text: str) -> dict[str, str]:
    """claim -> verdict of every `<!-- verdict:CLAIM -->VERDICT` in ``text`` (the verdict up to `,`/`;` or a line end;
    a parenthesised reason included)."""
    return dict(re.findall(r"<!-- verdict:(\w+) -->((?:[^,;(\n]|\([^)]*\))+)", text))


def test_section_2_says_what_the_reference_runs_give():
    """The old text said claims.md reads a1, a6 and a11 `not measured here` where section 7 shows a1 and a11 `holds`
    (from the reference runs): section 2 now names each verdict, and each equals section 7's."""
    text = (REPO / "ARTIFACT.md").read_text()
    stated = {k: v.strip() for k, v in stated_verdicts(section(text, 2)).items()}
    assert set(stated) == {"a1", "a6", "a11"}, stated
    generated = generated_verdicts(text)
    assert {k: generated[k] for k in stated} == stated
    planted = section(text, 2).replace("<!-- verdict:a1 -->holds", "<!-- verdict:a1 -->not measured here")
    assert stated_verdicts(planted)["a1"].strip() != generated["a1"]
