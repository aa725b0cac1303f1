"""Study B LoRA: the job on the harness (:mod:`accelbench.core.harness`). :func:`run` plans a case, records what cannot
run (unsupported; OOM by the weights-alone and host-memory pre-checks, on a CPU too, before any rank starts), runs
``single`` in this process or the DDP/FSDP/ZeRO-3 ranks through the one rank launcher
(:mod:`accelbench.core.launcher`), and merges the ranks' records (:func:`.summary.summarize`); :func:`run_rank` is one
rank's work. No launching code lives here."""

from __future__ import annotations

import os
from dataclasses import dataclass

from accelbench import backends
from accelbench.core import precisions
from accelbench.core.outcome import Outcome
from accelbench.experiments.lora.model import (
    count_parameters,
    cpu_memory_precheck,
    host_memory_precheck,
    memory_precheck,
    weights_gib,
)
from accelbench.experiments.lora.series import gaudi_mode, settings_of
from accelbench.experiments.lora.settings import LoraSettings, Plan, hpu_lazy_mode, plan_run
from accelbench.experiments.lora.summary import summarize
from accelbench.experiments.lora.train import train_rank

EXPERIMENT = "lora_finetune"  # the result's `experiment`, config key and result folder
DEVICES_KEY = "lora_finetune.runs devices"


@dataclass(frozen=True)
class Settings:
    """One (model, attention, strategy, devices) case: the rule's spec, the LoRA settings at the system's scale and
    the run plan (:func:`.settings.plan_run`: strategy, devices, attention implementation, precision, status)."""

    spec: dict
    lora: LoraSettings
    plan: Plan

    @classmethod
    def from_spec(cls, spec: dict, system) -> Settings:
        lora = settings_of(spec)
        return cls(
            spec,
            lora,
            plan_run(
                spec["strategy"],
                spec["devices"],
                spec["attention"],
                system,
                lora,
                run_emulated=precisions.run_emulated(spec),
            ),
        )


# cost model of a job (accelbench.core.estimate), fitted to the embedded default's jobs on the reference machine
# (SmolLM2-135M, 2 x 2 blocks of 32 tokens per optimizer step): seconds per optimizer step of that work
COST = {
    "startup_s": 8.0,
    "ranks_s": 8.0,
    "step_s": 0.8,
    "eval_block_s": 0.25,
    "compile_s": 40.0,
    "reference_tokens": 2 * 2 * 32,
}


def estimate_s(spec: dict) -> float:
    """Wall seconds of the job on the reference machine: start-up and model load, torchrun's start of the ranks
    (more than one device), the optimizer steps (x the tokens per step relative to the default's), the held-out
    loss before and after, and torch.compile where the series compiles; start-up alone where the plan is not
    ``ok`` (FSDP on a CPU, ZeRO-3 without deepspeed)."""
    from accelbench.core.estimate import STARTUP_S
    from accelbench.core.harness import system_from

    s = Settings.from_spec(spec, system_from(spec))
    if s.plan.status != "ok":
        return STARTUP_S
    t = s.lora
    work = t.per_device_batch * t.grad_accum * t.seq_len / COST["reference_tokens"]
    compiled = (
        spec.get("series", "ours") != "faithful"
        and (spec.get("series_options") or {}).get("compile")
        and backends.get(spec["system"]["backend"]).accelerator
    )  # on a CPU the series runs eager
    return (
        COST["startup_s"]
        + (COST["ranks_s"] if s.plan.devices > 1 else 0.0)
        + (t.warmup_steps + t.timed_steps) * COST["step_s"] * work
        + 2 * t.eval_blocks * COST["eval_block_s"]
        + (COST["compile_s"] if compiled else 0.0)
    )


