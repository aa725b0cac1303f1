"""Study B (arXiv 2607.05400): SR3 super-resolution diffusion training, strong scaling over 1..N devices (DDP)."""

from accelbench.core.experiment import Experiment

ENTRIES = (
    Experiment(
        name="sr3_scaling",
        study="B",
        package="sr3",
        command="sr3-train",
        variants=("{configuration}/devices_{devices}",),
        order=20,
        aggregate="study_b_sr3",
        schema="sr3_scaling.schema.json",
        reference="study_b_sr3_scaling.csv",
        claims="study_b_claims.csv",
        side_files=("samples.npz",),
        ranks=True,
        inputs=("data",),
        targets=("study_b_sr3/scaling.csv", "study_b_sr3/fig_scaling.png"),
        rule_seconds=(("sr3_prepare", 2.0), ("study_b_sr3_aggregate", 6.0)),
        cluster_requests=(("sr3_train", 16, 128000),),
    ),
)
