"""The host CPU: no device to synchronize, lock per device, probe or request; gloo between ranks.

Precisions: bf16 and fp16 are native only where the CPU has the instructions (x86: AVX512-BF16 or AMX-BF16,
AVX512-FP16 or AMX-FP16; Arm: the ``bf16`` and ``fphp``/``asimdhp`` features) and torch and oneDNN may use them
(``torch.backends.cpu.get_cpu_capability()`` AVX512 on x86; ``ATEN_CPU_CAPABILITY`` and ``ONEDNN_MAX_CPU_ISA``, where
set, cap both). Elsewhere PyTorch emulates them, often several times slower than fp32; a short probe
(:func:`probe_slowdown`) measures how much.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from accelbench.backends.base import Backend
from accelbench.backends.energy_counter import Counter, CounterUnavailable

CPUINFO = Path("/proc/cpuinfo")
ISA_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")  # variables that cap the instructions torch / oneDNN use
# the CPU flags (x86) or features (Arm) that make a precision native, and how a reason names them
FLAGS = {
    "x86": {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")},
    "arm": {"bf16": ("bf16",), "fp16": ("fphp", "asimdhp")},
}
# the flags a result records (what the decision read, and the vector width beside it)
RECORDED = {
    "x86": ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16"),
    "arm": ("asimd", "sve", "bf16", "fphp", "asimdhp"),
}
FLAG_NAMES = {
    "x86": {"bf16": "AVX512-BF16/AMX", "fp16": "AVX512-FP16/AMX-FP16"},
    "arm": {"bf16": "BF16", "fp16": "FP16 arithmetic"},
}
# ONEDNN_MAX_CPU_ISA values (oneDNN's ISA names) that still let oneDNN use a precision's instructions
ONEDNN_ALLOWS = {
    "fp16": {
        "AVX512_CORE_FP16",
        "AVX10_1_512",
        "AVX512_CORE_AMX",
        "AVX10_1_512_AMX",
        "AVX512_CORE_AMX_FP16",
        "AVX10_1_512_AMX_FP16",
        "ALL",
        "DEFAULT",
    },
}
ONEDNN_ALLOWS["bf16"] = ONEDNN_ALLOWS["fp16"] | {"AVX512_CORE_BF16"}
PROBE_ENV = "ACCELBENCH_PRECISION_PROBE"  # probe ratios handed to child processes (ranks) of the same job
_SLOWDOWN: dict[tuple, float] = {}  # (precision, capability key) -> ratio, once per process


def cpu_flags(path: Path = CPUINFO) -> set[str]:
    """The CPU's flags (x86 ``flags``) or features (Arm ``Features``) from /proc/cpuinfo; empty where unreadable."""
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() in ("flags", "features"):
                return set(value.split())
    except OSError:
        pass
    return set()


