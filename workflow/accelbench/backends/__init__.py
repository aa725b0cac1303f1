"""Backends: one module per backend (a vendor's way of driving a torch device type), behind ``base.Backend``. A new
one states only what differs from its nearest sibling (CONTRIBUTING.md, "Add a backend"): e.g. ``backends/rocm.py``
defining ``class RocmBackend(CudaBackend)`` (device type ``cuda``, inherited) with its own ``name``, ``probe``,
``provenance``, a ``probe_rank`` below cuda's (a ROCm torch answers ``torch.cuda`` too) and what it lacks, and
``BACKEND = RocmBackend``. The table below finds it (every module of this package with a ``BACKEND``), and the system
and result schemas take their backend names from the table when loaded. ``python -m pytest tests/unit/test_backends.py``
checks every backend that exists. A system file (``config/systems/``), and an image (``containers/``) where it has its
own, complete the port."""

from __future__ import annotations

import importlib
import pkgutil

from accelbench.backends.base import Backend
from accelbench.errors import ConfigError


def _discover() -> dict[str, type[Backend]]:
    """Every module of this package that defines ``BACKEND`` (a :class:`Backend` subclass), by name."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        cls = getattr(module, "BACKEND", None)
        if cls is not None:
            found.append(cls)
    return {cls.name: cls for cls in sorted(found, key=lambda c: c.name)}


# The one table: backend name (system files' `backend`; torch's device type is the class's `device_type`) -> class
# (detect() probes by probe_rank).
BACKENDS: dict[str, type[Backend]] = _discover()

_instances: dict[str, Backend] = {}


def get(name: str) -> Backend:
    """The backend called ``name`` (one shared, stateless instance per name).

    Raises:
        ConfigError: unknown name; the message names the known ones.
    """
    if isinstance(name, Backend):
        return name
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}")
    if name not in _instances:
        _instances[name] = BACKENDS[name]()
    return _instances[name]


def all_backends() -> list[Backend]:
    """Every backend, in table order."""
    return [get(name) for name in BACKENDS]


def lookup(name: str | None) -> Backend | None:
    """The backend called ``name``, or None for an unknown/missing name (recorded results, labels)."""
    return get(name) if name in BACKENDS else None


def for_image(image: str | None) -> Backend | None:
    """The backend whose container image is ``image`` (``cuda``, ``habana``); None if none is."""
    return next((b for b in all_backends() if b.container_image is not None and b.container_image == image), None)


def detect() -> dict:
    """What this process sees: the probe of the first backend (by ``probe_rank``) that finds devices, cpu last:
    ``{"backend", "count", "names"}``."""
    for backend in sorted(all_backends(), key=lambda b: b.probe_rank):
        found = backend.probe()
        if found is not None:
            return found
    raise RuntimeError("no backend answered the probe (the cpu backend always should)")


__all__ = ["BACKENDS", "Backend", "ConfigError", "all_backends", "detect", "for_image", "get", "lookup"]
