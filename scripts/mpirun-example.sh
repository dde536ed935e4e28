#!/usr/bin/env bash
# Multi-node FanStore with plain mpirun: one `fanstore serve` per node, then the training job through the
# node's daemon. Usage: scripts/mpirun-example.sh IMAGE LOCAL_DIR HOSTFILE -- COMMAND...
#   e.g. scripts/mpirun-example.sh /shared/imagenet.fst /nvme/fanstore hosts -- python train.py --data /fanstore/train
# Every node needs the same LOCAL_DIR (node-local: NVMe or /dev/shm) and FanStore at the same path.
# If one node's daemon dies, the others keep serving (their clients get EIO for that node's files, or read another
# replica with FANSTORE_SERVE_OPTIONS='--replicas 2'): mpirun is told not to abort the job when a rank exits
# (--mca orte_abort_on_non_zero_status 0; Open MPI 4.1 would otherwise kill every daemon). Set
# FANSTORE_ABORT_ON_DEATH=1 to have one dead daemon stop them all instead.
set -euo pipefail
if [ $# -lt 5 ] || [ "$4" != "--" ]; then
  echo "usage: $0 IMAGE LOCAL_DIR HOSTFILE -- COMMAND..." >&2
  exit 2
fi
image=$1 local=$2 hostfile=$3
shift 4
# Without FANSTORE: the bundle this script came with (share/fanstore/scripts/), else the source tree's build, else PATH.
here=$(cd "$(dirname "$0")" && pwd)
fanstore=${FANSTORE:-}
for candidate in "$here/../../../bin/fanstore" "$here/../build/bin/fanstore"; do
  [ -z "$fanstore" ] && [ -x "$candidate" ] && fanstore=$(cd "$(dirname "$candidate")" && pwd)/fanstore
done
fanstore=${fanstore:-$(command -v fanstore || true)}
[ -n "$fanstore" ] || { echo "fanstore: no fanstore binary found: set FANSTORE to its path (the same on every node)" >&2; exit 2; }
nodes=$(sort -u "$hostfile" | grep -vc '^\s*$')
sock="$local/fanstore.sock"

# 1. One daemon per node (ppr:1:node), staging this node's partitions; --cleanup removes them at the end.
keep_survivors=(--mca orte_abort_on_non_zero_status 0)
[ "${FANSTORE_ABORT_ON_DEATH:-0}" = 1 ] && keep_survivors=()
# shellcheck disable=SC2086 # FANSTORE_SERVE_OPTIONS is a list of options
mpirun --hostfile "$hostfile" --map-by ppr:1:node --bind-to none "${keep_survivors[@]}" \
  "$fanstore" serve --image "$image" --local "$local" --timeout "${FANSTORE_TIMEOUT:-5}" --cleanup \
  ${FANSTORE_SERVE_OPTIONS:-} &
serve_pid=$!
# Whatever happens to the job, stop the daemons: SIGTERM to mpirun reaches every rank, which removes its
# socket (and, with --cleanup, the staged data).
trap 'kill -TERM $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null || true' EXIT

# 2. Wait until every node's daemon is ready (the socket appears once the node serves). A daemon that fails (a bad
#    image, no room on its node) makes every daemon exit, and then waiting is pointless.
mpirun --hostfile "$hostfile" --map-by ppr:1:node "$fanstore" wait "$sock" --timeout "${FANSTORE_STAGE_TIMEOUT:-3600}" &
wait_pid=$!
while kill -0 "$wait_pid" 2>/dev/null; do
  if ! kill -0 "$serve_pid" 2>/dev/null; then
    kill -TERM "$wait_pid" 2>/dev/null || true
    wait "$wait_pid" 2>/dev/null || true
    echo "fanstore: the daemons stopped before every node was ready (their lines above say why)" >&2
    exit 1
  fi
  sleep 0.2
done
# fanstore wait says what failed (a timeout names FANSTORE_STAGE_TIMEOUT's value); mpirun says why it could not start.
wait "$wait_pid" || { echo "fanstore: not every node's daemon became ready (the lines above say why)" >&2; exit 1; }

# 3. The job itself, any number of ranks per node, each process talking to its own node's daemon.
mpirun --hostfile "$hostfile" --map-by "ppr:${FANSTORE_PPN:-1}:node" \
  "$fanstore" run --daemon "$sock" --mount /fanstore -- "$@"
echo "fanstore: job finished on $nodes nodes" >&2
