"""The toy experiment's own tests, in its folder's ``tests/`` (tier ``experiments``, set by the root conftest.py):
the rule functions give one result path and one spec per configured size."""

from __future__ import annotations

from types import SimpleNamespace

from accelbench.experiments.toy import rules


def test_one_result_and_one_spec_per_size():
    rc = SimpleNamespace(
        results_dir="results",
        config={"toy_matmul": {"sizes": [8, 16], "warmup": 1, "repeat": 3}},
        common_spec=lambda: {"system": "cpu"},
    )
    assert rules.results(rc, "cpu") == [
        "results/cpu/toy_matmul/n8/result.json",
        "results/cpu/toy_matmul/n16/result.json",
    ]
    assert rules.spec(rc, SimpleNamespace(size="16")) == {"system": "cpu", "size": 16, "warmup": 1, "repeat": 3}
