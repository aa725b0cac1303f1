"""Host overhead of the LoRA Trainer step on the CPU (``benchmarks/harness_overhead.py host-overhead``): the product's
``train_rank`` vs the bare loop (:func:`.bare.lora_bare`) on a tiny random-init Llama, 1 thread; per-step percentiles
and a per-part attribution (:mod:`.host_attribution`)."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from pathlib import Path

from accelbench.experiments.lora.bare import lora_bare
from accelbench.experiments.lora.host_attribution import PartTimers, append_attribution, step_parts
from accelbench.experiments.lora.overhead import case_of
from accelbench.measure import overhead

HOST_FIELDS = [
    "side",
    "clock",
    "median_ms",
    "p10_ms",
    "p90_ms",
    "steps",
    "rounds",
    "layers",
    "hidden",
    "vocab",
    "seq_len",
    "batch",
    "precision",
    "threads",
    "settings",
    "device",
    "versions",
    "when",
]


def tiny_tokenizer(folder: str, vocab: int) -> str:
    """A word-level tokenizer of the ``vocab - 2`` most frequent words of the pydoc instruction pairs (+ ``<unk>``,
    ``<eos>``), saved as a transformers tokenizer folder (offline; for a tiny-vocabulary random-init model)."""
    from collections import Counter

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from accelbench.experiments.lora.data import build_pairs, format_pair

    words = Counter(w for p in build_pairs("pydoc") for w in format_pair(p).split())
    table = {"<unk>": 0, "<eos>": 1}
    for w, _ in words.most_common(vocab - 2):
        table[w] = len(table)
    tok = Tokenizer(models.WordLevel(table, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(folder)
    return folder


def tiny_lora_spec(
    layers: int, hidden: int, vocab: int, seq_len: int, precision: str, warmup: int, timed: int, tokenizer: str
) -> dict:
    """A ``lora_finetune`` rule spec (single, flash = SDPA, CPU system) for a random-init Llama of ``layers`` decoder
    layers of width ``hidden`` (4 heads, 2 KV heads, MLP 2 x hidden) with Study B's LoRA and trainer settings but
    ``seq_len``, ``precision`` and the step counts given."""
    from accelbench.core.config import load_config
    from accelbench.core.systems import load_systems
    from accelbench.experiments.lora.series import series_options
    from accelbench.experiments.lora.settings import LoraSettings

    config_dir = Path(__file__).resolve().parents[4] / "config"
    system = load_systems(config_dir / "systems")["cpu"]
    # the default config's LoRA section (schema defaults filled): its data block and the ours series' options, as the
    # rule's spec carries them (lora.rules.spec)
    section = load_config(config_dir / "config.yaml")["lora_finetune"]
    s = LoraSettings(seq_len=seq_len, precision=precision, warmup_steps=warmup, timed_steps=timed, eval_blocks=2)
    return {
        "settings": s.to_dict(),
        "data": {**section["data"], "source": "pydoc"},
        "series": "ours",
        "series_options": series_options("ours", section),
        "model_name": f"tiny_llama_{layers}x{hidden}",
        "attention": "flash",
        "strategy": "single",
        "devices": 1,
        "system": system.to_dict(),
        "model": {
            "source": "random",
            "name": f"tiny Llama {layers}x{hidden}",
            "tokenizer": tokenizer,
            "config": {
                "model_type": "llama",
                "hidden_size": hidden,
                "intermediate_size": 2 * hidden,
                "num_hidden_layers": layers,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": vocab,
            },
        },
    }


def _clocks() -> tuple[float, float]:
    """(wall, this thread's CPU time) in seconds: with 1 torch thread the CPU step runs in this thread (autograd runs
    CPU backward in the calling thread), so its CPU time is the step's host time without the time other processes
    on the machine took the core."""
    return time.perf_counter(), time.thread_time()


def _trainer_run(spec, system, plan, s, profiler=None) -> dict:
    """The product's Trainer run (``train_rank``) with per-step clocks of its timed steps: ``window`` (the step
    timer's window: ``on_step_begin`` to ``on_step_end``; wall = the product's own samples) and ``loop`` (one
    ``on_step_begin`` to the next: the whole loop per step, batch fetching included; ``timed - 1`` samples), each as
    wall and thread-CPU ms: ``{"window_wall", "window_cpu", "loop_wall", "loop_cpu"}``. With a ``cProfile.Profile``,
    it profiles from the first timed step's begin to the last timed step's end."""
    from accelbench.experiments.lora import train as lora_train  # where train_rank looks make_step_timer up

    begins, ends = [], []
    real = lora_train.make_step_timer
    last = s.warmup_steps + s.timed_steps

    def timer(device, world):
        t = real(device, world)
        begin, end = t.on_step_begin, t.on_step_end

        def on_step_begin(args, state, control, **kw):
            out = begin(args, state, control, **kw)
            if state.global_step >= s.warmup_steps:
                begins.append(_clocks())
                if profiler is not None and state.global_step == s.warmup_steps:
                    profiler.enable()
            return out

        def on_step_end(args, state, control, **kw):
            if state.global_step > s.warmup_steps:  # global_step is already the finished step's number + 1
                ends.append(_clocks())
            if state.global_step == last and profiler is not None:
                profiler.disable()
            return end(args, state, control, **kw)

        t.on_step_begin, t.on_step_end = on_step_begin, on_step_end
        return t

    lora_train.make_step_timer = timer
    try:
        out = lora_train.train_rank(spec, system, plan, threads=1)
    finally:
        lora_train.make_step_timer = real
    if out["status"] != "ok":
        raise SystemExit(f"Trainer run: {out['status']}: {out['reason']}")
    ms = lambda pairs, i: [(b[i] - a[i]) * 1e3 for a, b in pairs]  # noqa: E731
    return {
        "window_wall": out["measurements"]["step_samples_ms"][s.warmup_steps :],
        "window_cpu": ms(list(zip(begins, ends)), 1),
        "loop_wall": ms(list(zip(begins, begins[1:])), 0),
        "loop_cpu": ms(list(zip(begins, begins[1:])), 1),
    }


def _bare_run(step, warmup: int, repeat: int) -> dict:
    """``{"wall", "cpu"}`` ms of each of ``repeat`` calls of ``step`` after ``warmup`` (CPU: no device to wait for)."""
    for _ in range(warmup):
        step()
    wall, cpu = [], []
    for _ in range(repeat):
        a = _clocks()
        step()
        b = _clocks()
        wall.append((b[0] - a[0]) * 1e3)
        cpu.append((b[1] - a[1]) * 1e3)
    return {"wall": wall, "cpu": cpu}


def host_overhead(args) -> None:
    """Host time per optimizer step of the product's Trainer step (``train_rank``) vs the bare loop
    (:func:`lora_bare`), same tiny model and settings, on the CPU with 1 thread (device work negligible, so the step
    time is host time). Appends rows to ``--csv`` and the cProfile attribution to ``<csv stem>_attribution.csv``."""
    import tempfile

    import torch

    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    tok_dir = tiny_tokenizer(tempfile.mkdtemp(prefix="accelbench_tok_"), args.vocab)
    spec = tiny_lora_spec(
        args.layers, args.hidden, args.vocab, args.seq_len, args.precision, args.warmup, args.repeat, tok_dir
    )
    case = case_of({"config": spec})
    samples = _interleaved_samples(args, case)
    spec, system, s, plan = case
    settings = (
        f"LoRA r{s.r} q/v, bare AdamW fused={args.fused}, Trainer optim {_trainer_optim(s, plan)}, "
        f"clip {s.max_grad_norm}, attention {plan.attn_implementation}; host load average "
        f"{load_start:.2f} at start, {os.getloadavg()[0]:.2f} at end, {os.cpu_count()} cores"
        + (f"; {args.note}" if args.note else "")
    )
    _append_percentiles(args, samples, _common_columns(args, s, plan), settings)
    rows = _attribution_rows(args, case)
    append_attribution(_attribution_csv(args.csv), args.layers, not args.before, rows, s.timed_steps)
    if args.top:
        _print_top(args, case)


def _interleaved_samples(args, case: tuple) -> dict:
    """``{(side, clock): [ms per step]}``: ``args.rounds`` rounds of the Trainer run (also with ``fast_host_step``
    off when ``args.before``) and the bare loop, interleaved, the order reversed every other round."""
    from accelbench.experiments.lora.trainer import LossCurveMixin

    spec, system, s, plan = case
    modes = [True, False] if args.before else [True]  # the product's fast host step, then Trainer's own walks
    samples: dict[str, list[float]] = {}

    def trainer(mode: bool) -> None:
        LossCurveMixin.fast_host_step = mode
        tag = "" if mode else " (fast_host_step off)"
        try:
            for k, v in _trainer_run(spec, system, plan, s).items():
                side, clock = k.split("_")
                samples.setdefault((f"trainer_{side}{tag}", clock), []).extend(v)
        finally:
            LossCurveMixin.fast_host_step = True
        overhead.empty_cache()

    def bare() -> None:
        step, net = lora_bare(spec, system, plan, s, fused=args.fused)
        for clock, v in _bare_run(step, s.warmup_steps, s.timed_steps).items():
            samples.setdefault(("bare", clock), []).extend(v)
        del step, net
        overhead.empty_cache()

    runs = [lambda m=m: trainer(m) for m in modes] + [bare]
    for r in range(args.rounds):  # interleaved, order reversed every other round: drift and load hit all sides
        for run in runs if r % 2 == 0 else runs[::-1]:
            run()
    return samples


def _common_columns(args, s, plan) -> dict:
    """The columns every row of the run shares: steps, rounds, the model's shape, precision, threads, device and the
    library versions."""
    import accelerate
    import torch
    import transformers

    versions = (
        f"torch {torch.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}"
    )
    return {
        "steps": s.timed_steps,
        "rounds": args.rounds,
        "layers": args.layers,
        "hidden": args.hidden,
        "vocab": args.vocab,
        "seq_len": s.seq_len,
        "batch": f"{s.per_device_batch}x{s.grad_accum}",
        "precision": plan.precision,
        "threads": torch.get_num_threads(),
        "device": f"cpu: {_cpu_name()}",
        "versions": versions,
    }


def _append_percentiles(args, samples: dict, common: dict, settings: str) -> None:
    """Append to ``args.csv`` (:data:`HOST_FIELDS`) the percentiles of each side and clock, then each Trainer side's
    differences from the bare loop's."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    stats = {k: overhead.percentiles(v) for k, v in samples.items()}
    for (side, clock), v in stats.items():
        overhead.append(
            args.csv,
            fields=HOST_FIELDS,
            row={"side": side, "clock": clock, **v, **common, "settings": settings, "when": now},
        )
    for side, clock in [k for k in stats if k[0] != "bare"]:
        diff = {
            k: round(stats[(side, clock)][k] - stats[("bare", clock)][k], 3) for k in ("median_ms", "p10_ms", "p90_ms")
        }
        overhead.append(
            args.csv,
            fields=HOST_FIELDS,
            row={
                "side": f"{side} - bare",
                "clock": clock,
                **diff,
                **common,
                "settings": settings + "; differences of the percentiles",
                "when": now,
            },
        )


