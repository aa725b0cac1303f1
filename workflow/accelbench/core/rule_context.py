"""What an experiment's rule functions read (``experiments/<name>/rules.py``): :class:`RuleContext`.

The Snakefile makes one (``RC`` in ``workflow/rules/common.smk``) from the validated config, the resolved system,
the results folder and the repository; the generic input functions there (``results_of``, ``spec_of``) hand it to
the registry entry's ``results``/``spec`` functions, which return plain paths and dicts (no Snakemake objects), so
they are tested without Snakemake.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from accelbench.core import precisions


@dataclass(frozen=True)
class RuleContext:
    """The validated config, the resolved system (:class:`accelbench.core.systems.System`), the results folder (as
    configured, relative to the working directory) and the repository root."""

    config: dict
    system: object
    results_dir: str
    repo: Path

    def repo_path(self, p: str | Path) -> Path:
        """Relative paths in the config point into the repository (so that ``--directory elsewhere`` works)."""
        p = Path(p)
        return p if p.is_absolute() else self.repo / p

    def existing_repo_path(self, p: str | None) -> str | None:
        """``p`` made absolute in the repository where that file or folder exists, else ``p`` unchanged (a hub id,
        a name resolved elsewhere, or a missing path the job reports by name)."""
        return str(self.repo_path(p)) if p and self.repo_path(p).exists() else p

    def selected(self, experiment: str) -> bool:
        """True when ``experiment`` is in the config's ``experiments:`` list."""
        return experiment in self.config["experiments"]

    def common_spec(self) -> dict:
        """What every measurement job's spec holds: the system, the noise policy and the energy setting."""
        return {"system": self.system.to_dict(), "noise": self.config["noise"], "energy": self.config["energy"]}

    def emulated(self, precision: str | None) -> dict:
        """``{"run_emulated_precisions": [...]}`` where the user asked for an emulated precision this job uses, else
        ``{}`` (:func:`accelbench.core.precisions.spec_entry`), so other specs stay as they were."""
        return precisions.spec_entry(self.config, precision)
