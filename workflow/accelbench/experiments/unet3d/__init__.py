"""Study A (arXiv 2606.19365): Med-DDPM's 3D diffusion U-Net, one training step profiled per configuration (TF32,
bf16, channels_last_3d, torch.compile, CUDA graphs). Its own data (:mod:`.data`, the MRI pair) and network
(:mod:`.network` builds Med-DDPM's U-Net, :mod:`.med_ddpm_unet`, or the MONAI stand-in) live here; the top kernels'
hardware counters (Nsight Compute) are the next experiment, :mod:`accelbench.experiments.unet3d_ncu`, which imports
this folder's configurations and workload."""

from accelbench.core.experiment import Experiment

ENTRIES = (
    Experiment(
        name="unet3d_profile",
        study="A",
        package="unet3d",
        command="unet3d-profile",
        variants=("{model}/{configuration}",),
        order=10,
        aggregate="study_a",
        schema="unet3d_profile.schema.json",
        reference="study_a_claims.csv",
        claims="study_a_claims.csv",
        reads=("unet3d_ncu",),
        side_files=("kernels.csv", "trace.json.gz"),
        inputs=("image", "mask"),
        targets=("study_a/table.csv", "study_a/claims_vs_measured.csv"),
        rule_seconds=(("mri_prepare", 7.0), ("study_a_aggregate", 6.0)),
        cluster_requests=(("unet3d_profile", 8, 64000),),
    ),
)
