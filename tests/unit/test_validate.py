"""Result schemas: every writer's results match; hand-made invalid results are refused with the file and field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import fake_results as fr
from accelbench import cli
from accelbench.core import harness, registry
from accelbench.core.outcome import Outcome
from accelbench.core.systems import System
from accelbench.core.validate import EXPERIMENTS, _schemas, problems_of, validate_files
from accelbench.errors import ResultError

VALID = {
    "unet3d_profile ok": lambda: fr.unet3d("cpu", "baseline"),
    "unet3d_profile unsupported": lambda: fr.unet3d("cpu", "tf32", status="unsupported", reason="TF32 needs CUDA"),
    "unet3d_profile oom": lambda: fr.unet3d("h100", "baseline", status="oom", reason="out of device memory: 3 GiB"),
    "unet3d_ncu ok": lambda: fr.ncu("h100", "tf32"),
    "sr3 ok": lambda: fr.sr3("cpu", 2, 100.0),
    "lora ok": lambda: fr.lora("cpu", "flash", "ddp", 2),
    "quant ok": lambda: fr.quant("cpu", "fake", "8_4_4", compression=5.9),
    "quant sensitivity": lambda: fr.sensitivity("cpu", [3.0, 1.0, 1.0, 2.0]),
}


def test_schemas_are_valid_json_schemas_one_per_experiment():
    schemas = _schemas()
    assert set(schemas) == {"result.json", *(f"{e}.json" for e in EXPERIMENTS)}
    for s in schemas.values():
        Draft202012Validator.check_schema(s)


@pytest.mark.parametrize("name", list(VALID))
def test_hand_made_results_of_the_real_writers_are_valid(name):
    assert problems_of(json.loads(json.dumps(VALID[name]()))) == []


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_cli_writer_results_are_valid(tmp_path, experiment):
    """The one writer every job's result goes through (harness.write_outcome): provenance, status and reason."""
    system = System(name="cpu", backend="cpu", devices=1, precisions=("fp32",), image="cuda", scale="small")
    config = {
        "system": system.to_dict(),
        "model": "m",
        "configuration": "tf32",
        "method": "fp32",
        "bitset": "none",
        "model_name": "m",
        "attention": "eager",
        "strategy": "fsdp",
        "devices": 2,
        "precision": "fp32",
    }
    out = tmp_path / "results" / system.name / experiment / "v" / "result.json"  # a job's place: <system>/<experiment>/
    ctx = harness.JobContext(registry.get(experiment), config, "spec.json", None, system, out)
    harness.write_outcome(ctx, Outcome.unsupported("not on a CPU"))
    assert validate_files([out])[0]["status"] == "unsupported"


BROKEN = [  # (base, field changed, new value or None = delete, what the message must name)
    ("unet3d_profile ok", "environment.git", None, "environment: 'git' is a required property"),
    ("unet3d_profile ok", "environment.hardware.device_name", None, "environment.hardware: 'device_name'"),
    ("unet3d_profile ok", "measurements.train_step.samples", [], "measurements.train_step.samples"),
    ("unet3d_profile ok", "measurements.train_step.unit", "s", "measurements.train_step.unit"),
    ("unet3d_profile ok", "measurements.train_step.median", float("nan"), "measurements.train_step.median: nan"),
    ("unet3d_profile ok", "measurements.quality", None, "'quality' is a required property"),
    ("unet3d_profile unsupported", "reason", "", "reason"),
    ("unet3d_profile oom", "reason", None, "'reason' is a required property"),
    ("quant ok", "measurements.perplexity.unit", "nats", "measurements.perplexity.unit"),
    ("quant ok", "measurements.compression_x.value", float("inf"), "measurements.compression_x.value: inf"),
    ("quant ok", "measurements.throughput", None, "measurements: needs one of: throughput | forward_benchmark"),
    ("quant sensitivity", "measurements.layers", [], "measurements.layers"),
    ("lora ok", "measurements.per_rank.0.timing.count", 0, "measurements.per_rank.0.timing.count"),
    ("sr3 ok", "measurements.study_b_projection.label", "measured", "measurements.study_b_projection.label"),
    ("sr3 ok", "status", "done", "status: 'done' is not one of"),
    ("sr3 ok", "config.devices", None, "config: 'devices' is a required property"),
    # negative values that once passed by their key names (-12.5 and -19.97 once reached runs.csv)
    (
        "lora ok",
        "measurements.projection.minutes_per_million_tokens",
        -12.5,
        "minutes_per_million_tokens: -12.5 is neg",
    ),
    ("lora ok", "measurements.host_peak_rss_gib_max", -19.97, "host_peak_rss_gib_max: -19.97 is negative"),
    ("sr3 ok", "measurements.iterations_per_device", -4, "measurements.iterations_per_device: -4 is negative"),
    ("lora ok", "measurements.throughput_6n.mfu", -0.1, "measurements.throughput_6n.mfu: -0.1 is negative"),
    # ranges declared by each result kind's schema: durations > 0 (a 0.0 ms step beside 20.7
    # images/s reached the table), MFU in (0, 1]; a result of an older version lacking a field the tables read
    ("sr3 ok", "measurements.iteration.median", 0.0, "measurements.iteration.median: 0.0 is less than or equal to"),
    ("lora ok", "measurements.step.samples.0", 0, "measurements.step.samples.0: 0 is less than or equal to"),
    ("sr3 ok", "measurements.measured_wall_s", 0, "measurements.measured_wall_s: 0 is less than or equal to"),
    ("lora ok", "measurements.throughput_6n.mfu", 0.0, "measurements.throughput_6n.mfu: 0.0 is less than or equal"),
    ("lora ok", "measurements.peak_mem_gib_max", -19.97, "measurements.peak_mem_gib_max: -19.97 is less than"),
    (
        "sr3 ok",
        "measurements.quality.sampler",
        None,
        "measurements.quality: 'sampler' is a required property: a result of an older accelbench",
    ),
]


