"""The harness-overhead benchmarks behind ``benchmarks/harness_overhead.py`` (the CLI): one module per concern.

:mod:`.common` (CSV appender, CUDA-event bare loop, torchrun launch), :mod:`.study_a`, :mod:`.sr3`, :mod:`.lora`,
:mod:`.ddp_profile` (the bare loop under DDP variants, torch.profiler), :mod:`.host` (host time of the LoRA Trainer
step on the CPU; its per-part timers in :mod:`.host_attribution`), :mod:`.efficiency`.
"""
