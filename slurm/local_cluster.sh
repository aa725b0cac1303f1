#!/usr/bin/env bash
# A real single-node Slurm on this machine (Debian's slurm-wlm 22.05 + munge), for trying `--profile slurm` and for CI.
#
#   slurm/local_cluster.sh up   [STATE_DIR]   # start munged/slurmctld/slurmd (+ MariaDB/slurmdbd), wait until idle
#   slurm/local_cluster.sh down [STATE_DIR]   # stop the daemons this script started (by their PIDs), nothing else
#
# Environment:
#   ACCELBENCH_CI_APT=1          let `up` apt-get install what is missing (root, Debian): slurm-wlm, munge, and
#                                     with accounting slurmdbd + mariadb-server. Unset: a missing package stops `up`
#                                     with the apt-get line to run (.ci/run sets it).
#   ACCELBENCH_SLURM_ACCOUNTING=1     real accounting: MariaDB (datadir in STATE_DIR) + slurmdbd, the cluster, account
#                                     `accelbench` and the calling user (its default account) registered with sacctmgr,
#                                     AccountingStorageEnforce=associations. `sacct` status checks and `-A accelbench`
#                                     then work as on a production cluster; unset: no accounting (use `squeue` status).
#   ACCELBENCH_SLURM_GPUS=N           the node offers N `gpu` GRES with no GPU behind them (device files: links to
#                                     /dev/null), so that jobs of a CUDA system are scheduled here and fail on the node
#                                     with "no accelerator".
#
# STATE_DIR (default /tmp/accelbench-slurm) holds the PID files, spool/state folders, the database and the daemon logs.
# The config goes to Slurm's default path /etc/slurm/slurm.conf, because snakemake-executor-plugin-slurm-jobstep drops
# SLURM_CONF from the job step's environment (srun inside the job would find no config); an existing slurm.conf that
# this script did not write is never touched (the script stops instead), and `down` removes the one it wrote.
# Ports: Slurm's defaults (6817-6819), or the next free ones where another daemon listens already. MinJobAge=300 keeps
# finished jobs visible to `squeue` long enough for the executor to see them end. The node is NodeName=localhost.
# ACCELBENCH_SLURM_NODES=N (N > 1) instead emulates N nodes n1..nN on this host, one slurmd each (NodeHostname=localhost,
# ports 17001..; Debian's slurmd supports several per host), sharing the cores and memory: multi-node jobs (`--nodes N`).
set -euo pipefail
# the daemons (munged, slurmctld, slurmd, slurmdbd, mariadbd) live in sbin, which a non-login root shell or CI job may
# not have on PATH (then apt_install would reinstall them and setpriv would not find munged)
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" ;; esac
export PATH

cmd=${1:-}
STATE=${2:-${ACCELBENCH_SLURM_DIR:-/tmp/accelbench-slurm}}
NODES=${ACCELBENCH_SLURM_NODES:-1}
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || { echo "local_cluster.sh: ACCELBENCH_SLURM_NODES must be a positive integer, not '$NODES'" >&2; exit 1; }
CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf       # with ACCELBENCH_SLURM_GPUS
DBD_CONF=/etc/slurm/slurmdbd.conf    # with ACCELBENCH_SLURM_ACCOUNTING (slurmdbd reads it beside slurm.conf)
MARK="# written by slurm/local_cluster.sh"
MUNGE_SOCKET=/run/munge/munge.socket.2   # the standard socket: slurm's auth/munge plugin only looks there

die() { echo "local_cluster.sh: $*" >&2; exit 1; }

alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

apt_install() {  # apt_install COMMAND... -- PACKAGE...: install PACKAGEs unless every COMMAND is on PATH
    local cmds=() pkgs=() seen_sep=0 c missing=0
    for c in "$@"; do
        if [[ $c == -- ]]; then seen_sep=1; elif (( seen_sep )); then pkgs+=("$c"); else cmds+=("$c"); fi
    done
    for c in "${cmds[@]}"; do command -v "$c" >/dev/null || missing=1; done
    (( missing )) || return 0
    [[ ${ACCELBENCH_CI_APT:-} == 1 ]] \
        || die "not installed: ${pkgs[*]} (missing one of: ${cmds[*]}). Install them (root, Debian): apt-get install ${pkgs[*]}; or set ACCELBENCH_CI_APT=1 to let this script do it"
    [[ $(id -u) -eq 0 ]] || die "${pkgs[*]} are not installed and this is not root: apt-get install ${pkgs[*]}"
    echo "installing ${pkgs[*]} (apt)..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null || die "apt-get install ${pkgs[*]} failed"
}

