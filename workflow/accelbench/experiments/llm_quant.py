"""Study B (arXiv 2607.05400): pruning-based mixed-precision quantization of a causal LM, measured.

Reproduces Study B's quantization study (TinyLlama-1.1B there; SmolLM2-135M in the embedded default):

1. **Baseline**: perplexity on non-overlapping ``chunk_len``-token chunks (Study B: 512), evaluation
   time and Study B's throughput, evaluation tokens / evaluation time (``eval_tokens_per_s``; the
   published columns satisfy throughput x eval time = 338.4k tokens, WikiText-2's test split). A
   separate forward benchmark on random token ids (``forward_benchmark``,
   :func:`accelbench.measure.time_steps`) is kept under its own name.
2. **Sensitivity** (:func:`sensitivity_map`): per decoder layer, Study B's way: magnitude-prune 30% of
   the weights of every parameter of that layer only (``torch.nn.utils.prune.L1Unstructured``) and
   record the perplexity increase on the validation split; ours: the increase when only that layer's
   linear weights are quantized to 4 bits; the sub-module variant (q/k/v/o/gate/up/down) prunes one
   projection (per layer, or per projection type across all layers). Weights are restored from an
   in-memory snapshot between layers, never reloaded from disk. Because a change in layer ``i``
   leaves the hidden states entering layer ``i`` untouched, those are cached once and only layers
   ``i..N-1`` are rerun (exact; checked by the tests); see :class:`Evaluator`.
3. **Allocation** (:func:`cluster_sensitivities`, :func:`assign_bits`): three clusters of the layer
   sensitivities (k-means: scikit-learn; percentile buckets: numpy; Ward: scipy); the most sensitive
   cluster gets the first (largest) bit width of a bit set [16,8,4], [8,8,4] or [8,4,4].
4. **Simulated quantization** (``fake``): symmetric min-max, round-to-nearest, weight-only, per group
   of ``group_size`` (128) consecutive input features, FP16 scales (:func:`quantize_groupwise`);
   16 bits = FP16 rounding. Weights are stored packed (int8 codes; two 4-bit codes per byte) and the
   bytes before/after are counted from those tensors (:func:`QuantizedTensor.nbytes`).
5. **Real quantization**: torchao weight-only int8 (``Int8WeightOnlyConfig``) / int4
   (``Int4WeightOnlyConfig``, tinygemm layout, CUDA + bf16 only) per layer following the allocation;
   on Gaudi, Intel Neural Compressor FP8 (E4M3, measure-then-quantize with maxabs scaling) on the
   low-sensitivity half of the MLP modules, the rest BF16 (Study B's Gaudi2 setting; gated on
   ``habana_frameworks``, never imported otherwise). Real sizes are counted from the quantized
   tensors and from their serialized state dict. A kernel, dtype or backend the system lacks gives
   status ``unsupported`` with torchao's own error as the reason; any other error fails the job
   (:func:`torchao_unsupported_reason`).

6. **Accuracy** (:func:`accuracy_tasks`): Study B's HellaSwag (acc_norm) and BoolQ (acc) through EleutherAI's
   lm-evaluation-harness on the quantized model in memory, from a local copy of the data only (a task
   without one is ``unsupported`` with the reason).

Kept in high precision as in Study B: embeddings, ``lm_head``, norms. Functions do no file I/O;
:mod:`accelbench.cli` (``accelbench llm-quant``) reads inputs and writes results.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .. import measure
from ..devices import Device
from ..errors import ConfigError, DataError

EXPERIMENT = "llm_quant"
SUBMODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MLP_SUBMODULES = ("gate_proj", "up_proj", "down_proj")
METHODS = ("fp32", "fake", "torchao", "inc_fp8")
CLUSTERINGS = ("kmeans", "percentile", "ward")
# Models whose decoder stack can be restarted at layer i from the cached hidden states (inputs_embeds are
# used unscaled and positions are implicit). Others fall back to full forward passes.
PREFIX_REUSE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3")


# --------------------------------------------------------------------------- quantizer
@dataclass
class QuantizedTensor:
    """Group-wise symmetric integer codes of a 2-D weight ``[out_features, in_features]``.

    ``codes``: uint8, ``bits`` = 8: one int8 code per byte (viewed as uint8); ``bits`` = 4: two codes per byte
    (low nibble first), codes offset by 8. ``scales``: float16 ``[out_features, ceil(in_features / group_size)]``.
    """

    codes: torch.Tensor
    scales: torch.Tensor
    shape: tuple[int, int]
    bits: int
    group_size: int

    def nbytes(self) -> int:
        """Bytes of the stored tensors (codes + scales)."""
        return self.codes.numel() * self.codes.element_size() + self.scales.numel() * self.scales.element_size()


def qmax(bits: int) -> int:
    """Largest code magnitude of a symmetric ``bits``-bit quantizer (127 for 8, 7 for 4)."""
    return 2 ** (bits - 1) - 1


def _grouped(w: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[out, in]`` -> ``[out, n_groups, group_size]``, zero-padded at the end of each row."""
    out_f, in_f = w.shape
    pad = (-in_f) % group_size
    if pad:
        w = F.pad(w, (0, pad))
    return w.reshape(out_f, -1, group_size)


