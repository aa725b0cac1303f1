"""A toy accelerator: the worked example of CONTRIBUTING.md, "Add a backend" (``tests/unit/test_toy_backend.py``).

A pretend device whose work runs on the host CPU, so its nearest sibling is the cpu backend: it states only what
differs from it (a name, an accelerator with its own visible-devices variable, how it is found and recorded). A process
sees ``TOYACCEL_DEVICES`` toy devices (unset or 0: none, so the probe finds nothing on a real machine and
``system: auto`` goes on to the real backends). No image of its own: its system files name an existing one.
"""

from __future__ import annotations

import os
from pathlib import Path

from accelbench.backends.cpu import CpuBackend

COUNT_VAR = "TOYACCEL_DEVICES"  # how many toy devices this process sees
DEVICE_NAME = "Toy Accelerator T1"  # what its probe and provenance report (system files match it)


def _count() -> int:
    try:
        return max(0, int(os.environ.get(COUNT_VAR, "0")))
    except ValueError:
        return 0


class ToyaccelBackend(CpuBackend):
    name = "toyaccel"  # device_type "cpu", inherited: its tensors, autocast and timing are the host's
    accelerator = True
    visible_devices_var = "TOYACCEL_VISIBLE_DEVICES"
    job_env_vars = (COUNT_VAR, "TOYACCEL_VISIBLE_DEVICES")
    probe_rank = 50  # before cuda (100) and the cpu fallback (1000): found only where TOYACCEL_DEVICES is set

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
