"""NVIDIA GPUs through torch.cuda: NCCL between ranks, CUDA events for timing, ``--nv`` in apptainer; NVML (through
``nvidia-ml-py``, import ``pynvml``, imported only when used) for the board energy counter (:class:`NvmlCounter`), the
SM clock and its clock-event reasons during timed steps (:class:`NvmlClockReader`) and the per-GPU host-load record
(:meth:`CudaBackend.device_load`)."""

from __future__ import annotations

import os
from pathlib import Path

from accelbench.backends.base import Backend
from accelbench.backends.clock_reader import ClockReader, ClockSample
from accelbench.backends.energy_counter import Counter, CounterUnavailable

# Device files through which torch.cuda reaches a GPU: NVIDIA's driver (/dev/nvidiactl, /dev/nvidia<N>), ROCm's
# (/dev/kfd: a ROCm torch answers torch.cuda) and WSL2's (/dev/dxg). Where none exists no GPU can be visible, and the
# probe answers without importing torch (about 2 s of every Snakemake plan on 2 cores: system: auto probes).
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def no_gpu_device_file(dev: Path = Path("/dev")) -> bool:
    """True where ``dev`` holds none of :data:`GPU_DEVICE_FILES` nor an ``nvidia<N>`` file: torch.cuda could not
    see a GPU here, so no need to import torch to ask."""
    names = {Path(f).name for f in GPU_DEVICE_FILES}
    try:
        return not any(p.name in names or p.name.startswith("nvidia") for p in dev.iterdir())
    except OSError:  # no readable /dev: ask torch
        return False


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


def visible_gpus(count: int, uuids: list[str], environ: dict | None = None) -> list[int]:
    """NVML indices of the GPUs a job may use: all ``count`` of them, or those ``CUDA_VISIBLE_DEVICES`` names.

    Args:
        count: GPUs NVML sees on the host.
        uuids: NVML's UUID of each (``GPU-...``), index order.
        environ: the job's environment (default ``os.environ``).

    ``CUDA_VISIBLE_DEVICES`` entries are indices or (prefixes of) UUIDs, as CUDA accepts them; CUDA stops at the
    first invalid entry, and so does this. Indices follow NVML's (PCI bus) order, which is CUDA's order with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and on hosts of one GPU model. Two jobs pinned to different GPUs of one host
    therefore do not count as each other's "other processes".
    """
    env = os.environ if environ is None else environ
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(count))
    out: list[int] = []
    for item in (x.strip() for x in spec.split(",")):
        if item.isdigit() and int(item) < count:
            idx = int(item)
        else:
            match = [i for i, u in enumerate(uuids) if item and u.startswith(item)]
            if len(match) != 1:
                break
            idx = match[0]
        if idx in out:
            break
        out.append(idx)
    return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_handle(torch_index: int, what: str):
    """``(pynvml, handle, uuid)`` of the GPU that torch calls ``torch_index`` (:func:`visible_gpus`: NVML numbers
    every GPU of the host, torch only the visible ones).

    Raises:
        CounterUnavailable: pynvml missing, no driver, or ``torch_index`` not visible; the message names ``what``
            (``energy counter``, ``clocks``) where NVML failed.
    """
    try:
        import pynvml
    except ImportError:
        raise CounterUnavailable("nvidia-ml-py (pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        uuids = [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        visible = visible_gpus(count, uuids)
        if torch_index >= len(visible):
            raise CounterUnavailable(
                f"NVML sees {count} GPU(s); torch device {torch_index} is not among the visible ones {visible}"
            )
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(visible[torch_index]), uuids[visible[torch_index]]
    except CounterUnavailable:
        raise
    except Exception as exc:  # no driver, NVML_ERROR_*
        raise CounterUnavailable(f"NVML {what} not readable: {type(exc).__name__}: {exc}") from None


class NvmlCounter(Counter):
    """NVIDIA: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta and later) of the GPU that
    torch calls ``torch_index`` (mapped through ``CUDA_VISIBLE_DEVICES`` by :func:`visible_gpus`). Needs
    ``nvidia-ml-py`` (import ``pynvml``). The counter updates about every 100 ms (NVML documentation; Zeus uses the
    same counter).

    Raises:
        CounterUnavailable: pynvml missing, no driver, a pre-Volta GPU, or ``torch_index`` not visible.
    """

    source, api, resolution_j, update_period_s = "nvml", "nvmlDeviceGetTotalEnergyConsumption", 1e-3, 0.1
    covers = "GPU board (GPU, HBM, board power delivery)"

    def __init__(self, torch_index: int = 0):
        pynvml, self.handle, self.identity = nvml_handle(torch_index, "energy counter")
        try:
            self._read = pynvml.nvmlDeviceGetTotalEnergyConsumption
            self._read(self.handle)
        except Exception as exc:  # NVML_ERROR_NOT_SUPPORTED (pre-Volta), ...
            raise CounterUnavailable(f"NVML energy counter not readable: {type(exc).__name__}: {exc}") from None

    def read_j(self) -> float:
        return self._read(self.handle) * 1e-3


# NVML's clock-event ("throttle") reasons of nvmlDeviceGetCurrentClocksEventReasons: (name, pynvml constants newest
# first, the bit of nvml.h where this pynvml has neither constant).
CLOCK_EVENT_REASONS = (
    ("gpu_idle", ("nvmlClocksEventReasonGpuIdle", "nvmlClocksThrottleReasonGpuIdle"), 0x1),
    (
        "applications_clocks_setting",
        ("nvmlClocksEventReasonApplicationsClocksSetting", "nvmlClocksThrottleReasonApplicationsClocksSetting"),
        0x2,
    ),
    ("sw_power_cap", ("nvmlClocksEventReasonSwPowerCap", "nvmlClocksThrottleReasonSwPowerCap"), 0x4),
    ("hw_slowdown", ("nvmlClocksEventReasonHwSlowdown", "nvmlClocksThrottleReasonHwSlowdown"), 0x8),
    ("sync_boost", ("nvmlClocksEventReasonSyncBoost", "nvmlClocksThrottleReasonSyncBoost"), 0x10),
    (
        "sw_thermal_slowdown",
        ("nvmlClocksEventReasonSwThermalSlowdown", "nvmlClocksThrottleReasonSwThermalSlowdown"),
        0x20,
    ),
    (
        "hw_thermal_slowdown",
        ("nvmlClocksEventReasonHwThermalSlowdown", "nvmlClocksThrottleReasonHwThermalSlowdown"),
        0x40,
    ),
    (
        "hw_power_brake_slowdown",
        ("nvmlClocksEventReasonHwPowerBrakeSlowdown", "nvmlClocksThrottleReasonHwPowerBrakeSlowdown"),
        0x80,
    ),
    (
        "display_clock_setting",
        ("nvmlClocksEventReasonDisplayClockSetting", "nvmlClocksThrottleReasonDisplayClockSetting"),
        0x100,
    ),
)


def decode_clock_event_reasons(mask: int, nvml=None) -> tuple[str, ...]:
    """The names of the reasons set in an NVML clock-event bit mask (:data:`CLOCK_EVENT_REASONS`; the bits of
    ``nvml``, the pynvml module, where it has the constants), bits no name covers as one hex remainder (``0x200``).
    ``(0x4 | 0x1000)`` -> ``("sw_power_cap", "0x1000")``."""
    names, known = [], 0
    for name, constants, default in CLOCK_EVENT_REASONS:
        bit = next((getattr(nvml, c) for c in constants if hasattr(nvml, c)), default)
        known |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~known
    return (*names, f"{rest:#x}") if rest else tuple(names)


class NvmlClockReader(ClockReader):
    """NVIDIA: the SM clock (``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)``), its maximum (``nvmlDeviceGetMaxClockInfo``),
    the GPU temperature (``nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)``, left None where it fails) and the
    clock-event reasons (``nvmlDeviceGetCurrentClocksEventReasons``; ``...ClocksThrottleReasons`` of an older pynvml)
    of the GPU that torch calls ``torch_index`` (:func:`visible_gpus`). NVML answers from the driver without waiting
    for the GPU's queued work. Never raises: pynvml missing, no driver, or ``torch_index`` not visible leave
    :attr:`reason` set and :meth:`read` None."""

    source = "nvml"
    api = (
        "nvmlDeviceGetClockInfo(NVML_CLOCK_SM), nvmlDeviceGetMaxClockInfo, nvmlDeviceGetCurrentClocksEventReasons, "
        "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"
    )

    def __init__(self, torch_index: int = 0):
        self.nvml = self.handle = None
        try:
            pynvml, self.handle, self.identity = nvml_handle(torch_index, "clocks")
        except CounterUnavailable as exc:
            self.reason = str(exc)
            return
        self._reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self.nvml = pynvml

    def read(self) -> ClockSample | None:
        if self.nvml is None:
            return None
        nvml, h = self.nvml, self.handle
        try:
            clock = nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)
            max_clock = nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM)
            reasons = decode_clock_event_reasons(int(self._reasons(h)), nvml) if self._reasons else ()
        except Exception as exc:
            self.reason = f"NVML clocks not readable: {type(exc).__name__}: {exc}"
            return None
        try:
            temp = nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)
        except Exception:  # not reported on this board: the clocks still are
            temp = None
        return ClockSample(clock, max_clock, temp, reasons)


