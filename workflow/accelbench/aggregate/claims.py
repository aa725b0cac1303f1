"""One claims table for both studies: every published claim checked against every system's results (the engine).

Inputs: the result files of every experiment (any systems, validated first by rule ``validate_results``), the
claims of Study A (``study_a_claims.csv``) and Study B (``study_b_claims.csv``), and Study B's SR3 reference times
(for the published throughput order). Each claim row names the measured quantity and a check (data, not code):

* ``range``: ``low <= measured <= high``; ``min``: ``measured >= low``; ``max``: ``measured <= high``;
* ``true``: the measured property holds.

and the evidence a verdict needs (data too):

* ``hardware``: where the claim was published (``a100``, ``h100``, ``gaudi2``, ``any``...), judged by the one
  scope policy of :mod:`accelbench.aggregate.scope`;
* ``needs``: the observations that make the evidence complete (``|``-separated keys, ``fnmatch`` patterns: bit sets
  ``fake/8_4_4``, model and cards ``llama-3.1-8b/2``, device counts ``4``, configurations); blank = one observation;
* ``setting``: what like for like means (``model=tinyllama*;text=wikitext*``: each observation's own setting must
  match, case-insensitive ``fnmatch``);
* ``quote`` and ``quote_source``: the published words, verbatim, and where they stand.

Verdicts (:data:`VERDICTS` are their categories; the text may add a parenthesis):

* ``holds`` / ``does not hold``: every needed observation is present, like for like and outside its timing spread,
  and all pass / one fails (one failing observation is enough for ``does not hold``, the missing ones are named);
* ``partly measured (k of n)``: the observations made pass, but ``n - k`` needed ones are missing (named, with the
  partial values shown). No path gives ``holds`` from missing data;
* ``not measured here (...)``: the claim is about other hardware (``(A100 claim)``, the value measured here still
  shown), the experiment was not run, the case was ``unsupported``/``OOM`` (with the result's reason), the
  observations could not be made (:class:`NotMeasured`), every observation is within its timing spread, at a
  counter's noise floor, without signal (``(no signal)``: e.g. an accuracy at chance, which cannot show a loss),
  made on another setting (``not like for like``) or through a proxy (``(numerics proxy passes)``: what the proxy
  gave, never a verdict on the claim), or the result was flagged noisy.

Hardware labels come from each result's provenance. Every quantity has a plausible range
(``claim_quantities.csv``); a tolerance that covers it could not fail, and ``tests/unit/test_claims.py`` refuses it.

This module is the verdict engine: what a claim check builds its rows from (:class:`Observation`,
:class:`NotMeasured`, :class:`ClaimInputs`, :func:`verdict_row`, :func:`per_system_rows`, :func:`not_run`). How a
claim's check, tolerance, needs and setting read, and the cells that describe it, is
:mod:`accelbench.aggregate.claim_spec`. It holds no study-specific code and imports no experiment; reading the
claim files and building the whole table from the experiments' checks is :mod:`accelbench.aggregate.claims_table`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from accelbench.aggregate import scope
from accelbench.aggregate.claim_spec import claim_cells, needs_of, passes, setting_of, tolerance_text, with_caveat
from accelbench.aggregate.common import noise_why
from accelbench.errors import DataError

VERDICTS = ("holds", "does not hold", "partly measured", "not measured here")  # the categories of a verdict text


def category(verdict: str) -> str:
    """The category (:data:`VERDICTS`) of a verdict text: ``partly measured (1 of 3)`` -> ``partly measured``.

    Raises:
        DataError: a text of no category.
    """
    for v in VERDICTS:
        if str(verdict) == v or str(verdict).startswith(v + " ("):
            return v
    raise DataError(f"claims table: verdict {verdict!r} is none of {', '.join(VERDICTS)}")


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
    note: str = ""  # a proxy (``numerics proxy: ...``): measured, shown, never judged as the claim
    key: str = ""  # which needed observation this is (matched against the claim's ``needs``)
    setting: dict = field(default_factory=dict)  # what it was measured on (matched against the claim's ``setting``)
    floor: str = ""  # why the value sits at a counter's noise floor (shown, not judged)
    no_signal: str = ""  # why this measurement cannot show the effect (e.g. an accuracy at chance): shown, not judged


@dataclass
class ClaimInputs:
    """What the claim checks read: the loaded results by experiment, the published files given to :func:`aggregate`
    (by experiment name, e.g. ``sr3_scaling``: its published reference file), and rows computed once per table
    (:meth:`rows`)."""

    by_experiment: dict[str, list[dict]]
    published: dict[str, Path] = field(default_factory=dict)
    _rows: dict = field(default_factory=dict, repr=False)

    def of(self, experiment: str) -> list[dict]:
        """The results of ``experiment`` (empty when it was not run)."""
        return self.by_experiment.get(experiment, [])

    def rows(self, fn: Callable[[list[dict]], pd.DataFrame], experiment: str) -> pd.DataFrame:
        """``fn(results of experiment)`` (an experiment's row builder), computed once for the whole table."""
        key = (fn, experiment)
        if key not in self._rows:
            self._rows[key] = fn(self.of(experiment))
        return self._rows[key]


# --------------------------------------------------------------------------- judging a claim
def _measured_text(obs: list[Observation]) -> str:
    notes = list(dict.fromkeys(o.note.split(":")[0] for o in obs if o.note))
    return (f"({' / '.join(notes)}) " if notes else "") + "; ".join(o.text for o in obs)


def like_for_like(claim: pd.Series, obs: Observation) -> str:
    """What differs between the claim's ``setting`` and the observation's (``model SmolLM2-135M-Instruct, not
    tinyllama*``); empty when like for like. A key the observation does not report differs too."""
    diffs = []
    for key, pattern in setting_of(claim).items():
        value = str(obs.setting.get(key, "")).strip()
        if not fnmatch.fnmatch(value.lower(), pattern):
            diffs.append(f"{key} {value or '(not recorded)'}, not {pattern}")
    return "; ".join(diffs)


def _covers(obs: Observation, need: str) -> bool:
    return fnmatch.fnmatch(obs.key.lower(), need.lower())


def _would(claim: pd.Series, obs: list[Observation]) -> str:
    """``passes`` / ``fails`` (``k of n``): what the check gives on observations that do not judge the claim."""
    failed = sum(not passes(claim, o.value) for o in obs)
    return f"fails ({failed} of {len(obs)})" if failed else "passes"


def _would_here(claim: pd.Series, obs: list[Observation]) -> str:
    """What the check gives on the values measured on out-of-scope hardware, with the same rules as in scope: a
    value at a counter's noise floor is not checked (the ratio divides by noise), a proxy is named as one."""
    floor = [o for o in obs if o.floor]
    rest = [o for o in obs if not o.floor]
    parts = []
    if rest:
        proxy = " (through a proxy)" if all(o.note for o in rest) else ""
        parts.append(f"the check on the value measured here {_would(claim, rest)}{proxy}")
    if floor:
        parts.append(f"{len(floor)} value(s) at the counter's noise floor, not checked ({floor[0].floor})")
    return "; ".join(parts)


def verdict_row(
    claim: pd.Series,
    system: str,
    hardware: str,
    evaluate,
    timing_free: Collection[str] = (),
    direction_only: Collection[str] = (),
) -> dict:
    """Evaluate one claim on one system: ``evaluate()`` returns the observations or raises NotMeasured.

    In order: a claim about other hardware (:func:`accelbench.aggregate.scope.in_scope`) is ``not measured here
    (A100 claim)`` with the value measured here still shown; a result flagged noisy makes it ``not measured here``
    (not measured reliably) unless its quantity is in ``timing_free`` (sizes, perplexity, sensitivity ranks, OOM...).
    Then only observations that are like for like (the claim's ``setting``), no proxy, not at a counter's floor,
    with signal (:attr:`Observation.no_signal` empty), outside their timing spread and among the claim's ``needs``
    judge it: one failing gives ``does not hold``; all passing give ``holds`` when every need is covered, else
    ``partly measured (k of n)``; none gives ``not measured here`` naming why. A quantity in ``direction_only`` is
    judged on its direction only (the why says the published magnitude is not judged). The claim's ``caveat`` ends
    every row's why (:func:`with_caveat`)."""
    return with_caveat(claim, _verdict_row(claim, system, hardware, evaluate, timing_free, direction_only))


def _verdict_row(claim, system, hardware, evaluate, timing_free, direction_only) -> dict:
    row = {**claim_cells(claim), "system": system, "hardware": hardware, "measured": ""}
    ok_scope, scope_why = scope.in_scope(claim.get("hardware", ""), hardware, claim.get("quantity"))
    try:
        obs = evaluate()
    except NotMeasured as exc:
        if not ok_scope:
            return {
                **row,
                "measured": exc.measured,
                "verdict": f"not measured here ({scope.label(claim['hardware'])} claim)",
                "why": f"{scope_why}; and here: {exc}",
            }
        return {**row, "measured": exc.measured, "verdict": "not measured here", "why": str(exc)}
    row["measured"] = _measured_text(obs)
    if not ok_scope:
        return {
            **row,
            "verdict": f"not measured here ({scope.label(claim['hardware'])} claim)",
            "why": f"{scope_why}; {_would_here(claim, obs)}",
        }
    noisy = [w for o in obs for r in o.results if (w := noise_why(r))]
    if noisy and claim["quantity"] not in timing_free:
        return {
            **row,
            "verdict": "not measured here",
            "why": f"not measured reliably: result flagged noisy ({noisy[0]})",
        }
    needs = needs_of(claim)
    aside: dict[str, list[Observation]] = {}  # why an observation does not judge the claim -> those observations
    judged = []
    for o in obs:
        unlike = like_for_like(claim, o)
        reason = (
            "not needed"
            if needs and not any(_covers(o, n) for n in needs)
            else "proxy"
            if o.note
            else f"not like for like ({unlike})"
            if unlike
            else "at the counter's noise floor"
            if o.floor
            else o.no_signal
            if o.no_signal
            else "within its timing spread"
            if o.unresolved
            else ""
        )
        (aside.setdefault(reason, []) if reason else judged).append(o)
    extra = "; ".join(f"{why}: {len(os)}" if why != "proxy" else f"proxy: {len(os)}" for why, os in aside.items())
    tail = f"; left out ({extra})" if extra else ""
    if claim["quantity"] in direction_only:
        tail += " (direction; the published magnitude is not judged)"
    covered = [n for n in needs if any(_covers(o, n) for o in judged)]
    missing = [n for n in needs if n not in covered]
    failed = [o for o in judged if not passes(claim, o.value)]
    what = "false" if claim["check"] == "true" else f"outside {tolerance_text(claim)}"
    if failed:
        gap = f"; not measured: {', '.join(missing)}" if missing else ""
        return {
            **row,
            "verdict": "does not hold",
            "why": f"{len(failed)} of {len(judged)} {what}: {failed[0].text}{gap}{tail}",
        }
    within = "true" if claim["check"] == "true" else f"within {tolerance_text(claim)}"
    if judged and not missing:
        return {**row, "verdict": "holds", "why": f"{len(judged)} of {len(judged)} {within}{tail}"}
    if judged:
        return {
            **row,
            "verdict": f"partly measured ({len(covered)} of {len(needs)})",
            "why": f"measured {', '.join(covered)} ({within}); missing {', '.join(missing)}{tail}",
        }
    return _aside_row(claim, row, aside, needs)


def _aside_row(claim: pd.Series, row: dict, aside: dict[str, list[Observation]], needs: list[str]) -> dict:
    """The ``not measured here`` row of a claim none of whose observations judges it, saying why (the proxy's or
    the other setting's result shown, never as the verdict)."""
    if "proxy" in aside:
        os = aside["proxy"]
        label = os[0].note.split(":")[0].strip()
        how = " / ".join(dict.fromkeys(o.note.split(":", 1)[-1].strip().removeprefix("proxy: ") for o in os))
        return {
            **row,
            "verdict": f"not measured here ({label} {_would(claim, os)})",
            "why": f"measured only through a proxy ({how}); {claim['quantity']} itself is not measured",
        }
    unlike = next((k for k in aside if k.startswith("not like for like")), None)
    if unlike:
        differs = unlike.removeprefix("not like for like (").removesuffix(")")
        return {
            **row,
            "verdict": f"not measured here (not like for like: {differs})",
            "why": f"{differs}; on this setting the check {_would(claim, aside[unlike])} (shown, not judged)",
        }
    if "at the counter's noise floor" in aside:
        os = aside["at the counter's noise floor"]
        return {
            **row,
            "verdict": "not measured here (at the counter's floor)",
            "why": f"{os[0].floor}; the ratio divides by noise",
        }
    if "within its timing spread" in aside:
        return {**row, "verdict": "not measured here", "why": "every pair within its timing spread (p10-p90 overlap)"}
    no_signal = [k for k in aside if k not in ("not needed",)]  # an observation's own no_signal reasons
    if no_signal:
        return {**row, "verdict": "not measured here (no signal)", "why": "; ".join(no_signal)}
    return {
        **row,
        "verdict": "not measured here",
        "why": f"none of the needed observations ({', '.join(needs)}) was made; measured instead: "
        + "; ".join(o.text for o in aside.get("not needed", [])),
    }


def per_system_rows(
    claim: pd.Series,
    inputs: ClaimInputs,
    result_rows: Callable[[list[dict]], pd.DataFrame],
    key: Callable[[dict], tuple],
    observations,
    **verdict_kw,
) -> list[dict]:
    """The rows of a claim judged once per system (:func:`verdict_row`): ``observations(claim, rows, results)`` gets
    that system's table rows and its results keyed by ``key(result)``; one :func:`not_run` row without results."""
    exp = claim["experiment"]
    group = inputs.of(exp)
    if not group:
        return [not_run(claim, exp)]
    rows = []
    for system, g in inputs.rows(result_rows, exp).groupby("system"):
        res = {key(r): r for r in group if r["config"]["system"]["name"] == system}
        rows.append(
            verdict_row(
                claim,
                system,
                g["hardware"].iloc[0],
                lambda c=claim, g=g, res=res: observations(c, g, res),
                **verdict_kw,
            )
        )
    return rows


def not_run(claim: pd.Series, experiment: str) -> dict:
    """The one row of a claim whose experiment has no results."""
    return with_caveat(
        claim,
        {
            **claim_cells(claim),
            "system": "(none)",
            "hardware": "none",
            "measured": "",
            "verdict": "not measured here",
            "why": f"no {experiment} results (add {experiment} to config `experiments`, or copy results in)",
        },
    )


def class_ratio_row(claim: pd.Series, points: list[tuple[str, str, str, float]], systems: str) -> dict:
    """The one row of a cross-hardware speedup claim (``generation_speedup_x``): ``selector`` names ordered pairs
    of hardware classes, ``slower>faster`` joined by ``|`` (``gaudi1>gaudi2``); ``points`` are (class by the scope
    policy, hardware label, what was run, time) of every system; each pair measured at equal ``what was run`` gives
    one observation ``time(slower) / time(faster)`` keyed by the pair (the claim's ``needs``). Without both classes
    of any pair measured: ``not measured here`` naming the classes found. ``systems``: the systems' names."""
    pairs = [tuple(p.split(">", 1)) for p in str(claim["selector"]).split("|") if ">" in p]
    by_class: dict[str, dict[str, tuple[str, float]]] = {}
    for cls, hw, what, t in points:
        by_class.setdefault(cls, {}).setdefault(what, (hw, t))
    hardware = "; ".join(dict.fromkeys(hw for cls, hw, _, _ in points if cls in {c for p in pairs for c in p}))

    def evaluate() -> list[Observation]:
        obs = []
        for slow, fast in pairs:
            for what in sorted(set(by_class.get(slow, {})) & set(by_class.get(fast, {}))):
                (hw_s, t_s), (hw_f, t_f) = by_class[slow][what], by_class[fast][what]
                obs.append(
                    Observation(
                        t_s / t_f,
                        f"{slow}>{fast} {what}: {t_s:.4g} / {t_f:.4g} = {t_s / t_f:.2f}x "
                        f"({scope.device_part(hw_s)} vs {scope.device_part(hw_f)})",
                        key=f"{slow}>{fast}",
                    )
                )
        if not obs:
            found = sorted(by_class)
            raise NotMeasured(
                f"needs results of both classes of a pair ({', '.join('>'.join(p) for p in pairs)}); found: "
                f"{', '.join(found) or 'none'} (copy the other systems' results/<system>/ folders here)"
            )
        return obs

    return verdict_row(claim, systems, hardware or "none", evaluate)