def quantize_groupwise(w: torch.Tensor, bits: int, group_size: int = 128) -> QuantizedTensor:
    """Symmetric min-max round-to-nearest quantization per group of ``group_size`` input features.

    scale = max|w| over the group / qmax(bits), stored in FP16; code = clamp(round(w / scale), -qmax, qmax).
    Error bound per element: |w - dequantize(q)| <= scale / 2 (up to the FP16 rounding of the scale).
    Rows whose length is not a multiple of ``group_size`` get a shorter last group (zero padding).

    Args:
        w: 2-D float tensor ``[out_features, in_features]``.
        bits: 8 or 4.

    Raises:
        ValueError: other bit widths or a non-2-D tensor.
    """
    if bits not in (4, 8):
        raise ValueError(f"integer quantization supports 4 or 8 bits, not {bits}")
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(w.shape)}")
    g = _grouped(w.detach().float(), group_size)
    q = qmax(bits)
    scales = (g.abs().amax(dim=-1, keepdim=True) / q).to(torch.float16)
    s = scales.float()
    codes = torch.where(s > 0, torch.round(g / torch.where(s > 0, s, 1.0)), 0.0).clamp_(-q, q)
    codes = codes.reshape(w.shape[0], -1)[:, : w.shape[1]].to(torch.int8)
    if bits == 8:
        packed = codes.view(torch.uint8).reshape(-1)
    else:
        u = (codes.reshape(-1) + 8).to(torch.uint8)
        if u.numel() % 2:
            u = torch.cat([u, u.new_zeros(1)])
        packed = u[0::2] | (u[1::2] << 4)
    return QuantizedTensor(packed, scales.squeeze(-1), tuple(w.shape), bits, group_size)


def dequantize(qt: QuantizedTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of :func:`quantize_groupwise` up to rounding: codes x scales, shape ``qt.shape``."""
    out_f, in_f = qt.shape
    if qt.bits == 8:
        codes = qt.codes.view(torch.int8)[: out_f * in_f]
    else:
        lo, hi = (qt.codes & 0x0F), (qt.codes >> 4)
        codes = torch.stack([lo, hi], dim=-1).reshape(-1)[: out_f * in_f].to(torch.int16) - 8
    codes = codes.reshape(out_f, in_f).float()
    g = _grouped(codes, qt.group_size) * qt.scales.float().unsqueeze(-1)
    return g.reshape(out_f, -1)[:, :in_f].to(dtype)


def expected_nbytes(shape: tuple[int, int], bits: int, group_size: int) -> int:
    """Storage bytes of a ``shape`` weight at ``bits`` (16: FP16, no scales; 32: FP32), group-wise FP16 scales."""
    out_f, in_f = shape
    if bits in (16, 32):
        return out_f * in_f * bits // 8
    return math.ceil(out_f * in_f * bits / 8) + out_f * math.ceil(in_f / group_size) * 2


def fake_quantize(w: torch.Tensor, bits: int, group_size: int = 128) -> tuple[torch.Tensor, int]:
    """Simulated quantization: ``(dequantized weight in w's dtype, stored bytes)``.

    bits 4/8: :func:`quantize_groupwise` then :func:`dequantize`; 16: FP16 rounding; 32: unchanged.
    """
    if bits == 32:
        return w.detach().clone(), w.numel() * 4
    if bits == 16:
        h = w.detach().to(torch.float16)
        return h.to(w.dtype), h.numel() * h.element_size()
    qt = quantize_groupwise(w, bits, group_size)
    return dequantize(qt, w.dtype).to(w.device), qt.nbytes()


# --------------------------------------------------------------------------- model structure
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
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return {"param_bytes": total, "decoder_linear_bytes": linear, "serialized_bytes": buf.getbuffer().nbytes}


# --------------------------------------------------------------------------- text
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
    """``({"calibration", "validation", "test"}: text, info)`` for ``data["source"]``.

    ``pydoc``: CPython's documentation topics split by :func:`accelbench.data.text.split_topics`;
    ``wikitext2``: a local copy read with the ``datasets`` library (``load_from_disk`` folder or a
    dataset script/folder for ``load_dataset``), splits train->calibration, validation, test.

    Raises:
        DataError: the local data set is missing or lacks a split (named).
    """
    from ..data.text import corpus_fingerprint, pydoc_topics, split_topics

    source = data.get("source", "pydoc")
    if source == "pydoc":
        parts = split_topics(pydoc_topics(), dict(data.get("split") or {"calibration": 0.2, "validation": 0.4, "test": 0.4}))
        text = {k: "\n\n".join(v.values()) for k, v in parts.items()}
        info = {"name": "CPython pydoc_data.topics", "topics": {k: len(v) for k, v in parts.items()}}
    elif source == "wikitext2":
        path = data.get("path")
        if not path:
            raise DataError("llm_quant.data.source is wikitext2 but llm_quant.data.path is not set (a local copy "
                            "of wikitext-2-raw-v1; nothing is downloaded)")
        try:
            import datasets

            try:
                ds = datasets.load_from_disk(path)
            except (FileNotFoundError, ValueError):
                ds = datasets.load_dataset(path, data.get("config") or "wikitext-2-raw-v1")
        except Exception as exc:  # datasets raises many types for a missing local copy
            raise DataError(f"WikiText-2 not found at {path!r}: {exc}") from None
        text = {}
        for part, split in (("calibration", "train"), ("validation", "validation"), ("test", "test")):
            if split not in ds:
                raise DataError(f"WikiText-2 at {path!r} has no {split!r} split (found {list(ds)})")
            text[part] = "\n\n".join(ds[split]["text"])
        info = {"name": "WikiText-2 (raw)", "path": str(path)}
    else:
        raise ConfigError(f"llm_quant.data.source {source!r} unknown (pydoc | wikitext2)")
    info["fingerprints"] = {k: corpus_fingerprint(v) for k, v in text.items()}
    info["characters"] = {k: len(v) for k, v in text.items()}
    return text, info


# --------------------------------------------------------------------------- evaluation
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
            yield i // self.batch_size, self.chunks[i: i + self.batch_size].to(self.device.torch_device)

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
        """``(perplexity, wall seconds)`` of one full evaluation (device synchronized)."""
        self.device.synchronize()
        t0 = time.perf_counter()
        ppl = self.perplexity()
        self.device.synchronize()
        return ppl, time.perf_counter() - t0


def throughput(model, device: Device, vocab: int, batch: int, seq_len: int, warmup: int, repeat: int,
               seed: int = 0) -> dict:
    """Forward benchmark on random ``[batch, seq_len]`` token ids: median step time and tokens/s.

    Not Study B's throughput (evaluation tokens / evaluation time, ``eval_tokens_per_s``): recorded as
    ``forward_benchmark``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq_len), generator=g).to(device.torch_device)

    def step():
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False)

    timing = measure.time_steps(step, device, warmup, repeat, desc="throughput")
    return {"forward_step": timing.to_dict(), "tokens_per_step": batch * seq_len,
            "tokens_per_s": batch * seq_len / (timing.median * 1e-3)}


