# Study B quantization (model export: workflow/rules/llm_models.smk; rule functions: rules.py): one sensitivity job
# per (system, model), one job per (system, model, method, bit set) reading the sensitivity result, and the
# aggregation (table in Study B's layout + figures).
from accelbench.experiments.llm_quant import rules as llm_quant_rules


rule llm_quant_sensitivity:
    input:
        unpack(lambda wildcards: llm_quant_rules.model_input(RC, wildcards)),
    output:
        result=protected(update(f"{RESULTS}/{{system}}/llm_quant/{{model}}/sensitivity/result.json")),
        layers=update(f"{RESULTS}/{{system}}/llm_quant/{{model}}/sensitivity/sensitivity_layers.csv"),
        submodules=update(f"{RESULTS}/{{system}}/llm_quant/{{model}}/sensitivity/sensitivity_submodules.csv"),
    log:
        f"logs/{{system}}/llm_quant/{{model}}/sensitivity.log",
    container:
        CONTAINER
    threads: all_cores
    resources:
        **device_resources(),
        runtime=120,
    params:
        spec=spec_of("llm_quant"),
        model_dir=llm_quant_rules.model_dir_option,
    shell:
        "accelbench llm-quant --stage sensitivity --spec {params.spec:q} {params.model_dir:q}"
        " --out {output.result:q} --threads {threads} 3>&2 > {log:q} 2>&1"


rule llm_quant_method:
    input:
        unpack(lambda wildcards: llm_quant_rules.model_input(RC, wildcards)),
        sensitivity=f"{RESULTS}/{{system}}/llm_quant/{{model}}/sensitivity/result.json",
    output:
        protected(update(f"{RESULTS}/{{system}}/llm_quant/{{model}}/{{method}}/{{bitset}}/result.json")),
    log:
        f"logs/{{system}}/llm_quant/{{model}}/{{method}}/{{bitset}}.log",
    wildcard_constraints:
        method="fp32|fake|torchao|int8_dq|inc_fp8",
        bitset="none|bf16_fp8|[0-9]+(_[0-9]+)+",
    container:
        CONTAINER
    threads: all_cores
    resources:
        **device_resources(),
        runtime=60,
    params:
        spec=spec_of("llm_quant"),
        model_dir=llm_quant_rules.model_dir_option,
    shell:
        "accelbench llm-quant --stage method --spec {params.spec:q} {params.model_dir:q}"
        " --sensitivity {input.sensitivity:q} --out {output:q} --threads {threads} 3>&2 > {log:q} 2>&1"


rule study_b_quant_aggregate:
    input:
        results=experiment_results("llm_quant"),
        reference=REPO / "resources/reference/study_b_quantization.csv",
        # read beside the reference: the model cards' published scores (<task>_card_pct)
        model_cards=REPO / "resources/reference/model_cards.csv",
        validated=validated("llm_quant"),
    output:
        table=report(
            f"{RESULTS}/study_b_quant/table.csv",
            caption="report/study_b_quant_table.rst",
            category="Study B",
        ),
        table_md=f"{RESULTS}/study_b_quant/table.md",
        table_html=f"{RESULTS}/study_b_quant/table.html",
        table_tex=f"{RESULTS}/study_b_quant/table.tex",
        sensitivity=f"{RESULTS}/study_b_quant/sensitivity_layers.csv",
        fig_layers=report(
            f"{RESULTS}/study_b_quant/fig_sensitivity_layers.png",
            caption="report/study_b_quant_layers.rst",
            category="Study B",
        ),
        fig_submodules=report(
            f"{RESULTS}/study_b_quant/fig_sensitivity_submodules.png",
            caption="report/study_b_quant_submodules.rst",
            category="Study B",
        ),
    log:
        "logs/study_b_quant_aggregate.log",
    container:
        CONTAINER
    params:
        results_file=results_file,
        out_dir=lambda wildcards, output: Path(output.table).parent,
    shell:
        "accelbench study-b-quant-aggregate --results-file {params.results_file:q} --reference {input.reference:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
