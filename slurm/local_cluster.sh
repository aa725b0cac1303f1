#!/usr/bin/env bash
# A real single-node Slurm on this machine (Debian's slurm-wlm 22.05 + munge), for trying `--profile slurm` and for CI.
#
#   slurm/local_cluster.sh up   [STATE_DIR]   # install (apt, root) if missing, start munged/slurmctld/slurmd, wait idle
#   slurm/local_cluster.sh down [STATE_DIR]   # stop the daemons this script started (by their PIDs), nothing else
#
# STATE_DIR (default /tmp/accelbench-slurm) holds the PID files, spool/state folders and the daemon logs. The config goes
# to Slurm's default path /etc/slurm/slurm.conf, because snakemake-executor-plugin-slurm-jobstep drops SLURM_CONF from
# the job step's environment (srun inside the job would find no config); an existing slurm.conf that this script did
# not write is never touched (the script stops instead), and `down` removes the one it wrote.
# Accounting is off (no slurmdbd): submit with `--slurm-status-command squeue --slurm-no-account`; MinJobAge=300 keeps
# finished jobs visible to squeue long enough for the executor to see them end. The node is NodeName=localhost.
# ACCELBENCH_SLURM_NODES=N (N > 1) instead emulates N nodes n1..nN on this host, one slurmd each (NodeHostname=localhost,
# ports 17001..; Debian's slurmd supports several per host), sharing the cores and memory: multi-node jobs (`--nodes N`).
set -euo pipefail

cmd=${1:-}
STATE=${2:-${ACCELBENCH_SLURM_DIR:-/tmp/accelbench-slurm}}
NODES=${ACCELBENCH_SLURM_NODES:-1}
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || { echo "local_cluster.sh: ACCELBENCH_SLURM_NODES must be a positive integer, not '$NODES'" >&2; exit 1; }
CONF=/etc/slurm/slurm.conf
MARK="# written by slurm/local_cluster.sh"
MUNGE_SOCKET=/run/munge/munge.socket.2   # the standard socket: slurm's auth/munge plugin only looks there

die() { echo "local_cluster.sh: $*" >&2; exit 1; }

alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_if_missing() {
    command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v sbatch >/dev/null && return 0
    [[ $(id -u) -eq 0 ]] || die "slurm-wlm/munge are not installed and this is not root: apt-get install slurm-wlm munge"
    echo "installing slurm-wlm and munge (apt)..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null \
        || die "apt-get install slurm-wlm munge failed"
}

start_munge() {
    if [[ -S "$MUNGE_SOCKET" ]] && munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        echo "munged already answers on $MUNGE_SOCKET: using it (not ours, left running)"
        return 0
    fi
    [[ -s /etc/munge/munge.key ]] || mungekey --create --keyfile=/etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
    chown munge:munge /etc/munge/munge.key && chmod 0600 /etc/munge/munge.key
    # munged runs as the munge user, which cannot write into a root-only STATE: its log and PID file go to /run/munge
    setsid setpriv --reuid=munge --regid=munge --clear-groups munged --foreground --force \
        --log-file=/run/munge/accelbench-munged.log --pid-file=/run/munge/accelbench-munged.pid \
        </dev/null >>"$STATE/munged.out" 2>&1 &
    echo $! >"$STATE/munged.pid"
    for _ in $(seq 100); do
        alive "$STATE/munged.pid" || die "munged exited (log: /run/munge/accelbench-munged.log, $STATE/munged.out)"
        [[ -S "$MUNGE_SOCKET" ]] && munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "munged did not answer on $MUNGE_SOCKET (log: /run/munge/accelbench-munged.log)"
}