# --------------------------------------------------------------------------- accuracy tasks (lm-evaluation-harness)
# Study B's accuracy metric per task: HellaSwag acc_norm (length-normalised), BoolQ accuracy.
STUDY_B_TASK_METRIC = {"hellaswag": "acc_norm", "boolq": "acc"}


def _offline_datasets() -> None:
    """Forbid every Hugging Face download in this process (tasks read a local copy only)."""
    import os

    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets

    datasets.config.HF_HUB_OFFLINE = True
    datasets.config.HF_DATASETS_OFFLINE = True


def task_yaml(task: str):
    """The YAML file of lm-evaluation-harness's registered ``task`` (found by a text scan of the package's
    task folder: building lm-eval's full task index parses thousands of files, about a minute on 2 cores).

    Raises:
        KeyError: lm-eval has no such task.
    """
    import re
    from pathlib import Path

    import lm_eval.tasks

    pattern = re.compile(rf"^task:\s*['\"]?{re.escape(task)}['\"]?\s*$", re.M)
    for path in sorted(Path(lm_eval.tasks.__file__).parent.rglob("*.yaml")):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if pattern.search(path.read_text()):
                return path
    raise KeyError(f"lm-evaluation-harness {_lm_eval_version()} has no task {task!r}")


def _task_config(path) -> dict:
    """A task YAML as data (``!function`` tags left unresolved), with its ``include`` files merged under it."""
    from pathlib import Path

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    path = Path(path)
    cfg = yaml.load(path.read_text(), Loader=Loader) or {}  # noqa: S506 (SafeLoader subclass)
    includes = cfg.pop("include", None) or []
    merged: dict = {}
    for inc in includes if isinstance(includes, list) else [includes]:
        merged.update(_task_config(path.parent / inc))
    return {**merged, **cfg}


def local_task_dir(task: str, folder: str | None, work_dir) -> str:
    """A folder (in ``work_dir``) with one task YAML that includes lm-eval's registered ``task`` unchanged
    (data from the Hugging Face datasets cache, offline) or, with ``folder``, reads its data from there:
    ``datasets.load_dataset(folder)``, i.e. json/jsonl/csv/parquet files whose names give the split
    (``validation.jsonl``, ``train.jsonl``) in the task's record format; splits the folder lacks are unset.

    Raises:
        DataError: ``folder`` is not a folder or holds no data set.
        KeyError: lm-eval has no such task.
    """
    from pathlib import Path

    import yaml

    cfg = {"include": str(task_yaml(task).resolve()), "task": task}
    if folder:
        if not Path(folder).is_dir():
            raise DataError(f"llm_quant.accuracy.data.{task}: {folder!r} is not a folder")
        import datasets

        try:
            splits = set(datasets.load_dataset(str(Path(folder).resolve())))
        except Exception as exc:  # datasets raises many types for an unreadable folder
            raise DataError(f"llm_quant.accuracy.data.{task}: no data set in {folder!r}: {exc}") from None
        cfg.update(dataset_path=str(Path(folder).resolve()), dataset_name=None, dataset_kwargs={})
        base = _task_config(task_yaml(task))  # the registered config, to see which splits it uses
        for key in ("training_split", "validation_split", "test_split", "fewshot_split"):
            if base.get(key) and base[key] not in splits:
                cfg[key] = None
    d = Path(work_dir) / task
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{task}.yaml").write_text(yaml.safe_dump(cfg))
    return str(d)


