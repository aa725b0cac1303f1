"""What an experiment's run returns (:class:`Outcome`): read by the job harness and the rank launcher."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcome:
    """What an experiment's ``run`` returns: the result's status, reason and measurements.

    Attributes:
        status: ``ok``, ``oom`` (out of device or host memory) or ``unsupported`` (the system cannot run this case).
        measurements: every number with its unit (JSON-able).
        reason: required unless ``status`` is ``ok``: what ran out, or why the case is unsupported.
        config: recorded under the result's ``config`` beside the spec (e.g. resolved ``settings``, LoRA's ``plan``).
    """

    status: str = "ok"
    measurements: dict = field(default_factory=dict)
    reason: str | None = None
    config: dict = field(default_factory=dict)

    @classmethod
    def unsupported(cls, reason: str, measurements: dict | None = None, config: dict | None = None) -> Outcome:
        return cls("unsupported", measurements or {}, reason, config or {})

    @classmethod
    def oom(cls, reason: str, measurements: dict | None = None, config: dict | None = None) -> Outcome:
        return cls("oom", measurements or {}, reason, config or {})