def _attribution_rows(args, case: tuple) -> list[tuple]:
    """``(part, trainer ms, bare ms, trainer calls, where, note)`` per step: thread-CPU time of each part
    (:func:`.host_attribution.step_parts`) in one more run of each side (the Trainer with ``fast_host_step`` off when
    ``args.before``: the step as before the change), after the whole step window and loop."""
    from accelbench.experiments.lora.trainer import LossCurveMixin

    spec, system, s, plan = case
    parts = step_parts()
    LossCurveMixin.fast_host_step = not args.before
    timers = PartTimers(parts)
    try:
        trainer_clocks = _trainer_run(spec, system, plan, s, profiler=timers)
        t_ms, t_calls = dict(timers.ms), dict(timers.calls)
        step, net = lora_bare(spec, system, plan, s, fused=args.fused)
        for _ in range(s.warmup_steps):
            step()
        timers.ms = {k: 0.0 for k in t_ms}
        timers.enable()
        bare_clocks = _bare_run(step, 0, s.timed_steps)
        timers.disable()
        b_ms = dict(timers.ms)
        del step, net
    finally:
        timers.restore()
        LossCurveMixin.fast_host_step = True
    n = s.timed_steps
    rows = [
        (
            "step window (on_step_begin to on_step_end)",
            statistics.mean(trainer_clocks["window_cpu"]),
            statistics.mean(bare_clocks["cpu"]),
            1.0,
            "-",
            "bare: the step call",
        ),
        (
            "step loop (on_step_begin to the next)",
            statistics.mean(trainer_clocks["loop_cpu"]),
            statistics.mean(bare_clocks["cpu"]),
            1.0,
            "-",
            f"mean of {n - 1} intervals; incl. get_batch_samples",
        ),
    ]
    for label, owner, name, side, note in parts:
        where = f"{getattr(owner, '__module__', '')}.{getattr(owner, '__qualname__', getattr(owner, '__name__', ''))}"
        rows.append(
            (
                label,
                t_ms[label] / n if side != "bare" else None,
                b_ms[label] / n if side != "trainer" else None,
                t_calls[label] / n if side != "bare" else None,
                f"{where}.{name}".lstrip("."),
                note,
            )
        )
    return rows


