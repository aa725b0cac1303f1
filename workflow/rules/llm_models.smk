# Offline causal LMs shared by Study B's LLM experiments (llm_quant, lora_finetune): a bundled GGUF model or a
# random-init architecture is exported once to a plain Hugging Face folder (float32 safetensors + tokenizer) that
# every later job loads in about a second; local-path models are read where they are.
rule llm_export:
    output:
        directory("resources/llm/{model}"),
    log:
        "logs/llm_export/{model}.log",
    params:
        spec=llm_export_spec,
    container:
        CONTAINER
    shell:
        "accelbench llm-export --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"
