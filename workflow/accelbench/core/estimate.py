"""The run's time estimate: one line before the first job, refreshed as jobs finish.

At the start of a local run (``onstart`` in ``workflow/rules/cluster.smk``; not in dry runs)::

    accelbench: 50 jobs to run, about 9 min 10 s on this machine (this CPU is 1.20x slower than the reference; ...)
    accelbench: 12 of 50 jobs done, about 6 min 5 s left (3 min 2 s so far)

How: every job's cost on the reference machine (:data:`REFERENCE`) comes from the cost model kept with its
experiment (``estimate_s(spec)`` of the experiment module: a function of the job's settings, fitted to the embedded
default's measured jobs) or, for the other rules, from :data:`RULE_S`; a short calibration (:func:`calibrate`: a
fraction of a second of fp32 convolution, matmul and MLP on one core, in CPU time) scales them to this machine. As
jobs finish, the rest is rescaled by how the finished ones compared with their estimate, and a run more than
:data:`SLOWER` x its estimate says so.
Snakemake's own ``N of M steps`` lines stay as they are.

Each finished job's measured wall time is appended beside its estimate to ``.snakemake/accelbench/job_times.jsonl``
(one JSON object a line: rule, output, estimate_s, measured_s, run start, calibration), the data the cost models
are fitted to. It is appended to without following a link (:func:`accelbench.core.tree.open_append`): a link, a FIFO
or a hard-linked file there (or a link at ``.snakemake/accelbench``) is left untouched and the run says so in one
line, once. The estimate is a sum over jobs: it assumes jobs run one after the other, which measurement jobs do
(each takes every core), and counts the light jobs that overlap them at their measured share.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from functools import cache
from pathlib import Path

# The machine the cost models were fitted on (its jobs measured in runs of the embedded default, with and without
# ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2, on a 2-core AMD EPYC), re-based on 2026-12-02 to a 2-vCPU Intel
# Xeon (avx512_bf16) where the models' sum came within 6% of its measured jobs (498 model s, 467 s measured, 37 jobs);
# its calibration (:func:`calibrate` on 2 threads: wall s, best of 15) read 0.025 or 0.035 in 11 processes (two modes
# of that VM), hence 0.030: the first estimate is within about 20% there before the finished jobs rescale the rest
REFERENCE = {
    "cpu": "Intel Xeon (2 vCPUs, avx512_bf16, torch capability AVX512); cost models fitted on a 2-core AMD EPYC",
    "date": "2026-12-02",
    "calibration_s": 0.030,
}
# wall seconds a job of these generic rules adds to a run on the reference machine (its start-up included;
# llm_export runs beside the data preparations); each experiment gives its own rules' in its registry entry
# (``rule_seconds``, :func:`rule_seconds`)
RULE_S = {
    "llm_export": 21.0,
    "llm_tokenizer_export": 8.0,
    "validate_results": 1.0,
    "claims": 8.0,
    "energy_aggregate": 4.0,
    "all": 0.0,
}
DEFAULT_RULE_S = 8.0
STARTUP_S = 3.0  # a measurement job that only writes `unsupported` (python, torch, the harness)
SLOWER = 1.3  # a run this many times its estimate so far says so
LOG = Path(".snakemake/accelbench/job_times.jsonl")
POLL_S = 0.5
CALIBRATION_BUDGET_S = 3.0  # wall seconds of calibration runs (:func:`calibrate`) before the first line
LONG_JOB_S = 3600.0  # a job estimated this long is named on the first line (e.g. sr3_scaling.max_iterations: 1000000)


@cache
def rule_seconds() -> dict[str, float]:
    """:data:`RULE_S` and every experiment's ``rule_seconds`` (its data preparation and aggregation rules)."""
    from accelbench.core import registry

    return {**RULE_S, **{r: s for e in registry.EXPERIMENTS.values() for r, s in e.rule_seconds}}


