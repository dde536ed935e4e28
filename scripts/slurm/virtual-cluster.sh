#!/usr/bin/env bash
# A private N-node Slurm cluster on one machine (one slurmd per virtual node), to try and test Slurm jobs.
#
#   scripts/slurm/virtual-cluster.sh up DIR [NODES]   # start munged, slurmctld and NODES slurmd (default 4)
#   export SLURM_CONF=DIR/slurm.conf                  # then sbatch/srun/squeue/sinfo talk to it
#   scripts/slurm/virtual-cluster.sh down DIR         # cancel its jobs, stop every process it started
#
# Needs root (slurmd starts job steps as the submitting user) and Debian's slurmd, slurmctld, slurm-client and
# munge (scripts/install-deps.sh). Everything lives under DIR, which must be new or empty: config, a fresh
# munge key and socket, state, spool, logs, PID files; ports are picked at random among free ones, so several
# clusters (and the system's own munge/Slurm, if any) can run side by side. Debian builds Slurm with
# MULTIPLE_SLURMD, so nodes n1..nN share this host, each with its own port, spool and TmpFS (`%n`): PMIx (srun
# --mpi=pmix) keeps per-node files in TmpFS and fails with "File exists" if two nodes share it.
# Every daemon gets FANSTORE_VCLUSTER=DIR in its environment; slurmstepd and job tasks carry this cluster's
# SLURM_CONF: `down` stops only processes marked so, never another cluster's or the system's.
set -euo pipefail

die() { echo "virtual-cluster: $*" >&2; exit 1; }

usage() {
  echo "usage: $0 up DIR [NODES] | down DIR" >&2
  exit 2
}

# The PIDs of live processes whose environment holds NAME=VALUE exactly (read from /proc; this shell excluded).
pids_with_env() {
  local file pid
  # grep says 2 when a process vanished while it read: expected, not an error here.
  { grep -lsxzF -- "$1=$2" /proc/[0-9]*/environ || true; } | while read -r file; do
    pid=${file#/proc/}
    pid=${pid%/environ}
    [ "$pid" = $$ ] || [ "$pid" = "${BASHPID:-$$}" ] || echo "$pid"
  done
  return 0
}

# Job tasks of this cluster: they carry its SLURM_CONF (sbatch exports the submitter's environment) and a job id.
job_task_pids() {
  local conf=$1 pid
  for pid in $(pids_with_env SLURM_CONF "$conf"); do
    grep -qsz '^SLURM_JOB_ID=' "/proc/$pid/environ" && echo "$pid"
  done
  return 0
}

# slurmstepd processes of this cluster: slurmd starts them with a clean environment that keeps SLURM_CONF.
stepd_pids() {
  local pid
  for pid in $(pids_with_env SLURM_CONF "$1"); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmstepd ] && echo "$pid"
  done
  return 0
}

