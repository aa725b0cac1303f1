"""NVIDIA GPUs through torch.cuda: NCCL between ranks, CUDA events for timing, ``--nv`` in apptainer."""

from __future__ import annotations

from pathlib import Path

from accelbench.backends.base import Backend


def _power_limit_w(text: str | None) -> float | None:
    """The board power limit (W per device) from ``nvidia-smi --query-gpu=enforced.power.limit`` output (one line
    per GPU, watts): the largest where GPUs differ (no device may average above it), None when unreadable or not
    reported (``[N/A]``). Results record it as ``environment.hardware.power_limit_w`` so that
    :func:`accelbench.core.validate.bound_problems` can refuse an average power above it."""
    values = []
    for line in (text or "").splitlines():
        try:
            values.append(float(line.strip()))
        except ValueError:
            continue
    return max(values) if values and max(values) > 0 else None


class CudaBackend(Backend):
    name = "cuda"
    accelerator = True
    collective = "nccl"
    visible_devices_var = "CUDA_VISIBLE_DEVICES"
    job_env_vars = ("CUDA_VISIBLE_DEVICES",)
    vendor_tool = ("nvidia-smi", "-L")  # one `GPU i: name (UUID: ...)` line per device
    container_image = "cuda"
    slurm_gpu_resource = True
    uses_device_events = True
    # NCCL_DEBUG=INFO: the transports NCCL picks appear in the log (accelbench.cluster.multinode.parse_nccl_transports)
    rank_env_defaults = {"NCCL_DEBUG": "INFO"}
    software_fields = (("cuda", "CUDA"), ("cudnn", "cuDNN"))
    probe_rank = 100
    lazy_mode = False
    optimum_habana = False
    fp8_inc = False
    nsight_compute = True
    torchao_int4_tinygemm = True
    fused_adamw = True
    non_blocking_copies = True
    device_weight_init = True
    ddp_device_ids = True
    float64 = True
    sync_debug_mode = True

    def prepare(self) -> None:
        pass

    def torch_device(self, index: int = 0):
        import torch

        return torch.device(self.name, index)

    def device_index(self, local_rank: int) -> int:
        return local_rank

    def set_device(self, local_rank: int) -> None:
        import torch

        torch.cuda.set_device(local_rank)

    def synchronize(self, index: int = 0) -> None:
        import torch

        torch.cuda.synchronize(index)

    def mark_step(self) -> None:
        pass

    def reset_peak_memory(self, index: int = 0) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(index)

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        import torch

        return int(torch.cuda.max_memory_allocated(index))

    def empty_cache(self, index: int = 0) -> None:
        import torch

        torch.cuda.empty_cache()

    def profiler_activities(self) -> list:
        import torch

        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def free_memory_bytes(self, index: int = 0) -> int | None:
        import torch

        return int(torch.cuda.mem_get_info(index)[0])

    def energy_counter(self, index: int = 0):
        from accelbench.measure.energy import NvmlCounter

        return NvmlCounter(index)  # NVML: nvmlDeviceGetTotalEnergyConsumption (mJ; Volta and later)

    def visible_device_count(self, configured: int) -> int:
        import torch

        return min(configured, torch.cuda.device_count())

    def flash_attention(self, optimum_habana_version: str | None = None) -> str | None:
        import importlib.util

        return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"

    def prepare_collective(self) -> None:
        pass

    def probe(self) -> dict | None:
        import torch

        if not torch.cuda.is_available():
            return None
        n = torch.cuda.device_count()
        return {"backend": self.name, "count": n, "names": [torch.cuda.get_device_name(i) for i in range(n)]}

    def absence_note(self) -> str | None:
        import torch

        return "CUDA not compiled in" if torch.version.cuda is None else f"CUDA {torch.version.cuda} but no visible GPU"

    def provenance(self, info: dict) -> dict:
        import torch

        from accelbench.backends.probes import run_quiet as _run

        if not torch.cuda.is_available():
            return self.host_as_device(info)
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        out = {
            "device_name": props[0].name,
            "device_count": len(props),
            "device_memory_gib": round(props[0].total_memory / 2**30, 2),
            "compute_capability": f"{props[0].major}.{props[0].minor}",
            "multiprocessors": props[0].multi_processor_count,
            "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        }
        if out["driver"]:
            out["driver"] = out["driver"].splitlines()[0]
        out["power_limit_w"] = _power_limit_w(
            _run(["nvidia-smi", "--query-gpu=enforced.power.limit", "--format=csv,noheader,nounits"])
        )
        return out

    def apptainer_env(self, workdir: str | Path, environ: dict) -> dict[str, str]:
        return {"APPTAINER_NV": "1", "SINGULARITY_NV": "1"}  # --nv: the host driver


BACKEND = CudaBackend
