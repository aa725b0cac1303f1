"""Systems: named hardware targets (``config/systems/<name>.yaml``), detection and checks.

A system gives the backend (``cpu``/``cuda``/``hpu``), the device count, the precisions the
hardware supports natively, dense peak TFLOP/s (for MFU), its container image and its workload
scale (``small`` or ``paper``). ``system: auto`` picks the system whose ``match`` strings occur in
the name of the device found here (``cpu`` when no accelerator is present).

Example::

    systems = load_systems("config/systems")
    system = resolve_system("auto", systems)    # e.g. System(name='h200', backend='cuda', ...)
    require_backend(system)                     # raises SystemMismatchError if absent
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from accelbench import backends
from accelbench.errors import ConfigError, SystemMismatchError


@dataclass(frozen=True)
class System:
    """One hardware target, as read from its YAML file (fields as in ``config/system.schema.yaml``)."""

    name: str
    backend: str
    devices: int
    precisions: tuple[str, ...]
    image: str
    scale: str
    description: str = ""
    device_memory_gib: float | None = None
    match: tuple[str, ...] = ()
    peak_tflops: dict[str, float] = field(default_factory=dict)
    devices_per_node: int | str | None = None  # ranks one node runs; None = ``devices`` (cpu: ``cores``)

    def supports(self, precision: str) -> bool:
        """True if ``precision`` (fp32, tf32, bf16, fp16, fp8) runs natively on this system."""
        return precision in self.precisions

    def to_dict(self) -> dict:
        d = asdict(self)
        d["precisions"] = list(self.precisions)
        d["match"] = list(self.match)
        return d


def load_systems(systems_dir: str | Path, schema_path: str | Path | None = None) -> dict[str, System]:
    """Read and validate every ``*.yaml`` in ``systems_dir`` (against ``schema_path``, by default
    :data:`accelbench.core.config.SYSTEM_SCHEMA`).

    Raises:
        ConfigError: the folder is empty/missing, a file fails the schema, or its ``name`` differs
            from its file name.
    """
    from accelbench.core.config import SYSTEM_SCHEMA, read_yaml, schema_errors  # jsonschema: only to read files

    schema_path = schema_path or SYSTEM_SCHEMA
    systems_dir = Path(systems_dir)
    files = sorted(systems_dir.glob("*.yaml"))
    if not files:
        raise ConfigError(f"no system files (*.yaml) in {systems_dir}")
    systems: dict[str, System] = {}
    for path in files:
        raw = read_yaml(path)  # no duplicate keys, no alias bombs (names the file)
        problems = schema_errors(raw, schema_path, what=f"system file {path}")
        if problems:
            raise ConfigError("\n".join(problems))
        if raw["name"] != path.stem:
            raise ConfigError(f"system file {path}: name {raw['name']!r} must equal the file name {path.stem!r}")
        raw["precisions"] = tuple(raw["precisions"])
        raw["match"] = tuple(raw.get("match", ()))
        raw["peak_tflops"] = dict(raw.get("peak_tflops") or {})
        systems[raw["name"]] = System(**raw)
    return systems


def probe_devices() -> dict:
    """What accelerators this process can see: ``{"backend", "count", "names"}``.

    Each backend probes itself (:func:`accelbench.backends.detect`): Gaudi only when ``habana_frameworks`` is
    installed, then CUDA through torch, else the cpu.
    """
    return backends.detect()


def _describe_found(found: dict) -> str:
    if not backends.get(found["backend"]).accelerator:
        import torch

        notes = [n for n in (b.absence_note() for b in backends.all_backends()) if n]
        return f"no accelerator (torch {torch.__version__}: {'; '.join(notes)})"
    return f"{found['count']} x {found['backend']} device(s): {', '.join(sorted(set(found['names'])))}"


def match_system(device_name: str, backend: str, systems: dict[str, System]) -> System | None:
    """The system of ``backend`` whose longest ``match`` string occurs in ``device_name`` (case-insensitive)."""
    best, best_len = None, 0
    for system in systems.values():
        if system.backend != backend:
            continue
        for m in system.match:
            if m.lower() in device_name.lower() and len(m) > best_len:
                best, best_len = system, len(m)
    return best


def resolve_system(name: str, systems: dict[str, System], found: dict | None = None) -> System:
    """Turn the config's ``system`` value into a :class:`System`.

    ``auto`` detects the backend (see :func:`probe_devices`) and matches the device name.

    Raises:
        ConfigError: unknown system name, or an accelerator no system file matches.
    """
    if name != "auto":
        if name not in systems:
            raise ConfigError(
                f"unknown system {name!r}; known systems: {', '.join(sorted(systems))} (or 'auto'). "
                f"Add config/systems/{name}.yaml to define a new one."
            )
        return systems[name]
    found = found or probe_devices()
    host = backends.get(found["backend"])
    if not host.accelerator:  # a cpu system whose `match` names this CPU's model, else the file named cpu
        model = (found.get("names") or [""])[0]
        matched = match_system(model, found["backend"], systems) if model else None
        if matched is None and host.name not in systems:
            raise ConfigError(f"system: auto found no accelerator, and there is no {host.name!r} system file")
        return matched or systems[host.name]
    device_name = found["names"][0]
    system = match_system(device_name, found["backend"], systems)
    if system is None:
        raise ConfigError(
            f"system: auto found {_describe_found(found)}, which no system file matches; "
            f'add config/systems/<name>.yaml with `match: ["{device_name}"]` or set `system:` explicitly'
        )
    return system


def require_backend(system: System, found: dict | None = None, devices: int = 1) -> dict:
    """Check that ``system``'s backend is present with at least ``devices`` devices.

    Returns:
        The probe result (see :func:`probe_devices`).

    Raises:
        SystemMismatchError: naming the system and what was found instead.
    """
    found = found or probe_devices()
    if not backends.get(system.backend).accelerator:
        return found
    if found["backend"] != system.backend or found["count"] < devices:
        raise SystemMismatchError(
            f"system {system.name!r} needs backend {system.backend!r} with {devices} device(s), "
            f"but this machine has {_describe_found(found)}. Run on a {system.description or system.name} node, "
            f"or set `system: auto` / `system: cpu`."
        )
    return found


def require_backend_for_local_jobs(workflow, system) -> dict | None:
    """Check ``system``'s backend on this host when this Snakemake process runs the jobs itself.

    Called from ``onstart`` (after planning, before the first job; never in dry runs). An executor that submits jobs
    elsewhere (``--executor slurm`` from a login node without accelerators) skips it: every job checks again on its
    node (``accelbench <experiment>`` and ``gpu-smoke`` call :func:`accelbench.core.systems.require_backend`).

    Returns:
        The device probe of this host, or None when the check was left to the jobs.

    Raises:
        SystemMismatchError: local execution of a system whose backend this host lacks.
    """
    from snakemake_interface_executor_plugins.settings import ExecMode

    plugin = workflow.executor_plugin
    if plugin is None or not plugin.common_settings.local_exec or workflow.exec_mode != ExecMode.DEFAULT:
        return None
    return require_backend(system)


def checked_config(items: list[str], system: str | None = None) -> dict:
    """The config ``accelbench check-system`` resolves: ``items`` as Snakemake's ``--config``/``--configfile`` take
    them (YAML files merged in order onto ``config/config.yaml``, and ``KEY=VALUE`` overrides, e.g.
    ``system=epyc2`` or ``systems_dir=my/systems``), then ``system`` (``--system NAME``) over all of them.

    Raises:
        ConfigError: a file is missing or not YAML, an override's key is empty, or the merged config fails the schema.
    """
    from accelbench.core.config import deep_merge, read_yaml, validate_config

    base = Path("config/config.yaml")
    files = [Path(i) for i in items if "=" not in i or Path(i).is_file()]
    config = read_yaml(base) if base.is_file() or not files else {}
    for path in files:
        data = read_yaml(path)
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping, found {type(data).__name__}")
        config = deep_merge(config, data)
    given: dict = {}  # the KEY=VALUE overrides: text, coerced to the schema's types; the files keep their YAML types
    for item in (i for i in items if "=" in i and not Path(i).is_file()):
        key, _, value = item.partition("=")
        if not key.strip():
            raise ConfigError(f"--config {item!r}: give KEY=VALUE (e.g. system=cpu) or a config file")
        given = deep_merge(given, {key.strip(): yaml.safe_load(value) if value else value})
    config = deep_merge(config, given)
    if system:
        config = deep_merge(config, {"system": system})
    return validate_config(config, text=given)
