"""A toy accelerator: the worked example of CONTRIBUTING.md, "Add a backend" (``tests/unit/test_toy_backend.py``).

Every attribute and method of :class:`accelbench.backends.base.Backend` for a pretend device whose work runs on the
host CPU (``torch.device("cpu")``). A process sees ``TOYACCEL_DEVICES`` toy devices (unset or 0: none, so the probe
finds nothing on a real machine and ``system: auto`` goes on to the real backends). No image of its own: its system
files name an existing one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from accelbench.backends.base import Backend

COUNT_VAR = "TOYACCEL_DEVICES"  # how many toy devices this process sees
DEVICE_NAME = "Toy Accelerator T1"  # what its probe and provenance report (system files match it)


def _count() -> int:
    try:
        return max(0, int(os.environ.get(COUNT_VAR, "0")))
    except ValueError:
        return 0


class ToyaccelBackend(Backend):
    name = "toyaccel"
    accelerator = True
    collective = "gloo"
    visible_devices_var = "TOYACCEL_VISIBLE_DEVICES"
    job_env_vars = (COUNT_VAR, "TOYACCEL_VISIBLE_DEVICES")
    vendor_tool = None
    container_image = None  # runs in another backend's image (its system file names it)
    slurm_gpu_resource = False
    uses_device_events = False
    rank_env_defaults: dict[str, str] = {}
    software_fields = ()
    probe_rank = 50  # before cuda (100) and the cpu fallback (1000): found only where TOYACCEL_DEVICES is set
    bridge = None
    lazy_mode = False
    optimum_habana = False
    fp8_inc = False
    nsight_compute = False
    torchao_int4_tinygemm = False
    fused_adamw = False
    non_blocking_copies = False
    device_weight_init = False
    ddp_device_ids = False
    float64 = True
    sync_debug_mode = False

    def prepare(self) -> None:
        pass

    def torch_device(self, index: int = 0):
        import torch

        return torch.device("cpu")  # the toy's work runs on the host

    def device_index(self, local_rank: int) -> int:
        return 0

    def set_device(self, local_rank: int) -> None:
        pass

    def synchronize(self, index: int = 0) -> None:
        pass  # host work is synchronous

    def mark_step(self) -> None:
        pass

    def reset_peak_memory(self, index: int = 0) -> None:
        pass

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        return None

    def empty_cache(self, index: int = 0) -> None:
        pass

    def profiler_activities(self) -> list:
        import torch

        return [torch.profiler.ProfilerActivity.CPU]

    def flash_attention(self, optimum_habana_version: str | None = None) -> str | None:
        return "sdpa"

    def autocast(self, dtype):
        """Host autocast (torch knows no ``toyaccel`` device type)."""
        import torch

        return contextlib.nullcontext() if dtype is None else torch.autocast(device_type="cpu", dtype=dtype)

    def prepare_collective(self) -> None:
        pass

    def probe(self) -> dict | None:
        n = _count()
        return {"backend": self.name, "count": n, "names": [DEVICE_NAME] * n} if n else None

    def absence_note(self) -> str | None:
        return f"{COUNT_VAR} not set"

    def provenance(self, info: dict) -> dict:
        n = _count()
        return {"device_name": DEVICE_NAME, "device_count": n} if n else self.host_as_device(info)

    def apptainer_env(self, workdir: str | Path, environ: dict) -> dict[str, str]:
        return {COUNT_VAR: environ[COUNT_VAR]} if environ.get(COUNT_VAR) else {}


BACKEND = ToyaccelBackend
