"""Command-line entry points: one per Snakemake rule (rules call these with ``shell:``).

Run ``accelbench --help`` for the list. Each command takes its resolved settings as one JSON
argument (the rule builds it from the validated config) and writes its outputs atomically.
Errors the user can act on (bad config, missing accelerator, missing or corrupt files) end with
a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .errors import AccelbenchError

log = logging.getLogger("accelbench")


def _system_from(spec: dict):
    from .systems import System

    d = dict(spec["system"])
    d["precisions"], d["match"] = tuple(d["precisions"]), tuple(d.get("match", ()))
    return System(**d)


def cmd_mri_prepare(args: argparse.Namespace) -> None:
    from .data import mri

    spec = json.loads(args.spec)
    summary = mri.prepare(args.image, args.mask, volume=spec["volume"], spacing_mm=spec["spacing_mm"], **spec["data"])
    log.info("prepared MRI pair: %s", json.dumps(summary))


def cmd_unet3d_profile(args: argparse.Namespace) -> None:
    import torch

    from . import provenance, results
    from .data.mri import load_case
    from .experiments import unet3d_profile as exp
    from .measure import write_kernel_table
    from .systems import require_backend

    spec = json.loads(args.spec)
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
    outcome = exp.run(settings, variant, system, image, mask, trace_path=trace, **spec["run"])
    artefacts = {}
    if outcome["status"] == "ok":
        write_kernel_table(outcome["kernel_summary"], out.with_name("kernels.csv"))
        artefacts = {"kernel_table": "kernels.csv", "trace": trace.name}
    config = {**spec, "settings": settings.to_dict()}
    result = results.make_result(exp.EXPERIMENT, outcome["status"], config,
                                 provenance.collect(system.backend, system.to_dict(), config),
                                 outcome["measurements"], outcome["reason"], artefacts)
    results.write_result(result, out, overwrite=args.overwrite)
    log.info("%s: status %s%s", out, outcome["status"], f" ({outcome['reason']})" if outcome["reason"] else "")


def cmd_unet3d_step(args: argparse.Namespace) -> None:
    from .data.mri import load_case
    from .experiments import unet3d_profile as exp

    spec = json.loads(args.spec)
    system = _system_from(spec)
    settings = exp.resolve_settings(spec["model"], spec["presets"], system.scale, spec.get("scales", {}))
    image, mask = load_case(args.image, args.mask, settings.image_channels, settings.mask_channels)
    exp.nvtx_step(settings, exp.VARIANTS[spec["configuration"]], system, image, mask, warmup=args.warmup,
                  seed=spec["run"]["seed"])


def cmd_unet3d_ncu(args: argparse.Namespace) -> None:
    from . import provenance, results
    from .experiments import unet3d_ncu as exp

    spec = json.loads(args.spec)
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
    result = results.make_result(exp.EXPERIMENT, outcome["status"], spec,
                                 provenance.collect(system.backend, system.to_dict(), spec),
                                 outcome["measurements"], outcome["reason"], {"profile_result": str(profile)})
    results.write_result(result, out, overwrite=args.overwrite)
    log.info("%s: status %s%s", out, outcome["status"], f" ({outcome['reason']})" if outcome["reason"] else "")


def cmd_study_a_ncu_aggregate(args: argparse.Namespace) -> None:
    from .aggregate import study_a_ncu

    study_a_ncu.aggregate(args.results, args.claims, args.out_dir)


def cmd_study_a_aggregate(args: argparse.Namespace) -> None:
    from .aggregate import study_a

    study_a.aggregate(args.results, args.claims, args.out_dir)


def cmd_check_system(args: argparse.Namespace) -> None:
    from .config import load_config
    from .systems import load_systems, probe_devices, require_backend, resolve_system

    config = load_config(args.config)
    found = probe_devices()
    system = resolve_system(config["system"], load_systems(config["systems_dir"]), found)
    require_backend(system, found)
    print(json.dumps({"system": system.to_dict(), "found": found}, indent=1))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="accelbench", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("mri-prepare", help="build the Study A MRI image/mask NIfTI pair")
    s.add_argument("--spec", required=True, help="JSON: {volume, spacing_mm, data: {source, folder, case, label_values}}")
    s.add_argument("--image", required=True)
    s.add_argument("--mask", required=True)
    s.set_defaults(func=cmd_mri_prepare)

    s = sub.add_parser("unet3d-profile", help="Study A: profile one Med-DDPM U-Net configuration")
    s.add_argument("--spec", required=True, help="JSON: {system, model, configuration, presets, scales, run}")
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

    s = sub.add_parser("study-a-ncu-aggregate", help="Study A counter table and ratio figure")
    s.add_argument("--results", nargs="+", required=True)
    s.add_argument("--claims", required=True)
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_study_a_ncu_aggregate)

    s = sub.add_parser("study-a-aggregate", help="Study A tables, figures and published-vs-measured comparison")
    s.add_argument("--results", nargs="+", required=True, help="result.json files (any systems)")
    s.add_argument("--claims", required=True, help="study_a_claims.csv (published claims, with source)")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_study_a_aggregate)

    s = sub.add_parser("check-system", help="print the system the config resolves to here, or fail")
    s.add_argument("--config", default="config/config.yaml")
    s.set_defaults(func=cmd_check_system)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        args.func(args)
    except AccelbenchError as exc:
        print(f"accelbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
