"""Toy experiment (not a study result): the time of one float32 matmul ``n x n @ n x n`` per configured size.

The worked example of CONTRIBUTING.md, "Add an experiment": this folder is everything an experiment needs, and
``tests/workflow/test_toy_experiment_dag.py`` copies it (from ``tests/toy_experiment/``, with its claims file
``resources/reference/toy_claims.csv``) into a copy of the repository and runs the whole DAG there: measurement,
validation, table, claims.

Files: :mod:`.job` (``Settings``, ``run``: the measurement on the harness), :mod:`.rules` (torch-free: result paths
and a job's spec), ``rules.smk`` (the measurement and aggregation rules), :mod:`.tables` (torch-free: the table and
the claim check), ``toy_matmul.schema.json`` (what an ``ok`` result must hold), ``toy_matmul.config.schema.yaml``
(the config block ``toy_matmul``, every setting with its default).
"""

from accelbench.core.experiment import Experiment

ENTRIES = (
    Experiment(
        name="toy_matmul",
        study="toy",
        package="toy",
        command="toy-matmul",
        variants=("n{size}",),
        order=80,
        aggregate="toy",
        schema="toy_matmul.schema.json",
        claims="toy_claims.csv",
        targets=("toy/table.csv",),
    ),
)
