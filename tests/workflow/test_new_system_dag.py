"""New hardware by name: a copy of config/systems/cpu.yaml under a new name is selected with
`--config system=<name>` and `accelbench check-system --system <name>`, runs through the DAG (tiny config), and its
results carry its name in the tables; the run's terminal lines stay at most 200 characters."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

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


def recipe() -> tuple[str, str, list[str]]:
    """ARTIFACT.md section 5's new-system recipe as written: (copied file, new file name, the YAML lines to set)."""
    text = (REPO / "ARTIFACT.md").read_text().split("\n## 5. ", 1)[1].split("\n## 6. ", 1)[0]
    copied, new = re.search(r"`cp config/systems/([\w-]+)\.yaml config/systems/([\w-]+)\.yaml`", text).groups()
    block = re.search(r"^\s*```yaml\n(.*?)^\s*```", text, flags=re.S | re.M).group(1)
    return copied, new, [ln.strip() for ln in block.splitlines() if ln.strip()]


def follow(copied: str, new: str, lines: list[str], systems: Path) -> None:
    """Copy ``systems/<copied>.yaml`` to ``systems/<new>.yaml`` and replace each of its top-level lines whose key a
    line of ``lines`` sets by that line (what an editor does; the copy's comments stay)."""
    edits = {ln.split(":", 1)[0]: ln for ln in lines}
    body = (systems / f"{copied}.yaml").read_text().splitlines()
    out = [
        edits.pop(ln.split(":", 1)[0]) if re.match(r"[a-z_]+:", ln) and ln.split(":", 1)[0] in edits else ln
        for ln in body
    ]
    assert not edits, f"the recipe sets keys {sorted(edits)} that {copied}.yaml lacks"
    (systems / f"{new}.yaml").write_text("\n".join(out) + "\n")


def check_system(name: str, systems: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "accelbench", "check-system", "--system", name, "--config", f"systems_dir={systems}"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_the_documented_new_system_recipe_works_as_written(tmp_path, tiny_config):
    """ARTIFACT section 5, followed literally: the copy with the documented edit passes `accelbench check-system` and
    plans the embedded default's jobs under its own name; the copy without it (what the docs once said)
    stops with the one line naming `name:`."""
    copied, new, lines = recipe()
    assert copied == "cpu" and {ln.split(":", 1)[0] for ln in lines} >= {"name", "description", "match"}, lines
    systems = tmp_path / "systems"
    shutil.copytree(REPO / "config/systems", systems)
    follow(copied, new, lines, systems)
    check = check_system(new, systems)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["system"]["name"] == new

    write_config(tmp_path, tiny_config, list(tiny_config["experiments"]))
    proc = snakemake(tmp_path, "-n", "--config", f"system={new}", f"systems_dir={systems}")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert f"results/{new}/" in proc.stdout, proc.stdout[-2000:]

    # the copy alone, its `name:` left as the copied file's
    shutil.copy(systems / f"{copied}.yaml", systems / f"{new}.yaml")
    bare = check_system(new, systems)
    assert bare.returncode != 0 and f"name '{copied}' must equal the file name '{new}'" in bare.stderr, bare.stderr


def test_every_new_system_recipe_says_to_edit_name():
    """Each document that tells how to add a system file (README, ARTIFACT section 5, docs/running.md, CONTRIBUTING)
    says to set `name:` to the file name: once none did, and a copy of cpu.yaml stopped at once."""
    docs = [REPO / "README.md", REPO / "ARTIFACT.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")]
    recipes = []
    for doc in docs:
        for paragraph in re.split(r"\n\s*\n", doc.read_text()):
            if re.search(r"config/systems/<\w+>\.yaml", paragraph) and re.search(
                r"\b(copy|add|new)\b", paragraph, re.I
            ):
                recipes.append((doc.name, paragraph))
                assert re.search(r"`name:", paragraph), f"{doc.name}: a new-system recipe without `name:`:\n{paragraph}"
    assert {d for d, _ in recipes} >= {"README.md", "ARTIFACT.md", "running.md"}, recipes
