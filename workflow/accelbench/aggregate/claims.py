"""One claims table for both studies: every published claim checked against every system's results (the engine).

Inputs: the result files of every experiment (any systems, validated first by rule ``validate_results``), the
claims of Study A (``study_a_claims.csv``) and Study B (``study_b_claims.csv``), and Study B's SR3 reference times
(for the published throughput order). Each claim row names the measured quantity and a check (data, not code):

* ``range``: ``low <= measured <= high``; ``min``: ``measured >= low``; ``max``: ``measured <= high``;
* ``true``: the measured property holds.

A system is checked on every observation the claim covers (each bit set, device count, model family...);
``holds`` needs all of them to pass. The verdict is one of :data:`VERDICTS`; ``not measured here`` always says
why: the experiment was not run, the case was ``unsupported``/``OOM`` (with the result's reason), the claim is
about other hardware (``applies_to``; the value measured here is still shown), the observations could not be made
(:class:`NotMeasured`, e.g. a rate counter that covers too little of a step, see the study modules), every pair lies
within its timing spread (``unresolved``), or the result was flagged noisy (``measurements.noise.noisy``: not
measured reliably). Hardware labels come from each result's provenance.

This module holds no study-specific code and imports no study module. The observations behind a claim come from the
aggregation module of its experiment, found through the registry (:func:`accelbench.registry.aggregated`,
imported by name): each such module may define

* ``CLAIM_CHECKS``: ``{experiment: check}``, ``check(claim, inputs) -> list of claims-table rows``, where ``inputs``
  is :class:`ClaimInputs` (the results by experiment, rows computed once per table); a check builds its rows with
  :func:`verdict_row` (one per system) or :func:`not_run`;
* ``claims_layout(df)``: its claims file in this table's shape (``quantity``, ``selector``, ``experiment``, ``claim``,
  ``published``), or None when ``df`` is not in its layout (Study A's file has its own columns).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .. import registry  # noqa: E402
from ..errors import DataError  # noqa: E402
from .common import HTML_NOTE_CHARS, footnoted, html_table, load_results, noise_why, write_table  # noqa: E402
from .figures import FONT, save_figure  # noqa: E402

VERDICTS = ("holds", "does not hold", "not measured here")
COLUMNS = ["study", "claim_id", "claim", "source", "quantity", "tolerance", "published", "system", "hardware",
           "measured", "verdict", "why"]


class NotMeasured(Exception):
    """A claim cannot be checked on a system; the message says why, ``measured`` what was observed all the same."""

    def __init__(self, why: str, measured: str = ""):
        super().__init__(why)
        self.measured = measured


@dataclass
class Observation:
    """One measured value a claim is checked on (``value``: float or bool), its description and the results used."""

    value: float | bool
    text: str
    results: list[dict] = field(default_factory=list)
    unresolved: bool = False  # inside the measurement spread: evidence neither way, left out of the verdict
    note: str = ""  # how it was measured, when that is not what the claim names (a proxy); shown in measured and why


# --------------------------------------------------------------------------- the study modules
def aggregation_modules() -> list[ModuleType]:
    """The aggregation module of every aggregated experiment of the registry, in registry order, each once."""
    names = dict.fromkeys(e.aggregate for e in registry.aggregated())
    return [importlib.import_module(f"{__package__}.{name}") for name in names]


def claim_checks() -> dict[str, Callable]:
    """``{experiment: check}`` from the ``CLAIM_CHECKS`` of every aggregation module.

    Raises:
        DataError: two modules check the same experiment.
    """
    checks: dict[str, Callable] = {}
    owner: dict[str, str] = {}
    for module in aggregation_modules():
        for experiment, check in getattr(module, "CLAIM_CHECKS", {}).items():
            if experiment in checks:
                raise DataError(f"claims of {experiment} are checked by both {owner[experiment]} and "
                                f"{module.__name__}")
            checks[experiment], owner[experiment] = check, module.__name__
    return checks


@dataclass
class ClaimInputs:
    """What the claim checks read: the loaded results by experiment, the published files given to :func:`aggregate`
    (by its argument's name, e.g. ``sr3_reference``), and rows computed once per table (:meth:`rows`)."""

    by_experiment: dict[str, list[dict]]
    published: dict[str, Path] = field(default_factory=dict)
    _rows: dict = field(default_factory=dict, repr=False)

    def of(self, experiment: str) -> list[dict]:
        """The results of ``experiment`` (empty when it was not run)."""
        return self.by_experiment.get(experiment, [])

    def rows(self, fn: Callable[[list[dict]], pd.DataFrame], experiment: str) -> pd.DataFrame:
        """``fn(results of experiment)`` (a study module's row builder), computed once for the whole table."""
        key = (fn, experiment)
        if key not in self._rows:
            self._rows[key] = fn(self.of(experiment))
        return self._rows[key]


# --------------------------------------------------------------------------- reading
def read_claims(path: str | Path, study: str) -> pd.DataFrame:
    """A claims CSV (``#`` lines are its source notes) in one shape: ``study, claim_id, claim, source, experiment,
    quantity, selector, check, low, high, published, applies_to, note``.

    Raises:
        DataError: the file is missing or lacks a ``check`` column.
    """
    try:
        df = pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise DataError(f"claims file not found: {path}") from None
    return claims_frame(df, study, str(path))


def claims_frame(df: pd.DataFrame, study: str, name: str = "claims") -> pd.DataFrame:
    """:func:`read_claims` on a claims table already read (``name`` labels it in errors). A file without a
    ``quantity`` column is in a study's own layout: the ``claims_layout`` of its aggregation module reshapes it."""
    if "check" not in df:
        raise DataError(f"{name}: no 'check' column (each claim needs check, low, high)")
    df = df.copy()
    if "quantity" not in df:
        for module in aggregation_modules():
            layout = getattr(module, "claims_layout", None)
            shaped = layout(df) if layout is not None else None
            if shaped is not None:
                df = shaped
                break
    df.insert(0, "study", study)
    return df


def _applies(claim: pd.Series, system: str, hardware: str) -> bool:
    tokens = [t for t in str(claim.get("applies_to", "") or "").lower().split("/") if t]
    return not tokens or system.split(" (")[0].lower() in tokens or any(t in hardware.lower() for t in tokens)


def tolerance_text(claim: pd.Series) -> str:
    c, lo, hi = claim["check"], claim.get("low", ""), claim.get("high", "")
    return {"range": f"{lo} <= x <= {hi}", "min": f"x >= {lo}", "max": f"x <= {hi}", "true": "property holds"}.get(c, c)


def passes(claim: pd.Series, value: float | bool) -> bool:
    """Whether ``value`` satisfies the claim's check. Raises DataError on an unknown check."""
    c = claim["check"]
    if c == "true":
        return bool(value)
    v = float(value)
    lo = float(claim["low"]) if str(claim.get("low", "")).strip() else -math.inf
    hi = float(claim["high"]) if str(claim.get("high", "")).strip() else math.inf
    if c in ("range", "min", "max"):
        return lo <= v <= hi
    raise DataError(f"claim {claim['claim_id']}: unknown check {c!r} (range, min, max, true)")


# --------------------------------------------------------------------------- the table
def claim_cells(claim: pd.Series) -> dict:
    """The cells of a claims-table row that describe the claim (the same on every system)."""
    return {"study": claim["study"], "claim_id": claim["claim_id"], "claim": claim["claim"], "source": claim["source"],
            "quantity": claim["quantity"], "tolerance": tolerance_text(claim), "published": claim["published"]}


def _measured_text(obs: list[Observation]) -> str:
    notes = list(dict.fromkeys(o.note for o in obs if o.note))
    return (f"({' / '.join(notes)}) " if notes else "") + "; ".join(o.text for o in obs)


def verdict_row(claim: pd.Series, system: str, hardware: str, evaluate, timing_free: Collection[str] = (),
                direction_only: Collection[str] = ()) -> dict:
    """Evaluate one claim on one system: ``evaluate()`` returns the observations or raises NotMeasured.

    A claim about other hardware (``applies_to``) is ``not measured here`` with the value measured here still shown.
    A result flagged noisy makes the claim ``not measured here`` (not measured reliably) unless its quantity is in
    ``timing_free`` (quantities that do not depend on timing: sizes, perplexity, sensitivity ranks, OOM...).
    Observations marked ``unresolved`` (inside their timing spread) are listed but left out of the verdict; if all
    are, the claim is ``not measured here``. A quantity in ``direction_only`` is judged on its direction only (the
    why says the published magnitude is not judged)."""
    row = {**claim_cells(claim), "system": system, "hardware": hardware, "measured": ""}
    if not _applies(claim, system, hardware):
        why = f"the claim is about {claim['applies_to'].upper()}; this is {hardware}"
        try:
            row["measured"] = _measured_text(evaluate())
        except NotMeasured as exc:
            row["measured"], why = exc.measured, f"{why} (and here: {exc})"
        return {**row, "verdict": "not measured here", "why": why}
    try:
        obs = evaluate()
    except NotMeasured as exc:
        return {**row, "measured": exc.measured, "verdict": "not measured here", "why": str(exc)}
    row["measured"] = _measured_text(obs)
    noisy = [w for o in obs for r in o.results if (w := noise_why(r))]
    if noisy and claim["quantity"] not in timing_free:
        return {**row, "verdict": "not measured here", "why": f"not measured reliably: result flagged noisy ({noisy[0]})"}
    unresolved = [o for o in obs if o.unresolved]
    judged = [o for o in obs if not o.unresolved]
    if not judged:
        return {**row, "verdict": "not measured here", "why": "every pair within its timing spread (p10-p90 overlap)"}
    of = f"{len(judged)} resolved pair{'s' if len(judged) > 1 else ''}" if unresolved else str(len(judged))
    tail = (f"; {len(unresolved)} pair{'s' if len(unresolved) > 1 else ''} within "
            f"{'their' if len(unresolved) > 1 else 'its'} timing spread") if unresolved else ""
    if claim["quantity"] in direction_only:
        tail += " (direction; the published magnitude is not judged)"
    notes = list(dict.fromkeys(o.note for o in obs if o.note))
    if notes:
        tail += "; measured with a proxy, not the claimed quantity: " + " / ".join(
            n.removeprefix("proxy: ") for n in notes)
    failed = [o for o in judged if not passes(claim, o.value)]
    if failed:
        return {**row, "verdict": "does not hold",
                "why": f"{len(failed)} of {of} " + ("false" if claim["check"] == "true" else
                                                     f"outside {tolerance_text(claim)}") + f": {failed[0].text}{tail}"}
    within = "true" if claim["check"] == "true" else f"within {tolerance_text(claim)}"
    return {**row, "verdict": "holds", "why": f"{len(judged)} of {of} {within}{tail}"}


def _by_experiment(results: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in results:
        out.setdefault(r["experiment"], []).append(r)
    return out


def per_system_rows(claim: pd.Series, inputs: "ClaimInputs", result_rows: Callable[[list[dict]], pd.DataFrame],
                    key: Callable[[dict], tuple], observations, **verdict_kw) -> list[dict]:
    """The rows of a claim judged once per system (:func:`verdict_row`): ``observations(claim, rows, results)`` gets
    that system's table rows and its results keyed by ``key(result)``; one :func:`not_run` row without results."""
    exp = claim["experiment"]
    group = inputs.of(exp)
    if not group:
        return [not_run(claim, exp)]
    rows = []
    for system, g in inputs.rows(result_rows, exp).groupby("system"):
        res = {key(r): r for r in group if r["config"]["system"]["name"] == system}
        rows.append(verdict_row(claim, system, g["hardware"].iloc[0],
                                lambda c=claim, g=g, res=res: observations(c, g, res), **verdict_kw))
    return rows


def not_run(claim: pd.Series, experiment: str) -> dict:
    """The one row of a claim whose experiment has no results."""
    return {**claim_cells(claim), "system": "(none)", "hardware": "none", "measured": "",
            "verdict": "not measured here",
            "why": f"no {experiment} results (add {experiment} to config `experiments`, or copy results in)"}


def claims_table(results: list[dict], claims: pd.DataFrame, sr3_reference: str | Path | None = None) -> pd.DataFrame:
    """Every claim against every system's results (see the module docstring for the verdicts): the rows of each claim
    come from the check of its experiment (:func:`claim_checks`). ``sr3_reference``: Study B's published SR3 times.

    Raises:
        DataError: a claim of an experiment with results that no aggregation module checks, or a row without a
            verdict or a reason.
    """
    inputs = ClaimInputs(_by_experiment(results), {"sr3_reference": Path(sr3_reference)} if sr3_reference else {})
    checks = claim_checks()
    rows = []
    for _, claim in claims.iterrows():
        check = checks.get(claim["experiment"])
        if check is not None:
            rows += check(claim, inputs)
        elif not inputs.of(claim["experiment"]):
            rows.append(not_run(claim, claim["experiment"]))
        else:
            raise DataError(f"claim {claim['claim_id']}: unknown experiment {claim['experiment']!r}")
    df = pd.DataFrame(rows, columns=COLUMNS)
    if not (df["verdict"].isin(VERDICTS).all() and (df["why"].astype(str).str.len() > 0).all()):
        raise DataError("claims table: a row without a verdict or a reason (a bug in accelbench.aggregate.claims)")
    return df


# --------------------------------------------------------------------------- figure
VERDICT_COLOUR = {"holds": "#8fd18a", "does not hold": "#f08a8a", "not measured here": "#d9d9d9"}
NO_RESULTS = "no results"


def origin_column(df: pd.DataFrame) -> pd.Series:
    """The origin of each claims row, from its hardware label: ``reference run (<hardware>, <date>)`` for a
    committed reference run's results, ``measured here`` for this checkout's, ``no results`` where nothing ran."""
    def one(hw: str) -> str:
        hw = str(hw)
        if hw in ("none", ""):
            return NO_RESULTS
        if hw.startswith("reference run (") and "): " in hw:
            return hw.split("): ", 1)[0] + ")"
        return "measured here"
    return df["hardware"].map(one) if not df.empty else pd.Series(dtype=str)


def verdict_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Rows (claim x system) per study, origin and verdict: measured here and each reference run counted apart."""
    d = df.assign(origin=origin_column(df))
    counts = d.groupby(["study", "origin", "verdict"]).size().unstack("verdict", fill_value=0) if not d.empty \
        else pd.DataFrame()
    return counts.reindex(columns=list(VERDICTS), fill_value=0)


def summary_line(df: pd.DataFrame) -> str:
    """``measured here: 3 holds, 0 does not hold, 20 not measured here; reference run (H200, ...): ...`` (rows of
    claim x system, each origin apart)."""
    counts = verdict_counts(df)
    if counts.empty:
        return "no claims"
    by = counts.groupby(level="origin").sum()
    return "; ".join(f"{o}: " + ", ".join(f"{int(r[v])} {v}" for v in VERDICTS) for o, r in by.iterrows())


def fig_claims(df: pd.DataFrame, path: str | Path) -> list[str]:
    """Verdict counts as stacked horizontal bars, one bar per (study, origin): measured here and each reference run
    apart (one count per claim and system). The claims themselves are in the HTML table of the report and in
    claims.csv/.md. Returns the figure's problems."""
    counts = verdict_counts(df)
    rows = [f"Study {st}: {o}" for st, o in counts.index] if not counts.empty else []
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.45 * max(1, len(rows))))
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for v in VERDICTS:
        vals = counts[v].to_numpy(dtype=float) if not counts.empty else np.zeros(0)
        ax.barh(y, vals, left=left, color=VERDICT_COLOUR[v], label=v)
        left += vals
    ax.set_yticks(y, rows, fontsize=FONT["tick"])
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("claims x systems (count)")
    ax.set_ylabel("study: origin of the results")
    ax.set_title("Published claims of Study A and Study B: verdicts, each origin counted apart", fontsize=FONT["label"],
                 loc="left")
    if rows:
        ax.legend(fontsize=FONT["legend"], loc="upper left", bbox_to_anchor=(1.01, 1), title="verdict",
                  title_fontsize=FONT["legend"])
    else:
        ax.text(0.5, 0.5, "no claims", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return save_figure(fig, path)


def aggregate(result_paths: list[str | Path], claims_paths: list[str | Path], sr3_reference: str | Path,
              out_dir: str | Path) -> pd.DataFrame:
    """Write ``claims.{csv,md,tex,html}`` (with an ``origin`` column: measured here / reference run / no results)
    and ``fig_claims.png`` into ``out_dir``; ``claims_paths``: Study A's, Study B's.

    Raises:
        ResultError: a missing or corrupt result (named); DataError: a bad claims or reference file.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = load_results(result_paths)
    claims = pd.concat([read_claims(p, s) for p, s in zip(claims_paths, ("A", "B"))], ignore_index=True)
    df = claims_table(results, claims, sr3_reference)
    shown = df.copy()
    shown.insert(shown.columns.get_loc("hardware"), "origin", origin_column(df))
    write_table(shown, out / "claims", "Published claims of Study A (arXiv 2606.19365) and Study B (arXiv 2607.05400) "
                "checked against each system's results: holds / does not hold / not measured here (why). "
                f"Counted apart (one count per claim and system): {summary_line(df)}.",
                title="Claims: published vs measured")
    (out / "claims.html").write_text(claims_html(shown, summary_line(df)))
    fig_claims(df, out / "fig_claims.png")
    return df


BRIEF = ["claim_id", "claim", "published", "origin", "system", "measured", "verdict", "why"]


def claims_html(shown: pd.DataFrame, summary: str) -> str:
    """The claims table for the report's first page: the columns a reviewer reads first (:data:`BRIEF`; the rest
    is in claims.csv), verdict cells coloured, measured here and each reference run counted apart in the caption."""
    brief = shown.reindex(columns=BRIEF).astype(object).where(shown.reindex(columns=BRIEF).notna(), "")
    brief = brief.map(str)
    cells, notes = footnoted(brief, HTML_NOTE_CHARS, 240, repeated=True)
    html = html_table(cells, f"Published claims of Study A (arXiv 2606.19365) and Study B (arXiv 2607.05400), one row "
                      f"per claim and system. Counted apart: {summary}. Every column: results/claims/claims.csv.",
                      notes, title="Claims: published vs measured")
    style = "".join(f".accelbench-table td.v-{v.replace(' ', '-')}{{background:{c}}}" for v, c in VERDICT_COLOUR.items())
    for v in VERDICTS:
        html = html.replace(f"<td>{v}</td>", f'<td class="v-{v.replace(" ", "-")}">{v}</td>')
    return html.replace("</style>", style + "</style>", 1)
