"""Study A (arXiv 2606.19365): Med-DDPM's 3D diffusion U-Net, one training step profiled per configuration (TF32,
bf16, channels_last_3d, torch.compile, CUDA graphs), and its top kernels' hardware counters (Nsight Compute)."""

from accelbench.core.experiment import Experiment

ENTRIES = (
    Experiment(
        "unet3d_profile",
        "A",
        "unet3d",
        "unet3d-profile",
        ("{model}/{configuration}",),
        order=10,
        job="profile",
        rules="rules:profile_",
        tables="tables",
        aggregate="study_a",
        schema="unet3d_profile.schema.json",
        reference="study_a_claims.csv",
        claims="study_a_claims.csv",
        reads=("unet3d_ncu",),
        side_files=("kernels.csv", "trace.json.gz"),
        inputs=("image", "mask"),
        targets=("study_a/table.csv", "study_a/claims_vs_measured.csv"),
    ),
    Experiment(
        "unet3d_ncu",
        "A",
        "unet3d",
        "unet3d-ncu",
        ("{model}/{configuration}",),
        order=11,
        job="ncu",
        rules="rules:ncu_",
        tables="tables_ncu",
        aggregate="study_a_ncu",
        schema="unet3d_ncu.schema.json",
        reference="study_a_claims.csv",
        claims="study_a_claims.csv",
        reads=("unet3d_profile",),
        inputs=("image", "mask", "profile_result"),
        targets=("study_a/counters.csv",),
    ),
)
