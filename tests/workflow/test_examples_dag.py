"""Every config file of config/examples/ validates over the default, and the command its header shows plans the DAG
(a dry run: this machine lacks the hardware they name)."""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from conftest import REPO

EXAMPLES = sorted((REPO / "config/examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_validates_and_its_command_plans(path, default_config, tmp_path):
    from accelbench.core.config import deep_merge, validate_config

    validate_config(deep_merge(copy.deepcopy(default_config), yaml.safe_load(path.read_text())))
    (tmp_path / "config").symlink_to(REPO / "config")  # the Snakefile's `configfile:` is read in the work dir
    shown = [m.group(1) for m in re.finditer(r"^#\s+(snakemake .*)$", path.read_text(), flags=re.M)]
    for command in shown:
        argv = shlex.split(command)
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "-n", *argv[1:], "-d", str(tmp_path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0 and "This was a dry-run" in proc.stdout + proc.stderr, (
            f"{path.name}: `{command}` failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
