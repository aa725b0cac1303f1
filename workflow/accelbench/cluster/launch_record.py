"""What a multi-rank result records about its launch: layout, rendezvous, collective backend, NCCL's transports.

:func:`launch_record` gives nodes, ranks per node, world size, launcher, rendezvous backend and endpoint, hosts, the
Slurm job and the collective backend (gloo/NCCL/HCCL, :func:`collective_backend`); for NCCL also the transports it
chose, parsed from ``NCCL_DEBUG=INFO`` lines (:func:`parse_nccl_transports`), so a reviewer sees whether inter-node
traffic used InfiniBand, sockets or NVLink. :mod:`accelbench.cluster.multinode` launches the ranks (and re-exports
these names).

Example::

    record = launch_record(plan, "cuda", rendezvous, output)  # output: the ranks' log, with NCCL's INFO lines
"""

from __future__ import annotations

import re

from accelbench import backends
from accelbench.cluster.node_layout import NodePlan


def collective_backend(backend: str) -> str:
    """torch.distributed backend of a torch device type: NCCL (cuda), HCCL (hpu), gloo (cpu)."""
    return backends.get(backend).collective


# --------------------------------------------------------------------------- what NCCL chose
_VIA = re.compile(r"NCCL INFO Channel \d+/\d+ : \S+ -> \S+ (?:\[\w+\] )?via (\S+)")
_NET = re.compile(r"NCCL INFO Using network (\S+)")
_IFACE = re.compile(r"NCCL INFO NET/(\w+)\s*: Using (.+)$")
_VERSION = re.compile(r"NCCL version (\S+)")


def parse_nccl_transports(text: str) -> dict | None:
    """The transports NCCL chose, from ``NCCL_DEBUG=INFO`` output (None when there is no NCCL line).

    ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`` lines give the peer-to-peer paths (``P2P/...`` NVLink or PCIe
    inside a node, ``SHM`` host memory, ``NET/IB/...`` InfiniBand/RoCE, ``NET/Socket/...`` TCP between nodes), counted
    per transport; ``Using network IB`` and ``NET/IB : Using [0]mlx5_0:1/IB`` the network plugin and its devices;
    NVLS/CollNet lines whether NVLink SHARP was set up.

    Returns:
        ``{"version", "network": [..], "interfaces": {net: [..]}, "via": {transport: count}, "inter_node": [..],
        "nvls": bool}``; ``inter_node`` lists the ``NET/...`` transports (empty inside one node).
    """
    if "NCCL" not in text:
        return None
    via: dict[str, int] = {}
    nets, ifaces, version, nvls = [], {}, None, False
    for line in text.splitlines():
        if "NCCL" not in line:
            continue
        if m := _VIA.search(line):
            via[m.group(1)] = via.get(m.group(1), 0) + 1
        elif m := _NET.search(line):
            if m.group(1) not in nets:
                nets.append(m.group(1))
        elif m := _IFACE.search(line):
            ifaces.setdefault(m.group(1), [])
            if m.group(2).strip() not in ifaces[m.group(1)]:
                ifaces[m.group(1)].append(m.group(2).strip())
        elif version is None and (m := _VERSION.search(line)):
            version = m.group(1)
        if "NVLS" in line and (
            "Connected NVLS" in line or "NVLS comm" in line or "NVLS multicast support is available" in line
        ):
            nvls = True
    if not (via or nets or ifaces or version):
        return None
    inter = sorted({"/".join(k.split("/")[:2]) for k in via if k.startswith("NET/")})
    return {"version": version, "network": nets, "interfaces": ifaces, "via": via, "inter_node": inter, "nvls": nvls}


def launch_record(plan: NodePlan, backend: str, rendezvous: dict | None, output: str = "") -> dict:
    """What a result records about its launch: nodes, ranks per node, world size, launcher, rendezvous backend and
    endpoint, hosts, Slurm job, collective backend, and (NCCL) the parsed transports."""
    coll = collective_backend(backend)
    rdzv = rendezvous or {}
    return {
        "nodes": plan.nodes,
        "ranks_per_node": plan.per_node,
        "world_size": plan.devices,
        "launcher": rdzv.get("launcher")
        or (
            ("srun + torchrun" if plan.nodes > 1 else "torchrun --standalone")
            if rendezvous
            else "in-process"
            if plan.devices == 1
            else "not launched"
        ),
        "rendezvous_backend": rdzv.get("backend"),
        "rendezvous_endpoint": rdzv.get("endpoint"),
        "hosts": rdzv.get("hosts"),
        "slurm_job_id": rdzv.get("slurm_job_id"),
        "mpi_hostfile": rdzv.get("hostfile"),
        "collective_backend": coll if plan.devices > 1 else None,
        "nccl": parse_nccl_transports(output) if coll == "nccl" else None,
    }
