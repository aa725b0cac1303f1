"""Command-line entry points: one per Snakemake rule (rules call these with ``shell:``).

Run ``accelbench --help`` for the list. The measurement commands (one per experiment of the registry, each running
through the one job harness) are in :mod:`accelbench.cli.measurements`. Every output is written atomically.
Errors the user can act on (bad config, missing accelerator, missing or corrupt files) end with a one-line message
and exit status 2.

The commands that prepare a measurement's inputs (data sets, model folders, ncu's target step) are in
:mod:`accelbench.cli.inputs`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from accelbench.cli import failure, inputs, k8s, measurements
from accelbench.cli.measurements import INPUT_HELP, cmd_measure, cmd_rank  # noqa: F401  (re-exported)
from accelbench.core import config_reference, registry
from accelbench.core.files import check_nodes, read_text
from accelbench.errors import AccelbenchError, DataError

log = logging.getLogger("accelbench")


def _result_paths(args: argparse.Namespace, required: bool = True) -> list[str]:
    """The result files a command reads: ``--results`` (paths on the command line, for calls by hand) plus every path
    in ``--results-file`` (what the rules pass, so a shell line does not grow with the number of results): a JSON
    file holding a list of paths, ``{"results": [...]}`` (the rules' content-addressed spec file), or a
    validate-results output (``{"validated": [{"path": ...}, ...]}``). Relative paths are relative to the working
    directory. Order kept, duplicates dropped.

    Raises:
        DataError: the list file is missing or not one of these forms, or (``required``) no result file is given.
    """
    paths = [p for p in (args.results or []) if p]
    for listing in args.results_file or []:
        try:
            text = read_text(listing, "--results-file", error=DataError)  # bounded, a plain file
            check_nodes(text, listing, "--results-file", DataError)  # and in values: memory, not only bytes
            data = json.loads(text)
        except DataError as exc:
            raise DataError(f"--results-file {listing}: unreadable list of result files: {exc.why}") from None
        except (ValueError, RecursionError) as exc:
            raise DataError(f"--results-file {listing}: unreadable list of result files: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("validated"), list):
            data = [v.get("path") if isinstance(v, dict) else None for v in data["validated"]]
        elif isinstance(data, dict):
            data = data.get("results")
        if not isinstance(data, list) or not all(isinstance(v, str) and v for v in data):
            raise DataError(
                f"--results-file {listing}: expected a JSON list of result.json paths, "
                '{"results": [paths]} or a validate-results output'
            )
        paths += data
    if required and not paths:
        raise DataError("no result files given: pass --results PATH... or --results-file LIST.json")
    return list(dict.fromkeys(paths))


# --------------------------------------------------------------------------- aggregation, claims, reference runs
def _figures_checked():
    """A figure the checker finds defective fails the job, after every file is written (aggregate.figures.checked)."""
    from accelbench.aggregate.figures import checked

    return checked()


def cmd_aggregate(args: argparse.Namespace) -> None:
    """Any experiment's aggregation: its tables module's ``aggregate(results, reference, out_dir)``."""
    module = registry.get(args.experiment).load_tables()
    if args.reference:  # one line naming it when it is no text file (a binary file, a FIFO, a folder)
        read_text(args.reference, "--reference", error=DataError)
    with _figures_checked():
        module.aggregate(_result_paths(args), args.reference, args.out_dir)


def cmd_reference_runs(args: argparse.Namespace) -> None:
    """Regenerate (or with --check verify) each reference run's README.md and the main README's section."""
    from accelbench.aggregate.reference_runs import update

    if args.tables:
        from accelbench.aggregate.reference_runs import find_runs, write_tables

        for run in find_runs(args.root):
            log.info("tables of %s: %s", run["name"], ", ".join(map(str, write_tables(run, args.reference_dir))))
    changed = update(
        args.root,
        args.readme,
        check=args.check,
        reference_dir=args.reference_dir,
        claims_doc=args.claims_doc,
        artifact=args.artifact,
    )
    if args.check and changed:
        raise AccelbenchError("out of date (run `accelbench reference-runs`): " + ", ".join(map(str, changed)))
    log.info("reference runs: %s", ", ".join(map(str, changed)) if changed else "up to date")


def cmd_validate_results(args: argparse.Namespace) -> None:
    """Check result files against the package's schemas; write the list of valid files (the aggregations' input)."""
    from accelbench.core import tree
    from accelbench.core.results import write_json_atomic
    from accelbench.core.validate import validate_files

    summary = validate_files(_result_paths(args, required=False))
    root = tree.out_dir_root(os.path.dirname(args.out))  # <results>/validation/<e>.json: no link below <results>
    write_json_atomic({"validated": summary, "count": len(summary)}, args.out, root)
    log.info("%d result file(s) valid", len(summary))


def cmd_energy_aggregate(args: argparse.Namespace) -> None:
    from accelbench.aggregate import energy

    with _figures_checked():
        paths = energy.aggregate(_result_paths(args, required=False), args.reference_dir, args.out_dir)
    log.info("energy: %s", ", ".join(map(str, paths.values())))


def cmd_claims(args: argparse.Namespace) -> None:
    from accelbench.aggregate import claims_report as claims

    # validate_results' lists (every result file it checked, fresh and copied in) are result-list files too
    args.results_file = [*(args.results_file or []), *args.validated]
    with _figures_checked():
        df = claims.aggregate(_result_paths(args, required=False), args.reference_dir, args.out_dir)
    log.info("claims: %s", df["verdict"].value_counts().to_dict())


def cmd_campaign(args: argparse.Namespace) -> None:
    """One part of a campaign file (or of a reference run's run.yaml): its steps, or with --dry-run what they are."""
    from accelbench.core import campaign

    if args.dry_run:
        print(campaign.dry_run(args.file, args.part, args.out))
        return
    try:
        record = campaign.run_part(args.file, args.part, args.out, budget_s=args.budget_s)
    except campaign.Interrupted as exc:
        print(f"accelbench campaign: {exc}", file=sys.stderr)
        raise SystemExit(128 + exc.signum) from None  # as a shell reports a process killed by the signal
    if campaign.failed_steps(record):
        raise SystemExit(1)  # recorded in <out>/<part>/campaign.json; bad input exits 2 (CampaignError)


# --------------------------------------------------------------------------- this machine
def cmd_check_system(args: argparse.Namespace) -> None:
    from accelbench.core.systems import checked_config, load_systems, probe_devices, require_backend, resolve_system

    config = checked_config(args.config or [], args.system)
    found = probe_devices()
    system = resolve_system(config["system"], load_systems(config["systems_dir"]), found)
    require_backend(system, found)
    print(json.dumps({"system": system.to_dict(), "found": found}, indent=1))


def cmd_gpu_smoke(args: argparse.Namespace) -> None:
    from accelbench.cluster.node_report import device_report
    from accelbench.core import tree
    from accelbench.core.results import write_json_atomic

    report = device_report(args.expect)
    for tool, v in report["vendor_tool"].items():
        print(f"{tool} (exit {v['returncode']}):", *v["lines"], sep="\n  ")
    print("torch:", json.dumps(report["torch"]), "| job env:", json.dumps(report["env"]))
    print(
        f"{report['host']}: expected {report['expected']} accelerator(s), seen {report['seen']}:",
        "OK" if report["matches"] else "MISMATCH (check the gpu/gres mapping of slurm/site.yaml)",
    )
    write_json_atomic(report, args.out, tree.out_dir_root(os.path.dirname(args.out)))  # no link below <results>


# --------------------------------------------------------------------------- parser
def _results_file_option(s) -> None:
    s.add_argument(
        "--results-file",
        action="extend",
        nargs="+",
        default=[],
        metavar="LIST.json",
        help='JSON lists of result.json files (or {"results": [...]}, or validate-results outputs); '
        "what the rules pass, so the shell line stays short; may be repeated, adds to --results",
    )


def _aggregate_parsers(sub) -> None:
    """One aggregation command per aggregated experiment: ``--results``/``--results-file``, the published data
    (``--reference``; ``--claims`` is the same option), ``--out-dir``."""
    for e in registry.aggregated():
        s = sub.add_parser(
            f"{e.aggregate.replace('_', '-')}-aggregate",
            help=f"tables and figures of {e.name} results, beside the published {e.reference}",
        )
        s.add_argument("--results", nargs="+", default=[], help="result.json files (any systems)")
        _results_file_option(s)
        s.add_argument(
            "--reference",
            "--claims",
            dest="reference",
            required=bool(e.reference),
            help=f"{e.reference or 'its claims file'} (published numbers or claims, with their sources)",
        )
        s.add_argument("--out-dir", required=True)
        s.set_defaults(func=cmd_aggregate, experiment=e.name)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="accelbench", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="debug logs; a failure prints its traceback")
    sub = p.add_subparsers(dest="command", required=True)
    measurements.add_parsers(sub)
    _aggregate_parsers(sub)
    inputs.add_parsers(sub)
    k8s.add_parsers(sub)
    config_reference.add_parser(sub)

    s = sub.add_parser(
        "reference-runs",
        help="regenerate the READMEs of the committed reference runs (reference_runs/), "
        "the claims page docs/claims.md and ARTIFACT.md's verdicts block",
    )
    s.add_argument("--root", default="reference_runs")
    s.add_argument("--readme", default="README.md", help="the main README with the generated 'Reference runs' block")
    s.add_argument("--check", action="store_true", help="only check that they are up to date (exit 1 otherwise)")
    s.add_argument(
        "--tables",
        action="store_true",
        help="also regenerate each run's tables and figures (<run>/tables/) from its result files",
    )
    s.add_argument("--reference-dir", default="resources/reference", help="the published numbers (claims, tables)")
    s.add_argument(
        "--claims-doc",
        default="docs/claims.md",
        help="the claims page (each claim, its quote, scope, evidence and every reference run's verdict)",
    )
    s.add_argument("--artifact", default="ARTIFACT.md", help="the evaluators' guide with the generated verdicts block")
    s.set_defaults(func=cmd_reference_runs)

    s = sub.add_parser(
        "validate-results",
        help="check result.json files against the result schemas (fails naming each offending file and field)",
    )
    s.add_argument("--results", nargs="*", default=[], help="result.json files (any experiments, any systems)")
    _results_file_option(s)
    s.add_argument("--out", required=True, help="JSON list of the validated files")
    s.set_defaults(func=cmd_validate_results)

    s = sub.add_parser("claims", help="every claim of both studies against every system's results (one table)")
    s.add_argument("--results", nargs="*", default=[], help="result.json files (any experiments, any systems)")
    _results_file_option(s)
    s.add_argument(
        "--validated",
        nargs="*",
        default=[],
        help="validate-results outputs: the result files they list are read too (keeps the shell line short)",
    )
    s.add_argument(
        "--reference-dir",
        default="resources/reference",
        help="the claims files of the studies and each experiment's published numbers (as the registry names them)",
    )
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_claims)

    s = sub.add_parser(
        "energy-aggregate",
        help="time and energy per step of every result (device-level board "
        "energy, not MLPerf Power): tables and a figure",
    )
    s.add_argument("--results", nargs="*", default=[], help="result.json files (any experiments, any systems)")
    _results_file_option(s)
    s.add_argument(
        "--reference-dir",
        default="resources/reference",
        help="board power limits and each experiment's published times (drawn without energy)",
    )
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_energy_aggregate)

    s = sub.add_parser(
        "campaign",
        help="run one part of a campaign (campaigns/*.yaml, or a reference run's run.yaml with parts:): its argv "
        "steps in order, no shell, under the part's time budget; <out>/<part>/campaign.json records each step "
        "(exit 1 when a step failed or timed out)",
    )
    s.add_argument("--file", required=True, help="campaigns/<name>.yaml or reference_runs/<run>/run.yaml")
    s.add_argument("--part", required=True, help="the part to run (a key of the file's parts:)")
    s.add_argument("--out", required=True, help="output folder: <out>/<part>/ gets the step logs and campaign.json")
    s.add_argument("--dry-run", action="store_true", help="print the part's steps (checked), run nothing")
    s.add_argument(
        "--budget-s",
        type=float,
        metavar="S",
        help="run under S seconds where S is below the part's budget_s (a call with less device time left)",
    )
    s.set_defaults(func=cmd_campaign)

    s = sub.add_parser("check-system", help="print the system the config resolves to here, or fail")
    s.add_argument(
        "--config",
        nargs="+",
        metavar="FILE|KEY=VALUE",
        help="config files merged onto config/config.yaml, and KEY=VALUE overrides (as snakemake --config takes)",
    )
    s.add_argument("--system", metavar="NAME", help="a system file's name (config/systems/NAME.yaml), over the config")
    s.set_defaults(func=cmd_check_system)

    s = sub.add_parser(
        "gpu-smoke", help="print and save the devices this job sees (nvidia-smi -L / hl-smi, torch, Slurm env)"
    )
    s.add_argument("--expect", type=int, required=True, help="accelerators the job requested (the rule's gpu resource)")
    s.add_argument("--out", required=True, help="JSON report")
    s.set_defaults(func=cmd_gpu_smoke)
    return p


def main(argv: list[str] | None = None) -> int:
    from accelbench.quiet import install

    install()  # known-harmless library warnings (accelbench.quiet.KNOWN_HARMLESS) stay out of the job logs
    from accelbench.core.locks import claim_notice_fd

    claim_notice_fd()  # lock waits go to the run's terminal (fd 3 of the measurement rules' shell lines)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        args.func(args)
    except (Exception, KeyboardInterrupt) as exc:  # one line, no traceback frames unless asked (cli/failure.py)
        return failure.report(args.command, exc, args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
