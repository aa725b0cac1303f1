"""End to end across nodes through a real Slurm: SR3 and the network smoke test on 2 nodes x 1 gloo rank.

slurm/local_cluster.sh with ACCELBENCH_SLURM_NODES=2 runs two slurmd daemons on this host (nodes n1, n2; Debian's
slurmd supports several per host), so `--nodes 2` allocations, `srun` across them and torchrun's c10d rendezvous are
all real. The system file is the embedded `cpu` one with `devices_per_node: 1`, so the embedded-default SR3 at
2 devices becomes 2 nodes x 1 rank (a copy of config/systems in the test folder; the repository's files are untouched).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dag import snakemake
from slurm_cluster import local_cluster

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "slurm/local_cluster.sh"


@pytest.fixture(scope="module")
def two_node_cluster(tmp_path_factory):
    """A running Slurm with two emulated nodes on localhost; stopped (our PIDs only) afterwards."""
    with local_cluster(
        tmp_path_factory.mktemp("slurm2_state"),
        {"ACCELBENCH_SLURM_NODES": "2"},
        "ACCELBENCH_SLURM_NODES=2 slurm/local_cluster.sh up",
    ) as state:
        yield state


def systems_dir(tmp_path: Path, devices_per_node: int, devices: int) -> Path:
    """config/systems copied, with the cpu system's ranks per node and per job set."""
    out = tmp_path / "systems"
    shutil.copytree(REPO / "config/systems", out)
    cpu = yaml.safe_load((out / "cpu.yaml").read_text())
    (out / "cpu.yaml").write_text(yaml.safe_dump({**cpu, "devices": devices, "devices_per_node": devices_per_node}))
    return out


def sr3_config(tiny_config: dict, systems: Path, devices: list[int]) -> dict:
    cfg = dict(tiny_config, experiments=["sr3_scaling"], system="cpu", systems_dir=str(systems))
    cfg["sr3_scaling"] = dict(cfg["sr3_scaling"], devices=devices)
    return cfg


def test_non_dividing_device_count_fails_clearly(tmp_path, tiny_config):
    """3 devices on nodes of 2 is neither one node nor whole nodes: the run stops before any job, naming the key."""
    cfg = sr3_config(tiny_config, systems_dir(tmp_path, devices_per_node=2, devices=8), [1, 3])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path, "--dry-run")
    assert proc.returncode != 0
    assert (
        "sr3_scaling.devices: 3 devices do not fill whole nodes of system 'cpu' (devices_per_node: 2); "
        "use at most 2 (one node) or a multiple of 2"
    ) in proc.stdout + proc.stderr
    ok = sr3_config(tiny_config, systems_dir(tmp_path / "ok", devices_per_node=2, devices=8), [1, 2, 4])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(ok))
    assert snakemake(tmp_path, "--dry-run").returncode == 0  # 4 = 2 nodes x 2 divides


def test_sr3_and_net_smoke_on_two_nodes_through_slurm(two_node_cluster, tmp_path, tiny_config):
    cfg = sr3_config(tiny_config, systems_dir(tmp_path, devices_per_node=1, devices=2), [1, 2])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    site = tmp_path / "site.yaml"
    site.write_text(
        yaml.safe_dump(
            {
                "partition": "debug",
                "account": None,
                "status_command": "squeue",
                "init_seconds_before_status_checks": 2,
                "deployment": "none",
                "max_jobs": 4,
                "node_limits": {"cpus": 1, "mem_mb": 2000},
                "multinode": {"exclusive": True},
            }
        )
    )
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "all",
        "results/cpu/net_smoke/devices_2/allreduce.json",
        "--cores",
        "all",
        "--profile",
        "slurm",
        "-d",
        str(tmp_path),
        "--configfile",
        str(tmp_path / "config.yaml"),
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env={**os.environ, "ACCELBENCH_SLURM_SITE": str(site)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=1200)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # lets Snakemake cancel its Slurm jobs
        out, _ = proc.communicate(timeout=120)
        pytest.fail(f"snakemake --profile slurm hung:\n{out[-4000:]}")
    assert proc.returncode == 0, out[-4000:]
    assert "has been submitted with SLURM jobid" in out

    res = tmp_path / "results/cpu/sr3_scaling/faithful"  # tiny.yaml: the faithful configuration
    one = json.loads((res / "devices_1/result.json").read_text())
    two = json.loads((res / "devices_2/result.json").read_text())
    assert one["status"] == "ok" and one["measurements"]["launch"]["nodes"] == 1
    m = two["measurements"]
    assert two["status"] == "ok", two.get("reason")
    launch = m["launch"]
    assert launch["nodes"] == 2 and launch["ranks_per_node"] == 1 and launch["world_size"] == 2
    assert launch["launcher"] == "srun + torchrun" and launch["rendezvous_backend"] == "c10d"
    assert launch["collective_backend"] == "gloo" and launch["slurm_job_id"] and launch["hosts"] == ["n1", "n2"]
    assert sorted(m["rank_nodes"]) == ["n1", "n2"]  # one rank on each Slurm node, not two on one
    assert m["replica_max_abs_diff"] == 0.0 and m["collective_backend"] == "gloo"

    agg = tmp_path / "results/study_b_sr3"
    eff = pd.read_csv(agg / "efficiency.csv")
    measured = eff[eff["series"].str.startswith("measured")].set_index("devices")
    assert measured.loc[2, "layout"] == "2 nodes x 1" and measured.loc[1, "layout"] == "1 node"
    assert measured.loc[2, "efficiency"] > 0 and measured.loc[1, "efficiency"] == pytest.approx(1.0)
    table = pd.read_csv(agg / "scaling.csv").set_index("devices")
    assert table.loc[2, "layout"] == "2 nodes x 1" and table.loc[2, "interconnect"] == "gloo"
    assert (agg / "fig_scaling.png").stat().st_size > 0

    smoke = json.loads((tmp_path / "results/cpu/net_smoke/devices_2/allreduce.json").read_text())
    sm = smoke["measurements"]
    assert smoke["status"] == "ok" and sm["world_size"] == 2 and sorted(sm["rank_nodes"]) == ["n1", "n2"]
    assert sm["launch"]["nodes"] == 2 and sm["launch"]["launcher"] == "srun + torchrun"
    sweep = pd.read_csv(tmp_path / "results/cpu/net_smoke/devices_2/allreduce.csv")
    assert list(sweep["bytes"]) == sorted(sweep["bytes"]) and len(sweep) >= 5 and (sweep["busbw_gbps"] > 0).all()
    assert (sweep["nodes"] == 2).all()
