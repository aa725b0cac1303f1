"""Intel Gaudi through ``habana_frameworks``: HCCL between ranks, lazy mode, ``/dev/accel`` in apptainer; HLML (through
``pyhlml``) for the card's energy counter (:class:`HlmlCounter`).

``habana_frameworks`` is imported only inside methods, never when this module is imported (CI has no Gaudi stack).
Lazy mode is the default (``PT_HPU_LAZY_MODE=1``), so :meth:`HpuBackend.mark_step` must be called where a graph
should be cut (after backward, after the optimizer step).
"""

from __future__ import annotations

import os
from pathlib import Path

from accelbench.backends.base import Backend
from accelbench.backends.energy_counter import Counter, CounterUnavailable


def habana_available() -> bool:
    """True if Intel Gaudi's PyTorch bridge is installed (never imports it)."""
    return HpuBackend().bridge_installed()


class HlmlCounter(Counter):
    """Intel Gaudi: ``hlmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded) through ``pyhlml``
    (habana-pyhlml, ``libhlml.so``). The rank's card: the ``LOCAL_RANK``-th module of ``HABANA_VISIBLE_MODULES``
    (matched with ``hlmlDeviceGetModuleID``), else card ``LOCAL_RANK``. Update period: not documented; taken as
    the 100 ms of NVML (hl-smi samples power every 5 s by default, which this does not use).

    Raises:
        CounterUnavailable: pyhlml missing, HLML not initialised, or no card for ``local_rank``.
    """

    source, api, resolution_j, update_period_s = "hlml", "hlmlDeviceGetTotalEnergyConsumption", 1e-3, 0.1
    covers = "Gaudi card (OAM module)"

    def __init__(self, local_rank: int = 0, environ: dict | None = None):
        env = os.environ if environ is None else environ
        try:
            import pyhlml
        except ImportError:
            raise CounterUnavailable("habana-pyhlml (pyhlml) is not installed") from None
        try:
            pyhlml.hlmlInit()
            count = pyhlml.hlmlDeviceGetCount()
            handles = [pyhlml.hlmlDeviceGetHandleByIndex(i) for i in range(count)]
            modules = [m.strip() for m in env.get("HABANA_VISIBLE_MODULES", "").split(",") if m.strip()]
            if modules and local_rank < len(modules):
                found = [h for h in handles if str(pyhlml.hlmlDeviceGetModuleID(h)) == modules[local_rank]]
                if len(found) != 1:
                    raise CounterUnavailable(f"no Gaudi card with module id {modules[local_rank]} among {count}")
                self.handle, self.identity = found[0], f"gaudi-module-{modules[local_rank]}"
            elif local_rank < count:
                self.handle, self.identity = handles[local_rank], f"gaudi-index-{local_rank}"
            else:
                raise CounterUnavailable(f"HLML sees {count} card(s), local rank {local_rank} has none")
            self._read = pyhlml.hlmlDeviceGetTotalEnergyConsumption
            self._read(self.handle)
        except CounterUnavailable:
            raise
        except Exception as exc:
            raise CounterUnavailable(f"HLML energy counter not readable: {type(exc).__name__}: {exc}") from None

    def read_j(self) -> float:
        return self._read(self.handle) * 1e-3


class HpuBackend(Backend):
    name = "hpu"
    collective = "hccl"
    visible_devices_var = "HABANA_VISIBLE_MODULES"
    job_env_vars = ("HABANA_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES")
    vendor_tool = ("hl-smi", "-Q", "index,name,bus_id", "-f", "csv,noheader")  # one CSV line per card
    container_image = "habana"
    slurm_gpu_resource = False  # Gaudi sites request cards through their GRES (slurm/site.yaml multinode.gres)
    software_fields = (("synapseai", "SynapseAI"),)
    probe_rank = 10
    bridge = "habana_frameworks"
    lazy_mode = True
    optimum_habana = True
    fp8_inc = True  # with habana_frameworks installed (the experiment checks that too)
    float64 = False  # no float64 on Gaudi: schedulers compute in float32

    def prepare(self) -> None:
        os.environ.setdefault("PT_HPU_LAZY_MODE", "1")
        import habana_frameworks.torch.core  # noqa: F401  (registers the hpu device)

    def device_index(self, local_rank: int) -> int:
        return 0

    def set_device(self, local_rank: int) -> None:
        pass  # each rank sees its own card (HABANA_VISIBLE_MODULES); nothing to select

    def synchronize(self, index: int = 0) -> None:
        import torch

        torch.hpu.synchronize()

    def mark_step(self) -> None:
        import habana_frameworks.torch.core as htcore

        htcore.mark_step()

    def reset_peak_memory(self, index: int = 0) -> None:
        import torch

        torch.hpu.reset_peak_memory_stats()

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        import torch

        return int(torch.hpu.max_memory_allocated())

    def empty_cache(self, index: int = 0) -> None:
        pass

    def energy_counter(self, index: int = 0):
        return HlmlCounter(int(os.environ.get("LOCAL_RANK", 0)))  # pyhlml: hlmlDeviceGetTotalEnergyConsumption (mJ)

    def flash_attention(self, optimum_habana_version: str | None = None) -> str | None:
        from packaging.version import Version

        if optimum_habana_version and Version(optimum_habana_version) >= Version("1.20"):
            return "gaudi_fused_sdpa"
        return (
            None  # optimum-habana <= 1.19: generation-config flags (use_flash_attention, flash_attention_causal_mask)
        )

    def prepare_collective(self) -> None:
        import habana_frameworks.torch.distributed.hccl  # noqa: F401  (registers hccl)

    def probe(self) -> dict | None:
        if not habana_available():
            return None
        import habana_frameworks.torch.hpu as hthpu  # noqa: F401  (registers the hpu device)

        if not hthpu.is_available():
            return None
        n = hthpu.device_count()
        return {"backend": self.name, "count": n, "names": [hthpu.get_device_name() for _ in range(n)]}

    def absence_note(self) -> str | None:
        return self.bridge_status()

    def provenance(self, info: dict) -> dict:
        import habana_frameworks.torch.hpu as hthpu

        from accelbench.backends.probes import library_versions
        from accelbench.backends.probes import run_quiet as _run

        return {
            "device_name": hthpu.get_device_name(),
            "device_count": hthpu.device_count(),
            "synapseai": library_versions(("habana-torch-plugin",))["habana-torch-plugin"],
            "driver": _run(["hl-smi", "--query-aip=driver_version", "--format=csv,noheader"]),
        }

    def apptainer_env(self, workdir: str | Path, environ: dict) -> dict[str, str]:
        """``--bind /dev/accel`` (added to any APPTAINER_BIND already set), ``HABANA_VISIBLE_DEVICES`` (the job's
        value, ``all`` if unset) and ``HABANA_LOGS=<workdir>/logs/habana`` (created here; the image's default is
        read-only) passed into the container."""
        env = {"APPTAINER_BIND": "/dev/accel", "SINGULARITY_BIND": "/dev/accel"}
        for key in ("APPTAINER_BIND", "SINGULARITY_BIND"):
            if environ.get(key):
                env[key] = f"{environ[key]},{env[key]}"
        logs = Path(workdir).resolve() / "logs" / "habana"
        logs.mkdir(parents=True, exist_ok=True)
        visible = environ.get("HABANA_VISIBLE_DEVICES", "all")
        for prefix in ("APPTAINERENV_", "SINGULARITYENV_"):
            env[prefix + "HABANA_VISIBLE_DEVICES"] = visible
            env[prefix + "HABANA_LOGS"] = str(logs)
        return env


BACKEND = HpuBackend
