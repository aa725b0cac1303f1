"""Shared aggregation helpers: reading results, status cells, writing tables in three formats."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pandas as pd

from accelbench.aggregate.run_folder import run_for
from accelbench.core.provenance import hardware_label, software_label
from accelbench.core.results import read_result
from accelbench.errors import ResultError

STATUS_LABEL = {"oom": "OOM", "unsupported": "unsupported"}


def load_results(paths: list[str | Path]) -> list[dict]:
    """Read every result (see :func:`accelbench.core.results.read_result`), adding ``_path``,
    ``_hardware`` (with the devices the job used, :func:`devices_used`), ``_device`` (the same without a count: the
    series of a curve over devices) and ``_software`` labels derived from the provenance, and ``_series``:
    ``measured``, or for a result of a committed reference run (:mod:`accelbench.aggregate.reference_runs`) its label,
    which then also leads ``_hardware`` so every aggregation draws it as its own series.

    Raises:
        ResultError: a missing or corrupt file (named in the message); two files that are one result
            (:func:`one_file_per_result`: a copied folder, a hard or symbolic link), both named.
    """
    out = []
    for p in paths:
        r = read_result(p)
        r["_path"] = str(p)
        system = (r.get("config") or {}).get("system")
        r["_hardware"] = hardware_label(r["environment"], devices_used(r), system=system)
        r["_device"] = hardware_label(r["environment"], count=False, system=system)
        r["_software"] = software_label(r["environment"])
        run = run_for(p)  # a committed reference run: its own labelled series, e.g. "reference run (H200, 2026-12-01)"
        r["_series"] = run["label"] if run else "measured"
        if run:
            r["_hardware"] = f"{run['label']}: {r['_hardware']}"
            r["_device"] = f"{run['label']}: {r['_device']}"
        elif (copied := copied_in(r)) is not None:  # measured on another machine, merged in (ARTIFACT section 6)
            r["origin"] = copied
            r["_hardware"], r["_device"] = f"{copied}: {r['_hardware']}", f"{copied}: {r['_device']}"
        out.append(r)
    return one_file_per_result(distinct_systems(out))


def one_file_per_result(loaded: list[dict]) -> list[dict]:
    """``loaded`` (results of :func:`load_results`, system names made distinct) when no two of them are one
    result: the same experiment, system and job configuration (``config``, which every table keys its rows by: two
    such results would be two rows with one key, e.g. ``results/cpu/unet3d_profile/whole_head/baseline (copy)/``
    beside ``.../baseline/``, or a hard or symbolic link to it). Checked here, for every study, before any table
    reads them.

    Raises:
        ResultError: one line naming each set of files that are one result, and what to do (keep one).
    """
    by_key: dict[str, list[str]] = {}
    for r in loaded:
        key = json.dumps([r.get("experiment"), r.get("config")], sort_keys=True, default=str)
        by_key.setdefault(key, []).append(r["_path"])
    same = [paths for paths in by_key.values() if len(paths) > 1]
    if same:
        raise ResultError(
            "one result in several files (a copied folder or a link; keep one, move the others out of the results "
            "folder): " + "; ".join(" = ".join(repr(p) for p in paths) for paths in same)
        )
    return loaded


COPIED_IN = "copied in"  # the origin of a result measured on another machine and merged into this checkout


RUN_SYSTEM_ENV = "ACCELBENCH_RUN_SYSTEM"  # the system this checkout's run measures (set by workflow/rules/common.smk)


def copied_in(result: dict, host: str | None = None, system: str | None = None) -> str | None:
    """``copied in (h100, host gpu-node)`` for a result merged into this checkout from another machine, None for one
    this run's system measured: a merged result keeps its origin instead of reading ``measured here``.

    Inside a Snakemake run the run's own system (``system``, default the ``ACCELBENCH_RUN_SYSTEM`` variable the
    Snakefile sets) decides: a result of another system (``config.system.name``) was copied in, whatever host it
    names (the jobs of a Slurm or Kubernetes run each record their own node, which is no sign of a merge). Outside a
    run (no system known), a result naming another host than this one (``host``, default ``socket.gethostname()``)
    counts as copied in."""
    recorded = str((result.get("environment") or {}).get("host") or "").strip()
    run_system = system if system is not None else os.environ.get(RUN_SYSTEM_ENV, "")
    if run_system:
        name = str(((result.get("config") or {}).get("system") or {}).get("name") or "")
        if not name or name == run_system:
            return None
        return f"{COPIED_IN} ({name}" + (f", host {recorded})" if recorded else ")")
    here = host if host is not None else socket.gethostname()
    return f"{COPIED_IN} (host {recorded})" if recorded and recorded != here else None


def _source(r: dict) -> tuple[str | None, str]:
    """Where a loaded result comes from: (reference-run label or None, the folder above ``<experiment>/``)."""
    parts = Path(r["_path"]).parts
    i = max((i for i, part in enumerate(parts) if part == r.get("experiment")), default=0)
    folder = parts[i - 1] if i > 0 else ""
    return (r["_series"] if r["_series"] != "measured" else None, folder)


def distinct_systems(loaded: list[dict]) -> list[dict]:
    """Results of different machines that share a system name (every CPU machine is ``cpu``; an H200 run beside the
    committed H200 reference run) get distinct names, so every table and claim groups them apart: the
    result in ``<results>/<name>/`` keeps ``name``; the others become ``<name> (<folder>)`` (a folder copied in from
    another machine, whose name then also leads ``_hardware`` and ``_device``) or ``<name> (<reference-run label>)``.
    Only the in-memory copy changes."""
    by_name: dict[str, set] = {}
    for r in loaded:
        by_name.setdefault(r["config"]["system"]["name"], set()).add(_source(r))
    for r in loaded:
        name = r["config"]["system"]["name"]
        ref, folder = _source(r)
        if len(by_name[name]) > 1 and (ref or folder != name):
            r["config"] = {**r["config"], "system": {**r["config"]["system"], "name": f"{name} ({ref or folder})"}}
            if not ref:  # a reference run's label already leads its hardware labels
                r["_hardware"], r["_device"] = f"{folder}: {r['_hardware']}", f"{folder}: {r['_device']}"
    return loaded


def devices_used(result: dict) -> int:
    """Devices the job used: ``config.devices`` (LoRA, SR3), else ``measurements.devices``, else 1 (the single-device
    experiments). Not the devices visible on the node (``environment.hardware.device_count``)."""
    for where in ("config", "measurements"):
        n = (result.get(where) or {}).get("devices")
        if isinstance(n, (int, float)) and not isinstance(n, bool) and n >= 1:
            return int(n)
    return 1


def model_display(result: dict, fallback: str | None = None) -> str | None:
    """The name of the model a result ran, from its own record (``measurements.model``), never from a table's
    constant: ``display_name`` where recorded (:func:`accelbench.models.llm.display_name`), else rebuilt from
    ``name`` and ``quantized_file`` the same way (``"SmolLM2-135M-Instruct (Q4_1-dequantized)"``); a random-init
    model named only by its architecture type gets ``"<fallback, the config's family or name> (random init)"``.
    Without a record: ``fallback``, else the config's ``model_name``/``model`` key."""
    from accelbench.models.llm import display_name

    info = (result.get("measurements") or {}).get("model")
    cfg = result.get("config") or {}
    if not isinstance(info, dict) or not info.get("name"):
        return fallback or cfg.get("model_name") or (cfg["model"] if isinstance(cfg.get("model"), str) else None)
    if info.get("display_name"):
        return info["display_name"]
    name = str(info["name"])
    if info.get("weights") == "random init" and "random" not in name.lower():
        return f"{fallback or cfg.get('family') or name} (random init)"
    return display_name(name, info.get("quantized_file"))


