"""Commands that prepare a measurement's inputs, one per Snakemake rule: the Study A MRI pair (``mri-prepare``), SR3's
sky patches (``sr3-prepare``), offline LM and tokenizer folders (``llm-export``, ``llm-tokenizer-export``), and
``unet3d-step`` (one training step in an NVTX range: Nsight Compute's target). :func:`add_parsers` adds them to the
``accelbench`` parser (:func:`accelbench.cli.build_parser`); each reads its settings from a ``--spec`` JSON file
written by its rule, or names its output.
"""

from __future__ import annotations

import argparse
import json
import logging

log = logging.getLogger("accelbench")


def cmd_mri_prepare(args: argparse.Namespace) -> None:
    from accelbench.core import registry
    from accelbench.core.harness import load_spec

    mri = registry.get("unet3d_profile").load_data()  # Study A's data module, through the registry
    spec, _ = load_spec(args.spec)
    summary = mri.prepare(args.image, args.mask, volume=spec["volume"], spacing_mm=spec["spacing_mm"], **spec["data"])
    log.info("prepared MRI pair: %s", json.dumps(summary))


def cmd_unet3d_step(args: argparse.Namespace) -> None:
    from accelbench.core import registry
    from accelbench.core.harness import load_spec, system_from

    exp = registry.get("unet3d_profile").load()  # its job module, through the registry (imports torch)
    load_case = registry.get("unet3d_profile").load_data().load_case
    spec, _ = load_spec(args.spec)
    system = system_from(spec)
    s = exp.Settings.from_spec(spec, system)
    image, mask = load_case(args.image, args.mask, s.model.image_channels, s.model.mask_channels)
    exp.nvtx_step(s.model, s.variant, system, image, mask, warmup=args.warmup, seed=s.params["seed"])


def cmd_sr3_prepare(args: argparse.Namespace) -> None:
    from accelbench.core import registry
    from accelbench.core.harness import load_spec
    from accelbench.core.locks import notice

    sky = registry.get("sr3_scaling").load_data()  # SR3's data module, through the registry
    spec, _ = load_spec(args.spec)
    summary = sky.prepare(args.out, patch=spec["hr_size"], factor=spec["factor"], notify=notice, **spec["data"])
    log.info("prepared sky patches: %s", json.dumps(summary))


def cmd_llm_export(args: argparse.Namespace) -> None:
    from accelbench.core.harness import load_spec
    from accelbench.models.export import export_hf_folder

    info = export_hf_folder(load_spec(args.spec)[0], args.out)
    log.info("exported %s to %s", info["name"], args.out)


def cmd_llm_tokenizer_export(args: argparse.Namespace) -> None:
    from accelbench.models.export import export_tokenizer

    info = export_tokenizer(args.name, args.out)
    log.info("exported %s (%d ids) to %s", info["name"], info["vocab_size"], args.out)


def add_parsers(sub) -> None:
    """The input commands' subparsers, added to ``sub`` (the ``accelbench`` parser's subparsers)."""
    s = sub.add_parser("mri-prepare", help="build the Study A MRI image/mask NIfTI pair")
    s.add_argument(
        "--spec", required=True, help="JSON file: {volume, spacing_mm, data: {source, folder, case, label_values}}"
    )
    s.add_argument("--image", required=True)
    s.add_argument("--mask", required=True)
    s.set_defaults(func=cmd_mri_prepare)

    s = sub.add_parser("unet3d-step", help="Study A: warm up, then one training step in an NVTX range (ncu's target)")
    s.add_argument("--spec", required=True)
    s.add_argument("--image", required=True)
    s.add_argument("--mask", required=True)
    s.add_argument("--warmup", type=int, default=2)
    s.set_defaults(func=cmd_unet3d_step)

    s = sub.add_parser("sr3-prepare", help="Study B SR3: tile sky images into HR patches and 4x downsampled pairs")
    s.add_argument(
        "--spec",
        required=True,
        help="JSON file: {hr_size, factor, data: {source, folder, held_out_every, train_overlap}}",
    )
    s.add_argument("--out", required=True, help="patch set (.npz)")
    s.set_defaults(func=cmd_sr3_prepare)

    s = sub.add_parser(
        "llm-export", help="Study B: save an offline LM (SmolLM2 GGUF, random init) as a plain HF folder"
    )
    s.add_argument("--spec", required=True, help="JSON model spec of accelbench.models.llm.load_causal_lm")
    s.add_argument("--out", required=True, help="folder to write (safetensors, config, tokenizer, accelbench.json)")
    s.set_defaults(func=cmd_llm_export)

    s = sub.add_parser(
        "llm-tokenizer-export",
        help="Study B: save a tokenizer of random-init models (SmolLM2's, from its GGUF) as a small plain HF folder",
    )
    s.add_argument("--name", required=True, help="tokenizer to export (smollm2)")
    s.add_argument(
        "--out", required=True, help="folder to write (tokenizer.json, tokenizer_config.json, accelbench.json)"
    )
    s.set_defaults(func=cmd_llm_tokenizer_export)
