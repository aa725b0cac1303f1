"""Profile of the LoRA "ours" step as the product's rule runs it, by kernel class and the costliest kernels.

``harness_overhead.py ddp-profile --experiment lora`` profiles the bare loop in eager mode with float32 adapters (its
purpose: DDP's options on the plain step). This builds the same bare loop mirroring the result's Trainer
(:func:`accelbench.experiments.lora.bare.bare_settings`: torch.compile, bf16 adapters, fused AdamW, how batches reach
the device) and writes one row of ``benchmarks/ddp_profile_h200.csv``'s columns (:mod:`accelbench.measure.ddp_profile`).

    benchmarks/device_run.sh python3 benchmarks/lora_ours_profile.py RESULT_JSON OUT_CSV

RESULT_JSON: a lora_finetune result of the ours series (one device); OUT_CSV: the CSV to append the row to.
"""

import argparse
import json
from pathlib import Path

from accelbench.cluster import processes as launch
from accelbench.experiments.lora.bare import bare_settings, lora_bare
from accelbench.experiments.lora.overhead import _rank_device, case_of
from accelbench.measure import overhead
from accelbench.measure.ddp_profile import Case, profile_rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="lora_finetune result.json of the ours series, one device")
    parser.add_argument("csv", help="CSV to append the profile's row to")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--profiled", type=int, default=3)
    cli = parser.parse_args()
    args = argparse.Namespace(
        result=cli.result,
        csv=cli.csv,
        warmup=cli.warmup,
        repeat=cli.repeat,
        profiled=cli.profiled,
        threads=0,
        nprocs="1",
    )
    placement = launch.place_this_rank()
    result = json.loads(Path(cli.result).read_text())
    spec, system, s, plan = case_of(result)
    mirror = bare_settings(result, s, plan, system)
    print("mirror:", mirror.describe(), flush=True)
    rank, world, local = overhead.ranks()
    case = Case(
        experiment="lora",
        case=f"{spec['model_name']} {spec['attention']} ours (bare loop mirroring the Trainer: {mirror.describe()})",
        settings=f"seq {s.seq_len}, batch {s.per_device_batch}x{s.grad_accum}/device, {plan.precision}",
        grad_accum=s.grad_accum,
        device=_rank_device(system, local),
        make_step=lambda kw: lora_bare(spec, system, plan, s, rank, world, local, kw, mirror=mirror),
    )
    profile_rank(args, case, placement)


if __name__ == "__main__":
    main()
