"""Multi-node planning, Slurm request, launch command and NCCL transport parsing (accelbench.cluster.multinode)."""

import dataclasses

import pytest

from accelbench.cluster import multinode as mn
from accelbench.errors import ConfigError
from accelbench.experiments.net_smoke import job as net_smoke

# NCCL 2.21 INFO lines of a 2-node x 2-GPU job: NVLink (P2P) inside a node, InfiniBand between nodes
NCCL_LOG = """\
gpu1:123:123 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.1<0>
gpu1:123:123 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu1:123:140 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.1<0>
gpu1:123:140 [0] NCCL INFO Using network IB
gpu1:123:140 [0] NCCL INFO Channel 00/02 :    0   1   2   3
gpu1:123:140 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu1:123:140 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu1:123:140 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu1:124:141 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/1/GDRDMA
gpu1:123:140 [0] NCCL INFO Connected all rings
"""


def with_layout(system, **kw):
    return dataclasses.replace(system, **kw)


def test_node_plan_splits_whole_nodes_and_refuses_the_rest(systems):
    gaudi1 = systems["gaudi1"]
    assert gaudi1.devices_per_node == 8 and gaudi1.devices == 64  # Study B: 8 nodes x 8 cards
    assert mn.node_plan(gaudi1, 4) == mn.NodePlan(4, 1, 4)
    assert mn.node_plan(gaudi1, 8) == mn.NodePlan(8, 1, 8)
    assert mn.node_plan(gaudi1, 64) == mn.NodePlan(64, 8, 8)
    with pytest.raises(
        ConfigError,
        match=r"sr3_scaling.devices: 12 devices do not fill whole nodes of system "
        r"'gaudi1' \(devices_per_node: 8\); use at most 8 \(one node\) or a multiple "
        r"of 8 \(e.g. 8 or 16\)",
    ):
        mn.node_plan(gaudi1, 12, "sr3_scaling.devices")
    with pytest.raises(ConfigError, match="at least 1"):
        mn.node_plan(gaudi1, 0)
    # cpu: `cores` keeps every count on one node (the old behaviour); an explicit per-node count splits
    assert mn.node_plan(systems["cpu"], 64) == mn.NodePlan(64, 1, 64)
    assert mn.node_plan(with_layout(systems["cpu"], devices_per_node=1, devices=2), 2) == mn.NodePlan(2, 2, 1)
    # a system file without devices_per_node: one node of `devices`
    assert mn.node_plan(with_layout(systems["h100"], devices_per_node=None), 8) == mn.NodePlan(8, 2, 4)
    assert mn.job_limit_reason(systems["h100"], mn.NodePlan(8, 2, 4)).startswith("8 devices (2 nodes x 4) requested")
    assert mn.job_limit_reason(gaudi1, mn.NodePlan(64, 8, 8)) is None


def test_every_system_file_states_devices_per_node(systems):
    for name, system in systems.items():
        assert system.devices_per_node is not None, name
        per = mn.devices_per_node(system)
        assert per is None if name == "cpu" else system.devices % per == 0, name


def test_slurm_request_one_node_and_several(systems):
    h200 = with_layout(systems["h200"], devices=64)
    assert mn.slurm_resources(h200, 4, {}) == {"gpu": 4}  # one node: as before (--gpus)
    assert mn.slurm_resources(systems["gaudi1"], 8, {}) == {"gpu": 0}
    many = mn.slurm_resources(h200, 16, {})
    assert many == {
        "nodes": 2,
        "tasks": 2,
        "tasks_per_gpu": 0,
        "mpi": "srun",
        "gpu": 0,
        "slurm_extra": "--ntasks-per-node=1 --exclusive --gpus-per-node=8",
    }
    site = {"multinode": {"gres": "gpu:h200", "exclusive": False}}
    assert mn.slurm_resources(h200, 64, site) == {
        "nodes": 8,
        "tasks": 8,
        "tasks_per_gpu": 0,
        "mpi": "srun",
        "gpu": 0,
        "gres": "gpu:h200:8",
        "slurm_extra": "--ntasks-per-node=1",
    }
    gaudi = mn.slurm_resources(systems["gaudi1"], 64, {"multinode": {"gres": "gpu"}})
    assert gaudi["gres"] == "gpu:8" and gaudi["nodes"] == 8
    with pytest.raises(ConfigError, match="do not fill whole nodes"):
        mn.slurm_resources(h200, 12, {})


