"""Study A (``study-a``): the rule's ``unet3d_profile`` step vs the bare loop of the same U-Net, one process.

The bare loop and the settings it takes from the result are the experiment's own
(:mod:`accelbench.experiments.unet3d.bare`, beside the code it checks); this module times both and writes the CSV
row."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from accelbench.experiments.unet3d.bare import bare_samples, study_a_case
from overhead.common import _append, _dev, _empty_cache, _events_loop, _row


def study_a(args) -> None:
    import torch

    from accelbench.backends.device import Device
    from accelbench.data.mri import load_case
    from accelbench.experiments.unet3d import profile as exp
    from accelbench.measure import timing as measure

    result = json.loads(Path(args.result).read_text())
    spec, system, settings, variant = study_a_case(result)
    image, mask = load_case(args.image, args.mask, settings.image_channels, settings.mask_channels)
    device = Device(system.backend)
    warmup, repeat = args.warmup, args.repeat
    seed = spec["run"]["seed"]

    def harness() -> float:
        torch.manual_seed(seed)
        with exp.math_mode(variant.tf32, variant.cudnn_benchmark):
            w = exp.Workload(exp.build_network(settings), settings, variant, device, image, mask, seed)
            t = measure.time_steps(w.train_step, device, warmup, repeat, desc="harness")
        del w
        return t.median

    def bare() -> float:
        samples = bare_samples(
            settings, variant, image, mask, seed, _dev(), lambda step: _events_loop(step, warmup, repeat)
        )
        return statistics.median(samples)

    h = harness()
    _empty_cache()
    b = bare()
    product = result["measurements"]["train_step"]["median"] if result["status"] == "ok" else None
    _append(
        args.csv,
        _row(
            "study_a",
            spec["configuration"],
            1,
            h,
            b,
            product,
            repeat,
            torch.get_num_threads(),
            variant.cudnn_benchmark,
            f"{settings.preset} {'x'.join(map(str, settings.volume))}, {variant.precision}, compile={variant.compile}",
        ),
    )
