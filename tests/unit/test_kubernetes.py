"""The Kubernetes profile (accelbench.cluster.kubernetes, kubernetes/): manifests by rule resources, the status mapping
of Job and MPIJob conditions, submit/status/cancel through a recorded kubectl, and the site file's checks.

Offline: a stand-in `kubectl` script records its argv and stdin and answers from files;
tests/system/test_kubernetes_schemas.py validates the rendered pod templates against the Kubernetes schemas."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
import yaml
import yte

from accelbench.cli import main
from accelbench.cluster import kubernetes as k8s
from accelbench.errors import ConfigError
from k8s_helpers import script

REPO = Path(__file__).resolve().parents[2]


def site(**over) -> dict:
    return {**yaml.safe_load((REPO / "kubernetes/site.yaml").read_text()), **over}


def render(text: str, **over) -> dict:
    return k8s.render(k8s.job_properties(text), text, site(**over), workdir="/shared/accelbench", name="n")


def containers(manifest) -> list[dict]:
    if manifest["kind"] == "Job":
        return manifest["spec"]["template"]["spec"]["containers"]
    return [r["template"]["spec"]["containers"][0] for r in manifest["spec"]["mpiReplicaSpecs"].values()]


def test_one_node_rule_is_a_job_with_gaudi_cards_hugepages_and_the_script_as_argv():
    text = script(devices=8)
    m = render(text)
    assert (m["apiVersion"], m["kind"], m["spec"]["backoffLimit"]) == ("batch/v1", "Job", 0)
    pod = m["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["/bin/bash"] and c["args"] == ["-c", text, "n"]  # the whole script, one argv word
    assert (
        c["resources"]["limits"]
        == c["resources"]["requests"]
        == {
            "cpu": "16",
            "memory": "128000Mi",
            "habana.ai/gaudi": "8",
            "hugepages-2Mi": "30000Mi",
        }
    )
    assert pod["hostIPC"] is True and pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [{"name": "work", "hostPath": {"path": "/shared/accelbench", "type": "Directory"}}]
    assert c["volumeMounts"] == [{"name": "work", "mountPath": "/shared/accelbench"}]
    assert c["workingDir"] == "/shared/accelbench" and m["spec"]["activeDeadlineSeconds"] == 90 * 60
    assert {"name": "PT_HPU_LAZY_MODE", "value": "1"} in c["env"]


def test_multi_node_rule_is_an_mpijob_of_whole_nodes():
    m = render(script(devices=64, nodes=8))
    assert (m["apiVersion"], m["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    spec = m["spec"]
    assert spec["slotsPerWorker"] == 8 and spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runPolicy"]["backoffLimit"] == 0 and spec["runLauncherAsWorker"] is True
    launcher, worker = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    assert (launcher["replicas"], worker["replicas"]) == (1, 7)  # the launcher is the first of 8 nodes
    for c in containers(m):
        assert c["resources"]["limits"]["habana.ai/gaudi"] == "8" and c["resources"]["limits"]["hugepages-2Mi"]
    assert launcher["template"]["spec"]["containers"][0]["args"][1].startswith("#!/bin/sh")
    assert "sshd" in worker["template"]["spec"]["containers"][0]["args"][1]
    assert all(r["template"]["spec"]["hostIPC"] for r in spec["mpiReplicaSpecs"].values())


def test_devices_come_from_the_wildcard_the_gpu_resource_or_none():
    assert k8s.layout(k8s.job_properties(script(devices=16, nodes=2))) == (16, 2)
    assert k8s.layout(k8s.job_properties(script(gpu=4))) == (4, 1)
    assert k8s.layout(k8s.job_properties(script(gpu=0))) == (1, 1)  # a measurement rule on Gaudi: gpu 0, one card
    props = k8s.job_properties(script())
    del props["resources"]["gpu"]
    assert k8s.layout(props) == (0, 1)  # an aggregation: a CPU pod, no device, no hugepages
    m = k8s.render(props, "x", site(), workdir="/w", name="n")
    assert set(m["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]) == {"cpu", "memory"}
    with pytest.raises(ConfigError, match="do not fill 3 nodes"):
        k8s.layout(k8s.job_properties(script(devices=16, nodes=3)))


def test_cuda_site_asks_for_nvidia_gpus_and_site_fields_reach_the_pod():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "oam", "operator": "NotIn", "values": ["gaudi2"]}]}]}}}  # fmt: skip
    m = render(
        script(gpu=2),
        backend="cuda",
        namespace="me-restricted",
        service_account="me",
        node_selector={"brightcomputing.com/node-category": "compute"},
        affinity=affinity,
        volumes=[{"name": "ceph", "pvc": "ceph-claim", "mount_path": "/ceph"}],
    )
    pod = m["spec"]["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2" and "hugepages-2Mi" not in limits and "habana.ai/gaudi" not in limits
    assert pod["containers"][0]["image"] == "ghcr.io/accelbench/accelbench-cuda:0.1.0"
    assert m["metadata"]["namespace"] == "me-restricted" and pod["serviceAccountName"] == "me"
    assert pod["nodeSelector"] == {"brightcomputing.com/node-category": "compute"} and pod["affinity"] == affinity
    assert pod["volumes"] == [{"name": "ceph", "persistentVolumeClaim": {"claimName": "ceph-claim"}}]


def test_job_names_are_dns_labels_short_enough_for_mpijob_pods():
    name = k8s.job_name({"rule": "llm_quant_sensitivity_with_a_long_name", "jobid": 123456})
    assert len(name) + len("-worker-63") <= 63 and name == name.lower() and "_" not in name


@pytest.mark.parametrize(
    "kind,conditions,expected",
    [
        ("Job", [], "running"),
        ("Job", [{"type": "Complete", "status": "True"}], "success"),
        ("Job", [{"type": "SuccessCriteriaMet", "status": "True"}], "success"),
        ("Job", [{"type": "FailureTarget", "status": "True"}], "failed"),
        ("Job", [{"type": "Failed", "status": "True"}], "failed"),
        ("Job", [{"type": "Failed", "status": "False"}], "running"),
        ("Job", [{"type": "Suspended", "status": "True"}], "running"),
        ("MPIJob", [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}], "running"),
        ("MPIJob", [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}], "success"),
        ("MPIJob", [{"type": "Failed", "status": "True"}], "failed"),
        ("MPIJob", [{"type": "Restarting", "status": "True"}], "running"),
    ],
)
def test_status_maps_job_and_mpijob_conditions(kind, conditions, expected):
    assert k8s.status_of({"kind": kind, "status": {"conditions": conditions}}) == expected


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    """A recording stand-in for kubectl: argv and stdin of each call to calls.jsonl; answers from `answers`."""
    log, answers = tmp_path / "calls.jsonl", tmp_path / "answers.json"
    answers.write_text("{}")
    # the status command counts consecutive kubectl errors under the working directory's .snakemake (each poll is a
    # new process): a fresh one per test, else the counts of earlier runs in this checkout carry over
    monkeypatch.chdir(tmp_path)
    exe = tmp_path / "kubectl"
    exe.write_text(
        f"#!{sys.executable}\nimport json, sys\nverb = sys.argv[1]\nstdin = sys.stdin.read() if '-' in sys.argv "
        f"else ''\nopen({str(log)!r}, 'a').write(json.dumps([sys.argv[1:], stdin]) + '\\n')\n"
        f"a = json.load(open({str(answers)!r})).get(verb, [0, '', ''])\nsys.stdout.write(a[1]); "
        f"sys.stderr.write(a[2]); sys.exit(a[0])\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("ACCELBENCH_KUBECTL", str(exe))
    site_file = tmp_path / "site.yaml"
    site_file.write_text(yaml.safe_dump(site(namespace="ns")))
    monkeypatch.setenv("ACCELBENCH_K8S_SITE", str(site_file))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def answer(**verbs):
        answers.write_text(json.dumps(verbs))

    return calls, answer


def test_submit_dry_runs_on_the_server_then_creates_and_prints_the_job_id(tmp_path, kubectl, capsys):
    calls, _ = kubectl
    jobscript = tmp_path / "snakejob.sh"
    jobscript.write_text(script(devices=16, nodes=2))
    assert main(["k8s", "submit", str(jobscript)]) == 0
    jobid = capsys.readouterr().out.strip()
    ns, kind, name = k8s.parse_jobid(jobid)
    (dry, dry_in), (create, create_in) = calls()
    assert dry[:2] == ["create", "--dry-run=server"] and create[:3] == ["create", "-f", "-"]
    manifest = yaml.safe_load(create_in)
    assert dry_in == create_in and (ns, kind, name) == ("ns", "mpijob", manifest["metadata"]["name"])
    assert manifest["kind"] == "MPIJob"


def test_a_missing_mpijob_crd_is_one_clear_line(tmp_path, kubectl, capsys):
    calls, answer = kubectl
    err = 'error: resource mapping not found for name: "x" namespace: "ns" from "STDIN": no matches for kind "MPIJob"'
    answer(create=[1, "", err + ' in version "kubeflow.org/v2beta1"\nensure CRDs are installed first\n'])
    jobscript = tmp_path / "snakejob.sh"
    jobscript.write_text(script(devices=16, nodes=2))
    assert main(["k8s", "submit", str(jobscript)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no MPIJob CRD" in err and "mpi-operator" in err
    assert len(calls()) == 1  # nothing created after the failed server dry run


def test_status_reads_conditions_not_found_is_failed_and_cancel_deletes(kubectl, capsys):
    calls, answer = kubectl
    answer(get=[0, json.dumps({"kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "True"}]}}), ""])
    assert main(["k8s", "status", "ns/job/a"]) == 0 and capsys.readouterr().out == "success\n"
    answer(get=[1, "", 'Error from server (NotFound): jobs.batch "a" not found'])
    assert main(["k8s", "status", "ns/job/a"]) == 0 and capsys.readouterr().out == "failed\n"
    answer(get=[1, "", "Unable to connect to the server: timeout"])  # transient: asked again later
    assert main(["k8s", "status", "ns/mpijob/b"]) == 0 and capsys.readouterr().out == "running\n"
    assert main(["k8s", "cancel", "ns/job/a", "ns/mpijob/b"]) == 0
    deletes = [argv for argv, _ in calls() if argv[0] == "delete"]
    assert [d[:5] for d in deletes] == [["delete", "job", "a", "-n", "ns"], ["delete", "mpijob", "b", "-n", "ns"]]
    assert main(["k8s", "status", "not-a-job-id"]) == 2
    assert "expected namespace/job/NAME" in capsys.readouterr().err


def test_site_file_errors_name_the_key(tmp_path):
    bad = tmp_path / "site.yaml"
    bad.write_text(yaml.safe_dump(site(namspace="x")))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['namspace'\]"):
        k8s.load_site(bad)
    bad.write_text(yaml.safe_dump(site(backend="rocm")))
    with pytest.raises(ConfigError, match="backend 'rocm' has no entry"):
        k8s.load_site(bad)
    bad.write_text(yaml.safe_dump(site(volumes=[{"name": "w", "mount_path": "/w"}])))
    with pytest.raises(ConfigError, match=r"volumes\[0\] needs one of host_path"):
        k8s.load_site(bad)
    assert k8s.load_site(REPO / "kubernetes/site.yaml")["backend"] == "hpu"
    with pytest.raises(ConfigError, match="no '# properties"):
        k8s.job_properties("#!/bin/sh\necho hi\n")


def test_profile_runs_the_k8s_commands_with_slurm_profile_requests(monkeypatch, tmp_path):
    with open(REPO / "kubernetes/config.yaml") as f:
        kube = yte.process_yaml(f, require_use_yte=True)
    site_file = tmp_path / "site.yaml"
    site_file.write_text((REPO / "slurm/site.yaml").read_text())
    monkeypatch.setenv("ACCELBENCH_SLURM_SITE", str(site_file))
    with open(REPO / "slurm/config.yaml") as f:
        slurm = yte.process_yaml(f, require_use_yte=True)
    assert kube["executor"] == "cluster-generic"
    for verb in ("submit", "status", "cancel"):
        assert kube[f"cluster-generic-{verb}-cmd"] == f"accelbench k8s {verb}"
    assert kube["set-threads"] == slurm["set-threads"]
    assert {r: v["mem_mb"] for r, v in kube["set-resources"].items()} == {
        r: v["mem_mb"] for r, v in slurm["set-resources"].items()
    }


# The MPIJob fields we render, from the mpi-operator v2beta1 API reference (MPIJobSpec, RunPolicy, ReplicaSpec);
# pod templates are core/v1 (tests/system/test_kubernetes_schemas.py validates them strictly).
REPLICA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["replicas", "template"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {"type": "object"},
    },
}
MPIJOB = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v2beta1"},
        "kind": {"const": "MPIJob"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["mpiReplicaSpecs"],
            "properties": {
                "slotsPerWorker": {"type": "integer", "minimum": 1},
                "runLauncherAsWorker": {"type": "boolean"},
                "launcherCreationPolicy": {"enum": ["AtStartup", "WaitForWorkersReady"]},
                "mpiImplementation": {"enum": ["OpenMPI", "Intel", "MPICH"]},
                "sshAuthMountPath": {"type": "string"},
                "runPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "cleanPodPolicy": {"enum": ["None", "Running", "All"]},
                        "backoffLimit": {"type": "integer", "minimum": 0},
                        "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
                        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
                        "suspend": {"type": "boolean"},
                    },
                },
                "mpiReplicaSpecs": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["Launcher"],
                    "properties": {"Launcher": REPLICA, "Worker": REPLICA},
                },
            },
        },
    },
}


def test_rendered_mpijobs_match_the_v2beta1_fields():
    import jsonschema

    for text in (script(devices=16, nodes=2), script(devices=64, nodes=8)):
        m = render(text, ttl_seconds_after_finished=60)
        jsonschema.validate(m, MPIJOB)
    m["spec"]["launcherCreationPolicy"] = "WaitForWorkers"  # a misspelt value is caught
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(m, MPIJOB)
