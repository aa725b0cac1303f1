"""Study B LoRA: a case's ``unsupported`` verdict from its plan (:func:`.settings.plan_run`: strategy, devices, the
backend, what is installed), torch-free: the harness asks :func:`known_unsupported` before it imports the job module
(the registry entry's ``verdicts``), so FSDP on a CPU or ZeRO-3 without deepspeed imports no torch."""

from __future__ import annotations

from accelbench.core import precisions
from accelbench.core.outcome import Outcome
from accelbench.experiments.lora.series import settings_of
from accelbench.experiments.lora.settings import plan_run


def known_unsupported(ctx) -> Outcome | None:
    """The outcome :func:`.job.run` records for a plan that is not ``ok`` (config ``plan``), from a plan made without
    the precision probe (noted in it); None where the case may run (the job then plans it in full)."""
    spec = ctx.spec
    plan = plan_run(
        spec["strategy"],
        spec["devices"],
        spec["attention"],
        ctx.system,
        settings_of(spec),
        run_emulated=precisions.run_emulated(spec),
        probe=False,
    )
    if plan.status == "ok":
        return None
    return Outcome(plan.status, {}, plan.reason, {"plan": plan.to_dict()})
