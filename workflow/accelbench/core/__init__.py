"""The job core: the registry of experiments, the job harness, the rank launcher, locks, result files, provenance
and config."""
