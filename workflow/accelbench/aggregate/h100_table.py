"""Published vs measured on the studies' own GPU: every number the studies published for an H100 beside what a real
H100 measured here (``results/claims/h100_vs_published.{csv,md,tex,html}``).

Two kinds of row:

* a claim whose hardware names the H100 (Study A's a1, a6, a8, a10, a11, a12, a14; Study B's b14, b19), from the
  claims table: its published value, the value a real NVIDIA H100 measured (an H200 counted as H100 by the scope
  policy is not an H100 here), the difference in percent where both are one number, and the verdict;
* Study B's SR3 minutes for 40,000 iterations per device count (``study_b_sr3_scaling.csv``'s ``h100`` column)
  beside the H100's faithful fp32 result: the projection (median iteration x 40,000 / devices) and the measured
  iterations plus the median for the rest, with what differs in the setting (Study B's minutes are whole-job wall
  times: their job scripts time ``singularity exec`` of the run script, a ``pip install`` included).

A row with no H100 result reads ``not measured on an H100`` with the published value kept.
"""

from __future__ import annotations

import re

import pandas as pd

from accelbench.aggregate import scope

COLUMNS = [
    "what",
    "published",
    "measured_on_h100",
    "difference_pct",
    "verdict",
    "h100",
    "what_differs",
]
NOT_MEASURED = "not measured on an H100"
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\d.]|[A-Za-wyz_])")  # a number, or one with an x (3.36x)
SR3_SETTING = (
    "published: Study B's whole-job wall time (their job scripts time `singularity exec` of the run script, a "
    "`pip install` included); measured: the median iteration x 40,000 / devices (projection; in brackets the "
    "iterations run, warm-up and compilation included, + the median for the rest)"
)


def real_h100(hardware: str) -> bool:
    """A label of a real NVIDIA H100 (not a device counted as H100 by the scope policy)."""
    cls, by_policy = scope.class_of(hardware)
    return cls == "h100" and not by_policy


def _single(text: str) -> float | None:
    """The one number ``text`` states outside brackets (``(H100, digest)``, ``(1x, 79.18 GiB)``), None for none or
    several."""
    found = _NUMBER.findall(re.sub(r"\((?:[^()]*)\)", "", str(text)))
    return float(found[0]) if len(found) == 1 else None


def _one_number(text: str) -> float | None:
    """The single number a published cell states before any ``;`` note (``0.39 (H100, digest)`` -> 0.39)."""
    return _single(str(text).split(";")[0])


def _measured_number(text: str) -> float | None:
    """The value of a measured cell: ``tf32: sm cycles ratio 0.19`` -> 0.19; ``...: 3.36x training step`` -> 3.36."""
    return _single(text)


def claim_rows(claims_shown: pd.DataFrame) -> list[dict]:
    """One row per H100 claim: its real-H100 evaluation where there is one (the first), else not measured."""
    rows = []
    for cid, g in claims_shown.groupby("claim_id", sort=False):
        first = g.iloc[0]
        if "H100" not in str(first["scope"]).split("/"):
            continue
        on_h100 = g[g["hardware"].map(real_h100)]
        judged = on_h100[on_h100["measured"].astype(str) != ""]
        r = judged.iloc[0] if len(judged) else (on_h100.iloc[0] if len(on_h100) else None)
        published, measured = str(first["published"]), str(r["measured"]) if r is not None else ""
        p, m = _one_number(published), _measured_number(measured)
        rows.append(
            {
                "what": f"{cid}: {first['claim']}",
                "published": published,
                "measured_on_h100": measured or NOT_MEASURED,
                "difference_pct": round(100 * (m - p) / p, 1) if p and m is not None else None,
                "verdict": r["verdict"] if r is not None else NOT_MEASURED,
                "h100": scope.device_part(r["hardware"]) if r is not None else "",
                "what_differs": _caveat(first),
            }
        )
    return rows


def _caveat(claim: pd.Series) -> str:
    why = str(claim.get("why", ""))
    return why.split("Caveat: ", 1)[1] if "Caveat: " in why else ""