@pytest.mark.parametrize("base, field, value, expected", BROKEN, ids=[f"{b}:{f}" for b, f, _, _ in BROKEN])
def test_a_hand_made_invalid_result_is_refused_by_file_and_field(tmp_path, base, field, value, expected):
    good, bad = tmp_path / "good" / "result.json", tmp_path / "bad" / "result.json"
    for p, obj in ((good, VALID[base]()), (bad, fr.mutate(VALID[base](), field, value, delete=value is None))):
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(obj))  # NaN/Infinity written as Python's json does
    with pytest.raises(ResultError) as err:
        validate_files([good, bad])
    msg = str(err.value)
    assert "1 of 2 result file(s)" in msg and f"{bad}: " in msg and str(good) not in msg
    assert expected in msg, msg


def test_unreadable_and_non_json_files_are_named(tmp_path):
    p = tmp_path / "result.json"
    p.write_text("{not json")
    with pytest.raises(ResultError, match=r"result.json: \(file\): not valid JSON"):
        validate_files([p])


def test_extra_fields_are_accepted():
    q = VALID["quant ok"]()
    q["measurements"]["forward_benchmark"] = q["measurements"].pop("throughput")  # the newer writers' name
    assert problems_of(json.loads(json.dumps(q))) == []
    r = VALID["sr3 ok"]()
    r["measurements"]["noise"] = {"noisy": False, "why": []}
    r["environment"]["hardware"]["new_field"] = 1
    assert problems_of(json.loads(json.dumps(r))) == []


def test_validate_results_command_writes_the_list_and_fails_with_exit_2(tmp_path, capsys):
    ok = fr.write(tmp_path / "results", [VALID["sr3 ok"]()])
    out = tmp_path / "validation.json"
    assert cli.main(["validate-results", "--results", *ok, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["count"] == 1
    bad = fr.write(tmp_path / "bad", [fr.mutate(VALID["sr3 ok"](), "environment.host", None, delete=True)])
    assert cli.main(["validate-results", "--results", *ok, *bad, "--out", str(tmp_path / "v2.json")]) == 2
    err = capsys.readouterr().err
    assert bad[0] in err and "environment: 'host' is a required property" in err
    assert not (tmp_path / "v2.json").exists()
    assert Path(ok[0]).exists() and Path(bad[0]).exists()  # nothing is deleted


def test_result_lists_travel_as_a_file_and_the_old_option_still_works(tmp_path, capsys):
    """`--results-file` (what the rules pass: the spec file `{"results": [...]}`, a plain JSON list, or another
    validate-results output) reads the same files as `--results` on the command line; both add up, once each."""
    ok = fr.write(tmp_path / "results", [VALID["sr3 ok"](), VALID["lora ok"](), VALID["quant ok"]()])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"results": ok[:2]}))
    out = tmp_path / "v.json"
    assert cli.main(["validate-results", "--results-file", str(spec), "--out", str(out)]) == 0
    assert [v["path"] for v in json.loads(out.read_text())["validated"]] == ok[:2]
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(ok[1:]))
    out2 = tmp_path / "v2.json"
    assert (
        cli.main(
            [
                "validate-results",
                "--results",
                ok[0],
                "--results-file",
                str(plain),
                "--results-file",
                str(out),
                "--out",
                str(out2),
            ]
        )
        == 0
    )
    assert [v["path"] for v in json.loads(out2.read_text())["validated"]] == ok  # order kept, duplicates once
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": "not a list"}))
    assert cli.main(["validate-results", "--results-file", str(bad), "--out", str(tmp_path / "v3.json")]) == 2
    assert f"--results-file {bad}: expected a JSON list" in capsys.readouterr().err
    assert cli.main(["validate-results", "--results-file", str(tmp_path / "missing.json"), "--out", str(out)]) == 2
    assert "missing.json: unreadable list of result files" in capsys.readouterr().err
