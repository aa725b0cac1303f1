"""Study A's harness overhead (``benchmarks/harness_overhead.py study-a``): the rule's ``unet3d_profile`` step vs the
bare loop of the same U-Net (:mod:`.bare`), one process. The case is the result's own: its ``config`` (the rule's
exact spec) resolved by the job's :meth:`.settings.Settings.from_spec` on the system the job resolved
(:func:`accelbench.core.harness.system_from`); this module times both and writes the CSV row
(:mod:`accelbench.measure.overhead`)."""

from __future__ import annotations

import statistics

from accelbench.core import files
from accelbench.errors import ResultError
from accelbench.measure import overhead


def case_of(result: dict):
    """``(spec, system, job settings)`` of a ``unet3d_profile`` result (its ``result.json`` as a dict)."""
    from accelbench.core.harness import system_from
    from accelbench.experiments.unet3d.settings import Settings

    spec = result["config"]
    system = system_from(spec)
    return spec, system, Settings.from_spec(spec, system)


def settings_text(settings, variant) -> str:
    """The ``settings`` cell of a Study A row: preset, volume, math mode, compilation and, where the configuration
    rewrites Med-DDPM's network, each module implementation it runs (``norm=fused, conv_grad=..., skinny_conv=...``:
    :attr:`.configs.Variant.network_options`) and Inductor's layout optimisation where it is off."""
    text = f"{settings.preset} {'x'.join(map(str, settings.volume))}, {variant.precision}, compile={variant.compile}"
    if variant.rewrites_network:
        text += "".join(f", {k}={v}" for k, v in variant.network_options.items())
    if not variant.layout_optimization:
        text += ", layout_optimization=False"
    return text


def study_a(args) -> None:
    """Time the rule's step (``Workload.train_step`` through ``measure.phase.train_phase``) and the bare loop
    (:func:`.bare.bare_samples`) of ``args.result`` on ``args.image``/``args.mask``; append one row to ``args.csv``."""
    import torch

    from accelbench.backends.device import Device
    from accelbench.experiments.unet3d import job as exp
    from accelbench.experiments.unet3d.bare import bare_samples
    from accelbench.experiments.unet3d.data import load_case
    from accelbench.measure import phase

    result = files.read_json(args.result, "result file", error=ResultError)
    spec, system, job = case_of(result)
    settings, variant = job.model, job.variant
    image, mask = load_case(args.image, args.mask, settings.image_channels, settings.mask_channels)
    device = Device(system.backend)
    warmup, repeat = args.warmup, args.repeat
    seed = job.params["seed"]

    def harness() -> float:
        torch.manual_seed(seed)
        with exp.math_mode(variant.tf32, variant.cudnn_benchmark):
            w = exp.Workload(exp.build_network(settings), settings, variant, device, image, mask, seed)
            t = phase.train_phase(w.train_step, device, warmup, repeat, desc="harness").timing
        del w
        return t.median

    def bare() -> float:
        samples = bare_samples(
            settings,
            variant,
            image,
            mask,
            seed,
            device.torch_device.type,
            lambda step: phase.train_phase(step, device, warmup, repeat, energy=False, desc="bare").timing.samples,
        )
        return statistics.median(samples)

    h = harness()
    overhead.empty_cache(device)
    b = bare()
    product = result["measurements"]["train_step"]["median"] if result["status"] == "ok" else None
    overhead.append(
        args.csv,
        overhead.Row(
            experiment="study_a",
            case=spec["configuration"],
            devices=1,
            harness_ms=h,
            bare_ms=b,
            product_ms=product,
            steps=repeat,
            threads_per_rank=torch.get_num_threads(),
            cudnn_benchmark=variant.cudnn_benchmark,
            settings=settings_text(settings, variant),
        ).cells(device),
    )
