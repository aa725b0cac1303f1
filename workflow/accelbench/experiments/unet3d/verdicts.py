"""Study A's profile job known ``unsupported`` before its job module is imported (torch-free: the harness and the
run-time estimate ask :func:`known_unsupported`; the reasons are :mod:`.settings`'s)."""

from __future__ import annotations

from accelbench.core.outcome import Outcome
from accelbench.experiments.unet3d.settings import Settings, network_reason, unsupported_reason


def known_unsupported(ctx) -> Outcome | None:
    """:func:`.settings.unsupported_outcome`'s reasons that need no probe (the system file lacks the configuration's
    precision, the network lacks its rewrites): the harness asks this before it imports the job module, so such a
    result imports no torch."""
    s = Settings.from_spec(ctx.spec, ctx.system)
    reason = unsupported_reason(s.variant, ctx.system) or network_reason(s.variant, s.model)
    return None if reason is None else Outcome("unsupported", {}, reason, {"settings": s.model.to_dict()})
