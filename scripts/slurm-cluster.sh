#!/usr/bin/env bash
# A one-node Slurm cluster in a folder of its own, for the tests and docs/distributed.md:
# munged, slurmctld and slurmd on loopback with their key, configuration, state, logs and
# PID files all under DIR, so nothing of the host's own Slurm (if any) is read or touched.
#
#   bash scripts/slurm-cluster.sh start DIR   # prints SLURM_CONF=DIR/slurm.conf once it is up
#   SLURM_CONF=DIR/slurm.conf srun -n 4 hostname
#   bash scripts/slurm-cluster.sh stop DIR    # cancels what is left, ends the three daemons
#
# The node declares 8 CPUs whatever the machine has (SlurmdParameters=config_overrides): the
# shards of a test are mostly waiting on the network, and 4 of them must run at once on a
# 2-core machine. Ports are free ones chosen at start. The packages (slurmctld, slurmd,
# slurm-client, munge: Debian's) come from scripts/setup.sh. Daemons run as the calling user.
set -euo pipefail
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi

# PIDs of the daemons DIR's PID files name (empty files and dead PIDs skipped).
pids() {
  for f in "$dir/munged.pid" "$dir/slurmctld.pid" "$dir/slurmd.pid"; do
    [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"
  done
  return 0
}

stop() {
  if [ -f "$dir/slurm.conf" ] && command -v scancel >/dev/null; then
    # Jobs first, so that no task outlives its daemons; then at most 10 s for them to end.
    SLURM_CONF="$dir/slurm.conf" scancel --quiet --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 20); do
      [ -z "$(SLURM_CONF="$dir/slurm.conf" squeue -h 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  local p
  p=$(pids)
  [ -n "$p" ] && { kill $p 2>/dev/null || true; }
  for _ in $(seq 1 50); do
    [ -z "$(pids)" ] && break
    sleep 0.1
  done
  p=$(pids)
  [ -n "$p" ] && { kill -9 $p 2>/dev/null || true; }
  # A task or slurmstepd that outlived its job (ending slurmd does not end them): by PID, each
  # process whose environment names this cluster's configuration and that is a job's task or a
  # slurmstepd (not a caller that merely exported SLURM_CONF).
  [ -f "$dir/slurm.conf" ] || return 0
  local e vars
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    [ "$p" = "$$" ] && continue
    vars=$({ tr '\0' '\n' <"$e"; } 2>/dev/null) || continue
    grep -qxF "SLURM_CONF=$dir/slurm.conf" <<<"$vars" || continue
    if grep -q '^SLURM_JOB_ID=' <<<"$vars" || [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ]; then
      kill -9 "$p" 2>/dev/null || true
    fi
  done
  return 0
}

# A free loopback TCP port (bound, read and released: another process could take it between
# here and the daemon's bind, which then fails loudly in its log).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start() {
  for bin in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd srun sinfo sbatch scancel squeue; do
    command -v "$bin" >/dev/null || {
      echo "scripts/slurm-cluster.sh: $bin is missing: run scripts/setup.sh (Debian's slurmctld, slurmd, slurm-client and munge)" >&2
      exit 1
    }
  done
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  dir=$(cd "$dir" && pwd)
  # A cluster of an earlier start in DIR is ended first (its PID files would name it).
  stop
  rm -f "$dir"/*.pid
  # Whatever fails from here leaves nothing running.
  trap 'stop' ERR
  chmod 755 "$dir" "$dir/munge"
  # A key of our own (munged refuses one others may read).
  rm -f "$dir/munge/munge.key"
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  local user ctld_port slurmd_port
  user=$(id -un)
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm-cluster.sh: a one-node cluster for msgbench's tests.
ClusterName=msgbench
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
DebugFlags=NO_CONF_HASH
NodeName=msgbench-node NodeAddr=127.0.0.1 NodeHostname=$(hostname -s) CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=msgbench Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  local sbin=/usr/sbin
  "$sbin/munged" --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
    --log-file="$dir/munge/munged.log" --pid-file="$dir/munged.pid" --seed-file="$dir/munge/seed"
  export SLURM_CONF="$dir/slurm.conf"
  "$sbin/slurmctld" -i
  "$sbin/slurmd" -N msgbench-node
  # Up when the node is idle: the controller has heard from slurmd (at most 30 s).
  for _ in $(seq 1 60); do
    if [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ]; then
      trap - ERR
      echo "SLURM_CONF=$dir/slurm.conf"
      return 0
    fi
    sleep 0.5
  done
  echo "scripts/slurm-cluster.sh: the node did not come up in 30 s; the logs' ends:" >&2
  tail -n 5 "$dir/munge/munged.log" "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
  stop
  exit 1
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
