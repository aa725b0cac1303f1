"""Campaigns as data (accelbench.core.campaign, `accelbench campaign`): the file is checked (one line naming the file
and key), the steps run without a shell under their timeouts and the part's budget, and campaign.json records each
step; the committed example campaign validates."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from accelbench import cli
from accelbench.aggregate import reference_runs
from accelbench.core import campaign
from accelbench.errors import CampaignError
from conftest import REPO

PY = sys.executable


def _write(tmp_path: Path, parts: dict, name: str = "c.yaml", **top) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**top, "parts": parts}, sort_keys=False))
    return path


def _py(code: str, **extra) -> dict:
    return {"argv": [PY, "-c", code], **extra}


def _error(tmp_path: Path, parts: dict, capsys) -> str:
    """The CLI's message for an invalid campaign: exit 2, one line."""
    path = _write(tmp_path, parts)
    code = cli.main(["campaign", "--file", str(path), "--part", "p", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err
    assert not (tmp_path / "out").exists()  # nothing ran
    return err


def test_tiny_campaign_runs_and_records_each_step(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELBENCH_GIT_COMMIT", "abc1234")
    path = _write(
        tmp_path,
        {
            "p": {
                "budget_s": 60,
                "steps": [
                    _py("import os; print('hello', os.environ['GREETING'])", env={"GREETING": "hi"}),
                    _py("pass"),
                    {"argv": [PY, "-c", "import sys; open(sys.argv[1], 'w').write('x')", "{out}/made.txt"]},
                ],
            }
        },
    )
    record = campaign.run_part(path, "p", tmp_path / "out", cwd=tmp_path)
    folder = tmp_path / "out" / "p"
    assert json.loads((folder / "campaign.json").read_text()) == json.loads(json.dumps(record))
    assert record["commit"] == "abc1234" and record["part"] == "p" and record["budget_s"] == 60
    assert [s["status"] for s in record["steps"]] == ["ok", "ok", "ok"]
    assert [s["rc"] for s in record["steps"]] == [0, 0, 0]
    assert all(isinstance(s["seconds"], float) and 0 <= s["seconds"] < 30 for s in record["steps"])
    assert record["steps"][0]["env"] == ["GREETING"] and record["steps"][1]["env"] == []
    assert record["steps"][2]["argv"][-1] == str(folder / "made.txt") and (folder / "made.txt").read_text() == "x"
    assert (folder / "0.log").read_text() == "hello hi\n" and (folder / "1.log").read_text() == ""
    assert {p.name for p in folder.iterdir()} == {"campaign.json", "0.log", "1.log", "2.log", "made.txt"}


def test_a_failing_step_is_recorded_and_later_steps_run(tmp_path, capsys):
    steps = [_py("print('before')"), _py("raise SystemExit(3)"), _py("print('after')")]
    parts = {"p": {"budget_s": 60, "steps": steps}}
    record = campaign.run_part(_write(tmp_path, parts), "p", tmp_path / "out", cwd=tmp_path)
    assert [(s["status"], s["rc"]) for s in record["steps"]] == [("ok", 0), ("failed", 3), ("ok", 0)]
    assert record["steps"][1]["reason"] == "exit status 3"
    assert (tmp_path / "out/p/2.log").read_text() == "after\n"
    assert campaign.failed_steps(record) == [record["steps"][1]]
    # the CLI exits 1 (a step failed), not 2 (bad input)
    with pytest.raises(SystemExit) as exc:
        cli.main(["campaign", "--file", str(tmp_path / "c.yaml"), "--part", "p", "--out", str(tmp_path / "o2")])
    assert exc.value.code == 1
    # with stop_on_failure: true the later steps are skipped, saying why
    parts["p"]["stop_on_failure"] = True
    record = campaign.run_part(_write(tmp_path, parts), "p", tmp_path / "out3", cwd=tmp_path)
    assert [s["status"] for s in record["steps"]] == ["ok", "failed", "skipped"]
    assert "stop_on_failure" in record["steps"][2]["reason"] and record["steps"][2]["rc"] is None


def test_a_program_that_does_not_exist_is_a_failed_step(tmp_path):
    parts = {"p": {"budget_s": 60, "steps": [{"argv": ["no-such-program-accelbench"]}, _py("pass")]}}
    record = campaign.run_part(_write(tmp_path, parts), "p", tmp_path / "out", cwd=tmp_path)
    assert [s["status"] for s in record["steps"]] == ["failed", "ok"]
    assert "cannot start 'no-such-program-accelbench'" in record["steps"][0]["reason"]


def test_timeout_budget_needs_and_always(tmp_path):
    sleep = "import time; time.sleep(30)"
    parts = {
        "p": {
            "budget_s": 2.5,
            "steps": [
                _py(sleep, timeout_s=0.5),  # its own timeout
                _py("pass", needs_s=100),  # fewer seconds left than it needs
                _py(sleep),  # stopped when the budget runs out
                _py("pass"),  # would start after the budget is spent
                _py("print('packed')", always=True, timeout_s=20),  # runs anyway
            ],
        }
    }
    record = campaign.run_part(_write(tmp_path, parts), "p", tmp_path / "out", cwd=tmp_path)
    steps = record["steps"]
    assert [s["status"] for s in steps] == ["timeout", "skipped", "timeout", "skipped", "ok"]
    assert steps[0]["reason"] == "timeout_s 0.5 reached" and 0.4 < steps[0]["seconds"] < 10
    assert steps[1]["reason"].startswith("needs 100 s") and steps[1]["log"] is None
    assert steps[2]["reason"] == "the part's budget ran out" and steps[2]["seconds"] < 10
    assert "budget of 2.5 s was spent" in steps[3]["reason"]
    assert (tmp_path / "out/p/4.log").read_text() == "packed\n"
    assert record["seconds"] < 15


def test_a_smaller_budget_given_for_the_call_wins(tmp_path):
    """--budget-s lowers the part's budget (a call with less device time left) and never raises it."""
    parts = {"p": {"budget_s": 100, "steps": [_py("pass", needs_s=50), _py("pass")]}}
    record = campaign.run_part(_write(tmp_path, parts), "p", tmp_path / "a", cwd=tmp_path, budget_s=20)
    assert [s["status"] for s in record["steps"]] == ["skipped", "ok"]
    assert record["budget_s"] == 20 and record["part_budget_s"] == 100
    record = campaign.run_part(_write(tmp_path, parts), "p", tmp_path / "b", cwd=tmp_path, budget_s=500)
    assert [s["status"] for s in record["steps"]] == ["ok", "ok"] and record["budget_s"] == 100


def test_a_stopped_step_takes_its_children_along(tmp_path, monkeypatch):
    """A timed-out step's whole process group is stopped (SIGTERM, then SIGKILL for one that ignores it)."""
    monkeypatch.setattr(campaign, "KILL_GRACE_S", 0.5)
    child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    code = (
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]]); "
        "open(sys.argv[2], 'w').write(str(p.pid)); time.sleep(60)"
    )
    parts = {"p": {"budget_s": 60, "steps": [{"argv": [PY, "-c", code, child, "{out}/pid"], "timeout_s": 1}]}}
    record = campaign.run_part(_write(tmp_path, parts), "p", tmp_path / "out", cwd=tmp_path)
    assert record["steps"][0]["status"] == "timeout" and record["steps"][0]["seconds"] < 10
    pid = int((tmp_path / "out/p/pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the step's child outlived the step"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    return not (state.exists() and state.read_text().split(") ", 1)[-1].startswith("Z"))  # a zombie is gone


def test_nothing_goes_through_a_shell(tmp_path):
    tricks = ["; touch x", "$(touch y)", "`touch z`", "| touch w", "&& touch v"]
    parts = {"p": {"budget_s": 60, "steps": [{"argv": [PY, "-c", "import sys; print(sys.argv[1:])", *tricks]}]}}
    record = campaign.run_part(_write(tmp_path, parts), "p", tmp_path / "out", cwd=tmp_path)
    assert record["steps"][0]["status"] == "ok"
    assert not any((tmp_path / n).exists() for n in "xyzwv")
    assert (tmp_path / "out/p/0.log").read_text().strip() == repr(tricks)


@pytest.mark.parametrize(
    "parts,expected",
    [
        (  # a shell string where an argv list belongs
            {"p": {"budget_s": 10, "steps": [{"argv": "python -c 'print(1)'"}]}},
            "key 'parts.p.steps[0].argv': \"python -c 'print(1)'\" is a string; a step's argv is a list",
        ),
        (  # an unknown key of a step
            {"p": {"budget_s": 10, "steps": [{"argv": ["true"], "cmd": "x"}]}},
            "unknown key 'parts.p.steps[0].cmd' (allowed there: argv, env, timeout_s, needs_s, always, note)",
        ),
        (  # an unknown key of a part
            {"p": {"budget_s": 10, "steps": [{"argv": ["true"]}], "budget": 5}},
            "unknown key 'parts.p.budget'",
        ),
        (  # {out} inside another argument
            {"p": {"budget_s": 10, "steps": [{"argv": ["tool", "--csv={out}/x.csv"]}]}},
            "key 'parts.p.steps[0].argv[1]': '--csv={out}/x.csv' has {out} inside it",
        ),
        (  # {out} after a prefix
            {"p": {"budget_s": 10, "steps": [{"argv": ["tool", "x/{out}"]}]}},
            "key 'parts.p.steps[0].argv[1]'",
        ),
        (  # an env value that is not a string (YAML reads 0 as a number)
            {"p": {"budget_s": 10, "steps": [{"argv": ["true"], "env": {"CUDA_VISIBLE_DEVICES": 0}}]}},
            "key 'parts.p.steps[0].env.CUDA_VISIBLE_DEVICES': 0 is not of type 'string'",
        ),
        (  # no budget
            {"p": {"steps": [{"argv": ["true"]}]}},
            "key 'parts.p': 'budget_s' is a required property",
        ),
        (  # a negative timeout
            {"p": {"budget_s": 10, "steps": [{"argv": ["true"], "timeout_s": -1}]}},
            "key 'parts.p.steps[0].timeout_s': -1 is less than or equal to the minimum of 0",
        ),
        (  # always without a timeout of its own
            {"p": {"budget_s": 10, "steps": [{"argv": ["true"], "always": True}]}},
            "key 'parts.p.steps[0]': 'timeout_s' is a required property",
        ),
        (  # a part name that is not a folder name
            {"p": {"budget_s": 10, "steps": [{"argv": ["true"]}]}, "../x": {"budget_s": 1, "steps": []}},
            "key 'parts': part name '../x' is not allowed",
        ),
    ],
    ids=["string-step", "unknown-step-key", "unknown-part-key", "out-inside", "out-after", "env-number",
         "no-budget", "negative-timeout", "always-no-timeout", "part-name"],
)  # fmt: skip
def test_bad_campaign_gives_one_line_naming_file_and_key(tmp_path, capsys, parts, expected):
    assert expected in _error(tmp_path, parts, capsys)


def test_unknown_part_unknown_top_key_and_bad_files(tmp_path, capsys):
    path = _write(tmp_path, {"a": {"budget_s": 10, "steps": [{"argv": ["true"]}]}})
    assert cli.main(["campaign", "--file", str(path), "--part", "b", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"accelbench campaign: error: {path}: key 'parts': no part 'b' (its parts: a)"
    )
    with pytest.raises(CampaignError, match=r"c\.yaml: unknown key 'campaign' \(allowed there: description, parts\)"):
        campaign.load(_write(tmp_path, {"a": {"budget_s": 1, "steps": [{"argv": ["true"]}]}}, campaign="x"))
    with pytest.raises(CampaignError, match=r"nope\.yaml: no such file"):
        campaign.load(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("parts: [\n")
    with pytest.raises(CampaignError, match=r"bad\.yaml: not valid YAML"):
        campaign.load(tmp_path / "bad.yaml")
    (tmp_path / "n.yaml").write_text("parts:\n  11: {budget_s: 1, steps: [{argv: [true]}]}\n")
    with pytest.raises(CampaignError, match=r"n\.yaml: key 'parts': part name 11 is not allowed .*quote a number"):
        campaign.load(tmp_path / "n.yaml")


def test_dry_run_prints_the_steps_and_runs_nothing(tmp_path, capsys):
    parts = {
        "p": {
            "budget_s": 30,
            "steps": [
                {"argv": ["touch", "{out}/x", "a b"], "env": {"A": "1"}, "needs_s": 5, "note": "the marker"},
                {"argv": ["tar", "-czf", "{out}/r.tgz", "-T", "{out}/new.txt"], "always": True, "timeout_s": 9},
            ],
        }
    }
    path = _write(tmp_path, parts)
    out = tmp_path / "out"
    assert cli.main(["campaign", "--file", str(path), "--part", "p", "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert f"part p: 2 steps, budget 30 s, {{out}} = {out / 'p'}" in text
    assert f"[0] A=1 touch {out / 'p'}/x 'a b'" in text and "# needs_s 5; the marker" in text
    assert f"[1] tar -czf {out / 'p'}/r.tgz -T {out / 'p'}/new.txt" in text and "timeout_s 9; always" in text
    assert not out.exists()


def test_the_example_campaign_validates_and_keeps_the_scripts_commands():
    """campaigns/h200_one_gpu.yaml: parts 11-13 of reference_runs/h200x2-2026-12-01/notes/series_h200x2.sh (which
    stays, the record that reference_runs/h200x1-2026-12-01 cites): argv lists only, the same budgets."""
    path = REPO / "campaigns/h200_one_gpu.yaml"
    parts = campaign.load(path)["parts"]
    assert list(parts) == ["sr3", "sr3_overhead", "lora_energy"]
    assert [p["budget_s"] for p in parts.values()] == [545, 560, 555]  # the script's SECONDS in run.yaml
    script = (REPO / "reference_runs/h200x2-2026-12-01/notes/series_h200x2.sh").read_text()
    for part in parts.values():
        for step in part["steps"]:
            assert step["argv"][0] != "bash" and all(isinstance(a, str) for a in step["argv"])
            for arg in step["argv"]:
                if arg.startswith("results/h200/") and arg.endswith("result.json"):
                    config = arg.split("/")[3]  # the configuration, model or experiment folder the script names
                    assert config in script, arg
    for name in parts:
        text = campaign.dry_run(path, name, "OUT")
        assert "python3 -m snakemake" in text or "harness_overhead.py" in text
    assert "series_h200x2.sh 11" in (REPO / "reference_runs/h200x1-2026-12-01/run.yaml").read_text()


def test_a_reference_run_yaml_may_hold_the_parts(tmp_path, capsys):
    """`parts:` in a reference run's run.yaml: the runner reads it there, load_run checks it, its README lists it."""
    run = tmp_path / "reference_runs" / "h200-2027-01-01"
    run.mkdir(parents=True)
    meta = {
        "date": "2027-01-01",
        "hardware": "H200",
        "short": "H200",
        "commit": "abc",
        "commands": ["accelbench campaign --file reference_runs/h200-2027-01-01/run.yaml --part a --out OUT"],
        "parts": {"a": {"budget_s": 10, "steps": [_py("print('from run.yaml')")]}},
    }
    (run / "run.yaml").write_text(yaml.safe_dump(meta))
    record = campaign.run_part(run / "run.yaml", "a", tmp_path / "out", cwd=tmp_path)
    assert record["steps"][0]["status"] == "ok" and (tmp_path / "out/a/0.log").read_text() == "from run.yaml\n"
    loaded = reference_runs.load_run(run)
    assert "Parts (each one `accelbench campaign --file" in reference_runs.run_readme(loaded) and "`a`" in (
        reference_runs.run_readme(loaded)
    )
    meta["parts"]["a"]["steps"] = ["echo hi"]
    (run / "run.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(CampaignError, match=r"run\.yaml: key 'parts\.a\.steps\[0\]': 'echo hi' is not of type"):
        reference_runs.load_run(run)
    del meta["parts"]
    (run / "run.yaml").write_text(yaml.safe_dump(meta))
    assert "Parts" not in reference_runs.run_readme(reference_runs.load_run(run))
    with pytest.raises(CampaignError, match=r"run\.yaml: key 'parts': this run\.yaml has no parts"):
        campaign.load(run / "run.yaml")


@pytest.mark.parametrize("path", sorted((REPO / "campaigns").glob("*.yaml")), ids=lambda p: p.name)
def test_every_campaign_part_dry_runs_and_names_known_configurations(path):
    """Each part of each campaign file loads and dry-runs; each Study A or SR3 result it names is of a configuration
    the experiment has (a misspelt one would cost a device call to find)."""
    from accelbench.experiments.sr3.configs import CONFIGURATIONS
    from accelbench.experiments.unet3d.configs import VARIANTS

    known = {"unet3d_profile": VARIANTS, "unet3d_ncu": VARIANTS, "sr3_scaling": CONFIGURATIONS}
    parts = campaign.load(path)["parts"]
    assert parts
    for name, part in parts.items():
        assert f"part {name}: {len(part['steps'])} steps" in campaign.dry_run(path, name, "OUT")
        for arg in (a for step in part["steps"] for a in step["argv"]):
            bits = arg.split("/")
            if arg.startswith("results/") and arg.endswith("/result.json") and bits[2] in known:
                conf = bits[4] if bits[2].startswith("unet3d") else bits[3]
                assert conf in known[bits[2]], f"{path.name} {name}: {arg}"
