rule mri_prepare:
    output:
        image="resources/mri/{model}_{scale}/image.nii.gz",
        mask="resources/mri/{model}_{scale}/mask.nii.gz",
    log:
        "logs/mri_prepare/{model}_{scale}.log",
    params:
        spec=mri_spec,
    container:
        CONTAINER
    shell:
        "accelbench mri-prepare --spec {params.spec:q} --image {output.image:q} --mask {output.mask:q} > {log:q} 2>&1"