def accuracy_tasks(model, tokenizer, acc: dict, device: Device, seed: int = 0, work_dir=None) -> dict:
    """Multiple-choice accuracy of ``model`` (the quantized model, in memory) through EleutherAI's
    lm-evaluation-harness (``lm_eval.simple_evaluate`` on an ``HFLM`` wrapping the model instance).

    Study B's tasks: HellaSwag (acc_norm) and BoolQ (acc), 0-shot, validation split (Study B ran 2,000
    samples for the sensitivity map and the full split for the table). Nothing is downloaded: a task reads
    ``acc["data"][task]`` (a local folder, see :func:`local_task_dir`) or else the Hugging Face datasets
    cache in offline mode; a task whose data is not there is ``unsupported`` with the library's reason.

    Args:
        acc: ``{"tasks": [...], "num_fewshot": int, "limit": int | None (documents per task),
            "batch_size": int, "data": {task: folder | None}}`` (config ``llm_quant.accuracy``).

    Returns:
        ``{task: {"status": "ok", "metric", "value" (fraction), "stderr", "metrics": {acc, acc_norm, ...},
        "samples", "num_fewshot", "data", "time_s"} | {"status": "unsupported", "reason"}}``.
    """
    import logging
    import tempfile

    out: dict = {}
    tasks = list(acc.get("tasks") or [])
    if not tasks:
        return out
    try:
        _offline_datasets()
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as exc:  # an image without lm-eval or datasets: recorded per task, the perplexity still runs
        reason = (f"lm-evaluation-harness is not importable here ({type(exc).__name__}: {exc}); "
                  "install the project's dependencies (lm_eval, datasets)")
        return {task: {"status": "unsupported", "reason": reason[:500]} for task in tasks}

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    try:
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=acc.get("batch_size", 1),
                  device=str(device.torch_device))
    except (ValueError, TypeError, RuntimeError, AttributeError) as exc:  # e.g. a device lm-eval does not know
        reason = f"lm-evaluation-harness cannot wrap this model: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return {task: {"status": "unsupported", "reason": reason[:500]} for task in tasks}
    folders = acc.get("data") or {}
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        for task in tasks:
            folder = folders.get(task)
            where = f"local folder {folder}" if folder else "Hugging Face datasets cache (offline)"
            try:
                manager = TaskManager(include_path=local_task_dir(task, folder, tmp), include_defaults=False)
                device.synchronize()
                t0 = time.perf_counter()
                res = simple_evaluate(model=lm, tasks=[task], task_manager=manager, num_fewshot=acc.get("num_fewshot", 0),
                                      limit=acc.get("limit"), batch_size=acc.get("batch_size", 1),
                                      log_samples=False, bootstrap_iters=acc.get("bootstrap_iters", 1000),
                                      random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                                      fewshot_random_seed=seed)
                device.synchronize()
                wall = time.perf_counter() - t0
            except (OSError, ValueError, KeyError, DataError, ConnectionError, RuntimeError) as exc:
                if isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower():
                    raise
                msg = str(exc).splitlines()[0] if str(exc) else ""
                out[task] = {"status": "unsupported", "data": where,
                             "reason": f"{task}: no local data ({where}): {type(exc).__name__}: {msg}"[:500]}
                continue
            r = res["results"][task]
            metrics = {k.split(",")[0]: v for k, v in r.items() if "," in k and not k.startswith("alias")}
            metric = STUDY_B_TASK_METRIC.get(task, "acc_norm" if "acc_norm" in metrics else "acc")
            if metric not in metrics:
                metric = next(k for k in metrics if not k.endswith("_stderr"))
            out[task] = {"status": "ok", "reason": None, "metric": metric, "value": float(metrics[metric]),
                         "stderr": metrics.get(f"{metric}_stderr"), "unit": "fraction",
                         "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
                         "samples": int(res["n-samples"][task]["effective"]),
                         "samples_in_split": int(res["n-samples"][task]["original"]),
                         "num_fewshot": res["n-shot"].get(task, acc.get("num_fewshot", 0)),
                         "data": where, "time_s": wall,
                         "samples_per_s": int(res["n-samples"][task]["effective"]) / wall if wall else None,
                         "harness": f"lm_eval {_lm_eval_version()}"}
    return out


def _lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


# --------------------------------------------------------------------------- sensitivity
@contextlib.contextmanager
def perturbed(params: dict[str, torch.nn.Parameter]):
    """Snapshot ``params`` in memory; restore them (in place) on exit."""
    saved = {k: p.detach().clone() for k, p in params.items()}
    try:
        yield params
    finally:
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(saved[k])


def prune_(params: dict[str, torch.nn.Parameter], amount: float) -> None:
    """Study B's perturbation: zero the ``amount`` fraction of smallest-magnitude entries of each
    parameter separately (``torch.nn.utils.prune.L1Unstructured``), in place."""
    from torch.nn.utils.prune import L1Unstructured

    method = L1Unstructured(amount=amount)
    with torch.no_grad():
        for p in params.values():
            if amount > 0:
                p.mul_(method.compute_mask(p, torch.ones_like(p)))


def quantize_(linears: dict[str, torch.nn.Linear], bits: int, group_size: int) -> int:
    """Replace the weights of ``linears`` by their simulated ``bits``-bit version in place; returns stored bytes."""
    stored = 0
    with torch.no_grad():
        for mod in linears.values():
            w, b = fake_quantize(mod.weight, bits, group_size)
            mod.weight.copy_(w)
            stored += b
    return stored


def sensitivity_map(model, evaluator: Evaluator, metrics: list[str], prune_amount: float, group_size: int,
                    submodules: str) -> dict:
    """Per-layer (and per-sub-module) perplexity increase on the evaluator's text.

    Args:
        metrics: ``prune`` (Study B: prune ``prune_amount`` of every parameter of the layer) and/or
            ``quant4`` (ours: 4-bit simulated quantization of the layer's linear weights).
        submodules: ``none``; ``per_type`` (prune one projection type in all layers at once);
            ``per_layer`` (prune one projection of one layer: layers x 7 evaluations).

    Returns:
        ``{"baseline_ppl", "layers": [{"layer", "prune_ppl", "prune", "quant4_ppl", "quant4"}, ...],
        "submodules": [{"layer" (or "all"), "module", "prune_ppl", "prune"}, ...]}``; sensitivity = ppl - baseline.
    """
    layers = decoder_layers(model)
    evaluator.cache_prefix()
    base = evaluator.perplexity()
    rows = []
    for i in tqdm(range(len(layers)), desc="layer sensitivity"):
        row = {"layer": i}
        if "prune" in metrics:
            params = dict(layers[i].named_parameters())
            with perturbed(params):
                prune_(params, prune_amount)
                row["prune_ppl"] = evaluator.perplexity(start_layer=i)
        if "quant4" in metrics:
            lin = layer_linears(layers[i])
            with perturbed({k: m.weight for k, m in lin.items()}):
                quantize_(lin, 4, group_size)
                row["quant4_ppl"] = evaluator.perplexity(start_layer=i)
        for m in ("prune", "quant4"):
            if f"{m}_ppl" in row:
                row[m] = row[f"{m}_ppl"] - base
        rows.append(row)
    sub = []
    if submodules == "per_type":
        for name in tqdm(SUBMODULES, desc="sub-module sensitivity"):
            params = {f"{i}.{name}": lin[name].weight for i, layer in enumerate(layers)
                      if name in (lin := layer_linears(layer))}
            if not params:
                continue
            with perturbed(params):
                prune_(params, prune_amount)
                ppl = evaluator.perplexity()
            sub.append({"layer": "all", "module": name, "prune_ppl": ppl, "prune": ppl - base})
    elif submodules == "per_layer":
        for i in tqdm(range(len(layers)), desc="sub-module sensitivity"):
            for name, mod in layer_linears(layers[i]).items():
                with perturbed({name: mod.weight}) as params:
                    prune_(params, prune_amount)
                    ppl = evaluator.perplexity(start_layer=i)
                sub.append({"layer": i, "module": name, "prune_ppl": ppl, "prune": ppl - base})
    elif submodules != "none":
        raise ConfigError(f"llm_quant.submodules {submodules!r} unknown (none | per_type | per_layer)")
    return {"baseline_ppl": base, "layers": rows, "submodules": sub}