def joined_labels(df: pd.DataFrame, column: str = "hardware", empty: str = "none") -> str:
    """The distinct provenance labels of ``column`` (e.g. every hardware measured), for captions and titles."""
    return "; ".join(sorted(set(df[column]))) if not df.empty else empty


def status_cell(result: dict) -> str | None:
    """``OOM`` / ``unsupported`` for results that did not run, None for ``ok``."""
    return STATUS_LABEL.get(result["status"])


# Fixed decimals per unit, chosen by column name (first match wins); anything else: 3 significant digits.
COLUMN_FORMATS: list[tuple[str, str]] = [
    (r"(^|_)(sm_cycles|instructions)(_step_est)?$", "{:,.0f}"),  # counts of cycles/instructions (not their ratios)
    (r"_pct$", "{:.1f}"),  # percent
    (r"_ms$", "{:.1f}"),  # milliseconds
    (r"_gib$", "{:.2f}"),  # GiB
    (r"per_s", "{:.1f}"),  # throughput (items/s)
    (r"(_s|_min|minutes.*|_mtok)$", "{:.2f}"),  # seconds, minutes
    (r"(count|kernels|devices|steps$|tokens$|params$|iterations)", "{:.0f}"),  # counts
    (r"(^share_|_share$|_fraction$|^mfu|efficiency|covered)", "{:.3f}"),  # fractions
    (r"(speedup|_x$|ratio|^value$|slowdown|gain)", "{:.2f}"),  # ratios (x)
    (r"(perplexity|psnr|_db|loss)", "{:.2f}"),  # perplexity, dB, loss
    (r"(ssim|^ipc)", "{:.3f}"),
    (r"(rel_l2|abs_diff)", "{:.1e}"),  # small relative errors
]


