"""Diagnostic (not a study result): an all-reduce bus-bandwidth sweep over N ranks, launched like SR3 and LoRA."""

from accelbench.core.experiment import Experiment

ENTRIES = (
    Experiment(
        name="net_smoke",
        study="diagnostic",
        package="net_smoke",
        command="net-smoke",
        variants=("devices_{devices}",),
        order=90,
        result="allreduce.json",
        side_files=("allreduce.csv",),
        ranks=True,
        cluster_requests=(("net_smoke", 8, 16000),),
    ),
)
