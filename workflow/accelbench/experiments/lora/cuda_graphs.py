"""Study B LoRA: whether the Trainer's compiled model replays CUDA graphs, and the line a run records when it does
(what :class:`.trainer.LossCurveMixin` then does so that no graph output is read after the next replay)."""

from __future__ import annotations


def compiles_with_cuda_graphs(kw: dict) -> bool:
    """Whether the ``TrainingArguments`` keyword arguments ``kw`` (:func:`.trainer.training_arguments_kwargs`) compile
    the model into CUDA graphs: ``torch_compile`` with Inductor (Trainer's default backend) in a mode whose Inductor
    options capture them (``reduce-overhead``, ``max-autotune``: ``torch._inductor.list_mode_options``). The faithful
    series never compiles, so never does."""
    mode = kw.get("torch_compile_mode")
    compiler = kw.get("torch_compile_backend") or "inductor"  # Trainer's default: Inductor
    if not kw.get("torch_compile") or not mode or compiler != "inductor":
        return False
    from torch._inductor import list_mode_options

    return bool(list_mode_options().get(mode, {}).get("triton.cudagraphs"))


def cuda_graphs_note(grad_accum: int) -> str:
    """The line a run whose Trainer replays CUDA graphs records in its series' notes (what
    :class:`.trainer.LossCurveMixin` does for it; ``grad_accum``: the micro-batches per optimizer step that ran)."""
    grads = (
        f"the adapters' .grad are zeros allocated outside the graphs' memory pool before the first micro-batch and "
        f"zeroed in place after each optimizer step ({grad_accum} micro-batches accumulate into them)"
        if grad_accum > 1
        else "the adapters' .grad set to None after each optimizer step, as Trainer does (no accumulation)"
    )
    return (
        "CUDA graphs under the Trainer (LossCurveMixin): torch.compiler.cudagraph_mark_step_begin() before each "
        "micro-batch, each micro-batch's loss cloned out of the graphs' memory before the next replay; " + grads
    )