def column_format(column: str) -> str:
    """The format of a numeric column of a shown table (see :data:`COLUMN_FORMATS`)."""
    import re

    for pattern, fmt in COLUMN_FORMATS:
        if re.search(pattern, column):
            return fmt
    return "{:.3g}"


def noise_cell(result: dict) -> str | None:
    """``noisy`` / ``quiet`` from ``measurements.noise`` (see :mod:`accelbench.measure.hostload`); None when not
    recorded."""
    noise = (result.get("measurements") or {}).get("noise")
    if not noise:
        return None
    return "noisy" if noise.get("noisy") else "quiet"


def noise_why(result: dict) -> str | None:
    """Why a result is flagged noisy (``measurements.noise.noisy``; the reasons of ``measurements.noise.why`` in one
    line), None when it is not flagged."""
    noise = (result.get("measurements") or {}).get("noise")
    if not isinstance(noise, dict) or not noise.get("noisy"):
        return None
    why = noise.get("why") or noise.get("reasons") or "flagged noisy"
    return "; ".join(map(str, why)) if isinstance(why, (list, tuple)) else str(why)


CSV_DIGITS = (
    7  # significant digits kept in a CSV: about the timers' resolution (CUDA events ~0.5 us); relative error <= 5e-7
)
# columns whose long texts (reasons, error messages) become footnotes in the shown tables, not text in every row
NOTE_COLUMNS = r"(^|_)(reason|why|error|errors|how|note|notes|noise_why|source|method)$"
NOTE_CHARS = 40  # Markdown / LaTeX: a note column's text longer than this becomes a footnote
LONG_CHARS = 60  # Markdown / LaTeX: any text longer than this becomes a footnote
HTML_NOTE_CHARS = 160  # HTML (cells wrap): only longer note texts, or ones repeated on several rows


def csv_value(v):
    """A CSV cell rounded to the precision measured: floats to :data:`CSV_DIGITS` significant digits (an integral
    float stays whole: counts keep every digit); anything else unchanged."""
    if isinstance(v, float) and pd.notna(v) and abs(v) < 1e15 and v != int(v):
        return float(f"{v:.{CSV_DIGITS}g}")
    return v


_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\^{}",
}


