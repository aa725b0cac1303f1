"""The harness-overhead benchmarks behind ``benchmarks/harness_overhead.py`` (the CLI): one module per concern.

:mod:`.common` (CSV appender, CUDA-event bare loop, torchrun launch), :mod:`.study_a` (its bare loop:
:mod:`accelbench.experiments.unet3d.bare`), :mod:`.sr3` and
:mod:`.sr3_host` (their bare loop: :mod:`accelbench.experiments.sr3.bare`), :mod:`.lora` (its bare loop:
:mod:`accelbench.experiments.lora.bare`), :mod:`.ddp_profile` (the bare loop under DDP variants, torch.profiler),
:mod:`.host` (host time of the LoRA Trainer step on the CPU; its per-part timers in
:mod:`.host_attribution`), :mod:`.efficiency`.
"""
