"""accelbench.backends: the one table of backends, the whole protocol per backend, and no name comparisons left in
the modules that were converted to it."""

import contextlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from accelbench import backends
from accelbench.backends.base import Backend
from accelbench.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "workflow/accelbench"

# Every module outside backends/ asks the backend object instead of comparing backend names (found, so a new module
# is guarded without being listed), and the rule files too.
# (an experiment folder's tests/ are tests: they name backends to check what each gets)
CONVERTED = sorted(
    str(p.relative_to(PKG))
    for p in PKG.rglob("*.py")
    if p.relative_to(PKG).parts[0] != "backends" and "tests" not in p.relative_to(PKG).parts
)
CONVERTED += ["../rules/common.smk", "../rules/cluster.smk"]

NAMES = r"(?:cpu|cuda|hpu|habana)"
# `backend == "cuda"`, `system.backend != "cpu"`, `found["backend"] in ("cuda", ...)`, `"hpu" == backend`,
# `{"cuda": ..., "hpu": ...}.get(backend)` (dispatch by name), `image == "habana"`.
FORBIDDEN = [
    re.compile(r"backend\W{0,3}\s*(?:==|!=|not\s+in\b|\bin\b)\s*[\"'({\[]"),
    re.compile(rf"[\"']{NAMES}[\"']\s*(?:==|!=|not\s+in\b|\bin\b)"),
    re.compile(rf"\{{\s*[\"']{NAMES}[\"']\s*:"),
    re.compile(r"image\s*(?:==|!=)\s*[\"']"),
]


def test_table_is_every_backend_module():
    """The table is whatever backends exist: every module of backends/ that defines ``BACKEND`` (cpu, cuda and hpu
    among them), by the name its class states; one shared instance each."""
    modules = sorted(
        p.stem for p in (PKG / "backends").glob("*.py") if re.search(r"^BACKEND = ", p.read_text(), flags=re.M)
    )
    assert sorted(cls.__module__.rsplit(".", 1)[1] for cls in backends.BACKENDS.values()) == modules
    assert {"cpu", "cuda", "hpu"} <= set(backends.BACKENDS)
    for name, cls in backends.BACKENDS.items():
        assert cls.name == name and isinstance(backends.get(name), cls)
        assert backends.get(name) is backends.get(name)  # one shared instance
    assert [b.name for b in backends.all_backends()] == list(backends.BACKENDS)


def probe_problems(backend: Backend, answer) -> list[str]:
    """What is wrong with ``answer``, ``backend.probe()``'s: None, or ``{"backend": its own name, "count": >= 1,
    "names": one string per device}`` (the host: at most one, its model name where /proc/cpuinfo has it)."""
    if answer is None:
        return []
    if not isinstance(answer, dict) or set(answer) != {"backend", "count", "names"}:
        return [f"{backend.name}: not a probe answer: {answer!r}"]
    out = []
    if answer["backend"] != backend.name:
        out.append(f"{backend.name}: answers as {answer['backend']!r}")
    count, names = answer["count"], answer["names"]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        out.append(f"{backend.name}: count {count!r}")
    elif not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        out.append(f"{backend.name}: names {names!r}")
    elif len(names) != count and not (not backend.accelerator and len(names) <= 1):
        out.append(f"{backend.name}: {count} devices, {len(names)} names")
    return out


