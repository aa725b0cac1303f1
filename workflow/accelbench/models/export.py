"""Export an offline causal LM (see :mod:`accelbench.models.llm`) to a plain Hugging Face folder.

Why: the SmolLM2 GGUF takes ~20 s to dequantize per process, and transformers marks a GGUF-loaded model as
quantized, which ``Trainer`` refuses to fine-tune. Exported once (dequantized float32 safetensors + config +
tokenizer), the model loads in about a second with ``{"source": "path", "path": <folder>}``, bit-identical to
the GGUF load. ``accelbench.json`` in the folder keeps the original ``info`` (name, source, weights).

Example::

    accelbench llm-export --spec '{"source": "smollm2_gguf"}' --out resources/llm/smollm2_135m
"""

from __future__ import annotations

import json
from pathlib import Path

INFO_FILE = "accelbench.json"


def export_hf_folder(spec: dict, folder: str | Path) -> dict:
    """Load ``spec`` with :func:`accelbench.models.llm.load_causal_lm` (float32) and save it to ``folder``.

    Tied weights are saved once; a GGUF ``quantization_config`` is dropped (the tensors are already dequantized).

    Returns:
        The model's ``info`` (also written to ``<folder>/accelbench.json``).

    Raises:
        DataError: the model is not available offline.
    """
    from safetensors.torch import save_file

    from .llm import load_causal_lm

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lm = load_causal_lm(spec, dtype="float32")
    model = lm.model
    tied = {name for name, _ in model.named_parameters(remove_duplicate=False)} - {n for n, _ in model.named_parameters()}
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k not in tied}
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.save_pretrained(folder)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if lm.tokenizer is not None:
        lm.tokenizer.save_pretrained(folder)
    info = {**lm.info, "exported_from": spec, "exported_as": "float32 safetensors (dequantized)"}
    (folder / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
    return info


def exported_info(folder: str | Path) -> dict | None:
    """The ``info`` saved by :func:`export_hf_folder` (None for a folder it did not write)."""
    p = Path(folder) / INFO_FILE
    return json.loads(p.read_text()) if p.exists() else None
