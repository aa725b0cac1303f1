"""The one protocol every backend implements: everything in accelbench that differs per backend (a vendor's way of
driving a torch device type), with a default for everything but its name and how it finds and records its devices.

A backend is stateless: :func:`accelbench.backends.get` hands out one instance per name, and every device op takes
the device index it acts on. Modules outside this package ask the backend object (``get(system.backend).collective``,
``.accelerator``, ``.uses_device_events``...) instead of comparing backend names.
"""

from __future__ import annotations

import abc
import contextlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar


class Backend(abc.ABC):
    """One torch device type (cpu, cuda, hpu, ...) as a vendor drives it: device ops, distributed setup, probing,
    provenance, containers.

    A new backend states only what differs from its nearest sibling: a subclass of that sibling's class (a ROCm
    backend: ``class RocmBackend(CudaBackend)``, a CUDA-device backend under another name) or of this class, whose
    attributes all have defaults (below) and whose device ops go through ``torch.get_device_module(device_type)``.
    Only :attr:`name` (on the class itself) and :meth:`probe` and :meth:`provenance` (how it finds and records its
    devices) have none.

    Class attributes (:data:`ATTRIBUTES` lists them; the default in brackets):
        name: the backend's own name: the ``backend`` value of system files and results (``cuda``, ``rocm``); no
            default, and a subclass of another backend sets its own.
        device_type: the torch device type its tensors live on, which autocast and ``torch.device`` take (``cuda``
            for a ROCm backend too) [its :attr:`name`, unless inherited from a backend class].
        accelerator: False for the host CPU (no device to lock, probe, request from Slurm or report a count of)
            [True].
        collective: torch.distributed backend of its ranks (``gloo``, ``nccl``, ``hccl``) [``gloo``].
        visible_devices_var: the variable that restricts which devices a job sees [None: no such variable].
        job_env_vars: runtime variables that decide which devices a job gets (shown by the cluster device report)
            [none].
        vendor_tool: argv listing the devices, one line each, run by the cluster device report [None: no tool].
        container_image: the ``image`` of system files built for this backend (``containers/<image>/``) [None: it
            runs in another backend's image (cpu runs in the cuda image) and needs no flags of its own].
        slurm_gpu_resource: its devices are requested through Snakemake's ``gpu`` resource (Slurm ``--gpus``)
            [False].
        uses_device_events: timed with device events (CUDA events) rather than synchronize + perf_counter [False].
        rank_env_defaults: environment defaults of its ranks (the user's setting wins) [none].
        software_fields: ``(hardware key, label)`` of the versions :meth:`provenance` records, for software labels
            [none].
        probe_rank: the order :func:`accelbench.backends.detect` probes backends in (lowest first; cpu last) [500].
        bridge: the Python package that adds this device type to torch (``habana_frameworks``) [None: torch alone].

    Vendor capabilities (what the experiments ask instead of a backend's name; all False by default but float64):
        lazy_mode: runs in Gaudi's lazy mode, whose ``PT_HPU_LAZY_MODE`` must be set before the bridge is imported.
        optimum_habana: transformers training goes through optimum-habana (``GaudiTrainer``, ``GaudiConfig``,
            ``adapt_transformers_to_gaudi``; its models build their causal mask from the batch's attention mask).
        fp8_inc: Intel Neural Compressor FP8 quantization runs on it (Gaudi).
        nsight_compute: Nsight Compute (``ncu``) can profile its kernels (NVIDIA).
        torchao_int4_tinygemm: torchao's int4 weight-only uses the tinygemm layout (``tile_packed_to_4d``) on it.
        fused_adamw: torch's fused Adam/AdamW (``fused=True``, Trainer ``optim="adamw_torch_fused"``) is used on it.
        non_blocking_copies: batches are copied to it from pinned memory without blocking the host (Trainer
            ``accelerator_config={"non_blocking": True}``, ``dataloader_pin_memory``).
        device_weight_init: random-weight models are built directly in its memory (else on the host).
        ddp_device_ids: DistributedDataParallel is given the rank's ``device_ids`` (else None).
        float64: float64 tensors are supported on it (schedulers keep their float64 math; else float32) [True].
        sync_debug_mode: its runtime reports host synchronisations (``torch.cuda.set_sync_debug_mode``), so the
            syncs of a timed loop can be counted.
    """

    name: ClassVar[str]
    device_type: ClassVar[str]
    accelerator: ClassVar[bool] = True
    collective: ClassVar[str] = "gloo"
    visible_devices_var: ClassVar[str | None] = None
    job_env_vars: ClassVar[tuple[str, ...]] = ()
    vendor_tool: ClassVar[tuple[str, ...] | None] = None
    container_image: ClassVar[str | None] = None
    slurm_gpu_resource: ClassVar[bool] = False
    uses_device_events: ClassVar[bool] = False
    rank_env_defaults: ClassVar[Mapping[str, str]] = MappingProxyType({})
    software_fields: ClassVar[tuple[tuple[str, str], ...]] = ()
    probe_rank: ClassVar[int] = 500
    bridge: ClassVar[str | None] = None
    lazy_mode: ClassVar[bool] = False
    optimum_habana: ClassVar[bool] = False
    fp8_inc: ClassVar[bool] = False
    nsight_compute: ClassVar[bool] = False
    torchao_int4_tinygemm: ClassVar[bool] = False
    fused_adamw: ClassVar[bool] = False
    non_blocking_copies: ClassVar[bool] = False
    device_weight_init: ClassVar[bool] = False
    ddp_device_ids: ClassVar[bool] = False
    float64: ClassVar[bool] = True
    sync_debug_mode: ClassVar[bool] = False

    ATTRIBUTES: ClassVar[tuple[str, ...]] = (
        "name",
        "device_type",
        "accelerator",
        "collective",
        "visible_devices_var",
        "job_env_vars",
        "vendor_tool",
        "container_image",
        "slurm_gpu_resource",
        "uses_device_events",
        "rank_env_defaults",
        "software_fields",
        "probe_rank",
        "bridge",
        "lazy_mode",
        "optimum_habana",
        "fp8_inc",
        "nsight_compute",
        "torchao_int4_tinygemm",
        "fused_adamw",
        "non_blocking_copies",
        "device_weight_init",
        "ddp_device_ids",
        "float64",
        "sync_debug_mode",
    )

    def __init_subclass__(cls, **kwargs) -> None:
        """A class that names itself but inherits no :attr:`device_type` gets its name as its device type."""
        super().__init_subclass__(**kwargs)
        if "name" in vars(cls) and not hasattr(cls, "device_type"):
            cls.device_type = cls.name

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

    def bridge_installed(self) -> bool:
        """True if :attr:`bridge` is installed here, or there is none (found without importing it)."""
        return self.bridge is None or importlib.util.find_spec(self.bridge) is not None

    def bridge_status(self) -> str:
        """``<bridge> present`` or ``<bridge> not installed`` (``torch alone`` where there is no bridge)."""
        if self.bridge is None:
            return "torch alone"
        return f"{self.bridge} {'present' if self.bridge_installed() else 'not installed'}"

    # ------------------------------------------------------------------ device ops
    # Defaults: torch's module of :attr:`device_type` (``torch.get_device_module``: ``torch.cuda`` for cuda and
    # rocm), so a backend whose device type torch knows needs none of them; a module without the call raises.
    def _torch_module(self):
        import torch

        return torch.get_device_module(self.device_type)

    def prepare(self) -> None:
        """Whatever this process needs before it touches a device of this backend (hpu: lazy mode, the bridge);
        nothing by default."""
        return None

    def torch_device(self, index: int = 0):
        """The ``torch.device`` of device ``index`` (``torch.device(device_type, index)``)."""
        import torch

        return torch.device(self.device_type, index)

    def device_index(self, local_rank: int) -> int:
        """The device index rank ``local_rank`` of a node uses: its local rank where every rank sees the node's
        devices (the default on an accelerator); 0 where each rank sees one device or there is none (the host)."""
        return local_rank if self.accelerator else 0

    def set_device(self, local_rank: int) -> None:
        """Make device ``local_rank`` this rank's current device (``torch.<device_type>.set_device``)."""
        self._torch_module().set_device(local_rank)

    def synchronize(self, index: int = 0) -> None:
        """Wait for all queued device work (``torch.<device_type>.synchronize(index)``)."""
        self._torch_module().synchronize(index)

    def mark_step(self) -> None:
        """Cut the lazy-mode graph (hpu); nothing by default."""
        return None

    def reset_peak_memory(self, index: int = 0) -> None:
        """Restart the peak-memory counter of device ``index`` (``torch.<device_type>.reset_peak_memory_stats``)."""
        self._torch_module().reset_peak_memory_stats(index)

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        """Peak bytes allocated on the device since the last reset (``torch.<device_type>.max_memory_allocated``);
        None where not tracked."""
        return int(self._torch_module().max_memory_allocated(index))

    def empty_cache(self, index: int = 0) -> None:
        """Give the allocator's cached memory back (``torch.<device_type>.empty_cache``)."""
        self._torch_module().empty_cache()

    def profiler_activities(self) -> list:
        """``torch.profiler.ProfilerActivity`` values to record: CPU, and the device type's own where the profiler
        has one (CUDA, HPU, XPU, MTIA)."""
        import torch

        activity = torch.profiler.ProfilerActivity
        device = getattr(activity, self.device_type.upper(), None)
        return [activity.CPU] + ([device] if device is not None and device != activity.CPU else [])

    def free_memory_bytes(self, index: int = 0) -> int | None:
        """Free bytes on device ``index`` now; None where not known (the default)."""
        return None

    def energy_counter(self, index: int = 0):
        """The cumulative energy counter of device ``index`` (an :class:`accelbench.backends.energy_counter.Counter`,
        defined in the backend's module); None where this backend has none (the default). Raises
        :class:`accelbench.backends.energy_counter.CounterUnavailable` (the reason) where it has one that cannot be
        read here."""
        return None

    def clock_reader(self, index: int = 0):
        """The clock reader of device ``index`` (an :class:`accelbench.backends.clock_reader.ClockReader`, defined in
        the backend's module: SM clock and its maximum, MHz, temperature, clock-event reasons); None where this
        backend reports no clocks (the default). Never raises: a reader that cannot read says why
        (``ClockReader.reason``)."""
        return None

    def device_load(self, ours: set[int]) -> list[dict] | None:
        """What else runs on this backend's devices that the job may use, for the host-load record
        (:mod:`accelbench.measure.hostload`): one dict per device with ``index``, ``other_processes`` (pids not in
        ``ours``, the job's process tree) and whatever clocks the vendor reports; None where this backend cannot
        tell (the default)."""
        return None

    def visible_device_count(self, configured: int) -> int:
        """Devices a run may use of the ``configured`` ones (a system file's ``devices``), capped by what this
        process sees where the backend can tell (cuda); ``configured`` by default."""
        return configured

    def flash_attention(self, optimum_habana_version: str | None = None) -> str | None:
        """The transformers ``attn_implementation`` that realises flash attention here (``sdpa``, the default;
        ``flash_attention_2``, ``gaudi_fused_sdpa``); None where it is switched on by other means (Gaudi with
        optimum-habana <= 1.19: generation-config flags). ``optimum_habana_version``: the installed one, if any."""
        return "sdpa"

    def autocast(self, dtype):
        """``torch.autocast`` for :attr:`device_type` (not the backend's name: a ROCm backend autocasts ``cuda``), or a
        null context when ``dtype`` is None."""
        if dtype is None:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type=self.device_type, dtype=dtype)

    def out_of_memory_errors(self) -> tuple[type[BaseException], ...]:
        """Exceptions that mean the device ran out of memory."""
        import torch

        return (torch.OutOfMemoryError,)

    # ------------------------------------------------------------------ distributed
    def prepare_collective(self) -> None:
        """What a rank needs before ``init_process_group(self.collective)`` (hpu: import the hccl module); nothing by
        default."""
        return None

    def rank_env(self, env: dict) -> dict:
        """``env`` with :attr:`rank_env_defaults` added where unset (a new dict)."""
        env = dict(env)
        for key, value in self.rank_env_defaults.items():
            env.setdefault(key, value)
        return env

    # ------------------------------------------------------------------ probing and provenance
    @abc.abstractmethod
    def probe(self) -> dict | None:
        """Devices this process sees: ``{"backend", "count", "names"}``; None when it sees none of this backend."""

    def absence_note(self) -> str | None:
        """Why :meth:`probe` found nothing, for the "no accelerator" message (None, the default: nothing to say)."""
        return None

    @abc.abstractmethod
    def provenance(self, info: dict) -> dict:
        """Hardware fields of the provenance beyond ``info`` (backend, cpu, cpu_count, torch_threads): device
        name/count/memory, driver and runtime versions."""

    def precision_support(self) -> dict | None:
        """Which precisions the hardware under this process runs natively, for provenance and
        :mod:`accelbench.core.precisions`: ``{"native": [...], "emulated": {precision: why}, "capability": ...}`` plus
        what it was read from; None where a system file's ``precisions`` alone decide (the default: accelerator
        system files list what their chips run)."""
        return None

    def emulation_slowdown(self, precision: str) -> float | None:
        """A short probe's time in ``precision`` over its time in fp32 on this hardware (measured once per process);
        None where not measured (the default)."""
        return None

    @staticmethod
    def host_as_device(info: dict) -> dict:
        """The host CPU recorded as the device (cpu, or an accelerator backend that sees no device)."""
        import platform

        return {"device_name": info["cpu"] or platform.machine(), "device_count": 1}

    # ------------------------------------------------------------------ containers
    def apptainer_env(self, workdir: str | Path, environ: dict) -> dict[str, str]:
        """Environment variables that give ``apptainer exec`` the flags of this backend's image (``environ``: the
        current environment, for values passed in or extended); none by default."""
        return {}
