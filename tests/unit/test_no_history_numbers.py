"""No tracker or session numbers in the code, tests, configs and docs: a label, comment or paragraph says what a thing
was (a date, a commit, what changed), not which issue or session changed it; that history is in git. Left out: the
reference runs (their ``run.yaml`` notes are historical records, their ``README.md`` and ``tables/`` are generated
from those records and results).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# "issue 25", "Issue #46", "session 18", "issues 12", also across a line break
HISTORY_NUMBER = re.compile(r"\b(?:issue|session)s?\s+#?\d+", re.IGNORECASE)


def checked_files(root: Path) -> list[Path]:
    """Tracked text files under ``root`` that carry code, tests, configs or docs (the reference runs left out)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
    paths = [p for p in listed.split("\0") if p]
    return [root / p for p in paths if not p.startswith("reference_runs/") or p == "reference_runs/README.md"]


def history_numbers(files: list[Path], root: Path) -> list[str]:
    """``path:line: match`` for each tracker or session number in ``files`` (binary files skipped)."""
    hits = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for m in HISTORY_NUMBER.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            hits.append(f"{path.relative_to(root)}:{line}: {' '.join(m.group().split())}")
    return hits


def test_no_issue_or_session_numbers_in_tracked_code_and_docs():
    files = [f for f in checked_files(REPO) if f != Path(__file__).resolve()]  # this file plants its own
    assert any(f.name == "tables_rows.py" for f in files) and any(f.name == "testing.md" for f in files)
    assert history_numbers(files, REPO) == []


@pytest.mark.parametrize(
    "planted",
    [
        'OLD_SERIES = "ours (before issue 25)"\n',
        "Measured 2026-12-03 (session 18) with `.ci/run`\n",
        "# see Issue #56\n",
        "the goal of\nissue 42 was met\n",  # across a line break, as docs wrap
    ],
)
def test_a_planted_number_is_found(tmp_path, planted):
    """The check fails on a tracked file that names an issue or session by number (the old LoRA label among them)."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "workflow").mkdir()
    (tmp_path / "workflow" / "rows.py").write_text(planted)
    (tmp_path / "reference_runs" / "r").mkdir(parents=True)
    (tmp_path / "reference_runs" / "r" / "run.yaml").write_text("notes: as in session 14\n")  # a record: left out
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    hits = history_numbers(checked_files(tmp_path), tmp_path)
    assert len(hits) == 1 and hits[0].startswith("workflow/rows.py:"), hits
