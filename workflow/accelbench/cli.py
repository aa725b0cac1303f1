"""Command-line entry points: one per Snakemake rule (rules call these with ``shell:``).

Run ``accelbench --help`` for the list. Each command takes its resolved settings as one JSON file
(``--spec``: the rule writes it from the validated config under ``.snakemake/accelbench/spec/``; an
inline JSON object is accepted too) and writes its outputs atomically.
Errors the user can act on (bad config, missing accelerator, missing or corrupt files) end with
a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import sys
from pathlib import Path

from .errors import AccelbenchError

log = logging.getLogger("accelbench")
# Commands whose results carry measurements.noise (host load over the job, see accelbench.hostload).
MEASUREMENT_COMMANDS = ("unet3d-profile", "unet3d-ncu", "sr3-train", "sr3-worker", "lora-finetune", "llm-quant")


def _load_spec(value: str) -> dict:
    """``--spec``: the path of a JSON file, or (for internal launches and tests) an inline JSON object.

    Raises:
        AccelbenchError: the file is missing or not a JSON object (names the file).
    """
    if value.lstrip().startswith("{"):
        return json.loads(value)
    try:
        text = Path(value).read_text()
        spec = json.loads(text)
    except FileNotFoundError:
        raise AccelbenchError(f"spec file not found: {value}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AccelbenchError(f"spec file {value} is not valid JSON ({exc})") from None
    if not isinstance(spec, dict):
        raise AccelbenchError(f"spec file {value} must hold a JSON object")
    from . import results

    results.SPEC_SHA256 = hashlib.sha256(text.encode()).hexdigest()  # recorded in the result (stale-settings check)
    return spec


def _system_from(spec: dict):
    from .systems import System

    d = dict(spec["system"])
    d["precisions"], d["match"] = tuple(d["precisions"]), tuple(d.get("match", ()))
    return System(**d)


def _result_paths(args: argparse.Namespace, required: bool = True) -> list[str]:
    """The result files a command reads: ``--results`` (paths on the command line, for calls by hand) plus every path
    in ``--results-file`` (what the rules pass, so a shell line does not grow with the number of results): a JSON
    file holding a list of paths, ``{"results": [...]}`` (the rules' content-addressed spec file), or a
    validate-results output (``{"validated": [{"path": ...}, ...]}``). Relative paths are relative to the working
    directory. Order kept, duplicates dropped.

    Raises:
        DataError: the list file is missing or not one of these forms, or (``required``) no result file is given.
    """
    from .errors import DataError

    paths = [p for p in (args.results or []) if p]
    for listing in args.results_file or []:
        try:
            data = json.loads(Path(listing).read_text())
        except (OSError, ValueError) as exc:
            raise DataError(f"--results-file {listing}: unreadable list of result files: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("validated"), list):
            data = [v.get("path") if isinstance(v, dict) else None for v in data["validated"]]
        elif isinstance(data, dict):
            data = data.get("results")
        if not isinstance(data, list) or not all(isinstance(v, str) and v for v in data):
            raise DataError(f"--results-file {listing}: expected a JSON list of result.json paths, "
                            '{"results": [paths]} or a validate-results output')
        paths += data
    if required and not paths:
        raise DataError("no result files given: pass --results PATH... or --results-file LIST.json")
    return list(dict.fromkeys(paths))


def _write_result(experiment: str, outcome: dict, config: dict, system, out: Path, overwrite: bool,
                  artefacts: dict | None = None) -> None:
    """One result.json: ``outcome`` (``status``/``reason``/``measurements``) with ``config`` and the provenance."""
    from . import hostload, provenance, results

    if outcome["status"] == "ok":
        outcome["measurements"]["noise"] = hostload.job_noise(outcome["measurements"], config.get("noise"))
    result = results.make_result(experiment, outcome["status"], config,
                                 provenance.collect(system.backend, system.to_dict(), config),
                                 outcome["measurements"], outcome["reason"], artefacts)
    results.write_result(result, out, overwrite=overwrite)
    log.info("%s: status %s%s", out, outcome["status"], f" ({outcome['reason']})" if outcome["reason"] else "")


def cmd_mri_prepare(args: argparse.Namespace) -> None:
    from .data import mri

    spec = _load_spec(args.spec)
    summary = mri.prepare(args.image, args.mask, volume=spec["volume"], spacing_mm=spec["spacing_mm"], **spec["data"])
    log.info("prepared MRI pair: %s", json.dumps(summary))


def cmd_unet3d_profile(args: argparse.Namespace) -> None:
    import torch

    from .data.mri import load_case
    from .experiments import unet3d_profile as exp
    from .measure import write_kernel_table
    from .systems import require_backend

    spec = _load_spec(args.spec)
    system = _system_from(spec)
    require_backend(system)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise AccelbenchError(f"refusing to overwrite the finished result {out}; move it away to rerun")
    settings = exp.resolve_settings(spec["model"], spec["presets"], system.scale, spec.get("scales", {}))
    image, mask = load_case(args.image, args.mask, settings.image_channels, settings.mask_channels)
    variant = exp.VARIANTS[spec["configuration"]]
    out.parent.mkdir(parents=True, exist_ok=True)
    trace = out.with_name("trace.json.gz")
    log.info("system %s (%s), model %s at %s scale, configuration %s", system.name, system.backend,
             settings.preset, settings.scale, variant.name)
    from . import results

    artefacts = {}
    trace_tmp = out.with_name(f".partial.{trace.name}")  # side files appear whole, or not at all
    try:
        outcome = exp.run(settings, variant, system, image, mask, trace_path=trace_tmp, **spec["run"])
        if outcome["status"] == "ok":
            with results.atomic_path(out.with_name("kernels.csv")) as table:
                write_kernel_table(outcome["kernel_summary"], table)
            trace_tmp.replace(trace)
            artefacts = {"kernel_table": "kernels.csv", "trace": trace.name}
    finally:
        trace_tmp.unlink(missing_ok=True)
    config = {**spec, "settings": settings.to_dict()}
    _write_result(exp.EXPERIMENT, outcome, config, system, out, args.overwrite, artefacts)


def cmd_unet3d_step(args: argparse.Namespace) -> None:
    from .data.mri import load_case
    from .experiments import unet3d_profile as exp

    spec = _load_spec(args.spec)
    system = _system_from(spec)
    settings = exp.resolve_settings(spec["model"], spec["presets"], system.scale, spec.get("scales", {}))
    image, mask = load_case(args.image, args.mask, settings.image_channels, settings.mask_channels)
    exp.nvtx_step(settings, exp.VARIANTS[spec["configuration"]], system, image, mask, warmup=args.warmup,
                  seed=spec["run"]["seed"])


def cmd_unet3d_ncu(args: argparse.Namespace) -> None:
    from .experiments import unet3d_ncu as exp

    spec = _load_spec(args.spec)
    system = _system_from(spec)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise AccelbenchError(f"refusing to overwrite the finished result {out}; move it away to rerun")
    if system.backend == "cuda":
        from .systems import require_backend

        require_backend(system)
    profile = Path(args.profile_result)
    table = profile.with_name("kernels.csv")
    outcome = exp.run(spec, system, args.image, args.mask, str(table) if table.exists() else None, **spec["ncu"])
    _write_result(exp.EXPERIMENT, outcome, spec, system, out, args.overwrite, {"profile_result": str(profile)})


def cmd_study_a_ncu_aggregate(args: argparse.Namespace) -> None:
    from .aggregate import study_a_ncu

    study_a_ncu.aggregate(_result_paths(args), args.claims, args.out_dir)


def cmd_study_a_aggregate(args: argparse.Namespace) -> None:
    from .aggregate import study_a

    study_a.aggregate(_result_paths(args), args.claims, args.out_dir)


def cmd_sr3_prepare(args: argparse.Namespace) -> None:
    from .data import sky

    spec = _load_spec(args.spec)
    summary = sky.prepare(args.out, patch=spec["hr_size"], factor=spec["factor"], **spec["data"])
    log.info("prepared sky patches: %s", json.dumps(summary))


def _sr3_result(spec: dict, system, status: str, measurements: dict, reason: str | None, artefacts=None) -> dict:
    from . import hostload, provenance, results
    from .experiments import sr3_scaling as exp

    settings = exp.resolve_settings(spec["preset"], system.scale, spec.get("scales", {}))
    config = {**spec, "settings": settings.to_dict()}
    if status == "ok":
        measurements["noise"] = hostload.job_noise(measurements, spec.get("noise"))
    return results.make_result(exp.EXPERIMENT, status, config, provenance.collect(system.backend, system.to_dict(), config),
                               measurements, reason, artefacts)


def cmd_sr3_train(args: argparse.Namespace) -> None:
    """Launcher: records unsupported cases, else runs ``sr3-worker`` under torchrun with N processes."""
    import subprocess

    from . import launch, multinode, results
    from .experiments import sr3_scaling as exp
    from .systems import probe_devices, require_backend

    spec = _load_spec(args.spec)
    system = _system_from(spec)
    require_backend(system)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise AccelbenchError(f"refusing to overwrite the finished result {out}; move it away to rerun")
    devices, precision = int(spec["devices"]), spec["precision"]
    visible = probe_devices()["count"] if system.backend != "cpu" else None
    reason = exp.unsupported_reason(system, devices, precision, visible)
    if reason:
        results.write_result(_sr3_result(spec, system, "unsupported", {"devices": devices, "precision": precision},
                                         reason), out, overwrite=args.overwrite)
        log.info("%s: status unsupported (%s)", out, reason)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    worker = ["sr3-worker", "--spec", args.spec, "--data", args.data, "--out", str(out)]
    if args.overwrite:
        worker.append("--overwrite")
    # multi-node: srun + torchrun c10d inside the Slurm allocation; one node: torchrun --standalone (multinode.py)
    plan = multinode.node_plan(system, devices, "sr3_scaling.devices")
    alloc = multinode.allocation() if plan.nodes > 1 else None
    reason = multinode.allocation_reason(plan, alloc)
    if reason:
        results.write_result(_sr3_result(spec, system, "unsupported", {"devices": devices, "precision": precision,
                                         "launch": multinode.launch_record(plan, system.backend, None)}, reason),
                             out, overwrite=args.overwrite)
        log.info("%s: status unsupported (%s)", out, reason)
        return
    cmd, rdzv = multinode.launch_command(plan, worker, alloc)
    log.info("launching %d rank(s) on %d node(s): %s", devices, plan.nodes, " ".join(cmd[:12]))
    # CPU: one core per rank (a CPU "device" is one core); accelerators: the job's threads split over a node's ranks
    env = multinode.launch_env(system.backend, launch.rank_env(args.threads, plan.per_node,
                                                               per_rank=1 if system.backend == "cpu" else None))
    log.info("%d rank(s) per node, %s thread(s) each", plan.per_node, env[launch.ENV_THREADS])
    returncode, output = multinode.run_tee(cmd, env=env)
    proc = subprocess.CompletedProcess(cmd, returncode)
    if returncode == 0 and out.exists():
        multinode.add_launch_record(out, multinode.launch_record(plan, system.backend, rdzv, output))
    markers = [exp.oom_marker(out, r) for r in range(devices)]
    ooms = [m.read_text() for m in markers if m.exists()]
    for m in markers:
        m.unlink(missing_ok=True)
    if ooms:
        results.write_result(_sr3_result(spec, system, "oom", {"devices": devices, "precision": precision},
                                         "out of device memory: " + ooms[0].splitlines()[0]), out, overwrite=True)
        log.info("%s: status oom", out)
    elif proc.returncode != 0 or not out.exists():
        raise AccelbenchError(f"torchrun with {devices} rank(s) failed (exit status {proc.returncode}); see the log above")


def cmd_sr3_worker(args: argparse.Namespace) -> None:
    """One DDP rank (started by ``sr3-train`` through torchrun); rank 0 writes the result."""
    import os

    from . import launch, results
    from .data import sky
    from .experiments import sr3_scaling as exp

    placement = launch.place_this_rank()  # first: die with torchrun, this rank's threads and CPUs
    spec = _load_spec(args.spec)
    system = _system_from(spec)
    settings = exp.resolve_settings(spec["preset"], system.scale, spec.get("scales", {}))
    rank = int(os.environ.get("RANK", 0))
    data = sky.load(args.data)
    try:
        outcome = exp.run_rank(settings, system, int(spec["devices"]), spec["precision"], data, placement=placement,
                               ddp=spec.get("ddp"), **spec["run"])
    except torch_oom_errors() as exc:
        exp.oom_marker(args.out, rank).write_text(f"rank {rank}: {str(exc).splitlines()[0] if str(exc) else exc!r}\n")
        os._exit(3)  # the other ranks would wait forever in the next all-reduce: torchrun stops them
    if outcome is None:
        return
    out = Path(args.out)
    panel = out.with_name("samples.npz")
    with results.atomic_path(panel) as tmp:  # numpy keeps the .npz suffix of ".partial.samples.npz"
        exp.save_panel(outcome["panel"], tmp)
    results.write_result(_sr3_result(spec, system, "ok", outcome["measurements"], None, {"samples": panel.name}),
                         out, overwrite=args.overwrite)
    log.info("%s: status ok", out)


def torch_oom_errors() -> tuple[type[BaseException], ...]:
    from .devices import Device

    return Device.out_of_memory_errors()


def cmd_study_b_sr3_aggregate(args: argparse.Namespace) -> None:
    from .aggregate import study_b_sr3

    study_b_sr3.aggregate(_result_paths(args), args.reference, args.out_dir)


def cmd_lora_finetune(args: argparse.Namespace) -> None:
    from .experiments import lora as exp
    from .systems import require_backend

    spec = _load_spec(args.spec)
    system = _system_from(spec)
    if system.backend == "hpu":  # before anything imports habana_frameworks (Study B: lazy mode except FSDP)
        import os

        os.environ.setdefault("PT_HPU_LAZY_MODE", exp.hpu_lazy_mode(spec["strategy"]))
    require_backend(system)
    if args.rank_dir:  # one torchrun rank (started by this same command without --rank-dir)
        exp.rank_entry(spec, system, args.rank_dir, args.threads)
        return
    if not args.out:
        raise AccelbenchError("lora-finetune needs --out (or --rank-dir inside torchrun)")
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise AccelbenchError(f"refusing to overwrite the finished result {out}; move it away to rerun")
    log.info("system %s (%s): %s, %s attention, %s on %d device(s)", system.name, system.backend,
             spec["model_name"], spec["attention"], spec["strategy"], spec["devices"])
    outcome = exp.run(spec, system, threads=args.threads)
    config = {**spec, "plan": outcome["plan"]}
    _write_result(exp.EXPERIMENT, outcome, config, system, out, args.overwrite)


def cmd_llm_export(args: argparse.Namespace) -> None:
    from .models.export import export_hf_folder

    info = export_hf_folder(_load_spec(args.spec), args.out)
    log.info("exported %s to %s", info["name"], args.out)


def cmd_llm_tokenizer_export(args: argparse.Namespace) -> None:
    from .models.export import export_tokenizer

    info = export_tokenizer(args.name, args.out)
    log.info("exported %s (%d ids) to %s", info["name"], info["vocab_size"], args.out)


def cmd_study_b_lora_aggregate(args: argparse.Namespace) -> None:
    from .aggregate import study_b_lora

    study_b_lora.aggregate(_result_paths(args), args.reference, args.out_dir)


def cmd_llm_quant(args: argparse.Namespace) -> None:
    """Study B quantization: ``--stage sensitivity`` (per-layer map + allocation) or ``method`` (one method, bit set)."""
    import csv

    import torch

    from . import results
    from .experiments import llm_quant as exp
    from .systems import require_backend

    spec = _load_spec(args.spec)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    system = _system_from(spec)
    require_backend(system)
    if out.exists() and not args.overwrite:
        raise AccelbenchError(f"refusing to overwrite the finished result {out}; move it away to rerun")
    artefacts = {}
    if args.stage == "sensitivity":
        outcome, tables = exp.run_sensitivity_job(spec, system, args.model_dir)
        for name, rows in tables.items():
            path = out.with_name(f"sensitivity_{name}.csv")
            path.parent.mkdir(parents=True, exist_ok=True)
            with results.atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
                fields = list(dict.fromkeys(k for r in rows for k in r)) or ["layer"]
                writer = csv.DictWriter(fh, fieldnames=fields)
                writer.writeheader()
                writer.writerows(rows)
            artefacts[f"sensitivity_{name}"] = path.name
    else:
        sensitivity = results.read_result(args.sensitivity)
        outcome = exp.run_method_job(spec, system, sensitivity, args.model_dir, stats_dir=str(out.parent / "inc_stats"))
        outcome["measurements"]["allocation"] = outcome.pop("allocation", {})
    _write_result(exp.EXPERIMENT, outcome, spec, system, out, args.overwrite, artefacts)


def cmd_study_b_quant_aggregate(args: argparse.Namespace) -> None:
    from .aggregate import study_b_quant

    study_b_quant.aggregate(_result_paths(args), args.reference, args.out_dir)


def cmd_reference_runs(args: argparse.Namespace) -> None:
    """Regenerate (or with --check verify) each reference run's README.md and the main README's section."""
    from .reference_runs import update

    if args.tables:
        from .reference_runs import find_runs, write_tables

        for run in find_runs(args.root):
            log.info("tables of %s: %s", run["name"], ", ".join(map(str, write_tables(run, args.reference_dir))))
    changed = update(args.root, args.readme, check=args.check)
    if args.check and changed:
        raise AccelbenchError("out of date (run `accelbench reference-runs`): " + ", ".join(map(str, changed)))
    log.info("reference runs: %s", ", ".join(map(str, changed)) if changed else "up to date")


def cmd_validate_results(args: argparse.Namespace) -> None:
    """Check result files against the package's schemas; write the list of valid files (the aggregations' input)."""
    from .results import write_json_atomic
    from .validate import validate_files

    summary = validate_files(_result_paths(args, required=False))
    write_json_atomic({"validated": summary, "count": len(summary)}, args.out)
    log.info("%d result file(s) valid", len(summary))


def cmd_claims(args: argparse.Namespace) -> None:
    from .aggregate import claims

    # validate_results' lists (every result file it checked, fresh and copied in) are result-list files too
    args.results_file = [*(args.results_file or []), *args.validated]
    df = claims.aggregate(_result_paths(args, required=False), args.claims, args.sr3_reference, args.out_dir)
    log.info("claims: %s", df["verdict"].value_counts().to_dict())


def cmd_check_system(args: argparse.Namespace) -> None:
    from .config import load_config
    from .systems import load_systems, probe_devices, require_backend, resolve_system

    config = load_config(args.config)
    found = probe_devices()
    system = resolve_system(config["system"], load_systems(config["systems_dir"]), found)
    require_backend(system, found)
    print(json.dumps({"system": system.to_dict(), "found": found}, indent=1))


def cmd_gpu_smoke(args: argparse.Namespace) -> None:
    from .cluster import device_report
    from .results import write_json_atomic

    report = device_report(args.expect)
    for tool, v in report["vendor_tool"].items():
        print(f"{tool} (exit {v['returncode']}):", *v["lines"], sep="\n  ")
    print("torch:", json.dumps(report["torch"]), "| job env:", json.dumps(report["env"]))
    print(f"{report['host']}: expected {report['expected']} accelerator(s), seen {report['seen']}:",
          "OK" if report["matches"] else "MISMATCH (check the gpu/gres mapping of slurm/site.yaml)")
    write_json_atomic(report, args.out)


def cmd_net_smoke(args: argparse.Namespace) -> None:
    """Launcher of the all-reduce sweep: the same node plan and launch path as SR3 (accelbench.multinode)."""
    import os
    import shutil
    import subprocess

    import pandas as pd

    from . import launch, multinode
    from .systems import require_backend

    spec = _load_spec(args.spec)
    system = _system_from(spec)
    require_backend(system)
    plan = multinode.node_plan(system, int(spec["devices"]), "net_smoke devices")
    if plan.devices < 2:
        raise AccelbenchError("net-smoke needs at least 2 ranks to all-reduce between (ask for devices_2 or more)")
    alloc = multinode.allocation() if plan.nodes > 1 else None
    reason = multinode.allocation_reason(plan, alloc) or multinode.job_limit_reason(system, plan)
    if reason:
        raise AccelbenchError(f"net-smoke: {reason}")
    cpu = system.backend == "cpu"
    spec.setdefault("max_bytes", 16 * 2**20 if cpu else 2**30)
    spec.setdefault("warmup", 2 if cpu else 5)
    spec.setdefault("iters", 10 if cpu else 20)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd, rdzv = multinode.launch_command(plan, ["net-smoke-worker", "--spec", json.dumps(spec), "--out", str(out)], alloc)
    log.info("all-reduce sweep on %d rank(s), %d node(s): %s", plan.devices, plan.nodes, " ".join(cmd[:12]))
    env = multinode.launch_env(system.backend, launch.rank_env(0, plan.per_node, per_rank=1 if cpu else None))
    returncode, output = multinode.run_tee(cmd, env=env)
    if returncode != 0 or not out.exists():
        raise AccelbenchError(f"net-smoke: the ranks failed (exit status {returncode}); see the log above")
    record = multinode.launch_record(plan, system.backend, rdzv, output)
    nccl_tests = shutil.which("all_reduce_perf")  # NCCL's nccl-tests, optional, one node (multi-node needs its MPI build)
    if nccl_tests and system.backend == "cuda" and plan.nodes == 1:
        run = subprocess.run([nccl_tests, "-b", "8", "-e", str(spec["max_bytes"]), "-f", "4", "-g", str(plan.devices)],
                             capture_output=True, text=True)
        record["nccl_tests"] = {"command": run.args, "returncode": run.returncode, "output": run.stdout[-8000:]}
    else:
        record["nccl_tests"] = None
    multinode.add_launch_record(out, record)
    table = pd.DataFrame(json.loads(out.read_text())["measurements"]["sizes"])
    table.insert(0, "ranks", plan.devices)
    table.insert(1, "nodes", plan.nodes)
    table.to_csv(out.with_suffix(".csv"), index=False)
    transports = (record["nccl"] or {}).get("inter_node") or (record["nccl"] or {}).get("via")
    log.info("%s: peak bus bandwidth %.3g GB/s (%s, %s)", out, table["busbw_gbps"].max(), record["collective_backend"],
             transports or "transports not reported")


def cmd_net_smoke_worker(args: argparse.Namespace) -> None:
    """One rank of the all-reduce sweep (started by ``net-smoke`` through torchrun); rank 0 writes ``--out``."""
    from . import provenance, results
    from .experiments import net_smoke as exp

    spec = _load_spec(args.spec)
    system = _system_from(spec)
    sizes = exp.message_sizes(int(spec["max_bytes"]))
    m = exp.run_rank(system.backend, sizes, int(spec["warmup"]), int(spec["iters"]))
    if m is None:
        return
    results.write_result(results.make_result(exp.EXPERIMENT, "ok", spec, provenance.collect(system.backend,
                                             system.to_dict(), spec), m), args.out, overwrite=True)


def _results_file_option(s) -> None:
    s.add_argument("--results-file", action="append", default=[], metavar="LIST.json",
                   help="a JSON list of result.json files (or {\"results\": [...]}, or a validate-results output); "
                        "what the rules pass, so the shell line stays short; may be repeated, adds to --results")


def _aggregate_parser(sub, name: str, help: str, func, reference: str, reference_help: str) -> None:
    """An aggregation command: ``--results`` and/or ``--results-file`` (result.json files of any systems), the published
    data, ``--out-dir``."""
    s = sub.add_parser(name, help=help)
    s.add_argument("--results", nargs="+", default=[], help="result.json files (any systems)")
    _results_file_option(s)
    s.add_argument(reference, required=True, help=reference_help)
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=func)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="accelbench", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("mri-prepare", help="build the Study A MRI image/mask NIfTI pair")
    s.add_argument("--spec", required=True, help="JSON file (or inline object): {volume, spacing_mm, data: {source, folder, case, label_values}}")
    s.add_argument("--image", required=True)
    s.add_argument("--mask", required=True)
    s.set_defaults(func=cmd_mri_prepare)

    s = sub.add_parser("unet3d-profile", help="Study A: profile one Med-DDPM U-Net configuration")
    s.add_argument("--spec", required=True, help="JSON file (or inline object): {system, model, configuration, presets, scales, run}")
    s.add_argument("--image", required=True)
    s.add_argument("--mask", required=True)
    s.add_argument("--out", required=True, help="result.json (kernels.csv and trace.json.gz go beside it)")
    s.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing result")
    s.set_defaults(func=cmd_unet3d_profile)

    s = sub.add_parser("unet3d-step", help="Study A: warm up, then one training step in an NVTX range (ncu's target)")
    s.add_argument("--spec", required=True)
    s.add_argument("--image", required=True)
    s.add_argument("--mask", required=True)
    s.add_argument("--warmup", type=int, default=2)
    s.set_defaults(func=cmd_unet3d_step)

    s = sub.add_parser("unet3d-ncu", help="Study A: Nsight Compute counters of one configuration's training step")
    s.add_argument("--spec", required=True, help="JSON: unet3d-profile's spec plus {ncu: {coverage, max_kernels, ...}}")
    s.add_argument("--image", required=True)
    s.add_argument("--mask", required=True)
    s.add_argument("--profile-result", required=True, help="the configuration's unet3d_profile result.json")
    s.add_argument("--out", required=True)
    s.add_argument("--overwrite", action="store_true")
    s.set_defaults(func=cmd_unet3d_ncu)

    _aggregate_parser(sub, "study-a-ncu-aggregate", "Study A counter table and ratio figure", cmd_study_a_ncu_aggregate, "--claims",
                      "published claims/numbers (CSV with its source lines)")

    _aggregate_parser(sub, "study-a-aggregate", "Study A tables, figures and published-vs-measured comparison", cmd_study_a_aggregate, "--claims",
                      "study_a_claims.csv (published claims, with source)")

    s = sub.add_parser("sr3-prepare", help="Study B SR3: tile sky images into HR patches and 4x downsampled pairs")
    s.add_argument("--spec", required=True, help="JSON file (or inline object): {hr_size, factor, data: {source, folder, held_out_every, train_overlap}}")
    s.add_argument("--out", required=True, help="patch set (.npz)")
    s.set_defaults(func=cmd_sr3_prepare)

    s = sub.add_parser("sr3-train", help="Study B SR3: DDP training on N devices (launches torchrun), one result")
    s.add_argument("--spec", required=True, help="JSON file (or inline object): {system, devices, precision, preset, scales, run}")
    s.add_argument("--data", required=True, help="patch set from sr3-prepare")
    s.add_argument("--out", required=True, help="result.json (samples.npz goes beside it)")
    s.add_argument("--threads", type=int, default=0,
                   help="CPU cores of the job, split over the ranks on accelerators (0 = every usable core)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing result")
    s.set_defaults(func=cmd_sr3_train)

    s = sub.add_parser("sr3-worker", help="Study B SR3: one DDP rank (started by sr3-train through torchrun)")
    s.add_argument("--spec", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--overwrite", action="store_true")
    s.set_defaults(func=cmd_sr3_worker)

    s = sub.add_parser("net-smoke", help="network smoke test: all-reduce bus bandwidth per message size over N ranks")
    s.add_argument("--spec", required=True, help="JSON: {system, devices[, max_bytes, warmup, iters]}")
    s.add_argument("--out", required=True, help="allreduce.json (allreduce.csv beside it)")
    s.set_defaults(func=cmd_net_smoke)

    s = sub.add_parser("net-smoke-worker", help="network smoke test: one rank (started by net-smoke through torchrun)")
    s.add_argument("--spec", required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_net_smoke_worker)

    _aggregate_parser(sub, "study-b-sr3-aggregate", "Study B SR3 scaling figure, efficiency table, sample picture", cmd_study_b_sr3_aggregate, "--reference",
                      "study_b_sr3_scaling.csv (published times, with source)")

    s = sub.add_parser("lora-finetune", help="Study B LoRA: one (model, attention, strategy, devices) run, one result")
    s.add_argument("--spec", required=True, help="JSON file (or inline object): {system, model_name, model, attention, strategy, devices, "
                                                 "settings, data, projection}")
    s.add_argument("--out", help="result.json")
    s.add_argument("--rank-dir", help="internal: run as one torchrun rank and write rank<r>.json here")
    s.add_argument("--threads", type=int, default=0, help="torch CPU threads of the whole run (split over ranks)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing result")
    s.set_defaults(func=cmd_lora_finetune)

    s = sub.add_parser("llm-export", help="Study B: save an offline LM (SmolLM2 GGUF, random init) as a plain HF folder")
    s.add_argument("--spec", required=True, help="JSON model spec of accelbench.models.llm.load_causal_lm")
    s.add_argument("--out", required=True, help="folder to write (safetensors, config, tokenizer, accelbench.json)")
    s.set_defaults(func=cmd_llm_export)

    s = sub.add_parser("llm-tokenizer-export", help="Study B: save a tokenizer of random-init models (SmolLM2's, from "
                                                    "its GGUF) as a small plain HF folder")
    s.add_argument("--name", required=True, help="tokenizer to export (smollm2)")
    s.add_argument("--out", required=True, help="folder to write (tokenizer.json, tokenizer_config.json, accelbench.json)")
    s.set_defaults(func=cmd_llm_tokenizer_export)

    _aggregate_parser(sub, "study-b-lora-aggregate", "Study B LoRA runtime figure, flash/sharding table", cmd_study_b_lora_aggregate, "--reference",
                      "study_b_finetune_runtime.csv (published minutes, with source)")

    s = sub.add_parser("llm-quant", help="Study B: LLM quantization (sensitivity map, or one method and bit set)")
    s.add_argument("--stage", required=True, choices=["sensitivity", "method"])
    s.add_argument("--spec", required=True, help="JSON file (or inline object): {system, model, model_spec, data, method, bitset, ...}")
    s.add_argument("--model-dir", default=None, type=lambda v: v or None,
                   help="model folder written by `accelbench llm-export` (empty or absent: load per spec)")
    s.add_argument("--sensitivity", default=None, help="sensitivity result.json (--stage method)")
    s.add_argument("--out", required=True, help="result.json")
    s.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing result")
    s.set_defaults(func=cmd_llm_quant)

    _aggregate_parser(sub, "study-b-quant-aggregate", "Study B quantization table and figures, published beside measured", cmd_study_b_quant_aggregate, "--reference",
                      "study_b_quantization.csv (published, with source)")

    s = sub.add_parser("reference-runs", help="regenerate the READMEs of the committed reference runs (reference_runs/)")
    s.add_argument("--root", default="reference_runs")
    s.add_argument("--readme", default="README.md", help="the main README with the generated 'Reference runs' block")
    s.add_argument("--check", action="store_true", help="only check that they are up to date (exit 1 otherwise)")
    s.add_argument("--tables", action="store_true", help="also regenerate each run's tables and figures "
                                                         "(<run>/tables/) from its result files")
    s.add_argument("--reference-dir", default="resources/reference", help="the published numbers (claims, tables)")
    s.set_defaults(func=cmd_reference_runs)

    s = sub.add_parser("validate-results", help="check result.json files against the result schemas (fails naming "
                                                "each offending file and field)")
    s.add_argument("--results", nargs="*", default=[], help="result.json files (any experiments, any systems)")
    _results_file_option(s)
    s.add_argument("--out", required=True, help="JSON list of the validated files")
    s.set_defaults(func=cmd_validate_results)

    s = sub.add_parser("claims", help="every claim of both studies against every system's results (one table)")
    s.add_argument("--results", nargs="*", default=[], help="result.json files (any experiments, any systems)")
    _results_file_option(s)
    s.add_argument("--validated", nargs="*", default=[],
                   help="validate-results outputs: the result files they list are read too (keeps the shell line short)")
    s.add_argument("--claims", nargs=2, required=True, metavar=("STUDY_A_CSV", "STUDY_B_CSV"))
    s.add_argument("--sr3-reference", required=True, help="study_b_sr3_scaling.csv (published order of systems)")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_claims)

    s = sub.add_parser("check-system", help="print the system the config resolves to here, or fail")
    s.add_argument("--config", default="config/config.yaml")
    s.set_defaults(func=cmd_check_system)

    s = sub.add_parser("gpu-smoke", help="print and save the devices this job sees (nvidia-smi -L / hl-smi, torch, Slurm env)")
    s.add_argument("--expect", type=int, required=True, help="accelerators the job requested (the rule's gpu resource)")
    s.add_argument("--out", required=True, help="JSON report")
    s.set_defaults(func=cmd_gpu_smoke)
    return p


# Measurement commands: the result they write (--out) and its experiment folder. Each runs holding the machine-wide
# lock of its device set (locks.py) and inside results.superseding (an old result is moved aside, never deleted).
MEASUREMENTS = {"unet3d-profile": "unet3d_profile", "unet3d-ncu": "unet3d_ncu", "sr3-train": "sr3_scaling",
                "lora-finetune": "lora_finetune", "llm-quant": "llm_quant"}


def _measurement_guard(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """Device lock + supersession around a measurement command (nothing for other commands and torchrun ranks)."""
    if args.command not in MEASUREMENTS or not getattr(args, "out", None) or getattr(args, "rank_dir", None):
        return contextlib.nullcontext()
    from . import locks, results

    import signal

    system = _load_spec(args.spec)["system"]
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # cancelled: restore, then exit
    stack = contextlib.ExitStack()
    stack.enter_context(locks.device_lock(locks.device_set(system["backend"]), str(args.out)))
    stack.enter_context(results.superseding(args.out, system["name"], MEASUREMENTS[args.command]))
    return stack


def main(argv: list[str] | None = None) -> int:
    from .quiet import install

    install()  # known-harmless library warnings (accelbench.quiet.KNOWN_HARMLESS) stay out of the job logs
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in MEASUREMENT_COMMANDS:
        from .hostload import start_job

        start_job()  # host load is recorded from here to the result (measurements.noise)
    try:
        with _measurement_guard(args):
            args.func(args)
    except AccelbenchError as exc:
        print(f"accelbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
