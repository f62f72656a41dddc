#!/usr/bin/env bash
# Start a real single-host Slurm cluster (Debian's Slurm 22.05) for tests and CI.
#
#   tools/slurm-local/up.sh        # install if needed, configure, start, wait until ready
#
# Idempotent: daemons already running (recorded PIDs still alive) are left alone.
# Sets up: munged, mariadbd + slurmdbd (so sacct works), slurmctld, and N slurmd
# "virtual nodes" n1..nN on this host, each with fake GPUs (gres) and declared CPUs.
# Writes /etc/slurm/{slurm,gres,slurmdbd,cgroup}.conf so client commands work from
# any shell; everything else (state, logs, PIDs, DB) lives in $DLBENCH_SLURM_DIR.
# Where enroot and pyxis are installed (tools/hpc-runtimes.sh), loads pyxis (pyxis.sh).
# Stop with tools/slurm-local/down.sh. See README.md beside this file.
set -euo pipefail

STATE=${DLBENCH_SLURM_DIR:-/tmp/dlbench-slurm}
NNODES=${DLBENCH_SLURM_NODES:-2}
NODE_CPUS=${DLBENCH_SLURM_CPUS:-4}
NODE_GPUS=${DLBENCH_SLURM_GPUS:-2}
NODE_MEM=${DLBENCH_SLURM_MEM_MB:-8000}
PORT_BASE=${DLBENCH_SLURM_PORT_BASE:-6817}
PARTITION=${DLBENCH_SLURM_PARTITION:-debug}
CLUSTER=${DLBENCH_SLURM_CLUSTER:-dlbench}
CGROUP=${DLBENCH_SLURM_CGROUP:-auto}     # 1: task/cgroup memory limits (OUT_OF_MEMORY); 0: off
WAIT=${DLBENCH_SLURM_WAIT:-60}          # seconds to wait for each daemon
ETC=/etc/slurm

CTLD_PORT=$PORT_BASE
DBD_PORT=$((PORT_BASE + 2))
MYSQL_PORT=$((PORT_BASE + 3))
NODE_PORT0=$((PORT_BASE + 10))          # n1 = +11, n2 = +12, ...
DB_NAME=dlbench_slurm_acct
DB_USER=slurm
DB_PASS=dlbench-slurm-local

PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)

