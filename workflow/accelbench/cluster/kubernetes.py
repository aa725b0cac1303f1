"""Kubernetes jobs of ``snakemake --profile kubernetes`` (cluster-generic executor): manifests, submit, status, cancel.

Study B ran its Gaudi jobs on SDSC's Voyager, which schedules with Kubernetes: one pod for up to 8 cards, a Kubeflow
``MPIJob`` (``kubeflow.org/v2beta1``) for 16 to 64 cards. Here each Snakemake job becomes one of those, built as Python
dicts from the job's properties (the ``# properties = {...}`` line Snakemake writes into every job script) and the site
file ``kubernetes/site.yaml`` (or ``$ACCELBENCH_K8S_SITE``), then handed to ``kubectl`` as YAML on stdin:

* a job on at most one node's devices: a ``batch/v1`` Job (``backoffLimit: 0``, ``restartPolicy: Never``);
* more (the rule's ``nodes`` resource above 1, :func:`accelbench.cluster.multinode.slurm_resources`): an MPIJob with
  ``slotsPerWorker`` = devices per node, ``launcherCreationPolicy: WaitForWorkersReady``, ``runPolicy.backoffLimit: 0``
  and ``runLauncherAsWorker: true`` (the launcher is the first node: it runs the job script, whose harness checks the
  devices where it runs, as the Slurm batch step does on the first node), ``nodes - 1`` workers running sshd.

The job script reaches the pod as argv (``bash -c <script>``), never spliced into another shell string; site values
go into the manifest's fields only. Every pod mounts the site's volumes (the shared filesystem holding the repository
at the same path), asks for the backend's device resource (``habana.ai/gaudi``, ``nvidia.com/gpu``), its hugepages,
``hostIPC``, the site's node selector, affinity, tolerations and service account.

Example::

    site = load_site("kubernetes/site.yaml")
    manifest = render(job_properties(Path("snakejob.sh").read_text()), Path("snakejob.sh").read_text(), site)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import yaml

from accelbench.errors import ConfigError

MPI_API = "kubeflow.org/v2beta1"
SUCCESS, FAILED, RUNNING = "success", "failed", "running"
KINDS = {"job": "Job", "mpijob": "MPIJob"}
SITE_KEYS = {
    "namespace", "kubectl", "service_account", "backend", "backends", "host_ipc", "node_selector", "affinity",
    "tolerations", "volumes", "image_pull_secrets", "ttl_seconds_after_finished", "server_dry_run", "launcher",
}  # fmt: skip


# --------------------------------------------------------------------------- site and job properties
DNS1123 = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_NAME = {"type": "string", "pattern": DNS1123, "maxLength": 63}
SITE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "namespace": _NAME,
        "kubectl": {"type": "string", "minLength": 1},
        "service_account": {"anyOf": [{"type": "null"}, {**_NAME, "maxLength": 253}]},
        "backend": {"type": "string"},
        "backends": {"type": "object", "additionalProperties": {"type": ["object", "null"]}},
        "host_ipc": {"type": "boolean"},
        "node_selector": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
        "affinity": {"type": ["object", "null"]},
        "tolerations": {"type": ["array", "null"], "items": {"type": "object"}},
        "volumes": {"type": ["array", "null"], "items": {"type": "object"}},
        "image_pull_secrets": {"type": ["array", "null"], "items": {**_NAME, "maxLength": 253}},
        "ttl_seconds_after_finished": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0}]},
        "server_dry_run": {"type": "boolean"},
        "launcher": {},
    },
}  # booleans are booleans (`"false"` is refused, not read as true), lists are lists, names are DNS-1123 labels


def load_site(path: str | Path | None = None) -> dict:
    """The site file (``kubernetes/site.yaml``, or ``$ACCELBENCH_K8S_SITE``), checked: read as config files are
    (:func:`accelbench.core.config.read_yaml`: a plain file of bounded size, no key given twice), then typed by
    :data:`SITE_SCHEMA`.

    Raises:
        ConfigError: unreadable or not YAML, a duplicate key, an unknown key, a value of the wrong type
            (``host_ipc: "false"``, ``image_pull_secrets: abc``, ``namespace: a/b``, ``ttl_seconds_after_finished:
            one day``), or no ``backends`` entry for ``backend`` (each one line naming the file and the key).
    """
    import jsonschema

    from accelbench.core.files import read_yaml

    def key_path(error: jsonschema.ValidationError) -> str:  # the key as the site file writes it
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")

    path = Path(path or os.environ.get("ACCELBENCH_K8S_SITE") or "kubernetes/site.yaml")
    try:
        site = read_yaml(path)
    except ConfigError as exc:
        raise ConfigError(f"Kubernetes site file {path}: {exc}") from None
    site = site if site is not None else {}
    if not isinstance(site, dict):
        raise ConfigError(f"Kubernetes site file {path}: expected a mapping of settings")
    unknown = sorted(set(site) - SITE_KEYS)
    if unknown:
        raise ConfigError(f"Kubernetes site file {path}: unknown key(s) {unknown} (known: {sorted(SITE_KEYS)})")
    errors = sorted(
        jsonschema.Draft202012Validator(SITE_SCHEMA).iter_errors(site), key=lambda e: list(map(str, e.absolute_path))
    )
    if errors:
        e = errors[0]
        hint = f" (a DNS-1123 name: {DNS1123})" if e.validator == "pattern" else ""
        raise ConfigError(f"Kubernetes site file {path}: key '{key_path(e)}': {e.message}{hint}")
    backend = site.get("backend", "hpu")
    if (site.get("backends") or {}).get(backend) is None:
        raise ConfigError(f"Kubernetes site file {path}: backend {backend!r} has no entry under `backends:`")
    for i, vol in enumerate(site.get("volumes") or []):
        if not isinstance(vol, dict) or not vol.get("name") or not vol.get("mount_path"):
            raise ConfigError(f"Kubernetes site file {path}: volumes[{i}] needs `name` and `mount_path`")
        if sum(k in vol for k in ("host_path", "pvc", "empty_dir")) != 1:
            raise ConfigError(f"Kubernetes site file {path}: volumes[{i}] needs one of host_path, pvc, empty_dir")
    return site


# characters a double-quoted shell word still interprets: the cluster-generic executor runs
# `<submit-cmd> "<jobscript path>"` through a shell, the path under the working directory
SHELL_ACTIVE = re.compile(r'[$`"\\!\n]')


def check_workdir(workdir: str | Path | None = None) -> None:
    """Refuse a working directory whose path a double-quoted shell word would still expand (``$``, backquote, ``"``,
    ``\\``, ``!``, newline): snakemake-executor-plugin-cluster-generic runs ``<submit-cmd> "<jobscript>"`` with
    ``shell=True`` and the job script lies under it (``.snakemake/tmp.*``), so ``.../$(touch x)/repo`` ran
    ``touch x``. Called by ``kubernetes/config.yaml`` when the profile is read, before any job is submitted.

    Raises:
        ConfigError: one line naming the path and the character.
    """
    path = str(Path(workdir or os.getcwd()).resolve())
    m = SHELL_ACTIVE.search(path)
    if m:
        raise ConfigError(
            f"working directory {path!r} holds {m.group()!r}, which the cluster-generic executor's shell would "
            f"expand in the job script's path; run from a folder without $ ` \" \\ ! or newlines"
        )


def job_properties(script: str) -> dict:
    """The job's properties (rule, wildcards, threads, resources, jobid) from Snakemake's job script.

    Raises:
        ConfigError: the script has no ``# properties = {...}`` line (not a Snakemake job script).
    """
    m = re.search(r"^# properties = (\{.*\})\s*$", script, re.MULTILINE)
    if not m:
        raise ConfigError("not a Snakemake job script: no '# properties = {...}' line")
    return json.loads(m.group(1))


def layout(props: dict) -> tuple[int, int]:
    """``(devices, nodes)`` of a job: the ``devices`` wildcard where the rule has one, else its ``gpu`` resource,
    else 1 for a rule that has a ``gpu`` resource at all (measurement rules; 0 on Gaudi, whose cards Slurm asks for
    by GRES), else 0 (a CPU job); ``nodes`` is the rule's ``nodes`` resource (multi-node rules), else 1."""
    res = props.get("resources") or {}
    nodes = max(1, int(res.get("nodes") or 1))
    wild = (props.get("wildcards") or {}).get("devices")
    if wild is not None:
        devices = int(wild)
    elif int(res.get("gpu") or 0) > 0:
        devices = int(res["gpu"])
    else:
        devices = 1 if "gpu" in res else 0
    if nodes > 1 and (devices < nodes or devices % nodes):
        raise ConfigError(f"rule {props.get('rule')}: {devices} devices do not fill {nodes} nodes evenly")
    return devices, nodes