def _tex(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (a footnote below a table)."""
    import re

    return re.sub(r"[\\&%$#_{}~^]", lambda m: _TEX[m.group()], text)


def csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every float cell through :func:`csv_value` (``3933.3540019999873`` -> ``3933.354``)."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype.kind == "f":
            out[col] = out[col].map(csv_value)
        elif out[col].dtype == object:
            out[col] = out[col].map(lambda v: csv_value(v) if isinstance(v, float) else v)
    return out


def footnoted(
    shown: pd.DataFrame, note_chars: int, long_chars: int | None, repeated: bool = False
) -> tuple[pd.DataFrame, list[str]]:
    """Long texts of ``shown`` (cells already strings) replaced by ``[n]``, with the notes in order (one number per
    distinct text). A cell is a footnote when its column matches :data:`NOTE_COLUMNS` and its text is longer than
    ``note_chars`` (or, with ``repeated``, appears on more than one row), or when it is longer than ``long_chars``."""
    import re

    notes: dict[str, int] = {}
    out = shown.copy()
    for col in out.columns:
        is_note = bool(re.search(NOTE_COLUMNS, str(col)))
        counts = out[col].value_counts() if repeated else None

        def mark(v, is_note=is_note, counts=counts):
            if not isinstance(v, str) or not v:
                return v
            long_note = is_note and (
                len(v) > note_chars or (counts is not None and counts.get(v, 0) > 1 and len(v) > 40)
            )
            if long_note or (long_chars is not None and len(v) > long_chars):
                return f"[{notes.setdefault(v, len(notes) + 1)}]"
            return v

        out[col] = out[col].map(mark)
    return out, [f"[{n}] {text}" for text, n in notes.items()]


TABLE_STYLE = (
    "<style>.accelbench-table{overflow-x:auto;max-width:96vw}"
    ".accelbench-table table{border-collapse:collapse;font-size:0.85em;margin:0.4em 0}"
    ".accelbench-table td{max-width:30em}"
    ".accelbench-table th,.accelbench-table td{border:1px solid #bbb;padding:2px 6px;text-align:left;"
    "vertical-align:top}.accelbench-table th{background:#eee}.accelbench-table .caption{font-size:0.9em;"
    "max-width:70em}.accelbench-table .notes{font-size:0.8em;max-width:70em}</style>"
)


def html_table(shown: pd.DataFrame, caption: str, notes: list[str], title: str | None = None) -> str:
    """An HTML fragment (no ``<html>``: the report embeds it in its landing page): optional ``<h3>`` title, the
    caption, the table (escaped), the footnotes."""
    import html

    head = f"<h3>{html.escape(title)}</h3>" if title else ""
    body = shown.to_html(index=False, escape=True, border=0, na_rep="")
    foot = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return (
        f'<div class="accelbench-table">{TABLE_STYLE}{head}<p class="caption">{html.escape(caption)}</p>{body}'
        + (f'<ul class="notes">{foot}</ul>' if foot else "")
        + "</div>\n"
    )


def write_table(
    df: pd.DataFrame,
    stem: str | Path,
    caption: str,
    float_format: str | None = None,
    empty: str | None = None,
    title: str | None = None,
) -> list[Path]:
    """Write ``df`` as ``<stem>.csv`` (rounded to the precision measured, :func:`csv_frame`), ``<stem>.md``,
    ``<stem>.tex`` and ``<stem>.html`` (fixed decimals per unit, :func:`column_format`, unless ``float_format`` is
    given for every column). Markdown and LaTeX stay narrow: long reasons and error texts become numbered footnotes
    below the table (:func:`footnoted`); the HTML fragment (for the report's landing page) keeps them in the cells
    unless very long or repeated.

    Args:
        empty: the one line printed instead of a header-only table when ``df`` has no rows (why nothing is there).
        title: a heading of the HTML fragment (default: none).

    Returns the written paths.
    """
    import html

    from accelbench.core import tree

    stem = Path(stem)
    paths = [stem.with_suffix(".csv"), stem.with_suffix(".md"), stem.with_suffix(".tex"), stem.with_suffix(".html")]
    with tree.open_output(paths[0], "w", newline="") as fh:  # below <results>, following no link
        csv_frame(df).to_csv(fh, index=False)
    if df.empty and empty:
        tree.write_output(paths[1], f"{caption}\n\n{empty}\n")
        tree.write_output(paths[2], f"% {caption}\n{empty}\n")
        tree.write_output(
            paths[3],
            f'<div class="accelbench-table">{f"<h3>{html.escape(title)}</h3>" if title else ""}'
            f'<p class="caption">{html.escape(caption)}</p><p>{html.escape(empty)}</p></div>\n',
        )
        return paths

    def cell(v, fmt):
        if v is None or (isinstance(v, float) and pd.isna(v)):
            return ""
        if isinstance(v, float):
            return fmt.format(v)
        return v if isinstance(v, str) else str(v)

    shown = df.astype(object).copy()
    for col in shown.columns:
        fmt = float_format or column_format(str(col))
        shown[col] = [cell(v, fmt) for v in shown[col]]
    narrow, notes = footnoted(shown, NOTE_CHARS, LONG_CHARS)
    foot = ("\n" + "\n".join(f"{n}  " for n in notes)) if notes else ""
    # a `|` would split the row into cells, a line break would end it (a device name with a newline)
    md = narrow.map(lambda v: " ".join(v.replace("|", "\\|").splitlines()) if isinstance(v, str) else v)
    tree.write_output(
        paths[1],
        f"{caption}\n\n" + md.to_markdown(index=False, disable_numparse=True) + "\n" + foot + ("\n" if foot else ""),
    )
    latex = narrow.to_latex(index=False, caption=caption, escape=True, longtable=False)
    tree.write_output(paths[2], latex + "".join(f"\\noindent{{\\footnotesize {_tex(n)}}}\\par\n" for n in notes))
    wide, html_notes = footnoted(shown, HTML_NOTE_CHARS, None, repeated=True)
    tree.write_output(paths[3], html_table(wide, caption, html_notes, title))
    return paths
