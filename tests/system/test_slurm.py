"""End to end through a real Slurm: `snakemake --cores all --profile slurm` on a single-node cluster on localhost.

slurm/local_cluster.sh brings up munge + MariaDB + slurmdbd + slurmctld + slurmd with real accounting
(ACCELBENCH_SLURM_ACCOUNTING=1: `sacct` answers, the user has the default account `accelbench`, associations are
enforced) and 4 count-only `gpu` GRES (ACCELBENCH_SLURM_GPUS=4, no devices behind them), and stops exactly those
daemons afterwards. Packages are apt-installed only with ACCELBENCH_CI_APT=1 (.ci/run sets it); elsewhere a
machine without them skips with the reason. Software deployment stays plain here (no apptainer in CI); the profile
itself, per-rule resources and the site file are the real ones. Covered: `sacct` status (what real clusters use) and
`squeue` status, `account: null` (submitted without -A) and a named account (validated by the plugin with sacctmgr),
a refused submission, and a CUDA system's DAG submitted from this GPU-less machine.
"""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurm_cluster import local_cluster

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "slurm/local_cluster.sh"


CLUSTER_ENV = {"ACCELBENCH_SLURM_ACCOUNTING": "1", "ACCELBENCH_SLURM_GPUS": "4"}


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A running single-node Slurm (localhost) with accounting; stopped (our PIDs only) after the module's tests."""
    with local_cluster(tmp_path_factory.mktemp("slurm_state"), CLUSTER_ENV) as state:
        yield state


def write_inputs(workdir: Path, config: dict, **site) -> Path:
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    site_file = workdir / "site.yaml"
    site_file.write_text(
        yaml.safe_dump(
            {
                "partition": "debug",
                "account": None,
                "status_command": "sacct",
                "init_seconds_before_status_checks": 2,
                "deployment": "none",
                "max_jobs": 4,
                "node_limits": {"cpus": 1, "mem_mb": 2000},
                **site,
            }
        )
    )
    return site_file


def snakemake_slurm(workdir: Path, site_file: Path, *targets: str, timeout: float = 900):
    """Run `snakemake --cores all --profile slurm` from the repository root; a hung run is stopped with SIGINT."""
    env = {**os.environ, "ACCELBENCH_SLURM_SITE": str(site_file)}
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        *targets,
        "--cores",
        "all",
        "--profile",
        "slurm",
        "-d",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # SIGINT lets Snakemake cancel its Slurm jobs; SIGTERM would leave them
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"snakemake --profile slurm hung for {timeout} s:\n{out[-4000:]}")
    return proc.returncode, out


def submitted_jobs(out: str) -> dict[str, list[str]]:
    """{rule: [Slurm job ids]} of every job the run submitted (from the executor's log lines)."""
    jobs: dict[str, list[str]] = {}
    for jobid, rule in re.findall(r"has been submitted with SLURM jobid (\d+) \(log: \S+/slurm_logs/rule_(\w+?)/", out):
        jobs.setdefault(rule, []).append(jobid)
    return jobs


def sacct(jobids: list[str]) -> dict[str, dict]:
    """{job id: {"account", "state"}} as Slurm's accounting database has them."""
    proc = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", ",".join(jobids), "-o", "JobID,Account,State"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = [ln.split("|") for ln in proc.stdout.splitlines() if ln.strip()]
    return {r[0]: {"account": r[1], "state": r[2]} for r in rows}


@pytest.fixture
def slurm_config(tiny_config) -> dict:
    """The tiny Study A config, two configurations (one ok, one unsupported on CPU) to keep the run short."""
    tiny_config["experiments"] = ["unet3d_profile"]
    tiny_config["unet3d_profile"]["configurations"] = ["baseline", "tf32"]
    return tiny_config


