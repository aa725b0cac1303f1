"""The job of Study B's quantization for the harness (:mod:`accelbench.core.harness`, ``accelbench llm-quant``):
:class:`Settings`, :func:`run` (the sensitivity stage or one (method, bit set), :mod:`.stages`) and the cost model
:func:`estimate_s`; :mod:`accelbench.cli` writes the result files.
"""

from __future__ import annotations

from accelbench.experiments.llm_quant.sensitivity import parse_bitset
from accelbench.experiments.llm_quant.stages import run_method_job, run_sensitivity_job

EXPERIMENT = "llm_quant"  # the result's `experiment`, config key and result folder

# cost model of a job (accelbench.core.estimate), fitted to the embedded default's jobs on the reference machine
# (SmolLM2-135M: 30 layers of width 576): seconds per unit of work, a unit being one token through the model; an
# accuracy task costs `task_s` (lm-eval's task set-up and its data) plus `document_s` per document
COST = {
    "startup_s": 12.0,
    "sensitivity_token_s": 0.002,
    "eval_token_s": 0.005,
    "task_s": 1.6,
    "document_s": 0.25,
    "emulated_fp16": 1.6,
    "reference_params": 30 * 576**2,
}


def estimate_s(spec: dict) -> float:
    """Wall seconds of the job on the reference machine: the sensitivity map's evaluations x tokens, or a method's
    perplexity tokens and accuracy tasks and documents (the study prompts counted as tasks), each x the model's size
    (layers x width^2, relative to SmolLM2-135M's); start-up alone where it only writes ``unsupported`` (INC FP8 off
    Gaudi, torchao int4 on a backend without its tinygemm layout)."""
    from accelbench import backends
    from accelbench.core.estimate import STARTUP_S
    from accelbench.core.harness import system_from

    system = system_from(spec)
    ops = backends.get(system.backend)
    cfg = (spec.get("model_spec") or {}).get("config") or {}
    size = cfg.get("num_hidden_layers", 30) * cfg.get("hidden_size", 576) ** 2 / COST["reference_params"]
    method = spec.get("method", "sensitivity")
    if method == "sensitivity":
        layers = cfg.get("num_hidden_layers", 30)
        evaluations = (
            layers * len(spec.get("sensitivity_metrics") or ())
            + 1
            + (0 if spec.get("submodules") == "none" else 7 * (layers if spec.get("submodules") == "per_layer" else 1))
        )
        tokens = spec.get("sensitivity_tokens") or 4096
        return COST["startup_s"] + size * evaluations * tokens * COST["sensitivity_token_s"]
    if method == "inc_fp8" and not ops.fp8_inc:
        return STARTUP_S
    if method == "torchao" and 4 in parse_bitset(spec["bitset"]) and not ops.torchao_int4_tinygemm:
        return STARTUP_S + 3.0  # torchao's kernel probe
    acc = spec.get("accuracy") or {}
    tasks = len(acc.get("tasks") or ()) + (
        len(acc.get("tasks") or ()) if acc.get("study_b_prompts") is True else len(acc.get("study_b_prompts") or ())
    )
    work = (spec.get("eval_tokens") or 4096) * COST["eval_token_s"] + tasks * (
        COST["task_s"] + (acc.get("limit") or 1000) * COST["document_s"]
    )
    slow = COST["emulated_fp16"] if method == "int8_dq" else 1.0  # fp16 autocast: emulated on most CPUs
    return COST["startup_s"] + size * work * slow


# --------------------------------------------------------------------------- the job (accelbench.core.harness)
class Settings(dict):
    """One llm_quant job: the rule's spec (``model``, ``model_spec``, ``data``, ``method`` — ``sensitivity`` for the
    sensitivity stage —, ``bitset`` and the config's ``llm_quant`` keys)."""

    @classmethod
    def from_spec(cls, spec: dict, system) -> Settings:
        return cls(spec)

    @property
    def stage(self) -> str:
        return "sensitivity" if self["method"] == "sensitivity" else "method"


def run(spec: Settings, ctx):
    """The sensitivity stage (per-layer map + allocation; the tables go beside the result as
    ``sensitivity_<name>.csv``) or one (method, bit set) job, which reads ``ctx.inputs["sensitivity"]``.

    Raises:
        ConfigError: ``--stage`` disagrees with the spec's method.
    """
    import csv

    from accelbench.core.outcome import Outcome
    from accelbench.core.results import read_result
    from accelbench.errors import ConfigError

    stage = ctx.inputs.get("stage") or spec.stage
    if stage != spec.stage:
        raise ConfigError(f"--stage {stage} does not match the spec's method {spec['method']!r}")
    if stage == "sensitivity":
        out, tables = run_sensitivity_job(dict(spec), ctx.system, ctx.inputs.get("model_dir"))
        for name, rows in tables.items():
            with ctx.side_file(f"sensitivity_{name}.csv") as tmp, open(tmp, "w", newline="") as fh:
                fields = list(dict.fromkeys(k for r in rows for k in r)) or ["layer"]
                writer = csv.DictWriter(fh, fieldnames=fields)
                writer.writeheader()
                writer.writerows(rows)
    else:
        out = run_method_job(
            dict(spec),
            ctx.system,
            read_result(ctx.inputs["sensitivity"]),
            ctx.inputs.get("model_dir"),
            stats_dir=str(ctx.out.parent / "inc_stats"),
        )
        out["measurements"]["allocation"] = out.pop("allocation", {})
    return Outcome(out["status"], out["measurements"], out["reason"])
