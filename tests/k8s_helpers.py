"""Snakemake job scripts for the Kubernetes profile's tests (tests/unit/test_kubernetes.py, tests/system/)."""

from __future__ import annotations

import json


def script(rule="sr3_train", devices=None, nodes=None, gpu=0, threads=16, mem_mb=128000, runtime=90) -> str:
    """A job script as Snakemake writes it: the `# properties = {...}` line, then the command."""
    res = {"mem_mb": mem_mb, "runtime": runtime, "gpu": gpu}
    if nodes:
        res["nodes"] = nodes
    props = {"rule": rule, "jobid": 7, "threads": threads, "resources": res, "wildcards": {}}
    if devices is not None:
        props["wildcards"]["devices"] = str(devices)
    return f"#!/bin/sh\n# properties = {json.dumps(props)}\ncd /work && python -m snakemake --target-jobs x\n"
