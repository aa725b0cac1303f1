"""A module-level function run on ``n`` torchrun ranks of this node (the benchmarks' rank jobs: the harness-overhead
drivers of ``experiments/<name>/overhead.py``, the DDP profile). Every rank runs this module: ``python -m
accelbench.cluster.torchrun_call <module>:<function> <arguments as JSON>``, with the product's launcher settings
(:mod:`.processes`: threads per rank, torchrun's standalone rendezvous)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from accelbench.cluster import processes


def run(n: int, fn, args: argparse.Namespace, threads: int) -> None:
    """Run ``fn(args)`` on ``n`` torchrun ranks, each with its share of ``threads`` (0: every usable core); exit
    with the job's status if it fails. ``args``' values must be JSON values (an argparse namespace's are)."""
    argv = ["-m", __name__, f"{fn.__module__}:{fn.__qualname__}", json.dumps(vars(args))]
    proc = processes.run(processes.torchrun_command(n, argv), env=processes.rank_env(threads, n))
    if proc.returncode:
        sys.exit(proc.returncode)


def rank_main(argv: list[str]) -> None:
    """One rank of :func:`run`: ``argv`` = ``[<module>:<function>, <arguments as JSON>]``."""
    module, _, name = argv[0].partition(":")
    getattr(importlib.import_module(module), name)(argparse.Namespace(**json.loads(argv[1])))


if __name__ == "__main__":
    rank_main(sys.argv[1:])