def calibrate(repeat: int = 15, threads: int | None = None, budget_s: float = CALIBRATION_BUDGET_S) -> float:
    """Wall seconds of a fixed fp32 workload (``Conv3d(16, 16, 3)`` forward and backward on ``1 x 16 x 24^3``, a
    ``512 x 512`` matmul, a ``576 -> 1536 -> 576`` MLP forward and backward on 64 rows) on ``threads`` torch threads
    (None: torch's default, one per core): the best of at least ``repeat`` runs, and of as many more as fit in
    ``budget_s`` wall seconds (at most 200), after three warm-up runs. On the run's own thread count, as its jobs
    compute: a one-thread CPU-time probe put a 2-vCPU Intel Xeon at 1.64x the reference's time while its jobs ran at
    0.94x (its two vCPUs scale where the reference's did not). The best of many short runs is what other processes
    change least: on a shared 2-vCPU AMD EPYC a single run took 25-60 ms from one to the next, and the best of 15
    (under 1 s) read 0.99x-1.88x the reference in ten runs of the same DAG (twice above 1.7x, where the jobs then
    ran at 0.87x); the best of 2 s of runs read 0.75x-1.32x in eight such runs, and 0.74x-0.96x beside 0.72x-0.84x
    for the best of 5 s in eight processes: hence 3 s (under 1% of the embedded default's run)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(max(1, threads or old))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            conv = torch.nn.Conv3d(16, 16, 3, padding=1)
            x = torch.randn(1, 16, 24, 24, 24, requires_grad=True)
            a, b = torch.randn(512, 512), torch.randn(512, 512)
            mlp = torch.nn.Sequential(torch.nn.Linear(576, 1536), torch.nn.SiLU(), torch.nn.Linear(1536, 576))
            y = torch.randn(64, 576)

            def once() -> float:
                t0 = time.perf_counter()
                conv(x).sum().backward()
                a @ b
                mlp(y).sum().backward()
                return time.perf_counter() - t0

            for _ in range(3):  # warm-up: the thread pool and the kernels' first calls
                once()
            deadline = time.perf_counter() + budget_s
            runs = [once() for _ in range(repeat)]
            while time.perf_counter() < deadline and len(runs) < 200:
                runs.append(once())
            return min(runs)
    finally:
        torch.set_num_threads(old)


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def fmt(seconds: float) -> str:
    """``9 min 10 s``, ``45 s``, ``1 h 2 min``."""
    s = round(max(seconds, 0))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def speed_words(speed: float) -> str:
    """``this CPU is 1.20x slower than the reference`` for a calibration that took ``speed`` x the reference
    machine's time (:data:`REFERENCE`; 1.2), ``... 1.30x faster ...`` below 1 (0.77), ``... about as fast as ...``
    within 5%."""
    if speed >= 1.05:
        return f"this CPU is {speed:.2f}x slower than the reference"
    if speed <= 1 / 1.05:
        return f"this CPU is {1 / speed:.2f}x faster than the reference"
    return "this CPU is about as fast as the reference"


def _experiment_of(output: str) -> str | None:
    """The registry name in a result path ``<results>/<system>/<experiment>/.../result.json``, else None."""
    from accelbench.core import registry

    parts = Path(output).parts
    for name in registry.names(selectable_only=False):
        if name in parts[:-1] and parts[-1] == registry.get(name).result:
            return name
    return None


def job_reference_s(rule: str, output: str, spec_path: str | None) -> float:
    """A job's wall seconds on the reference machine: its experiment's ``estimate_s(spec)`` for a measurement job,
    else :data:`RULE_S` (unknown rules: :data:`DEFAULT_RULE_S`)."""
    from accelbench.core import registry

    name = _experiment_of(output) if spec_path else None
    if name is not None:
        spec = json.loads(Path(spec_path).read_text())
        if known_unsupported(name, spec):
            return STARTUP_S
        model = getattr(registry.get(name).load(), "estimate_s", None)
        if model is not None:
            return float(model(spec))
    return rule_seconds().get(rule, DEFAULT_RULE_S)


def known_unsupported(name: str, spec: dict) -> str | None:
    """The reason a job of experiment ``name`` with settings ``spec`` will only write ``unsupported``, asked of the
    same torch-free verdict the harness asks before the job module (the registry entry's ``verdicts`` module,
    ``known_unsupported(ctx)``: e.g. Intel Neural Compressor FP8 off Gaudi, torchao not installed, FSDP on a CPU),
    so that such a job counts at :data:`STARTUP_S`, not at a full run's cost; None where it may run or the verdict
    cannot be asked here (the job's inputs do not exist yet). The experiments' cost models (``estimate_s``) add the
    reasons their job modules know (TF32 on a CPU, bf16 that the probe measures emulated)."""
    from types import SimpleNamespace

    from accelbench.core import registry
    from accelbench.core.harness import system_from

    try:
        verdicts = registry.get(name).load_verdicts()
        if verdicts is None:
            return None
        ctx = SimpleNamespace(spec=spec, system=system_from(spec), inputs={}, artefacts={})
        outcome = verdicts.known_unsupported(ctx)
    except Exception:  # noqa: BLE001 (a verdict that needs the job's inputs or context: the cost model decides)
        return None
    return outcome.reason if outcome is not None and outcome.status == "unsupported" else None


def _unfitted(jobs) -> str | None:
    """Why the cost models do not apply to a run (they are fitted to the embedded default: backend ``cpu`` at scale
    ``small``): the first measurement job whose spec names another backend or scale; None when every one fits."""
    for job in jobs:
        spec = _spec_of(job)
        if spec is None:
            continue
        try:
            system = json.loads(Path(spec).read_text()).get("system") or {}
        except (OSError, ValueError):
            continue
        backend, scale = system.get("backend"), system.get("scale")
        if (backend, scale) != ("cpu", "small") and backend is not None:
            return (
                f"the cost models are fitted to the embedded default on a CPU (backend cpu, scale small); this run "
                f"measures on system {system.get('name')} (backend {backend}, scale {scale})"
            )
    return None


def _spec_of(job) -> str | None:
    try:
        spec = job.params.get("spec") if hasattr(job.params, "get") else getattr(job.params, "spec", None)
    except Exception:  # noqa: BLE001 (params that cannot be evaluated here: no spec)
        return None
    return spec if isinstance(spec, str) and Path(spec).is_file() else None


class Progress:
    """The estimate line and its refreshes for the jobs ``dag`` will run (a daemon thread polling the DAG)."""

    def __init__(self, dag, cores: int, out=None):
        self.dag, self.cores, self.out = dag, cores, out or sys.stderr
        self.jobs = list(dag.needrun_jobs())
        self.estimates: dict = {}
        for job in self.jobs:
            output = str(job.output[0]) if len(job.output) else ""
            try:
                self.estimates[job] = job_reference_s(job.rule.name, output, _spec_of(job))
            except Exception:  # noqa: BLE001 (a model failing on odd settings: the rule's figure, the run goes on)
                self.estimates[job] = rule_seconds().get(job.rule.name, DEFAULT_RULE_S)
        self.unfitted = _unfitted(self.jobs)  # why the cost models do not apply to this run (None: they do)
        self.calibration_s = calibrate(threads=min(cores, os.cpu_count() or 1))
        self.speed = self.calibration_s / REFERENCE["calibration_s"]
        self.started = time.time()
        self.started_at: dict = {}
        self.done: set = set()
        self.log_refused = False  # said once that LOG cannot be appended to

    def total_s(self, jobs=None) -> float:
        return self.speed * sum(self.estimates[j] for j in (self.jobs if jobs is None else jobs))

    def first_line(self) -> str:
        if self.unfitted:
            return f"accelbench: {_jobs(len(self.jobs))} to run; no time estimate: {self.unfitted}"
        text = (
            f"accelbench: {_jobs(len(self.jobs))} to run, about {fmt(self.total_s())} on this machine "
            f"({speed_words(self.speed)}; per-job times: {LOG})"
        )
        longest = max(self.jobs, key=lambda j: self.estimates[j], default=None)
        if longest is not None and self.speed * self.estimates[longest] >= LONG_JOB_S:  # a setting far too large?
            text += f"; longest job: {longest.rule.name}, about {fmt(self.speed * self.estimates[longest])}"
        return text

    def line(self) -> str:
        elapsed = time.time() - self.started
        if self.unfitted:
            return f"accelbench: {len(self.done)} of {len(self.jobs)} jobs done ({fmt(elapsed)} so far)"
        done_est = self.total_s(self.done)
        left = self.total_s([j for j in self.jobs if j not in self.done])
        drift = elapsed / done_est if done_est >= 60 else 1.0  # how the finished jobs compared with their estimate
        left *= min(max(drift, 0.5), 3.0)
        text = (
            f"accelbench: {len(self.done)} of {len(self.jobs)} jobs done, about {fmt(left)} left "
            f"({fmt(elapsed)} so far)"
        )
        if drift > SLOWER:
            text += f"; running {drift:.1f}x slower than estimated"
        return text

    def poll(self) -> bool:
        """Note jobs that started and finished since the last call; True when some finished."""
        now = time.time()
        try:
            running, finished = set(getattr(self.dag, "_running", ())), set(self.dag._finished)
        except RuntimeError:  # a set changed size while copied: next time
            return False
        for job in running:
            self.started_at.setdefault(job, now)
        new = [j for j in self.jobs if j in finished and j not in self.done]
        for job in new:
            self.done.add(job)
            self._record(job, now)
        return bool(new)

    def _record(self, job, now: float) -> None:
        started = self.started_at.get(job)
        rec = {
            "rule": job.rule.name,
            "output": str(job.output[0]) if len(job.output) else None,
            "estimate_s": round(self.speed * self.estimates[job], 1),
            "reference_s": round(self.estimates[job], 1),
            "measured_s": round(now - started, 1) if started else None,
            "run_started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "calibration_s": round(self.calibration_s, 4),
            "cores": self.cores,
        }
        from accelbench.core import tree
        from accelbench.errors import AccelbenchError

        root = LOG.parent if LOG.is_absolute() else Path(".")  # no link below the working directory is followed
        try:
            with tree.open_append(root, LOG) as fh:
                fh.write(json.dumps(rec) + "\n")
        except (OSError, AccelbenchError) as exc:  # never fail a run over its job times
            if not self.log_refused:
                self.log_refused = True
                print(f"accelbench: per-job times not recorded: {exc}", file=self.out, flush=True)

    def watch(self) -> None:
        while len(self.done) < len(self.jobs):
            if self.poll() and len(self.done) < len(self.jobs):
                print(self.line(), file=self.out, flush=True)
            time.sleep(POLL_S)


def start(workflow) -> Progress | None:
    """Print the estimate line and start refreshing it (``onstart``); None, with one line saying why, if it cannot
    be made (the run goes on). ``ACCELBENCH_ESTIMATE=0`` turns it off."""
    if os.environ.get("ACCELBENCH_ESTIMATE", "1") == "0":
        return None
    try:
        progress = Progress(workflow.dag, workflow.cores or 1)
    except Exception as exc:  # noqa: BLE001 (never fail a run over its estimate)
        print(f"accelbench: no time estimate ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None
    print(progress.first_line(), file=sys.stderr, flush=True)
    threading.Thread(target=progress.watch, name="accelbench-estimate", daemon=True).start()
    return progress
