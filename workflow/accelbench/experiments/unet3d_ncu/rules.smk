# Study A at the hardware-counter level (rule functions: rules.py): one Nsight Compute job per counted configuration,
# reading its profile result and the MRI pair of experiments/unet3d/rules.smk; the counters' aggregation.
from accelbench.experiments.unet3d import rules as unet3d_rules


# ncu replays the top kernels of the profiled step (unsupported without ncu).
rule unet3d_ncu:
    input:
        unpack(lambda wildcards: unet3d_rules.mri_inputs(RC, wildcards)),
        profile=f"{RESULTS}/{{system}}/unet3d_profile/{{model}}/{{configuration}}/result.json",
    output:
        protected(update(f"{RESULTS}/{{system}}/unet3d_ncu/{{model}}/{{configuration}}/result.json")),
    log:
        f"logs/{{system}}/unet3d_ncu/{{model}}/{{configuration}}.log",
    container:
        CONTAINER
    threads: all_cores  # counters need the GPU to itself
    resources:
        **device_resources(),
        runtime=120,
    params:
        spec=spec_of("unet3d_ncu"),
    shell:
        "accelbench unet3d-ncu --spec {params.spec:q} --image {input.image:q} --mask {input.mask:q}"
        " --profile-result {input.profile:q} --out {output:q} 3>&2 > {log:q} 2>&1"


rule study_a_ncu_aggregate:
    input:
        results=experiment_results("unet3d_ncu"),
        profiles=experiment_results("unet3d_profile"),  # the step device time that ncu's bounded replay is scaled to
        claims=REFERENCE_DIR / "study_a_claims.csv",
        validated=validated(*reads("unet3d_ncu")),
    output:
        table=report(
            f"{RESULTS}/study_a/counters.csv",
            caption="report/study_a_counters_table.rst",
            category="Study A",
        ),
        table_md=f"{RESULTS}/study_a/counters.md",
        table_html=f"{RESULTS}/study_a/counters.html",
        table_tex=f"{RESULTS}/study_a/counters.tex",
        by_class=f"{RESULTS}/study_a/counters_by_class.csv",
        ratios=report(
            f"{RESULTS}/study_a/fig_counter_ratios.png",
            caption="report/study_a_counters.rst",
            category="Study A",
        ),
    log:
        "logs/study_a_ncu_aggregate.log",
    container:
        CONTAINER
    params:
        results_file=results_file,
        out_dir=lambda wildcards, output: Path(output.table).parent,
    shell:
        "accelbench study-a-ncu-aggregate --results-file {params.results_file:q} --claims {input.claims:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