# --------------------------------------------------------------------------- allocation
def cluster_sensitivities(scores, method: str, k: int = 3, seed: int = 0) -> list[int]:
    """Cluster 1-D sensitivities into ``k`` groups, ranked: 0 = least sensitive, k-1 = most.

    ``kmeans``: ``sklearn.cluster.KMeans(n_init=10, random_state=seed)``; ``percentile``: equal-count
    buckets at the 100/k percentiles; ``ward``: ``scipy.cluster.hierarchy.linkage(method="ward")``
    cut into k clusters. Fewer distinct values than k gives fewer groups. Deterministic.

    Raises:
        ConfigError: unknown method.
    """
    x = np.asarray(scores, dtype=float)
    k = max(1, min(k, len(np.unique(x))))
    if k == 1:
        return [0] * len(x)
    if method == "kmeans":
        from sklearn.cluster import KMeans

        labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x[:, None])
    elif method == "percentile":
        edges = np.percentile(x, [100 * j / k for j in range(1, k)])
        labels = np.digitize(x, edges, right=True)
    elif method == "ward":
        from scipy.cluster.hierarchy import fcluster, linkage

        labels = fcluster(linkage(x[:, None], method="ward"), t=k, criterion="maxclust")
    else:
        raise ConfigError(f"llm_quant.allocation.clustering {method!r} unknown ({' | '.join(CLUSTERINGS)})")
    labels = np.asarray(labels)
    order = sorted(set(labels.tolist()), key=lambda c: (x[labels == c].mean(), c))
    rank = {c: r for r, c in enumerate(order)}
    return [rank[c] for c in labels.tolist()]


def parse_bitset(bitset: str) -> list[int]:
    """``"16_8_4"`` -> ``[16, 8, 4]`` (high to low). Raises ConfigError on other forms."""
    try:
        bits = [int(b) for b in bitset.split("_")]
    except ValueError:
        raise ConfigError(f"bit set {bitset!r} must look like 16_8_4") from None
    if not bits or any(b not in (4, 8, 16) for b in bits) or bits != sorted(bits, reverse=True):
        raise ConfigError(f"bit set {bitset!r}: widths must be 16, 8 or 4, from high to low")
    return bits


def assign_bits(ranks: list[int], bits: list[int]) -> list[int]:
    """Bits per layer: the most sensitive cluster gets ``bits[0]``, the least ``bits[-1]``."""
    k = max(ranks) + 1
    out = []
    for r in ranks:
        j = (k - 1 - r)  # 0 = most sensitive
        idx = 0 if k == 1 else round(j * (len(bits) - 1) / (k - 1))
        out.append(bits[idx])
    return out


def allocations(layer_rows: list[dict], metrics: list[str], seed: int = 0) -> dict:
    """Cluster ranks for every (metric, clustering): ``{metric: {clustering: [rank per layer]}}``."""
    return {m: {c: cluster_sensitivities([r[m] for r in layer_rows], c, seed=seed) for c in CLUSTERINGS}
            for m in metrics}


