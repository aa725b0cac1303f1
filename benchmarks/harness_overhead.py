"""Harness overhead: the rule's measured step vs a minimal bare loop of the same model, shapes and settings.

For each product result (a ``result.json`` written by the rule, whose ``config`` is the rule's exact spec), this
runs, in one process run (under torchrun for multi-device cases, with the product's own launcher settings from
:mod:`accelbench.cluster.processes`):

* ``harness``: the step the rule times, built and timed by the experiment's own code (Study A:
  ``unet3d.workload.Workload.train_step``; SR3: ``sr3.model.Trainer.train_step``, per-iteration max over ranks; both
  through the rule's one timed phase, ``measure.phase.train_phase``; LoRA: ``lora.train.train_rank``, i.e. the HF
  Trainer with the step-timer callback);
* ``bare``: a plain PyTorch loop (each experiment's ``bare.py``: model from the same builder, same shapes, dtype, math
  mode, cuDNN autotuning, optimizer; DDP where the rule uses DDP), timed per step by the same phase (Study A, SR3)
  or the same step clock (LoRA),

and appends one CSV row per case: ``harness_ms``, ``bare_ms`` and ``harness_over_bare`` (goal <= 1.03), with the
device count, settings and rank thread placement. Efficiency rows (time at 1 device / time at N, weak scaling at a
fixed per-device batch) are added for SR3 and LoRA when both device counts are present. A benchmark writes
numbers; it asserts nothing.

Usage (on the accelerator node, after the product's rules ran; paths of the rule's results and inputs)::

    python benchmarks/harness_overhead.py study-a --result R/unet3d_profile/whole_head/baseline_autotuned/result.json \\
        --image resources/mri/..._image.nii.gz --mask ..._mask.nii.gz --csv results/benchmarks/harness_overhead.csv
    python benchmarks/harness_overhead.py sr3 --result R/sr3_scaling/fp32/devices_2/result.json \\
        --data resources/sky/sr3_paper.npz --csv ...
    python benchmarks/harness_overhead.py lora --result R/lora_finetune/llama31_8b/flash/ddp/n2/result.json --csv ...

The LoRA bare loop calls the model as the result's Trainer does: where the model accepts loss kwargs, with
``num_items_in_batch`` (the step's label-token count; the loss then not divided by the accumulation).
``--no-num-items-in-batch`` drops it (each micro-batch's mean loss / grad_accum): the two side by side isolate the
Liger fused linear cross-entropy failure under the Trainer (campaign part ``liger_isolate``); ``--bare-only`` leaves
the Trainer run out (one device; each step's loss and the median step printed, no row); ``--liger-kernels`` replaces
the result's Liger kernels (the Trainer run of the fused linear cross-entropy alone leaves no result)::

    python benchmarks/harness_overhead.py lora --bare-only --no-num-items-in-batch \\
        --liger-kernels fused_linear_cross_entropy \\
        --result R/lora_finetune/llama31_8b/ours_liger_no_flce/flash/single/n1/result.json

DDP profile (``ddp-profile``): the bare loop of a LoRA or SR3 result in one torchrun job per rank count (default
``--nprocs 1,2``), per rank and DDP variant (default; ``gradient_as_bucket_view``; ``static_graph`` +
``gradient_as_bucket_view``, recorded as not run with gradient accumulation; one bucket via a huge
``bucket_cap_mb``): step time (CUDA events, median of ``--repeat``), then ``--profiled`` steps under torch.profiler
(CUDA kernels) giving device busy time (union of kernels/copies), NCCL kernel time, exposed communication (NCCL time
not overlapped by compute kernels), device idle time in the step, kernels per step and host time per step; one CSV
row per (rank count, variant, rank) in ``--csv`` (default ``results/benchmarks/ddp_profile.csv``) with settings,
device, threads per rank and UTC time. The LoRA bare loop is eager unless ``--mirror`` builds it as the result's Trainer
runs it (the rule's own step: compile, bf16 adapters, fused AdamW). On the 2-GPU node, after the product's rules wrote
these results::

    NCCL_NVLS_ENABLE=0 python benchmarks/harness_overhead.py ddp-profile --experiment lora \
        --result results/h200/lora_finetune/llama31_8b/flash/ddp/n2/result.json --nprocs 1,2 --warmup 3 --repeat 10
    NCCL_NVLS_ENABLE=0 python benchmarks/harness_overhead.py ddp-profile --experiment sr3 \
        --result results/h200/sr3_scaling/fp32/devices_2/result.json --data resources/sky/sr3_paper.npz --nprocs 1,2

Host overhead of the LoRA Trainer step (``host-overhead``, on any CPU machine; no result.json needed): the GPU step at
Llama-3.1-8B shape is host/launch-bound (9590 kernels per step, the GPU busy 149 ms of 239 ms), so every host
millisecond the Trainer adds shows. This runs, in one process on 1 CPU thread, a random-init Llama of ``--layers``
decoder layers of width 64 (vocabulary 256, word-level tokenizer of the pydoc pairs; device work small and the same on
both sides) through the product's ``train_rank`` (Trainer, step-timer window and step-to-step loop time; also with
``LossCurveMixin.fast_host_step`` off, i.e. Trainer's own per-step module walks) and through
:func:`accelbench.experiments.lora.bare.lora_bare` (same spec, grad_accum 2, micro-batch 2), alternated
``--rounds`` times; median, p10, p90 per optimizer step and the differences go to ``--csv`` (default
``results/benchmarks/harness_overhead_host_cpu.csv``); the thread CPU time of the timed Trainer steps, split into the
Trainer's parts (:func:`accelbench.experiments.lora.host_attribution.step_parts`) against the bare loop's, to
``..._attribution.csv``::

    python benchmarks/harness_overhead.py host-overhead --layers 32   # 32 = Llama-3.1-8B's decoder layer count

Host-bound check of SR3 (``sr3-host-bound``, :mod:`accelbench.experiments.sr3.overhead`): the rule's Trainer timed
with its own data
path, with batches already on the device and with DataLoader workers; device vs host time per step::

    python benchmarks/harness_overhead.py sr3-host-bound --result R/sr3_scaling/bf16/devices_1/result.json \
        --data resources/sky/sr3_paper.npz

The drivers are part of the package: each experiment's in its folder (``experiments/unet3d/overhead.py``,
``experiments/sr3/overhead.py``, ``experiments/lora/overhead.py`` and ``host_overhead.py``), the generic parts in the
measurement core (:mod:`accelbench.measure.overhead`, :mod:`accelbench.measure.ddp_profile`); multi-rank cases run
their ranks through :mod:`accelbench.cluster.torchrun_call`. This file is their command line.
"""

