"""docs/design.md is the true map of the tree: its Layout table names every top-level folder and every package of
workflow/accelbench/, and everything it names there exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "workflow/accelbench"


def layout_paths(text: str) -> list[str]:
    """The first column of docs/design.md's Layout table: one path a row, without the backticks."""
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE)


def tracked_folders(root: Path) -> tuple[set[str], set[str]]:
    """Top-level folders and packages of workflow/accelbench/ that hold a tracked file (results/, .venv/, build output
    and other untracked folders are not the tree's)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
    paths = [Path(f) for f in files.split("\0") if f and (root / f).exists()]
    top = {p.parts[0] for p in paths if len(p.parts) > 1}
    packages = {"/".join(p.parts[:3]) for p in paths if p.as_posix().startswith(PACKAGE + "/") and len(p.parts) > 3}
    return top, packages


def mismatches(root: Path, text: str) -> list[str]:
    named = [p.rstrip("/") for p in layout_paths(text)]
    top, packages = tracked_folders(root)
    problems = [f"named in docs/design.md but absent: {p}" for p in named if not (root / p).exists()]
    named_top = {p.split("/")[0] for p in named if (root / p).is_dir()}
    problems += [f"top-level folder missing from docs/design.md: {d}/" for d in sorted(top - named_top)]
    problems += [f"package missing from docs/design.md: {d}/" for d in sorted(packages - set(named))]
    return problems


def test_design_md_maps_the_tree():
    assert mismatches(REPO, (REPO / "docs/design.md").read_text()) == []


def test_design_map_check_catches_a_missing_row_and_a_stale_one():
    """The check fails when a folder has no row and when a row names what the tree lacks."""
    text = (REPO / "docs/design.md").read_text()
    no_campaigns = "\n".join(line for line in text.splitlines() if not line.startswith("| `campaigns/`"))
    assert mismatches(REPO, no_campaigns) == ["top-level folder missing from docs/design.md: campaigns/"]
    no_measure = "\n".join(line for line in text.splitlines() if not line.startswith(f"| `{PACKAGE}/measure/`"))
    assert mismatches(REPO, no_measure) == [f"package missing from docs/design.md: {PACKAGE}/measure/"]
    stale = text.replace("| `campaigns/` |", "| `campaigns/` |\n| `lab_notes/` | gone |", 1)
    assert mismatches(REPO, stale) == ["named in docs/design.md but absent: lab_notes"]


def rooms_missing(text: str) -> list[str]:
    """The modules the registry imports by name (``accelbench.core.experiment.ROOMS``) that docs/design.md's table
    of an experiment folder's rooms does not name."""
    from accelbench.core.experiment import ROOMS

    section = text.split("## The rooms of an experiment folder", 1)[-1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([^`]+)`", "\n".join(re.findall(r"^\| ([^|]+) \|", section, flags=re.MULTILINE))))
    return [f"{room}.py" for room in ROOMS if f"{room}.py" not in named]


def test_design_md_names_every_room_the_registry_imports():
    text = (REPO / "docs/design.md").read_text()
    assert rooms_missing(text) == []
    no_verdicts = "\n".join(line for line in text.splitlines() if not line.startswith("| `verdicts.py`"))
    assert rooms_missing(no_verdicts) == ["verdicts.py"]  # the check can fail
