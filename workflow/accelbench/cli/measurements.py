"""The measurement commands: one per experiment of the registry, and the internal ``rank`` command.

They are made from the registry of experiments (:mod:`accelbench.core.registry`): one per experiment, each taking its
resolved settings as one JSON file (``--spec``: the rule writes it from the validated config under
``.snakemake/accelbench/spec/``; an inline JSON object is accepted by hand), the result to write (``--out``) and the
experiment's named inputs, and running through the one job harness (:mod:`accelbench.core.harness`). ``rank`` is one
rank of a multi-rank experiment, started by the launcher through torchrun. :func:`add_parsers` adds them to the
``accelbench`` parser.
"""

from __future__ import annotations

import argparse
import os
import sys

from accelbench.cli.failure import cores
from accelbench.core import registry


def _inputs(args: argparse.Namespace, experiment: registry.Experiment) -> dict:
    return {name: (getattr(args, name) or None) for name in experiment.inputs}


def cmd_measure(args: argparse.Namespace) -> None:
    """Any experiment's measurement command: the job harness around the experiment's ``run``."""
    from accelbench.core import harness

    experiment = registry.get(args.experiment)
    ctx = harness.context(experiment, args.spec, args.out, _inputs(args, experiment), args.threads)
    harness.run_job(ctx)


def cmd_rank(args: argparse.Namespace) -> None:
    """One rank of a multi-rank experiment (started by the launcher through torchrun)."""
    from accelbench.core.harness import rank_main

    inputs = dict(item.split("=", 1) for item in args.input)
    code = rank_main(args.experiment, args.spec, args.out, args.rank_dir, args.threads, inputs)
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the other ranks may wait in a collective: torchrun stops them when this one is gone


INPUT_HELP = {
    "image": "MRI image (NIfTI) from mri-prepare",
    "mask": "MRI mask (NIfTI) from mri-prepare",
    "profile_result": "the configuration's unet3d_profile result.json",
    "data": "patch set from sr3-prepare",
    "stage": "sensitivity (per-layer map + allocation) or method (one method and bit set)",
    "model_dir": "model folder written by `accelbench llm-export` (empty or absent: load per spec)",
    "sensitivity": "the model's sensitivity result.json (method stage)",
}


def add_parsers(sub) -> None:
    """One command per experiment of the registry, plus the internal ``rank`` command."""
    for e in registry.EXPERIMENTS.values():
        s = sub.add_parser(
            e.command,
            help=f"{'Study ' + e.study if e.selectable else 'diagnostic'}: "
            f"one {e.name} job ({e.module_path}.job), one {e.result}",
        )
        s.add_argument("--spec", required=True, help="JSON file of the job's resolved settings (or an inline object)")
        s.add_argument(
            "--out",
            required=True,
            help=f"{e.result} to write" + (f" ({', '.join(e.side_files)} beside it)" if e.side_files else ""),
        )
        for name in e.inputs:
            s.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, help=INPUT_HELP.get(name))
        s.add_argument("--threads", type=cores, default=0, help="CPU cores of the job (split over its ranks; 0 = all)")
        s.add_argument(
            "--overwrite",
            action="store_true",
            help="accepted for old command lines: a finished result is always superseded (moved to "
            "<system>/.superseded/), never overwritten",
        )
        s.set_defaults(func=cmd_measure, experiment=e.name)
    s = sub.add_parser("rank", help="internal: one rank of a multi-rank experiment (started by the launcher)")
    s.add_argument("--experiment", required=True, choices=[e.name for e in registry.EXPERIMENTS.values() if e.ranks])
    s.add_argument("--spec", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--rank-dir", required=True)
    s.add_argument("--threads", type=cores, default=0)
    s.add_argument("--input", action="append", default=[], metavar="NAME=PATH")
    s.set_defaults(func=cmd_rank)