from __future__ import annotations

import argparse

from accelbench.cluster import torchrun_call
from accelbench.experiments.lora import host_overhead
from accelbench.experiments.lora import overhead as lora
from accelbench.experiments.sr3 import overhead as sr3
from accelbench.experiments.unet3d import overhead as study_a
from accelbench.measure import overhead

DDP_PROFILE_RANKS = {"lora": lora.ddp_profile_rank, "sr3": sr3.ddp_profile_rank}


def ddp_profile(args) -> None:
    """One torchrun job per rank count in ``--nprocs`` running the experiment's DDP-profile rank function."""
    for n in [int(x) for x in str(args.nprocs).split(",") if x]:
        torchrun_call.run(n, DDP_PROFILE_RANKS[args.experiment], args, args.threads)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("study-a", "sr3", "lora", "efficiency", "ddp-profile"):
        s = sub.add_parser(name)
        s.add_argument(
            "--csv",
            default=f"results/benchmarks/{'ddp_profile' if name == 'ddp-profile' else 'harness_overhead'}.csv",
            help="rows appended here (efficiency: read and extended); default %(default)s",
        )
        if name == "efficiency":
            continue
        if name == "ddp-profile":
            s.add_argument("--experiment", required=True, choices=sorted(DDP_PROFILE_RANKS))
            s.add_argument("--data", help="SR3: the rule's sky data (.npz)")
            s.add_argument("--nprocs", default="1,2", help="rank counts, one torchrun job each (comma-separated)")
            s.add_argument("--profiled", type=int, default=3, help="steps under torch.profiler (after the timed ones)")
            s.add_argument(
                "--mirror",
                action="store_true",
                help="LoRA: the bare loop built as the result's Trainer runs it (compile, bf16 adapters, fused AdamW) "
                "instead of eager: the profile of the rule's own step",
            )
        s.add_argument("--result", required=True, help="the product rule's result.json (its config = the rule's spec)")
        s.add_argument("--threads", type=int, default=0, help="the job's cores (0 = every usable core)")
        s.add_argument("--warmup", type=int, default=5)
        s.add_argument("--repeat", type=int, default=20)
        if name == "study-a":
            s.add_argument("--image", required=True)
            s.add_argument("--mask", required=True)
        if name == "sr3":
            s.add_argument("--data", required=True)
        if name == "lora":
            s.add_argument(
                "--num-items-in-batch",
                action=argparse.BooleanOptionalAction,
                default=True,
                help="bare loop: pass the step's label-token count into the forward as the result's Trainer does "
                "(where the model accepts loss kwargs); --no-num-items-in-batch: each micro-batch's mean loss / "
                "grad_accum instead (the isolation of the Liger fused linear cross-entropy failure: run both)",
            )
            s.add_argument(
                "--bare-only",
                action="store_true",
                help="one device: the bare loop alone (no Trainer run, no CSV row): each step's loss and the median "
                "step printed; for a result whose Trainer run fails",
            )
            s.add_argument(
                "--liger-kernels",
                help="bare loop: these Liger kernels (comma-separated: rope, rms_norm, swiglu, "
                "fused_linear_cross_entropy, cross_entropy) instead of the result's (a kernel set whose Trainer run "
                "left no result)",
            )
    h = sub.add_parser(
        "host-overhead", help="host ms per optimizer step: product Trainer vs bare loop, tiny Llama, CPU, 1 thread"
    )
    h.add_argument("--csv", default="results/benchmarks/harness_overhead_host_cpu.csv", help="default %(default)s")
    h.add_argument("--layers", type=int, default=2)
    h.add_argument("--hidden", type=int, default=64)
    h.add_argument("--vocab", type=int, default=256)
    h.add_argument("--seq-len", type=int, default=32)
    h.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    h.add_argument("--warmup", type=int, default=5)
    h.add_argument("--repeat", type=int, default=20)
    h.add_argument("--rounds", type=int, default=3, help="Trainer and bare runs, alternated")
    h.add_argument("--fused", action=argparse.BooleanOptionalAction, default=True, help="bare loop: fused AdamW")
    h.add_argument(
        "--before",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the Trainer with LossCurveMixin.fast_host_step off (Trainer's own per-step walks); "
        "the cProfile attribution is then of that run",
    )
    h.add_argument("--top", type=int, default=0, help="print the top N cumulative cProfile entries of both sides")
    h.add_argument("--note", default="", help="added to the settings column")
    b = sub.add_parser(
        "sr3-host-bound", help="SR3: device vs host time per step of the rule's Trainer, three data paths, one device"
    )
    b.add_argument("--result", nargs="+", required=True, help="the SR3 rule's result.json files (their configuration)")
    b.add_argument("--data", required=True, help="the rule's sky data (.npz)")
    b.add_argument("--csv", default="results/benchmarks/sr3_host_bound.csv", help="default %(default)s")
    b.add_argument("--workers", type=int, default=2, help="DataLoader workers of the third variant")
    b.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = torch's default)")
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--repeat", type=int, default=20)
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    {
        "host-overhead": host_overhead.host_overhead,
        "sr3-host-bound": sr3.sr3_host_bound,
        "study-a": study_a.study_a,
        "sr3": sr3.sr3,
        "lora": lora.lora,
        "efficiency": lambda a: overhead.efficiency(a.csv),
        "ddp-profile": ddp_profile,
    }[args.cmd](args)


if __name__ == "__main__":
    main()
