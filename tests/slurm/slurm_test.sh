#!/usr/bin/env bash
# End to end on a real (virtual, 4-node) Slurm cluster: scripts/slurm/fanstore.sbatch stages a packed image with one
# `fanstore serve` per node, runs data-parallel fanstore-train and a byte-compare on every task through the
# daemons, and stops and cleans up; a second job, whose node n3 has no room, ends with the daemon's own message.
# Usage: slurm_test.sh FANSTORE FANSTORE_TRAIN FANSTORE_DATAGEN   (as root; exit 77 = skipped, with the reason)
set -Eeuo pipefail
trap 'echo "FAIL: slurm_test.sh line $LINENO: $BASH_COMMAND (status $?)" >&2' ERR

fanstore=$(realpath "$1")
train=$(realpath "$2")
datagen=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
vcluster=$repo/scripts/slurm/virtual-cluster.sh
sbatch_script=$repo/scripts/slurm/fanstore.sbatch

skip() {
  echo "SKIPPED: slurm_test: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (slurmd runs job steps as the submitting user; CI runs as root)"
for tool in slurmd slurmctld sbatch srun squeue scontrol munged; do
  command -v "$tool" >/dev/null || skip "$tool not installed (scripts/install-deps.sh installs slurmd slurmctld slurm-client munge)"
done
[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so ] || [ -n "$(find /usr/lib* -name mpi_pmix.so -path '*slurm*' 2>/dev/null | head -1)" ] ||
  skip "Slurm's PMIx plugin (mpi_pmix.so) is missing"

# A test run inside somebody's Slurm job must not talk to their cluster.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(SLURM[A-Z0-9_]*\)=.*/\1/p')

fails=0 passes=0
ok() { echo "ok: $*"; passes=$((passes + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
check() {  # check "what" command...
  local what=$1
  shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}

work=$(mktemp -d /tmp/slurm-test-XXXXXX)
chmod 711 "$work"  # munged insists that others can traverse the path to its socket
cluster=$work/cluster
tmpfs_mounted=""
teardown() {
  local rc=$?
  set +e
  trap - ERR
  unset SLURM_CONF  # from here on, only the cluster's own processes carry it
  [ -n "$tmpfs_mounted" ] && umount "$tmpfs_mounted"
  [ -f "$cluster/slurm.conf" ] && "$vcluster" down "$cluster"
  # Nothing of this cluster may survive it: no slurmctld/slurmd/munged (marked), slurmstepd or job task.
  local left
  left=$( { grep -lsxzF -e "FANSTORE_VCLUSTER=$cluster" -e "SLURM_CONF=$cluster/slurm.conf" /proc/[0-9]*/environ || true; } |
    cut -d/ -f3 | grep -vx -e $$ -e "${BASHPID:-$$}" | tr '\n' ' ')
  if [ -n "${left// /}" ]; then
    echo "FAIL: processes left behind: $left"
    ps -o pid,args -p "${left// /,}" 2>/dev/null
    rc=1
  fi
  rm -rf "$work"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 143' TERM INT HUP

echo "== data: a CosmoFlow set (32 + 8 universes, 32^3 x 4) packed into 8 partitions + a replicated val/"
"$datagen" cosmoflow -o "$work/src" --samples 40 --size 32 --val-fraction 0.2 --seed 3
"$fanstore" pack "$work/src" -o "$work/image" --parts 8 --replicate 'val/*' | tail -1
nfiles=$(find "$work/src" -type f | wc -l)

echo "== virtual cluster: 4 nodes, one slurmd each"
"$vcluster" up "$cluster" 4
export SLURM_CONF=$cluster/slurm.conf
mkdir -p "$work/local"

# Submits the batch script as users do (settings in the environment, the command after the script) with $1 tasks
# per node and job_task.sh's arguments after it; prints the job id.
# OMPI_MCA_btl: the virtual nodes share one host, and Open MPI names its shared-memory segments by host name and
# node-local rank, so two virtual nodes' ranks would map the same segment; real nodes need no such line. The nodes
# talk over the loopback interface only.
submit() {
  local per_node=$1
  shift
  IMAGE=$work/image LOCAL="$work/local/{node}" FANSTORE=$fanstore OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo \
    sbatch --parsable --chdir="$work" --output="$work/job-%j.out" --time=10 --nodes=4 --ntasks-per-node="$per_node" \
    "$sbatch_script" "$here/job_task.sh" "$@"
}

# Waits (bounded) until job $1 has left the queue; prints its state and exit code.
wait_job() {
  local job=$1 limit=$2 i
  for ((i = 0; i < limit * 2; i++)); do
    [ -z "$(squeue -h -j "$job" -o %i 2>/dev/null)" ] && break
    sleep 0.5
  done
  scontrol show job "$job" 2>/dev/null | grep -o -E '(JobState|ExitCode)=[^ ]*' | tr '\n' ' '
}

# Waits (bounded) until job $1's command has started (its task 0 creates WORK/job-running); false if the job
# ended or 120 s passed first.
await_command() {
  local job=$1 i
  for ((i = 0; i < 240; i++)); do
    [ -e "$work/job-running" ] && return 0
    [ -z "$(squeue -h -j "$job" -o %i 2>/dev/null)" ] && return 1
    sleep 0.5
  done
  return 1
}

# Waits (bounded: $2 s) for job $1 to end and shows its output; sets `state` (JobState, ExitCode) and `out`.
finish_job() {
  local job=$1 limit=$2
  state=$(wait_job "$job" "$limit")
  echo "job $job: $state($(($(date +%s) - t0)) s); its output:"
  sed 's/^/  | /' "$work/job-$job.out"
  out=$(cat "$work/job-$job.out")
}

# `fanstore serve` processes of job $1 of this cluster (another test's cluster may have a job of the same id):
# "PID NODE", the node from Slurm's environment of that task.
serve_processes() {
  local job=$1 f pid node
  { grep -lsxzF "SLURM_JOB_ID=$job" /proc/[0-9]*/environ || true; } | while read -r f; do
    pid=$(cut -d/ -f3 <<<"$f")
    [ "$pid" != self ] || continue
    grep -qsxzF "SLURM_CONF=$SLURM_CONF" "/proc/$pid/environ" || continue
    mapfile -d '' -t argv 2>/dev/null <"/proc/$pid/cmdline" || continue
    if [ "${argv[0]:-}" != "$fanstore" ] || [ "${argv[1]:-}" != serve ]; then continue; fi
    node=$(grep -asz '^SLURMD_NODENAME=' "/proc/$pid/environ" | tr -d '\0' | cut -d= -f2) || continue
    echo "$pid $node"
  done
}

echo "== job 1: stage, train on 4 nodes x 2 tasks, byte-compare from every task"
t0=$(date +%s)
job=$(submit 2 train "$work" "$work/src" "$train")
echo "submitted job $job"
if ! await_command "$job"; then
  bad "job $job never reached its command within 120 s: $(wait_job "$job" 1)"
  cat "$work/job-$job.out" 2>/dev/null
  exit 1
fi

daemons=$(serve_processes "$job" | sort -k2)
echo "fanstore serve processes of job $job (pid node):"
while read -r line; do echo "  $line"; done <<<"$daemons"
check "exactly one fanstore serve per node (4 in all, on n1 n2 n3 n4)" \
  test "$(awk '{print $2}' <<<"$daemons" | tr '\n' ' ')" = "n1 n2 n3 n4 "

# Each node staged into its own {node} directory: the index, the replicated partition, its socket, and its own
# regular partitions; together the four hold each of the 8 regular partitions exactly once. The job's command
# starts while staging may still go on (the daemons serve meanwhile): give it a moment to end.
for _ in $(seq 300); do
  [ -z "$(find "$work/local" -name '*.tmp.*' 2>/dev/null)" ] && [ "$(find "$work/local" -name 'part-rep.fsp' | wc -l)" = 4 ] && break
  sleep 0.1
done
check "one local directory per node, named by {node}" \
  test "$(find "$work/local" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | tr '\n' ' ')" = "n1 n2 n3 n4 "
for n in n1 n2 n3 n4; do
  check "$n: index, replicated partition and socket staged in local/$n" \
    test -f "$work/local/$n/index.fsi" -a -f "$work/local/$n/part-rep.fsp" -a -S "$work/local/$n/fanstore.sock"
done
check "the 8 regular partitions are spread over the nodes, each staged once" \
  test "$(find "$work/local" -name 'part-0*.fsp' -printf '%f\n' | sort | uniq -u | wc -l)" = 8
touch "$work/checked"

finish_job "$job" 300
# A task that crashed: its backtrace, for the failure below (the kernel's core_pattern may send cores elsewhere).
# Best effort: nothing here may stop the test before its checks.
{ find "$work/cores" -type f -name "core*" 2>/dev/null || true; } | while read -r core; do
  echo "core dump $core:"
  { gdb -batch -nx -ex 'thread apply all bt' "$train" "$core" 2>&1 | grep -E '^(#|Thread|Program)' | sed -n 1,80p |
    sed 's/^/  | /'; } || true
done
check "job 1 completed with exit code 0" grep -q 'JobState=COMPLETED ExitCode=0:0' <<<"$state"
check "the daemons formed one 4-rank job" grep -q 'fanstore serve: ready: 4 ranks, 8 partitions + 1 replicated' <<<"$out"
check "fanstore-train ran data-parallel on 8 ranks to its summary" \
  grep -qE '^summary: model cosmoflow  ranks 8  grid 8,1,1,1  steps 4 .* bad samples 0  rollbacks 0' <<<"$out"
check "fanstore-train wrote its checkpoint and metrics" \
  test -s "$work/checkpoint/checkpoint.bin" -a -s "$work/checkpoint/metrics.jsonl"
check "every task (8, two per node) read all $nfiles files identical to the source" \
  test "$(grep -cE "^compare: rank [0-7] on n[1-4]: $nfiles files identical to the source" <<<"$out")" = 8
check "every daemon stopped on SIGTERM at the end of the job" \
  test "$(grep -c 'fanstore serve\[rank [0-3]\]: stopping on Terminated' <<<"$out")" = 4
check "no fanstore serve of job $job is left" test -z "$(serve_processes "$job")"
check "the staged data and the local directories are gone" test -z "$(ls -A "$work/local")"

echo "== job 2: node n3's local directory is a 256 KiB tmpfs, too small for its share"
mkdir -p "$work/local/n3"
if mount -t tmpfs -o size=256k fanstore-slurm-test "$work/local/n3"; then
  tmpfs_mounted=$work/local/n3
  rm -f "$work/job-running"
  t0=$(date +%s)
  job=$(submit 2 train "$work" "$work/src" "$train")
  echo "submitted job $job"
  finish_job "$job" 120
  check "job 2 failed (exit code 1) instead of hanging" grep -q 'JobState=FAILED ExitCode=1:0' <<<"$state"
  check "the job output has the daemon's own no-space line for n3's directory" \
    grep -qE "^fanstore serve\[rank [0-3]\]: no space: not enough space in $work/local/n3 for partition part-" <<<"$out"
  check "the batch script says the daemons stopped before every node was ready" \
    grep -q 'fanstore.sbatch: the daemons stopped (status 1) before every node was ready' <<<"$out"
  check "the job's command never ran" test ! -e "$work/job-running"
  check "no fanstore serve of job $job is left" test -z "$(serve_processes "$job")"
  umount "$work/local/n3" && tmpfs_mounted=""
  rmdir "$work/local/n3"
  check "the other nodes removed what they had staged" test -z "$(ls -A "$work/local")"
else
  bad "cannot mount a tmpfs for the no-space job (needs CAP_SYS_ADMIN)"
fi

echo "== job 3: node n4's daemon is killed (SIGKILL) mid-job; the other nodes' daemons keep serving"
# FANSTORE_TIMEOUT=4 (serve --timeout): a read of n4's files turns to the image directory within 4 s instead of hanging
# on the dead peer (not less: a live daemon that a loaded machine stalls for most of the timeout would be declared
# down too).
rm -f "$work/job-running"
t0=$(date +%s)
job=$(FANSTORE_TIMEOUT=4 submit 1 survive "$work" "$work/src")
echo "submitted job $job"
await_command "$job" || true
victim=$(serve_processes "$job" | awk '$2 == "n4" { print $1 }')
# n4's regular partitions, read before its daemon dies.
n4_parts=$( (find "$work/local/n4" -name 'part-0*.fsp' -printf '%f\n' 2>/dev/null || true) | sort | tr '\n' ' ')
if [ -e "$work/job-running" ] && [ -n "$victim" ] && [ -n "$n4_parts" ]; then
  # Meanwhile a job with the same LOCAL (each node has a CPU left): its `fanstore wait` took job 3's sockets for its
  # own and ran its command through them, while its own daemons were refused; the batch script now stops first.
  job3=$job t0=$(date +%s)
  job=$(submit 1 survive "$work" "$work/src")
  finish_job "$job" 60
  check "a job whose LOCAL another job's daemons serve is refused (exit code 1)" \
    grep -q 'JobState=FAILED ExitCode=1:0' <<<"$state"
  check "the batch script says a daemon already answers there, on every node" \
    grep -q "fanstore.sbatch: a fanstore daemon already answers on SOCKET=.* on n[1-4],n[1-4],n[1-4],n[1-4] (another job's?)" \
    <<<"$out"
  check "it started no daemon" test -z "$(serve_processes "$job")"
  job=$job3
  kill -KILL "$victim"
  touch "$work/killed"
  sleep 1
  survivors=$(serve_processes "$job" | awk '{print $2}' | sort | tr '\n' ' ')
  finish_job "$job" 120
  check "after the kill, the daemons of n1 n2 n3 still ran (--kill-on-bad-exit=0)" test "$survivors" = "n1 n2 n3 "
  check "job 3 completed with exit code 0" grep -q 'JobState=COMPLETED ExitCode=0:0' <<<"$state"
  # n4's files come from the image directory now (no rank can send them): every file must read right.
  expect_ok=$(cd "$work/src" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')
  got_ok=$(grep ' ok$' "$work/survive.txt" | awk '{print $1}' | tr '\n' ' ' || true)
  echo "n4 held $n4_parts-> its files are read from the image directory"
  check "from n1, every file read identical to the source ($(wc -w <<<"$expect_ok") files), n4's included" \
    test "$got_ok" = "$expect_ok"
  check "no read failed" test "$(grep -c ' failed: ' "$work/survive.txt" || true)" = 0
  check "a survivor says n4's ranges are read from the image directory" \
    grep -q 'such ranges are read from the image directory' <<<"$out"
  check "the three surviving daemons stopped on SIGTERM" \
    test "$(grep -c 'fanstore serve\[rank [0-2]\]: stopping on Terminated' <<<"$out")" = 3
  check "the batch script names the killed daemon's leftover staged data" \
    grep -q 'fanstore.sbatch: a daemon was killed (status 137): its node (the lines above name it) may keep staged data' \
    <<<"$out"
  check "no fanstore serve of job $job is left" test -z "$(serve_processes "$job")"
  check "only the killed daemon's directory is left" test "$(find "$work/local" -mindepth 1 -maxdepth 1 -printf '%f ')" = "n4 "
  rm -rf "$work/local/n4"
else
  bad "job 3 did not reach its command, or n4 has no daemon or partitions (victim '${victim}', parts '${n4_parts}')"
  cat "$work/job-$job.out" 2>/dev/null
fi

# Job 4 (scancel, as the time limit does) and job 5 (SIGUSR1 to the job steps, as `sbatch --signal=USR1@120` does
# before the limit): fanstore-train stops at a step's end with its checkpoint, and the daemons clean up. With
# SIGUSR1 the daemons go on (it killed them before, leaving their staged data) until the batch script stops them.
for how in scancel usr1; do
  echo "== job $([ $how = scancel ] && echo 4 || echo 5): $how of a training job"
  rm -rf "$work/job-running" "$work/checkpoint-stop"
  t0=$(date +%s)
  job=$(submit 1 train_until_cancelled "$work" "$work/src" "$train")
  echo "submitted job $job"
  steps=0
  if await_command "$job"; then
    for _ in $(seq 600); do
      steps=$(grep -c '"event":"step"' "$work/checkpoint-stop/metrics.jsonl" 2>/dev/null || true)
      [ "${steps:-0}" -ge 2 ] && break
      sleep 0.1
    done
  fi
  if [ "${steps:-0}" -lt 2 ]; then
    bad "job $job trained no 2 steps within 60 s: $(wait_job "$job" 1)"
    scancel "$job" 2>/dev/null || true
    cat "$work/job-$job.out" 2>/dev/null
    continue
  fi
  sig=SIGTERM
  if [ $how = scancel ]; then scancel "$job"; else sig=SIGUSR1 && scancel --signal=USR1 "$job"; fi
  finish_job "$job" 120
  check "fanstore-train said it stopped on $sig with a checkpoint" \
    grep -qE "^fanstore-train: stopped by $sig after step [0-9]+; checkpoint in" <<<"$out"
  check "its metrics end with the stopped record" \
    grep -q "\"event\":\"stopped\".*\"signal\":\"$sig\"" <(tail -1 "$work/checkpoint-stop/metrics.jsonl")
  check "the checkpoint is there" test -s "$work/checkpoint-stop/checkpoint.bin"
  if [ $how = usr1 ]; then
    # 138 (SIGUSR1), or 143: srun ends a step's other tasks with SIGTERM once one has died of a signal, and the
    # ranks die of SIGUSR1 each on its own, after MPI_Finalize (seen once in CI).
    check "the batch script went on to its end: the command's status 138 or 143" \
      grep -qE 'fanstore.sbatch: command finished with status (138|143)$' <<<"$out"
    check "every daemon lived through SIGUSR1 and stopped on SIGTERM at the end" \
      test "$(grep -c 'fanstore serve\[rank [0-3]\]: stopping on Terminated' <<<"$out")" = 4
  fi
  check "no fanstore serve of job $job is left" test -z "$(serve_processes "$job")"
  check "the daemons removed what they had staged" test -z "$(ls -A "$work/local")"
done

echo "slurm_test: $passes passed, $fails failed"
[ "$fails" = 0 ]
