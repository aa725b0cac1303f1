"""Rule functions of the toy experiment (``toy_matmul``; its rules in ``rules.smk`` beside this file). Torch-free."""

from __future__ import annotations


def results(rc, system: str) -> list[str]:
    """One result per size of config ``toy_matmul.sizes``: ``<results>/<system>/toy_matmul/n<size>/result.json``."""
    return [f"{rc.results_dir}/{system}/toy_matmul/n{n}/result.json" for n in rc.config["toy_matmul"]["sizes"]]


def spec(rc, wildcards) -> dict:
    """The spec of the job of size ``wildcards.size``: the common part (system, noise, energy), size, warmup, repeat."""
    u = rc.config["toy_matmul"]
    return {**rc.common_spec(), "size": int(wildcards.size), "warmup": u["warmup"], "repeat": u["repeat"]}
