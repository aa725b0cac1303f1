"""Accuracy tasks through EleutherAI's lm-evaluation-harness (Study B's HellaSwag acc_norm and BoolQ acc) on the
quantized model in memory, from local data only (nothing is downloaded).
"""

from __future__ import annotations

import contextlib

from ...devices import Device
from ...errors import DataError
from ...measure import StepClock

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


def local_task_dir(task: str, folder: str | None, work_dir) -> str:
    """A folder (in ``work_dir``) with one task YAML that includes lm-eval's registered ``task`` unchanged
    (data from the Hugging Face datasets cache, offline) or, with ``folder``, reads its data from there:
    ``datasets.load_dataset(folder)``, i.e. json/jsonl/csv/parquet files whose names give the split
    (``validation.jsonl``, ``train.jsonl``) in the task's record format; splits the folder lacks are unset.

    Raises:
        DataError: ``folder`` is not a folder or holds no data set.
        KeyError: lm-eval has no such task.
    """
    from pathlib import Path

    import yaml

    cfg = {"include": str(task_yaml(task).resolve()), "task": task}
    if folder:
        if not Path(folder).is_dir():
            raise DataError(f"llm_quant.accuracy.data.{task}: {folder!r} is not a folder")
        import datasets

        try:
            splits = set(datasets.load_dataset(str(Path(folder).resolve())))
        except Exception as exc:  # datasets raises many types for an unreadable folder
            raise DataError(f"llm_quant.accuracy.data.{task}: no data set in {folder!r}: {exc}") from None
        cfg.update(dataset_path=str(Path(folder).resolve()), dataset_name=None, dataset_kwargs={})
        base = _task_config(task_yaml(task))  # the registered config, to see which splits it uses
        for key in ("training_split", "validation_split", "test_split", "fewshot_split"):
            if base.get(key) and base[key] not in splits:
                cfg[key] = None
    d = Path(work_dir) / task
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{task}.yaml").write_text(yaml.safe_dump(cfg))
    return str(d)


def accuracy_tasks(model, tokenizer, acc: dict, device: Device, seed: int = 0, work_dir=None) -> dict:
    """Multiple-choice accuracy of ``model`` (the quantized model, in memory) through EleutherAI's
    lm-evaluation-harness (``lm_eval.simple_evaluate`` on an ``HFLM`` wrapping the model instance).

    Study B's tasks: HellaSwag (acc_norm) and BoolQ (acc), 0-shot, validation split (Study B ran 2,000
    samples for the sensitivity map and the full split for the table). Nothing is downloaded: a task reads
    ``acc["data"][task]`` (a local folder, see :func:`local_task_dir`) or else the Hugging Face datasets
    cache in offline mode; a task whose data is not there is ``unsupported`` with the library's reason.

    Args:
        acc: ``{"tasks": [...], "num_fewshot": int, "limit": int | None (documents per task),
            "batch_size": int, "data": {task: folder | None}}`` (config ``llm_quant.accuracy``).

    Returns:
        ``{task: {"status": "ok", "metric", "value" (fraction), "stderr", "metrics": {acc, acc_norm, ...},
        "samples", "num_fewshot", "data", "time_s"} | {"status": "unsupported", "reason"}}``.
    """
    import logging
    import tempfile

    out: dict = {}
    tasks = list(acc.get("tasks") or [])
    if not tasks:
        return out
    try:
        _offline_datasets()
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as exc:  # an image without lm-eval or datasets: recorded per task, the perplexity still runs
        reason = (f"lm-evaluation-harness is not importable here ({type(exc).__name__}: {exc}); "
                  "install the project's dependencies (lm_eval, datasets)")
        return {task: {"status": "unsupported", "reason": reason[:500]} for task in tasks}

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    try:
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=acc.get("batch_size", 1),
                  device=str(device.torch_device))
    except (ValueError, TypeError, RuntimeError, AttributeError) as exc:  # e.g. a device lm-eval does not know
        reason = f"lm-evaluation-harness cannot wrap this model: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return {task: {"status": "unsupported", "reason": reason[:500]} for task in tasks}
    folders = acc.get("data") or {}
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        for task in tasks:
            folder = folders.get(task)
            where = f"local folder {folder}" if folder else "Hugging Face datasets cache (offline)"
            try:
                manager = TaskManager(include_path=local_task_dir(task, folder, tmp), include_defaults=False)
                clock = StepClock(device, wall=True)
                clock.start()
                res = simple_evaluate(model=lm, tasks=[task], task_manager=manager, num_fewshot=acc.get("num_fewshot", 0),
                                      limit=acc.get("limit"), batch_size=acc.get("batch_size", 1),
                                      log_samples=False, bootstrap_iters=acc.get("bootstrap_iters", 1000),
                                      random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                                      fewshot_random_seed=seed)
                clock.stop()
                wall = clock.seconds()
            except (OSError, ValueError, KeyError, DataError, ConnectionError, RuntimeError) as exc:
                if isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower():
                    raise
                msg = str(exc).splitlines()[0] if str(exc) else ""
                out[task] = {"status": "unsupported", "data": where,
                             "reason": f"{task}: no local data ({where}): {type(exc).__name__}: {msg}"[:500]}
                continue
            r = res["results"][task]
            metrics = {k.split(",")[0]: v for k, v in r.items() if "," in k and not k.startswith("alias")}
            metric = STUDY_B_TASK_METRIC.get(task, "acc_norm" if "acc_norm" in metrics else "acc")
            if metric not in metrics:
                metric = next(k for k in metrics if not k.endswith("_stderr"))
            out[task] = {"status": "ok", "reason": None, "metric": metric, "value": float(metrics[metric]),
                         "stderr": metrics.get(f"{metric}_stderr"), "unit": "fraction",
                         "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
                         "samples": int(res["n-samples"][task]["effective"]),
                         "samples_in_split": int(res["n-samples"][task]["original"]),
                         "num_fewshot": res["n-shot"].get(task, acc.get("num_fewshot", 0)),
                         "data": where, "time_s": wall,
                         "samples_per_s": int(res["n-samples"][task]["effective"]) / wall if wall else None,
                         "harness": f"lm_eval {_lm_eval_version()}"}
    return out


def _lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")
