"""The run's time estimate: the cost models kept with the experiments, the line before the first job
and its refreshes, and the per-job times it records."""

import io
import json
import os
import time
from types import SimpleNamespace

import pytest
from test_precisions import unet3d_spec

from accelbench.backends import cpu
from accelbench.core import estimate


def test_fmt():
    assert estimate.fmt(45.4) == "45 s" and estimate.fmt(550) == "9 min 10 s" and estimate.fmt(3720) == "1 h 2 min"
    assert estimate.fmt(-3) == "0 s"


def test_cost_models_follow_the_settings_and_unsupported_jobs_cost_start_up(default_config, systems, monkeypatch):
    from accelbench.experiments.unet3d import job as unet3d_profile

    cpu_system = systems["cpu"]
    base = unet3d_profile.estimate_s(unet3d_spec(default_config, cpu_system, "baseline"))
    assert base > estimate.STARTUP_S
    assert unet3d_profile.estimate_s(unet3d_spec(default_config, cpu_system, "tf32")) == estimate.STARTUP_S
    longer = unet3d_spec(default_config, cpu_system, "baseline")
    longer["run"] = dict(longer["run"], repeat=2 * longer["run"]["repeat"])
    assert unet3d_profile.estimate_s(longer) > base
    # on a CPU without native bf16, where the probe measures it slow, the bf16 job only writes `unsupported`
    monkeypatch.setattr(cpu, "_family", lambda: "x86")
    monkeypatch.setattr(cpu, "cpu_flags", lambda path=cpu.CPUINFO: {"avx2"})
    monkeypatch.setattr(cpu, "cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(cpu, "probe_slowdown", lambda precision, size=24: 6.7)
    monkeypatch.setattr(cpu, "_SLOWDOWN", {})
    monkeypatch.delenv(cpu.PROBE_ENV, raising=False)
    assert unet3d_profile.estimate_s(unet3d_spec(default_config, cpu_system, "bf16")) == estimate.STARTUP_S


def test_job_reference_s_reads_the_spec_of_measurement_jobs(tmp_path, default_config, systems):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(unet3d_spec(default_config, systems["cpu"], "baseline")))
    out = "results/cpu/unet3d_profile/whole_head/baseline/result.json"
    from accelbench.experiments.unet3d import job as unet3d_profile

    assert estimate.job_reference_s("unet3d_profile", out, str(spec)) == pytest.approx(
        unet3d_profile.estimate_s(json.loads(spec.read_text()))
    )
    assert estimate.job_reference_s("claims", "results/claims/claims.csv", None) == estimate.RULE_S["claims"]
    assert estimate.job_reference_s("new_rule", "x.csv", None) == estimate.DEFAULT_RULE_S


class FakeDag:
    def __init__(self, jobs):
        self.jobs, self._running, self._finished = jobs, set(), set()

    def needrun_jobs(self):
        return list(self.jobs)


class _Job(SimpleNamespace):
    __hash__ = object.__hash__  # Snakemake's jobs are hashable (sets of running and finished jobs)
    __eq__ = object.__eq__


def _job(rule, output):
    return _Job(rule=SimpleNamespace(name=rule), output=[output], params=SimpleNamespace())


