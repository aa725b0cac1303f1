"""The Kubernetes profile's manifests against the Kubernetes API schemas (kubernetes-validate, strict: an unknown or
misspelt field fails): the batch/v1 Job as a whole, and each MPIJob replica's pod template as a core/v1 PodTemplate
(the MPIJob's own fields: tests/unit/test_kubernetes.py). kubernetes-validate is imported if present; with
ACCELBENCH_PIP_INSTALL=1 (.ci/run) it is installed into a temporary folder; elsewhere the test is skipped."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accelbench.cluster import kubernetes as k8s
from k8s_helpers import script

REPO = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.33.0"  # a current release; the fields rendered are stable core/v1 and batch/v1 ones


@pytest.fixture(scope="module")
def validator(tmp_path_factory):
    try:
        return importlib.import_module("kubernetes_validate")
    except ImportError:
        if os.environ.get("ACCELBENCH_PIP_INSTALL") != "1":
            pytest.skip(
                "kubernetes-validate is not installed (pip install kubernetes-validate, or ACCELBENCH_PIP_INSTALL=1)"
            )
    target = tmp_path_factory.mktemp("kv")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    subprocess.run([*pip, "kubernetes-validate==1.37.0"], check=True, timeout=900)
    sys.path.insert(0, str(target))
    return importlib.import_module("kubernetes_validate")


def manifests(site: dict) -> list[dict]:
    out = []
    for text in (script(devices=8), script(gpu=2), script(devices=64, nodes=8), script(devices=16, nodes=2)):
        out.append(k8s.render(k8s.job_properties(text), text, site, workdir="/shared/accelbench"))
    return out


def sites() -> list[dict]:
    base = yaml.safe_load((REPO / "kubernetes/site.yaml").read_text())
    voyager = {
        **base,
        "namespace": "me-restricted",
        "service_account": "me",
        "node_selector": {"brightcomputing.com/node-category": "compute"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "oam", "operator": "NotIn", "values": ["gaudi2"]}]}]}}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gaudi2", "effect": "NoSchedule"}],
        "volumes": [{"name": "ceph", "host_path": "/voyager/ceph/me", "mount_path": "/ceph"},
                    {"name": "scratch", "empty_dir": {}, "mount_path": "/scratch"},
                    {"name": "work", "pvc": "work-claim", "mount_path": "."}],
        "image_pull_secrets": ["vault"],
        "ttl_seconds_after_finished": 3600,
    }  # fmt: skip
    return [base, {**base, "backend": "cuda"}, voyager]


def test_rendered_pods_are_valid_kubernetes_objects(validator):
    checked = 0
    for site in sites():
        for m in manifests(site):
            if m["kind"] == "Job":
                validator.validate(m, K8S_VERSION, strict=True)
                checked += 1
                continue
            for role, replica in m["spec"]["mpiReplicaSpecs"].items():
                template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{role.lower()}"}}
                validator.validate({**template, "template": replica["template"]}, K8S_VERSION, strict=True)
                checked += 1
    assert checked == 3 * (2 + 2 * 2)


def test_the_validator_rejects_a_misspelt_field(validator):
    m = manifests(sites()[0])[0]
    m["spec"]["template"]["spec"]["hostIpc"] = True
    with pytest.raises(validator.ValidationError):
        validator.validate(m, K8S_VERSION, strict=True)
