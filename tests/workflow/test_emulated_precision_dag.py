"""End to end: the real Snakemake DAG on a tiny config, on a CPU that reports no native bf16. torch and
oneDNN are held to AVX2 (``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``: what an AVX2-only CPU runs), and
the probe's ratio is handed in (``ACCELBENCH_PRECISION_PROBE``) so that the reason is known exactly."""

import json
import os
import subprocess
import sys

import pandas as pd
import yaml

import result_keys
from dag import SNAKEMAKE

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
REASON = (
    "bf16 is emulated on this CPU (AVX2, {why}): a probe measured it 6.7x the fp32 time; "
    "set `run_emulated_precisions: [bf16]` to run it anyway"
)


def avx2_env() -> dict:
    """The environment of an AVX2-only CPU, with the probe's answer for this torch and these caps (its key)."""
    env = {**os.environ, **AVX2}
    code = "from accelbench.backends import cpu; print(cpu.CpuBackend._probe_key(cpu.precision_support()))"
    key = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    return {**env, "ACCELBENCH_PRECISION_PROBE": json.dumps({"key": key, "bf16": 6.7})}


def run(workdir, env, *args):
    return subprocess.run(
        [*SNAKEMAKE, *args, "-d", str(workdir), "--configfile", str(workdir / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
        check=False,
    )


def test_bf16_recorded_unsupported_on_an_avx2_cpu_and_tables_built(tmp_path, tiny_config):
    cfg = dict(tiny_config, experiments=["unet3d_profile", "unet3d_ncu", "sr3_scaling"])
    cfg["unet3d_profile"] = dict(cfg["unet3d_profile"], configurations=["baseline", "bf16"])
    cfg["unet3d_ncu"] = dict(cfg.get("unet3d_ncu") or {}, configurations=["baseline"])
    cfg["sr3_scaling"] = dict(cfg["sr3_scaling"], configurations=["faithful", "bf16"], devices=[1])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = avx2_env()
    proc = run(tmp_path, env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    cpu = tmp_path / "results" / "cpu"
    study_a = json.loads((cpu / "unet3d_profile/whole_head/bf16/result.json").read_text())
    sr3 = json.loads((cpu / "sr3_scaling/bf16/devices_1/result.json").read_text())
    support = study_a["environment"]["hardware"]["precision_support"]
    why = support["emulated"]["bf16"].removeprefix("AVX2, ")  # "no AVX512-BF16/AMX", or capped where the CPU has it
    assert support["native"] == ["fp32"] and support["isa_caps"] == AVX2 and support["slowdown"] == {"bf16": 6.7}
    for r in (study_a, sr3):
        assert r["status"] == "unsupported" and r["reason"] == REASON.format(why=why)
    for r in ("unet3d_profile/whole_head/baseline", "sr3_scaling/faithful/devices_1"):
        assert json.loads((cpu / r / "result.json").read_text())["status"] == "ok"  # fp32 runs as before

    # the tables show `unsupported` with the reason (a footnote in Markdown), the claims table is built
    table = pd.read_csv(tmp_path / "results/study_a/table.csv").set_index("configuration")
    assert table.loc["bf16", "train_step_ms"] == "unsupported" and table.loc["bf16", "reason"] == study_a["reason"]
    assert study_a["reason"] in (tmp_path / "results/study_a/table.md").read_text()
    scaling = pd.read_csv(next((tmp_path / "results/study_b_sr3").glob("*scaling*.csv")))
    bf16 = scaling[scaling["configuration"] == "bf16"] if "configuration" in scaling else scaling
    assert (bf16["reason"] == sr3["reason"]).any()
    assert (tmp_path / "results/claims/claims.csv").stat().st_size > 0
    assert not result_keys.check(tmp_path / "results"), result_keys.check(tmp_path / "results")

    # asking for bf16 explicitly reruns exactly the two bf16 jobs (the key enters only their specs)
    again = run(tmp_path, env, "-n", "--config", "run_emulated_precisions=[bf16]")
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    redone = {ln.split("output:", 1)[1].split()[0] for ln in out.splitlines() if "output:" in ln and "/cpu/" in ln}
    assert redone == {
        "results/cpu/unet3d_profile/whole_head/bf16/result.json",
        "results/cpu/sr3_scaling/bf16/devices_1/result.json",
    }, redone
