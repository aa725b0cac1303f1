"""Precisions a system file lists that this host only emulates.

A system file's ``precisions`` say what a kind of hardware runs natively; the cpu system file lists bf16, which only
some CPUs have (x86: AVX512-BF16 or AMX; see :mod:`accelbench.backends.cpu`). Elsewhere PyTorch emulates it, and a
bf16 configuration of the embedded default ran 6-11x slower than fp32 (2-core AVX2 CPU: a Study A step 40.5 s against
3.6 s): a number about the emulation, not the precision. So a job whose precision the backend reports emulated here
and a short probe measures at least :data:`SLOW` times the fp32 time is recorded ``unsupported`` with
:func:`emulated_reason`'s one line, unless the config lists the precision under ``run_emulated_precisions``
(:data:`CONFIG_KEY`). Experiments ask through their ``unsupported_outcome`` hook (Study A, SR3) or fall back to fp32
with a note (LoRA, whose precision is a training setting); backends that report nothing (accelerators) are never
asked to probe.
"""

from __future__ import annotations

from accelbench import backends

CONFIG_KEY = "run_emulated_precisions"
SLOW = 1.5  # probe time over fp32's from which an emulated precision is not run by default


def run_emulated(spec: dict) -> tuple[str, ...]:
    """The precisions the job's spec asks to run even where emulated (config ``run_emulated_precisions``)."""
    return tuple(spec.get(CONFIG_KEY) or ())


def spec_entry(config: dict, precision: str | None) -> dict:
    """``{CONFIG_KEY: [...]}`` for a job of ``precision`` when the config lists it, else ``{}``: the key enters only
    the specs it concerns, so setting it reruns only those jobs (common.smk)."""
    wanted = list(config.get(CONFIG_KEY) or ())
    return {CONFIG_KEY: wanted} if precision in wanted else {}


def emulation(system, precision: str) -> tuple[str, float, str] | None:
    """``(why, probe ratio, "this CPU")`` where ``system``'s backend reports ``precision`` emulated on this host (the
    ratio measured by the backend's probe, once per process); None where it is native, or the backend reports
    nothing."""
    if precision in (None, "fp32"):
        return None
    ops = backends.get(system.backend)
    support = ops.precision_support()
    if support is None or precision in support["native"]:
        return None
    ratio = ops.emulation_slowdown(precision)
    if ratio is None:
        return None
    where = f"this {ops.name} device" if ops.accelerator else "this CPU"
    return support["emulated"].get(precision, f"{support.get('capability')}, not native"), ratio, where


def emulated_reason(system, precision: str | None, wanted: tuple[str, ...] = ()) -> str | None:
    """The one line recording a job of ``precision`` as ``unsupported`` on this host: the system file lists the
    precision, the backend reports it emulated here and the probe measured it at least :data:`SLOW` x the fp32 time,
    and ``wanted`` (:func:`run_emulated`) does not ask for it. None otherwise (including precisions the system file
    does not list: those have their own reason)."""
    if precision in wanted or not precision or not system.supports(precision):
        return None
    found = emulation(system, precision)
    if found is None or found[1] < SLOW:
        return None
    why, ratio, where = found
    return (
        f"{precision} is emulated on {where} ({why}): a probe measured it {ratio:.1f}x the fp32 time; "
        f"set `{CONFIG_KEY}: [{precision}]` to run it anyway"
    )