def sr3_rows(results: list[dict], sr3_reference: pd.DataFrame) -> list[dict]:
    """Study B's published H100 minutes per device count beside the H100's faithful fp32 SR3 results (the series a
    result records in ``measurements.configuration``), one row per H100 result: where several nodes measured the
    same device count (two reference runs, or a run here beside one), each gets its row with its origin in the
    ``h100`` column, fastest first, so a node-to-node spread is shown rather than one node picked. ``sr3_reference``:
    the long published table (system, devices, minutes)."""
    measured: dict[int, list[dict]] = {}
    for r in results:
        if r.get("experiment") != "sr3_scaling" or r.get("status") != "ok" or not real_h100(r["_hardware"]):
            continue
        m = r["measurements"]
        conf = m.get("configuration") or {}  # an older result names its configuration in config, or only a precision
        name = conf.get("name") or r["config"].get("configuration") or r["config"].get("precision")
        if conf.get("series") != "faithful" and name not in ("faithful", "fp32"):
            continue
        measured.setdefault(int(r["config"]["devices"]), []).append(r)
    rows = []
    for _, p in sr3_reference[sr3_reference["system"] == "h100"].sort_values("devices").iterrows():
        devices, minutes = int(p["devices"]), float(p["minutes"])
        found = sorted(measured.get(devices, []), key=lambda r: r["measurements"]["study_b_projection"]["minutes"])
        if not found:
            rows.append(_row_sr3(devices, minutes, None, None, ""))
        for r in found:
            m = r["measurements"]
            total, proj = m.get("strong_scaling_total") or {}, m["study_b_projection"]
            same_work = total.get("seconds") and total.get("workload_iterations") == proj.get("workload_iterations")
            whole = float(total["seconds"]) / 60 if same_work else None
            rows.append(_row_sr3(devices, minutes, float(proj["minutes"]), whole, _origin(r["_hardware"], len(found))))
    return rows


def _origin(hardware: str, of: int) -> str:
    """The ``h100`` cell of an SR3 row: the device; with ``of`` > 1 rows for one device count, also where the result
    comes from (``reference run (H100 1-GPU, node 2, 2026-12-05)``, or ``measured here``)."""
    device = scope.device_part(hardware)
    if of < 2:
        return device
    origin = str(hardware)[: -len(device) - 2] if str(hardware).endswith(f": {device}") else "measured here"
    return f"{device}; {origin}"


def _row_sr3(devices: int, published: float, proj: float | None, whole: float | None, hw: str) -> dict:
    # proj: median iteration x 40,000; whole: the timed iterations' own wall time (first, compiling one included)
    # + the median x the rest, where the result records it
    with_wall = f" (with the timed iterations' wall time: {whole:.1f} min)" if whole else ""
    measured = f"{proj:.1f} min{with_wall}" if proj is not None else NOT_MEASURED
    return {
        "what": f"SR3 strong scaling, {devices} device(s): minutes for 40,000 iterations (faithful fp32)",
        "published": f"{published:g} min",
        "measured_on_h100": measured,
        "difference_pct": round(100 * (proj - published) / published, 1) if proj is not None else None,
        "verdict": "",
        "h100": hw,
        "what_differs": SR3_SETTING,
    }


def read_published_minutes(path) -> pd.DataFrame:
    """Study B's SR3 minutes (``study_b_sr3_scaling.csv``: devices x system, comment lines ``#``) as a long table
    (system, devices, minutes).

    Raises:
        DataError: unreadable, or no ``devices`` column (the file named).
    """
    from accelbench.core import files
    from accelbench.errors import DataError

    wide = files.read_frame(path, "Study B's SR3 minutes", error=DataError, comment="#")
    if "devices" not in wide:
        raise DataError(f"{path}: no 'devices' column")
    return wide.melt(id_vars="devices", var_name="system", value_name="minutes").dropna()


def h100_table(results: list[dict], claims_shown: pd.DataFrame, sr3_reference: pd.DataFrame | None) -> pd.DataFrame:
    """The table (columns :data:`COLUMNS`): the H100 claims, then SR3's published H100 minutes."""
    rows = claim_rows(claims_shown)
    if sr3_reference is not None:
        rows += sr3_rows(results, sr3_reference)
    return pd.DataFrame(rows, columns=COLUMNS)