write_conf() {
    local cpus mem_mib
    cpus=$(nproc)
    mem_mib=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
    mkdir -p "$STATE/ctld" "$STATE/spool" "$(dirname "$CONF")"
    if [[ -e "$CONF" ]] && ! head -1 "$CONF" | grep -qF "$MARK"; then
        die "$CONF exists and was not written by this script: this machine already has a Slurm configuration"
    fi
    local other
    other=$( [[ -e "$CONF" ]] && head -1 "$CONF" | sed -n 's/.*; state in //p' || true)
    if [[ -n "$other" && "$other" != "$STATE" ]] && alive "$other/slurmctld.pid"; then
        die "another local cluster is up (state in $other): slurm/local_cluster.sh down $other first"
    fi
    local node_lines="NodeName=localhost CPUs=$cpus RealMemory=$mem_mib State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP"
    if (( NODES > 1 )); then  # emulated nodes: per-node spool/pid/log files (%n), the host's cores and memory split
        (( cpus >= NODES )) || die "ACCELBENCH_SLURM_NODES=$NODES needs at least $NODES cores (this host has $cpus)"
        mkdir -p $(printf "$STATE/spool/n%d " $(seq "$NODES"))
        node_lines="NodeName=n[1-$NODES] NodeHostname=localhost Port=17001-$(( 17000 + NODES )) CPUs=$(( cpus / NODES )) RealMemory=$(( mem_mib / NODES )) State=UNKNOWN
PartitionName=debug Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
    fi
    local spool="$STATE/spool" dpid="$STATE/slurmd.pidfile" dlog="$STATE/slurmd.log"
    (( NODES > 1 )) && spool="$STATE/spool/%n" dpid="$STATE/slurmd.%n.pidfile" dlog="$STATE/slurmd.%n.log"
    cat >"$CONF" <<EOF
$MARK: one node (this machine), no accounting; state in $STATE
ClusterName=accelbench
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$spool
SlurmctldPidFile=$STATE/slurmctld.pidfile
SlurmdPidFile=$dpid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$dlog
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=300
SlurmdTimeout=60
$node_lines
EOF
}

wait_nodes() {  # emulated nodes: wait until all $2 of $1 are idle
    local t0=$SECONDS idle=0 f
    while (( SECONDS - t0 < 90 )); do
        alive "$STATE/slurmctld.pid" || die "slurmctld exited (log: $STATE/slurmctld.log, $STATE/slurmctld.out)"
        for f in "$STATE"/slurmd.n*.pid; do alive "$f" || die "slurmd exited ($f; logs in $STATE)"; done
        idle=$(sinfo -h -N -n "$1" -o %T 2>/dev/null | grep -c '^idle' || true)
        (( idle == $2 )) && { echo "slurm up in $(( SECONDS - t0 )) s: $2 nodes $1 idle ($CONF, state in $STATE)"; return 0; }
        scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1 || true
        sleep 1
    done
    die "nodes $1 not all idle after 90 s ($idle idle; logs in $STATE)"
}

up() {
    install_if_missing
    mkdir -p "$STATE"
    if alive "$STATE/slurmctld.pid" && { alive "$STATE/slurmd.pid" || alive "$STATE/slurmd.n1.pid"; }; then
        echo "already up (state: $STATE)"; return 0
    fi
    start_munge
    write_conf
    setsid slurmctld -D -c -i -f "$CONF" </dev/null >>"$STATE/slurmctld.out" 2>&1 &
    echo $! >"$STATE/slurmctld.pid"
    if (( NODES > 1 )); then
        local i
        for i in $(seq "$NODES"); do
            setsid slurmd -D -N "n$i" -f "$CONF" </dev/null >>"$STATE/slurmd.n$i.out" 2>&1 &
            echo $! >"$STATE/slurmd.n$i.pid"
        done
        wait_nodes "n[1-$NODES]" "$NODES"; return
    fi
    setsid slurmd -D -N localhost -f "$CONF" </dev/null >>"$STATE/slurmd.out" 2>&1 &
    echo $! >"$STATE/slurmd.pid"
    local t0=$SECONDS state=""
    while (( SECONDS - t0 < 90 )); do
        alive "$STATE/slurmctld.pid" || die "slurmctld exited (log: $STATE/slurmctld.log, $STATE/slurmctld.out)"
        alive "$STATE/slurmd.pid" || die "slurmd exited (log: $STATE/slurmd.log, $STATE/slurmd.out)"
        state=$(sinfo -h -N -n localhost -o %T 2>/dev/null || true)
        case "$state" in
            idle*|mixed*|allocated*) echo "slurm up in $(( SECONDS - t0 )) s: node localhost $state ($CONF, state in $STATE)"; return 0 ;;
            down*|drain*) scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 1
    done
    die "node localhost not idle after 90 s (state: ${state:-none}; logs in $STATE)"
}

down() {
    local name pid
    for name in $(cd "$STATE" 2>/dev/null && ls slurmd.n*.pid 2>/dev/null | sed 's/\.pid$//') slurmd slurmctld munged; do
        [[ -s "$STATE/$name.pid" ]] || continue
        pid=$(cat "$STATE/$name.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$STATE/$name.pid"
    done
    if [[ -e "$CONF" ]] && head -1 "$CONF" | grep -qF "$MARK"; then rm -f "$CONF"; fi
    echo "slurm down (state kept in $STATE)"
}

case "$cmd" in
    up) up ;;
    down) down ;;
    *) die "usage: $0 up|down [STATE_DIR]" ;;
esac
