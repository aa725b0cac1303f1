# Toy experiment (rule functions: rules.py): one float32 matmul timed per size of config toy_matmul.sizes, and its
# table; the worked example of CONTRIBUTING.md "Add an experiment".
rule toy_matmul:
    output:
        protected(update(f"{RESULTS}/{{system}}/toy_matmul/n{{size}}/result.json")),
    log:
        "logs/{system}/toy_matmul/n{size}.log",
    params:
        spec=spec_of("toy_matmul"),
    wildcard_constraints:
        size="[0-9]+",
    threads: all_cores  # one measurement at a time: the job owns the machine
    resources:
        **device_resources(),
        runtime=10,
    container:
        CONTAINER
    shell:
        "accelbench toy-matmul --spec {params.spec:q} --out {output:q} --threads {threads} 3>&2 > {log:q} 2>&1"


rule toy_aggregate:
    input:
        results=experiment_results("toy_matmul"),
        claims=REPO / "resources/reference/toy_claims.csv",
        validated=validated("toy_matmul"),
    output:
        table=f"{RESULTS}/toy/table.csv",
        table_md=f"{RESULTS}/toy/table.md",
        table_html=f"{RESULTS}/toy/table.html",
        table_tex=f"{RESULTS}/toy/table.tex",
    log:
        "logs/toy_aggregate.log",
    params:
        results_file=results_file,
        out_dir=lambda wildcards, output: Path(output.table).parent,
    container:
        CONTAINER
    shell:
        "accelbench toy-aggregate --results-file {params.results_file:q} --claims {input.claims:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
