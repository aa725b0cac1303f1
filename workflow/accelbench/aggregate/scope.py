"""One hardware-scope policy for every published claim: which measured systems count as which hardware class.

Each claim names the hardware it was published on (``hardware`` of the claims CSVs: ``v100``, ``a100``, ``h100``,
``gaudi1``, ``gaudi2``, ``gaudi3``, several joined by ``/``, or ``any`` for a claim whose quantity does not depend on
the accelerator, e.g. a compression ratio or the numerics of simulated quantization). A measured system is judged on
a claim only when its class (:func:`class_of`, from :data:`POLICY`) is one the claim names; otherwise the claim reads
``not measured here (A100 claim)`` with the value measured here shown beside it.

The H200 decision (the one judgement in this table): an H200 counts as the H100 class. Evidence: both are the GH100
chip (compute capability 9.0, the same SM, tensor cores, ISA and cuDNN/cuBLAS kernels; 132 SMs and a 1,980 MHz boost
clock on SXM boards); the H200 differs in memory only (141 GB HBM3e at 4.8 TB/s against 80 GB HBM3 at 3.35 TB/s).
Study A's quantities are per-kernel counter ratios (instructions, SM cycles, tensor-pipe use, IPC) and step-time
ratios: instructions are a property of the sm_90 kernels run, identical on both; cycle and time ratios can differ
where a kernel is bound by DRAM bandwidth, which the claims' rows say beside the value. So an H100 claim is judged
on an H200 (and may fail there); a claim about any other GPU is not.
"""

from __future__ import annotations

import re

# (pattern in the hardware label, class, why): the first match wins; matched against the device part of the label
# (after any "reference run (...): " prefix). Classes: the hardware names the claims CSVs use.
POLICY: list[tuple[re.Pattern, str, str]] = [
    (
        re.compile(r"\bH200\b", re.I),
        "h100",
        "an H200 counts as H100: the same GH100 SMs and kernels, only HBM3e memory differs",
    ),
    (re.compile(r"\bH100\b", re.I), "h100", ""),
    (re.compile(r"\bA100\b", re.I), "a100", ""),
    (re.compile(r"\bV100\b", re.I), "v100", ""),
    (re.compile(r"Gaudi\s*3|HL-325", re.I), "gaudi3", ""),
    (re.compile(r"Gaudi\s*2|HL-225", re.I), "gaudi2", ""),
    (re.compile(r"Gaudi\s*1?\b|HL-205", re.I), "gaudi1", ""),
]
ANY = "any"
OTHER = "other"
_NAMES = {
    "v100": "V100",
    "a100": "A100",
    "h100": "H100",
    "gaudi1": "Gaudi1",
    "gaudi2": "Gaudi2",
    "gaudi3": "Gaudi3",
    ANY: "any hardware",
}


def device_part(hardware: str) -> str:
    """The device part of a hardware label: ``reference run (H200 series, 2026-12-01): NVIDIA H200 (1x, ...)`` ->
    ``NVIDIA H200 (1x, ...)`` (a reference run's own label names a series, not the device)."""
    hw = str(hardware)
    for prefix in ("reference run (", "copied in ("):  # a reference run's series, a result merged from elsewhere
        if hw.startswith(prefix) and "): " in hw:
            hw = hw.split("): ", 1)[1]
    return hw


def class_of(hardware: str) -> tuple[str, str]:
    """(class, why) of a measured system's hardware label by :data:`POLICY`; (``other``, "") for anything else
    (a CPU, another GPU)."""
    hw = device_part(hardware)
    for pattern, cls, why in POLICY:
        if pattern.search(hw):
            return cls, why
    return OTHER, ""


def claim_classes(claim_hardware: str) -> list[str]:
    """The classes a claim names (``a100/h100`` -> ``["a100", "h100"]``; blank or ``any`` -> ``["any"]``).

    Raises:
        ValueError: a name that is not a class of :data:`POLICY` nor ``any``.
    """
    names = [t.strip().lower() for t in str(claim_hardware or "").split("/") if t.strip()] or [ANY]
    bad = [n for n in names if n not in _NAMES]
    if bad:
        raise ValueError(f"unknown hardware {bad[0]!r} (one of {', '.join(_NAMES)}, joined by '/')")
    return names


def label(claim_hardware: str) -> str:
    """``A100``, ``A100/H100``, ``any hardware``: the claim's hardware as the table writes it."""
    return "/".join(_NAMES[c] for c in claim_classes(claim_hardware))


def in_scope(claim_hardware: str, hardware: str) -> tuple[bool, str]:
    """(whether a system with this hardware label is judged on a claim published on ``claim_hardware``, the
    sentence that says why, e.g. ``an A100 claim; this is NVIDIA H200 (H100 class: ...)``)."""
    classes = claim_classes(claim_hardware)
    cls, why = class_of(hardware)
    ok = ANY in classes or cls in classes
    shown = device_part(hardware)
    name = _NAMES.get(cls, "no class of the studies' hardware")
    measured_as = (f"{name} class" if cls in _NAMES else name) + (f": {why}" if why else "")
    return ok, f"{label(claim_hardware)} claim; this is {shown} ({measured_as})"
