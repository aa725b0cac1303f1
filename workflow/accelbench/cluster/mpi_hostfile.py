"""Multi-node jobs under an MPI hostfile (a Kubeflow MPIJob's launcher): the twin of the ``srun`` + ``torchrun`` path.

On Kubernetes a rule spanning nodes runs as an MPIJob (:mod:`accelbench.cluster.kubernetes`): mpi-operator v2beta1
mounts a hostfile at ``/etc/mpi/hostfile`` in the launcher pod (one line per pod, ``<pod>.<job>.<namespace>.svc
slots=<slotsPerWorker>``, the launcher first with ``runLauncherAsWorker``) and sets ``OMPI_MCA_orte_default_hostfile``
to it (Intel MPI: ``I_MPI_HYDRA_HOST_FILE``, MPICH: ``HYDRA_HOST_FILE``) and ``K_MPI_JOB_ROLE=launcher``. Here
(:func:`allocation`) that environment is detected and the hostfile parsed (:func:`parse_hostfile`); the launch
(:func:`launch_command`, all argv lists) is, by ``ACCELBENCH_MPI_LAUNCH``:

* ``per-node`` (default): ``mpirun -n N --host h1:1,...,hN:1 --map-by ppr:1:node --bind-to none`` starts one
  ``torchrun --nnodes N --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint h1:PORT`` per node, as ``srun`` does
  under Slurm; each one's node rank is its ``OMPI_COMM_WORLD_RANK`` (:func:`node_main`), node 0 (the first host)
  hosts the c10d store;
* ``per-card``: ``mpirun -n N*P --host h1:P,... --map-by ppr:P:node --bind-to none`` starts every rank itself, as
  Study B's job files did (``mpirun -n 64 ... python train.py``): each process maps ``OMPI_COMM_WORLD_*`` to torch's
  ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and joins on ``MASTER_ADDR``/``MASTER_PORT`` = the first host
  (:func:`card_main`). Binding is left to the ranks' own placement (:mod:`.processes`), not Study B's
  ``--bind-to core --map-by socket:PE=6``.

Only Open MPI's ``mpirun`` is driven (the rendered MPIJob sets ``mpiImplementation: OpenMPI``). The result records
the launcher (``mpirun + torchrun`` or ``mpirun -n <N> (one process per card)``) and the hostfile.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import sys
from pathlib import Path

from accelbench.errors import ConfigError

HOSTFILE_VARS = ("OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE")
OPEN_MPI_VAR = HOSTFILE_VARS[0]
ROLE_VAR = "K_MPI_JOB_ROLE"  # mpi-operator v2beta1: "launcher" or "worker"
DEFAULT_HOSTFILE = "/etc/mpi/hostfile"
MODE_VAR = "ACCELBENCH_MPI_LAUNCH"
MODES = ("per-node", "per-card")
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
DEFAULT_PORT = 29400  # torchrun's default, where the first host is not this launcher (no free port can be picked)
# what mpirun exports to the other nodes (-x NAME): Open MPI forwards only its own variables unless told
FORWARD = re.compile(
    r"^(PATH|LD_LIBRARY_PATH|PYTHONPATH|PYTHONHASHSEED|VIRTUAL_ENV|HOME|HF_\w+|TORCH\w*|NCCL_\w+|HCCL_\w+|PT_\w+|"
    r"HABANA_\w+|CUDA_\w+|ACCELBENCH_\w+|OMP_NUM_THREADS|MKL_NUM_THREADS|OPENBLAS_NUM_THREADS|GOTO_NUM_THREADS|"
    r"VECLIB_MAXIMUM_THREADS|NUMEXPR_NUM_THREADS|GLOO_\w+)$"
)
_SLOTS = re.compile(r"^(slots|max_slots|max-slots)=(\S*)$")
# a host as mpirun takes it: a DNS name or IPv4 address (letters, digits, `-`, `.`, `_`), never starting with `-`
# (it would be read as an option, e.g. `--mca`); nothing a shell or mpirun's `--host a:1,b:1` list would split
_HOST = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})", re.ASCII)
_COUNT = re.compile(r"[0-9]{1,6}", re.ASCII)  # slots: ASCII digits (str.isdigit takes `²`), at most 999,999
MAX_HOSTFILE_BYTES = 4 * 2**20  # an MPIJob's hostfile: one ~60-byte line per pod (65,536 pods: ~4 MB)


def parse_hostfile(path: str | Path) -> list[tuple[str, int]]:
    """``[(host, slots), ...]`` of an MPI hostfile: Open MPI's ``host slots=N [max_slots=M]``, Hydra's ``host:N``
    or a bare ``host`` (1 slot); ``#`` starts a comment. Linear in the file's size; read through
    :func:`accelbench.core.files.read_text` (a plain file of at most :data:`MAX_HOSTFILE_BYTES`: a FIFO is refused,
    never waited on).

    Raises:
        ConfigError: unreadable, too big, empty, or a bad line: a host that is not a DNS name or address
            (:data:`_HOST`: no `;`, `$`, `,`, no leading `-`), slots not ASCII digits >= 1, a host listed twice (one
            line naming the file and the line number).
    """
    from accelbench.core.files import read_text

    text = read_text(path, "MPI hostfile", MAX_HOSTFILE_BYTES, ConfigError)
    hosts: list[tuple[str, int]] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        host, _, count = words[0].partition(":")
        slots = count or "1"
        for word in words[1:]:
            m = _SLOTS.match(word)
            if not m or count:
                raise ConfigError(f"MPI hostfile {path} line {n}: {_shown(raw)}: expected 'host slots=N' or 'host:N'")
            if m.group(1) == "slots":
                slots = m.group(2)
        if not _HOST.fullmatch(host):
            raise ConfigError(
                f"MPI hostfile {path} line {n}: {_shown(raw)}: host {_shown(host)} is not a host name or address "
                f"(letters, digits, '-', '.', '_'; not starting with '-')"
            )
        if not _COUNT.fullmatch(slots) or int(slots) < 1:
            raise ConfigError(f"MPI hostfile {path} line {n}: {_shown(raw)}: slots must be a whole number >= 1")
        if host in seen:
            raise ConfigError(f"MPI hostfile {path} line {n}: host {host!r} listed twice (first on line {seen[host]})")
        seen[host] = n
        hosts.append((host, int(slots)))
    if not hosts:
        raise ConfigError(f"MPI hostfile {path}: lists no host")
    return hosts


def _shown(text: str, width: int = 80) -> str:
    """``text`` stripped, quoted with control characters escaped (``repr``), cut to ``width`` characters."""
    text = text.strip()
    return repr(text if len(text) <= width else text[:width] + "...")


def allocation(env: dict | None = None) -> dict | None:
    """The MPI hostfile this process may launch over: ``{"hostfile", "source", "hosts", "slots", "mode", "mpirun",
    "error"}``; None where no hostfile variable is set and this is no MPIJob launcher (``K_MPI_JOB_ROLE``).
    A hostfile that cannot be used is returned with ``error`` (the one-line reason) instead of raising."""
    env = os.environ if env is None else env
    source = next((v for v in HOSTFILE_VARS if env.get(v)), None)
    if source is None and env.get(ROLE_VAR) != "launcher":
        return None
    path = env.get(source) if source else DEFAULT_HOSTFILE
    alloc = {"hostfile": path, "source": source or ROLE_VAR, "hosts": [], "slots": [], "error": None}
    alloc["mode"] = env.get(MODE_VAR) or MODES[0]
    alloc["mpirun"] = shutil.which("mpirun", path=env.get("PATH"))
    try:
        pairs = parse_hostfile(path)
        alloc["hosts"], alloc["slots"] = [h for h, _ in pairs], [s for _, s in pairs]
    except ConfigError as exc:
        alloc["error"] = str(exc)
    if alloc["mode"] not in MODES:
        alloc["error"] = f"{MODE_VAR}={alloc['mode']!r}: expected one of {', '.join(MODES)}"
    elif source not in (None, OPEN_MPI_VAR):
        alloc["error"] = f"{source} is set: only Open MPI's mpirun is driven (MPIJob mpiImplementation: OpenMPI)"
    return alloc


def allocation_reason(plan, alloc: dict) -> str | None:
    """Why a multi-node ``plan`` cannot start over ``alloc`` (None if it can): a bad hostfile or mode, no
    ``mpirun``, fewer hosts than nodes, or a host with fewer slots than ranks per node."""
    if plan.nodes == 1:
        return None
    need = f"{plan.devices} devices need {plan.nodes} nodes x {plan.per_node}"
    if alloc["error"]:
        return f"{need}; {alloc['error']}"
    if not alloc["mpirun"]:
        return f"{need}; `mpirun` is not on PATH (the MPIJob launcher's image needs Open MPI)"
    if len(alloc["hosts"]) < plan.nodes:
        return f"{need}; MPI hostfile {alloc['hostfile']} lists {len(alloc['hosts'])} host(s)"
    used = zip(alloc["hosts"][: plan.nodes], alloc["slots"][: plan.nodes])
    short = [f"{h} (slots={s})" for h, s in used if s < plan.per_node]
    if short:
        return f"{need}; MPI hostfile {alloc['hostfile']}: {short[0]} has fewer slots than {plan.per_node}"
    return None


def _is_this_host(host: str) -> bool:
    me = socket.gethostname().split(".")[0]
    return host in ("localhost", "127.0.0.1") or host.split(".")[0] == me


def launch_command(plan, worker_args: list[str], alloc: dict, env: dict) -> tuple[list[str], dict]:
    """The ``mpirun`` command starting ``plan.devices`` ranks of ``python -m accelbench <worker_args>`` over the
    hostfile's first ``plan.nodes`` hosts (``env``: the ranks' environment, whose variables it exports), and its
    rendezvous (``{"backend", "endpoint", "hosts", "slurm_job_id": None, "launcher", "hostfile", "mpi_mode"}``).

    Raises:
        ConfigError: :func:`allocation_reason` gives a reason.
    """
    reason = allocation_reason(plan, alloc)
    if reason:
        raise ConfigError(reason)
    hosts = alloc["hosts"][: plan.nodes]
    port = free_port() if _is_this_host(hosts[0]) else DEFAULT_PORT
    endpoint = f"{hosts[0]}:{port}"
    per_card = alloc["mode"] == "per-card"
    per_host = plan.per_node if per_card else 1
    mpirun = [alloc["mpirun"], "-n", str(plan.nodes * per_host), "--host", ",".join(f"{h}:{per_host}" for h in hosts)]
    mpirun += ["--map-by", f"ppr:{per_host}:node", "--bind-to", "none", "--wdir", os.getcwd()]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")  # MPIJob pods run as root
    for name in sorted(n for n in env if FORWARD.match(n)):
        mpirun += ["-x", name]
    wrapper = [sys.executable, "-m", __name__]
    worker = ["-m", "accelbench", *worker_args]
    if per_card:
        cmd = [*mpirun, *wrapper, "card", f"--master={endpoint}", "--", sys.executable, *worker]
        launcher, backend = f"mpirun -n {plan.devices} (one process per card)", "env (MASTER_ADDR:MASTER_PORT)"
    else:
        torchrun = [
            f"--nnodes={plan.nodes}",
            f"--nproc-per-node={plan.per_node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id=accelbench-mpi-{secrets.token_hex(4)}",
            "--max-restarts=0",
        ]
        cmd = [*mpirun, *wrapper, "node", "--", *torchrun, *worker]
        launcher, backend = "mpirun + torchrun", "c10d"
    rdzv = {"backend": backend, "endpoint": endpoint, "hosts": hosts, "slurm_job_id": None, "launcher": launcher}
    return cmd, {**rdzv, "hostfile": alloc["hostfile"], "mpi_mode": alloc["mode"]}


def free_port() -> int:
    """A TCP port free on this host now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def mpi_rank(env: dict, key: str = "RANK") -> int:
    """This process's MPI rank (``OMPI_COMM_WORLD_RANK``, else PMIx/PMI's).

    Raises:
        ConfigError: none is set (not started by mpirun).
    """
    for var in RANK_VARS if key == "RANK" else (f"OMPI_COMM_WORLD_{key}",):
        if str(env.get(var, "")).isdigit():
            return int(env[var])
    raise ConfigError(f"no MPI {key.lower()} in the environment ({', '.join(RANK_VARS)}): not started by mpirun")


