"""benchmarks/ holds tools a user runs, not lab notes: no dated data file, and every script answers --help.

Dated CSVs, probes and their JSON live with the reference run they explain (``reference_runs/<run>/notes/``); lease
scripts are campaign files (``campaigns/``). A tool is named in docs/design.md's map of the tree.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
TOOLS = sorted(p for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh"))
# inputs of a tool, not measurements: node_wheels.sh reads the node image's package list
TOOL_INPUTS = {"node-image-packages.txt"}
# what Python itself writes there when a test imports a tool (the tree's .gitignore keeps it out of git)
CACHES = {"__pycache__"}
# a measurement's marks: a date, a hardware series (h200, a100, cpu), a device call or a probe
DATED = re.compile(r"\d{4}-\d{2}-\d{2}|_(h100|h200|a100|v100|gaudi\d|cpu)|call\d|probe", re.IGNORECASE)


def test_benchmarks_holds_only_tools_and_their_inputs():
    others = sorted(p.name for p in BENCHMARKS.iterdir() if p not in TOOLS and p.name not in TOOL_INPUTS | CACHES)
    assert others == [], f"data files in benchmarks/ (move them to reference_runs/<run>/notes/): {others}"
    dated = sorted(p.name for p in TOOLS if DATED.search(p.stem))
    assert dated == [], f"dated or run-specific scripts in benchmarks/ (a run's notes or a campaign file): {dated}"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.name)
def test_every_tool_answers_help_and_is_documented(tool, tmp_path):
    argv = [sys.executable, str(tool), "--help"] if tool.suffix == ".py" else ["bash", str(tool), "--help"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{tool.name} --help: rc {done.returncode}\n{done.stderr[-2000:]}"
    assert len(done.stdout.strip().splitlines()) >= 2, f"{tool.name} --help says nothing: {done.stdout!r}"
    assert list(tmp_path.iterdir()) == [], f"{tool.name} --help wrote files: {list(tmp_path.iterdir())}"
    assert f"benchmarks/{tool.name}" in (REPO / "docs/design.md").read_text(), f"{tool.name} not in docs/design.md"


def test_tool_csv_defaults_are_not_dated_files_in_benchmarks():
    """A tool's default output goes under results/, never to a committed file in benchmarks/."""
    for tool in TOOLS:
        text = tool.read_text()
        assert not re.search(r"default=[^,\n]*(?<![\w/])benchmarks/[\w.-]+\.(csv|json)", text), tool.name
