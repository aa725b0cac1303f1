"""A toy ROCm: the worked example of a CUDA-device backend under another vendor's name (CONTRIBUTING.md, "Add a
backend"; ``tests/unit/test_toy_backend.py``).

A ROCm build of torch drives AMD GPUs through ``torch.cuda``: tensors live on ``torch.device("cuda")``, autocast takes
``device_type="cuda"``, and the ranks talk through RCCL under the ``nccl`` name. So its nearest sibling is the cuda
backend, and it states only what differs: its name, how it is found (before cuda, which a ROCm torch answers too), the
vendor's variables and tool, and what NVIDIA-only tools it lacks. A process sees ``TOYROCM_DEVICES`` toy GPUs (unset
or 0: none, so nothing changes on a real machine); a real ROCm backend would ask ``torch.version.hip`` and
``torch.cuda.device_count()`` instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from accelbench.backends.cuda import CudaBackend

COUNT_VAR = "TOYROCM_DEVICES"  # how many toy GPUs this process sees
DEVICE_NAME = "Toy Instinct MI0"  # what its probe and provenance report (system files match it)


def _count() -> int:
    try:
        return max(0, int(os.environ.get(COUNT_VAR, "0")))
    except ValueError:
        return 0


class ToyrocmBackend(CudaBackend):
    name = "toyrocm"  # device_type "cuda", inherited: autocast, torch.device and torch.cuda calls as on NVIDIA
    visible_devices_var = "HIP_VISIBLE_DEVICES"
    job_env_vars = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", COUNT_VAR)
    vendor_tool = ("rocm-smi", "--showproductname")
    container_image = None  # no image of its own here: its system file names an existing one
    rank_env_defaults = {"NCCL_DEBUG": "INFO"}  # RCCL reads NCCL_* variables
    software_fields = (("hip", "HIP"),)
    probe_rank = 90  # before cuda (100): a ROCm torch answers torch.cuda too
    nsight_compute = False  # NVIDIA's profiler
    torchao_int4_tinygemm = False  # tinygemm is a CUDA kernel

    def probe(self) -> dict | None:
        n = _count()
        return {"backend": self.name, "count": n, "names": [DEVICE_NAME] * n} if n else None

    def absence_note(self) -> str | None:
        return f"{COUNT_VAR} not set"

    def provenance(self, info: dict) -> dict:
        n = _count()
        return {"device_name": DEVICE_NAME, "device_count": n, "hip": "0.0"} if n else self.host_as_device(info)

    def energy_counter(self, index: int = 0):
        return None  # NVML reads NVIDIA boards only (a real ROCm backend: amdsmi)

    def device_load(self, ours: set[int]) -> list[dict] | None:
        return None  # likewise

    def apptainer_env(self, workdir: str | Path, environ: dict) -> dict[str, str]:
        return {"APPTAINER_ROCM": "1", "SINGULARITY_ROCM": "1"}  # --rocm: the host's /dev/kfd and /dev/dri


BACKEND = ToyrocmBackend
