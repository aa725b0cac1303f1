"""The measurement core: step timing (:mod:`~accelbench.measure.timing`), kernel traces and kernel classes
(:mod:`~accelbench.measure.kernels`, :mod:`~accelbench.measure.kernel_classes`), FLOPs and MFU, device energy, Nsight
Compute counters, host load."""
