"""The Nsight Compute job known ``unsupported`` before it runs (torch-free, like its job module: the harness and the
run-time estimate ask :func:`known_unsupported`)."""

from __future__ import annotations

from accelbench.core.outcome import Outcome
from accelbench.experiments.unet3d_ncu.job import Settings, unsupported_outcome


def known_unsupported(ctx) -> Outcome | None:
    """:func:`.job.unsupported_outcome` from the rule's spec (the job module imports no torch)."""
    return unsupported_outcome(Settings.from_spec(ctx.spec, ctx.system), ctx)
