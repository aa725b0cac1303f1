# Energy beside time for every experiment and every system in the checkout (accelbench.aggregate.energy):
# device-level board energy (NVML / HLML / RAPL counters), not MLPerf Power.
rule energy_aggregate:
    input:
        # the results come through their validation stamps (each lists the files it checked, copied-in and
        # reference-run ones included), so this job's printed input stays short however many results there are
        validated=validated(*EXPERIMENTS),
        # each experiment's published numbers (published times are drawn without energy), and the board power
        # limits for results that recorded none (column flag)
        reference=reference_files(),
        board_power=REFERENCE_DIR / "board_power.csv",
    output:
        table=report(
            f"{RESULTS}/energy/energy.csv",
            caption="../report/energy_table.rst",
            category="Energy",
        ),
        table_md=f"{RESULTS}/energy/energy.md",
        table_tex=f"{RESULTS}/energy/energy.tex",
        units=f"{RESULTS}/energy/energy_units.csv",
        figure=report(
            f"{RESULTS}/energy/fig_time_vs_energy.png",
            caption="../report/energy_figure.rst",
            category="Energy",
        ),
    log:
        "logs/energy_aggregate.log",
    container:
        CONTAINER
    params:
        out_dir=lambda wildcards, output: Path(output.table).parent,
        reference_dir=REFERENCE_DIR,
    shell:
        "accelbench energy-aggregate --results-file {input.validated:q} --reference-dir {params.reference_dir:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
