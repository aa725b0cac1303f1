"""Study B (arXiv 2607.05400): LoRA fine-tuning with and without flash attention; single device, DDP, FSDP, ZeRO-3.

Reproduces Study B's fine-tuning runtime study (``study_b_finetune_runtime.csv``, the authors' ``Fig2``):
optimum-habana ``run_lora_clm.py``-style LoRA on a causal LM, timed per optimizer step.

Workload (Study B's settings, all from the config):
  * LoRA rank 64, alpha 64, dropout 0.05 on ``q_proj`` and ``v_proj`` (peft ``LoraConfig``); bf16 where the system
    supports it (``Trainer(bf16=True)`` = autocast, base weights stored in bf16 on accelerators).
  * lr 3e-4 ``constant`` (the job files' ``--lr_scheduler_type``; their warm-up ratio 0.03 then has no effect), max
    grad norm 0.3,
    per-device batch 2, gradient accumulation 2, sequence length 512 with dataset concatenation (all examples
    tokenised, joined with EOS and cut into blocks; labels = inputs, nothing masked, as in ``run_lora_clm.py``).
  * Data: instruction/response pairs (prompt format of ``run_lora_clm.py``); embedded default built from
    ``pydoc_data.topics`` (see :func:`.data.build_pairs`); a site's JSON/JSONL/parquet instruction set through the
    config.
  * Attention (``attention`` axis): ``eager`` = the model's plain matmul-softmax attention; ``flash`` =
    PyTorch SDPA on CUDA/CPU (FlashAttention-2 kernels on Ampere and newer in bf16; ``flash_attention_2`` when the
    ``flash-attn`` package is installed), and on Gaudi optimum-habana's fused SDPA (<= 1.19:
    ``use_flash_attention`` + ``flash_attention_causal_mask``; >= 1.20: ``attn_implementation=gaudi_fused_sdpa``).
  * Strategy: ``single`` (one device), ``ddp`` (torchrun, NCCL / gloo on CPU / HCCL on Gaudi), ``fsdp`` (FULL_SHARD,
    one FSDP unit per decoder layer), ``zero3`` (DeepSpeed ZeRO stage 3; needs ``deepspeed``).
    On the ``cpu`` backend a "device" is one gloo process owning ``threads / N`` cores; FSDP is recorded
    ``unsupported`` there (accelerate would silently run DDP, see :data:`.settings.FSDP_CPU_REASON`). After the first
    step every multi-device run checks that Trainer really wrapped the model as the strategy says
    (:data:`.train.WRAPPER`).

Series (:mod:`.series`): ``faithful`` runs the distributed runtime of Study B's job files (per-step logging, the
authors' ZeRO-3 and FSDP JSON, rank-0-only FSDP loading, the Gaudi mode each job file chose, ``train_runtime``
after 3 warm-up steps); ``ours`` the fastest honest step with the same model, data and hyper-parameters (no per-step
host syncs, ``torch.compile``, Liger kernels where installed), and ``ours_<name>`` its measured variants. Results:
``<model>/<attention>/...`` (ours), ``<model>/faithful/<attention>/...``, ``<model>/ours_<name>/<attention>/...``.

Measurements: optimizer-step time after warm-up steps (CUDA events / synchronize + host clock, per rank, median and
spread), samples/s and tokens/s, peak device memory per rank (host peak RSS on CPU), MFU from the named FLOP formula
(:func:`accelbench.measure.flops.flops_per_token`) against the system's peak, the per-step loss curve plus held-out
loss before/after training, and the projected wall time of Study B's epoch (a projection, labelled so).

Example::

    accelbench lora-finetune --spec "$(cat spec.json)" \
        --out results/cpu/lora_finetune/smollm2_135m/flash/ddp/n2/result.json

Modules (each imports only those above it; callers import what they use from the submodule):
  * :mod:`.data` (instruction pairs, concatenated blocks); FLOPs per token in :mod:`accelbench.measure.flops`;
  * :mod:`.settings`: :class:`~.settings.LoraSettings` and the run plan (strategy, devices, attention, precision);
    :mod:`.series`: the faithful and ours runtimes (the authors' configs in ``authors/``);
  * :mod:`.model`: LoRA application, attention setting, where a random-init model is built, memory pre-checks;
  * :mod:`.trainer`: TrainingArguments, the Trainer mixin (loss curve, fast host step, DDP options);
    :mod:`.timer`: the per-step timer callback;
  * :mod:`.train`: one rank's run (:func:`~.train.train_rank`); :mod:`.summary`: the result's measurements;
  * :mod:`.job`: the job on the harness: :class:`~.job.Settings`, :func:`~.job.run` (plan, pre-checks, ranks through
    :mod:`accelbench.core.launcher`, merge) and :func:`~.job.run_rank`;
  * :mod:`.bare`: the bare reference loop that the Trainer step is checked against (``benchmarks/harness_overhead.py``);
    :mod:`.bare_step`: its step, in the parts the product's step timer sees.

Beside them, torch-free: :mod:`.rules` (the rule functions of ``rules.smk``: result paths, specs, model inputs, checks)
and the aggregation, :mod:`.tables` (tables; rows in :mod:`.tables_rows`, the figure in :mod:`.tables_figures`, the
claims in :mod:`.tables_claims`). The config block is ``lora_finetune.config.schema.yaml``, the report captions are in
``report/``.
"""

from accelbench.core.experiment import Experiment

ENTRIES = (
    Experiment(
        name="lora_finetune",
        study="B",
        package="lora",
        command="lora-finetune",
        variants=("{model}/{attention}/{strategy}/n{devices}", "{model}/{series}/{attention}/{strategy}/n{devices}"),
        order=40,
        aggregate="study_b_lora",
        schema="lora_finetune.schema.json",
        reference="study_b_finetune_runtime.csv",
        claims="study_b_claims.csv",
        ranks=True,
        targets=("study_b_lora/runs.csv", "study_b_lora/fig_runtime_vs_devices.png"),
        rule_seconds=(("study_b_lora_aggregate", 3.0),),
        cluster_requests=(("lora_finetune", 16, 256000), ("lora_finetune_series", 16, 256000)),
    ),
)
