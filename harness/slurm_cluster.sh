#!/usr/bin/env bash
# harness/slurm_cluster.sh: a private single-node Slurm cluster for tests and
# for running experiments through Slurm on one machine (docs/EXPERIMENTS.md,
# "Running on a cluster"). Debian 12 slurm-wlm 22.05 without systemd or
# cgroups: auth/none + cred/none, proctrack/linuxproc, task/none, no
# accounting; slurmctld -D and slurmd -D run as background processes with
# their own SLURM_CONF, on two free non-default ports, talking to 127.0.0.1
# only (the daemons bind 0.0.0.0 on those ports; nothing else is contacted).
#
#   slurm_cluster.sh start DIR   DIR must not exist (keep it short: unix
#                                sockets live under it); prints
#                                "SLURM_CONF=DIR/slurm.conf" when the node is idle
#   slurm_cluster.sh stop DIR    cancels every job, waits for the job
#                                processes, stops both daemons by PID
# Must run as root (slurmd starts jobs as their user). Exit 3 = Slurm cannot
# start here (not installed, not root); the message says why.
set -euo pipefail

die() { echo "slurm_cluster: $*" >&2; exit "${2:-1}"; }

free_port() {
  python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local d="$1"
  for b in slurmctld slurmd scontrol sbatch; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] ||
      die "$b not installed (apt-get install slurm-wlm)" 3
  done
  [ "$(id -u)" -eq 0 ] || die "slurmd must run as root (uid $(id -u))" 3
  [ ! -e "$d" ] || die "$d exists"
  mkdir -p "$d"/{state,spool,log,run}
  d="$(cd "$d" && pwd)"
  local host p1 p2 node
  host="$(hostname -s)"
  p1="$(free_port)"
  p2="$(free_port)"
  while [ "$p2" = "$p1" ]; do p2="$(free_port)"; done
  # the node line as slurmd sees this machine (CPUs, sockets, memory)
  node="$(/usr/sbin/slurmd -C | head -n 1)"
  case "$node" in NodeName=*) ;; *) die "slurmd -C printed no node line: $node" 3 ;; esac
  cat >"$d/slurm.conf" <<CONF
ClusterName=spill
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$p1
SlurmdPort=$p2
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
MailProg=/bin/true
ReturnToService=2
KillWait=3
MinJobAge=600
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$d/slurm.conf"
  /usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >"$d/log/slurmctld.out" 2>&1 &
  echo $! >"$d/run/slurmctld.dpid"
  /usr/sbin/slurmd -D -f "$SLURM_CONF" -N "$host" >"$d/log/slurmd.out" 2>&1 &
  echo $! >"$d/run/slurmd.dpid"
  # idle within ~1 s; give up after 20 s
  local i st
  for i in $(seq 1 100); do
    st="$(scontrol show node "$host" 2>/dev/null | sed -n 's/.*State=\([A-Z+_]*\).*/\1/p' | head -n 1)"
    case "$st" in IDLE*) echo "SLURM_CONF=$SLURM_CONF"; return 0 ;; esac
    sleep 0.2
  done
  stop "$d" || true
  die "node did not become idle (state '$st'); logs in $d/log" 3
}

alive() { kill -0 "$1" 2>/dev/null; }

stop() {
  local d="$1"
  [ -f "$d/slurm.conf" ] || die "$d: no private cluster here"
  export SLURM_CONF="$d/slurm.conf"
  # jobs first: their processes outlive stopped daemons
  local cpid spid i
  cpid="$(cat "$d/run/slurmctld.dpid" 2>/dev/null || true)"
  spid="$(cat "$d/run/slurmd.dpid" 2>/dev/null || true)"
  if [ -n "$cpid" ] && alive "$cpid"; then
    scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    for i in $(seq 1 50); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  # slurmstepd processes of this cluster (they hold SlurmdSpoolDir sockets)
  for i in $(seq 1 50); do
    [ -z "$(ls -A "$d/spool" 2>/dev/null | grep -E '_[0-9]+\.[0-9]+$' || true)" ] && break
    sleep 0.2
  done
  for p in $spid $cpid; do
    alive "$p" && kill -TERM "$p" 2>/dev/null || true
  done
  for p in $spid $cpid; do
    for i in $(seq 1 50); do alive "$p" || break; sleep 0.1; done
    alive "$p" && kill -KILL "$p" 2>/dev/null || true
  done
  return 0
}

case "${1:-}" in
  start) [ $# -eq 2 ] || die "usage: $0 start DIR" 2; start "$2" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop DIR" 2; stop "$2" ;;
  -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