def nvml_device_load(ours: set[int]) -> list[dict] | None:
    """Per GPU the job may use (:func:`visible_gpus`): ``index``, ``other_processes`` (pids on it outside ``ours``,
    the job's process tree), ``sm_clock_mhz``/``sm_clock_max_mhz`` and ``utilization_pct``; None without NVML or
    when NVML fails."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU
        return None
    try:
        out = []
        count = pynvml.nvmlDeviceGetCount()
        uuids = [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        for i in visible_gpus(count, uuids):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            procs = []
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    procs += [p.pid for p in getattr(pynvml, getter)(h)]
                except Exception:
                    pass
            clock = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            max_clock = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
            out.append(
                {
                    "index": i,
                    "other_processes": sorted(set(procs) - ours),
                    "sm_clock_mhz": clock,
                    "sm_clock_max_mhz": max_clock,
                    "utilization_pct": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                }
            )
        return out
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


class CudaBackend(Backend):
    name = "cuda"
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
    nsight_compute = True
    torchao_int4_tinygemm = True
    fused_adamw = True
    non_blocking_copies = True
    device_weight_init = True
    ddp_device_ids = True
    sync_debug_mode = True

    def free_memory_bytes(self, index: int = 0) -> int | None:
        import torch

        return int(torch.cuda.mem_get_info(index)[0])

    def energy_counter(self, index: int = 0):
        return NvmlCounter(index)  # NVML: nvmlDeviceGetTotalEnergyConsumption (mJ; Volta and later)

    def clock_reader(self, index: int = 0):
        return NvmlClockReader(index)  # NVML: SM clock, max, temperature, clock-event reasons

    def device_load(self, ours: set[int]) -> list[dict] | None:
        return nvml_device_load(ours)

    def visible_device_count(self, configured: int) -> int:
        import torch

        return min(configured, torch.cuda.device_count())

    def flash_attention(self, optimum_habana_version: str | None = None) -> str | None:
        import importlib.util

        return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"

    def probe(self) -> dict | None:
        if no_gpu_device_file():
            return None
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
