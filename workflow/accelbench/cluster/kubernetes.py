"""Kubernetes jobs of ``snakemake --profile kubernetes`` (cluster-generic executor): submit, status, cancel.

Study B ran its Gaudi jobs on SDSC's Voyager, which schedules with Kubernetes: each Snakemake job becomes a
``batch/v1`` Job on one node or a Kubeflow ``MPIJob`` across nodes, rendered from the job script and the site file
``kubernetes/site.yaml`` by :mod:`accelbench.cluster.kubernetes_manifest` (whose names, :func:`load_site`,
:func:`render`, :func:`job_properties`, ..., are importable from here too), then handed to ``kubectl`` as YAML on
stdin (:func:`submit`). :func:`status` maps the job's conditions to what the executor reads, :func:`cancel` deletes
it. The commands of the profile (``accelbench k8s submit|status|cancel|render``) are :mod:`accelbench.cli.k8s`.

Example::

    site = load_site("kubernetes/site.yaml")
    jobid = submit("snakejob.sh", site)  # namespace/job/NAME or namespace/mpijob/NAME
    state = status(jobid, site)  # success, failed or running
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from accelbench.cluster.kubernetes_manifest import (  # noqa: F401  (re-exported: the manifest's names)
    CORES_RESOURCE,
    DNS1123,
    MPI_API,
    SHELL_ACTIVE,
    SITE_KEYS,
    SITE_SCHEMA,
    check_workdir,
    job_name,
    job_properties,
    labels,
    layout,
    load_site,
    pod_template,
    render,
)
from accelbench.errors import ConfigError

SUCCESS, FAILED, RUNNING = "success", "failed", "running"
KINDS = {"job": "Job", "mpijob": "MPIJob"}


# --------------------------------------------------------------------------- status
def _true(obj: dict, *types: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") in types and str(c.get("status")) == "True" for c in conditions)


def status_of(obj: dict) -> str:
    """``success``, ``failed`` or ``running`` (what the cluster-generic executor reads) of a Job or MPIJob object:
    Job ``Complete``/``SuccessCriteriaMet`` and MPIJob ``Succeeded`` are success; Job ``Failed``/``FailureTarget`` and
    MPIJob ``Failed`` are failure; anything else (no conditions yet, ``Created``, ``Running``, ``Suspended``,
    ``Restarting``) is still running."""
    if obj.get("kind") == "MPIJob":
        return SUCCESS if _true(obj, "Succeeded") else FAILED if _true(obj, "Failed") else RUNNING
    if _true(obj, "Failed", "FailureTarget"):
        return FAILED
    return SUCCESS if _true(obj, "Complete", "SuccessCriteriaMet") else RUNNING


# --------------------------------------------------------------------------- kubectl
def _kubectl(site: dict, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    exe = os.environ.get("ACCELBENCH_KUBECTL") or site.get("kubectl") or "kubectl"
    try:
        return subprocess.run([exe, *args], input=stdin, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ConfigError(f"`{exe}` not found: install kubectl or set `kubectl:` in the site file") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"`{exe} {' '.join(args[:2])}` gave no answer within 120 s (is the cluster reachable?)"
        ) from None


def parse_jobid(jobid: str) -> tuple[str, str, str]:
    """``namespace/kind/name`` (what :func:`submit` prints) -> its three parts.

    Raises:
        ConfigError: not of that form.
    """
    parts = jobid.strip().strip("'\"").split("/")
    if len(parts) != 3 or parts[1] not in KINDS or not all(parts):
        raise ConfigError(f"job id {jobid!r}: expected namespace/job/NAME or namespace/mpijob/NAME (from k8s submit)")
    return parts[0], parts[1], parts[2]


def submit(jobscript: str | Path, site: dict) -> str:
    """Render the job script's manifest and create it; returns the job id ``namespace/kind/name``.

    With ``server_dry_run`` (site, default true) the API server checks the manifest first (``kubectl create
    --dry-run=server``), so a missing MPIJob CRD or a rejected field stops here, named in one line.

    Raises:
        ConfigError: the script, the manifest or kubectl's answer (its message, one line).
    """
    script = Path(jobscript).read_text()
    manifest = render(job_properties(script), script, site)
    text = yaml.safe_dump(manifest, sort_keys=False)
    steps = (
        [["create", "--dry-run=server", "-f", "-", "-o", "name"]] if site.get("server_dry_run", True) is True else []
    )
    for args in [*steps, ["create", "-f", "-", "-o", "name"]]:
        proc = _kubectl(site, args, text)
        if proc.returncode:
            msg = " ".join(proc.stderr.split()) or f"exit {proc.returncode}"
            if manifest["kind"] == "MPIJob" and re.search(r"no matches for kind|resource mapping not found", msg):
                msg = f"the cluster has no MPIJob CRD ({MPI_API}); install Kubeflow's mpi-operator. kubectl: {msg}"
            raise ConfigError(f"kubectl {' '.join(args[:2])} {manifest['kind']} {manifest['metadata']['name']}: {msg}")
    meta = manifest["metadata"]
    return f"{meta['namespace']}/{manifest['kind'].lower()}/{meta['name']}"


LOG_TAIL = 200  # pod log lines a failed Job's status reads (its error lines and its last 5 go to stderr)
MAX_KUBECTL_ERRORS = 5  # consecutive failed `kubectl get` of one job before its status is `failed`
ERRORS_DIR = Path(".snakemake/accelbench-k8s-status")  # per job: the count of consecutive kubectl errors


def _errors_file(jobid: str) -> Path:
    import hashlib

    return ERRORS_DIR / hashlib.sha256(jobid.encode()).hexdigest()[:32]


def _count_error(jobid: str) -> int:
    """One more consecutive kubectl error for ``jobid`` (kept in the project's own ``.snakemake`` folder, as each
    status poll is a new process); the count."""
    path = _errors_file(jobid)
    try:
        count = int(path.read_text() or 0) + 1 if path.is_file() and not path.is_symlink() else 1
    except (OSError, ValueError):
        count = 1
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.write_text(str(count))
    except OSError:
        pass
    return count


def status(jobid: str, site: dict) -> str:
    """The job's state for the executor. A job the server no longer has (deleted, cancelled) is ``failed``; any other
    kubectl error is ``running`` (asked again later) with kubectl's message on stderr, until
    :data:`MAX_KUBECTL_ERRORS` in a row (e.g. ``Unauthorized``: expired credentials), then ``failed`` with one line
    saying so. A failed Job's error lines (of its last :data:`LOG_TAIL` log lines) and its last 5 lines go to stderr
    (the executor's log)."""
    ns, kind, name = parse_jobid(jobid)
    try:
        proc = _kubectl(site, ["get", kind, name, "-n", ns, "-o", "json"])
        failure = (" ".join(proc.stderr.split()) or f"exit {proc.returncode}") if proc.returncode else None
    except ConfigError as exc:  # no answer in time
        proc, failure = None, str(exc)
    if failure is not None:
        if "NotFound" in failure or "not found" in failure:
            return FAILED
        n = _count_error(jobid)
        if n >= MAX_KUBECTL_ERRORS:
            print(f"accelbench k8s status {jobid}: kubectl failed {n} times in a row: {failure}", file=sys.stderr)
            return FAILED
        print(f"accelbench k8s status {jobid}: kubectl ({n}/{MAX_KUBECTL_ERRORS}): {failure}", file=sys.stderr)
        return RUNNING
    _errors_file(jobid).unlink(missing_ok=True)
    state = status_of(json.loads(proc.stdout))
    if state == FAILED and kind == "job":
        logs = _kubectl(site, ["logs", f"job/{name}", "-n", ns, "--tail", str(LOG_TAIL)])
        lines = logs.stdout.rstrip().splitlines() if logs.returncode == 0 else []
        # the rule's own error (Snakemake's last lines in the pod are its closing boilerplate), then the last lines
        errors = [line for line in lines[:-5] if "error" in line.lower()][-5:]
        if errors:
            print(f"{jobid} failed; error lines:\n" + "\n".join(errors), file=sys.stderr)
        if lines:
            print(f"{jobid} failed; last log lines:\n" + "\n".join(lines[-5:]), file=sys.stderr)
    return state


def cancel(jobids: list[str], site: dict) -> list[str]:
    """Delete the jobs (their pods go with them); returns kubectl's messages for the ones it could not delete."""
    failed = []
    for jobid in jobids:
        ns, kind, name = parse_jobid(jobid)
        proc = _kubectl(site, ["delete", kind, name, "-n", ns, "--ignore-not-found", "--wait=false"])
        if proc.returncode:
            failed.append(f"{jobid}: {' '.join(proc.stderr.split())}")
    return failed