def cpu_capability() -> str:
    """``torch.backends.cpu.get_cpu_capability()``: the vector ISA torch's own kernels run (``AVX2``, ``AVX512``)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def _family() -> str | None:
    machine = platform.machine().lower()
    return (
        "x86" if machine in ("x86_64", "amd64", "i386", "i686") else "arm" if machine in ("aarch64", "arm64") else None
    )


def precision_support(
    flags: set[str] | None = None, capability: str | None = None, environ: dict | None = None, family: str | None = None
) -> dict | None:
    """``{"native", "emulated", "capability", "flags", "isa_caps"}`` of this CPU (arguments: as read here unless
    given; ``family`` ``x86`` or ``arm``); None on an architecture whose flags are not known here (the system file's
    ``precisions`` decide)."""
    family = family or _family()
    if family is None:
        return None
    flags = cpu_flags() if flags is None else flags
    capability = cpu_capability() if capability is None else capability
    env = os.environ if environ is None else environ
    caps = {k: env[k] for k in ISA_CAPS if env.get(k)}
    onednn = caps.get("ONEDNN_MAX_CPU_ISA", "").upper()
    native, emulated = ["fp32"], {}
    for precision, wanted in FLAGS[family].items():
        has = [f for f in wanted if f in flags]
        capped = []  # on x86: torch's kernels below AVX512, or oneDNN held below the precision's instructions
        if family == "x86" and not capability.upper().startswith("AVX512"):
            capped.append(
                f"ATEN_CPU_CAPABILITY={caps['ATEN_CPU_CAPABILITY']}"
                if "ATEN_CPU_CAPABILITY" in caps
                else "torch's build"
            )
        if family == "x86" and onednn and onednn not in ONEDNN_ALLOWS[precision]:
            capped.append(f"ONEDNN_MAX_CPU_ISA={caps['ONEDNN_MAX_CPU_ISA']}")
        if not has:
            emulated[precision] = f"{capability}, no {FLAG_NAMES[family][precision]}"
        elif capped:
            emulated[precision] = f"{capability}, {FLAG_NAMES[family][precision]} capped by {', '.join(capped)}"
        else:
            native.append(precision)
    recorded = [f for f in RECORDED[family] if f in flags]
    return {"native": native, "emulated": emulated, "capability": capability, "flags": recorded, "isa_caps": caps}


def probe_slowdown(precision: str, size: int = 24) -> float:
    """A short probe (a few hundred ms where emulated, ~0.1 s where native): one ``Conv3d(16, 16, 3)`` on
    ``1 x 16 x size^3`` and one ``Linear(1024, 1024)`` on 256 rows, forward, under ``precision`` autocast, over the
    same in fp32 (best of 2 after one warm-up each). The global random state is left as it was."""
    import time

    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        conv, lin = torch.nn.Conv3d(16, 16, 3, padding=1), torch.nn.Linear(1024, 1024)
        x, y = torch.randn(1, 16, size, size, size), torch.randn(256, 1024)

        def once(dt) -> float:
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=dt or torch.bfloat16, enabled=dt is not None):
                conv(x)
                lin(y)
            return time.perf_counter() - t0

        once(None), once(dtype)
        fp32 = min(once(None) for _ in range(2))
        low = min(once(dtype) for _ in range(2))
    return low / fp32


class RaplCounter(Counter):
    """Host CPU: the package zones (``intel-rapl:N``, not their subzones) under ``/sys/class/powercap``, summed; each
    wraps at its ``max_energy_range_uj`` (handled per zone here, so ``wrap_j`` is None). Often not readable in a VM
    or without root (``energy_uj`` is root-only since Linux 5.10 on many distributions). Updates about every 1 ms.

    Raises:
        CounterUnavailable: no package zone under ``root``, or one that cannot be read.
    """

    source, api, resolution_j, update_period_s = "rapl", "/sys/class/powercap/intel-rapl:N/energy_uj", 1e-6, 0.001
    covers = "CPU packages (cores, caches, uncore; DRAM only where a package counts it)"

    def __init__(self, root: str | Path = "/sys/class/powercap"):
        root = Path(root)
        zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1) if root.is_dir() else []
        if not zones:
            raise CounterUnavailable(f"no RAPL package zone under {root} (not exposed here, e.g. in a VM)")
        self.files, self.ranges = [], []
        for z in zones:
            try:
                (z / "energy_uj").read_text()
                rng = int((z / "max_energy_range_uj").read_text())
            except (OSError, ValueError) as exc:
                raise CounterUnavailable(f"RAPL zone {z} not readable: {exc}") from None
            self.files.append(z / "energy_uj")
            self.ranges.append(rng)
        self.identity = "rapl:" + ",".join(z.name for z in zones)
        self._last = [int(f.read_text()) for f in self.files]
        self._total_uj = 0

    def read_j(self) -> float:
        # accumulate per zone, unwrapping each: a reading below the last one means the zone wrapped once
        now = [int(f.read_text()) for f in self.files]
        for i, (a, b) in enumerate(zip(self._last, now)):
            self._total_uj += b - a if b >= a else b + self.ranges[i] - a
        self._last = now
        return self._total_uj * 1e-6


class CpuBackend(Backend):
    name = "cpu"
    accelerator = False
    probe_rank = 1000  # the fallback: always present
    # container_image None (the default): runs in the cuda image (config/systems/cpu.yaml)

    def torch_device(self, index: int = 0):
        import torch

        return torch.device("cpu")

    def set_device(self, local_rank: int) -> None:
        pass

    def synchronize(self, index: int = 0) -> None:
        pass

    def reset_peak_memory(self, index: int = 0) -> None:
        pass

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        return None

    def empty_cache(self, index: int = 0) -> None:
        pass

    def energy_counter(self, index: int = 0):
        return RaplCounter()  # RAPL package zones under /sys/class/powercap (the whole host's CPUs)

    def probe(self) -> dict | None:
        """The host CPU, named by its model (``/proc/cpuinfo``) where readable: what a cpu system's ``match`` reads."""
        try:
            lines = CPUINFO.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
        names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name") and ":" in ln][:1]
        return {"backend": self.name, "count": 1, "names": names}

    def provenance(self, info: dict) -> dict:
        out = self.host_as_device(info)
        support = self.precision_support()
        if support is not None:
            out["precision_support"] = support
        return out

    def precision_support(self) -> dict | None:
        """:func:`precision_support` of this CPU, with the probe ratios measured so far in this process
        (``slowdown``: precision -> its time over fp32's)."""
        support = precision_support()
        if support is not None:
            key = self._probe_key(support)
            support["slowdown"] = {p: round(r, 2) for (p, k), r in _SLOWDOWN.items() if k == key}
        return support

    def emulation_slowdown(self, precision: str) -> float | None:
        """:func:`probe_slowdown` of ``precision``, measured once per process and capability (a job's ranks take it
        from the job through ``ACCELBENCH_PRECISION_PROBE``)."""
        if precision == "fp32":
            return 1.0
        support = precision_support()
        key = self._probe_key(support)
        if (precision, key) not in _SLOWDOWN:
            try:
                handed = json.loads(os.environ.get(PROBE_ENV) or "{}")
            except ValueError:
                handed = {}
            if handed.get("key") == key and isinstance(handed.get(precision), (int, float)):
                _SLOWDOWN[(precision, key)] = float(handed[precision])
            else:
                _SLOWDOWN[(precision, key)] = probe_slowdown(precision)
            os.environ[PROBE_ENV] = json.dumps({"key": key, **{p: r for (p, k), r in _SLOWDOWN.items() if k == key}})
        return _SLOWDOWN[(precision, key)]

    @staticmethod
    def _probe_key(support: dict | None) -> str:
        import torch

        support = support or {}
        return "|".join(
            [
                torch.__version__,
                str(support.get("capability")),
                json.dumps(support.get("isa_caps") or {}, sort_keys=True),
            ]
        )


BACKEND = CpuBackend