@pytest.mark.parametrize("cls", list(backends.BACKENDS.values()), ids=list(backends.BACKENDS))
def test_every_backend_implements_the_whole_protocol(cls, monkeypatch):
    """Every backend, whatever its module states and inherits: a name of its own, a device type torch knows, the
    protocol's attributes and method signatures, and device calls on its device type (not its name)."""
    assert issubclass(cls, Backend) and "name" in vars(cls), f"{cls.__name__} states no name of its own"
    assert not inspect.isabstract(cls) and not cls.__abstractmethods__
    backend = cls()  # instantiable: no abstract method left
    for attr in Backend.ATTRIBUTES:
        assert hasattr(cls, attr), f"{cls.__name__} lacks {attr}"
    torch.device(cls.device_type)  # a device type torch knows (raises for e.g. "rocm")
    assert cls.collective in ("gloo", "nccl", "hccl")
    assert isinstance(cls.accelerator, bool) and isinstance(cls.slurm_gpu_resource, bool)
    assert isinstance(cls.probe_rank, int) and (cls.probe_rank == 1000) == (not cls.accelerator)  # the host last
    assert cls.vendor_tool is None or (isinstance(cls.vendor_tool, tuple) and cls.vendor_tool)
    assert not cls.uses_device_events or cls.device_type == "cuda"  # measure.timing records torch.cuda.Event
    assert backend.rank_env({"NCCL_DEBUG": "WARN"})["NCCL_DEBUG"] == "WARN"  # the user's setting wins
    assert backend.rank_env({}) == dict(cls.rank_env_defaults)
    # every method of the protocol that it overrides keeps the protocol's parameters
    for meth, base in vars(Backend).items():
        if callable(base) and not meth.startswith("__") and getattr(cls, meth) is not base:
            assert list(inspect.signature(getattr(cls, meth)).parameters) == list(inspect.signature(base).parameters), (
                f"{cls.__name__}.{meth}"
            )
    # device calls take the device type: torch.device and autocast (recorded, so no device is needed)
    assert backend.torch_device(0).type == cls.device_type
    calls = []
    monkeypatch.setattr(torch, "autocast", lambda device_type, dtype=None, **kw: calls.append(device_type))
    backend.autocast(torch.bfloat16)
    assert calls == [cls.device_type] and isinstance(backend.autocast(None), contextlib.nullcontext)
    assert torch.profiler.ProfilerActivity.CPU in backend.profiler_activities()
    # its probe here: nothing, or its own devices, well formed
    assert probe_problems(backend, backend.probe()) == []


def test_unknown_backend_fails_naming_the_known_ones():
    known = ", ".join(backends.BACKENDS)
    with pytest.raises(ConfigError, match=rf"^unknown backend 'no-such'; known backends: {re.escape(known)}$"):
        backends.get("no-such")
    assert "cpu, cuda" in known and backends.lookup("no-such") is None and backends.lookup(None) is None


def test_schema_enums_are_the_table():
    """System files and results accept exactly the backends of the table (a new backend adds itself to both): the
    schema files list none, their loaders fill the table's names in."""
    import json

    from accelbench.core.config import SYSTEM_SCHEMA, load_schema, schema_errors
    from accelbench.core.validate import _schemas

    assert "enum" not in yaml.safe_load((REPO / "config/system.schema.yaml").read_text())["properties"]["backend"]
    assert load_schema(REPO / "config/system.schema.yaml")["properties"]["backend"]["enum"] == list(backends.BACKENDS)
    raw = json.loads((PKG / "schemas/result.json").read_text())["$defs"]
    assert "enum" not in raw["system"]["properties"]["backend"]
    result = _schemas()["result.json"]["$defs"]
    assert result["system"]["properties"]["backend"]["enum"] == list(backends.BACKENDS)
    assert result["environment"]["properties"]["hardware"]["properties"]["backend"]["enum"] == list(backends.BACKENDS)
    bad = schema_errors(
        {"name": "x", "backend": "no-such", "devices": 1, "precisions": ["fp32"], "image": "cuda", "scale": "small"},
        SYSTEM_SCHEMA,
        "system file x.yaml",
    )
    assert any("no-such" in e and "cuda" in e for e in bad), bad


