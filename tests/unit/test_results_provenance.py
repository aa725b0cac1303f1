import json
import os

import pytest

from accelbench.core import provenance, results
from accelbench.errors import ResultError


def test_provenance_fields():
    env = provenance.collect("cpu", {"name": "cpu"}, {"k": 1})
    hw = env["hardware"]
    for key in ("backend", "device_name", "device_count", "cpu", "torch_threads"):
        assert key in hw
    assert env["software"]["libraries"]["torch"] and env["software"]["python"]
    assert set(env["git"]) == {"commit", "branch", "dirty"} and env["git"]["commit"]  # tests run in the checkout
    assert set(env["container"]) == {"image", "runtime", "image_id", "base", "base_digest"}
    assert env["host"] and env["timestamp_utc"].endswith("+00:00") and env["config"] == {"k": 1}
    assert provenance.hardware_label(env).startswith("CPU: ")
    assert "torch" in provenance.software_label(env)
    # a CPU names no system by itself; the label ends with the system file's name and description
    cpu = provenance.hardware_label(env, system={"name": "cpu", "description": "host CPU (no accelerator)"})
    epyc2 = provenance.hardware_label(env, system={"name": "epyc2", "description": "2-core lab VM"})
    assert cpu.endswith("[cpu: host CPU (no accelerator)]") and epyc2.endswith("[epyc2: 2-core lab VM]")
    assert cpu.startswith("CPU: ") and cpu != epyc2


def test_settings_from_environment_variables_are_recorded_and_nothing_else(monkeypatch):
    """A variable that changes what a number measures (TF32 forced off, synchronous launches, Inductor's layout
    optimisation, the thread count) is in every result's environment; others (a token, HOME) are not."""
    for name, value in {
        "NVIDIA_TF32_OVERRIDE": "0",
        "CUDA_LAUNCH_BLOCKING": "1",
        "TORCHINDUCTOR_LAYOUT_OPTIMIZATION": "0",
        "OMP_NUM_THREADS": "2",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "NCCL_NVLS_ENABLE": "0",
        "PT_HPU_LAZY_MODE": "0",
        "HF_TOKEN": "hf_secret",
        "MY_TORCH": "not a prefix match",
        "TORCH_LOGS_LONG": "x" * 1000,
    }.items():
        monkeypatch.setenv(name, value)
    recorded = provenance.collect("cpu", {"name": "cpu"}, {})["software"]["variables"]
    assert recorded["NVIDIA_TF32_OVERRIDE"] == "0" and recorded["CUDA_LAUNCH_BLOCKING"] == "1"
    assert recorded["TORCHINDUCTOR_LAYOUT_OPTIMIZATION"] == "0" and recorded["OMP_NUM_THREADS"] == "2"
    assert {"PYTORCH_CUDA_ALLOC_CONF", "NCCL_NVLS_ENABLE", "PT_HPU_LAZY_MODE"} <= set(recorded)
    assert not {"HF_TOKEN", "MY_TORCH", "HOME", "PATH"} & set(recorded)
    long = recorded["TORCH_LOGS_LONG"]
    assert len(long) == provenance.VARIABLE_CHARS and long.endswith("...")
    assert list(recorded) == sorted(recorded)
    json.dumps(recorded)  # a result is JSON
    # a value that is not UTF-8 (os.environ keeps its bytes as surrogates) is recorded with U+FFFD, encodable anywhere
    odd = provenance.variables({"CUDA_ODD": b"a\xffb".decode("utf-8", "surrogateescape")})["CUDA_ODD"]
    assert odd == "a\ufffdb" and odd.encode("utf-8")


def test_labels_for_gpu_environment():
    env = {
        "hardware": {
            "backend": "cuda",
            "device_name": "NVIDIA H200",
            "device_count": 1,
            "device_memory_gib": 139.8,
            "cuda": "13.0",
            "cudnn": 91300,
            "driver": "580.159.04",
        },
        "software": {"libraries": {"torch": "2.11.0"}},
    }
    assert provenance.hardware_label(env) == "NVIDIA H200 (1x, 139.8 GiB)"
    # the devices the job used, not the devices visible on the node; without a count for a curve over devices
    env["hardware"]["device_count"] = 2
    assert provenance.hardware_label(env, devices=1) == "NVIDIA H200 (1x, 139.8 GiB)"
    assert provenance.hardware_label(env, count=False) == "NVIDIA H200 (139.8 GiB)"
    assert provenance.software_label(env) == "torch 2.11.0, CUDA 13.0, cuDNN 91300, driver 580.159.04"


