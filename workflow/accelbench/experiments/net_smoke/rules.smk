# Network smoke test (not in `rule all`): an all-reduce bus-bandwidth sweep over {devices} ranks, launched like SR3 and
# LoRA (srun + torchrun c10d across nodes when {devices} exceeds the system's devices_per_node; accelbench.cluster.multinode).
#   snakemake results/h100/net_smoke/devices_16/allreduce.json --cores all --profile slurm --config system=h100
# A diagnostic, not a result: not write-protected, reruns whenever asked (`--forcerun net_smoke`).
rule net_smoke:
    output:
        json=f"{RESULTS}/{{system}}/net_smoke/devices_{{devices}}/allreduce.json",
        table=f"{RESULTS}/{{system}}/net_smoke/devices_{{devices}}/allreduce.csv",
    log:
        "logs/{system}/net_smoke/devices_{devices}.log",
    wildcard_constraints:
        devices="[0-9]+",
    container:
        CONTAINER
    threads: all_cores
    resources:
        **node_resources("net_smoke devices"),
        runtime=20,
    params:
        spec=spec_of("net_smoke"),
    shell:
        "accelbench net-smoke --spec {params.spec:q} --out {output.json:q} > {log:q} 2>&1 && cat {output.table:q}"
