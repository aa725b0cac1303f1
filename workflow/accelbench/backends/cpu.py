"""The host CPU: no device to synchronize, lock per device, probe or request; gloo between ranks."""

from __future__ import annotations

from pathlib import Path

from .base import Backend


class CpuBackend(Backend):
    name = "cpu"
    accelerator = False
    collective = "gloo"
    visible_devices_var = None
    job_env_vars = ()
    vendor_tool = None
    container_image = None  # runs in the cuda image (config/systems/cpu.yaml), whose flags that image's backend gives
    slurm_gpu_resource = False
    uses_device_events = False
    rank_env_defaults: dict[str, str] = {}
    software_fields = ()
    probe_rank = 1000  # the fallback: always present
    lazy_mode = False
    optimum_habana = False
    fp8_inc = False
    nsight_compute = False
    torchao_int4_tinygemm = False
    fused_adamw = False
    non_blocking_copies = False
    device_weight_init = False
    ddp_device_ids = False
    float64 = True
    sync_debug_mode = False

    def prepare(self) -> None:
        pass

    def torch_device(self, index: int = 0):
        import torch

        return torch.device("cpu")

    def device_index(self, local_rank: int) -> int:
        return 0

    def set_device(self, local_rank: int) -> None:
        pass

    def synchronize(self, index: int = 0) -> None:
        pass

    def mark_step(self) -> None:
        pass

    def reset_peak_memory(self, index: int = 0) -> None:
        pass

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        return None

    def empty_cache(self, index: int = 0) -> None:
        pass

    def profiler_activities(self) -> list:
        import torch

        return [torch.profiler.ProfilerActivity.CPU]

    def energy_counter(self, index: int = 0):
        from ..energy import RaplCounter

        return RaplCounter()  # RAPL package zones under /sys/class/powercap (the whole host's CPUs)

    def flash_attention(self, optimum_habana_version: str | None = None) -> str | None:
        return "sdpa"

    def prepare_collective(self) -> None:
        pass

    def probe(self) -> dict | None:
        return {"backend": self.name, "count": 1, "names": []}

    def absence_note(self) -> str | None:
        return None

    def provenance(self, info: dict) -> dict:
        return self.host_as_device(info)

    def apptainer_env(self, workdir: str | Path, environ: dict) -> dict[str, str]:
        return {}


BACKEND = CpuBackend
