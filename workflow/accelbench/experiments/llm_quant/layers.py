"""Decoder structure of a Llama-like causal LM (which linear layers quantization touches) and byte counts.

Sizes are counted from the tensors themselves (tensor subclasses such as torchao's flattened), never from
a nominal bit width.
"""

from __future__ import annotations

import io

import torch

from accelbench.errors import ConfigError
from accelbench.experiments.llm_quant.projections import SUBMODULES


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder layers of a transformers causal LM (``model.model.layers``).

    Raises:
        ConfigError: the model has no such list (not a Llama-like decoder).
    """
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ConfigError(f"{type(model).__name__} has no model.layers: llm_quant needs a Llama-like decoder")
    return layers


def layer_linears(layer: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """``{q_proj: Linear, ...}``: the projections of one decoder layer that quantization touches."""
    found = {}
    for name, mod in layer.named_modules():
        short = name.rsplit(".", 1)[-1]
        if short in SUBMODULES and isinstance(mod, torch.nn.Linear):
            found[short] = mod
    return found


def tensor_nbytes(t: torch.Tensor) -> int:
    """Bytes held by a tensor, looking inside tensor subclasses (torchao) through ``__tensor_flatten__``."""
    if hasattr(t, "__tensor_flatten__") and type(t) not in (torch.Tensor, torch.nn.Parameter):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_nbytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def model_sizes(model) -> dict:
    """Bytes of all parameters, of the decoder-layer linear weights, and of the serialized state dict."""
    lin_ids = {id(m.weight) for layer in decoder_layers(model) for m in layer_linears(layer).values()}
    total = linear = 0
    for p in model.parameters():  # tied parameters are listed once
        b = tensor_nbytes(p)
        total += b
        if id(p) in lin_ids:
            linear += b
    sink = _ByteCount()  # the bytes torch.save writes, counted, not kept (a 540 MB copy for SmolLM2 in fp32)
    torch.save(model.state_dict(), sink)
    return {"param_bytes": total, "decoder_linear_bytes": linear, "serialized_bytes": sink.count}


class _ByteCount(io.RawIOBase):
    """A write-only stream that counts the bytes written to it and keeps none."""

    count = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        self.count += n
        return n