def test_launch_command_standalone_and_srun(monkeypatch):
    cmd, rdzv = mn.launch_command(mn.NodePlan(2, 1, 2), ["rank", "--spec", "s.json"])
    assert "--standalone" in cmd and "--nproc_per_node=2" in cmd and "srun" not in cmd
    assert cmd[-4:] == ["accelbench", "rank", "--spec", "s.json"] and rdzv["backend"] == "c10d"

    monkeypatch.setattr(mn, "node_address", lambda node: {"gpu17": "10.1.0.17"}[node])
    monkeypatch.setattr(mn, "free_port", lambda: 29555)
    alloc = {"job_id": "4242", "hosts": ["gpu17", "gpu18"], "cpus_per_task": 64}
    cmd, rdzv = mn.launch_command(mn.NodePlan(16, 2, 8), ["rank"], alloc)
    assert cmd[:7] == [
        "srun",
        "--jobid=4242",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--cpus-per-task=64",
    ]
    assert {
        "--nnodes=2",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.1.0.17:29555",
        "--max-restarts=0",
    } <= set(cmd) and "--standalone" not in cmd
    assert any(a.startswith("--rdzv-id=accelbench-4242-") for a in cmd)
    assert rdzv == {
        "backend": "c10d",
        "endpoint": "10.1.0.17:29555",
        "hosts": ["gpu17", "gpu18"],
        "slurm_job_id": "4242",
    }

    assert "outside a Slurm allocation" in mn.allocation_reason(mn.NodePlan(16, 2, 8), None)
    assert "holds 1 node(s)" in mn.allocation_reason(mn.NodePlan(16, 2, 8), {"job_id": "1", "hosts": ["a"]})
    with pytest.raises(ConfigError, match="outside a Slurm allocation"):
        mn.launch_command(mn.NodePlan(16, 2, 8), ["rank"], None)


def test_allocation_reads_slurm(monkeypatch):
    assert mn.allocation({}) is None  # outside Slurm
    calls = []

    def scontrol(*args):
        calls.append(args)
        if args[:2] == ("show", "job"):
            return "JobId=7 NumNodes=2 NodeList=n[1-2] CPUs/Task=3 TRES=cpu=6"
        return "n1\nn2\n"

    monkeypatch.setattr(mn.shutil, "which", lambda name: "/usr/bin/scontrol")
    monkeypatch.setattr(mn, "_scontrol", scontrol)
    # the Slurm executor's job step keeps only SLURM_JOB_ID: the node list comes from scontrol
    assert mn.allocation({"SLURM_JOB_ID": "7"}) == {"job_id": "7", "hosts": ["n1", "n2"], "cpus_per_task": 3}
    assert ("show", "hostnames", "n[1-2]") in calls


def test_nccl_transports_are_parsed():
    t = mn.parse_nccl_transports(NCCL_LOG)
    assert t["version"] == "2.21.5+cuda12.4" and t["network"] == ["IB"]
    assert t["via"] == {"NET/IB/0/GDRDMA": 1, "P2P/CUMEM/read": 2, "NET/IB/1/GDRDMA": 1}
    assert t["inter_node"] == ["NET/IB"] and t["interfaces"]["IB"][0].startswith("[0]mlx5_0:1/IB")
    one_node = mn.parse_nccl_transports("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n")
    assert one_node["inter_node"] == [] and one_node["via"] == {"SHM/direct/direct": 1}
    sockets = mn.parse_nccl_transports(
        "x NCCL INFO Using network Socket\nx NCCL INFO Channel 00/0 : 1[0] -> 2[0] [send] via NET/Socket/0\n"
    )
    assert sockets["network"] == ["Socket"] and sockets["inter_node"] == ["NET/Socket"]
    assert mn.parse_nccl_transports("gloo only, no collective library log") is None


def test_launch_record_and_env():
    rec = mn.launch_record(
        mn.NodePlan(4, 2, 2),
        "cuda",
        {"backend": "c10d", "endpoint": "h:1", "hosts": ["a", "b"], "slurm_job_id": "9"},
        NCCL_LOG,
    )
    assert rec["nodes"] == 2 and rec["ranks_per_node"] == 2 and rec["launcher"] == "srun + torchrun"
    assert rec["collective_backend"] == "nccl" and rec["nccl"]["inter_node"] == ["NET/IB"]
    assert mn.launch_record(mn.NodePlan(2, 1, 2), "cpu", None)["launcher"] == "not launched"
    assert mn.launch_record(mn.NodePlan(2, 1, 2), "hpu", {"backend": "c10d"})["collective_backend"] == "hccl"
    assert mn.launch_env("cuda", {})["NCCL_DEBUG"] == "INFO"
    assert mn.launch_env("cuda", {"NCCL_DEBUG": "WARN"})["NCCL_DEBUG"] == "WARN"  # the user's setting wins
    assert "NCCL_DEBUG" not in mn.launch_env("cpu", {})


