"""Study B LoRA data (:mod:`accelbench.experiments.lora.data`): instruction pairs, held-out split, concatenation."""

import json

import pytest
import torch

from accelbench.errors import DataError
from accelbench.experiments.lora.data import BlockDataset, build_datasets, build_pairs, concat_blocks, split_pairs


class ToyTokenizer:
    """Whitespace tokenizer with a fixed vocabulary built on the fly (deterministic)."""

    eos_token_id = 0
    eos_token = "<eos>"
    pad_token = None

    def __init__(self):
        self.vocab = {}

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.vocab.setdefault(w, len(self.vocab) + 1) for w in text.split()]}


def test_pairs_are_deterministic_and_complete():
    a, b = build_pairs("pydoc"), build_pairs("pydoc")
    assert a == b and len(a) > 50
    assert all(p["output"] and p["instruction"].startswith("Explain the Python topic") for p in a)
    train, held = split_pairs(a)
    assert {p["id"] for p in train}.isdisjoint({p["id"] for p in held}) and len(train) + len(held) == len(a)
    assert held and split_pairs(a) == (train, held)


def test_concatenation_keeps_every_token_and_masks_nothing():
    tokens = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    blocks = concat_blocks(tokens, 4, eos_id=0)
    flat = [1, 2, 3, 0, 4, 5, 0, 6, 7, 8, 9, 0]
    assert blocks == [flat[0:4], flat[4:8], flat[8:12]]
    item = BlockDataset(blocks)[1]
    assert torch.equal(item["labels"], item["input_ids"]) and (item["labels"] != -100).all()
    assert item["attention_mask"].sum() == 4
    assert concat_blocks(tokens, 5, eos_id=0) == [flat[0:5], flat[5:10]]  # the tail is dropped


def test_build_datasets_from_pydoc(monkeypatch, default_config):
    data = default_config["lora_finetune"]["data"]  # source pydoc, every key present as in a spec
    tok = ToyTokenizer()
    train, held, summary = build_datasets(tok, data, seq_len=32, min_train_blocks=8, eval_blocks=2)
    assert len(train) == summary["train_blocks"] >= 8 and len(held) == 2
    prompt_ids = set(tok("### Instruction: ### Response:")["input_ids"])
    assert prompt_ids <= {t for b in train.blocks for t in b}  # prompts are trained on too (run_lora_clm.py)
    with pytest.raises(DataError, match="the run needs"):
        build_datasets(ToyTokenizer(), data, seq_len=32, min_train_blocks=10**7, eval_blocks=0)


def test_instruction_file(tmp_path):
    p = tmp_path / "set.jsonl"
    p.write_text("\n".join(json.dumps({"instruction": f"q{i}", "output": f"a {i}"}) for i in range(5)))
    pairs = build_pairs("file", str(p))
    assert [x["output"] for x in pairs] == [f"a {i}" for i in range(5)]
    with pytest.raises(DataError, match="lacks column"):
        build_pairs("file", str(p), output_key="response")
    with pytest.raises(DataError, match="not found"):
        build_pairs("file", str(tmp_path / "missing.parquet"))
