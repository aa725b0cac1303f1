"""Provenance: what produced a result (hardware, drivers, software, code, container, config).

:func:`collect` returns a JSON-serialisable dict that every result embeds under ``environment``.
Aggregation builds hardware labels and captions from it (see :func:`hardware_label`).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
from pathlib import Path

from accelbench import backends
from accelbench.backends.probes import library_versions  # noqa: F401  (re-exported)
from accelbench.backends.probes import run_quiet as _run

LIBRARIES = (
    "torch",
    "numpy",
    "monai",
    "nibabel",
    "nilearn",
    "snakemake",
    "pandas",
    "transformers",
    "peft",
    "accelerate",
    "torchao",
    "deepspeed",
    "optimum-habana",
    "neural-compressor",
    "habana-torch-plugin",
    "scikit-learn",
    "scikit-image",
    "gguf",
    "accelbench",
)

# Environment variables that change what a number measures, recorded in every result (environment.software
# .variables): CUDA, cuBLAS/cuDNN and the TF32 override (NVIDIA_TF32_OVERRIDE=0 turns TF32 off under any torch flag),
# CUDA_LAUNCH_BLOCKING (every launch synchronous), the caching allocator (PYTORCH_CUDA_ALLOC_CONF), Inductor, Dynamo
# and Triton options (TORCHINDUCTOR_LAYOUT_OPTIMIZATION, TORCHINDUCTOR_CACHE_DIR: a warm or cold compile), NCCL,
# OpenMP/MKL/oneDNN threads and ISA caps (ATEN_CPU_CAPABILITY), Habana's PT_HPU_*/HCCL_*. Names by prefix; nothing
# else of the environment (no tokens, no HOME) is recorded.
RECORDED_VARIABLES = (
    "ATEN_",
    "CUBLAS",
    "CUDA_",
    "CUDNN_",
    "DNNL_",
    "GOMP_",
    "HABANA_",
    "HCCL_",
    "KMP_",
    "MKL_",
    "NCCL_",
    "NVIDIA_TF32_OVERRIDE",
    "NVSHMEM_",
    "OMP_",
    "ONEDNN_",
    "PT_",
    "PYTORCH_",
    "TORCH",
    "TRITON_",
)
VARIABLE_CHARS = 300  # a longer value is cut to this many characters and marked


def variables(environ: dict | None = None) -> dict[str, str]:
    """The variables of :data:`RECORDED_VARIABLES` set in ``environ`` (default ``os.environ``), sorted by name:
    ``{name: value}``, each value at most :data:`VARIABLE_CHARS` characters (a longer one ends in ``...``); bytes
    that are not UTF-8 (``os.environ`` keeps them as surrogates) become U+FFFD, so every reader can encode it."""
    env = os.environ if environ is None else environ
    out = {}
    for name in sorted(env):
        if name.startswith(RECORDED_VARIABLES):
            value = str(env[name]).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            out[name] = value if len(value) <= VARIABLE_CHARS else value[: VARIABLE_CHARS - 3] + "..."
    return out


def git_info(cwd: str | Path | None = None) -> dict:
    """Commit, branch and dirty flag of the checkout holding this package (an editable install, as the
    README installs it), else of ``cwd``; inside an image built without ``.git``, ``ACCELBENCH_GIT_COMMIT``.
    Values are None when none is known. A set ``ACCELBENCH_GIT_COMMIT`` wins over any ``.git`` found: a copied
    checkout (an air-gapped node, benchmarks/device_run.sh) may carry a stale ``.git`` of another commit."""
    if os.environ.get("ACCELBENCH_GIT_COMMIT"):
        return {
            "commit": os.environ["ACCELBENCH_GIT_COMMIT"],
            "branch": None,
            "dirty": None,
            "source": "ACCELBENCH_GIT_COMMIT",
        }
    for where in (Path(__file__).resolve().parents[2], Path(cwd or ".")):
        if where.is_dir() and _run(["git", "rev-parse", "HEAD"], where):
            cwd = where
            break
    else:
        return {"commit": os.environ.get("ACCELBENCH_GIT_COMMIT"), "branch": None, "dirty": None}
    commit = _run(["git", "rev-parse", "HEAD"], cwd)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd)
    return {
        "commit": commit,
        "branch": _run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd),
        "dirty": bool(status) if status is not None else None,
    }


CONTAINERENV = Path("/run/.containerenv")  # podman writes it into every container (the image's ID when privileged)


def container_info() -> dict:
    """The container this process runs in, if any (Apptainer/Singularity, Docker, Podman, or ACCELBENCH_IMAGE).

    Returns ``{"image", "runtime", "image_id", "base", "base_digest"}``: ``image`` is the name the recipe gives
    (``ACCELBENCH_IMAGE``) or the running container's; ``image_id`` the ID of the image the process runs in
    (``ACCELBENCH_IMAGE_ID``, which ``containers/README.md``'s run command passes, else ``imageid`` of podman's
    /run/.containerenv); ``base`` the FROM image (``ACCELBENCH_BASE``, the recipes' ``BASE`` build argument) and
    ``base_digest`` its digest: the ``@sha256:`` of ``base`` when pinned by one, else ``ACCELBENCH_BASE_DIGEST``
    (a locally made base: its image ID). A value nobody knows is None.
    """
    env = os.environ
    podman = _containerenv()
    image = env.get("ACCELBENCH_IMAGE") or env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER")
    runtime = (
        "apptainer"
        if env.get("APPTAINER_CONTAINER")
        else "singularity"
        if env.get("SINGULARITY_CONTAINER")
        else "docker"
        if Path("/.dockerenv").exists()
        else "podman"
        if podman is not None
        else None
    )
    base = env.get("ACCELBENCH_BASE") or None
    digest = base.partition("@")[2] if base and "@sha256:" in base else env.get("ACCELBENCH_BASE_DIGEST") or None
    return {
        "image": image,
        "runtime": runtime,
        "image_id": env.get("ACCELBENCH_IMAGE_ID") or (podman or {}).get("imageid") or None,
        "base": base,
        "base_digest": digest,
    }


def _containerenv() -> dict | None:
    """``key="value"`` lines of podman's /run/.containerenv (empty unless privileged); None outside podman."""
    try:
        text = CONTAINERENV.read_text()
    except OSError:
        return None
    return {k.strip(): v.strip().strip('"') for k, _, v in (ln.partition("=") for ln in text.splitlines()) if v}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


NOT_READ = "not read: the result is unsupported, known without measuring (torch not imported)"


def hardware_info(backend: str, read_torch: bool = True, threads: int = 0) -> dict:
    """Device name/count/memory and driver/runtime versions for ``backend`` (cpu, cuda, hpu).

    ``read_torch`` False (a result known ``unsupported`` before anything imported torch) on a backend whose device is
    the host: nothing is read through torch; ``torch_threads`` is the job's ``threads`` (what the harness gives torch
    when it measures; None where not given) and what only torch tells (its thread count otherwise, the CPU's
    precision support) is listed under ``not_read`` with :data:`NOT_READ`. An accelerator's provenance reads torch
    either way (the device check has loaded it)."""
    ops = backends.get(backend)
    info: dict = {"backend": ops.name, "cpu": _cpu_model(), "cpu_count": os.cpu_count()}
    if not read_torch and not ops.accelerator:
        info["torch_threads"] = threads or None
        info.update(ops.host_as_device(info))
        info["not_read"] = {"precision_support": NOT_READ} | ({} if threads else {"torch_threads": NOT_READ})
        return info
    import torch

    info["torch_threads"] = torch.get_num_threads()
    info.update(ops.provenance(info))
    return info


def collect(
    backend: str,
    system: dict | None = None,
    config: dict | None = None,
    repo: str | Path | None = None,
    read_torch: bool = True,
    threads: int = 0,
) -> dict:
    """Everything a result needs to be traced back: hardware, software, git, container, host, time, config.

    Args:
        backend: ``cpu``, ``cuda`` or ``hpu``.
        system: the system definition used (see :class:`accelbench.core.systems.System`).
        config: the resolved experiment config.
        repo: folder inside the git checkout that produced the result (default: this package's checkout).
        read_torch, threads: see :func:`hardware_info` (library versions never import a library).
    """
    return {
        "hardware": hardware_info(backend, read_torch, threads),
        "software": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "libraries": library_versions(LIBRARIES),
            "variables": variables(),
        },
        "git": git_info(repo),
        "container": container_info(),
        "host": socket.gethostname(),
        "timestamp_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "system": system,
        "config": config,
    }