def job_name(props: dict) -> str:
    """A DNS-1123 name (short enough for the MPIJob's ``-launcher``/``-worker-N`` pods and services)."""
    rule = re.sub(r"[^a-z0-9-]+", "-", str(props.get("rule", "job")).lower()).strip("-")[:24] or "job"
    return f"accelbench-{rule}-{props.get('jobid', 0)}-{secrets.token_hex(3)}"


# --------------------------------------------------------------------------- manifests
def _volumes(site: dict, workdir: str) -> tuple[list, list]:
    volumes, mounts = [], []
    for vol in site.get("volumes") or []:
        mount = workdir if vol["mount_path"] == "." else str(vol["mount_path"])
        if "host_path" in vol:
            host = workdir if vol["host_path"] == "." else str(vol["host_path"])
            volumes.append({"name": vol["name"], "hostPath": {"path": host, "type": "Directory"}})
        elif "pvc" in vol:
            volumes.append({"name": vol["name"], "persistentVolumeClaim": {"claimName": str(vol["pvc"])}})
        else:
            volumes.append({"name": vol["name"], "emptyDir": {}})
        mounts.append({"name": vol["name"], "mountPath": mount})
    return volumes, mounts


# Kubernetes' resource name for CPU cores (a pod resource, not an accelbench backend)
CORES_RESOURCE = "cpu"


