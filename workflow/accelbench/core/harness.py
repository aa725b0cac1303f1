"""The one job harness: every measurement command of every experiment runs through :func:`run_job`.

One sequence, for every experiment of the registry (:mod:`accelbench.core.registry`)::

    spec file -> settings and system -> device check -> lock -> supersede -> run -> result.json

1. **Spec.** The rule passes the job's resolved settings as a content-addressed JSON file (``--spec``); its sha256
   is recorded in the result (``spec_sha256``: the DAG's stale-settings check reads it).
2. **Settings and system.** ``Settings.from_spec(spec, system)`` of the experiment module; the system comes from the
   spec (the rule resolved it from ``config/systems/``).
3. **Device check** (:func:`accelbench.core.systems.require_backend`): the backend the system names must be here; a
   mismatch stops the job with one line.
4. **Lock** (:mod:`accelbench.core.locks`): one measurement per device set at a time, machine-wide. A job whose outcome
   is known to be ``unsupported`` without measuring (the module's optional ``unsupported_outcome(settings, ctx)``,
   e.g. TF32 on a CPU, ncu without ``ncu``) writes it without waiting for the lock. Where the spec, the system and
   what is installed decide it (the registry entry's torch-free ``verdicts`` module, ``known_unsupported(ctx)``),
   this comes before step 2: the job module, torch and the libraries it loads are then never imported.
5. **Supersede** (:func:`accelbench.core.results.superseding`): an old result and its side files are moved aside, never
   deleted, and put back if this job fails (or, after a kill, by the next run of the job: the journal ``.redo.json``).
6. **Run**: the experiment's ``run(settings, ctx) -> Outcome``. Multi-rank experiments call ``ctx.run_ranks``
   (:mod:`accelbench.core.launcher`), which starts their ``run_rank(settings, ctx)`` in every rank.
7. **Result**: :func:`write_outcome` adds the host-load record (``measurements.noise``,
   :mod:`accelbench.measure.hostload`) and the provenance (:mod:`accelbench.core.provenance`), then writes
   ``result.json`` atomically. Side files are written through :meth:`JobContext.side_file` (whole, or not at all) and
   listed under ``artefacts``.

An experiment module therefore has no launching and no file writing of its own. Its contract::

    EXPERIMENT = "<registry name>"
    class Settings:                       # any class; usually a frozen dataclass
        @classmethod
        def from_spec(cls, spec: dict, system) -> "Settings": ...
    def run(settings, ctx: JobContext) -> Outcome: ...
    def run_rank(settings, ctx: JobContext) -> dict: ...   # only experiments whose registry entry has ranks=True
    def unsupported_outcome(settings, ctx) -> Outcome | None: ...  # optional: `unsupported` known without measuring
    # optional, in the torch-free module the registry entry names as `verdicts` (asked before the job module):
    def known_unsupported(ctx) -> Outcome | None: ...  # `unsupported` from the spec, the system, what is installed

Errors the user can act on raise :class:`~accelbench.errors.AccelbenchError` (one line, exit status 2).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelbench.core.outcome import Outcome
from accelbench.core.registry import Experiment
from accelbench.errors import AccelbenchError

log = logging.getLogger("accelbench")


# --------------------------------------------------------------------------- the job's context
@dataclass
class JobContext:
    """Everything a run may use besides its settings.

    Attributes:
        experiment: the registry entry.
        spec: the job's resolved settings (the ``--spec`` file's JSON object).
        spec_path: the spec file (passed on to ranks and helper processes; never inline JSON).
        spec_sha256: sha256 of the spec file's bytes (None for an inline spec).
        system: the :class:`accelbench.core.systems.System` the spec names.
        out: the result file this job writes.
        inputs: the rule's named inputs (``image``, ``mask``, ``data``, ``model_dir``, ...; None where not given).
        threads: CPU cores of the job (``--threads``, Snakemake's ``{threads}``; 0 = every usable core).
        artefacts: side files written so far (name -> file name beside the result).
        placement: in a rank, this rank's threads and CPUs (:func:`accelbench.cluster.processes.place_this_rank`).
    """

    experiment: Experiment
    spec: dict
    spec_path: str
    spec_sha256: str | None
    system: Any
    out: Path
    inputs: dict = field(default_factory=dict)
    threads: int = 0
    artefacts: dict = field(default_factory=dict)
    placement: dict | None = None

    @contextlib.contextmanager
    def side_file(self, name: str, key: str | None = None) -> Iterator[Path]:
        """A temporary path (``.partial.<name>``, same suffixes) to write side file ``name`` to; renamed beside the
        result when the body succeeds (a reader never sees a truncated file) and recorded in
        ``artefacts[key or stem]``. A body that leaves the path unwritten records nothing; one that raises leaves
        nothing behind (:func:`accelbench.core.results.atomic_path`: the folder is reached from the results tree
        without following a link, and held open while the body writes)."""
        from accelbench.core.results import atomic_path

        path = self.out.with_name(name)
        with atomic_path(path, required=False, root=self.results_root) as tmp:
            yield tmp
        if path.exists():
            self.artefacts[key or name.split(".")[0]] = name

    @property
    def results_root(self) -> Path:
        """The results tree this job writes in (``<root>/<system>/<experiment>/...``); every write below it follows
        no link (:mod:`accelbench.core.tree`)."""
        from accelbench.core.results import tree_root

        return tree_root(self.out, self.system.name, self.experiment.name)[0]

    def run_ranks(self, settings, devices: int, key: str):
        """Launch ``devices`` ranks of this experiment's ``run_rank`` and collect them
        (:func:`accelbench.core.launcher.run_ranks`). Returns the :class:`~accelbench.core.launcher.Ranks` or an
        ``oom``/``unsupported`` :class:`Outcome`."""
        from accelbench.core.launcher import run_ranks

        return run_ranks(self, settings, devices, key)


# --------------------------------------------------------------------------- spec and system
def load_spec(value: str) -> tuple[dict, str | None]:
    """``--spec``: the path of a JSON file (what rules and launches pass), or an inline JSON object (calls by hand).

    Returns:
        ``(spec, sha256 of the file's bytes)`` (None for an inline object).

    Raises:
        AccelbenchError: the file is missing or not a JSON object, or a content-addressed spec file
            (``<sha256[:16]>.json``, :func:`spec_path_of`) whose bytes no longer hash to its name (edited since the
            workflow wrote it: its job would run with other settings than the config's, and its result would count
            as current); one line naming the file.
    """
    if value.lstrip().startswith("{"):
        try:
            return json.loads(value), None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise AccelbenchError(f"--spec: the inline JSON object is not valid JSON ({exc})") from None
    from accelbench.core.files import check_nodes, read_text

    text = read_text(value, "spec file")  # a plain file of bounded size: a FIFO or /dev/zero is one line
    check_nodes(text, value, "spec file")  # and of bounded values (memory)
    try:
        spec = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise AccelbenchError(f"spec file {value} is not valid JSON ({exc})") from None
    if not isinstance(spec, dict):
        raise AccelbenchError(f"spec file {value} must hold a JSON object")
    sha = hashlib.sha256(text.encode()).hexdigest()
    name = Path(value).name
    if SPEC_NAME.fullmatch(name) and not sha.startswith(name[:16]):
        raise AccelbenchError(
            f"spec file {value}: its contents (sha256 {sha[:16]}) do not match its name; it was edited after the "
            f"workflow wrote it, so its job would not run with the config's settings: delete it and rerun (the "
            f"workflow writes it anew)"
        )
    return spec, sha


SPEC_DIR = Path(".snakemake/accelbench/spec")
SPEC_NAME = re.compile(r"[0-9a-f]{16}\.json")  # a content-addressed spec file: the sha256 of its bytes, 16 digits


def spec_path_of(spec: dict) -> str:
    """``spec`` as a content-addressed file ``.snakemake/accelbench/spec/<sha256[:16]>.json`` (its name is the hash
    of its bytes). The rules' ``params.spec`` (``spec_file`` in common.smk) and internal launches alike: a job's
    settings always travel as a file. Written atomically when absent or when its bytes differ (edited, or a FIFO put
    there), without following a link (:func:`accelbench.core.tree.write_bytes` below ``.snakemake``: a link at the
    path or on its way is refused in one line); the job checks the name again (:func:`load_spec`)."""
    from accelbench.core import tree
    from accelbench.core.files import read_bytes

    data = (json.dumps(spec, indent=1) + "\n").encode()
    path = SPEC_DIR / f"{hashlib.sha256(data).hexdigest()[:16]}.json"
    try:
        same = read_bytes(path, "spec file", len(data), follow=False) == data
    except AccelbenchError:  # absent, edited past its size, a link, a FIFO: written anew (a link: refused there)
        same = False
    if not same:
        tree.write_bytes(SPEC_DIR.parent.parent, path, data)
    return str(path)


def system_from(spec: dict):
    """The :class:`accelbench.core.systems.System` recorded in a spec (``spec["system"]``)."""
    from accelbench.core.systems import System

    d = dict(spec["system"])
    d["precisions"], d["match"] = tuple(d["precisions"]), tuple(d.get("match", ()))
    return System(**d)


def context(
    experiment: Experiment, spec_arg: str, out: str | Path, inputs: dict | None = None, threads: int = 0
) -> JobContext:
    """The :class:`JobContext` of a job (spec loaded, system made; nothing checked or started yet)."""
    spec, sha = load_spec(spec_arg)
    path = spec_arg if sha is not None else spec_path_of(spec)
    try:
        system = system_from(spec)
    except (KeyError, TypeError, ValueError) as exc:  # a spec made by hand: one line naming the key
        raise _not_a_spec(experiment, spec_arg if sha else "(inline)", exc) from None
    return JobContext(experiment, spec, path, sha, system, Path(out), dict(inputs or {}), threads or 0)


def _not_a_spec(experiment: Experiment, where: str, exc: Exception) -> AccelbenchError:
    what = f"lacks the key {exc.args[0]!r}" if isinstance(exc, KeyError) else f"has a bad value ({exc})"
    return AccelbenchError(
        f"--spec {where} {what}: not a spec of an {experiment.name} job (the workflow writes them: "
        f"`snakemake -n -p <result>` shows its --spec file)"
    )


# --------------------------------------------------------------------------- the result
def write_outcome(ctx: JobContext, outcome: Outcome, measured: bool = True) -> dict:
    """Write ``outcome`` as the job's result: ``config`` = spec + ``outcome.config``; ``measurements.noise`` for
    ``ok`` results; provenance; ``artefacts``; ``spec_sha256``; ``inputs_sha256`` (the contents of its named inputs,
    :func:`accelbench.core.digests.digests`). Atomic. Returns the result object. ``measured`` False (a verdict known
    before the job module was imported): the provenance reads nothing through torch
    (:func:`accelbench.core.provenance.collect`)."""
    from accelbench.core import provenance, results
    from accelbench.core.digests import digests
    from accelbench.measure import hostload

    config = {**ctx.spec, **outcome.config}
    if outcome.status == "ok":
        outcome.measurements["noise"] = hostload.job_noise(outcome.measurements, ctx.spec.get("noise"))
    result = results.make_result(
        ctx.experiment.name,
        outcome.status,
        config,
        provenance.collect(ctx.system.backend, ctx.system.to_dict(), config, read_torch=measured, threads=ctx.threads),
        outcome.measurements,
        outcome.reason,
        ctx.artefacts,
        spec_sha256=ctx.spec_sha256,
    )
    if ctx.inputs:  # the contents it was made from: the DAG redoes it when they change, whatever the files' times
        result["inputs_sha256"] = digests(ctx.inputs)
    results.write_result(result, ctx.out, overwrite=True, root=ctx.results_root)
    log.info("%s: status %s%s", ctx.out, outcome.status, f" ({outcome.reason})" if outcome.reason else "")
    return result


@contextlib.contextmanager
def guarded(ctx: JobContext, lock: bool = True) -> Iterator[None]:
    """Hold the device lock (unless ``lock`` is False: nothing is measured) and supersede the old result for the
    body: a finished result and its side files are moved aside first (never overwritten, never deleted, for any
    user) and put back if the job fails; SIGTERM restores them like Ctrl-C. A result folder that is (links followed)
    a folder of the operating system (:func:`accelbench.core.files.os_folder`) is refused first, one line."""
    from accelbench.core import locks, results
    from accelbench.core.files import os_folder

    system_folder = os_folder(ctx.out.parent)  # links followed: `results/cpu -> /etc` as much as results_dir itself
    if system_folder:
        raise AccelbenchError(
            f"{ctx.out}: its folder is {system_folder}, a folder of the operating system; nothing written "
            f"(give results_dir a folder of your own)"
        )
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # cancelled: restore, then exit
    with (
        locks.device_lock(locks.device_set(ctx.system.backend), str(ctx.out)) if lock else contextlib.nullcontext(),
        results.superseding(ctx.out, ctx.system.name, ctx.experiment.name),
    ):
        yield


def _experiment(ctx: JobContext):
    """The experiment's module and its ``Settings`` for this job, after its ``prepare_environment`` (if any), which
    must run before anything imports a vendor stack (Gaudi: lazy or eager mode); the process's energy settings
    (:func:`accelbench.measure.energy.configure`) first."""
    from accelbench.measure import energy

    energy.configure(ctx.spec.get("energy"))  # the job's energy settings (config `energy`), in the job and its ranks
    module = ctx.experiment.load()
    prepare = getattr(module, "prepare_environment", None)
    if prepare:
        prepare(ctx.spec, ctx.system)
    try:
        return module, module.Settings.from_spec(ctx.spec, ctx.system)
    except (KeyError, TypeError) as exc:
        raise _not_a_spec(ctx.experiment, ctx.spec_path if ctx.spec_sha256 else "(inline)", exc) from None


def _known_early(ctx: JobContext) -> Outcome | None:
    """The experiment's torch-free verdict (its registry entry's ``verdicts`` module, ``known_unsupported(ctx)``),
    asked before its job module is imported; None where it has none or the job must look further."""
    module = ctx.experiment.load_verdicts()
    if module is None:
        return None
    try:
        return module.known_unsupported(ctx)
    except (KeyError, TypeError) as exc:
        raise _not_a_spec(ctx.experiment, ctx.spec_path if ctx.spec_sha256 else "(inline)", exc) from None


def run_job(ctx: JobContext) -> dict:
    """The whole sequence of the module docstring for one job; returns the result written.

    Raises:
        AccelbenchError: bad spec, the system's backend missing here, or a failure the experiment reports (the old
            result is then put back).
    """
    from accelbench import backends
    from accelbench.core.systems import require_backend
    from accelbench.measure.hostload import start_job

    start_job()  # host load is recorded from here to the result (measurements.noise)
    known = _known_early(ctx)
    if known is not None:  # `unsupported` from the spec and what is installed: no job module, no torch, no lock
        if backends.get(ctx.system.backend).accelerator:  # a CPU system's backend is always here: no device probe
            require_backend(ctx.system)
        with guarded(ctx, lock=False):
            return write_outcome(ctx, known, measured=False)
    module, settings = _experiment(ctx)
    require_backend(ctx.system)
    if ctx.threads:
        import torch

        torch.set_num_threads(ctx.threads)
    known = getattr(module, "unsupported_outcome", None)
    known = known(settings, ctx) if known else None
    if known is not None:  # only `unsupported` is written (TF32 on a CPU, ncu without ncu): no device lock to wait for
        with guarded(ctx, lock=False):
            return write_outcome(ctx, known)
    with guarded(ctx):
        outcome = module.run(settings, ctx)
        return write_outcome(ctx, outcome)


def rank_main(experiment: str, spec: str, out: str, rank_dir: str, threads: int = 0, inputs: dict | None = None) -> int:
    """Entry point of one rank (``accelbench rank``, started by :func:`accelbench.core.launcher.run_ranks`): placement
    first (threads, CPUs, die with torchrun), then the experiment's ``run_rank(settings, ctx)``, then
    ``<rank_dir>/rank<RANK>.json`` (the launcher's rank-file protocol). Out of device memory becomes ``status: oom``
    here, for every experiment. Returns the exit status: non-zero when this rank failed, so torchrun stops the
    others."""
    import os

    from accelbench.backends.device import Device
    from accelbench.cluster import processes as launch
    from accelbench.core.registry import get
    from accelbench.core.results import write_json_atomic

    placement = launch.place_this_rank()
    ctx = context(get(experiment), spec, out, inputs, threads)
    ctx.placement = placement
    module, settings = _experiment(ctx)
    rank = int(os.environ.get("RANK", 0))
    path = Path(rank_dir) / f"rank{rank}.json"
    try:
        record = module.run_rank(settings, ctx)
    except Device.out_of_memory_errors() as exc:
        msg = str(exc).splitlines()[0] if str(exc) else repr(exc)
        write_json_atomic(
            {
                "rank": rank,
                "status": "oom",
                "reason": f"out of device memory: rank {rank}: {msg}",
                "record": None,
                "artefacts": {},
            },
            path,
        )
        return 3
    status = record.get("status", "ok") if isinstance(record, dict) else "ok"
    write_json_atomic(
        {
            "rank": rank,
            "status": status,
            "reason": record.get("reason") if status != "ok" else None,
            "record": record,
            "artefacts": ctx.artefacts,
        },
        path,
    )
    return 0 if status == "ok" else 1
