"""One hardware-scope policy for every published claim: which measured systems count as which hardware class.

Each claim names the hardware it was published on (``hardware`` of the claims CSVs: ``v100``, ``a100``, ``h100``,
``gaudi1``, ``gaudi2``, ``gaudi3``, several joined by ``/``, or ``any`` for a claim whose quantity does not depend on
the accelerator, e.g. a compression ratio or the numerics of simulated quantization). A measured system is judged on
a claim only when its class (:func:`class_of`, from :data:`POLICY`) is one the claim names; otherwise the claim reads
``not measured here (A100 claim)`` with the value measured here shown beside it.

The H200 decision, from evidence: an H200 is the GH100 chip of an H100 (compute capability 9.0, 132 SMs, the same
sm_90 kernels) with other memory (141 GB HBM3e at 4.8 TB/s against 80 GB HBM3 at 3.35 TB/s), so it counts as the
H100 class only for the quantities where a like-for-like H100 run and H200 run agree:
``resources/reference/h100_h200_evidence.csv`` holds, per quantity, both runs' values (recomputed from the committed
results by ``tests/unit/test_scope_evidence.py``) and ``h200_judges``. Counter ratios (instructions, SM cycles) and
step-time ratios of Study A agree within 0.02 or 10%: an H200 may judge those H100 claims (a1, a8, a10, a11, a12,
a14) where no H100 result does; absolute times and their orders do not carry over (SR3's faithful iteration: 192.9
ms on the H200, 219.9 and 188.1 ms on two H100 nodes): an H200 never judges those (b14's and b19's H100 points).
A quantity the file does not name is not judged on an H200. A real H100 result always leads
(:mod:`accelbench.aggregate.claims_summary`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

EVIDENCE_FILE = "h100_h200_evidence.csv"  # per quantity: the H100 and H200 values, and whether an H200 may judge it
_evidence_dir = Path(__file__).resolve().parents[3] / "resources" / "reference"


def use_reference_dir(path: str | Path) -> None:
    """Read the H100/H200 evidence from ``path`` (the claims aggregation's ``--reference-dir``) from now on."""
    global _evidence_dir
    _evidence_dir = Path(path)
    evidence_table.cache_clear()


@functools.lru_cache(maxsize=1)
def evidence_table():
    """:data:`EVIDENCE_FILE` as read (every cell a string), its columns and ``h200_judges`` values checked.

    Raises:
        DataError: the file is missing, unreadable, lacks a column or says other than yes/no (named).
    """
    from accelbench.core import files
    from accelbench.errors import DataError

    path = _evidence_dir / EVIDENCE_FILE
    df = files.read_frame(path, "the H100/H200 evidence table", error=DataError, comment="#", dtype=str)
    missing = {"quantity", "claims", "h100", "h200", "h200_judges", "why"} - set(df.columns)
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    bad = sorted(set(df["h200_judges"]) - {"yes", "no"})
    if bad:
        raise DataError(f"{path}: h200_judges must be yes or no, not {bad[0]!r}")
    return df


def evidence() -> dict[str, tuple[bool, str]]:
    """``{quantity: (whether an H200 may judge it, why)}`` from :func:`evidence_table`."""
    return {r["quantity"]: (r["h200_judges"] == "yes", r["why"]) for _, r in evidence_table().iterrows()}


def evidence_markdown() -> str:
    """The evidence table as Markdown (docs/claims.md): per quantity, the claims, the H100 and H200 values side by
    side, whether an H200 may judge it, and why."""
    head = "| quantity | claims | H100 | H200 | an H200 may judge it | why |\n| --- | --- | --- | --- | --- | --- |"
    rows = [
        f"| {r['quantity']} | {r['claims']} | {r['h100']} | {r['h200']} | {r['h200_judges']} | {r['why']} |"
        for _, r in evidence_table().iterrows()
    ]
    note = (
        f"From `resources/reference/{EVIDENCE_FILE}` (H100: reference_runs/h100x1-2026-12-05, H200: the 1-GPU results "
        "of reference_runs/h200x2-2026-12-01; the same network, settings and harness). A real H100 result always "
        "leads; an H200 judges an H100 claim only where the H100 is absent and the row says yes."
    )
    return "\n".join([note, "", head, *rows])


def h200_judges(quantity: str) -> tuple[bool, str]:
    """(whether an H200 counts as H100 for ``quantity``, why) by the evidence table; a quantity it does not name: no."""
    judged = evidence().get(str(quantity))
    if judged is None:
        return False, f"no H100-beside-H200 evidence for {quantity} ({EVIDENCE_FILE})"
    return judged


# (pattern in the hardware label, class, why): the first match wins; matched against the device part of the label
# (after any "reference run (...): " prefix). Classes: the hardware names the claims CSVs use.
POLICY: list[tuple[re.Pattern, str, str]] = [
    (
        re.compile(r"\bH200\b", re.I),
        "h100",
        "an H200 counts as H100 for the quantities of h100_h200_evidence.csv: the same GH100 SMs and kernels",
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


def class_of(hardware: str, quantity: str | None = None) -> tuple[str, str]:
    """(class, why) of a measured system's hardware label by :data:`POLICY`; (``other``, "") for anything else
    (a CPU, another GPU). With ``quantity``, a class given by policy (an H200 as H100) holds only where the evidence
    allows it for that quantity (:func:`h200_judges`); else (``other``, why not)."""
    hw = device_part(hardware)
    for pattern, cls, why in POLICY:
        if pattern.search(hw):
            if why and quantity is not None:
                ok, because = h200_judges(quantity)
                if not ok:
                    return OTHER, f"not counted as {_NAMES[cls]} for {quantity}: {because}"
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


def in_scope(claim_hardware: str, hardware: str, quantity: str | None = None) -> tuple[bool, str]:
    """(whether a system with this hardware label is judged on a claim published on ``claim_hardware``, the
    sentence that says why, e.g. ``an A100 claim; this is NVIDIA H200 (H100 class: ...)``). ``quantity``: the claim's
    quantity, for the policy's per-quantity evidence (:func:`class_of`)."""
    classes = claim_classes(claim_hardware)
    cls, why = class_of(hardware)
    shown = device_part(hardware)
    if why and cls in classes and quantity is not None:  # a class by policy: only where the evidence allows it
        allowed, because = h200_judges(quantity)
        if not allowed:
            return False, f"{label(claim_hardware)} claim; this is {shown} (not counted as {_NAMES[cls]}: {because})"
    ok = ANY in classes or cls in classes
    name = _NAMES.get(cls, "no class of the studies' hardware")
    measured_as = (f"{name} class" if cls in _NAMES else name) + (f": {why}" if why else "")
    return ok, f"{label(claim_hardware)} claim; this is {shown} ({measured_as})"
