"""llm_quant.evaluate: evaluation text, token chunks, and the perplexity against transformers' own loss."""

import math

import pytest
import torch

from accelbench.backends.device import Device
from accelbench.errors import DataError
from accelbench.experiments.llm_quant.evaluate import Evaluator, load_text, token_chunks
from llm_quant_helpers import chunks, tiny_llama  # noqa: F401 (module-scoped fixtures)


def test_pydoc_splits_are_deterministic_and_disjoint(default_config):
    data = default_config["llm_quant"]["data"]  # as a job's spec holds it: source pydoc, the schema's split
    text, info = load_text(data)
    again, _ = load_text(data)
    assert text == again and set(text) == {"calibration", "validation", "test"}
    assert len(set(info["fingerprints"].values())) == 3 and all(len(t) > 50_000 for t in text.values())


def test_missing_wikitext_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="WikiText-2 not found at"):
        load_text({"source": "wikitext2", "path": str(tmp_path / "nowhere")})
    with pytest.raises(DataError, match="llm_quant.data.path"):
        load_text({"source": "wikitext2", "path": None})


def test_token_chunks():
    c = token_chunks(list(range(100)), 32, None)
    assert c.shape == (3, 32) and c[1, 0] == 32
    assert token_chunks(list(range(100)), 512, 40).shape == (1, 40)
    with pytest.raises(DataError, match="too short"):
        token_chunks([1, 2], 8, None)


def check_perplexity_against_transformers(model, chunks) -> None:
    """Evaluator's perplexity equals exp(mean of transformers' own causal-LM loss, which shifts labels itself), an
    independent computation of the same next-token NLL (equal-length chunks: the mean of chunk means is the mean).
    Raises AssertionError otherwise."""
    with torch.inference_mode():
        losses = [float(model(input_ids=c[None], labels=c[None], use_cache=False).loss) for c in chunks]
    ref = math.exp(sum(losses) / len(losses))
    got = Evaluator(model, chunks, Device("cpu")).perplexity()
    assert math.isclose(got, ref, rel_tol=1e-5), (got, ref)


def test_perplexity_matches_transformers_loss(tiny_llama, chunks):
    check_perplexity_against_transformers(tiny_llama, chunks)


@pytest.mark.parametrize("wrong", ["no_shift", "shift_backwards"])
def test_sabotage_wrong_chunk_shift_is_caught(tiny_llama, chunks, monkeypatch, wrong):
    """Sabotage: predicting the token itself (no shift) or the previous one must fail the perplexity check."""

    def nll(logits, ids):
        lg, tg = (logits, ids) if wrong == "no_shift" else (logits[:, 1:], ids[:, :-1])
        return float(
            torch.nn.functional.cross_entropy(lg.flatten(0, 1).float(), tg.flatten(), reduction="sum")
            * (ids.shape[1] - 1)
            / tg.shape[1]
        )

    monkeypatch.setattr(Evaluator, "_nll", staticmethod(nll))
    with pytest.raises(AssertionError):
        check_perplexity_against_transformers(tiny_llama, chunks)
