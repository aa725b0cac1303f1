"""Clusters: what a batch job sees, multi-node plans for Slurm, and the container runtime."""
