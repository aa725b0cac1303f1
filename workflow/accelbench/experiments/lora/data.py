"""Study B (arXiv 2607.05400) LoRA fine-tuning data: instruction/response pairs, the held-out split, the prompt
format and dataset concatenation of optimum-habana's ``run_lora_clm.py`` (used by :mod:`.train`)."""

from __future__ import annotations

from pathlib import Path

from accelbench.errors import ConfigError, DataError

PROMPT = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request."
    "\n\n### Instruction:\n{instruction}\n\n### Response:\n"
)


def build_pairs(
    source: str = "pydoc", path: str | None = None, instruction_key: str = "instruction", output_key: str = "output"
) -> list[dict]:
    """Instruction/response pairs ``[{"id", "instruction", "output"}]`` in a deterministic order.

    ``pydoc``: one pair per ``pydoc_data.topics`` topic (sorted): "Explain the Python topic '<topic>'." ->
    the reference-manual text. ``file``: a JSON (list of objects), JSONL or parquet file with ``instruction_key`` and
    ``output_key`` columns (Study B's BoltMonkey/psychology-instruction-output uses ``instruction``/``output``).

    Raises:
        DataError: missing file, unsupported suffix, or missing columns (named).
    """
    if source == "pydoc":
        from accelbench.data.text import pydoc_topics

        return [
            {"id": t, "instruction": f"Explain the Python topic '{t}'.", "output": text.strip()}
            for t, text in pydoc_topics().items()
            if text.strip()
        ]
    if source != "file":
        raise ConfigError(f"lora_finetune.data.source {source!r} unknown (pydoc | file)")
    import io

    import pandas as pd

    from accelbench.core import files

    p = Path(path or "")
    if not p.exists():
        raise DataError(f"lora_finetune.data.path: instruction file {p} not found")
    if p.suffix not in (".parquet", ".json", ".jsonl"):
        raise DataError(f"instruction file {p}: unsupported suffix {p.suffix!r} (.json, .jsonl, .parquet)")
    # a plain file of bounded size (a FIFO or device: one line naming it), read once
    raw = files.read_bytes(p, "instruction file", files.MAX_BYTES, DataError)
    if p.suffix == ".parquet":
        try:
            df = pd.read_parquet(io.BytesIO(raw))
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DataError(f"instruction file {p} is not a readable parquet file: {why}") from None
    elif p.suffix == ".json":
        import json

        try:
            files.check_nodes(raw, p, "instruction file", DataError)  # memory, not only bytes
            rows = json.loads(raw.decode())
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise DataError(f"instruction file {p} is not valid JSON: {exc}") from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise DataError(
                f"instruction file {p} holds a JSON {type(rows).__name__}"
                f"{'' if not isinstance(rows, list) else ' with items that are not objects'}; a list of "
                f'objects is needed: [{{"{instruction_key}": ..., "{output_key}": ...}}, ...]'
            )
        df = pd.DataFrame(rows)
    elif p.suffix == ".jsonl":
        try:
            df = pd.read_json(io.StringIO(raw.decode()), lines=True)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataError(f"instruction file {p} is not valid JSON lines: {exc}") from None
    else:
        raise DataError(f"instruction file {p}: unsupported suffix {p.suffix!r} (.json, .jsonl, .parquet)")
    missing = [k for k in (instruction_key, output_key) if k not in df.columns]
    if missing:
        raise DataError(f"instruction file {p} lacks column(s) {missing}; has {list(df.columns)}")
    return [
        {"id": str(i), "instruction": str(a), "output": str(b)}
        for i, (a, b) in enumerate(zip(df[instruction_key], df[output_key]))
    ]


def split_pairs(pairs: list[dict], eval_fraction: float = 0.1) -> tuple[list[dict], list[dict]]:
    """Deterministic train/held-out split by a hash of each pair's id
    (see :func:`accelbench.data.text.split_topics`)."""
    from accelbench.data.text import split_topics

    parts = split_topics({p["id"]: p for p in pairs}, {"train": 1 - eval_fraction, "eval": eval_fraction})
    return list(parts["train"].values()), list(parts["eval"].values())


def format_pair(pair: dict) -> str:
    """Prompt + response as one training text (``run_lora_clm.py``'s prompt without input)."""
    return PROMPT.format(instruction=pair["instruction"]) + pair["output"]


def concat_blocks(token_lists: list[list[int]], seq_len: int, eos_id: int | None) -> list[list[int]]:
    """Dataset concatenation: join the examples (EOS after each) and cut into ``seq_len`` blocks; the tail that
    does not fill a block is dropped (as ``run_lora_clm.py``'s ``group_texts``)."""
    flat: list[int] = []
    for ids in token_lists:
        flat.extend(ids)
        if eos_id is not None:
            flat.append(eos_id)
    n = len(flat) // seq_len
    return [flat[i * seq_len : (i + 1) * seq_len] for i in range(n)]


class BlockDataset:
    """Map-style dataset of token blocks: each item is ``{input_ids, attention_mask, labels}`` (LongTensor (seq_len,)),
    labels equal to input_ids (causal LM: every token is trained on; the model shifts internally).

    ``attention_mask=False`` leaves the all-ones mask out: concatenated blocks have no padding, so the model computes
    the same causal attention without the mask's extra operations: the forward of a bare loop (``model(input_ids,
    labels)``)."""

    def __init__(self, blocks: list[list[int]], attention_mask: bool = True):
        self.blocks = blocks
        self.attention_mask = attention_mask

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict:
        import torch

        ids = torch.tensor(self.blocks[i], dtype=torch.long)
        if not self.attention_mask:
            return {"input_ids": ids, "labels": ids.clone()}
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def build_datasets(
    tokenizer, data_cfg: dict, seq_len: int, min_train_blocks: int, eval_blocks: int, attention_mask: bool = True
):
    """Tokenised, concatenated train and held-out :class:`BlockDataset` plus a summary dict (``attention_mask``:
    see :class:`BlockDataset`).

    Raises:
        DataError: fewer train blocks than the run needs (``min_train_blocks``).
    """
    from accelbench.data.text import corpus_fingerprint

    pairs = build_pairs(
        data_cfg["source"],
        data_cfg["path"],
        data_cfg["instruction_key"],
        data_cfg["output_key"],
    )
    train, held = split_pairs(pairs, data_cfg["eval_fraction"])
    tok = lambda ps: [tokenizer(format_pair(p), add_special_tokens=False)["input_ids"] for p in ps]  # noqa: E731
    train_tokens, held_tokens = tok(train), tok(held)
    train_blocks = concat_blocks(train_tokens, seq_len, tokenizer.eos_token_id)
    eval_b = concat_blocks(held_tokens, seq_len, tokenizer.eos_token_id)[:eval_blocks]
    if len(train_blocks) < min_train_blocks:
        raise DataError(
            f"instruction data gives {len(train_blocks)} blocks of {seq_len} tokens; the run needs "
            f"{min_train_blocks} (lower timed_steps or add data)"
        )
    summary = {
        "source": data_cfg["source"],
        "path": data_cfg["path"],
        "pairs": len(pairs),
        "train_pairs": len(train),
        "eval_pairs": len(held),
        "train_tokens": sum(len(t) + 1 for t in train_tokens),
        "train_blocks": len(train_blocks),
        "eval_blocks": len(eval_b),
        "seq_len": seq_len,
        "fingerprint": corpus_fingerprint("\n".join(format_pair(p) for p in pairs)),
    }
    return BlockDataset(train_blocks, attention_mask), BlockDataset(eval_b, attention_mask), summary
