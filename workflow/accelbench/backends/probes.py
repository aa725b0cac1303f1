"""Low-level probes shared by the backends and the provenance: a command's output, installed versions."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
from pathlib import Path


def run_quiet(cmd: list[str], cwd: str | Path | None = None) -> str | None:
    """``cmd``'s stripped stdout; None when it is missing, fails or takes over 20 s."""
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def library_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Installed distribution versions (None when not installed)."""
    out = {}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = None
    return out
