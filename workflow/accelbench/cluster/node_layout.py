"""How a job's ranks are laid out across nodes: ``nodes x devices_per_node`` from a system file and a device count.

A system file states ``devices_per_node``; a device count up to it runs on one node, one above it becomes
``nodes x devices_per_node`` (:func:`node_plan`; a count that does not divide is a
:class:`~accelbench.errors.ConfigError`), and :func:`job_limit_reason` says why a plan exceeds what one job of the
system may use. The Slurm request and the launch of such a plan are :mod:`accelbench.cluster.multinode` (which
re-exports these names).

Example::

    plan = node_plan(system, 16)  # h100 with devices_per_node 8 -> NodePlan(devices=16, nodes=2, per_node=8)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from accelbench import backends
from accelbench.errors import ConfigError


@dataclass(frozen=True)
class NodePlan:
    """How ``devices`` ranks are laid out: ``nodes`` x ``per_node`` (ranks per node)."""

    devices: int
    nodes: int
    per_node: int

    def to_dict(self) -> dict:
        return asdict(self)


def devices_per_node(system) -> int | None:
    """Ranks one node of ``system`` runs: its ``devices_per_node`` (default: ``devices``); None on ``cpu`` with
    ``devices_per_node: cores`` (one gloo rank per usable core of the one node that runs the job)."""
    per = getattr(system, "devices_per_node", None)
    if per is None:
        return system.devices if backends.get(system.backend).accelerator else None
    if per == "cores":
        return None
    return int(per)


def node_plan(system, devices: int, key: str = "devices") -> NodePlan:
    """Lay out ``devices`` ranks on ``system``: one node up to ``devices_per_node``, else ``devices / devices_per_node``
    nodes of ``devices_per_node`` ranks each.

    Raises:
        ConfigError: ``devices`` is below 1, or above one node and not a multiple of ``devices_per_node``
            (naming ``key``, the config key the count came from).
    """
    devices = int(devices)
    if devices < 1:
        raise ConfigError(f"{key}: {devices} devices requested; at least 1 is needed")
    per = devices_per_node(system)
    if per is None or devices <= per:
        return NodePlan(devices, 1, devices)
    if devices % per:
        lower, upper = devices // per * per, (devices // per + 1) * per
        raise ConfigError(
            f"{key}: {devices} devices do not fill whole nodes of system {system.name!r} "
            f"(devices_per_node: {per}); use at most {per} (one node) or a multiple of {per} "
            f"(e.g. {lower or per} or {upper})"
        )
    return NodePlan(devices, devices // per, per)


def job_limit_reason(system, plan: NodePlan) -> str | None:
    """Why a multi-node ``plan`` exceeds what one job of ``system`` may use (its ``devices``); None if it fits."""
    if plan.nodes > 1 and backends.get(system.backend).accelerator and plan.devices > system.devices:
        return (
            f"{plan.devices} devices ({plan.nodes} nodes x {plan.per_node}) requested; system {system.name} "
            f"allows {system.devices} per job (`devices` in its system file: raise it to nodes x devices_per_node "
            f"to span nodes)"
        )
    return None
