#!/usr/bin/env python3
"""README command 1 from a fresh clone, timed (the budget: at most 10 minutes on 2 cores, install included).

Clones the committed HEAD of ``--repo`` into ``--workdir``, then runs README command 1 there as a new user would, in
two timed parts split at its ``snakemake`` (the install: venv, the pip steps; the run: ``snakemake --cores all``),
with ``--avx2`` held to what an AVX2-only CPU runs (``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``). Appends one
row to ``--csv``: the commit, the CPU (model, vCPUs, flags, torch's ``get_cpu_capability()`` under the same caps),
install/run/total wall seconds, the estimate the run printed before its first job and its calibration, and the sum
of the jobs' wall times per experiment (``.snakemake/accelbench/job_times.jsonl``). The machine should be otherwise
idle: the run's own results record the host load (``measurements.noise``).

Usage::

    python benchmarks/embedded_default.py --avx2 --csv docs/embedded_default_cpu.csv   # README command 1's rows
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from accelbench.core.estimate import LOG as JOB_TIMES  # the per-job times a run appends, relative to its folder

REPO = Path(__file__).resolve().parents[1]
AVX2_CAPS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
ESTIMATE = re.compile(
    r"accelbench: (\d+) jobs? to run, about (.+?) on this machine "
    r"\(this CPU is (?:([\d.]+)x (slower|faster)|about as fast)"
)
# rule -> the experiment a row names (every other rule: data, aggregations, validation and claims)
EXPERIMENT_OF = {
    "llm_quant_method": "quantization methods",
    "llm_quant_sensitivity": "sensitivity",
    "lora_finetune": "LoRA",
    "lora_finetune_series": "LoRA series",
    "unet3d_profile": "Study A",
    "unet3d_ncu": "Nsight Compute",
    "sr3_train": "SR3",
    "llm_export": "export",
}


def readme_command_1(readme: str) -> str:
    """The one-liner under ``# 1. install`` in the README's quick start. ValueError if the README has none."""
    block = readme.split("# 1. install", 1)
    if len(block) < 2:
        raise ValueError("README.md: no '# 1. install' quick-start command")
    for line in block[1].splitlines():
        if line.startswith("python3 -m venv"):
            return line.strip()
    raise ValueError("README.md: no 'python3 -m venv ...' line under '# 1. install'")


def split_install_run(command: str) -> tuple[str, str]:
    """``(install, run)``: command 1 split at its last ``&& snakemake``; the run activates the venv again."""
    install, sep, run = command.rpartition(" && snakemake ")
    if not sep:
        raise ValueError(f"command 1 has no '&& snakemake': {command}")
    return install, ". .venv/bin/activate && snakemake " + run


def parse_minutes(text: str) -> float:
    """``6 min 19 s`` / ``45 s`` / ``1 h 2 min`` (accelbench.core.estimate.fmt) -> seconds."""
    units = {"h": 3600, "min": 60, "s": 1}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+) (h|min|s)\b", text)))


def estimate_of(output: str) -> dict:
    """The first estimate line of a run's output: jobs, estimate_s, calibration (empty if none was printed)."""
    m = ESTIMATE.search(output)
    if not m:
        return {}
    ratio = float(m.group(3)) if m.group(3) else 1.0  # the calibration: this CPU's time over the reference's
    calibration = ratio if m.group(4) != "faster" else round(1 / ratio, 2)
    return {"jobs": int(m.group(1)), "estimate_s": parse_minutes(m.group(2)), "calibration": calibration}


def per_experiment(job_times: Path) -> dict[str, float]:
    """Sum of the measured job wall seconds per experiment, for the newest run in ``job_times`` (its
    ``run_started``); empty when the run wrote none."""
    if not job_times.exists():
        return {}
    records = [json.loads(line) for line in job_times.read_text().splitlines() if line.strip()]
    if not records:
        return {}
    newest = records[-1]["run_started"]
    sums: dict[str, float] = defaultdict(float)
    for r in records:
        if r["run_started"] == newest:
            sums[EXPERIMENT_OF.get(r["rule"], "data, aggregations, validation, claims")] += r["measured_s"] or 0.0
    return {k: round(v, 1) for k, v in sorted(sums.items(), key=lambda kv: -kv[1])}


def cpu_description(python: Path, env: dict) -> dict:
    """Model name, vCPUs, the bf16-relevant flags (/proc/cpuinfo) and torch's capability under ``env``."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    wanted = [f for f in flags if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16")]
    capability = ""  # an install that failed leaves no venv to ask
    if python.exists():
        capability = subprocess.run(
            [str(python), "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
            env=env,
            capture_output=True,
            text=True,
        ).stdout.strip()
    return {"cpu": model, "vcpus": os.cpu_count(), "flags": " ".join(wanted), "capability": capability}


def timed(command: str, cwd: Path, env: dict, log) -> tuple[int, float]:
    t0 = time.monotonic()
    rc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    return rc, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout to clone (its committed HEAD)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to clone (default: a new temporary folder)")
    ap.add_argument("--avx2", action="store_true", help="hold torch and oneDNN to AVX2 (an AVX2-only CPU's path)")
    ap.add_argument(
        "--csv",
        type=Path,
        default=Path("results/benchmarks/embedded_default.csv"),
        help="row appended here (default %(default)s)",
    )
    args = ap.parse_args(argv)

    work = args.workdir or Path(tempfile.mkdtemp(prefix="accelbench-cmd1-"))
    clone = work / "accelbench"
    subprocess.run(["git", "clone", "--quiet", str(args.repo), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True)
    install, run = split_install_run(readme_command_1((clone / "README.md").read_text()))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    if args.avx2:
        env.update(AVX2_CAPS)
    log_path = work / "command1.log"
    print(f"embedded_default: {clone} ({'AVX2-held' if args.avx2 else 'native'}), log {log_path}", file=sys.stderr)
    with log_path.open("w") as log:
        rc, install_s = timed(install, clone, env, log)
        run_s = 0.0
        if rc == 0:
            rc, run_s = timed(run, clone, env, log)
    row = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit.stdout.strip(),
        **cpu_description(clone / ".venv/bin/python", env),
        "avx2_held": args.avx2,
        "rc": rc,
        "install_s": round(install_s, 1),
        "run_s": round(run_s, 1),
        "total_s": round(install_s + run_s, 1),
        **{"jobs": None, "estimate_s": None, "calibration": None, **estimate_of(log_path.read_text())},
        "per_experiment_s": json.dumps(per_experiment(clone / JOB_TIMES)),
    }
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    new = not args.csv.exists()
    with args.csv.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)
    print(json.dumps(row), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
