"""Host load around a measurement and the `noisy` flag (accelbench.measure.hostload)."""

import json
import multiprocessing as mp
import os
import time

import pytest

from accelbench.backends.cuda import visible_gpus
from accelbench.measure import hostload

psutil = pytest.importorskip("psutil")


def _timing(median, p90):
    return {"median": median, "p90": p90, "p10": median * 0.9, "samples": [median, p90]}


def test_spread_above_threshold_is_noisy_and_named():
    m = {"train_step": _timing(100.0, 120.0), "sample_step": _timing(10.0, 30.0)}
    quiet = {"cpu_other_fraction": 0.0, "loadavg_1min_per_core": 0.1, "gpus": None}
    n = hostload.assess(m, quiet, {"spread_max": 1.5})
    assert n["noisy"] and n["spread_p90_over_median"] == pytest.approx(3.0) and n["spread_of"] == "sample_step"
    assert "sample_step" in n["why"][0]
    assert not hostload.assess(m, quiet, {"spread_max": 5})["noisy"]


def test_other_processes_on_cpu_or_gpu_make_it_noisy():
    m = {"step": _timing(100.0, 101.0)}
    busy = {"cpu_other_fraction": 0.6, "loadavg_1min_per_core": 3.0, "gpus": None}
    n = hostload.assess(m, busy)
    assert n["noisy"] and "60%" in n["why"][0] and n["thresholds"]["cpu_other_max"] == 0.10
    gpu = {
        "cpu_other_fraction": 0.0,
        "loadavg_1min_per_core": 0.0,
        "gpus": [{"index": 0, "other_processes": [4242], "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980}],
    }
    assert hostload.assess(m, gpu)["noisy"]
    assert not hostload.assess(m, gpu, {"gpu_other_processes_max": 1})["noisy"]


def _spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        pass


def test_cpu_of_the_jobs_own_children_is_not_counted_as_other():
    """A busy child of the job (a torchrun rank) counts as the job, not as other load."""
    start = hostload.snapshot()
    child = mp.get_context("spawn").Process(target=_spin, args=(1.0,))
    child.start()
    child.join()
    end = hostload.snapshot(start["root"])
    load = hostload.host_load(start, end)
    assert load["cpu_job_fraction"] * load["cpus"] * load["wall_s"] > 0.5  # the child's second of CPU is ours


def test_job_noise_is_recorded_from_the_start_snapshot(monkeypatch):
    monkeypatch.setenv(hostload.START_ENV, "")  # restored after the test: no snapshot leaks into later tests
    start = hostload.start_job()
    assert os.environ[hostload.START_ENV] and hostload.start_job() == start  # children reuse the root's snapshot
    monkeypatch.setenv(hostload.START_ENV, json.dumps({**start, "root": 2**30, "time": 0}))
    assert hostload.start_job()["time"] > 0  # a stale snapshot of another process tree is not reused
    n = hostload.job_noise({"step": _timing(1.0, 1.1)})
    assert set(n) >= {"noisy", "why", "host", "spread_p90_over_median", "thresholds"}
    assert 0.0 <= n["host"]["cpu_other_fraction"] <= 1.0 and len(n["host"]["loadavg_start"]) == 3


def test_variables_that_change_the_timings_are_cautions_beside_the_numbers(monkeypatch):
    """CUDA_LAUNCH_BLOCKING=1 (synchronous launches) and the driver's TF32 override are named in the noise record's
    cautions (not "noisy": the numbers are what the code gives under that setting); =0 or unset says nothing."""
    monkeypatch.setenv(hostload.START_ENV, "")
    for name in hostload.VARIABLE_CAUTIONS:
        monkeypatch.delenv(name, raising=False)
    assert hostload.job_noise({"step": _timing(1.0, 1.1)})["cautions"] == []
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    assert hostload.variable_cautions() == []
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    n = hostload.job_noise({"step": _timing(1.0, 1.1)})
    assert [c.split(":")[0] for c in n["cautions"]] == ["CUDA_LAUNCH_BLOCKING=1", "NVIDIA_TF32_OVERRIDE=0"]
    # (the host's load may make this record noisy where other tests run beside it; the variables never do)
    assert not any("CUDA_LAUNCH_BLOCKING" in w or "NVIDIA_TF32_OVERRIDE" in w for w in n["why"])


def test_every_written_ok_result_carries_the_noise_block(tmp_path, systems, monkeypatch):
    """harness.write_outcome (every experiment's result, multi-rank ones included) adds measurements.noise with the
    config's thresholds; a result that did not run gets none."""
    import json

    from accelbench.core import harness, registry
    from accelbench.core.outcome import Outcome

    monkeypatch.setenv(hostload.START_ENV, "")  # restored after the test: no snapshot leaks into later tests
    hostload.start_job()
    system = systems["cpu"]
    out = tmp_path / "results" / "cpu" / "unet3d_profile" / "ok" / "result.json"
    harness.write_outcome(
        harness.JobContext(registry.get("unet3d_profile"), {"noise": {"spread_max": 2.0}}, "s.json", None, system, out),
        Outcome("ok", {"step": _timing(10.0, 30.0)}),
    )
    noise = json.loads(out.read_text())["measurements"]["noise"]
    assert noise["noisy"] and noise["thresholds"]["spread_max"] == 2.0 and noise["host"]["cpus"] >= 1
    out2 = tmp_path / "results" / "cpu" / "unet3d_profile" / "unsupported" / "result.json"
    harness.write_outcome(
        harness.JobContext(registry.get("unet3d_profile"), {}, "s.json", None, system, out2), Outcome.unsupported("no")
    )
    assert "noise" not in json.loads(out2.read_text())["measurements"]


def test_only_the_jobs_gpus_are_checked_for_other_processes():
    """Two jobs pinned to different GPUs of one host (CUDA_VISIBLE_DEVICES=0 / =1) are not each other's "other
    processes"; CUDA's index, UUID and UUID-prefix forms and its stop-at-the-first-invalid-entry rule."""
    uuids = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-cccc-3333"]
    assert visible_gpus(3, uuids, {}) == [0, 1, 2]
    assert visible_gpus(3, uuids, {"CUDA_VISIBLE_DEVICES": "1"}) == [1]
    assert visible_gpus(3, uuids, {"CUDA_VISIBLE_DEVICES": "2,0"}) == [2, 0]
    assert visible_gpus(3, uuids, {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}) == [1]
    assert visible_gpus(3, uuids, {"CUDA_VISIBLE_DEVICES": "0,7,1"}) == [0]
    assert visible_gpus(3, uuids, {"CUDA_VISIBLE_DEVICES": "GPU-"}) == []  # ambiguous prefix: invalid
    assert visible_gpus(3, uuids, {"CUDA_VISIBLE_DEVICES": ""}) == []