def hardware_label(
    environment: dict, devices: int | None = None, count: bool = True, system: dict | None = None
) -> str:
    """Short label for tables and figures, e.g. ``"NVIDIA H200 (1x, 139.8 GiB)"`` or
    ``"CPU: AMD EPYC ... (2 threads) [epyc2: 2-core VM]"``: a CPU, which names no system by itself, ends with the
    system file's name and description (``system``: the result's ``config.system``), so two CPU systems never read
    alike.

    Args:
        devices: the devices the job used (the ``Nx``); None: the devices visible on the node
            (``hardware.device_count``, which stays recorded in the provenance either way). Aggregations pass the
            devices used, so a 1-device job on a 2-GPU node reads ``1x`` and pairs with 1-device jobs elsewhere.
        count: False leaves the count out (``"NVIDIA H200 (139.8 GiB)"``): the series of a curve over devices.
    """
    hw = environment.get("hardware", {})
    ops = backends.lookup(hw.get("backend"))
    if ops is not None and not ops.accelerator:
        threads = f" ({hw['torch_threads']} threads)" if hw.get("torch_threads") else ""  # None: not read
        label = f"CPU: {hw.get('device_name')}{threads}"
        if system and system.get("name"):
            label += f" [{': '.join(str(x) for x in (system['name'], system.get('description')) if x)}]"
        return label
    n = devices if devices is not None else hw.get("device_count")
    parts = ([f"{n}x"] if count else []) + ([f"{hw['device_memory_gib']} GiB"] if hw.get("device_memory_gib") else [])
    return f"{hw.get('device_name')} ({', '.join(parts)})" if parts else str(hw.get("device_name"))


def software_label(environment: dict) -> str:
    """e.g. ``"torch 2.11.0, CUDA 13.0, cuDNN 91300, driver 580.159.04"``."""
    hw, libs = environment.get("hardware", {}), environment.get("software", {}).get("libraries", {})
    parts = [f"torch {libs.get('torch')}"]
    fields = [f for b in backends.all_backends() for f in b.software_fields] + [("driver", "driver")]
    for key, name in fields:
        if hw.get(key):
            parts.append(f"{name} {hw[key]}")
    return ", ".join(parts)
