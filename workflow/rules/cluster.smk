# Cluster checks: the GPU smoke rule (what a job really sees) and the hint printed when Slurm refuses a job.
# GPU smoke test of a site's request mapping (not in `rule all`): one job asks for all accelerators of the system and
# prints what it really sees (nvidia-smi -L / hl-smi, torch, CUDA_/HABANA_VISIBLE_DEVICES, SLURM_* variables).
#   snakemake results/h100/gpu_smoke/devices.json --cores all --profile slurm --config system=h100
# A diagnostic, not a result: it is not write-protected, and reruns whenever asked (`--forcerun gpu_smoke`).
rule gpu_smoke:
    output:
        f"{RESULTS}/{{system}}/gpu_smoke/devices.json",
    log:
        "logs/{system}/gpu_smoke.log",
    container:
        CONTAINER
    threads: 1
    resources:
        gpu=devices_per_node(SYSTEM) if backends.get(SYSTEM.backend).slurm_gpu_resource else 0,  # one node
        runtime=10,
    shell:
        "accelbench gpu-smoke --expect {resources.gpu} --out {output:q} > {log:q} 2>&1 && cat {log:q}"


# Before the first job (not in dry runs): a local run checks the system's backend on this host (a run that submits to
# Slurm leaves it to each job on its node), and `account: null` in slurm/site.yaml submits without an account; a
# local run prints its time estimate (accelbench.core.estimate; ACCELBENCH_ESTIMATE=0: none).
onstart:
    from accelbench.cluster.node_report import honour_slurm_no_account
    from accelbench.core.systems import require_backend_for_local_jobs

    require_backend_for_local_jobs(workflow, SYSTEM)
    honour_slurm_no_account(workflow)
    if workflow.local_exec:  # the jobs to run and the expected wall time here, refreshed as jobs finish
        from accelbench.core.estimate import start as start_estimate

        start_estimate(workflow)


# A refused Slurm submission (bad partition/account/limits): name the rule and the file to fix, after Snakemake's error;
# then one line per failed job (local or on a Slurm node): its rule and the error its log ends with.
onerror:
    import sys
    from accelbench.cluster.node_report import failed_job_summaries, slurm_submission_hints

    logs = [log] if isinstance(log, str) else list(log or [])  # Snakemake's run log(s) of this invocation
    text = "".join(Path(p).read_text() for p in logs if Path(p).exists())
    for hint in slurm_submission_hints(text) + failed_job_summaries(text):
        print(hint, file=sys.stderr)