def test_run_tee_returns_output_and_times_out():
    import subprocess
    import sys

    rc, out = mn.run_tee([sys.executable, "-c", "import sys; print('a'); print('b', file=sys.stderr); sys.exit(3)"])
    assert rc == 3 and "a\n" in out and "b\n" in out
    with pytest.raises(subprocess.TimeoutExpired):
        mn.run_tee([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)


def test_bus_bandwidth_follows_nccl_tests():
    assert net_smoke.message_sizes(2**20) == [4096, 16384, 65536, 262144, 1048576]
    bw = net_smoke.bandwidths(10**9, 0.5, 8)  # 1 GB in 0.5 s over 8 ranks
    assert bw["algbw_gbps"] == pytest.approx(2.0) and bw["busbw_gbps"] == pytest.approx(2.0 * 2 * 7 / 8)
    assert net_smoke.bandwidths(10**9, 1.0, 2)["busbw_gbps"] == pytest.approx(1.0)


def test_net_smoke_settings_and_merge(systems):
    s = net_smoke.Settings.from_spec({"system": {}, "devices": 2}, systems["cpu"])
    assert (s.devices, s.max_bytes, s.warmup, s.iters) == (2, 16 * 2**20, 2, 10) and s.sizes[0] == 4096
    assert net_smoke.Settings.from_spec({"devices": 8}, systems["h200"]).max_bytes == 2**30
    # per call, the slowest rank; per size, the median and minimum of those maxima
    tables = [
        {
            "rank": r,
            "world_size": 2,
            "collective_backend": "gloo",
            "node": f"n{r}",
            "sizes": [{"bytes": 4096, "times_us": times}],
        }
        for r, times in ((0, [10.0, 40.0, 30.0]), (1, [20.0, 10.0, 20.0]))
    ]
    m = net_smoke.merge(tables, warmup=2, iters=3)
    [row] = m["sizes"]
    assert row["time_us"] == 30.0 and row["time_us_min"] == 20.0  # maxima 20, 40, 30
    assert row["busbw_gbps"] == pytest.approx(net_smoke.bandwidths(4096, 30e-6, 2)["busbw_gbps"])
    assert m["rank_nodes"] == ["n0", "n1"] and m["world_size"] == 2 and m["collective_backend"] == "gloo"
    assert set(m) == {"world_size", "collective_backend", "rank_nodes", "warmup", "iters", "method", "sizes"}


def test_net_smoke_refuses_one_rank(tmp_path, systems, monkeypatch):
    import json

    from accelbench import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ACCELBENCH_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "s.json").write_text(json.dumps({"system": systems["cpu"].to_dict(), "devices": 1}))
    out = tmp_path / "r/cpu/net_smoke/devices_1/allreduce.json"
    assert cli.main(["net-smoke", "--spec", "s.json", "--out", str(out)]) == 2 and not out.exists()


def test_lora_across_nodes_is_planned_and_needs_slurm(systems):
    from accelbench.experiments.lora.settings import LoraSettings, plan_run
    from lora_helpers import run_job

    two_nodes = with_layout(systems["cpu"], devices=4, devices_per_node=1)
    s = LoraSettings()
    assert plan_run("ddp", 2, "flash", two_nodes, s).status == "ok"  # 2 nodes x 1 rank
    assert "allows 8 per job" in plan_run("ddp", 16, "flash", systems["gaudi2"], s, available=8).reason
    with pytest.raises(ConfigError, match="lora_finetune.runs devices: 3 devices do not fill whole nodes"):
        plan_run("ddp", 3, "flash", with_layout(two_nodes, devices_per_node=2), s)
    # outside Slurm the launcher records `unsupported` with the reason, before loading any model
    spec = {"settings": s.to_dict(), "strategy": "ddp", "devices": 2, "attention": "flash", "model": {}}
    out = run_job(spec, two_nodes)
    assert out.status == "unsupported" and "outside a Slurm allocation" in out.reason
    assert out.measurements["launch"]["nodes"] == 2


