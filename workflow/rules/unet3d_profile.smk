# Study A: one job per (system, model, configuration); the result is write-protected once finished.
rule unet3d_profile:
    input:
        unpack(mri_inputs),
    output:
        protected(update(f"{RESULTS}/{{system}}/unet3d_profile/{{model}}/{{configuration}}/result.json")),
    log:
        f"logs/{{system}}/unet3d_profile/{{model}}/{{configuration}}.log",
    params:
        spec=unet3d_profile_spec,
    threads: all_cores  # one measurement at a time: the job owns the machine
    resources:
        **device_resources(),
        runtime=60,
    container:
        CONTAINER
    shell:
        "accelbench unet3d-profile --spec {params.spec:q} --image {input.image:q} --mask {input.mask:q}"
        " --out {output:q} --threads {threads} 3>&2 > {log:q} 2>&1"


# Study A at the hardware-counter level: ncu replays the top kernels of the profiled step (unsupported without ncu).
rule unet3d_ncu:
    input:
        unpack(mri_inputs),
        profile=f"{RESULTS}/{{system}}/unet3d_profile/{{model}}/{{configuration}}/result.json",
    output:
        protected(update(f"{RESULTS}/{{system}}/unet3d_ncu/{{model}}/{{configuration}}/result.json")),
    log:
        f"logs/{{system}}/unet3d_ncu/{{model}}/{{configuration}}.log",
    params:
        spec=unet3d_ncu_spec,
    threads: all_cores  # counters need the GPU to itself
    resources:
        **device_resources(),
        runtime=120,
    container:
        CONTAINER
    shell:
        "accelbench unet3d-ncu --spec {params.spec:q} --image {input.image:q} --mask {input.mask:q}"
        " --profile-result {input.profile:q} --out {output:q} 3>&2 > {log:q} 2>&1"
