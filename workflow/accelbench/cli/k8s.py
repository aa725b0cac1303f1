"""``accelbench k8s submit|status|cancel|render``: the commands of the Kubernetes profile (``kubernetes/config.yaml``,
snakemake-executor-plugin-cluster-generic), around :mod:`accelbench.cluster.kubernetes`. :func:`add_parsers` adds
them to the ``accelbench`` parser."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml


def cmd_k8s(args: argparse.Namespace) -> None:
    from accelbench.cluster import kubernetes as k8s
    from accelbench.errors import AccelbenchError

    site = k8s.load_site(args.site)
    if args.k8s_command == "submit":
        try:
            print(k8s.submit(args.jobscript, site))
        except Exception as exc:  # the executor shows only stdout: "Error submitting jobscript (exit code 1):"
            print(f"accelbench k8s submit: error: {exc}", flush=True)
            raise
    elif args.k8s_command == "render":
        script = Path(args.jobscript).read_text()
        print(yaml.safe_dump(k8s.render(k8s.job_properties(script), script, site), sort_keys=False), end="")
    elif args.k8s_command == "status":
        print(k8s.status(args.jobid, site))
    else:
        failed = k8s.cancel(args.jobids, site)
        if failed:
            raise AccelbenchError("could not delete: " + "; ".join(failed))
    sys.stdout.flush()


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "k8s",
        help="Kubernetes jobs of `snakemake --profile kubernetes` (a Job per rule on one node, an MPIJob across "
        "nodes; kubernetes/README.md)",
    )
    p.add_argument("--site", default=None, help="site file (default: $ACCELBENCH_K8S_SITE or kubernetes/site.yaml)")
    ks = p.add_subparsers(dest="k8s_command", required=True)
    s = ks.add_parser("submit", help="create the Job/MPIJob of a Snakemake job script; prints namespace/kind/name")
    s.add_argument("jobscript")
    s = ks.add_parser("render", help="print the manifest of a Snakemake job script (YAML), create nothing")
    s.add_argument("jobscript")
    s = ks.add_parser("status", help="print success, failed or running for a job id from submit")
    s.add_argument("jobid")
    s = ks.add_parser("cancel", help="delete jobs (ids from submit)")
    s.add_argument("jobids", nargs="+")
    p.set_defaults(func=cmd_k8s)
