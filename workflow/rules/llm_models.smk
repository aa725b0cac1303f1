from accelbench.models.llm import EXPORTABLE_TOKENIZERS, TOKENIZER_DIR
from accelbench.models.rule_specs import export_inputs, export_model


# Offline causal LMs shared by experiments (those whose rules module gives `model_specs`): a bundled GGUF model or a
# random-init architecture is exported once to a plain Hugging Face folder (float32 safetensors + tokenizer) that
# every later job loads in about a second; local-path models are read where they are. Random-init models read
# SmolLM2's tokenizer from its exported folder (rule llm_tokenizer_export), never from the GGUF.
rule llm_export:
    input:
        # random init: the exported tokenizer folder (rule llm_tokenizer_export)
        unpack(lambda wildcards: export_inputs(RC, wildcards.model, registry.EXPERIMENTS.values())),
    output:
        directory("resources/llm/{model}"),
    log:
        "logs/llm_export/{model}.log",
    container:
        CONTAINER
    params:
        spec=lambda wildcards: spec_file(export_model(RC, wildcards.model, registry.EXPERIMENTS.values())),
    shell:
        "accelbench llm-export --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"


# The tokenizer of random-init models on its own (SmolLM2's: 3.4 MB, vs the 98 MB GGUF it is parsed from), so that a
# node reached through a transfer-capped channel runs the paper-scale LoRA presets and the TinyLlama-architecture
# quantization with only resources/llm/tokenizers/smollm2 carried.
rule llm_tokenizer_export:
    output:
        directory(f"{TOKENIZER_DIR}/{{tokenizer}}"),
    log:
        "logs/llm_tokenizer_export/{tokenizer}.log",
    wildcard_constraints:
        tokenizer="|".join(EXPORTABLE_TOKENIZERS),
    container:
        CONTAINER
    shell:
        "accelbench llm-tokenizer-export --name {wildcards.tokenizer:q} --out {output:q} > {log:q} 2>&1"
