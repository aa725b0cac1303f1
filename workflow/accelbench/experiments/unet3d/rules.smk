# Study A (rule functions: rules.py): the MRI pair of each model and scale; one profiling job per (system, model,
# configuration); the aggregation. The Nsight Compute jobs are experiments/unet3d_ncu/rules.smk.
from accelbench.experiments.unet3d import rules as unet3d_rules


rule mri_prepare:
    output:
        image="resources/mri/{model}_{scale}/image.nii.gz",
        mask="resources/mri/{model}_{scale}/mask.nii.gz",
    log:
        "logs/mri_prepare/{model}_{scale}.log",
    container:
        CONTAINER
    params:
        spec=lambda wildcards: spec_file(unet3d_rules.mri_spec(RC, wildcards)),
    shell:
        "accelbench mri-prepare --spec {params.spec:q} --image {output.image:q} --mask {output.mask:q} > {log:q} 2>&1"


# Study A: one job per (system, model, configuration); the result is write-protected once finished.
rule unet3d_profile:
    input:
        unpack(lambda wildcards: unet3d_rules.mri_inputs(RC, wildcards)),
    output:
        protected(update(f"{RESULTS}/{{system}}/unet3d_profile/{{model}}/{{configuration}}/result.json")),
    log:
        f"logs/{{system}}/unet3d_profile/{{model}}/{{configuration}}.log",
    container:
        CONTAINER
    threads: all_cores  # one measurement at a time: the job owns the machine
    resources:
        **device_resources(),
        runtime=60,
    params:
        spec=spec_of("unet3d_profile"),
    shell:
        "accelbench unet3d-profile --spec {params.spec:q} --image {input.image:q} --mask {input.mask:q}"
        " --out {output:q} --threads {threads} 3>&2 > {log:q} 2>&1"


# Aggregation: reads only result.json files (this system's and any copied in from other machines).
rule study_a_aggregate:
    input:
        # the counter results too: claims_vs_measured judges the counter claims as rule claims does
        results=experiment_results("unet3d_profile") + experiment_results("unet3d_ncu"),
        claims=REFERENCE_DIR / "study_a_claims.csv",
        validated=validated(*reads("unet3d_profile")),
    output:
        table=report(
            f"{RESULTS}/study_a/table.csv",
            caption="report/study_a_table.rst",
            category="Study A",
        ),
        table_md=f"{RESULTS}/study_a/table.md",
        table_html=f"{RESULTS}/study_a/table.html",
        table_tex=f"{RESULTS}/study_a/table.tex",
        claims=report(
            f"{RESULTS}/study_a/claims_vs_measured.csv",
            caption="report/study_a_claims.rst",
            category="Study A",
        ),
        claims_md=f"{RESULTS}/study_a/claims_vs_measured.md",
        claims_html=f"{RESULTS}/study_a/claims_vs_measured.html",
        networks=report(
            f"{RESULTS}/study_a/network_comparison.csv",
            caption="report/study_a_networks.rst",
            category="Study A",
        ),
        speedup=report(
            f"{RESULTS}/study_a/fig_speedup.png",
            caption="report/study_a_speedup.rst",
            category="Study A",
        ),
        breakdown=report(
            f"{RESULTS}/study_a/fig_kernel_breakdown.png",
            caption="report/study_a_breakdown.rst",
            category="Study A",
        ),
        counts=report(
            f"{RESULTS}/study_a/fig_kernel_counts.png",
            caption="report/study_a_counts.rst",
            category="Study A",
        ),
    log:
        "logs/study_a_aggregate.log",
    container:
        CONTAINER
    params:
        results_file=results_file,
        out_dir=lambda wildcards, output: Path(output.table).parent,
    shell:
        "accelbench study-a-aggregate --results-file {params.results_file:q} --claims {input.claims:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
