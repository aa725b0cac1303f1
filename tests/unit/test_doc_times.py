"""Docs from one source of times: every time or test count a document states as the current measurement is
marked ``<!-- time:KEY -->VALUE`` or ``<!-- count:KEY -->VALUE`` and equals its record: README command 1's times come
from ``docs/embedded_default_cpu.csv`` (the newest row held to AVX2 and the newest native one; its per-experiment
job times as ``command1.<mode>.part.<experiment>``), everything else
from ``docs/times.csv`` (where, when and how each was measured). Two documents stating one measurement differently,
a stated value that differs from its record, an unknown key, an unmarked time in README.md or in ARTIFACT.md (but
its GPU estimates and published values), or the fast tiers' numbers of two days fail here.

Older measurements (the history in docs/gpu-nodes.md and in git) are other measurements, with their own
dates, and stay unmarked.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from pathlib import Path

from accelbench.core.estimate import fmt

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted({REPO / "README.md", REPO / "ARTIFACT.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")})
EMBEDDED = REPO / "docs/embedded_default_cpu.csv"
TIMES = REPO / "docs/times.csv"

DURATION = r"(?<![\w.,])(?:\d+ h\b(?: \d+ min\b)?|\d+ min\b(?: \d+ s\b)?|\d+ s\b)"
COUNT = r"\d{1,3}(?:,\d{3})+|\d+"
MARK = re.compile(r"<!-- (time|count):([\w.]+) -->(?:about )?(" + DURATION + r"|" + COUNT + r")")
ANY_MARK = re.compile(r"<!-- (?:time|count):")
UNIT = {"time": "s", "count": "count"}


def seconds(text: str) -> int:
    """``8 min 44 s`` / ``31 s`` / ``1 h 2 min`` -> whole seconds (the form accelbench.core.estimate.fmt prints)."""
    units = {"h": 3600, "min": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+) (h|min|s)\b", text))


def records() -> dict[str, tuple[float, str, str]]:
    """key -> (value, unit ``s``/``count``, where it was recorded)."""
    out: dict[str, tuple[float, str, str]] = {}
    rows = list(csv.DictReader(io.StringIO(EMBEDDED.read_text())))
    for mode, held in (("avx2", "True"), ("native", "False")):
        mine = [r for r in rows if r["avx2_held"] == held and r["rc"] == "0"]
        newest = sorted(mine, key=lambda r: r["date"])[-1]  # the last row of the newest date
        where = f"{EMBEDDED.relative_to(REPO)} ({newest['date']}, avx2_held={held})"
        for part in ("install", "run", "total", "estimate"):
            out[f"command1.{mode}.{part}"] = (float(newest[f"{part}_s"]), "s", where)
        out[f"command1.{mode}.jobs"] = (float(newest["jobs"]), "count", where)
        for name, part in json.loads(newest["per_experiment_s"] or "{}").items():  # "SR3" -> command1.native.part.sr3
            slug = re.sub(r"\W+", "_", name.lower()).strip("_")
            out[f"command1.{mode}.part.{slug}"] = (float(part), "s", where)
    body = "".join(ln for ln in TIMES.read_text().splitlines(keepends=True) if not ln.startswith("#"))
    for row in csv.DictReader(io.StringIO(body)):
        assert row["key"] not in out, f"{TIMES.name}: {row['key']} twice"
        out[row["key"]] = (float(row["value"]), row["unit"], f"{TIMES.relative_to(REPO)} ({row['date']})")
    return out


def stated(texts: dict[str, str]) -> list[tuple[str, int, str, str, str]]:
    """(document, line, kind, key, value as written) of every marked statement."""
    out = []
    for doc, text in texts.items():
        for number, line in enumerate(text.splitlines(), 1):
            marks = MARK.findall(line)
            assert len(marks) == len(ANY_MARK.findall(line)), f"{doc}:{number}: a marker without a value: {line}"
            out += [(doc, number, kind, key, value) for kind, key, value in marks]
    return out


def problems(texts: dict[str, str], recs: dict[str, tuple[float, str, str]]) -> list[str]:
    """One line per disagreement: between a statement and its record, and between two documents."""
    out, values = [], defaultdict(set)
    for doc, number, kind, key, value in stated(texts):
        got = seconds(value) if kind == "time" else int(value.replace(",", ""))
        values[key].add((got, doc))
        if key not in recs:
            out.append(f"{doc}:{number}: {key} has no record (docs/times.csv or {EMBEDDED.name})")
            continue
        want, unit, where = recs[key]
        if unit != UNIT[kind]:
            out.append(f"{doc}:{number}: {key} is a {unit} record, stated as a {kind}")
        elif got != round(want):
            shown = fmt(want) if unit == "s" else f"{round(want):,}"
            out.append(f"{doc}:{number}: {key} states {value}, its record {where} reads {shown}")
    for key, seen in values.items():
        if len({v for v, _ in seen}) > 1:
            out.append(f"{key}: the documents disagree: " + "; ".join(f"{d} {v}" for v, d in sorted(seen)))
    return out


def unmarked(text: str) -> list[str]:
    """Durations in ``text`` that no marker precedes."""
    out = []
    for line in text.splitlines():
        bare = MARK.sub("", line)
        out += [f"{m.group(0)!r} in: {line.strip()[:160]}" for m in re.finditer(DURATION, bare)]
    return out


# What ARTIFACT.md states without a record, each as such: the GPU times, estimates from the committed reference runs
# (its legend says so: "H200 about 3 min", "H200 x2: about 5 min", an Nsight Compute job's replay), and published
# values (the generated claims table between the front markers, "(published 1-device times: ... 350 min)").
NOT_MEASURED_HERE = re.compile(
    r"<!-- front:begin.*?<!-- front:end -->|H200(?: x2)?:?\s+about \d+ min\b|Nsight\s+Compute job about \d+ min\b"
    r"|\(published[^)]*\)",
    re.S,
)


def artifact_measured(text: str) -> str:
    """ARTIFACT.md less what :data:`NOT_MEASURED_HERE` matches: every time left is a measurement here."""
    return NOT_MEASURED_HERE.sub("", text)


def artifact_section_2(text: str) -> str:
    return text.split("\n## 2. ", 1)[1].split("\n## 3. ", 1)[0]


def doc_texts() -> dict[str, str]:
    return {doc.relative_to(REPO).as_posix(): doc.read_text() for doc in DOCS}


def test_every_stated_time_equals_its_record_and_no_two_documents_disagree():
    found = problems(doc_texts(), records())
    assert not found, "\n".join(found)


def test_the_front_documents_state_the_current_times():
    """README command 1 and 2, ARTIFACT section 2 and the pages that repeat them state what the records hold: a parser
    that found no marker would pass the test above."""
    keys = defaultdict(set)
    for doc, _, _, key, _ in stated(doc_texts()):
        keys[doc].add(key)
    for mode in ("avx2", "native"):
        assert {f"command1.{mode}.{p}" for p in ("install", "run", "total", "estimate")} <= keys["README.md"], keys
    assert {"command2.native.fast", "command2.native.passed"} <= keys["README.md"], keys["README.md"]
    assert {"command1.native.run", "command1.native.part.study_a", "kick.shared.total"} <= keys["ARTIFACT.md"], keys
    assert {"command2.native.fast", "command2.native.passed", "tests.collected.fast"} <= keys["docs/testing.md"], keys
    assert {"command1.avx2.total", "command1.native.total"} <= keys["docs/gpu-nodes.md"], keys


def test_readme_and_artifact_section_2_mark_every_time():
    """What a reviewer runs first states no time without its record (the old README's "1,030 tests" and "3 min 20 s",
    ARTIFACT's "about 3 min" install and "10 min 1 s" run were unmarked and stale)."""
    artifact = (REPO / "ARTIFACT.md").read_text()
    front = {
        "README.md": (REPO / "README.md").read_text(),
        "ARTIFACT.md ## 2": artifact_section_2(artifact),
        "ARTIFACT.md": artifact_measured(artifact),
    }
    for name, text in front.items():
        found = unmarked(text)
        assert not found, f"{name}: times without a <!-- time:KEY --> record marker:\n" + "\n".join(found)
    assert unmarked("Install (about 3 min), then `snakemake --cores all` (10 min 1 s)") == [
        "'3 min' in: Install (about 3 min), then `snakemake --cores all` (10 min 1 s)",
        "'10 min 1 s' in: Install (about 3 min), then `snakemake --cores all` (10 min 1 s)",
    ]
    # ARTIFACT's old B-6 line and A-1 row: CPU times without a record; a GPU estimate and a published value pass
    old = "On a CPU (2 gloo ranks; about 2 min on 2 cores). | CPU 2 min 44 s; H200 about 1 min | H200 x2:\nabout 4 min"
    assert [u.split(" in:")[0] for u in unmarked(artifact_measured(old + " (published: 305 and 350 min)"))] == [
        "'2 min'",
        "'2 min 44 s'",
    ]


# Records of the fast tiers (one test suite, which grows): the documents state those of one day only. The old README
# and testing.md quoted `.ci/run`'s 1,053 passed in 9 min 58 s (2026-12-03) beside command 2's 1,395 (2026-12-06),
# about 340 tests apart, as the time of one command. When `.ci/run` is timed again, its rows and command 2's (which it
# runs) come from that day.
FAST_TIERS = re.compile(r"(?:command2|ci)\.\w+\.(?:fast|passed|total)|tests\.collected\.(?!system)\w+")


def suite_days(texts: dict[str, str], recs: dict[str, tuple[float, str, str]]) -> dict[str, set[str]]:
    """Day of each record of the fast tiers that the documents state -> the keys stated."""
    days = defaultdict(set)
    for _, _, _, key, _ in stated(texts):
        if FAST_TIERS.fullmatch(key) and key in recs:
            days[re.search(r"\((\d{4}-\d{2}-\d{2})", recs[key][2]).group(1)].add(key)
    return days


def test_the_fast_tiers_are_stated_from_one_day():
    days = suite_days(doc_texts(), records())
    assert len(days) == 1, f"the documents state the fast tiers of {len(days)} days: {dict(days)}"
    planted = {"README.md": "<!-- count:ci.native.passed -->1,053 and <!-- count:command2.native.passed -->1,395"}
    recs = {
        "ci.native.passed": (1053.0, "count", "t (2026-12-03)"),
        "command2.native.passed": (1395.0, "count", "t (2026-12-06)"),
    }
    assert suite_days(planted, recs) == {"2026-12-03": {"ci.native.passed"}, "2026-12-06": {"command2.native.passed"}}


def test_a_planted_disagreement_fails():
    texts, recs = doc_texts(), records()
    readme = texts["README.md"]
    total = recs["command1.native.total"][0]
    stale = f"<!-- time:command1.native.total -->{fmt(total)}"
    assert stale in readme
    texts["README.md"] = readme.replace(stale, f"<!-- time:command1.native.total -->{fmt(total + 61)}")
    found = problems(texts, recs)
    assert any(p.startswith("README.md:") and "command1.native.total states" in p for p in found), found
    assert any(p.startswith("command1.native.total: the documents disagree") for p in found), found
    # two documents disagreeing on one measurement, whatever the record says
    two = {"a.md": "took <!-- time:x.run -->7 min 2 s", "b.md": "in <!-- time:x.run -->10 min 1 s"}
    found = problems(two, {"x.run": (422.0, "s", "r")})
    assert found == [
        "b.md:1: x.run states 10 min 1 s, its record r reads 7 min 2 s",
        "x.run: the documents disagree: a.md 422; b.md 601",
    ], found
    assert problems({"c.md": "<!-- count:tests.n -->1,030 tests"}, {"tests.n": (1053.0, "count", "r")}) == [
        "c.md:1: tests.n states 1,030, its record r reads 1,053"
    ]
    assert problems({"d.md": "<!-- time:nowhere -->5 s"}, {})[0].startswith("d.md:1: nowhere has no record")


def test_every_record_says_where_when_and_how():
    body = "".join(ln for ln in TIMES.read_text().splitlines(keepends=True) if not ln.startswith("#"))
    for row in csv.DictReader(io.StringIO(body)):
        assert row["unit"] in ("s", "count"), row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]) and row["machine"] and row["how"], row
        float(row["value"])
    rows = list(csv.DictReader(io.StringIO(EMBEDDED.read_text())))
    newest = max(r["date"] for r in rows)
    for mode in ("avx2", "native"):
        assert f"({newest}, avx2_held=" in records()[f"command1.{mode}.total"][2]  # the newest measurement
