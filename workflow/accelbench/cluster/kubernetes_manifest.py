"""The manifest of a Kubernetes job of ``snakemake --profile kubernetes``: the site file, the job's layout, Job/MPIJob.

Study B ran its Gaudi jobs on SDSC's Voyager, which schedules with Kubernetes: one pod for up to 8 cards, a Kubeflow
``MPIJob`` (``kubeflow.org/v2beta1``) for 16 to 64 cards. Here each Snakemake job becomes one of those, built as Python
dicts from the job's properties (the ``# properties = {...}`` line Snakemake writes into every job script) and the site
file ``kubernetes/site.yaml`` (or ``$ACCELBENCH_K8S_SITE``), which :mod:`accelbench.cluster.kubernetes` hands to
``kubectl``:

* a job on at most one node's devices: a ``batch/v1`` Job (``backoffLimit: 0``, ``restartPolicy: Never``);
* more (the rule's ``nodes`` resource above 1, :func:`accelbench.cluster.multinode.slurm_resources`): an MPIJob with
  ``slotsPerWorker`` = devices per node, ``launcherCreationPolicy: WaitForWorkersReady``, ``runPolicy.backoffLimit: 0``
  and ``runLauncherAsWorker: true`` (the launcher is the first node: it runs the job script, whose harness checks the
  devices where it runs, as the Slurm batch step does on the first node), ``nodes - 1`` workers running sshd.

The job script reaches the pod as argv (``bash -c <script>``), never spliced into another shell string; site values
go into the manifest's fields only. Every pod mounts the site's volumes (the shared filesystem holding the repository
at the same path), asks for the backend's device resource (``habana.ai/gaudi``, ``nvidia.com/gpu``), its hugepages,
``hostIPC``, the site's node selector, affinity, tolerations and service account. Submitting, polling and cancelling
are :mod:`accelbench.cluster.kubernetes`, which re-exports these names.

Example::

    site = load_site("kubernetes/site.yaml")
    manifest = render(job_properties(Path("snakejob.sh").read_text()), Path("snakejob.sh").read_text(), site)
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from accelbench.errors import ConfigError

MPI_API = "kubeflow.org/v2beta1"
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
