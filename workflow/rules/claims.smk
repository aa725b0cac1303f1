# Artifact evaluation: every result validated against the package's schemas before any table (each aggregation rule
# takes validated(<experiment>) as input), and one table of every published claim of both studies checked per system.
rule validate_results:
    input:
        results=lambda wildcards: experiment_results(wildcards.experiment),
    output:
        f"{RESULTS}/validation/{{experiment}}.json",
    log:
        "logs/validate_results/{experiment}.log",
    wildcard_constraints:
        experiment="|".join(EXPERIMENTS),
    container:
        CONTAINER
    params:
        results_file=results_file,
    shell:  # on failure the list of offending files and fields is printed, not only logged
        "accelbench validate-results --results-file {params.results_file:q} --out {output:q} > {log:q} 2>&1"
        " || {{ cat {log:q} >&2; exit 1; }}"


rule claims:
    input:
        # the results themselves come through their validation stamps (each lists the files it checked), so this
        # job's printed input stays short however many results there are
        validated=validated(*EXPERIMENTS),
        # the studies' claims files and each experiment's published numbers, as the registry names them
        reference=reference_files(),
    output:
        table=report(
            f"{RESULTS}/claims/claims.csv",
            caption="../report/claims_table.rst",
            category="Claims",
        ),
        summary=f"{RESULTS}/claims/claims_summary.csv",
        h100=f"{RESULTS}/claims/h100_vs_published.csv",
        table_md=f"{RESULTS}/claims/claims.md",
        table_html=f"{RESULTS}/claims/claims.html",
        table_tex=f"{RESULTS}/claims/claims.tex",
        figure=report(
            f"{RESULTS}/claims/fig_claims.png",
            caption="../report/claims.rst",
            category="Claims",
        ),
    log:
        "logs/claims.log",
    container:
        CONTAINER
    params:
        out_dir=lambda wildcards, output: Path(output.table).parent,
        reference_dir=REFERENCE_DIR,
    shell:
        "accelbench claims --validated {input.validated:q} --reference-dir {params.reference_dir:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
