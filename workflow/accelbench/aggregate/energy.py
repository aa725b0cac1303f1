"""Energy beside time, for every experiment and every system in the checkout.

Reads ``measurements.energy`` (:mod:`accelbench.measure.energy`) of every ``ok`` result of every experiment, this
system's and those copied in or committed (reference runs), and writes:

* ``energy.{csv,md,tex}``: one row per result: the main phase's step time (its clock, median ms) beside its energy
  (J per step, median over windows, summed over the job's devices), average power (W), the headline energy per work
  unit (J per image, per token, per 1k evaluated tokens, ...) and throughput per watt; ``energy`` says ``ok``,
  ``unsupported`` (with the reason), ``off``, or ``not recorded`` (a result made before the meter existed);
  ``model``: what ran (:func:`.common.model_display`); ``flag``: a metered phase whose average power per device is
  above the board's power limit (the limit the result recorded, else ``board_power.csv`` beside the SR3 reference):
  not a power the board can draw, so the row's energy is not reliable (:func:`power_flag`);
* ``energy_units.{csv,md,tex}``: every energy-per-unit and per-watt number of every result, each labelled
  ``measured`` or ``projection`` (Study A's 250-step sample, SR3's 40,000 iterations of Study B);
* ``fig_time_vs_energy.png``: per experiment, step time vs J per step, one colour per system; on the SR3 panel the
  published Study B times (one device; no energy published) as labelled vertical lines.

Everything says what it is: device-level board energy (:data:`accelbench.measure.energy.LABEL`), not MLPerf Power.

Example::

    accelbench energy-aggregate --results results/*/sr3_scaling/*/*/result.json \\
        --reference-dir resources/reference --out-dir results/energy
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from accelbench.aggregate.common import joined_labels, load_results, model_display, write_table
from accelbench.aggregate.figures import FONT, best_per_hardware, device_of, save_figure, series_label, wrap
from accelbench.aggregate.figures import published as published_origin
from accelbench.core import files, tree
from accelbench.core.validate import power_limit_w, power_over_limit
from accelbench.errors import DataError
from accelbench.measure.energy import LABEL

# the case of a result: these config values, where present, in this order (no experiment is named)
CASE_KEYS = (
    "model",
    "model_name",
    "configuration",
    "precision",
    "method",
    "bitset",
    "attention",
    "strategy",
    "devices",
)
# the step time of results made before the meter (no measurements.energy.step_ms): the first of these present
TIME_KEYS = (
    ("train_step", "median", 1.0),
    ("iteration", "median", 1.0),
    ("step", "median", 1.0),
    ("eval_time", "value", 1e3),
)


def _case(result: dict) -> str:
    c = result.get("config") or {}
    parts = [
        f"n{c[k]}" if k == "devices" else str(c[k])
        for k in CASE_KEYS
        if c.get(k) not in (None, "", "none") and not isinstance(c.get(k), dict)
    ]
    return "/".join(dict.fromkeys(parts))


def _time_ms(m: dict) -> float | None:
    e = m.get("energy") or {}
    if e.get("step_ms") is not None:
        return e["step_ms"]
    for key, field, scale in TIME_KEYS:
        v = (m.get(key) or {}).get(field) if isinstance(m.get(key), dict) else None
        if isinstance(v, (int, float)):
            return v * scale
    return None


BOARD_POWER = "board_power.csv"  # beside the SR3 reference (resources/reference/)


def read_board_power(path: str | Path | None) -> pd.DataFrame:
    """Board power limits (``device_match``, ``power_limit_w`` in W per device, ``source``); empty without the file."""
    cols = ["device_match", "power_limit_w", "source"]
    if not path or not (Path(path).exists() or Path(path).is_symlink()):  # a FIFO there: one line, not "no table"
        return pd.DataFrame(columns=cols)
    return files.read_frame(path, "board power table", error=DataError, comment="#").reindex(columns=cols)


def board_limit(result: dict, boards: pd.DataFrame | None = None) -> tuple[float | None, str]:
    """``(W per device, where from)``: the enforced limit the result recorded (:func:`accelbench.core.validate.
    power_limit_w`), else the first ``boards`` row whose ``device_match`` is in the provenance's device name, else
    ``(None, "")``."""
    recorded = power_limit_w(result)
    if recorded is not None:
        return recorded, "recorded"
    name = str(((result.get("environment") or {}).get("hardware") or {}).get("device_name") or "")
    for _, b in (boards if boards is not None else pd.DataFrame()).iterrows():
        if str(b["device_match"]) and str(b["device_match"]) in name:
            return float(b["power_limit_w"]), str(b["source"])
    return None, ""


def power_flag(result: dict, boards: pd.DataFrame | None = None) -> str | None:
    """Why a result's energy is not reliable, or None: each metered phase whose average power per device (W) is above
    the board's limit (:func:`board_limit`), with the windows it rests on (one window: ``one window above the board
    limit``). The measured numbers stay as recorded."""
    limit, where = board_limit(result, boards)
    if limit is None:
        return None
    over = power_over_limit((result.get("measurements") or {}).get("energy"), limit)
    if not over:
        return None
    parts = [
        f"{p['phase']}: {p['power_w']:.1f} W per device"
        + (
            " from one window above the board limit"
            if p["windows"] == 1
            else f" (median of {p['windows']} windows) above the board limit"
        )
        for p in over
    ]
    return f"{'; '.join(parts)} ({limit:g} W, {'recorded' if where == 'recorded' else 'board_power.csv'}): not reliable"


def rows(results: list[dict], boards: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per ``ok`` result (see the module docstring); ``energy_units`` rows under ``attrs["units"]``;
    ``boards``: :func:`read_board_power` (the limits of results that recorded none)."""
    out, units = [], []
    for r in results:
        if r.get("status") != "ok":
            continue
        m = r.get("measurements") or {}
        e = m.get("energy")
        base = {"system": r["_hardware"], "series": r["_series"], "experiment": r["experiment"], "case": _case(r)}
        row = {
            **base,
            "model": model_display(r) if isinstance(m.get("model"), dict) else None,
            "flag": power_flag(r, boards),
            "phase": (e or {}).get("main_phase"),
            "step_ms": _time_ms(m),
            "energy": (e or {}).get("status", "not recorded"),
            "j_per_step": None,
            "power_w": None,
            "per_unit": None,
            "unit": None,
            "per_watt": None,
            "per_watt_unit": None,
            "source": None,
            "reliable": None,
            "reason": (e or {}).get("reason"),
        }
        if e and e.get("status") == "ok":
            pu, pw = e.get("per_unit") or {}, e.get("per_watt") or {}
            head_u = next(iter(pu.values()), None)
            head_w = next(iter(pw.values()), None)
            row.update(
                {
                    "j_per_step": e["j_per_step"],
                    "power_w": e["power_w"],
                    "source": e.get("source"),
                    "reliable": "yes" if e.get("reliable") else "no",
                    "per_unit": head_u["value"] if head_u else None,
                    "unit": head_u["unit"] if head_u else None,
                    "per_watt": head_w["value"] if head_w else None,
                    "per_watt_unit": head_w["unit"] if head_w else None,
                }
            )
            for name, v in pu.items():
                units.append(
                    {
                        **base,
                        "quantity": name,
                        "value": v["value"],
                        "unit": v["unit"],
                        "label": v.get("label", "measured"),
                        "phase": v.get("phase"),
                    }
                )
            for name, v in pw.items():
                units.append(
                    {
                        **base,
                        "quantity": name,
                        "value": v["value"],
                        "unit": v["unit"],
                        "label": "measured",
                        "phase": v.get("phase"),
                    }
                )
        out.append(row)
    df = pd.DataFrame(
        out,
        columns=[
            "system",
            "series",
            "experiment",
            "case",
            "model",
            "phase",
            "step_ms",
            "energy",
            "j_per_step",
            "power_w",
            "per_unit",
            "unit",
            "per_watt",
            "per_watt_unit",
            "source",
            "reliable",
            "flag",
            "reason",
        ],
    )
    df.attrs["units"] = pd.DataFrame(
        units, columns=["system", "series", "experiment", "case", "quantity", "value", "unit", "label", "phase"]
    )
    return df.sort_values(["experiment", "case", "system"], kind="stable").reset_index(drop=True)


