# Aggregation: reads only result.json files (this system's and any copied in from other machines).
rule study_a_aggregate:
    input:
        # the counter results too: claims_vs_measured judges the counter claims as rule claims does
        results=unet3d_profile_results() + copied_results("unet3d_profile") + experiment_results("unet3d_ncu"),
        claims=CLAIMS_A,
        validated=validated(*reads("unet3d_profile")),
    output:
        table=report(
            f"{RESULTS}/study_a/table.csv",
            caption="../report/study_a_table.rst",
            category="Study A",
        ),
        table_md=f"{RESULTS}/study_a/table.md",
        table_html=f"{RESULTS}/study_a/table.html",
        table_tex=f"{RESULTS}/study_a/table.tex",
        claims=report(
            f"{RESULTS}/study_a/claims_vs_measured.csv",
            caption="../report/study_a_claims.rst",
            category="Study A",
        ),
        claims_md=f"{RESULTS}/study_a/claims_vs_measured.md",
        claims_html=f"{RESULTS}/study_a/claims_vs_measured.html",
        networks=report(
            f"{RESULTS}/study_a/network_comparison.csv",
            caption="../report/study_a_networks.rst",
            category="Study A",
        ),
        speedup=report(
            f"{RESULTS}/study_a/fig_speedup.png",
            caption="../report/study_a_speedup.rst",
            category="Study A",
        ),
        breakdown=report(
            f"{RESULTS}/study_a/fig_kernel_breakdown.png",
            caption="../report/study_a_breakdown.rst",
            category="Study A",
        ),
        counts=report(
            f"{RESULTS}/study_a/fig_kernel_counts.png",
            caption="../report/study_a_counts.rst",
            category="Study A",
        ),
    log:
        "logs/study_a_aggregate.log",
    params:
        results_file=results_file,
        out_dir=lambda wildcards, output: Path(output.table).parent,
    container:
        CONTAINER
    shell:
        "accelbench study-a-aggregate --results-file {params.results_file:q} --claims {input.claims:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"


rule study_a_ncu_aggregate:
    input:
        results=unet3d_ncu_results() + copied_results("unet3d_ncu"),
        profiles=unet3d_profile_results(),  # the step device time that ncu's bounded replay is scaled to
        claims=CLAIMS_A,
        validated=validated(*reads("unet3d_ncu")),
    output:
        table=report(
            f"{RESULTS}/study_a/counters.csv",
            caption="../report/study_a_counters_table.rst",
            category="Study A",
        ),
        table_md=f"{RESULTS}/study_a/counters.md",
        table_html=f"{RESULTS}/study_a/counters.html",
        table_tex=f"{RESULTS}/study_a/counters.tex",
        by_class=f"{RESULTS}/study_a/counters_by_class.csv",
        ratios=report(
            f"{RESULTS}/study_a/fig_counter_ratios.png",
            caption="../report/study_a_counters.rst",
            category="Study A",
        ),
    log:
        "logs/study_a_ncu_aggregate.log",
    params:
        results_file=results_file,
        out_dir=lambda wildcards, output: Path(output.table).parent,
    container:
        CONTAINER
    shell:
        "accelbench study-a-ncu-aggregate --results-file {params.results_file:q} --claims {input.claims:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