# True while PID exists and is not a zombie (an orphan's reaper may be slow to collect it).
is_running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# Waits up to $1 seconds for the PIDs that follow to exit; prints the ones still alive.
wait_gone() {
  local limit=$1 pid alive i
  shift
  for ((i = 0; i < limit * 10; i++)); do
    alive=()
    for pid in "$@"; do is_running "$pid" && alive+=("$pid"); done
    [ ${#alive[@]} -eq 0 ] && return 0
    sleep 0.1
  done
  echo "${alive[@]}"
}

# A base port with NODES+1 consecutive free TCP ports, below the usual ephemeral range.
pick_ports() {
  local nodes=$1 listening base p ok
  listening=$(ss -Htln 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
  for _ in $(seq 1 50); do
    base=$((10000 + RANDOM % 20000))
    ok=1
    for ((p = base; p <= base + nodes; p++)); do
      grep -qx "$p" <<<"$listening" && { ok=0; break; }
    done
    [ $ok = 1 ] && { echo "$base"; return 0; }
  done
  die "no $((nodes + 1)) consecutive free ports found"
}

write_config() {
  local dir=$1 nodes=$2 base=$3 host
  host=$(hostname -s)
  cat >"$dir/slurm.conf" <<EOF
# Virtual cluster written by scripts/slurm/virtual-cluster.sh: $nodes nodes on $host, all state under $dir.
ClusterName=fanstorevc
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
PlugStackConfig=$dir/plugstack.conf
# One host for every node: no cgroups (they would collide between slurmds), plain process tracking.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
KillWait=5
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
NodeName=n[1-$nodes] NodeHostname=$host NodeAddr=127.0.0.1 Port=[$((base + 1))-$((base + nodes))] CPUs=2 State=UNKNOWN
PartitionName=vc Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$dir/plugstack.conf"
}

# Starts one daemon in the foreground of a background job, marked, and records "NAME PID" in DIR/pids.
start_daemon() {
  local dir=$1 name=$2
  shift 2
  FANSTORE_VCLUSTER=$dir SLURM_CONF=$dir/slurm.conf "$@" >"$dir/log/$name.out" 2>&1 </dev/null &
  echo "$name $!" >>"$dir/pids"
}

cmd_up() {
  local dir=$1 nodes=${2:-4} base i state
  [ "$(id -u)" = 0 ] || die "needs root (slurmd runs job steps as the submitting user)"
  for tool in munged slurmctld slurmd sinfo ss; do
    command -v "$tool" >/dev/null || die "$tool not found: run scripts/install-deps.sh (slurmd slurmctld slurm-client munge)"
  done
  [[ $nodes =~ ^[1-9][0-9]?$ ]] || die "NODES must be 1..99, got '$nodes'"
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || die "$dir is not empty (give a new directory)"
  dir=$(cd "$dir" && pwd -P)
  # munged refuses a socket path that others cannot traverse, and a key others can read.
  local up=$dir
  while up=$(dirname "$up") && [ "$up" != / ]; do
    [ "$(( 0$(stat -c %a "$up") & 1 ))" = 1 ] || die "munged needs $up to be traversable by all (chmod o+x $up) or another DIR"
  done
  chmod 755 "$dir"
  mkdir -p "$dir"/{munge,state,run,log}
  for ((i = 1; i <= nodes; i++)); do mkdir -p "$dir/spool/n$i" "$dir/tmp/n$i"; done
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  base=$(pick_ports "$nodes")
  write_config "$dir" "$nodes" "$base"

  start_daemon "$dir" munged munged -F --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
  for ((i = 0; i < 100; i++)); do [ -S "$dir/munge/munge.sock" ] && break; sleep 0.1; done
  [ -S "$dir/munge/munge.sock" ] || { tail -5 "$dir/log/munged.out" >&2; cmd_down "$dir"; die "munged did not start"; }
  start_daemon "$dir" slurmctld slurmctld -D -i -f "$dir/slurm.conf"
  for ((i = 1; i <= nodes; i++)); do start_daemon "$dir" "slurmd-n$i" slurmd -D -N "n$i" -f "$dir/slurm.conf"; done

  # Ready when every node is idle (slurmd registered with slurmctld). Bounded: a port taken between our check
  # and the bind, or a broken install, ends here with the logs' last lines.
  for ((i = 0; i < 600; i++)); do
    state=$(SLURM_CONF=$dir/slurm.conf timeout 5 sinfo -h -N -o '%t' 2>/dev/null | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ') || true
    [ "$state" = "idle=$nodes " ] && break
    sleep 0.1
  done
  if [ "$state" != "idle=$nodes " ]; then
    echo "virtual-cluster: nodes not idle after 60 s (sinfo: ${state:-no answer}); last log lines:" >&2
    for f in "$dir"/log/*.out "$dir"/log/*.log; do [ -s "$f" ] && { echo "== $f" >&2; tail -5 "$f" >&2; }; done
    cmd_down "$dir"
    exit 1
  fi
  echo "virtual-cluster: $nodes nodes up (slurmctld port $base, slurmd ports $((base + 1))-$((base + nodes))); export SLURM_CONF=$dir/slurm.conf"
}

cmd_down() {
  local dir=$1 conf pids left=()
  [ -f "$dir/slurm.conf" ] || die "$dir has no slurm.conf (not a virtual cluster)"
  dir=$(cd "$dir" && pwd -P)
  conf=$dir/slurm.conf
  # 1. Cancel its jobs while slurmctld and the slurmds still run, so job steps end the normal way (SIGTERM,
  #    KillWait, SIGKILL) and daemons inside them clean up after themselves.
  if SLURM_CONF=$conf timeout 5 squeue -h -o %i >/dev/null 2>&1; then
    SLURM_CONF=$conf timeout 5 scancel --quiet --user="$(id -un)" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      [ -z "$(SLURM_CONF=$conf timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  # 2. Stop the daemons we started (the PID is checked against our mark: never someone else's process).
  pids=()
  if [ -f "$dir/pids" ]; then
    while read -r _ pid; do
      grep -qsxzF "FANSTORE_VCLUSTER=$dir" "/proc/$pid/environ" && pids+=("$pid")
    done <"$dir/pids"
  fi
  # slurmds and slurmctld before munged, which they need to say goodbye.
  local daemons=() munge=()
  for pid in "${pids[@]}"; do
    if grep -q munged "/proc/$pid/comm" 2>/dev/null; then munge+=("$pid"); else daemons+=("$pid"); fi
  done
  if [ ${#daemons[@]} -gt 0 ]; then
    kill -TERM "${daemons[@]}" 2>/dev/null || true
    read -ra left <<<"$(wait_gone 15 "${daemons[@]}")"
    if [ ${#left[@]} -gt 0 ]; then
      echo "virtual-cluster: SIGKILL to slurm daemons ${left[*]}" >&2
      kill -KILL "${left[@]}" 2>/dev/null || true
    fi
  fi
  if [ ${#munge[@]} -gt 0 ]; then
    kill -TERM "${munge[@]}" 2>/dev/null || true
    read -ra left <<<"$(wait_gone 10 "${munge[@]}")"
    [ ${#left[@]} -eq 0 ] || kill -KILL "${left[@]}" 2>/dev/null || true
  fi
  # 3. Whatever still belongs to this cluster: slurmstepd (slurmd hands it this SLURM_CONF) and job tasks.
  read -ra left <<<"$( (stepd_pids "$conf"; job_task_pids "$conf") | sort -u | tr '\n' ' ')"
  if [ ${#left[@]} -gt 0 ]; then
    echo "virtual-cluster: stopping leftover processes: ${left[*]}" >&2
    kill -KILL "${left[@]}" 2>/dev/null || true
    wait_gone 5 "${left[@]}" >/dev/null || true
  fi
  rm -f "$dir/pids"
  echo "virtual-cluster: down ($dir)"
}

[ $# -ge 2 ] || usage
case $1 in
  up) [ $# -le 3 ] || usage; cmd_up "$2" "${3:-4}" ;;
  down) [ $# -eq 2 ] || usage; cmd_down "$2" ;;
  *) usage ;;
esac