def test_cpu_device_ops():
    from accelbench.backends.device import Device

    dev = Device("cpu")
    assert dev.backend == "cpu" and dev.ops is backends.get("cpu") and dev == Device("cpu")
    assert dev.torch_device == torch.device("cpu")
    dev.set_device()
    dev.synchronize()
    dev.mark_step()
    dev.reset_peak_memory()
    dev.empty_cache()
    assert dev.peak_memory_bytes() is None
    assert dev.profiler_activities() == [torch.profiler.ProfilerActivity.CPU]
    with dev.autocast(None):
        pass
    with dev.autocast(torch.bfloat16):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    assert Device.out_of_memory_errors() == (torch.OutOfMemoryError,) == dev.ops.out_of_memory_errors()
    cpu = backends.get("cpu")
    assert cpu.collective == "gloo" and cpu.device_index(3) == 0 and cpu.rank_env({"A": "1"}) == {"A": "1"}
    probe = cpu.probe()  # the host CPU by its model name (what a cpu system file's `match` reads)
    assert probe["backend"] == "cpu" and probe["count"] == 1 and len(probe["names"]) <= 1
    info = {"cpu": "Some CPU"}
    hw = cpu.provenance(info)
    assert {k: hw[k] for k in ("device_name", "device_count")} == {"device_name": "Some CPU", "device_count": 1}
    # which precisions this CPU runs natively (x86/Arm), from torch's capability and the CPU's flags
    assert set(hw) <= {"device_name", "device_count", "precision_support"}
    assert "precision_support" not in hw or "fp32" in hw["precision_support"]["native"]
    assert cpu.apptainer_env("/tmp", {}) == {} and not cpu.uses_device_events


def test_per_backend_facts_as_before():
    from accelbench.backends.device import Device
    from accelbench.cluster import multinode
    from accelbench.core import locks
    from accelbench.measure.timing import StepClock

    assert [multinode.collective_backend(n) for n in ("cpu", "cuda", "hpu")] == ["gloo", "nccl", "hccl"]
    assert backends.get("cuda").device_index(3) == 3 and backends.get("hpu").device_index(3) == 0
    assert backends.get("cuda").visible_devices_var == "CUDA_VISIBLE_DEVICES"
    assert backends.get("hpu").visible_devices_var == "HABANA_VISIBLE_MODULES"
    assert backends.get("cpu").visible_devices_var is None
    assert locks.device_set("hpu", {"HABANA_VISIBLE_MODULES": "2"}) == "hpu-2"
    assert [backends.get(n).slurm_gpu_resource for n in ("cpu", "cuda", "hpu")] == [False, True, False]
    assert [backends.get(n).uses_device_events for n in ("cpu", "cuda", "hpu")] == [False, True, False]
    assert StepClock(Device("cpu")).method == "synchronize+perf_counter"
    assert backends.for_image("cuda") is backends.get("cuda") and backends.for_image("habana") is backends.get("hpu")
    assert backends.for_image("no-such-image") is None


def _answer(backend: Backend) -> dict:
    return {"backend": backend.name, "count": 2, "names": [f"{backend.name} device"] * 2}


@pytest.mark.parametrize("name", list(backends.BACKENDS))
def test_detect_returns_the_first_backend_by_probe_rank_that_answers(name, monkeypatch):
    """Each backend in turn answers, and so does every backend probed after it (cpu, the fallback, always does):
    detect() returns its answer, not a later one's; with none answering, it fails. Then, with the real probes, it
    returns the first real answer by probe_rank, which every probe gives well formed or not at all."""
    chosen = backends.get(name)
    for b in backends.all_backends():
        later = b.probe_rank > chosen.probe_rank
        monkeypatch.setattr(b, "probe", (lambda b=b: _answer(b)) if b is chosen or later else (lambda: None))
    assert backends.detect() == _answer(chosen)
    for b in backends.all_backends():
        monkeypatch.setattr(b, "probe", lambda: None)
    with pytest.raises(RuntimeError, match="no backend answered"):
        backends.detect()
    monkeypatch.undo()
    ranks = [b.probe_rank for b in backends.all_backends()]
    assert len(set(ranks)) == len(ranks), "two backends share a probe_rank: detect()'s order would be arbitrary"
    answers = [(b, b.probe()) for b in sorted(backends.all_backends(), key=lambda b: b.probe_rank)]
    assert [p for b, a in answers for p in probe_problems(b, a)] == []
    assert backends.detect() == next(a for b, a in answers if a is not None)


