# accelbench: one DAG for every table and figure of Study A (arXiv 2606.19365) and Study B (arXiv 2607.05400).
#
#   snakemake --cores all                          # embedded default: CPU, real bundled data
#   snakemake --cores all --config system=h100     # a named system (config/systems/*.yaml)
#   snakemake --report report.html                 # HTML report of the figures with provenance
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


# terminal lines at most 200 characters (paths grouped, the rest cut); Snakemake's log file keeps them whole
from accelbench.cli.terminal import shorten_snakemake

shorten_snakemake()


include: "workflow/rules/common.smk"
include: "workflow/rules/llm_models.smk"
include: "workflow/rules/cluster.smk"


# Each experiment's rules, from its folder (accelbench/experiments/<name>/rules.smk), in registry order.
for _rules in registry.rule_files():

    include: _rules


force_stale_results()  # not-current results are redone, jobs without input files too (common.smk)


include: "workflow/rules/claims.smk"
include: "workflow/rules/energy.smk"


report: "workflow/report/workflow.rst"


# The last lines of a successful run: what to read (claims.md), the verdict counts and the report command.
onsuccess:
    import sys
    from accelbench.aggregate.claims_report import closing_lines

    for line in closing_lines(f"{RESULTS}/claims"):
        print(line, file=sys.stderr)


rule all:
    default_target: True
    input:
        get_final_output(results=False),
