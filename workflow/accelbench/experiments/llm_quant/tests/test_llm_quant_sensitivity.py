"""llm_quant.sensitivity: the per-layer sensitivity map (prefix reuse exact, weights restored), clustering, bit
allocation and the INC FP8 module split."""

import math

import pytest
import torch

from accelbench.backends.device import Device
from accelbench.errors import ConfigError
from accelbench.experiments.llm_quant.evaluate import Evaluator
from accelbench.experiments.llm_quant.layers import decoder_layers
from accelbench.experiments.llm_quant.projections import MLP_SUBMODULES, SUBMODULES
from accelbench.experiments.llm_quant.sensitivity import (
    CLUSTERINGS,
    assign_bits,
    cluster_sensitivities,
    fp8_modules,
    parse_bitset,
    perturbed,
    prune_,
    sensitivity_map,
)
from llm_quant_helpers import chunks, sensitivity_result, tiny_llama  # noqa: F401 (module-scoped fixtures)


def test_prefix_reuse_is_exact_and_untouched_layer_has_zero_sensitivity(tiny_llama, chunks):
    ev = Evaluator(tiny_llama, chunks, Device("cpu"), reuse_prefix=True)
    ev.cache_prefix()
    base = ev.perplexity()
    for i in range(4):
        assert ev.perplexity(start_layer=i) == base
    sens = sensitivity_map(tiny_llama, ev, ["prune", "quant4"], prune_amount=0.0, group_size=128, submodules="none")
    # pruning 0% leaves every layer untouched: exactly zero change
    assert [r["prune"] for r in sens["layers"]] == [0.0] * 4


def test_sensitivity_restores_weights_and_sees_changes(tiny_llama, chunks):
    before = {k: v.clone() for k, v in tiny_llama.state_dict().items()}
    ev = Evaluator(tiny_llama, chunks, Device("cpu"), reuse_prefix=True)
    sens = sensitivity_map(tiny_llama, ev, ["prune", "quant4"], 0.3, 128, "per_type")
    after = tiny_llama.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(r["prune"] != 0.0 for r in sens["layers"])
    assert {r["module"] for r in sens["submodules"]} == set(SUBMODULES)
    # the cached-prefix result equals a full forward pass with the same layer pruned
    layer = decoder_layers(tiny_llama)[2]
    params = dict(layer.named_parameters())
    full = Evaluator(tiny_llama, chunks, Device("cpu"), reuse_prefix=False)
    with perturbed(params):
        prune_(params, 0.3)
        assert math.isclose(full.perplexity(), sens["layers"][2]["prune_ppl"], rel_tol=1e-6)


def test_each_weight_is_ranked_once_and_the_map_is_the_same_as_without_the_mask_cache(tiny_llama, chunks, monkeypatch):
    from torch.nn.utils.prune import L1Unstructured

    from accelbench.experiments.llm_quant import sensitivity

    original, ranked = L1Unstructured.compute_mask, []

    def counting(self, t, default_mask):
        ranked.append(id(t))
        return original(self, t, default_mask)

    monkeypatch.setattr(L1Unstructured, "compute_mask", counting)
    ev = Evaluator(tiny_llama, chunks, Device("cpu"), reuse_prefix=True)
    cached = sensitivity_map(tiny_llama, ev, ["prune"], 0.3, 128, "per_type")
    assert len(ranked) == len(set(ranked))  # the sub-module pass reuses the layer pass's masks
    ranked.clear()
    cache_class = sensitivity.MaskCache
    monkeypatch.setattr(sensitivity, "MaskCache", lambda: cache_class(budget_bytes=0))
    again = sensitivity_map(tiny_llama, ev, ["prune"], 0.3, 128, "per_type")
    assert len(ranked) > len(set(ranked))  # nothing kept past the budget: ranked again, as without a cache
    assert again == cached


def test_prune_zeroes_the_smallest_fraction():
    p = torch.nn.Parameter(torch.arange(1.0, 11.0))
    prune_({"p": p}, 0.3)
    assert p.tolist() == [0, 0, 0, 4, 5, 6, 7, 8, 9, 10]


# --------------------------------------------------------------------------- allocation
@pytest.mark.parametrize("method", CLUSTERINGS)
def test_allocation_is_deterministic_and_ranked(method):
    scores = [0.1, 5.0, 0.2, 0.15, 2.0, 9.0, 0.05, 2.5, 0.3]
    a, b = cluster_sensitivities(scores, method), cluster_sensitivities(list(scores), method)
    assert a == b and set(a) == {0, 1, 2}
    assert a[5] == 2 and a[6] == 0  # most / least sensitive
    means = [sum(s for s, r in zip(scores, a) if r == k) / a.count(k) for k in range(3)]
    assert means == sorted(means)


def test_percentile_buckets_are_equal_sized():
    ranks = cluster_sensitivities(list(range(9)), "percentile")
    assert ranks == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_study_b_buckets_7_7_8_and_8_7_7():
    """Study B's scripts' "percentile" clustering: 22 layers sorted by decreasing sensitivity, n // 3 per group;
    the A100/WikiText scripts give the remainder to the least sensitive group (7/7/8), the Gaudi2 HellaSwag/BoolQ
    scripts one extra each from the most sensitive (8/7/7)."""
    scores = [((7 * i) % 22) / 10 for i in range(22)]  # a permutation: no ties
    for method, sizes in (("buckets", [8, 7, 7]), ("buckets_spread", [7, 7, 8])):
        ranks = cluster_sensitivities(scores, method)
        assert [ranks.count(r) for r in range(3)] == sizes  # rank 0 = least sensitive
        top = sorted(range(22), key=lambda i: -scores[i])[: sizes[2]]
        assert all(ranks[i] == 2 for i in top)
        assert [assign_bits(ranks, [16, 8, 4]).count(b) for b in (16, 8, 4)] == sizes[::-1]


def test_assign_bits_and_bitsets():
    assert assign_bits([2, 1, 0, 0], [16, 8, 4]) == [16, 8, 4, 4]
    assert assign_bits([2, 1, 0], [8, 4, 4]) == [8, 4, 4]
    assert assign_bits([1, 0], [16, 8, 4]) == [16, 4]
    assert parse_bitset("16_8_4") == [16, 8, 4]
    with pytest.raises(ConfigError, match="16, 8 or 4"):
        parse_bitset("4_8_16")
    with pytest.raises(ConfigError):
        cluster_sensitivities([1, 2, 3], "dbscan")


def test_fewer_distinct_values_than_clusters():
    assert cluster_sensitivities([1.0, 1.0, 1.0], "kmeans") == [0, 0, 0]


def test_fp8_split_is_half_of_the_mlp_modules(tiny_llama, chunks):
    sens = sensitivity_result(tiny_llama, chunks, "per_layer")
    names = fp8_modules(sens, 4)
    assert len(names) == 6 and all(".mlp." in n for n in names)
    low = sorted((r["prune"], r["layer"], r["module"]) for r in sens["submodules"] if r["module"] in MLP_SUBMODULES)
    assert set(names) == {f"model.layers.{i}.mlp.{m}" for _, i, m in low[:6]}
