"""A campaign file, read and checked: the parts of a run on lent hardware and their steps, as data.

A campaign file (YAML, checked against ``campaign.schema.yaml`` beside this module) holds ``parts``: each part is one
call on the hardware, with a time budget (``budget_s``) and ordered ``steps``; a step is an ``argv`` list (never a
shell string: nothing goes through a shell) with optional ``env`` (strings), ``timeout_s``, ``needs_s`` (the part's
seconds that must be left for it to start), ``always`` (it runs even after the budget or a failure, e.g. packing the
results; its ``timeout_s`` bounds it) and ``note``. ``{out}``, the part's output folder (``<out>/<part>/``),
may stand as a whole argument or as a prefix (``{out}/x.csv``), nowhere else. Campaigns live in ``campaigns/*.yaml``
(runs not made yet) or under the ``parts:`` key of a reference run's ``run.yaml``.

:func:`load` reads and checks one, :func:`dry_run` shows a part's steps without running them; the runner is
:mod:`accelbench.core.campaign` (which re-exports these names).

Invalid input raises :class:`~accelbench.errors.CampaignError`: one line naming the file and the key.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import yaml

from accelbench.core.config import Validator, key_path, read_yaml
from accelbench.errors import CampaignError, ConfigError

SCHEMA = Path(__file__).with_name("campaign.schema.yaml")
RUN_META = "run.yaml"  # a reference run's file (accelbench.aggregate.run_folder.META): only its `parts` is ours
OUT = "{out}"


def _describe(error, file: str) -> str:
    """One line for one schema violation: the file, the key, what is wrong."""
    where = key_path(error)
    if "propertyNames" in error.schema_path:
        if where == "parts":
            return (
                f"{file}: key '{where}': part name {error.instance!r} is not allowed (a folder name: letters, digits, "
                f"'_', '.', '-'; quote a number: '11')"
            )
        return f"{file}: key '{where}': variable name {error.instance!r} is not allowed (letters, digits, '_')"
    if error.validator == "additionalProperties":
        extra = sorted(str(k) for k in error.instance if k not in error.schema.get("properties", {}))
        allowed = ", ".join(error.schema.get("properties", {}))
        keys = ", ".join(f"'{where}.{k}'" if where != "<top level>" else f"'{k}'" for k in extra)
        return f"{file}: unknown key {keys} (allowed there: {allowed})"
    if error.validator == "type" and where.endswith(".argv") and isinstance(error.instance, str):
        return (
            f"{file}: key '{where}': {error.instance!r} is a string; a step's argv is a list of arguments, "
            f"one string each (no shell runs it)"
        )
    if error.validator == "type" and error.validator_value == "string" and not isinstance(error.instance, dict | list):
        return f"{file}: key '{where}': {error.message} (quote it: YAML reads {error.instance!r} as no string)"
    return f"{file}: key '{where}': {error.message}"


def _order(error) -> list:
    """Document order of an error's key (the first one in the file is reported)."""
    return [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.absolute_path]


def _placeholder_problems(campaign: dict, file: str) -> list[str]:
    """``{out}`` inside another argument (or env value): refused, so that a path is never spliced into a string."""
    bad = []
    for name, part in campaign["parts"].items():
        for i, step in enumerate(part["steps"]):
            values = [(f"argv[{j}]", a) for j, a in enumerate(step["argv"])]
            values += [(f"env.{k}", v) for k, v in step.get("env", {}).items()]
            for where, value in values:
                whole = value == OUT or (value.startswith(OUT + "/") and OUT not in value[len(OUT) :])
                if OUT in value and not whole:
                    bad.append(
                        f"{file}: key 'parts.{name}.steps[{i}].{where}': {value!r} has {OUT} inside it; "
                        f"{OUT} may only be a whole argument or a prefix ({OUT}/name)"
                    )
    return bad


def load(file: str | Path) -> dict:
    """A campaign file (``campaigns/*.yaml``) or a reference run's ``run.yaml``, checked: ``{"parts": {...}}``
    (plus ``description`` where the file has one).

    Raises:
        CampaignError: missing or unreadable file, invalid YAML, a schema violation or a misplaced ``{out}`` (the
            first one, naming the file and key).
    """
    path = Path(file)
    try:  # through core/files.py: a FIFO, device (a link to /dev/zero) or folder is named as what it is
        data = read_yaml(path, "campaign file")  # as configs are: no object tags, no key given twice, no alias bomb
    except ConfigError as exc:
        if getattr(exc, "missing", False):
            raise CampaignError(f"{file}: no such file") from None
        if getattr(exc, "why", None):  # refused by core/files.py before parsing: its line names the file already
            raise CampaignError(str(exc)) from None
        raise CampaignError(f"{file}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise CampaignError(f"{file}: expected a mapping with the key 'parts'")
    if path.name == RUN_META:  # a reference run: its other keys are checked by accelbench.aggregate.run_folder
        if "parts" not in data:
            raise CampaignError(f"{file}: key 'parts': this run.yaml has no parts (no campaign to run)")
        data = {"parts": data["parts"]}
    return check(data, str(file))


def check(data: dict, file: str) -> dict:
    """``data`` when it is a valid campaign (``file`` names it in the message), else :class:`CampaignError`."""
    schema = yaml.safe_load(SCHEMA.read_text())
    errors = sorted(Validator(schema).iter_errors(data), key=_order)
    if errors:
        raise CampaignError(_describe(errors[0], file))
    bad = _placeholder_problems(data, file)
    if bad:
        raise CampaignError(bad[0])
    return data


def part_of(campaign: dict, name: str, file: str | Path) -> dict:
    parts = campaign["parts"]
    if name not in parts:
        raise CampaignError(f"{file}: key 'parts': no part {name!r} (its parts: {', '.join(parts)})")
    return parts[name]


def resolve(value: str, out: str | Path) -> str:
    """``{out}`` or ``{out}/x`` with the part's output folder put in (anything else unchanged)."""
    return str(out) + value[len(OUT) :] if value == OUT or value.startswith(OUT + "/") else value


def part_folder(out: str | Path, name: str) -> Path:
    return Path(os.path.abspath(out)) / name


# --------------------------------------------------------------------------- showing
def dry_run(file: str | Path, name: str, out: str | Path) -> str:
    """What :func:`accelbench.core.campaign.run_part` would run, one line per step (env assignments and argv,
    shell-quoted), nothing run."""
    part = part_of(load(file), name, file)
    folder = part_folder(out, name)
    lines = [f"{file}, part {name}: {len(part['steps'])} steps, budget {part['budget_s']} s, {OUT} = {folder}"]
    if part.get("stop_on_failure"):
        lines[0] += ", stop on failure"
    for i, step in enumerate(part["steps"]):
        env = [f"{k}={shlex.quote(resolve(v, folder))}" for k, v in step.get("env", {}).items()]
        limits = [f"{k} {step[k]}" for k in ("needs_s", "timeout_s") if k in step]
        limits += ["always"] if step.get("always") else []
        lines.append(f"  [{i}] " + " ".join([*env, shlex.join(resolve(a, folder) for a in step["argv"])]))
        if limits or step.get("note"):
            lines.append("      # " + "; ".join([*limits, *([step["note"]] if step.get("note") else [])]))
    return "\n".join(lines)
