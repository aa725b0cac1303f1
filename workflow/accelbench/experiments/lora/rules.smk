# Study B LoRA fine-tuning (model export: workflow/rules/llm_models.smk; rule functions: rules.py): one job per
# (system, model, series, attention, strategy, devices); the `ours` series in <model>/<attention>/..., the faithful
# one and ours' variants in <model>/<series>/<attention>/... (multi-device jobs launch torchrun themselves);
# the aggregation.
from accelbench.experiments.lora import rules as lora_rules


rule lora_finetune:
    input:
        unpack(lambda wildcards: lora_rules.model_input(RC, wildcards)),
    output:
        protected(
            update(f"{RESULTS}/{{system}}/lora_finetune/{{model}}/{{attention}}/{{strategy}}/n{{devices}}/result.json")
        ),
    log:
        f"logs/{{system}}/lora_finetune/{{model}}/{{attention}}/{{strategy}}/n{{devices}}.log",
    wildcard_constraints:
        model="[a-z0-9_]+",  # one folder: a series level (`faithful/`, `ours_<variant>/`) is never a model
        attention="eager|flash",
        strategy="single|ddp|fsdp|zero3",
        devices="[0-9]+",
    container:
        CONTAINER
    threads: all_cores  # one measurement at a time: the job owns the machine
    resources:
        **node_resources("lora_finetune.runs devices"),  # one node: gpu; more: nodes, tasks, mpi, slurm_extra (cluster/multinode.py)
        runtime=120,
    params:
        spec=spec_of("lora_finetune"),
    shell:
        "accelbench lora-finetune --spec {params.spec:q} --out {output:q} --threads {threads} 3>&2 > {log:q} 2>&1"


# Study B's faithful series (the job files' runtime, series.py) and the measured variants of ours
# (lora_finetune.ours_variants): the same job under <model>/<series>/
use rule lora_finetune as lora_finetune_series with:
    output:
        protected(
            update(
                f"{RESULTS}/{{system}}/lora_finetune/{{model}}/{{series}}/{{attention}}/{{strategy}}/n{{devices}}/result.json"
            )
        ),
    log:
        f"logs/{{system}}/lora_finetune/{{model}}/{{series}}/{{attention}}/{{strategy}}/n{{devices}}.log",
    wildcard_constraints:  # params: rules.spec reads the series from the path
        model="[a-z0-9_]+",
        series="faithful|ours_[a-z0-9_]+",
        attention="eager|flash",
        strategy="single|ddp|fsdp|zero3",
        devices="[0-9]+",


rule study_b_lora_aggregate:
    input:
        results=experiment_results("lora_finetune"),
        reference=REPO / "resources/reference/study_b_finetune_runtime.csv",
        validated=validated("lora_finetune"),
    output:
        runs=report(
            f"{RESULTS}/study_b_lora/runs.csv",
            caption="report/study_b_lora_runs.rst",
            category="Study B",
        ),
        runs_md=f"{RESULTS}/study_b_lora/runs.md",
        runs_html=f"{RESULTS}/study_b_lora/runs.html",
        runs_tex=f"{RESULTS}/study_b_lora/runs.tex",
        gains=report(
            f"{RESULTS}/study_b_lora/gains.csv",
            caption="report/study_b_lora_gains.rst",
            category="Study B",
        ),
        gains_md=f"{RESULTS}/study_b_lora/gains.md",
        gains_html=f"{RESULTS}/study_b_lora/gains.html",
        gains_tex=f"{RESULTS}/study_b_lora/gains.tex",
        runtime=report(
            f"{RESULTS}/study_b_lora/fig_runtime_vs_devices.png",
            caption="report/study_b_lora_runtime.rst",
            category="Study B",
        ),
    log:
        "logs/study_b_lora_aggregate.log",
    container:
        CONTAINER
    params:
        results_file=results_file,
        out_dir=lambda wildcards, output: Path(output.runs).parent,
    shell:
        "accelbench study-b-lora-aggregate --results-file {params.results_file:q} --reference {input.reference:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
