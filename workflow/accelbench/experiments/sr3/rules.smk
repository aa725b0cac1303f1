# Study B SR3 super-resolution (rule functions: rules.py): patch preparation, one DDP training job per (system,
# configuration, devices), aggregation.
from accelbench.experiments.sr3 import rules as sr3_rules


rule sr3_prepare:
    output:
        "resources/sky/sr3_{scale}.npz",
    log:
        "logs/sr3_prepare/{scale}.log",
    container:
        CONTAINER
    params:
        spec=lambda wildcards: spec_file(sr3_rules.prepare_spec(RC, wildcards)),
    shell:
        "accelbench sr3-prepare --spec {params.spec:q} --out {output:q} 3>&2 > {log:q} 2>&1"


rule sr3_train:
    input:
        data=sr3_rules.data_path(RC),
    output:
        protected(update(f"{RESULTS}/{{system}}/sr3_scaling/{{configuration}}/devices_{{devices}}/result.json")),
    log:
        f"logs/{{system}}/sr3_scaling/{{configuration}}/devices_{{devices}}.log",
    wildcard_constraints:
        configuration="[a-z0-9_]+",
        devices="[0-9]+",
    container:
        CONTAINER
    threads: all_cores  # the whole node: ranks of other jobs would distort the timing
    resources:
        **node_resources(sr3_rules.DEVICES_KEY),  # one node: gpu; more: nodes, tasks, mpi, slurm_extra (cluster/multinode.py)
        runtime=120,
    params:
        spec=spec_of("sr3_scaling"),
    shell:
        "accelbench sr3-train --spec {params.spec:q} --data {input.data:q} --out {output:q} --threads {threads}"
        " 3>&2 > {log:q} 2>&1"


rule study_b_sr3_aggregate:
    input:
        results=experiment_results("sr3_scaling"),
        reference=REPO / "resources/reference/study_b_sr3_scaling.csv",
        validated=validated("sr3_scaling"),
    output:
        table=report(
            f"{RESULTS}/study_b_sr3/scaling.csv",
            caption="report/study_b_sr3_table.rst",
            category="Study B",
        ),
        table_md=f"{RESULTS}/study_b_sr3/scaling.md",
        table_html=f"{RESULTS}/study_b_sr3/scaling.html",
        table_tex=f"{RESULTS}/study_b_sr3/scaling.tex",
        efficiency=report(
            f"{RESULTS}/study_b_sr3/efficiency.csv",
            caption="report/study_b_sr3_efficiency.rst",
            category="Study B",
        ),
        efficiency_md=f"{RESULTS}/study_b_sr3/efficiency.md",
        efficiency_html=f"{RESULTS}/study_b_sr3/efficiency.html",
        scaling=report(
            f"{RESULTS}/study_b_sr3/fig_scaling.png",
            caption="report/study_b_sr3_scaling.rst",
            category="Study B",
        ),
        samples=report(
            f"{RESULTS}/study_b_sr3/fig_samples.png",
            caption="report/study_b_sr3_samples.rst",
            category="Study B",
        ),
    log:
        "logs/study_b_sr3_aggregate.log",
    container:
        CONTAINER
    params:
        results_file=results_file,
        out_dir=lambda wildcards, output: Path(output.table).parent,
    shell:
        "accelbench study-b-sr3-aggregate --results-file {params.results_file:q} --reference {input.reference:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
