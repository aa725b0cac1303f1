# Study A: one job per (system, model, configuration); the result is write-protected once finished.
rule unet3d_profile:
    input:
        unpack(mri_inputs),
    output:
        protected(f"{RESULTS}/{{system}}/unet3d_profile/{{model}}/{{configuration}}/result.json"),
    log:
        f"logs/{{system}}/unet3d_profile/{{model}}/{{configuration}}.log",
    params:
        spec=unet3d_spec,
    threads: lambda wildcards: workflow.cores  # one measurement at a time: the job owns the machine
    resources:
        **device_resources(),
        runtime=60,
    container:
        CONTAINER
    shell:
        "accelbench unet3d-profile --spec {params.spec:q} --image {input.image} --mask {input.mask}"
        " --out {output} --threads {threads} > {log} 2>&1"