def published_times(reference_dir: str | Path | None) -> pd.DataFrame:
    """Published step times without energy (``experiment``, ``study``, ``system``, ``step_ms``, ``note``) of every
    aggregated experiment whose tables module gives ``published_times(reference_path)`` (SR3's: Study B's wall
    minutes per 40,000 iterations on one device), read from its reference file under ``reference_dir``; empty
    without one."""
    from accelbench.core import registry

    frames = []
    for e in registry.aggregated():
        path = Path(reference_dir) / e.reference if reference_dir and e.reference else None
        hook = getattr(e.load_tables(), "published_times", None) if path and path.exists() else None
        if hook:
            frames.append(hook(path).assign(experiment=e.name, study=e.study))
    columns = ["experiment", "study", "system", "step_ms", "note"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def fig_time_vs_energy(df: pd.DataFrame, published: pd.DataFrame, path: str | Path) -> list[str]:
    """Step time (ms) vs J per step per experiment, one colour per system (log-log); published times without energy
    as vertical lines on the panel of the experiment they belong to (:func:`published_times`)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    ok = df[df["energy"] == "ok"]
    if not ok.empty:  # per hardware the run with the most energy results, then the least energy per step; rest: tables
        ok = ok.assign(_hardware=ok["system"].map(device_of), _kind="measured")
        ok = best_per_hardware(ok, ["series", "system"], lambda g: (-len(g), float(g["j_per_step"].median())))
    panels = sorted(set(ok["experiment"])) or ["none"]
    ncols = min(3, len(panels))  # at most 3 panels a row: the image stays within a page's width
    nrows = -(-len(panels) // ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.2 * ncols + 1.5, 4.2 * nrows), squeeze=False)
    for ax in grid.flat[len(panels) :]:
        ax.set_visible(False)
    axes = [list(grid.flat[: len(panels)])]
    systems = sorted(set(ok["system"]))
    colours = {s: plt.cm.tab10(i % 10) for i, s in enumerate(systems)}
    for ax, exp in zip(axes[0], panels):
        part = ok[ok["experiment"] == exp]
        if part.empty:
            reasons = "; ".join(sorted(set(df["reason"].dropna())))[:300] or "no result"
            ax.text(
                0.5,
                0.5,
                wrap(f"no energy measured: {reasons}", fig, FONT["label"], 0.8),
                ha="center",
                va="center",
                fontsize=FONT["label"],
                transform=ax.transAxes,
            )
            ax.set_axis_off()
            continue
        for system, g in part.groupby("system"):
            ax.scatter(
                g["step_ms"],
                g["j_per_step"],
                color=colours[system],
                s=22,
                label=series_label(
                    "measured here" if g["series"].iloc[0] == "measured" else g["series"].iloc[0], system
                ),
            )
        for i, (_, p) in enumerate(published[published["experiment"] == exp].iterrows()):
            ax.axvline(
                p["step_ms"],
                color=plt.cm.Dark2(i % 8),
                lw=1.0,
                ls="--",
                label=series_label(published_origin(f"Study {p['study']}"), p["system"], "paper", p["note"]),
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.margins(0.15)
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            # plain numbers (35, 100), not 3.5 x 10^1; minor ticks labelled where the axis spans few decades
            digits = "123456789" if hi < 10 * lo else "25" if hi < 100 * lo else ""
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(FuncFormatter(lambda v, _, d=digits: f"{v:g}" if f"{v:g}"[0] in d else ""))
        ax.set_title(exp, fontsize=FONT["title"])
        ax.set_xlabel(f"{part['phase'].iloc[0]} time (ms)", fontsize=FONT["label"])
        ax.set_ylabel("energy per step (J)", fontsize=FONT["label"])
        ax.tick_params(labelsize=FONT["tick"])
    handles = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.suptitle(wrap(f"Time vs energy per step ({LABEL})", fig, FONT["title"]), fontsize=FONT["title"])
    bottom = 0.0
    if handles:
        ncol = min(2, len(handles))
        lines = sum(wrap(k, fig, FONT["legend"], 0.45 / ncol * 2).count("\n") + 1 for k in handles) / ncol
        fig.set_figheight(fig.get_figheight() + 0.17 * lines)
        bottom = min(0.6, (0.17 * lines + 0.2) / fig.get_figheight())
        fig.legend(
            list(handles.values()),
            [wrap(k, fig, FONT["legend"], 0.45 / ncol * 2) for k in handles],
            loc="lower center",
            bbox_to_anchor=(0.5, 0.0),
            fontsize=FONT["legend"],
            ncol=ncol,
            frameon=False,
        )
    fig.tight_layout(rect=(0, bottom, 1, 0.92))
    return save_figure(fig, path)


def aggregate(result_paths: list[str | Path], reference_dir: str | Path | None, out_dir: str | Path) -> dict:
    """Write ``energy.{csv,md,tex}``, ``energy_units.{csv,md,tex}`` and ``fig_time_vs_energy.png`` (module docstring).

    Raises:
        ResultError: a missing or corrupt result file.
    """
    out_dir = tree.make_output_dir(out_dir)  # below <results>, following no link
    results = load_results(result_paths)
    df = rows(results, read_board_power(Path(reference_dir) / BOARD_POWER if reference_dir else None))
    write_table(
        df,
        out_dir / "energy",
        f"Time and energy per step of every result ({LABEL}; systems: {joined_labels(df, 'system')}): step "
        f"time (ms, the clock's median), J per step (median over windows of >= 1 s, summed over the job's "
        f"devices), W, energy per unit and throughput per watt; host CPU, memory, network and cooling are "
        f"not counted. flag: a metered phase whose average power per device is above the board's power limit "
        f"(recorded in the result, else board_power.csv): not a power the board can draw, the energy is not "
        f"reliable",
        empty="no ok result",
    )
    write_table(
        df.attrs["units"],
        out_dir / "energy_units",
        f"Energy per work unit and throughput per watt ({LABEL}); `projection` = a measured median times a step count",
        empty="no result with energy",
    )
    fig_time_vs_energy(df, published_times(reference_dir), out_dir / "fig_time_vs_energy.png")
    return {
        "table": out_dir / "energy.csv",
        "units": out_dir / "energy_units.csv",
        "figure": out_dir / "fig_time_vs_energy.png",
    }