def _attribution_csv(csv: str) -> str:
    """The attribution table's path beside ``csv``: ``<csv stem>_attribution.csv``."""
    return str(Path(csv).with_name(Path(csv).stem + "_attribution.csv"))


def _print_top(args, case: tuple) -> None:
    """Print the top ``args.top`` cumulative cProfile entries of the Trainer's timed steps."""
    import cProfile
    import pstats

    from accelbench.experiments.lora.trainer import LossCurveMixin

    spec, system, s, plan = case
    prof = cProfile.Profile()
    LossCurveMixin.fast_host_step = not args.before
    try:
        _trainer_run(spec, system, plan, s, profiler=prof)
    finally:
        LossCurveMixin.fast_host_step = True
    print("--- Trainer, top cumulative (timed steps) ---")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)


def _cpu_name() -> str:
    """The host CPU's model name (Linux ``/proc/cpuinfo``; else ``platform.processor()``)."""
    import platform

    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _trainer_optim(s, plan) -> str:
    """The optimizer the product's TrainingArguments give on the CPU (what ``train_rank`` trains with)."""
    import tempfile

    from transformers import TrainingArguments

    from accelbench.experiments.lora.trainer import training_arguments_kwargs

    kw = training_arguments_kwargs(plan, s, "cpu", tempfile.mkdtemp(prefix="accelbench_args_"), 1, None)
    return str(TrainingArguments(**kw).optim.value)
