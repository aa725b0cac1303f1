"""The measurement core: step timing and kernel classes, FLOPs and MFU, device energy, Nsight Compute counters, host load."""