def test_container_detection(monkeypatch, tmp_path):
    for name in ("ACCELBENCH_IMAGE", "ACCELBENCH_IMAGE_ID", "ACCELBENCH_BASE", "ACCELBENCH_BASE_DIGEST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(provenance, "CONTAINERENV", tmp_path / "none")
    monkeypatch.setenv("APPTAINER_CONTAINER", "/images/accelbench-cuda.sif")
    assert provenance.container_info() == {
        "image": "/images/accelbench-cuda.sif",
        "runtime": "apptainer",
        "image_id": None,
        "base": None,
        "base_digest": None,
    }


def test_container_names_image_id_and_base_digest(monkeypatch, tmp_path):
    """The recipes set ACCELBENCH_BASE (and BASE_DIGEST for an unpinned base); the run passes the image's ID, or
    podman's /run/.containerenv has it (privileged containers)."""
    monkeypatch.delenv("APPTAINER_CONTAINER", raising=False)
    monkeypatch.delenv("SINGULARITY_CONTAINER", raising=False)
    monkeypatch.delenv("ACCELBENCH_IMAGE_ID", raising=False)
    monkeypatch.setenv("ACCELBENCH_IMAGE", "accelbench-cuda:0.1.0")
    monkeypatch.setenv("ACCELBENCH_BASE", "pytorch/pytorch:2.6.0@sha256:77f1")
    monkeypatch.setenv("ACCELBENCH_BASE_DIGEST", "")
    envfile = tmp_path / ".containerenv"
    envfile.write_text('engine="podman-4.3.1"\nimage="localhost/accelbench-cuda:cpu"\nimageid="9a1b"\n')
    monkeypatch.setattr(provenance, "CONTAINERENV", envfile)
    info = provenance.container_info()
    assert info["image_id"] == "9a1b" and info["base_digest"] == "sha256:77f1"
    assert info["image"] == "accelbench-cuda:0.1.0"
    assert info["runtime"] in ("podman", "docker")  # docker when this test itself runs under docker
    envfile.write_text("")  # unprivileged podman: empty; the run command's ACCELBENCH_IMAGE_ID wins anyway
    monkeypatch.setenv("ACCELBENCH_IMAGE_ID", "sha256:c0ffee")
    monkeypatch.setenv("ACCELBENCH_BASE", "localhost/debian:bookworm")
    monkeypatch.setenv("ACCELBENCH_BASE_DIGEST", "sha256:beef")
    info = provenance.container_info()
    assert (info["image_id"], info["base"], info["base_digest"]) == (
        "sha256:c0ffee",
        "localhost/debian:bookworm",
        "sha256:beef",
    )


def _result(status="ok", reason=None):
    return results.make_result("x", status, {"a": 1}, {"e": 1}, {"m": float("nan")}, reason)


def test_write_read_roundtrip_and_no_silent_overwrite(tmp_path):
    path = tmp_path / "sys" / "exp" / "result.json"
    results.write_result(_result(), path)
    data = results.read_result(path)
    assert data["status"] == "ok" and data["measurements"]["m"] is None  # NaN stored as null
    with pytest.raises(ResultError, match="refusing to overwrite"):
        results.write_result(_result(), path)
    results.write_result(_result("oom", "needs 80 GiB"), path, overwrite=True)
    assert results.read_result(path)["status"] == "oom"
    assert not [p for p in os.listdir(path.parent) if p.startswith(".")]  # no temporary files left


def test_non_ok_status_needs_reason_and_valid_status():
    with pytest.raises(ValueError):
        _result("unsupported")
    with pytest.raises(ValueError):
        _result("crashed", "x")


def test_corrupt_result_errors_name_the_file(tmp_path):
    bad = tmp_path / "result.json"
    bad.write_text('{"status": "ok", ')
    with pytest.raises(ResultError, match=f"corrupt result file {bad}"):
        results.read_result(bad)
    bad.write_text(json.dumps({"status": "ok"}))
    with pytest.raises(ResultError, match="missing keys"):
        results.read_result(bad)
    with pytest.raises(ResultError, match="not found"):
        results.read_result(tmp_path / "nope.json")