def node_argv(env: dict, torchrun_args: list[str]) -> list[str]:
    """The torchrun of one node: node rank = this process's MPI rank; node 0 hosts the c10d store (c10d still
    assigns the ranks inside the group)."""
    rank = mpi_rank(env)
    rdzv = [f"--node-rank={rank}", f"--rdzv-conf=is_host={'true' if rank == 0 else 'false'}"]
    return [sys.executable, "-m", "torch.distributed.run", *rdzv, *torchrun_args]


def card_env(env: dict, master: str) -> dict:
    """torch's rank variables of one per-card process, from Open MPI's, joining on ``master`` (``host:port``)."""
    host, _, port = master.rpartition(":")
    return {
        **env,
        "RANK": str(mpi_rank(env)),
        "WORLD_SIZE": str(mpi_rank(env, "SIZE")),
        "LOCAL_RANK": str(mpi_rank(env, "LOCAL_RANK")),
        "LOCAL_WORLD_SIZE": str(mpi_rank(env, "LOCAL_SIZE")),
        "MASTER_ADDR": host,
        "MASTER_PORT": port,
    }


def main(argv: list[str]) -> None:
    """``node -- <torchrun args>`` or ``card --master=H:P -- <command>``: what mpirun runs in each process."""
    mode, rest = argv[0], argv[1:]
    master = next((a.split("=", 1)[1] for a in rest[: rest.index("--")] if a.startswith("--master=")), None)
    rest = rest[rest.index("--") + 1 :]
    try:
        if mode == "node":
            cmd, env = node_argv(os.environ, rest), dict(os.environ)
        else:
            cmd, env = rest, card_env(dict(os.environ), master)
    except ConfigError as exc:
        sys.exit(f"accelbench: {exc}")
    os.execve(cmd[0], cmd, env)


if __name__ == "__main__":
    main(sys.argv[1:])