def test_line_before_the_first_job_and_refreshed_as_jobs_finish(tmp_path, monkeypatch):
    monkeypatch.setattr(estimate, "LOG", tmp_path / "job_times.jsonl")
    monkeypatch.setattr(estimate, "calibrate", lambda repeat=7, threads=None: 2 * estimate.REFERENCE["calibration_s"])
    jobs = [
        _job("claims", "results/claims/claims.csv"),
        _job("energy_aggregate", "results/energy/energy.csv"),
        _job("mystery", "x.txt"),
    ]
    dag = FakeDag(jobs)
    p = estimate.Progress(dag, cores=2)
    total = 2 * (estimate.RULE_S["claims"] + estimate.RULE_S["energy_aggregate"] + estimate.DEFAULT_RULE_S)
    assert p.speed == pytest.approx(2.0) and p.total_s() == pytest.approx(total)
    assert p.first_line().startswith(
        f"accelbench: 3 jobs to run, about {estimate.fmt(total)} on this machine "
        "(this CPU is 2.00x slower than the reference"
    )
    dag._running.add(jobs[0])
    assert not p.poll()
    dag._running.discard(jobs[0])
    dag._finished.add(jobs[0])
    assert p.poll()
    line = p.line()
    assert line.startswith("accelbench: 1 of 3 jobs done, about ") and "left (" in line and "so far)" in line
    rec = json.loads((tmp_path / "job_times.jsonl").read_text())
    assert rec["rule"] == "claims" and rec["estimate_s"] == pytest.approx(2 * estimate.RULE_S["claims"])
    assert rec["measured_s"] is not None and rec["cores"] == 2
    # a run far behind its estimate says so (once a minute of estimated work is done)
    p.estimates = dict.fromkeys(jobs, 100.0)
    p.started -= 10 * p.total_s()
    p.done.update(jobs[1:])
    p.done.discard(jobs[2])
    assert "slower than estimated" in p.line()


def test_a_failing_estimate_never_stops_the_run(monkeypatch, capsys):
    monkeypatch.setattr(estimate, "Progress", lambda dag, cores: (_ for _ in ()).throw(ValueError("odd")))
    assert estimate.start(SimpleNamespace(dag=None, cores=2)) is None
    assert "no time estimate (ValueError: odd)" in capsys.readouterr().err
    monkeypatch.setenv("ACCELBENCH_ESTIMATE", "0")
    assert estimate.start(SimpleNamespace(dag=None, cores=2)) is None


def test_calibration_keeps_to_its_budget():
    """The best of the runs that fit in ``budget_s`` (after the minimum ``repeat``): a positive time, no longer than
    one run, and the whole call about the budget, not an unbounded loop."""
    t0 = time.perf_counter()
    best = estimate.calibrate(repeat=2, threads=1, budget_s=0.3)
    took = time.perf_counter() - t0
    assert 0 < best < 0.3
    assert 0.3 <= took < 0.3 + 5 * best + 5.0  # the budget, the warm-up runs and the minimum runs


def test_every_study_experiment_keeps_a_cost_model():
    from accelbench.core import registry

    for name in registry.names():
        assert callable(getattr(registry.get(name).load(), "estimate_s", None)), name