install_if_missing() {
    apt_install slurmctld slurmd munged sbatch -- slurm-wlm munge
    if accounting; then
        apt_install slurmdbd mariadbd mariadb-install-db -- slurmdbd mariadb-server
    fi
}

accounting() { [[ ${ACCELBENCH_SLURM_ACCOUNTING:-} == 1 ]]; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {  # free_port FIRST: FIRST or the next port nobody listens on
    local port=$1
    while ! port_free "$port"; do port=$(( port + 10 )); done
    echo "$port"
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

# Ours when its first line is MARK: the only Slurm files this script writes, rewrites or removes.
ours() { [[ -e "$1" ]] && head -1 "$1" | grep -qF "$MARK"; }

write_conf() {
    local cpus mem_mib gpus=${ACCELBENCH_SLURM_GPUS:-0}
    cpus=$(nproc)
    mem_mib=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
    mkdir -p "$STATE/ctld" "$STATE/spool" "$(dirname "$CONF")"
    local f
    for f in "$CONF" "$GRES_CONF" "$DBD_CONF"; do
        if [[ -e "$f" ]] && ! ours "$f"; then
            die "$f exists and was not written by this script: this machine already has a Slurm configuration"
        fi
    done
    local other
    other=$( [[ -e "$CONF" ]] && head -1 "$CONF" | sed -n 's/.*; state in //p' || true)
    if [[ -n "$other" && "$other" != "$STATE" ]] && alive "$other/slurmctld.pid"; then
        die "another local cluster is up (state in $other): slurm/local_cluster.sh down $other first"
    fi
    local acct="AccountingStorageType=accounting_storage/none"
    if accounting; then
        acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStorageEnforce=associations"
    fi
    local gres_types="" node_gres=""
    rm -f "$GRES_CONF"
    if (( gpus > 0 )); then
        gres_types="GresTypes=gpu"
        node_gres="Gres=gpu:$gpus"
        # Slurm drops a GPU without a device file: each is a link to /dev/null (no TaskPlugin enforces it)
        mkdir -p "$STATE/gpus"
        for (( i = 0; i < gpus; i++ )); do ln -sfn /dev/null "$STATE/gpus/gpu$i"; done
        local gres_nodes=NodeName=localhost
        (( NODES > 1 )) && gres_nodes="NodeName=n[1-$NODES]"
        printf '%s: %s gpu GRES without devices (links to /dev/null)\n%s Name=gpu File=%s/gpus/gpu[0-%s]\n' \
            "$MARK" "$gpus" "$gres_nodes" "$STATE" "$(( gpus - 1 ))" >"$GRES_CONF"
    fi
    local node_lines="NodeName=localhost CPUs=$cpus RealMemory=$mem_mib $node_gres State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP"
    if (( NODES > 1 )); then  # emulated nodes: per-node spool/pid/log files (%n), the host's cores and memory split
        (( cpus >= NODES )) || die "ACCELBENCH_SLURM_NODES=$NODES needs at least $NODES cores (this host has $cpus)"
        mkdir -p $(printf "$STATE/spool/n%d " $(seq "$NODES"))
        node_lines="NodeName=n[1-$NODES] NodeHostname=localhost Port=17001-$(( 17000 + NODES )) CPUs=$(( cpus / NODES )) RealMemory=$(( mem_mib / NODES )) $node_gres State=UNKNOWN
PartitionName=debug Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
    fi
    local spool="$STATE/spool" dpid="$STATE/slurmd.pidfile" dlog="$STATE/slurmd.log"
    (( NODES > 1 )) && spool="$STATE/spool/%n" dpid="$STATE/slurmd.%n.pidfile" dlog="$STATE/slurmd.%n.log"
    cat >"$CONF" <<EOF
$MARK: one node (this machine), accounting $(accounting && echo "slurmdbd" || echo "none"); state in $STATE
ClusterName=accelbench
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
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
$acct
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=300
SlurmdTimeout=60
$gres_types
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

# MariaDB (its own datadir and socket in STATE, TCP on 127.0.0.1 only) and slurmdbd, then the cluster, the account
# `accelbench` and the calling user registered with sacctmgr.
start_accounting() {
    local db=$STATE/mariadb sock=$STATE/mariadb.sock user
    user=$(id -un)
    if [[ ! -d $db/mysql ]]; then
        mariadb-install-db --no-defaults --user="$user" --datadir="$db" --auth-root-authentication-method=socket \
            >"$STATE/mariadb-install.out" 2>&1 || die "mariadb-install-db failed (log: $STATE/mariadb-install.out)"
    fi
    DB_PORT=$(free_port 3306)
    setsid mariadbd --no-defaults --user="$user" --datadir="$db" --socket="$sock" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --pid-file="$STATE/mariadbd.pidfile" --log-error="$STATE/mariadbd.log" \
        </dev/null >>"$STATE/mariadbd.out" 2>&1 &
    echo $! >"$STATE/mariadbd.pid"
    local t0=$SECONDS
    until mariadb --no-defaults --socket="$sock" -u root -e "SELECT 1" >/dev/null 2>&1; do
        alive "$STATE/mariadbd.pid" || die "mariadbd exited (log: $STATE/mariadbd.log)"
        (( SECONDS - t0 < 60 )) || die "mariadbd did not answer within 60 s (log: $STATE/mariadbd.log)"
        sleep 0.5
    done
    mariadb --no-defaults --socket="$sock" -u root -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'accelbench';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "could not create the slurm database user"
    cat >"$DBD_CONF" <<EOF
$MARK: slurmdbd of the local cluster; state in $STATE
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=$user
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=accelbench
StorageLoc=slurm_acct_db
LogFile=$STATE/slurmdbd.log
PidFile=$STATE/slurmdbd.pidfile
EOF
    chmod 0600 "$DBD_CONF"
    setsid slurmdbd -D </dev/null >>"$STATE/slurmdbd.out" 2>&1 &
    echo $! >"$STATE/slurmdbd.pid"
    t0=$SECONDS
    until sacctmgr -n list cluster >/dev/null 2>&1; do
        alive "$STATE/slurmdbd.pid" || die "slurmdbd exited (log: $STATE/slurmdbd.log, $STATE/slurmdbd.out)"
        (( SECONDS - t0 < 60 )) || die "slurmdbd did not answer within 60 s (log: $STATE/slurmdbd.log)"
        sleep 0.5
    done
    sacctmgr -i add cluster accelbench >/dev/null 2>&1 || true   # already there on a second `up`
    sacctmgr -i add account accelbench Cluster=accelbench Description=accelbench Organization=accelbench \
        >/dev/null 2>&1 || true
    sacctmgr -i add user "$user" Account=accelbench DefaultAccount=accelbench Cluster=accelbench >/dev/null 2>&1 || true
    sacctmgr -n -P list associations user="$user" format=account | grep -qx accelbench \
        || die "sacctmgr did not register user $user in account accelbench (log: $STATE/slurmdbd.log)"
}

up() {
    install_if_missing
    mkdir -p "$STATE"
    if alive "$STATE/slurmctld.pid" && { alive "$STATE/slurmd.pid" || alive "$STATE/slurmd.n1.pid"; }; then
        echo "already up (state: $STATE)"; return 0
    fi
    start_munge
    CTLD_PORT=$(free_port 6817); SLURMD_PORT=$(free_port $(( CTLD_PORT + 1 ))); DBD_PORT=$(free_port $(( CTLD_PORT + 2 )))
    write_conf
    if accounting; then start_accounting; fi
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
            idle*|mixed*|allocated*)
                echo "slurm up in $(( SECONDS - t0 )) s: node localhost $state ($CONF, ports $CTLD_PORT/$SLURMD_PORT," \
                     "accounting $(accounting && echo "slurmdbd:$DBD_PORT mariadb:$DB_PORT" || echo none)," \
                     "gpu GRES ${ACCELBENCH_SLURM_GPUS:-0}, state in $STATE)"
                return 0 ;;
            down*|drain*) scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 1
    done
    die "node localhost not idle after 90 s (state: ${state:-none}; logs in $STATE)"
}

down() {
    local name pid
    for name in $(cd "$STATE" 2>/dev/null && ls slurmd.n*.pid 2>/dev/null | sed 's/\.pid$//') slurmd slurmctld slurmdbd mariadbd munged; do
        [[ -s "$STATE/$name.pid" ]] || continue
        pid=$(cat "$STATE/$name.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$STATE/$name.pid"
    done
    local f
    for f in "$CONF" "$GRES_CONF" "$DBD_CONF"; do if ours "$f"; then rm -f "$f"; fi; done
    echo "slurm down (state kept in $STATE)"
}

case "$cmd" in
    up) up ;;
    down) down ;;
    *) die "usage: $0 up|down [STATE_DIR]" ;;
esac
