"""Text and perplexity: the evaluation text (pydoc topics or a local WikiText-2), its token chunks, the
perplexity :class:`Evaluator` (with exact reuse of the unchanged decoder prefix) and the forward benchmark.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from accelbench.backends.device import Device
from accelbench.errors import ConfigError, DataError
from accelbench.experiments.llm_quant.layers import decoder_layers
from accelbench.measure import timing as measure
from accelbench.measure.timing import StepClock

# Models whose decoder stack can be restarted at layer i from the cached hidden states (inputs_embeds are
# used unscaled and positions are implicit). Others fall back to full forward passes.
PREFIX_REUSE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3")


def token_chunks(ids: list[int] | torch.Tensor, chunk_len: int, max_tokens: int | None) -> torch.Tensor:
    """Non-overlapping ``chunk_len``-token chunks ``[n, chunk_len]`` of the first ``max_tokens`` tokens
    (None: all; a shorter tail is dropped, as in the usual WikiText-2 protocol).

    Raises:
        DataError: fewer tokens than one chunk.
    """
    ids = torch.as_tensor(ids, dtype=torch.long).flatten()
    if max_tokens:
        ids = ids[:max_tokens]
        chunk_len = min(chunk_len, len(ids))
    n = len(ids) // chunk_len if chunk_len else 0
    if n == 0:
        raise DataError(f"text too short: {len(ids)} tokens for one {chunk_len}-token chunk")
    return ids[: n * chunk_len].reshape(n, chunk_len)


def load_text(data: dict) -> tuple[dict[str, str], dict]:
    """``({"calibration", "validation", "test"}: text, info)`` for ``data["source"]``; ``info["rows"]`` holds the
    lines of each part (WikiText-2's rows; pydoc: each topic's lines), for per-line tokenisation.

    ``pydoc``: CPython's documentation topics split by :func:`accelbench.data.text.split_topics`;
    ``wikitext2``: a local copy read with the ``datasets`` library (``load_from_disk`` folder or a
    dataset script/folder for ``load_dataset``), splits train->calibration, validation, test.

    Raises:
        DataError: the local data set is missing or lacks a split (named).
    """
    from accelbench.data.text import corpus_fingerprint, pydoc_topics, split_topics

    source = data["source"]
    if source == "pydoc":
        parts = split_topics(pydoc_topics(), dict(data["split"]))
        text = {k: "\n\n".join(v.values()) for k, v in parts.items()}
        rows = {k: [ln for t in v.values() for ln in t.splitlines(keepends=True)] for k, v in parts.items()}
        info = {"name": "CPython pydoc_data.topics", "topics": {k: len(v) for k, v in parts.items()}}
    elif source == "wikitext2":
        path = data.get("path")
        if not path:
            raise DataError(
                "llm_quant.data.source is wikitext2 but llm_quant.data.path is not set (a local copy "
                "of wikitext-2-raw-v1; nothing is downloaded)"
            )
        try:
            import datasets

            try:
                ds = datasets.load_from_disk(path)
            except (FileNotFoundError, ValueError):
                ds = datasets.load_dataset(path, data.get("config") or "wikitext-2-raw-v1")
        except Exception as exc:  # datasets raises many types for a missing local copy
            raise DataError(f"WikiText-2 not found at {path!r}: {exc}") from None
        text, rows = {}, {}
        for part, split in (("calibration", "train"), ("validation", "validation"), ("test", "test")):
            if split not in ds:
                raise DataError(f"WikiText-2 at {path!r} has no {split!r} split (found {list(ds)})")
            rows[part] = list(ds[split]["text"])
            text[part] = "\n\n".join(rows[part])
        info = {"name": "WikiText-2 (raw)", "path": str(path)}
    else:
        raise ConfigError(f"llm_quant.data.source {source!r} unknown (pydoc | wikitext2)")
    info["fingerprints"] = {k: corpus_fingerprint(v) for k, v in text.items()}
    info["characters"] = {k: len(v) for k, v in text.items()}
    info["rows"] = rows  # lines (WikiText rows) per part, for per-line tokenisation; callers pop it
    return text, info


class Evaluator:
    """Perplexity of a causal LM on fixed token chunks, with optional reuse of the unchanged prefix.

    With ``reuse_prefix``, :meth:`cache_prefix` stores (on the host) the hidden states entering every
    decoder layer of the unmodified model; :meth:`perplexity` with ``start_layer=i`` then feeds those
    to layers ``i..N-1`` only (via ``inputs_embeds`` and a temporarily shortened layer list). This is
    exact when only layers >= i were changed.
    """

    def __init__(self, model, chunks: torch.Tensor, device: Device, batch_size: int = 1, reuse_prefix: bool = False):
        self.model, self.chunks, self.device, self.batch_size = model, chunks, device, max(1, batch_size)
        self.reuse_prefix = reuse_prefix and getattr(model.config, "model_type", None) in PREFIX_REUSE_MODEL_TYPES
        self.cache: list[list[torch.Tensor]] | None = None  # [batch][layer] -> hidden states

    @property
    def tokens(self) -> int:
        """Number of predicted tokens (the first token of each chunk has no target)."""
        return self.chunks.shape[0] * (self.chunks.shape[1] - 1)

    def _batches(self):
        for i in range(0, self.chunks.shape[0], self.batch_size):
            yield i // self.batch_size, self.chunks[i : i + self.batch_size].to(self.device.torch_device)

    @staticmethod
    def _nll(logits: torch.Tensor, ids: torch.Tensor) -> float:
        return float(F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="sum"))

    @torch.inference_mode()
    def cache_prefix(self) -> None:
        """Run the unmodified model once, keeping the inputs of every decoder layer (host memory)."""
        if not self.reuse_prefix:
            return
        n_layers = len(decoder_layers(self.model))
        self.cache = []
        for _, ids in self._batches():
            out = self.model(input_ids=ids, output_hidden_states=True, use_cache=False)
            self.cache.append([h.detach().to("cpu") for h in out.hidden_states[:n_layers]])

    def cache_nbytes(self, hidden_size: int, n_layers: int, dtype_bytes: int = 4) -> int:
        """Host bytes the prefix cache takes for these chunks."""
        return self.chunks.numel() * hidden_size * n_layers * dtype_bytes

    @torch.inference_mode()
    def perplexity(self, start_layer: int = 0) -> float:
        """exp(mean next-token NLL) over all chunks; ``start_layer`` > 0 reuses the cached prefix."""
        nll = 0.0
        use_cache = self.reuse_prefix and self.cache is not None and start_layer > 0
        inner = self.model.model
        full = inner.layers
        try:
            if use_cache:
                inner.layers = full[start_layer:]
            for b, ids in self._batches():
                if use_cache:
                    h = self.cache[b][start_layer].to(self.device.torch_device)
                    logits = self.model(inputs_embeds=h, use_cache=False).logits
                else:
                    logits = self.model(input_ids=ids, use_cache=False).logits
                nll += self._nll(logits, ids)
        finally:
            inner.layers = full
        return math.exp(nll / self.tokens)

    def timed_perplexity(self) -> tuple[float, float]:
        """``(perplexity, wall seconds)`` of one full evaluation (:class:`accelbench.measure.timing.StepClock`, wall
        mode); its board energy (one window: the whole evaluation, :mod:`accelbench.measure.energy`) is kept in
        ``self.energy``, its clocks (one sample, at its end: :mod:`accelbench.measure.clocks`) in ``self.clocks``."""
        clock = StepClock(self.device, wall=True, energy_steps=1)
        clock.start()
        ppl = self.perplexity()
        clock.stop()
        self.energy = clock.energy()
        self.clocks = clock.clocks()
        return ppl, clock.seconds()


def throughput(
    model, device: Device, vocab: int, batch: int, seq_len: int, warmup: int, repeat: int, seed: int = 0
) -> dict:
    """Forward benchmark on random ``[batch, seq_len]`` token ids: median step time and tokens/s (``energy``: the
    timed steps' board energy, :mod:`accelbench.measure.energy`).

    Not Study B's throughput (evaluation tokens / evaluation time, ``eval_tokens_per_s``): recorded as
    ``forward_benchmark``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq_len), generator=g).to(device.torch_device)

    def step():
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False)

    timing = measure.time_steps(step, device, warmup, repeat, desc="throughput")
    return {
        "forward_step": timing.to_dict(),
        "tokens_per_step": batch * seq_len,
        "tokens_per_s": batch * seq_len / (timing.median * 1e-3),
        "energy": timing.energy,
        "clocks": timing.clocks,
    }