def test_a_finished_job_is_recorded_under_the_runs_snakemake_folder(tmp_path, monkeypatch):
    """Each finished job's time lands in `.snakemake/accelbench/job_times.jsonl` of the run's working directory
    (Snakemake's own folder: a fresh clone has none; benchmarks/embedded_default.py reads it there), created on the
    first record, one JSON line a job, appended; the first line names that file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(estimate, "calibrate", lambda repeat=7, threads=None: estimate.REFERENCE["calibration_s"])
    jobs = [_job("claims", "results/claims/claims.csv"), _job("energy_aggregate", "results/energy/energy.csv")]
    dag = FakeDag(jobs)
    p = estimate.Progress(dag, cores=2)
    log = tmp_path / ".snakemake/accelbench/job_times.jsonl"
    assert not log.exists() and f"per-job times: {log.relative_to(tmp_path)}" in p.first_line()
    for job in jobs:
        dag._finished.add(job)
        assert p.poll()
    assert [json.loads(line)["rule"] for line in log.read_text().splitlines()] == ["claims", "energy_aggregate"]


def test_no_estimate_for_a_run_the_cost_models_do_not_fit(tmp_path, monkeypatch):
    """On an accelerator (an H200 gave "about 9 h 31 min" for a 10-minute run) the CPU cost models say nothing:
    the first line says why, the refreshes count jobs and time only."""
    monkeypatch.setattr(estimate, "LOG", tmp_path / "job_times.jsonl")
    monkeypatch.setattr(estimate, "calibrate", lambda repeat=7, threads=None: estimate.REFERENCE["calibration_s"])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"system": {"name": "h200", "backend": "cuda", "scale": "paper"}}))
    job = _Job(
        rule=SimpleNamespace(name="unet3d_profile"),
        output=["results/h200/unet3d_profile/x/result.json"],
        params=SimpleNamespace(spec=str(spec)),
    )
    p = estimate.Progress(FakeDag([job, _job("claims", "results/claims/claims.csv")]), cores=16)
    assert p.first_line() == (
        "accelbench: 2 jobs to run; no time estimate: the cost models are fitted to the "
        "embedded default on a CPU (backend cpu, scale small); this run measures on system "
        "h200 (backend cuda, scale paper)"
    )
    assert p.line().startswith("accelbench: 0 of 2 jobs done (") and "left" not in p.line()


def test_calibration_reads_as_faster_or_slower():
    assert estimate.speed_words(1.2) == "this CPU is 1.20x slower than the reference"
    assert estimate.speed_words(0.8) == "this CPU is 1.25x faster than the reference"
    assert estimate.speed_words(1.01) == "this CPU is about as fast as the reference"


def test_a_job_the_harness_records_unsupported_costs_start_up(tmp_path, systems, monkeypatch):
    """A job whose torch-free verdict (the registry entry's `verdicts`, asked by the harness before the job module)
    is `unsupported` counts at STARTUP_S, not at its full cost: here a torchao method job where torchao is not
    installed (the cost model alone counts its evaluations)."""
    import importlib.util

    from accelbench.experiments.llm_quant import job as llm_quant_run
    from accelbench.experiments.llm_quant import verdicts

    spec = {
        "system": systems["cpu"].to_dict(),
        "method": "torchao",
        "bitset": "16_8_8",
        "model_spec": {"config": {"num_hidden_layers": 30, "hidden_size": 576}},
        "eval_tokens": 4096,
        "accuracy": {"tasks": ["boolq"], "documents": 100},
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = "results/cpu/llm_quant/smollm2_135m/torchao/16_8_8/result.json"
    full = llm_quant_run.estimate_s(spec)
    assert full > 3 * estimate.STARTUP_S
    real = importlib.util.find_spec
    monkeypatch.setattr(verdicts.importlib.util, "find_spec", lambda n, *a: None if n == "torchao" else real(n, *a))
    assert estimate.known_unsupported("llm_quant", spec) == "torchao is not installed"
    assert estimate.job_reference_s("llm_quant_method", out, str(path)) == estimate.STARTUP_S
    monkeypatch.setattr(verdicts.importlib.util, "find_spec", real)  # installed: the full cost again
    assert estimate.known_unsupported("llm_quant", spec) is None
    assert estimate.job_reference_s("llm_quant_method", out, str(path)) == pytest.approx(full)


@pytest.mark.parametrize("planted", ["link", "folder link", "fifo", "hardlink"])
def test_job_times_are_never_written_through_a_link(tmp_path, monkeypatch, planted):
    """A link at `.snakemake/accelbench/job_times.jsonl` had every job's time appended to its target (`LOG.open("a")`
    followed it). Now a link (there or at `.snakemake/accelbench`), a FIFO or a hard-linked file is left as it was,
    the target untouched, and the run says so in one line, once."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(estimate, "calibrate", lambda repeat=7, threads=None: estimate.REFERENCE["calibration_s"])
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "job_times.jsonl").write_text("theirs\n")
    log = tmp_path / ".snakemake/accelbench/job_times.jsonl"
    log.parent.parent.mkdir()
    if planted == "folder link":
        log.parent.symlink_to(victim)
    else:
        log.parent.mkdir()
        if planted == "link":
            log.symlink_to(victim / "job_times.jsonl")
        elif planted == "hardlink":
            log.hardlink_to(victim / "job_times.jsonl")
        else:
            os.mkfifo(log)
    jobs = [_job("claims", "results/claims/claims.csv"), _job("energy_aggregate", "results/energy/energy.csv")]
    out = io.StringIO()
    dag = FakeDag(jobs)
    p = estimate.Progress(dag, cores=2, out=out)
    for job in jobs:
        dag._finished.add(job)
        assert p.poll()
    assert (victim / "job_times.jsonl").read_text() == "theirs\n"
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("accelbench: per-job times not recorded: ")
    assert ".snakemake/accelbench" in lines[0]