T0=$EPOCHREALTIME
tlast=$T0
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "[slurm-local $(since "$T0")s] $*"; }
lap() { printf '[slurm-local] timing: %-18s %5ss\n' "$1" "$(since "$tlast")"; tlast=$EPOCHREALTIME; }
die() {  echo "[slurm-local] ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"

# ---------------------------------------------------------------- helpers
# alive NAME: true if $STATE/pids/NAME holds a live PID whose command matches NAME's binary
alive() {
    local f=$STATE/pids/$1 pid
    [ -s "$f" ] || return 1
    pid=$(cat "$f")
    [ -d "/proc/$pid" ] || return 1
    # guard against PID reuse: the process must be the expected program
    local want=$1; want=${want%%-*}     # slurmd-n1 -> slurmd
    grep -q -- "$want" "/proc/$pid/cmdline" 2>/dev/null
}

# wait_for DESC CMD...: retry CMD every 0.2 s up to $WAIT s. If $WATCH names a daemon
# (pids/ entry) give up as soon as it dies, and show the end of $WATCHLOG.
WATCH='' WATCHLOG=''
wait_for() {
    local desc=$1; shift
    local end=$(( $(date +%s) + WAIT ))
    until "$@" >/dev/null 2>&1; do
        local why=
        [ -n "$WATCH" ] && ! alive "$WATCH" && why="$WATCH exited"
        [ -z "$why" ] && [ "$(date +%s)" -ge "$end" ] && why="timed out after ${WAIT}s"
        if [ -n "$why" ]; then
            [ -n "$WATCHLOG" ] && [ -e "$WATCHLOG" ] && tail -n 5 "$WATCHLOG" >&2
            die "$why waiting for $desc (logs: $STATE/log)"
        fi
        sleep 0.2
    done
    WATCH='' WATCHLOG=''
}

# record_pidfile NAME PIDFILE: copy a daemon's own pidfile into $STATE/pids/NAME
record_pidfile() {
    local end=$(( $(date +%s) + WAIT ))
    until [ -s "$2" ] && [ -d "/proc/$(cat "$2")" ]; do
        [ "$(date +%s)" -lt "$end" ] || die "$1 did not write $2 (logs: $STATE/log)"
        sleep 0.1
    done
    cat "$2" > "$STATE/pids/$1"
}

# ---------------------------------------------------------------- 1. install
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    # keep package scripts from trying to start services (no systemd here anyway)
    made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
    lap "apt-get install"
fi

# ---------------------------------------------------------------- 2. host + dirs
HOST=$(hostname -s)
if ! getent hosts "$HOST" >/dev/null; then
    log "host name $HOST does not resolve: adding it to /etc/hosts"
    echo "127.0.0.1 $HOST" >> /etc/hosts
fi

mkdir -p "$STATE"/{etc,log,run,pids,spool/ctld,gpu} "$ETC"
chmod 755 "$STATE"
for i in $(seq 1 "$NNODES"); do
    mkdir -p "$STATE/spool/n$i" "$STATE/gpu/n$i"
    for g in $(seq 0 $((NODE_GPUS - 1))); do
        # gres needs character devices (regular files are rejected); 195 = nvidia major,
        # harmless without a driver: nothing ever opens them
        [ -c "$STATE/gpu/n$i/nvidia$g" ] || { rm -f "$STATE/gpu/n$i/nvidia$g"; mknod "$STATE/gpu/n$i/nvidia$g" c 195 "$g"; }
    done
done

# ---------------------------------------------------------------- 3. configs
# cgroup v1 memory controller available -> task/cgroup enforces --mem and an over-memory
# job ends as OUT_OF_MEMORY; otherwise jobacct OverMemoryKill kills it (state FAILED)
if [ "$CGROUP" = auto ]; then
    [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ] && [ -d /sys/fs/cgroup/freezer ] && CGROUP=1 || CGROUP=0
fi
gpu_range() { [ "$NODE_GPUS" -gt 1 ] && echo "[0-$((NODE_GPUS - 1))]" || echo 0; }
{
    echo "# Generated by dlbench tools/slurm-local/up.sh -- state in $STATE. Do not edit."
    echo "ClusterName=$CLUSTER"
    echo "SlurmctldHost=$HOST(127.0.0.1)"
    echo "SlurmctldPort=$CTLD_PORT"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CryptoType=crypto/munge"
    echo "MpiDefault=none"
    echo "SwitchType=switch/none"
    if [ "$CGROUP" = 1 ]; then
        echo "ProctrackType=proctrack/cgroup"
        echo "TaskPlugin=task/cgroup"
    else
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
    fi
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    echo "MailProg=/bin/true"
    echo "StateSaveLocation=$STATE/spool/ctld"
    echo "SlurmdSpoolDir=$STATE/spool/%n"
    echo "SlurmctldPidFile=$STATE/run/slurmctld.pid"
    echo "SlurmdPidFile=$STATE/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$STATE/log/slurmctld.log"
    echo "SlurmdLogFile=$STATE/log/slurmd-%n.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    echo "SchedulerType=sched/backfill"
    echo "SchedulerParameters=bf_interval=5"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core_Memory"
    echo "GresTypes=gpu"
    # completed jobs stay visible to squeue for 5 min (snakemake squeue status mode
    # needs MinJobAge >= 3 x slurm-init-seconds-before-status-checks)
    echo "MinJobAge=300"
    echo "KillWait=5"
    echo "OverTimeLimit=0"
    echo "InactiveLimit=0"
    echo "SlurmctldTimeout=120"
    echo "SlurmdTimeout=300"
    echo "MessageTimeout=10"
    # memory enforcement without cgroups: slurmstepd samples RSS and kills a step over
    # its --mem; the step/job then ends as OUT_OF_MEMORY
    echo "JobAcctGatherType=jobacct_gather/linux"
    echo "JobAcctGatherFrequency=task=1"
    # (cgroup mode: task/cgroup enforces memory; both at once is fatal for slurmctld)
    [ "$CGROUP" = 1 ] || echo "JobAcctGatherParams=OverMemoryKill"
    echo "AccountingStorageType=accounting_storage/slurmdbd"
    echo "AccountingStorageHost=127.0.0.1"
    echo "AccountingStoragePort=$DBD_PORT"
    echo "AccountingStorageTRES=gres/gpu"
    echo "JobCompType=jobcomp/none"
    nodes=""
    for i in $(seq 1 "$NNODES"); do
        echo "NodeName=n$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((NODE_PORT0 + i)) CPUs=$NODE_CPUS RealMemory=$NODE_MEM Gres=gpu:$NODE_GPUS State=UNKNOWN"
        nodes="${nodes:+$nodes,}n$i"
    done
    echo "PartitionName=$PARTITION Nodes=$nodes Default=YES MaxTime=INFINITE DefMemPerCPU=500 State=UP"
} > "$STATE/etc/slurm.conf"

{
    echo "# Generated by dlbench tools/slurm-local/up.sh"
    for i in $(seq 1 "$NNODES"); do
        echo "NodeName=n$i Name=gpu File=$STATE/gpu/n$i/nvidia$(gpu_range)"
    done
} > "$STATE/etc/gres.conf"

if [ "$CGROUP" = 1 ]; then
cat > "$STATE/etc/cgroup.conf" <<EOF
# Generated by dlbench tools/slurm-local/up.sh
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
EOF
else
cat > "$STATE/etc/cgroup.conf" <<EOF
# Generated by dlbench tools/slurm-local/up.sh (cgroup plugins are not used)
CgroupAutomount=no
EOF
fi

cat > "$STATE/etc/slurmdbd.conf" <<EOF
# Generated by dlbench tools/slurm-local/up.sh
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
EOF
chmod 600 "$STATE/etc/slurmdbd.conf"

# only one such cluster per machine (ports, /etc/slurm): refuse to clobber another one
other=$(sed -n 's/^# Generated by dlbench .* -- state in \(.*\)\. Do not edit\.$/\1/p' "$ETC/slurm.conf" 2>/dev/null || true)
if [ -n "$other" ] && [ "$other" != "$STATE" ] && [ -s "$other/pids/slurmctld" ] \
   && [ -d "/proc/$(cat "$other/pids/slurmctld")" ]; then
    die "another local cluster runs from $other: stop it first (DLBENCH_SLURM_DIR=$other $(dirname "$0")/down.sh)"
fi

# install into /etc/slurm (the default SLURM_CONF of every client command); keep a
# backup of a foreign slurm.conf once
changed=0
for f in slurm.conf gres.conf cgroup.conf slurmdbd.conf; do
    if [ -e "$ETC/$f" ] && ! grep -q 'Generated by dlbench' "$ETC/$f" && [ ! -e "$ETC/$f.pre-dlbench" ]; then
        cp -p "$ETC/$f" "$ETC/$f.pre-dlbench"
    fi
    if ! cmp -s "$STATE/etc/$f" "$ETC/$f"; then
        cp "$STATE/etc/$f" "$ETC/$f"; changed=1
    fi
done
chmod 600 "$ETC/slurmdbd.conf"
chmod 644 "$ETC/slurm.conf" "$ETC/gres.conf" "$ETC/cgroup.conf"
# pyxis in the plugstack, each node's enroot paths (pyxis.sh); a change restarts the daemons
source "$(dirname "$0")/pyxis.sh"
pyxis_configure
[ "$PYXIS_CHANGED" = 1 ] && changed=1

# a config change while Slurm daemons run: restart those (not munge/mariadb)
if [ $changed = 1 ] && { alive slurmctld || alive slurmdbd || ls "$STATE"/pids/slurmd-* >/dev/null 2>&1; }; then
    log "configuration changed: restarting Slurm daemons"
    DLBENCH_SLURM_KEEP_DB=1 "$(dirname "$0")/down.sh" >/dev/null
fi
lap "configure"

# ---------------------------------------------------------------- 4. munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
    chown munge:munge /etc/munge/munge.key; chmod 600 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged --force </dev/null >>"$STATE/log/munged.out" 2>&1
    record_pidfile munged /run/munge/munged.pid
    wait_for munged sh -c 'munge -n | unmunge'
    log "munged started (pid $(cat "$STATE/pids/munged"))"
else
    alive munged || log "munged already running (not started by this script: down.sh leaves it)"
fi
lap "munge"

# ---------------------------------------------------------------- 5. mariadb + slurmdbd
# mariadbd runs as mysql: its socket, pid file and log live in a dir that user owns
MYRUN=$STATE/mysqld
mkdir -p "$MYRUN"; chown mysql:mysql "$MYRUN"
SOCK=$MYRUN/mysqld.sock
sql() { mariadb --no-defaults --socket="$SOCK" -u root -N -B -e "$1"; }
if ! alive mariadbd; then
    if [ ! -d "$STATE/mysql/mysql" ]; then
        log "initialising MariaDB data dir"
        rm -rf "$STATE/mysql"; mkdir -p "$STATE/mysql"; chown mysql:mysql "$STATE/mysql"
        mariadb-install-db --no-defaults --user=mysql --datadir="$STATE/mysql" \
            --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1 \
            || die "mariadb-install-db failed: $STATE/log/mariadb-install.log"
    fi
    rm -f "$SOCK"
    setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$STATE/mysql" \
        --socket="$SOCK" --pid-file="$MYRUN/mariadbd.pid" \
        --bind-address=127.0.0.1 --port="$MYSQL_PORT" --log-error="$MYRUN/mariadb.log" \
        --skip-log-bin --innodb-buffer-pool-size=1024M --innodb-lock-wait-timeout=900 \
        --innodb-log-file-size=64M </dev/null >/dev/null 2>&1 &
    echo $! > "$STATE/pids/mariadbd"
    WATCH=mariadbd WATCHLOG=$MYRUN/mariadb.log wait_for mariadbd mariadb-admin --no-defaults --socket="$SOCK" -u root ping
    log "mariadbd started (pid $(cat "$STATE/pids/mariadbd"))"
fi
sql "CREATE DATABASE IF NOT EXISTS $DB_NAME;
     CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
     CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
     GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
     GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';"
lap "mariadb"

if ! alive slurmdbd; then
    rm -f "$STATE/run/slurmdbd.pid"
    setsid /usr/sbin/slurmdbd </dev/null >>"$STATE/log/slurmdbd.out" 2>&1
    record_pidfile slurmdbd "$STATE/run/slurmdbd.pid"
    WATCH=slurmdbd WATCHLOG=$STATE/log/slurmdbd.log wait_for "slurmdbd on port $DBD_PORT" sacctmgr -n -i show cluster
    log "slurmdbd started (pid $(cat "$STATE/pids/slurmdbd"))"
fi
lap "slurmdbd"

# ---------------------------------------------------------------- 6. slurmctld + slurmd
if ! alive slurmctld; then
    rm -f "$STATE/run/slurmctld.pid"
    setsid /usr/sbin/slurmctld </dev/null >>"$STATE/log/slurmctld.out" 2>&1
    record_pidfile slurmctld "$STATE/run/slurmctld.pid"
    WATCH=slurmctld WATCHLOG=$STATE/log/slurmctld.log wait_for slurmctld scontrol ping
    log "slurmctld started (pid $(cat "$STATE/pids/slurmctld"))"
fi
for i in $(seq 1 "$NNODES"); do
    if ! alive "slurmd-n$i"; then
        rm -f "$STATE/run/slurmd-n$i.pid"
        PATH=$(node_path "n$i") setsid /usr/sbin/slurmd -N "n$i" </dev/null >>"$STATE/log/slurmd-n$i.out" 2>&1
        record_pidfile "slurmd-n$i" "$STATE/run/slurmd-n$i.pid"
        log "slurmd -N n$i started (pid $(cat "$STATE/pids/slurmd-n$i"))"
    fi
done
lap "slurmctld+slurmd"

# ---------------------------------------------------------------- 7. wait until usable
nodes_ready() {
    local st bad=0
    while read -r n st; do
        case $st in
            idle*|alloc*|mix*|comp*) ;;
            drain*|down*|fail*|inval*)
                scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true; bad=1 ;;
            *) bad=1 ;;
        esac
    done < <(sinfo -h -N -p "$PARTITION" -o '%N %t' 2>/dev/null)
    [ "$(sinfo -h -N -p "$PARTITION" -o '%N' 2>/dev/null | sort -u | wc -l)" -eq "$NNODES" ] && [ $bad = 0 ]
}
wait_for "nodes n1..n$NNODES to be idle" nodes_ready
wait_for "sacct" sacct -n -X -S now-1minutes
wait_for "cluster $CLUSTER registered in slurmdbd" sh -c "sacctmgr -n -P show cluster format=cluster,controlport | grep -q '^$CLUSTER|$CTLD_PORT\$'"
lap "ready"

pyxis_check
log "Slurm $(sinfo --version | awk '{print $2}') up: state $STATE, config $ETC/slurm.conf"
log "$PYXIS_STATUS"
sinfo -N -o '%N %P %t %c %m %G'
printf '[slurm-local] timing: %-18s %5ss\n' TOTAL "$(since "$T0")"
