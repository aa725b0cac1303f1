"""Study B LoRA: the job entry points. :func:`run` plans a case, records what cannot run (unsupported, OOM by the
pre-checks), runs ``single`` in this process or launches the ranks under torchrun and gathers their ``rank<r>.json``;
:func:`rank_entry` is one torchrun rank. The launching lives here only."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .model import count_parameters, host_memory_precheck, memory_precheck, weights_gib
from .settings import LoraSettings, hpu_lazy_mode, plan_run
from .summary import summarize
from .train import train_rank


def run(spec: dict, system, threads: int = 0, timeout_s: float | None = None) -> dict:
    """Plan, then run one (model, attention, strategy, devices) case on ``system``.

    ``single`` runs in this process; ``ddp``/``fsdp``/``zero3`` launch ``devices`` ranks with
    ``python -m torch.distributed.run --standalone`` running ``accelbench lora-finetune --rank-dir``; every rank
    writes its measurements to ``rank<r>.json`` and this process gathers them.

    Returns:
        ``{"status", "reason", "plan", "measurements"}``. Unsupported cases and out-of-memory (a rank's OOM or the
        weights-alone check of :func:`.model.memory_precheck`) are returned, not raised.

    Raises:
        AccelbenchError: a rank failed for another reason (its log tail in the message).
    """
    import json
    import sys
    import tempfile

    from ...errors import AccelbenchError

    settings = LoraSettings(**{**spec["settings"], "target_modules": tuple(spec["settings"]["target_modules"])})
    plan = plan_run(spec["strategy"], spec["devices"], spec["attention"], system, settings)
    if plan.status == "ok" and system.backend != "cpu":
        n_params = count_parameters(spec["model"])
        reason = memory_precheck(n_params, plan, system.device_memory_gib)
        host = {}
        if not reason and plan.strategy == "fsdp":
            import psutil

            from ... import multinode

            per_node = multinode.node_plan(system, plan.devices, "lora_finetune.runs devices").per_node
            host = {"host_available_gib": psutil.virtual_memory().available / 2**30, "ranks_per_node": per_node}
            reason = host_memory_precheck(n_params, plan, per_node, host["host_available_gib"])
        if reason:
            return {"status": "oom", "reason": reason, "plan": plan.to_dict(),
                    "measurements": {"parameters": n_params, "weights_gib_needed": weights_gib(n_params, plan.precision),
                                     "estimate": "frozen weights only (lower bound); not run", **host}}
    if plan.status != "ok":
        return {"status": plan.status, "reason": plan.reason, "plan": plan.to_dict(), "measurements": {}}
    if plan.strategy == "single":
        ranks = [train_rank(spec, system, plan, threads)]
    else:
        from ... import launch, multinode

        layout = multinode.node_plan(system, plan.devices, "lora_finetune.runs devices")
        alloc = multinode.allocation() if layout.nodes > 1 else None
        if multinode.allocation_reason(layout, alloc):
            return {"status": "unsupported", "reason": multinode.allocation_reason(layout, alloc), "plan": plan.to_dict(),
                    "measurements": {"launch": multinode.launch_record(layout, system.backend, None)}}
        # ranks on other nodes write their rank files too: a shared folder (the run's working directory) then
        with tempfile.TemporaryDirectory(prefix="accelbench_ranks_", dir=Path.cwd() if layout.nodes > 1 else None) as rank_dir:
            worker = ["lora-finetune", "--spec", json.dumps(spec), "--rank-dir", rank_dir, "--threads", str(threads)]
            cmd, rdzv = multinode.launch_command(layout, worker, alloc)
            env = launch.rank_env(threads, layout.per_node)  # threads // ranks per node, each its own CPU block
            if system.backend == "hpu":
                env["PT_HPU_LAZY_MODE"] = hpu_lazy_mode(plan.strategy)
            returncode, output = multinode.run_tee(cmd, env=multinode.launch_env(system.backend, env), timeout=timeout_s)
            proc = subprocess.CompletedProcess(cmd, returncode, stdout=output)
            ranks = [json.loads(p.read_text()) for p in sorted(Path(rank_dir).glob("rank*.json"))]
        failed = [r for r in ranks if r["status"] != "ok"]
        if failed:
            return {"status": failed[0]["status"], "reason": failed[0]["reason"], "plan": plan.to_dict(),
                    "measurements": {"ranks": [r["measurements"] for r in failed]}}
        if proc.returncode != 0 or len(ranks) != plan.devices:
            lines = proc.stdout.splitlines()
            errors = [ln for ln in lines if "Error" in ln and "elastic" not in ln and "errors.html" not in ln]
            tail = "\n".join(errors[-5:] + lines[-10:])
            raise AccelbenchError(f"{plan.strategy} on {plan.devices} ranks failed (exit {proc.returncode}, "
                                  f"{len(ranks)} rank results):\n{tail}")
    if ranks[0]["status"] != "ok":
        return {"status": ranks[0]["status"], "reason": ranks[0]["reason"], "plan": plan.to_dict(),
                "measurements": ranks[0]["measurements"]}
    measurements = summarize(ranks, plan, settings, system, spec.get("projection", {}))
    if plan.strategy == "single":
        from ... import multinode

        measurements["launch"] = multinode.launch_record(multinode.NodePlan(1, 1, 1), system.backend, None)
    else:
        measurements["launch"] = multinode.launch_record(layout, system.backend, rdzv, proc.stdout)
    return {"status": "ok", "reason": None, "plan": plan.to_dict(), "measurements": measurements}


def rank_entry(spec: dict, system, rank_dir: str, threads: int = 0) -> None:
    """Entry point of one torchrun rank: take this rank's threads and CPUs (:func:`accelbench.launch.place_this_rank`,
    also: die with torchrun), train, then write ``<rank_dir>/rank<RANK>.json``."""
    from ...launch import place_this_rank
    from ...results import write_json_atomic

    placement = place_this_rank()
    settings = LoraSettings(**{**spec["settings"], "target_modules": tuple(spec["settings"]["target_modules"])})
    plan = plan_run(spec["strategy"], spec["devices"], spec["attention"], system, settings)
    out = train_rank(spec, system, plan, threads, placement)
    write_json_atomic(out, Path(rank_dir) / f"rank{out['rank']}.json")
    if out["status"] != "ok":  # a failed rank must end the group: torchrun then stops the ranks waiting on it
        os._exit(1)