def prepare_environment(spec: dict, system) -> None:
    """Before anything imports habana_frameworks: Gaudi's execution mode. Faithful series: the job file's
    (:func:`.series.gaudi_mode`: lazy, or compile mode with ``PT_HPU_LAZY_MODE=0``, and its variables); ours: lazy
    mode except FSDP."""
    if not backends.get(system.backend).lazy_mode:
        return
    if spec.get("series") == "faithful":
        mode = gaudi_mode(
            spec.get("family", ""),
            spec["strategy"],
            spec["devices"],
            spec["series_options"]["job_set"],
        )
        for k, v in {"PT_HPU_LAZY_MODE": "1", **mode["env"]}.items():
            os.environ.setdefault(k, v)
        return
    os.environ.setdefault("PT_HPU_LAZY_MODE", hpu_lazy_mode(spec["strategy"]))


def precheck(s: Settings, system) -> Outcome | None:
    """An ``oom`` outcome when the frozen weights alone cannot fit the devices, or (FSDP) the ranks' host copies the
    node's memory, or (a CPU) the ranks' copies the host memory this job may still take (MemAvailable or its cgroup's
    limit, :func:`accelbench.cluster.processes.host_memory_available`); None when the case may run. Before any
    weight is loaded: the parameters are counted on the meta device."""
    if s.plan.status != "ok":
        return None
    from accelbench.cluster.processes import host_memory_available

    n_params = count_parameters(s.spec["model"])
    host = {}
    if not backends.get(system.backend).accelerator:  # the device is the host
        available, bound = host_memory_available()
        host = {"host_available_gib": round(available, 3), "host_memory_bound": bound}
        reason = cpu_memory_precheck(n_params, s.plan, available, bound)
    else:
        reason = memory_precheck(n_params, s.plan, system.device_memory_gib)
    if not reason and s.plan.strategy == "fsdp" and backends.get(system.backend).accelerator:
        from accelbench.cluster import multinode

        per_node = multinode.node_plan(system, s.plan.devices, DEVICES_KEY).per_node
        host = {
            "host_available_gib": host_memory_available()[0],
            "ranks_per_node": per_node,
            "host_copies_per_node": 1,
        }  # rank-0-only building (cpu_ram_efficient_loading), both series
        reason = host_memory_precheck(n_params, s.plan, 1, host["host_available_gib"])
    if not reason:
        return None
    return Outcome.oom(
        reason,
        {
            "parameters": n_params,
            "weights_gib_needed": weights_gib(n_params, s.plan.precision),
            "estimate": "frozen weights only (lower bound); not run",
            **host,
        },
    )


def run(s: Settings, ctx) -> Outcome:
    """Plan, pre-check, train (one process or ``devices`` ranks), merge. The result's ``config`` gets the plan.

    Returns:
        :class:`~accelbench.core.outcome.Outcome`: ``unsupported``/``oom`` cases are returned, not raised.

    Raises:
        AccelbenchError: a rank failed for another reason (the launcher names the exit status and the log tail).
    """
    from accelbench.core.launcher import in_process

    config = {"plan": s.plan.to_dict()}
    early = precheck(s, ctx.system)
    if early is None and s.plan.status != "ok":
        early = Outcome(s.plan.status, {}, s.plan.reason)
    if early is not None:
        early.config.update(config)
        return early
    ranks = in_process(ctx, s) if s.plan.strategy == "single" else ctx.run_ranks(s, s.plan.devices, DEVICES_KEY)
    if isinstance(ranks, Outcome):  # a rank out of memory, or a layout this allocation cannot start
        if "ranks" in ranks.measurements:
            ranks.measurements["ranks"] = [r.get("measurements", r) for r in ranks.measurements["ranks"]]
        ranks.config.update(config)
        return ranks
    first = ranks.records[0]
    if first["status"] != "ok":  # single, in this process: train_rank records its own oom/unsupported
        return Outcome(first["status"], first["measurements"], first["reason"], config)
    measurements = summarize(ranks.records, s.plan, s.lora, ctx.system, s.spec.get("projection", {}))
    measurements["launch"] = ranks.launch
    return Outcome("ok", measurements, None, config)


def run_rank(s: Settings, ctx) -> dict:
    """One rank (or the single process): :func:`.train.train_rank` with this rank's placement; its record carries
    its own ``status`` (``oom``/``unsupported`` end the group through the launcher)."""
    return train_rank(s.spec, ctx.system, s.plan, ctx.threads, ctx.placement)
