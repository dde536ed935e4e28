# Sourced by scripts/bench.sh: starts and stops 4 `fanstore serve` ranks on this machine (one local dir each).
# shellcheck shell=bash
# Uses FANSTORE, LOGS and MPIRUN from bench.sh; sets DAEMON_PID (mpirun's pid) and DAEMON_SOCKET (rank 0's socket).

# start_daemons IMAGE DIR [SERVE OPTIONS...] : returns once every rank has staged (the daemons serve before that:
# measuring then would time staging too), non-zero when that has not happened within 120 s.
# DAEMON_LAUNCH (an array, default MPIRUN -np 4) replaces the launcher, e.g. mpirun across network namespaces.
start_daemons() {
  local image=$1 dir=$2
  shift 2
  local launch=("${MPIRUN[@]}" -np 4)
  if [ -n "${DAEMON_LAUNCH+x}" ]; then launch=("${DAEMON_LAUNCH[@]}"); fi
  mkdir -p "$dir"
  "${launch[@]}" "$FANSTORE" serve --image "$image" --local "$dir/node{rank}" \
    --socket "$dir/node{rank}.sock" --cleanup "$@" >"$LOGS/serve.log" 2>&1 &
  DAEMON_PID=$!
  DAEMON_SOCKET=$dir/node0.sock
  "$FANSTORE" wait "$DAEMON_SOCKET" --staged --timeout 120 >>"$LOGS/serve.log" 2>&1
}

# stop_daemons : SIGTERM to mpirun, which forwards it to the ranks; waits so that staging dirs are cleaned up.
stop_daemons() {
  kill -TERM "$DAEMON_PID" 2>/dev/null || true
  wait "$DAEMON_PID" 2>/dev/null || true
  cat "$LOGS/serve.log" >>"$LOGS/serve-all.log" 2>/dev/null || true
  DAEMON_PID=""
}
