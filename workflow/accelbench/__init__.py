"""accelbench: reproducibility artifact for two performance studies of generative AI on accelerators.

Study A (arXiv 2606.19365): Med-DDPM 3D diffusion U-Net profiled across GPU generations.
Study B (arXiv 2607.05400): NVIDIA GPUs vs. Intel Gaudi for quantization, LoRA fine-tuning and SR3.

The Snakemake workflow (``Snakefile`` at the repository root) calls the entry points in
:mod:`accelbench.cli`; every experiment lives in :mod:`accelbench.experiments`, measurement in
:mod:`accelbench.measure`, provenance in :mod:`accelbench.core.provenance`, result files in
:mod:`accelbench.core.results` and tables/figures in :mod:`accelbench.aggregate`.
"""

__version__ = "0.1.0"
