"""The code keeps one shape: ruff's lint rules and its formatter (configured in pyproject.toml) find nothing.

`ruff check --fix` and `ruff format` repair most findings; the version is pinned in constraints.txt, so the
formatter's output does not change under a user.
"""

import subprocess
import sys

from conftest import REPO


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True)


def test_ruff_lint_finds_nothing():
    proc = _ruff("check", "--output-format", "concise", ".")
    assert proc.returncode == 0, f"ruff check (fix: `ruff check --fix`):\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"


def test_ruff_format_changes_nothing():
    proc = _ruff("format", "--check", ".")
    assert proc.returncode == 0, (
        f"ruff format --check (fix: `ruff format`):\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"
    )


def test_the_lint_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom .x import y\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--config", str(REPO / "pyproject.toml"), str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "F401" in proc.stdout and "TID252" in proc.stdout


MAX_MODULE_LINES = 400  # a module past it is split by what it does (CONTRIBUTING.md)


def long_modules(root) -> list[str]:
    """Modules under ``root`` longer than :data:`MAX_MODULE_LINES`, as ``path: lines``."""
    return [
        f"{p.relative_to(root)}: {n}"
        for p in sorted(root.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]


def test_no_package_module_is_longer_than_400_lines(tmp_path):
    assert long_modules(REPO / "workflow/accelbench") == []
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules(tmp_path) == [f"long.py: {MAX_MODULE_LINES + 1}"]  # the check itself can fail