@pytest.mark.parametrize(
    "answer",
    [
        {"backend": "cuda", "count": 1, "names": ["Some CPU"]},  # answers as another backend
        {"backend": "cpu", "count": 0, "names": []},  # sees nothing but answers
        {"backend": "cpu", "count": 1},  # a key missing
        {"backend": "cpu", "count": "1", "names": []},
    ],
)
def test_the_probe_check_catches_a_broken_answer(answer):
    assert probe_problems(backends.get("cpu"), answer)
    cuda = backends.get("cuda")
    assert probe_problems(cuda, {"backend": "cuda", "count": 2, "names": ["GPU"]})  # 2 devices, 1 name
    assert probe_problems(cuda, {"backend": "cuda", "count": 2, "names": ["GPU", "GPU"]}) == []


def test_software_label_keeps_its_field_order():
    from accelbench.core.provenance import software_label

    env = {
        "hardware": {"driver": "580", "synapseai": "1.21", "cudnn": 91300, "cuda": "13.0"},
        "software": {"libraries": {"torch": "2.11"}},
    }
    assert software_label(env) == "torch 2.11, CUDA 13.0, cuDNN 91300, SynapseAI 1.21, driver 580"


def test_hpu_importable_without_habana_frameworks():
    """No Gaudi stack is imported at import time, nor by probing a machine without it."""
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'habana_frameworks': raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import accelbench.backends, accelbench.backends.hpu, accelbench.backends.device, accelbench.core.systems\n"
        "import accelbench.core.provenance, accelbench.cluster.containers, accelbench.cluster.recipes\n"
        "import accelbench.cluster.node_report, accelbench.cluster.multinode, accelbench.measure.energy\n"
        "from accelbench import backends\n"
        "hpu = backends.get('hpu')\n"
        "assert hpu.collective == 'hccl' and hpu.container_image == 'habana'\n"
        "assert not any(m.startswith('habana_frameworks') for m in sys.modules)\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    if not backends.hpu.habana_available():
        assert backends.get("hpu").probe() is None
        assert backends.get("hpu").absence_note() == "habana_frameworks not installed"


@pytest.mark.parametrize(
    "line",
    [
        'if backend == "cuda":',
        'x = system.backend != "cpu"',
        'if found["backend"] == "cpu":',
        'if backend in ("cuda", "hpu"):',
        '{"cuda": "nccl", "hpu": "hccl"}.get(backend)',
        'if "hpu" == backend:',
        'if system.image == "habana":',
    ],
)
def test_the_guard_catches_name_comparisons(line):
    assert any(p.search(line) for p in FORBIDDEN)


@pytest.mark.parametrize(
    "line",
    [
        "if system.backend != backend:",
        "ops = backends.get(system.backend)",
        'if found["backend"] != system.backend or found["count"] < devices:',
    ],
)
def test_the_guard_lets_name_equality_pass(line):
    assert not any(p.search(line) for p in FORBIDDEN)


@pytest.mark.parametrize("module", CONVERTED)
def test_no_backend_name_comparisons_in_converted_modules(module):
    path = (PKG / module).resolve()
    bad = [
        f"{path.name}:{i}: {line.strip()}"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if not line.lstrip().startswith("#") and any(p.search(line) for p in FORBIDDEN)
    ]
    assert not bad, "compare backend names here no more; ask accelbench.backends.get(name):\n" + "\n".join(bad)


def test_cuda_probe_without_gpu_device_files_does_not_import_torch(tmp_path):
    """Without /dev/nvidiactl, /dev/nvidia<N>, /dev/kfd or /dev/dxg torch.cuda cannot see a GPU: the probe answers
    None without importing torch (every `system: auto` plan on a CPU machine paid about 2 s for it), and with any of
    them present it asks torch."""
    import subprocess
    import sys

    from accelbench.backends import cuda

    assert cuda.no_gpu_device_file(tmp_path)
    for name in ("nvidia0", "nvidiactl", "kfd", "dxg"):
        (tmp_path / name).touch()
        assert not cuda.no_gpu_device_file(tmp_path), name
        (tmp_path / name).unlink()
    assert not cuda.no_gpu_device_file(tmp_path / "missing")  # unreadable: ask torch
    code = (
        "import sys; from accelbench.backends import cuda; cuda.no_gpu_device_file = lambda dev=None: True; "
        "print(cuda.CudaBackend().probe(), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["None", "False"]
