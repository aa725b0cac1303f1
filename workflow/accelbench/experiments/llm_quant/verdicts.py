"""Study B quantization: a method job's ``unsupported`` verdicts that the spec, the system and what is installed decide
(torch-free). :func:`.stages.run_method_job` asks :func:`method_reason` first; the harness asks
:func:`known_unsupported` before it imports the job module (the registry entry's ``verdicts``), so such a result
imports no torch."""

from __future__ import annotations

import importlib.util

from accelbench import backends
from accelbench.core.outcome import Outcome


def method_reason(method: str, system) -> str | None:
    """Why ``method`` cannot run on ``system`` here, known before loading anything (None: try it): Intel Neural
    Compressor FP8 off Gaudi or without its bridge, torchao not installed."""
    ops = backends.get(system.backend)
    if method == "inc_fp8" and (not ops.fp8_inc or not ops.bridge_installed()):
        bridges = "; ".join(b.bridge_status() for b in backends.all_backends() if b.fp8_inc)
        return (
            f"Intel Neural Compressor FP8 needs Intel Gaudi (system {system.name!r}, backend {system.backend!r}; "
            f"{bridges})"
        )
    if method == "torchao" and importlib.util.find_spec("torchao") is None:
        return "torchao is not installed"
    return None


def known_unsupported(ctx) -> Outcome | None:
    """A method job's :func:`method_reason` as the job would record it (``measurements.allocation`` empty); None for
    the sensitivity stage, a ``--stage`` that disagrees with the spec (the job says so) or a method that may run."""
    method = ctx.spec["method"]
    if method == "sensitivity" or ctx.inputs.get("stage") not in (None, "method"):
        return None
    reason = method_reason(method, ctx.system)
    return None if reason is None else Outcome("unsupported", {"allocation": {}}, reason)
