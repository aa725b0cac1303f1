"""Check the Nsight Compute coverage pass on one GPU without Snakemake: Study A whole_head at the system's scale
(128^3 on a GPU system), one configuration: unet3d-profile (3 timed steps) then unet3d-ncu (coverage pass over every
kernel + a small detail pass), printing the share of the step's device time covered.

    # optional environment: LC (detail pass launches, default 20), TO (timeout in s, default 170)
    PYTHONPATH=workflow OUT=/tmp/ncu_check python3 benchmarks/ncu_coverage_check.py tf32

First run (2026-11-30, H200, ncu at /usr/local/cuda/bin/ncu, a thread-local push/pop NVTX range): the coverage pass
saw 574 of the step's 1551 kernels (40% of its device time), because autograd launches the backward kernels from its
own thread; unet3d-step now opens a process-wide start/end range instead. Both passes took 67 s at 128^3.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from accelbench.core.config import deep_merge, validate_config
from accelbench.core.systems import load_systems, probe_devices, resolve_system
from accelbench.data import mri
from accelbench.experiments.unet3d.configs import resolve_settings

out = Path(os.environ.get("OUT", "ncu_check"))
out.mkdir(parents=True, exist_ok=True)
cfg = yaml.safe_load(open("config/config.yaml"))
cfg = validate_config(deep_merge(cfg, yaml.safe_load(open("config/examples/gpu_paper.yaml"))))  # defaults filled
system = resolve_system(cfg["system"], load_systems(cfg["systems_dir"]), probe_devices())
print("system", system.name, system.scale, flush=True)
u = cfg["unet3d_profile"]
conf = sys.argv[1] if len(sys.argv) > 1 else "tf32"
s = resolve_settings(
    "whole_head", u["presets"], system.scale, u["scales"], network=u["network"], micro_batches=u["micro_batches"]
)
t = time.time()
img, msk = "/tmp/mri_img.nii.gz", "/tmp/mri_mask.nii.gz"
mri.prepare(img, msk, volume=list(s.volume), spacing_mm=list(s.spacing_mm), **cfg["data"]["mri"])
print("mri", list(s.volume), round(time.time() - t, 1), flush=True)
run = {k: u[k] for k in ("warmup", "repeat", "profile_steps", "quality_sample_steps", "quality_rel_l2_max", "seed")}
run.update(repeat=3, quality_sample_steps=1)
spec = {
    "system": system.to_dict(),
    "model": "whole_head",
    "configuration": conf,
    "presets": {"whole_head": u["presets"]["whole_head"]},
    "scales": u.get("scales", {}),
    "data": cfg["data"]["mri"],
    "run": run,
}
t = time.time()
p = subprocess.run(
    [
        sys.executable,
        "-m",
        "accelbench",
        "unet3d-profile",
        "--spec",
        json.dumps(spec),
        "--image",
        img,
        "--mask",
        msk,
        "--out",
        "/tmp/prof/result.json",
    ],
    capture_output=True,
    text=True,
)
print("profile rc", p.returncode, round(time.time() - t, 1), p.stderr[-1500:], flush=True)
r = json.load(open("/tmp/prof/result.json"))
print(
    "profile status",
    r["status"],
    r.get("reason"),
    "kernels/step",
    r["measurements"].get("kernels", {}).get("kernel_count"),
    "device_time_us",
    r["measurements"].get("kernels", {}).get("device_time_us"),
    flush=True,
)
nspec = dict(
    spec,
    ncu={
        **{k: v for k, v in cfg["unet3d_ncu"].items() if k != "configurations"},
        "launch_count": int(os.environ.get("LC", "20")),
        "max_kernels": 6,
        "timeout_s": int(os.environ.get("TO", "170")),
    },
)
t = time.time()
p = subprocess.run(
    [
        sys.executable,
        "-m",
        "accelbench",
        "unet3d-ncu",
        "--spec",
        json.dumps(nspec),
        "--image",
        img,
        "--mask",
        msk,
        "--profile-result",
        "/tmp/prof/result.json",
        "--out",
        str(out / "ncu_result.json"),
    ],
    capture_output=True,
    text=True,
)
print("ncu rc", p.returncode, round(time.time() - t, 1), p.stderr[-1500:], flush=True)
n = json.load(open(out / "ncu_result.json"))
m = n["measurements"]
print("ncu status", n["status"], n.get("reason"))
if n["status"] == "ok":
    print("coverage", json.dumps(m["coverage"], indent=1))
    print("wall_s", m["wall_s"], "commands", json.dumps(m["commands"]))
    print("total", json.dumps({k: v for k, v in m["total"].items()}, default=str))
subprocess.run(["cp", "/tmp/prof/kernels.csv", str(out / "kernels.csv")])
