"""Machine-wide lock of a device set: two measurement jobs never time on the same cores or accelerators at once.

Snakemake schedules the jobs of one run so that they do not overlap (each measurement job asks for every core), but
two runs in one folder with different targets, or two checkouts on one machine, know nothing of each other. Every
measurement command (``unet3d-profile``, ``unet3d-ncu``, ``sr3-train``, ``lora-finetune``, ``llm-quant``) therefore
holds an exclusive ``fcntl.flock`` on ``<lock dir>/accelbench-<device set>.lock`` while it runs; a second one logs who
holds it and waits. The lock dir is ``$ACCELBENCH_LOCK_DIR`` or the system temporary folder (per machine, also on a
cluster node). The kernel drops the lock when the holder exits, killed or not: no stale lock survives.

Device set: ``cpu`` (the whole host), ``cuda-<CUDA_VISIBLE_DEVICES or all>``, ``hpu-<HABANA_VISIBLE_MODULES or all>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import socket
import tempfile
import time
from pathlib import Path
from typing import Iterator

from . import backends

log = logging.getLogger(__name__)


def device_set(backend: str, environ: dict | None = None) -> str:
    """Name of the device set a job on ``backend`` measures on (see the module docstring)."""
    env = os.environ if environ is None else environ
    ops = backends.get(backend)
    if not ops.accelerator:
        return ops.name
    visible = env.get(ops.visible_devices_var) if ops.visible_devices_var else None
    return f"{ops.name}-{re.sub(r'[^A-Za-z0-9,_-]', '_', visible) if visible else 'all'}"


def lock_path(devices: str) -> Path:
    return Path(os.environ.get("ACCELBENCH_LOCK_DIR") or tempfile.gettempdir()) / f"accelbench-{devices}.lock"


@contextlib.contextmanager
def device_lock(devices: str, what: str, poll_s: float = 30.0) -> Iterator[Path]:
    """Hold the machine-wide lock of ``devices`` while the body runs; wait for it (saying why) if another holds it.

    Args:
        devices: a :func:`device_set` name.
        what: this job, written into the lock file for whoever waits (e.g. the result path).
        poll_s: seconds between the "still waiting" lines.
    """
    path = lock_path(devices)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        waited = 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
                if waited == 0 or waited % poll_s < 1:
                    log.warning("waiting for %s: %s measures on the same devices (%s); timings would be disturbed",
                                path, holder, devices)
                time.sleep(1.0)
                waited += 1.0
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} ({what}) since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode(), 0)
        if waited:
            log.info("got %s after %.0f s", path, waited)
        yield path
    finally:
        os.close(fd)  # releases the flock
