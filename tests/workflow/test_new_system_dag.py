"""New hardware by name: a copy of config/systems/cpu.yaml under a new name is selected with
`--config system=<name>` and `accelbench check-system --system <name>`, runs through the DAG (tiny config), and its
results carry its name in the tables; the run's terminal lines stay at most 200 characters."""

import json
import shutil
import subprocess
import sys

import pandas as pd
import yaml

from dag import REPO, snakemake, write_config

MAX_LINE = 200  # characters of the longest line a default run prints


def test_a_copy_of_cpu_runs_by_name_and_its_tables_name_it(tmp_path, tiny_config):
    systems = tmp_path / "systems"
    shutil.copytree(REPO / "config/systems", systems)
    raw = yaml.safe_load((systems / "cpu.yaml").read_text())
    (systems / "epyc2.yaml").write_text(yaml.safe_dump({**raw, "name": "epyc2", "description": "2-core lab VM"}))

    check = subprocess.run(
        [sys.executable, "-m", "accelbench", "check-system", "--system", "epyc2", "--config", f"systems_dir={systems}"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["system"]["name"] == "epyc2"

    # tf32 is `unsupported` on any CPU: written with the system and provenance at once, no measurement (seconds)
    tiny_config["unet3d_profile"]["configurations"] = ["tf32"]
    write_config(tmp_path, tiny_config, ["unet3d_profile"])
    proc = snakemake(tmp_path, "results/study_a/table.csv", "--config", "system=epyc2", f"systems_dir={systems}")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert (tmp_path / "results/epyc2/unet3d_profile/whole_head/tf32/result.json").is_file()
    table = pd.read_csv(tmp_path / "results/study_a/table.csv")
    assert list(table["system"]) == ["epyc2"]
    assert table["hardware"].str.endswith("[epyc2: 2-core lab VM]").all(), table["hardware"].tolist()

    longest = max(log.splitlines(), key=len)
    assert len(longest) <= MAX_LINE, f"{len(longest)} characters: {longest}"