def test_scaling_outputs_label_multi_node_points(tmp_path):
    import pandas as pd

    from accelbench.experiments.sr3 import tables as agg

    nccl = mn.launch_record(mn.NodePlan(16, 2, 8), "cuda", {"backend": "c10d"}, NCCL_LOG)
    assert agg.layout_columns(nccl, 16) == {
        "nodes": 2,
        "ranks_per_node": 8,
        "layout": "2 nodes x 8",
        "interconnect": "NET/IB",
    }
    assert agg.layout_columns(None, 4)["layout"] == "1 node"  # results from before multi-node launching
    ref, source = agg.read_reference("resources/reference/study_b_sr3_scaling.csv")
    rows = [
        {
            "system": "h100",
            "hardware": "H100",
            "origin": "measured here",
            "scale": "paper",
            "precision": "fp32",
            "configuration": "faithful",
            "series": "faithful",
            "devices": d,
            "status": "ok",
            "iteration_ms": 100.0,
            "speedup_vs_1": d / (1 if d <= 8 else 1.2),
            "study_b_40k_minutes_projection": 130 / d * (1 if d <= 8 else 1.2),
            "efficiency_vs_1": 1 / (1 if d <= 8 else 1.2),
            **agg.layout_columns({"nodes": max(1, d // 8), "ranks_per_node": min(d, 8)}, d),
        }
        for d in (1, 8, 16)
    ]
    df = pd.DataFrame(rows)
    eff = agg.efficiency_table(df, ref).set_index(["series", "devices"])
    assert (
        eff.loc[("measured here: H100 (paper), Study B-faithful (authors' code): faithful", 16), "layout"]
        == "2 nodes x 8"
    )
    assert eff.loc[("published Gaudi1", 64), "layout"] == "8 nodes x 8"
    assert eff.loc[("published Gaudi1", 8), "layout"] == "1 node"
    agg.fig_scaling(df, ref, source, tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 0


@pytest.mark.parametrize(
    "site, backend, want",
    [
        ({}, "cuda", ["--gpus-per-node=8"]),
        ({"multinode": {"gres": "gpu:h200"}}, "cuda", ["--gres=gpu:h200:8"]),
        ({"multinode": {"gres": "gpu"}}, "hpu", ["--gres=gpu:8"]),
    ],
)
def test_sbatch_call_of_a_multi_node_job(systems, site, backend, want):
    """The plugin's own sbatch string for the resources: nodes, one task per node, exclusive, accelerators per node."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    class Resources(dict):
        __getattr__ = dict.__getitem__

    system = with_layout(systems["h200" if backend == "cuda" else "gaudi1"], devices=64)
    res = Resources(
        {
            **{k: v for k, v in mn.slurm_resources(system, 16, site).items() if v is not None},
            "mem_mb": 1000,
            "runtime": 60,
        }
    )
    job = SimpleNamespace(resources=res, threads=16)
    params = {
        "run_uuid": "u",
        "slurm_logfile": "l",
        "comment_str": "c",
        "account": "",
        "partition": "",
        "workdir": "/w",
    }
    call = get_submit_command(job, params) + set_gres_string(job)
    for flag in ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--exclusive", "--cpus-per-task=16", *want]:
        assert flag in call.split(), (flag, call)
    assert "--ntasks-per-gpu" not in call and "--gpus=" not in call


def test_scaling_figure_keeps_a_long_legend_on_its_canvas(tmp_path):
    """Eighteen measured series whose labels name their reference run and hardware (as the committed H200 runs'
    do): the legend's labels are wrapped and the figure grows under the plots, so the figure checker finds nothing
    (with a fixed 6-inch figure and two unwrapped columns, 18 such series ran off the canvas and failed the job)."""
    import pandas as pd

    from accelbench.experiments.sr3 import tables as agg

    ref, source = agg.read_reference("resources/reference/study_b_sr3_scaling.csv")
    rows = [
        {
            "system": "h200",
            "hardware": "NVIDIA H200 (139.8 GiB)",
            "origin": f"reference run (H200 1-GPU, NDHWC and channel sums {k}, 2026-12-02)",
            "scale": "paper",
            "precision": "bf16",
            "configuration": f"bf16_compile_layout_opt_channel_sums_cudagraphs_{k}",
            "series": "ours",
            "devices": d,
            "status": "ok",
            "iteration_ms": 60.0 + k,
            "speedup_vs_1": d * 0.9 if d > 1 else 1.0,
            "study_b_40k_minutes_projection": (40 + k) / d,
            "efficiency_vs_1": 0.9 if d > 1 else 1.0,
            **agg.layout_columns({"nodes": 1, "ranks_per_node": d}, d),
        }
        for k in range(18)
        for d in (1, 2)
    ]
    assert agg.fig_scaling(pd.DataFrame(rows), ref, source, tmp_path / "fig.png") == []
