"""Study A (arXiv 2606.19365) at the hardware-counter level: Nsight Compute counters of the top kernels of one
training step per configuration of :mod:`accelbench.experiments.unet3d` (its configurations, settings and workload,
imported from there; each job reads the kernel table of that configuration's profile result)."""

from accelbench.core.experiment import Experiment

ENTRIES = (
    Experiment(
        name="unet3d_ncu",
        study="A",
        package="unet3d_ncu",
        command="unet3d-ncu",
        variants=("{model}/{configuration}",),
        order=11,
        aggregate="study_a_ncu",
        schema="unet3d_ncu.schema.json",
        reference="study_a_claims.csv",
        claims="study_a_claims.csv",
        reads=("unet3d_profile",),
        inputs=("image", "mask", "profile_result"),
        targets=("study_a/counters.csv",),
        rule_seconds=(("study_a_ncu_aggregate", 4.0),),
        cluster_requests=(("unet3d_ncu", 8, 64000),),
    ),
)
