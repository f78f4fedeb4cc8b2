#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for trying `wattlab sweep --executor slurm`
# on a laptop and for CI. Debian/Ubuntu, as root (or through sudo), no systemd needed.
#
#   sudo scripts/slurm-localhost.sh          # install slurm-wlm + munge, start the daemons
#   sudo scripts/slurm-localhost.sh stop     # stop the daemons this script started
#
# What it does: apt-get installs slurm-wlm and munge (only when missing), writes
# /etc/slurm/slurm.conf for one node (this host, every CPU, partition "debug"), starts munged,
# slurmctld and slurmd directly (no systemd), and waits until the node is idle. Running it again
# when the cluster is already up does nothing. No accounting database: `sacct` is not configured,
# so wattlab's SLURM-energy column stays empty here.
#
# When the cluster cannot be started, the script says why on stderr, writes the same sentence
# to the reason file ($WATTLAB_SLURM_REASON_FILE, default /tmp/wattlab-slurm/unavailable.txt)
# and exits 1. The SLURM tests skip only when that file exists (see .ci/run).
set -uo pipefail

REASON_FILE="${WATTLAB_SLURM_REASON_FILE:-/tmp/wattlab-slurm/unavailable.txt}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
LOG_DIR=/var/log/slurm
SPOOL_CTLD=/var/spool/slurmctld
SPOOL_D=/var/spool/slurmd
WAIT_S="${WATTLAB_SLURM_WAIT_S:-60}"

log() { echo "slurm-localhost: $*" >&2; }

fail() {
    log "FAILED: $*"
    mkdir -p "$(dirname "$REASON_FILE")"
    echo "$*" >"$REASON_FILE"
    exit 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

node_state() {
    # the first node's state (idle, mix, alloc, down*, ...), or nothing when slurmctld is down
    timeout 10 sinfo -h -N -o '%t' 2>/dev/null | head -n1
}

cluster_up() {
    case "$(node_state)" in
        idle | mix | alloc | comp | idle~) return 0 ;;
        *) return 1 ;;
    esac
}

stop_daemons() {
    for name in slurmd slurmctld; do
        pidfile="/run/$name.pid"
        if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            as_root kill "$(cat "$pidfile")" && log "stopped $name"
        fi
    done
}

if [ "${1:-start}" = "stop" ]; then
    stop_daemons
    exit 0
fi
[ "${1:-start}" = "start" ] || { log "usage: $0 [start|stop]"; exit 2; }

rm -f "$REASON_FILE"

if command -v sinfo >/dev/null 2>&1 && cluster_up; then
    log "already up: $(sinfo -h -o '%P %D %t' | head -n1)"
    exit 0
fi

# 1. packages (only when missing; apt-get update only when installing)
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || fail "apt-get not found: this script needs Debian or Ubuntu."
    log "installing slurm-wlm and munge with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # no systemd here: keep the packages from starting daemons while they are installed
    policy_created=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
        as_root chmod +x /usr/sbin/policy-rc.d
        policy_created=1
    fi
    as_root apt-get update -qq >/dev/null || fail "apt-get update failed (no package registry reachable?)."
    as_root apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null ||
        fail "apt-get install slurm-wlm munge failed."
    [ "$policy_created" = 1 ] && as_root rm -f /usr/sbin/policy-rc.d
fi

# 2. munge: a key, its run folder, the daemon
if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null 2>&1; then
        as_root mungekey --create --keyfile=/etc/munge/munge.key --force >/dev/null ||
            fail "mungekey could not create /etc/munge/munge.key."
    else
        as_root dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
fi
as_root mkdir -p /run/munge /var/log/munge /var/lib/munge
as_root chown munge:munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
as_root chmod 0400 /etc/munge/munge.key
as_root chmod 0755 /run/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    as_root runuser -u munge -- /usr/sbin/munged --force ||
        fail "munged did not start (see /var/log/munge/munged.log)."
    for _ in $(seq 1 20); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.5
    done
    munge -n </dev/null | unmunge >/dev/null 2>&1 || fail "munge credentials do not round-trip."
fi

# 3. slurm.conf for this one node (rewritten only when it is not ours)
host="$(hostname -s)"
node_line="$(slurmd -C 2>/dev/null | grep '^NodeName=' | sed 's/ UpTime=.*//')"
[ -n "$node_line" ] || fail "slurmd -C could not describe this node."
# leave 512 MB to the rest of the machine so slurmd does not mark the node down for memory
mem_mb="$(echo "$node_line" | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')"
if [ -n "$mem_mb" ] && [ "$mem_mb" -gt 1024 ]; then
    node_line="$(echo "$node_line" | sed "s/RealMemory=[0-9]*/RealMemory=$((mem_mb - 512))/")"
fi
as_root mkdir -p "$CONF_DIR" "$LOG_DIR" "$SPOOL_CTLD" "$SPOOL_D"
if [ ! -f "$CONF" ] || grep -q '^# written by wattlab scripts/slurm-localhost.sh' "$CONF"; then
    as_root tee "$CONF" >/dev/null <<EOF
# written by wattlab scripts/slurm-localhost.sh: one node, this host, for tests and trials
ClusterName=wattlab-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=$SPOOL_CTLD
SlurmdSpoolDir=$SPOOL_D
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
MinJobAge=300
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
else
    log "keeping the existing $CONF (not written by this script)"
fi

# 4. the daemons, started directly; -i ignores stale state from an earlier container
if ! { [ -f /run/slurmctld.pid ] && kill -0 "$(cat /run/slurmctld.pid)" 2>/dev/null; }; then
    log "starting slurmctld"
    as_root slurmctld -i || fail "slurmctld did not start (see $LOG_DIR/slurmctld.log)."
fi
if ! { [ -f /run/slurmd.pid ] && kill -0 "$(cat /run/slurmd.pid)" 2>/dev/null; }; then
    log "starting slurmd"
    as_root slurmd || fail "slurmd did not start (see $LOG_DIR/slurmd.log)."
fi

# 5. wait for the node
state=""
for _ in $(seq 1 "$WAIT_S"); do
    state="$(node_state)"
    case "$state" in
        idle | mix | alloc) break ;;
        down* | drain* | inval*) as_root scontrol update nodename="$host" state=resume 2>/dev/null ;;
    esac
    sleep 1
done
cluster_up || fail "the node did not become idle within ${WAIT_S}s (state '${state:-none}'; see $LOG_DIR)."
log "up: $(sinfo -h -o '%P %D %t %c CPUs' | head -n1)"