def _resources(props: dict, backend: dict, devices: int) -> dict:
    res = props.get("resources") or {}
    cores = str(max(1, int(props.get("threads") or 1)))
    amounts = {CORES_RESOURCE: cores, "memory": f"{int(res.get('mem_mb') or 1000)}Mi"}
    if devices and backend.get("resource"):
        amounts[backend["resource"]] = str(devices)
    if devices and backend.get("hugepages_2Mi"):
        amounts["hugepages-2Mi"] = str(backend["hugepages_2Mi"])
    return {"requests": dict(amounts), "limits": dict(amounts)}


def pod_template(site: dict, props: dict, argv: list[str], devices: int, name: str, workdir: str) -> dict:
    """One pod template (``core/v1`` PodTemplateSpec) running ``argv`` with ``devices`` of the site's backend."""
    backend = site["backends"][site.get("backend", "hpu")]
    volumes, mounts = _volumes(site, workdir)
    container = {
        "name": name,
        "image": str(backend["image"]),
        "command": argv[:1],
        "args": argv[1:],
        "workingDir": workdir,
        "resources": _resources(props, backend, devices),
        "env": [{"name": str(k), "value": str(v)} for k, v in (backend.get("env") or {}).items()],
    }
    if mounts:
        container["volumeMounts"] = mounts
    spec = {"restartPolicy": "Never", "hostIPC": site.get("host_ipc", True) is True, "containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    for key, field in (
        ("service_account", "serviceAccountName"),
        ("node_selector", "nodeSelector"),
        ("affinity", "affinity"),
        ("tolerations", "tolerations"),
    ):
        if site.get(key):
            spec[field] = site[key]
    if site.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": str(s)} for s in site["image_pull_secrets"]]
    return {"metadata": {"labels": labels(props)}, "spec": spec}


def labels(props: dict) -> dict:
    return {"app.kubernetes.io/name": "accelbench", "accelbench/rule": str(props.get("rule", "job"))[:63]}


def render(props: dict, script: str, site: dict, workdir: str | None = None, name: str | None = None) -> dict:
    """The manifest of one Snakemake job: a ``batch/v1`` Job on one node, an MPIJob across nodes."""
    workdir = str(Path(workdir or os.getcwd()).resolve())
    devices, nodes = layout(props)
    name = name or job_name(props)
    meta = {"name": name, "namespace": str(site.get("namespace") or "default"), "labels": labels(props)}
    runtime = int((props.get("resources") or {}).get("runtime") or 0)
    run = ["/bin/bash", "-c", script, name]  # the script as argv: $0 is the job name
    if nodes == 1:
        spec = {"backoffLimit": 0, "template": pod_template(site, props, run, devices, "job", workdir)}
        if runtime:
            spec["activeDeadlineSeconds"] = runtime * 60
        if site.get("ttl_seconds_after_finished") is not None:
            spec["ttlSecondsAfterFinished"] = int(site["ttl_seconds_after_finished"])
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
    per_node = devices // nodes
    sshd = ["/bin/bash", "-c", "/usr/bin/ssh-keygen -A && exec /usr/sbin/sshd -De"]
    run_policy = {"backoffLimit": 0, "cleanPodPolicy": "Running"}
    if runtime:
        run_policy["activeDeadlineSeconds"] = runtime * 60
    if site.get("ttl_seconds_after_finished") is not None:
        run_policy["ttlSecondsAfterFinished"] = int(site["ttl_seconds_after_finished"])
    spec = {
        "slotsPerWorker": per_node,
        "runLauncherAsWorker": True,
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiImplementation": "OpenMPI",
        "runPolicy": run_policy,
        "mpiReplicaSpecs": {
            "Launcher": {
                "replicas": 1,
                "restartPolicy": "Never",
                "template": pod_template(site, props, run, per_node, "launcher", workdir),
            },
            "Worker": {
                "replicas": nodes - 1,
                "restartPolicy": "Never",
                "template": pod_template(site, props, sshd, per_node, "worker", workdir),
            },
        },
    }
    return {"apiVersion": MPI_API, "kind": "MPIJob", "metadata": meta, "spec": spec}


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
