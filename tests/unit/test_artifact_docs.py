"""The evaluator's documents say what the repository holds: every third-party input has a licence line in
THIRD_PARTY.md, ARTIFACT.md opens with one line per claim (generated from the reference runs, digest claims marked)
and then the commands and their times, each reference run records its OS and image, and constraints.txt locks every
package the project needs. Each list checked here is derived from the repository (schemas, registry, folders,
metadata), not typed."""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import re
import tomllib
from importlib import metadata
from pathlib import Path

import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def md_rows(text: str) -> list[list[str]]:
    """The body rows of every Markdown table in ``text``, as lists of cells."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|[\s:|-]+\|", line.strip()):
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def licence_lines() -> dict[str, str]:
    """``{key: licence cell}`` of THIRD_PARTY.md: each backticked name of a row's first cell."""
    out = {}
    for cells in md_rows((REPO / "THIRD_PARTY.md").read_text()):
        for key in re.findall(r"`([^`]+)`", cells[0]):
            out.setdefault(key, cells[-1])
    return out


def _source_enums(node, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "source" and isinstance(value, dict) and "enum" in value:
                found |= set(value["enum"])
            _source_enums(value, found)
    elif isinstance(node, list):
        for value in node:
            _source_enums(value, found)
    return found


def bundled_inputs() -> dict[str, str]:
    """``{key: why it is needed}``: every input a run can read and every file the repository carries that is not
    the project's own code, derived from the schemas, the accuracy tasks, the registry, ``resources/`` and the
    package data."""
    from accelbench.core.registry import EXPERIMENTS
    from accelbench.experiments.llm_quant.task_data import BUNDLED

    need = {}
    schemas = [
        REPO / "config/config.schema.yaml",
        *sorted(REPO.glob("workflow/accelbench/experiments/*/*.schema.yaml")),
    ]
    for path in schemas:
        for value in _source_enums(yaml.safe_load(path.read_text()), set()):
            need[value] = f"a `source` value of {path.relative_to(REPO)}"
    for task in BUNDLED:
        need[task] = "an accuracy task's bundled data (llm_quant/task_data.py BUNDLED)"
    for exp in EXPERIMENTS.values():
        for name in exp.inputs:
            need[name] = f"an input of registry entry {exp.name}"
    ignored = [
        ln.strip().lstrip("/").rstrip("/")
        for ln in (REPO / ".gitignore").read_text().splitlines()
        if ln.startswith("/resources/")
    ]
    for path in sorted((REPO / "resources").rglob("*")):
        rel = path.relative_to(REPO).as_posix()
        if path.is_file() and not any(rel.startswith(f"{g}/") for g in ignored):
            need[rel] = "a file under resources/"
    own = ("*.schema.json", "*.schema.yaml", "*/rules.smk", "*.rst", "schemas/*.json")
    package = REPO / "workflow/accelbench"
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["accelbench"]
    for pattern in patterns:
        for path in sorted(package.glob(pattern)):
            inner = path.relative_to(package).as_posix()
            if path.is_file() and not any(fnmatch.fnmatch(inner, o) for o in own):
                need[path.relative_to(REPO).as_posix()] = f"package data ({pattern} in pyproject.toml)"
    return need


def covered(key: str, lines: dict[str, str]) -> str | None:
    """The licence cell naming ``key``: the key itself, its file name (resources/reference/x.csv as `x.csv`) or a
    folder above it."""
    parts = key.split("/")
    candidates = [key, parts[-1], *("/".join(parts[:i]) for i in range(1, len(parts)))]
    return next((lines[c] for c in candidates if c in lines), None)


def test_third_party_names_every_input_with_a_licence():
    lines = licence_lines()
    need = bundled_inputs()
    # the derivation sees what the issue names (a derivation that found nothing would pass)
    assert {"mni152", "hubble", "pydoc", "smollm2_gguf", "hellaswag", "boolq", "image", "data"} <= set(need), need
    assert any(k.startswith("resources/tokenizers/") for k in need) and any("/lora/authors/" in k for k in need)
    missing = [f"{k} ({why})" for k, why in need.items() if not (covered(k, lines) or "").strip(" -?")]
    assert not missing, "inputs without a licence line in THIRD_PARTY.md:\n" + "\n".join(missing)


def test_artifact_points_to_third_party_and_keeps_no_second_licence_table():
    text = (REPO / "ARTIFACT.md").read_text()
    assert "](THIRD_PARTY.md)" in text
    assert "Hubble eXtreme Deep Field" not in text  # the table moved to THIRD_PARTY.md, once


def claims() -> dict[str, dict]:
    out = {}
    for name in ("study_a_claims.csv", "study_b_claims.csv"):
        body = "".join(ln for ln in (REPO / "resources/reference" / name).open() if not ln.startswith("#"))
        for row in csv.DictReader(io.StringIO(body)):
            digest = row["source"] == "digest" or row.get("note", "").startswith("(digest)")
            out[row["claim_id"]] = {**row, "digest": digest}
    return out


def opening_table() -> tuple[list[str], list[list[str]]]:
    """ARTIFACT.md's text before its first section, and the rows of the tables in it."""
    text = (REPO / "ARTIFACT.md").read_text()
    head = text.split("\n## ", 1)[0]
    return head, md_rows(head)


def test_artifact_opens_with_one_table_of_every_claim():
    """ARTIFACT.md's first table is the compact one-line-per-claim table: every claim of the claims
    files once, in their order, short cells, no footnote markers, digest claims marked, and exactly what
    `accelbench reference-runs` generates from the committed reference runs' claims tables; the commands, their
    times and the tolerances follow below it."""
    from accelbench.aggregate import claims_docs as cd
    from accelbench.aggregate import claims_front as cf
    from accelbench.aggregate import reference_runs as rr

    head, _ = opening_table()
    tables = re.findall(r"(?:^\|.*\n)+", head, flags=re.M)
    assert tables, "ARTIFACT.md opens with no table"
    first = md_rows(tables[0])
    header = [c.lower() for c in first[0]]
    assert header == [c.lower() for c in cf.FRONT_COLUMNS], header
    known = claims()
    assert [r[0] for r in first[1:]] == list(known), "the first table is not one line per claim in the files' order"
    for cells in first[1:]:
        assert len(cells) == len(header), cells
        long = [c for c in cells if len(c) > cd.FRONT_CELL_CHARS]
        assert not long, f"{cells[0]}: cells over {cd.FRONT_CELL_CHARS} characters: {long}"
        assert not re.search(r"\[\d+\]", " ".join(cells)), f"{cells[0]}: a footnote marker in the first table"
        digest = "digest (unverified)" in cells[2]
        assert digest == known[cells[0]]["digest"], f"{cells[0]}: digest mark {digest}, claims file disagrees"
    # regenerate and compare: the block is what the command writes from the committed runs' results
    runs = rr.find_runs(REPO / "reference_runs")
    every = [str(r["path"] / rel) for r in runs for rel in r["results"]]
    block = cd.reference_front(
        REPO / "resources/reference", cd.judged(every, REPO / "resources/reference")[0], len(runs)
    )
    text = (REPO / "ARTIFACT.md").read_text()
    assert f"{rr.FRONT_BEGIN}\n{block}\n{rr.FRONT_END}" in head, "run `accelbench reference-runs`"
    assert text.index(rr.FRONT_BEGIN) < text.index("\n## 1. ")
    # the commands and their claims follow the first table: every claim named there, every tolerance in section 4
    commands = md_rows(tables[1])
    named = set()
    for cells in commands[1:]:
        for a, b in re.findall(r"\b([ab]\d+b?)(?:-([ab]?\d+))?\b", cells[1]):
            if b:
                lo, hi = int(a[1:]), int(b.lstrip("ab"))
                named |= {f"{a[0]}{n}" for n in range(lo, hi + 1)}
            else:
                named.add(a)
    assert set(known) <= named | {c for c in known if c.endswith("b")} and "a4b" in named, set(known) - named
    assert re.search(r"<!-- time:command1\.native\.run -->", head) and "10 min 1 s" not in head
    section4 = text.split("\n## 4. ", 1)[1].split("\n## 5. ", 1)[0]
    ids = {c for cells in commands[1:] for c in re.findall(r"\b[AB]-\d\b", cells[0])}
    assert len(ids) >= 10, ids
    missing = [c for c in sorted(ids) if not re.search(rf"\bcommand {c}:", section4, flags=re.I)]
    assert not missing, f"commands of the opening table without their block in section 4: {missing}"


def _platforms(run: Path) -> tuple[set[str], set]:
    platforms, images = set(), set()
    for path in run.glob("results/**/result.json"):
        env = json.loads(path.read_text())["environment"]
        platforms.add(env["software"]["platform"])
        images.add((env.get("container") or {}).get("image"))
    return platforms, images


def test_reference_runs_record_their_os_and_image():
    runs = sorted(p.parent for p in (REPO / "reference_runs").glob("*/run.yaml"))
    assert runs
    for run in runs:
        meta = yaml.safe_load((run / "run.yaml").read_text())
        assert meta.get("os") and meta.get("image"), f"{run.name}/run.yaml lacks os or image"
        platforms, images = _platforms(run)
        for platform in platforms:  # e.g. Linux-6.18.44-fc-v657-gpu-x86_64-with-glibc2.39
            kernel, glibc = re.search(r"Linux-([\d.]+)", platform), re.search(r"glibc([\d.]+)", platform)
            assert kernel.group(1) in meta["os"] and glibc.group(1) in meta["os"], (run.name, platform, meta["os"])
        if images == {None}:  # no image recorded in any result: the run.yaml must not name one
            assert "not recorded" in meta["image"], (run.name, meta["image"])
        else:
            assert all(i in meta["image"] for i in images if i), (run.name, images, meta["image"])


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            pins[re.sub(r"[-_.]+", "-", req.name).lower()] = str(req.specifier)
    return pins


def test_constraints_lock_every_package_the_project_needs():
    """Every distribution the project and its test extra require, followed through the installed metadata, is pinned
    (==, no local label): torch, torchao, transformers, peft, accelerate and the rest."""
    pins = _pins()
    norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()  # noqa: E731
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    seen, missing = set(), []
    while todo:
        req = todo.pop()
        if norm(req.name) in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(norm(req.name))
        if norm(req.name) not in pins:
            missing.append(req.name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        todo += [Requirement(r) for r in dist.requires or []]
    assert {"torch", "torchao", "transformers", "peft", "accelerate", "snakemake"} <= seen
    assert not missing, f"required but not pinned in constraints.txt: {sorted(missing)}"
    for name, spec in pins.items():
        assert spec.startswith("==") and "+" not in spec, f"constraints.txt: {name}{spec} is not a public == pin"


def test_versions_yaml_records_each_images_digests():
    """Every image has a `digests` map (pushed reference -> sha256), empty while nothing is published."""
    facts = yaml.safe_load((REPO / "containers/versions.yaml").read_text())
    for image, want in facts.items():
        assert isinstance(want.get("digests"), dict), f"versions.yaml {image}: no digests map"
        for ref, digest in want["digests"].items():
            assert ref.endswith(
                f"/accelbench-{image}:" + tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
            ) and re.fullmatch(r"sha256:[0-9a-f]{64}", str(digest)), (image, ref, digest)


def test_push_script_records_the_registrys_digest(tmp_path):
    """containers/push.sh against a stand-in engine (podman-like: image inspect, tag, push --digestfile): the digest
    lands in this image's block of versions.yaml, a second push replaces it, and a missing image stops it."""
    import shutil
    import subprocess

    shutil.copytree(REPO / "containers", tmp_path / "containers")
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    engine = tmp_path / "podman"
    engine.write_text(
        "#!/usr/bin/env bash\n"
        'echo "$@" >> "$(dirname "$0")/calls"\n'
        "[[ $1 == image && $3 == accelbench-missing:* ]] && exit 125\n"
        'if [[ $1 == push ]]; then printf "sha256:%064d" "$DIGEST_N" > "$3"; fi\n'
    )
    engine.chmod(0o755)
    (tmp_path / "containers/missing").mkdir()

    def push(*images, n=1):
        env = {"PATH": "/usr/bin:/bin", "ENGINE": str(engine), "DIGEST_N": str(n)}
        return subprocess.run(
            ["bash", str(tmp_path / "containers/push.sh"), "reg.example/ab", *images],
            capture_output=True,
            text=True,
            env=env,
        )

    proc = push("cuda", "habana")
    assert proc.returncode == 0, proc.stderr
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    facts = yaml.safe_load((tmp_path / "containers/versions.yaml").read_text())
    assert facts["cuda"]["digests"] == {f"reg.example/ab/accelbench-cuda:{version}": "sha256:" + "0" * 63 + "1"}
    assert f"reg.example/ab/accelbench-habana:{version}" in facts["habana"]["digests"]
    assert push("cuda", n=2).returncode == 0
    facts = yaml.safe_load((tmp_path / "containers/versions.yaml").read_text())
    assert list(facts["cuda"]["digests"].values()) == ["sha256:" + "0" * 63 + "2"]  # replaced, not added
    assert facts["cuda"]["base"] == yaml.safe_load((REPO / "containers/versions.yaml").read_text())["cuda"]["base"]
    proc = push("missing")
    assert proc.returncode == 1 and "build it first" in proc.stderr


def test_artifact_opening_table_is_what_the_claims_rule_opens_with(tmp_path):
    """ARTIFACT.md says its first table is "as `results/claims/claims.md` opens" from the reference runs: the claims
    rule's build on every committed reference run's results (`snakemake --config 'experiments=[]'`) opens with the
    same rows, value for value (once the block came from each run's stale tables/claims/claims.csv, judged run by
    run: b1 3.40x vs 3.38x, b13 fp32 0.96 vs faithful 0.93, b14 on another H100 node)."""
    from accelbench.aggregate import claims_report as cr
    from accelbench.aggregate import reference_runs as rr

    every = [str(r["path"] / rel) for r in rr.find_runs(REPO / "reference_runs") for rel in r["results"]]
    cr.aggregate(every, REPO / "resources/reference", tmp_path / "claims")
    built = (tmp_path / "claims" / "claims.md").read_text()
    built_rows = [
        r for r in md_rows("\n".join(re.findall(r"^\|.*$", built, flags=re.M))) if re.fullmatch(r"[ab]\d+b?", r[0])
    ]
    block = (REPO / "ARTIFACT.md").read_text().split(rr.FRONT_BEGIN, 1)[1].split(rr.FRONT_END, 1)[0]
    artifact_rows = md_rows("\n".join(re.findall(r"^\|.*$", block, flags=re.M)))[1:]
    assert artifact_rows and artifact_rows == built_rows[: len(artifact_rows)]
