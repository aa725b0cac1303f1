"""Two users, one machine: predictable names in the shared temp folder. The merged config schema lived at
``$TMPDIR/accelbench-schema-<hash>.json``: a file another user planted there steered (or broke) root's run, and root's
0600 file blocked every other user (`PermissionError` in `snakemake -n`). Now it is built per run in a private folder:
root and then `nobody` each run `snakemake -n` with one shared TMPDIR, after `nobody` planted a non-JSON file at the
old name, and both plan."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from dag import REPO, SNAKEMAKE, write_config

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="two users: needs root to be the second one too")


def _as_nobody(argv: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run([*setpriv, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_second_user_plans_after_root_and_a_planted_schema_changes_nothing(tiny_config):
    from accelbench.core.config import CONFIG_SCHEMA, load_schema

    base = Path(tempfile.mkdtemp(prefix="accelbench-twousers-"))
    try:
        base.chmod(0o755)
        shared_tmp = base / "tmp"
        shared_tmp.mkdir()
        shared_tmp.chmod(0o1777)  # like /tmp
        root_dir, nobody_dir = base / "root", base / "nobody"
        root_dir.mkdir()
        nobody_dir.mkdir()
        os.chown(nobody_dir, NOBODY, NOBODY)
        for w in (root_dir, nobody_dir):
            write_config(w, tiny_config, ["sr3_scaling"])
        os.chown(nobody_dir / "config.yaml", NOBODY, NOBODY)

        # nobody plants a non-JSON file where the old code looked for the merged schema
        text = json.dumps(load_schema(REPO / CONFIG_SCHEMA))
        planted = shared_tmp / f"accelbench-schema-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
        plant = f"open({str(planted)!r}, 'w').write('profile_steps: [not json')"
        env = {**os.environ, "TMPDIR": str(shared_tmp)}
        assert _as_nobody(["python3", "-c", plant], env, nobody_dir).returncode == 0
        planted_text = planted.read_text()

        def dry(workdir: Path) -> list[str]:
            return [*SNAKEMAKE, "-n", "-d", str(workdir), "--configfile", str(workdir / "config.yaml")]

        root = subprocess.run(dry(root_dir), env=env, capture_output=True, text=True, timeout=600)
        assert root.returncode == 0, (root.stdout + root.stderr)[-3000:]
        nobody_env = {**env, "HOME": str(nobody_dir), "XDG_CACHE_HOME": str(nobody_dir / ".cache")}
        second = _as_nobody(dry(nobody_dir), nobody_env, nobody_dir)
        assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
        assert "PermissionError" not in second.stdout + second.stderr
        # the plan is the same for both users, and the planted file was neither read nor replaced
        assert "sr3" in root.stdout and "sr3" in second.stdout
        assert planted.read_text() == planted_text
        assert sorted(p.name for p in shared_tmp.iterdir()) == [planted.name]  # no schema file left behind
    finally:
        shutil.rmtree(base)