def test_default_dag_through_slurm(slurm_cluster, tmp_path, slurm_config):
    site = write_inputs(tmp_path, slurm_config)
    rc, out = snakemake_slurm(tmp_path, site, "all", "results/cpu/gpu_smoke/devices.json")
    assert rc == 0, out[-4000:]
    assert "Using profiles slurm" in out and "has been submitted with SLURM jobid" in out

    res = tmp_path / "results/cpu/unet3d_profile/whole_head"
    statuses = {c: json.loads((res / c / "result.json").read_text())["status"] for c in ("baseline", "tf32")}
    assert statuses == {"baseline": "ok", "tf32": "unsupported"}
    assert (res / "baseline/kernels.csv").exists() and (res / "baseline/result.json").stat().st_mode & 0o222 == 0
    for name in ("table.csv", "claims_vs_measured.csv", "fig_speedup.png"):
        assert (tmp_path / "results/study_a" / name).stat().st_size > 0, name
    # every job ran as a Slurm job: the smoke job saw its Slurm id, and every rule was submitted with sbatch
    smoke = json.loads((tmp_path / "results/cpu/gpu_smoke/devices.json").read_text())
    assert smoke["env"]["SLURM_JOB_ID"] and smoke["env"]["SLURMD_NODENAME"] == "localhost"
    assert smoke["expected"] == 0 and smoke["matches"] is True and smoke["env"]["SLURM_CPUS_PER_TASK"] == "1"
    jobs = submitted_jobs(out)
    assert set(jobs) == {
        "mri_prepare",
        "unet3d_profile",
        "validate_results",
        "study_a_aggregate",
        "claims",
        "energy_aggregate",
        "gpu_smoke",
    }, out[-3000:]
    # `account: null`: submitted without -A (no guess from sacct, no sacctmgr validation); Slurm's accounting then
    # charged the user's default account, and every job's end was read through `sacct` (status_command: sacct)
    assert "trying to guess" not in out and "Guessed SLURM account" not in out
    accounting = sacct([j for ids in jobs.values() for j in ids])
    assert {v["account"] for v in accounting.values()} == {"accelbench"}, accounting
    assert {v["state"] for v in accounting.values()} == {"COMPLETED"}, accounting


def test_named_account_is_validated_and_charged(slurm_cluster, tmp_path, slurm_config):
    site = write_inputs(tmp_path, slurm_config, account="accelbench")
    rc, out = snakemake_slurm(tmp_path, site, "results/cpu/gpu_smoke/devices.json", timeout=600)
    assert rc == 0, out[-4000:]
    jobs = submitted_jobs(out)
    assert list(jobs) == ["gpu_smoke"]
    assert sacct(jobs["gpu_smoke"])[jobs["gpu_smoke"][0]] == {"account": "accelbench", "state": "COMPLETED"}

    other = tmp_path / "other"
    other.mkdir()
    site = write_inputs(other, slurm_config, account="nosuch")
    rc, out = snakemake_slurm(other, site, "results/cpu/gpu_smoke/devices.json", timeout=300)
    assert rc != 0 and "nosuch" in out and "appears to be invalid" in out, out[-3000:]
    assert not submitted_jobs(out) and not (other / "results").exists()


def test_cuda_system_submitted_from_gpu_less_node(slurm_cluster, tmp_path, slurm_config):
    """A login node without a GPU plans and submits an H100 DAG; on the (GPU-less) node each job reports its error."""
    slurm_config["system"] = "h100"
    slurm_config["unet3d_profile"]["configurations"] = ["baseline"]
    site = write_inputs(tmp_path, slurm_config, status_command="squeue", node_limits={"cpus": 1, "mem_mb": 3000})
    rc, out = snakemake_slurm(tmp_path, site, "all", "results/h100/gpu_smoke/devices.json")
    assert rc != 0, out[-4000:]
    assert "SystemMismatchError" not in out.split("has been submitted")[0], "planning refused on the login node"
    jobs = submitted_jobs(out)
    assert {"mri_prepare", "unet3d_profile", "gpu_smoke"} <= set(jobs), out[-4000:]
    # the measurement failed on the node, reported per job with its rule and the node's error
    assert (
        "Job of rule unet3d_profile failed: accelbench unet3d-profile: error: system 'h100' needs backend "
        "'cuda' with 1 device(s), but this machine has no accelerator"
    ) in out, out[-4000:]
    assert "study_a_aggregate" not in jobs  # its input failed: never submitted
    assert not list(tmp_path.glob("results/h100/unet3d_profile/**/result.json"))  # a failed job leaves no result
    # the smoke job got the 4 GPUs it asked for from Slurm, and says that it sees none
    smoke = json.loads((tmp_path / "results/h100/gpu_smoke/devices.json").read_text())
    assert smoke["expected"] == 4 and smoke["seen"] == 0 and smoke["matches"] is False
    assert smoke["env"]["SLURM_JOB_ID"] in jobs["gpu_smoke"]


def test_refused_submission_names_rule_and_fix(slurm_cluster, tmp_path, slurm_config):
    site = write_inputs(tmp_path, slurm_config, partition="nosuch")
    rc, out = snakemake_slurm(tmp_path, site, timeout=300)
    assert rc != 0
    assert "Slurm refused the job of rule mri_prepare: invalid partition specified: nosuch" in out
    assert "Fix: edit slurm/site.yaml" in out
    assert not (tmp_path / "results").exists() and not list(tmp_path.glob("resources/mri/*/*.nii.gz"))
