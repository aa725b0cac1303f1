"""Rule functions of the network smoke test (``net_smoke``, a diagnostic; its rule in ``rules.smk`` beside this file).

Torch-free. A diagnostic is asked for by path (``results/<system>/net_smoke/devices_<N>/allreduce.json``), never by
``rule all``: :func:`results` gives no path, :func:`spec` one job's spec.
"""

from __future__ import annotations


def results(rc, system: str) -> list[str]:
    """No result as configured: the sweep runs only where its output is asked for by path."""
    return []


def spec(rc, wildcards) -> dict:
    """``{"system": the resolved system, "devices": N}`` of the sweep over ``wildcards.devices`` ranks."""
    return {"system": rc.system.to_dict(), "devices": int(wildcards.devices)}
