"""Per-layer sensitivity (Study B: prune 30% of one layer; ours: 4-bit quantization of one layer), the
clustering of the sensitivities and the bit allocation that follows from it (bit sets, INC FP8 module split).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from tqdm.auto import tqdm

from accelbench.errors import ConfigError
from accelbench.experiments.llm_quant.evaluate import Evaluator
from accelbench.experiments.llm_quant.layers import decoder_layers, layer_linears
from accelbench.experiments.llm_quant.projections import MLP_SUBMODULES, SUBMODULES
from accelbench.experiments.llm_quant.quantize import quantize_

CLUSTERINGS = ("kmeans", "percentile", "ward", "buckets", "buckets_spread")


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


class MaskCache:
    """Pruning masks (bool) kept by parameter while their total stays under ``budget_bytes``: the sub-module pass
    prunes the same unperturbed weights that the layer pass pruned (``perturbed`` restores them exactly), and
    ``L1Unstructured``'s ``topk`` over each weight is about a third of the sensitivity job on a CPU. A weight whose
    mask would pass the budget (paper-scale models) gets it computed again, as without a cache."""

    def __init__(self, budget_bytes: int = 1 << 30):
        self.budget, self.used, self.masks = budget_bytes, 0, {}

    def get(self, key, compute):
        if key in self.masks:
            return self.masks[key]
        mask = compute()
        if self.used + mask.numel() <= self.budget:
            self.masks[key] = mask.bool()
            self.used += mask.numel()
        return mask


def prune_(params: dict[str, torch.nn.Parameter], amount: float, cache: MaskCache | None = None) -> None:
    """Study B's perturbation: zero the ``amount`` fraction of smallest-magnitude entries of each
    parameter separately (``torch.nn.utils.prune.L1Unstructured``), in place. ``cache``: masks of unchanged
    weights reused (keyed by the parameter object; only for weights restored to the same values in between)."""
    from torch.nn.utils.prune import L1Unstructured

    method = L1Unstructured(amount=amount)
    with torch.no_grad():
        for p in params.values():
            if amount > 0:

                def compute(p=p):
                    return method.compute_mask(p, torch.ones_like(p))

                p.mul_(cache.get((id(p), amount), compute) if cache is not None else compute())


def sensitivity_map(
    model, evaluator: Evaluator, metrics: list[str], prune_amount: float, group_size: int, submodules: str
) -> dict:
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
    masks = MaskCache()  # each weight is pruned at most twice (its layer, its projection type): one topk
    evaluator.cache_prefix()
    base = evaluator.perplexity()
    rows = []
    for i in tqdm(range(len(layers)), desc="layer sensitivity"):
        row = {"layer": i}
        if "prune" in metrics:
            params = dict(layers[i].named_parameters())
            with perturbed(params):
                prune_(params, prune_amount, masks)
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
            params = {
                f"{i}.{name}": lin[name].weight
                for i, layer in enumerate(layers)
                if name in (lin := layer_linears(layer))
            }
            if not params:
                continue
            with perturbed(params):
                prune_(params, prune_amount, masks)
                ppl = evaluator.perplexity()
            sub.append({"layer": "all", "module": name, "prune_ppl": ppl, "prune": ppl - base})
    elif submodules == "per_layer":
        for i in tqdm(range(len(layers)), desc="sub-module sensitivity"):
            for name, mod in layer_linears(layers[i]).items():
                with perturbed({name: mod.weight}) as params:
                    prune_(params, prune_amount, masks)
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
    cut into k clusters. Study B's scripts' "percentile" (amitashnanda/Voyager_Gaudi_Benchmarks): layers sorted
    by decreasing sensitivity, cut into runs of n // k; ``buckets``: the remainder joins the least sensitive group
    (A100 and WikiText scripts: 22 layers -> 7/7/8, most sensitive first); ``buckets_spread``: one extra layer
    per group from the most sensitive (Gaudi2 HellaSwag/BoolQ scripts: 8/7/7). Fewer distinct values than k
    gives fewer groups (not for the buckets, which are sized by count). Deterministic.

    Raises:
        ConfigError: unknown method.
    """
    x = np.asarray(scores, dtype=float)
    if method in ("buckets", "buckets_spread"):
        k = max(1, min(k, len(x)))
        order = sorted(range(len(x)), key=lambda i: (-x[i], i))  # most sensitive first, ties by layer
        size, extra = divmod(len(x), k)
        labels, start = [0] * len(x), 0
        for c in range(k):  # c = 0: most sensitive
            n = size + (extra if method == "buckets" and c == k - 1 else int(method == "buckets_spread" and c < extra))
            for i in order[start : start + n]:
                labels[i] = k - 1 - c
            start += n
        return labels
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
        j = k - 1 - r  # 0 = most sensitive
        idx = 0 if k == 1 else round(j * (len(bits) - 1) / (k - 1))
        out.append(bits[idx])
    return out


def allocations(layer_rows: list[dict], metrics: list[str], seed: int = 0) -> dict:
    """Cluster ranks for every (metric, clustering): ``{metric: {clustering: [rank per layer]}}``."""
    return {
        m: {c: cluster_sensitivities([r[m] for r in layer_rows], c, seed=seed) for c in CLUSTERINGS} for m in metrics
    }


def fp8_modules(sens: dict, n_layers: int) -> list[str]:
    """Study B's Gaudi2 split: the low-sensitivity half of the MLP projections (gate/up/down of every
    layer) go to FP8. Scores: per-(layer, module) pruning sensitivity where measured, else the layer's."""
    per = {(r["layer"], r["module"]): r["prune"] for r in sens.get("submodules", []) if r["layer"] != "all"}
    layer_score = {r["layer"]: r.get("prune", r.get("quant4", 0.0)) for r in sens["layers"]}
    scored = [(per.get((i, m), layer_score[i]), i, m) for i in range(n_layers) for m in MLP_SUBMODULES]
    scored.sort()
    return [f"model.layers.{i}.mlp.{m}" for _, i, m in scored[: len(scored) // 2]]