def fp8_modules(sens: dict, n_layers: int) -> list[str]:
    """Study B's Gaudi2 split: the low-sensitivity half of the MLP projections (gate/up/down of every
    layer) go to FP8. Scores: per-(layer, module) pruning sensitivity where measured, else the layer's."""
    per = {(r["layer"], r["module"]): r["prune"] for r in sens.get("submodules", []) if r["layer"] != "all"}
    layer_score = {r["layer"]: r.get("prune", r.get("quant4", 0.0)) for r in sens["layers"]}
    scored = [(per.get((i, m), layer_score[i]), i, m) for i in range(n_layers) for m in MLP_SUBMODULES]
    scored.sort()
    return [f"model.layers.{i}.mlp.{m}" for _, i, m in scored[: len(scored) // 2]]


# --------------------------------------------------------------------------- methods
def apply_fake(model, layer_bits: list[int], group_size: int) -> dict:
    """Simulated quantization of each decoder layer's linear weights at its bits; bytes before/after."""
    before = after = 0
    for layer, bits in tqdm(list(zip(decoder_layers(model), layer_bits)), desc="fake quantization"):
        lin = layer_linears(layer)
        before += sum(tensor_nbytes(m.weight) for m in lin.values())
        after += quantize_(lin, bits, group_size)
    return {"decoder_linear_bytes_before": before, "decoder_linear_bytes_after": after,
            "compression_x": before / after if after else None}


# What "unsupported here" looks like when torchao (or the dispatcher under it) lacks a kernel, dtype or backend:
# ImportError (a kernel package such as mslk/fbgemm-gpu missing), NotImplementedError, and RuntimeError/
# AssertionError/ValueError whose message says so (the dispatcher's "Could not run ... with arguments from the
# 'CPU' backend", "not implemented for 'Float'", "only supports bfloat16", "Torch not compiled with CUDA").
# Anything else (TypeError, KeyError, AttributeError, a CUDA error, ...) is a bug here and fails the job.
_UNSUPPORTED_MESSAGE = re.compile(
    r"not implemented for|not supported|unsupported|could not run|no kernel|requires? |only supports?|"
    r"not compiled with|is only available|needs? (cuda|a gpu|bfloat16|bf16)|expected .*dtype", re.I)


def torchao_unsupported_reason(exc: BaseException, what: str) -> str | None:
    """The reason string if ``exc`` means torchao cannot run ``what`` here (missing kernel, dtype or
    backend), else None (the caller re-raises: a bug must not read as a hardware limitation)."""
    import torchao

    msg = str(exc).splitlines()[0] if str(exc) else ""
    genuine = isinstance(exc, (ImportError, NotImplementedError)) or (
        isinstance(exc, (RuntimeError, AssertionError, ValueError)) and not isinstance(exc, torch.OutOfMemoryError)
        and bool(_UNSUPPORTED_MESSAGE.search(msg)))
    return f"torchao {torchao.__version__} {what}: {type(exc).__name__}: {msg}" if genuine else None


def torchao_probe(bits: int, device: Device, dtype: torch.dtype, group_size: int) -> str | None:
    """None if torchao's ``bits``-bit weight-only quantization runs here, else the reason (its error).

    Raises:
        Exception: any error that does not mean "unsupported here" (:func:`torchao_unsupported_reason`).
    """
    lin = torch.nn.Sequential(torch.nn.Linear(group_size * 2, 64, bias=False)).to(device.torch_device, dtype)
    try:
        from torchao.quantization import quantize_ as ao_quantize_

        ao_quantize_(lin, torchao_config(bits, group_size, device.backend))
        lin(torch.randn(2, group_size * 2, dtype=dtype, device=device.torch_device))
    except Exception as exc:
        reason = torchao_unsupported_reason(exc, f"int{bits} weight-only on {device.backend} with {dtype}")
        if reason is None:
            raise
        return reason
    return None


def torchao_config(bits: int, group_size: int, backend: str):
    """torchao config object for weight-only int8 (per row) or int4 (group-wise, tinygemm layout on CUDA)."""
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig

    if bits == 8:
        return Int8WeightOnlyConfig()
    if bits == 4:
        if backend == "cuda":
            try:  # torchao >= 0.14 names the tinygemm layout; older versions use it by default
                return Int4WeightOnlyConfig(group_size=group_size, int4_packing_format="tile_packed_to_4d")
            except TypeError:
                pass
        return Int4WeightOnlyConfig(group_size=group_size)
    raise ValueError(f"torchao weight-only: no config for {bits} bits")


def int4_group_size(in_features: int, group_size: int) -> int:
    """torchao int4 needs in_features divisible by the group: the largest of group_size, 64, 32 that divides."""
    for g in (group_size, 64, 32):
        if in_features % g == 0:
            return g
    raise ValueError(f"in_features {in_features} is not divisible by 32")


def apply_torchao(model, layer_bits: list[int], group_size: int, backend: str) -> dict:
    """torchao weight-only quantization per decoder layer (16 = left in the model dtype). Returns the group
    sizes used for int4 (torchao needs in_features divisible by the group)."""
    from torchao.quantization import quantize_ as ao_quantize_

    groups, targets = {}, {}
    for i, (layer, bits) in enumerate(zip(decoder_layers(model), layer_bits)):
        if bits == 16:
            continue
        for name, mod in layer_linears(layer).items():
            g = int4_group_size(mod.in_features, group_size) if bits == 4 else group_size
            if bits == 4 and g != group_size:
                groups[f"{i}.{name}"] = g
            targets.setdefault((bits, g), set()).add(id(mod))
    for (bits, g), ids in tqdm(sorted(targets.items()), desc="torchao"):
        ao_quantize_(model, torchao_config(bits, g, backend), filter_fn=lambda m, fqn, ids=ids: id(m) in ids)
    return {"int4_group_size_fallbacks": groups}


def apply_inc_fp8(model, fp8_names: list[str], calib: torch.Tensor, device: Device, stats_dir: str) -> dict:
    """Intel Neural Compressor FP8 (E4M3) on Gaudi: measure (maxabs) on calibration chunks, then quantize
    only ``fp8_names`` (Study B's Gaudi2 flow; the rest stays BF16). Imported only on ``hpu``."""
    from neural_compressor.torch.quantization import FP8Config, convert, finalize_calibration, prepare

    common = {"fp8_config": "E4M3", "allowlist": {"types": [], "names": fp8_names},
              "blocklist": {"types": [], "names": ["lm_head"]}, "dump_stats_path": stats_dir}
    model = prepare(model, FP8Config(mode="MEASURE", observer="maxabs", **common))
    with torch.inference_mode():
        for ids in calib:
            model(input_ids=ids[None].to(device.torch_device), use_cache=False)
            device.mark_step()
    finalize_calibration(model)
    model = convert(model, FP8Config(mode="QUANTIZE", scale_method="maxabs_hw", **common))
    return {"fp8_modules": fp8_names, "calibration_chunks": int(calib.shape[0])}


@dataclass
class MethodRun:
    """Settings of one method job (see config/config.schema.yaml, ``llm_quant``)."""

    method: str
    bitset: str
    chunk_len: int
    eval_tokens: int | None
    group_size: int
    clustering: str
    metric: str
    throughput: dict
    eval_batch: int = 1
    calibration_tokens: int | None = None
    seed: int = 0
    accuracy: dict | None = None  # config llm_quant.accuracy (lm-evaluation-harness tasks); None = none


def run_method(model, tokenizer_vocab: int, test_chunks: torch.Tensor, calib_chunks: torch.Tensor | None,
               sens: dict, run: MethodRun, device: Device, stats_dir: str = ".", tokenizer=None) -> dict:
    """Quantize ``model`` (already on ``device``) per ``run`` and measure it: perplexity, throughput, sizes
    and, with ``run.accuracy`` and a ``tokenizer``, the accuracy tasks (:func:`accuracy_tasks`) on the
    quantized model in memory (``measurements["accuracy"][task]``).

    Returns:
        ``{"status", "reason", "measurements", "allocation"}``; status ``unsupported`` when the
        method's kernels are not available on this system (reason = the library's error).
    """
    n_layers = len(decoder_layers(model))
    alloc = {}
    if run.method in ("fake", "torchao"):
        bits = parse_bitset(run.bitset)
        ranks = sens["allocation"][run.metric][run.clustering]
        if len(ranks) != n_layers:
            raise DataError(f"sensitivity result has {len(ranks)} layers, the model {n_layers}")
        layer_bits = assign_bits(ranks, bits)
        alloc = {"bits": bits, "metric": run.metric, "clustering": run.clustering, "cluster_rank": ranks,
                 "layer_bits": layer_bits}
    size_before = model_sizes(model)
    lin_fp32 = 4 * sum(m.weight.numel() for layer in decoder_layers(model) for m in layer_linears(layer).values())
    all_fp32 = 4 * sum(p.numel() for p in model.parameters())
    applied: dict = {}
    if run.method == "fake":
        applied = apply_fake(model, layer_bits, run.group_size)
    elif run.method == "torchao":
        dtype = next(model.parameters()).dtype
        for b in sorted(set(layer_bits) - {16}):
            reason = torchao_probe(b, device, dtype, run.group_size)
            if reason:
                return {"status": "unsupported", "reason": reason, "measurements": {}, "allocation": alloc}
        try:
            applied = apply_torchao(model, layer_bits, run.group_size, device.backend)
        except Exception as exc:  # only a kernel/dtype/backend this torchao build lacks is "unsupported"
            reason = torchao_unsupported_reason(exc, f"weight-only quantization on {device.backend}")
            if reason is None:
                raise
            return {"status": "unsupported", "measurements": {}, "allocation": alloc, "reason": reason}
    elif run.method == "inc_fp8":
        names = fp8_modules(sens, n_layers)
        alloc = {"fp8_modules": names, "bf16_rest": True}
        applied = apply_inc_fp8(model, names, calib_chunks, device, stats_dir)
    elif run.method != "fp32":
        raise ConfigError(f"llm_quant method {run.method!r} unknown ({' | '.join(METHODS)})")
    size_after = model_sizes(model)
    ev = Evaluator(model, test_chunks, device, batch_size=run.eval_batch)
    ppl, eval_s = ev.timed_perplexity()
    tp = throughput(model, device, tokenizer_vocab, seed=run.seed, **run.throughput)
    accuracy = (accuracy_tasks(model, tokenizer, run.accuracy, device, seed=run.seed)
                if run.accuracy and run.accuracy.get("tasks") and tokenizer is not None else {})
    lin_after = applied.get("decoder_linear_bytes_after", size_after["decoder_linear_bytes"])
    # simulated: stored size = unchanged parameters + packed decoder weights; real: bytes in memory
    model_after = size_after["param_bytes"] - size_after["decoder_linear_bytes"] + lin_after
    m = {
        "perplexity": {"value": ppl, "unit": "ppl", "tokens": ev.tokens, "chunks": int(test_chunks.shape[0]),
                       "chunk_len": int(test_chunks.shape[1])},
        "eval_time": {"value": eval_s, "unit": "s"},
        "eval_tokens_per_s": {"value": ev.tokens / eval_s if eval_s else None, "unit": "tokens/s",
                              "of": "predicted tokens / evaluation wall time (Study B's throughput)"},
        "forward_benchmark": {**tp, "unit": "tokens/s",
                              "of": "forward passes on random token ids (batch x seq_len), not Study B's throughput"},
        "size": {"unit": "bytes", "before": size_before, "after": size_after,
                 "decoder_linear_bytes_fp32": lin_fp32, "decoder_linear_bytes_after": lin_after,
                 "how": ("packed codes + FP16 scales (simulated storage)" if run.method == "fake" else
                         "bytes of the quantized tensors in memory (tensor subclasses flattened)")},
        "compression_x": {"value": lin_fp32 / lin_after if lin_after else None, "unit": "x",
                          "of": "decoder-layer linear weights vs. their FP32 bytes (Study B's compression)"},
        "model_compression_x": {"value": all_fp32 / model_after, "unit": "x",
                                "of": "all parameters vs. FP32 (embeddings, lm_head, norms kept in the model dtype)"},
        "applied": {k: v for k, v in applied.items() if not k.startswith("decoder_linear_bytes")},
        "accuracy": accuracy,
    }
    device_peak = device.peak_memory_bytes()
    if device_peak is not None:
        m["peak_mem_gib"] = device_peak / 2**30
    return {"status": "ok", "reason": None, "measurements": m, "allocation": alloc}


# --------------------------------------------------------------------------- job entry points (file I/O)
def load_model(model_spec: dict, model_dir, dtype: str):
    """``(model, tokenizer, info)`` from a folder written by :func:`accelbench.models.export.export_hf_folder`
    (rule ``llm_export``), else from the spec."""
    from pathlib import Path

    from ..models.llm import dtype_kwargs, load_causal_lm, model_label

    if model_dir:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ..models.export import INFO_FILE, exported_info

        d = Path(model_dir)
        if exported_info(d) is None:
            raise DataError(f"{d} is not an exported model folder (no {INFO_FILE}); rerun its llm_export rule")
        model = AutoModelForCausalLM.from_pretrained(d, **dtype_kwargs(getattr(torch, dtype)),
                                                     local_files_only=True).eval()
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
        info = {**exported_info(d), "dtype": dtype}
        if "label" in info:  # the compute dtype of this job, not of the export
            info["label"] = model_label(info["name"], dtype, info.get("quantized_file"))
        return model, tok, info
    lm = load_causal_lm(model_spec, dtype=dtype)
    if lm.tokenizer is None:
        raise ConfigError("llm_quant needs a tokenizer: give `tokenizer:` in the model spec")
    return lm.model, lm.tokenizer, lm.info


def _chunks_for(spec: dict, tokenizer, part: str, max_tokens):
    text, data_info = load_text(spec["data"])
    ids = tokenizer(text[part], add_special_tokens=False)["input_ids"]
    return token_chunks(ids, spec["chunk_len"], max_tokens), {**data_info, "part": part, "part_tokens": len(ids)}


def run_sensitivity_job(spec: dict, system, model_dir=None) -> tuple[dict, dict]:
    """The sensitivity job: ``(outcome, tables)``; ``tables`` = ``{"layers": [...], "submodules": [...]}``."""
    from ..devices import Device

    device = Device(system.backend)
    torch.manual_seed(spec.get("seed", 0))
    model, tok, info = load_model(spec["model_spec"], model_dir, "float32")
    model.to(device.torch_device)
    chunks, data_info = _chunks_for(spec, tok, "validation", spec.get("sensitivity_tokens"))
    ev = Evaluator(model, chunks, device, batch_size=spec.get("eval_batch", 1), reuse_prefix=spec.get("reuse_prefix", True))
    n_layers = len(decoder_layers(model))
    limit = spec.get("prefix_cache_limit_gib", 8) * 2**30
    if ev.reuse_prefix and ev.cache_nbytes(model.config.hidden_size, n_layers) > limit:
        ev.reuse_prefix = False
    t0 = time.perf_counter()
    try:
        sens = sensitivity_map(model, ev, spec["sensitivity_metrics"], spec["prune_amount"], spec["group_size"],
                               spec["submodules"])
    except device.out_of_memory_errors() as exc:
        return ({"status": "oom", "measurements": {"device_memory_gib": system.device_memory_gib},
                 "reason": f"out of device memory: {str(exc).splitlines()[0]}"}, {"layers": [], "submodules": []})
    wall = time.perf_counter() - t0
    alloc = allocations(sens["layers"], spec["sensitivity_metrics"], seed=spec.get("seed", 0))
    for m, by in alloc.items():
        for c, ranks in by.items():
            for row, r in zip(sens["layers"], ranks):
                row[f"cluster_{m}_{c}"] = r
    measurements = {
        "baseline_ppl": {"value": sens["baseline_ppl"], "unit": "ppl", "tokens": ev.tokens,
                         "chunks": int(chunks.shape[0]), "chunk_len": int(chunks.shape[1]), "split": "validation"},
        "layers": sens["layers"], "submodules": sens["submodules"],
        "allocation": alloc,
        "sensitivity_time": {"value": wall, "unit": "s", "prefix_reuse": ev.reuse_prefix,
                             "evaluations": len(sens["layers"]) * len(spec["sensitivity_metrics"]) + len(sens["submodules"]) + 1},
        "model": info, "data": data_info,
    }
    return {"status": "ok", "reason": None, "measurements": measurements}, {"layers": sens["layers"], "submodules": sens["submodules"]}


def run_method_job(spec: dict, system, sensitivity: dict, model_dir=None, stats_dir=".") -> dict:
    """One (method, bit set) job: load, quantize, measure. ``sensitivity`` = the sensitivity result.json."""
    from ..devices import Device
    from ..systems import habana_available

    method = spec["method"]
    if method == "inc_fp8" and (system.backend != "hpu" or not habana_available()):
        return {"status": "unsupported", "measurements": {}, "allocation": {},
                "reason": f"Intel Neural Compressor FP8 needs Intel Gaudi (system {system.name!r}, backend "
                          f"{system.backend!r}; habana_frameworks {'present' if habana_available() else 'not installed'})"}
    if method == "torchao" and importlib_missing("torchao"):
        return {"status": "unsupported", "measurements": {}, "allocation": {}, "reason": "torchao is not installed"}
    if sensitivity["status"] != "ok":
        return {"status": "unsupported", "measurements": {}, "allocation": {},
                "reason": f"the sensitivity job did not run: {sensitivity.get('reason')}"}
    device = Device(system.backend)
    dtype = {"fp32": "float32", "fake": "float32", "inc_fp8": "bfloat16",
             "torchao": spec.get("torchao_dtype", {}).get(system.backend, "bfloat16")}[method]
    if method == "torchao":  # check the kernels before spending time on loading the model
        ranks = sensitivity["measurements"]["allocation"][spec["allocation"]["metric"]][spec["allocation"]["clustering"]]
        layer_bits = assign_bits(ranks, parse_bitset(spec["bitset"]))
        for b in sorted(set(layer_bits) - {16}):
            reason = torchao_probe(b, device, getattr(torch, dtype), spec["group_size"])
            if reason:
                return {"status": "unsupported", "reason": reason, "measurements": {},
                        "allocation": {"bits": parse_bitset(spec["bitset"]), "layer_bits": layer_bits}}
    torch.manual_seed(spec.get("seed", 0))
    model, tok, info = load_model(spec["model_spec"], model_dir, dtype)
    model.to(device.torch_device)
    test, data_info = _chunks_for(spec, tok, "test", spec.get("eval_tokens"))
    calib = None
    if method == "inc_fp8":
        calib, _ = _chunks_for(spec, tok, "calibration", spec.get("calibration_tokens"))
    run = MethodRun(method=method, bitset=spec["bitset"], chunk_len=spec["chunk_len"], eval_tokens=spec.get("eval_tokens"),
                    group_size=spec["group_size"], clustering=spec["allocation"]["clustering"],
                    metric=spec["allocation"]["metric"], throughput=spec["throughput"],
                    eval_batch=spec.get("eval_batch", 1), seed=spec.get("seed", 0), accuracy=spec.get("accuracy"))
    device.reset_peak_memory()
    try:
        out = run_method(model, len(tok), test, calib, sensitivity["measurements"], run, device, stats_dir, tokenizer=tok)
    except device.out_of_memory_errors() as exc:
        return {"status": "oom", "measurements": {"device_memory_gib": system.device_memory_gib}, "allocation": {},
                "reason": f"out of device memory: {str(exc).splitlines()[0]}"}
    if out["status"] == "ok":
        out["measurements"].update({"model": info, "data": data_info, "dtype": dtype})
    return out


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None
