"""A local Slurm for the system tier (slurm/local_cluster.sh), started once per test module and stopped after it.

Without the packages (slurm-wlm, munge, slurmdbd, mariadb-server) the tests skip with the reason, for any user,
root included, unless ACCELBENCH_CI_APT=1 lets the script apt-get install them (what .ci/run sets); a start that
fails for any other reason fails the test.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "slurm/local_cluster.sh"


@contextlib.contextmanager
def local_cluster(state: Path, env: dict | None = None, what: str = "slurm/local_cluster.sh up") -> Iterator[Path]:
    env = {**os.environ, **(env or {})}
    up = subprocess.run(["bash", str(SCRIPT), "up", str(state)], capture_output=True, text=True, timeout=900, env=env)
    try:
        if up.returncode != 0:
            if os.environ.get("ACCELBENCH_CI_APT") != "1" and "not installed" in up.stderr:
                pytest.skip(
                    "Slurm/MariaDB packages are not installed and ACCELBENCH_CI_APT is not 1 (only "
                    ".ci/run lets tests apt-get install): " + up.stderr.strip().splitlines()[-1]
                )
            pytest.fail(f"{what} failed:\n{up.stdout}\n{up.stderr}")
        yield state
    finally:
        subprocess.run(["bash", str(SCRIPT), "down", str(state)], capture_output=True, text=True, timeout=120, env=env)
