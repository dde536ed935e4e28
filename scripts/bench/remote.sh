# Sourced by scripts/bench.sh: the multi-node rows. `remote_rows` measures, each next to its baseline in the same run:
#   remote      4 daemons on this machine (shared memory): whole-file reads through `fanstore run --daemon` and the
#               daemon's fetch alone (bench_remote), vs an MPI ping-pong of the same size and the local image
#   remote-tcp  the same across 4 network namespaces (Open MPI over TCP on veths) vs a ping-pong on the same veths
#   prefetch    a DataLoader epoch on 4 daemons (3/4 of the files remote) with and without hints vs a local image
#   daemon      idle CPU (default, --progress, 2,000 idle connections) and 1,000 files after a peer was SIGKILLed
# shellcheck shell=bash
# Uses from bench.sh: BUILD_DIR BIN FANSTORE IOBENCH PINGPONG PY HELPERS REPO SRC LISTS DISK TMPFS LOGS MIN_TIME QUICK
# MOUNT record note measure is_error field timed unavailable log NA_SERVE HAVE_SERVE; start_daemons.sh.

# shellcheck source=scripts/bench/start_daemons.sh
source "$HELPERS/start_daemons.sh"

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl "self,vader")
BENCH_REMOTE=$BUILD_DIR/bin/bench_remote
DAEMON_CHECK=$BUILD_DIR/bin/daemon_check
NETNS_TAG=b$$
NETNS_UP=0

remote_cleanup() {
  if [ $NETNS_UP = 1 ]; then "$REPO/scripts/netns-hosts.sh" down "$NETNS_TAG" 4 >/dev/null 2>&1 || true; fi
  NETNS_UP=0
}

# record_csv SECTION SYSTEM CSV MISSING : the latency and throughput rows of every REMOTE_CASES size from the
# "size,latency_us,mib_per_s" lines in CSV; a size without a line gets MISSING (why it is not there).
record_csv() {
  local section=$1 sys=$2 csv=$3 missing=$4 label size lat bw
  for c in "${REMOTE_CASES[@]}"; do
    IFS='|' read -r label size _ _ <<<"$c"
    lat=$(echo "$csv" | awk -F, -v s="$size" '$1 == s {print $2}')
    bw=$(echo "$csv" | awk -F, -v s="$size" '$1 == s {print $3}')
    record "$section" "$label latency" "$sys" us/file lower "${lat:-$missing}"
    record "$section" "$label throughput" "$sys" MiB/s higher "${bw:-$missing}"
  done
}

# iobench_rows SECTION SYSTEM WHY TAG PREFIX... : whole-file reads of every REMOTE_CASES size, once, by a fresh
# `PREFIX iobench` process (1 reader for latency, 4 for throughput); WHY non-empty: every row says it instead.
iobench_rows() {
  local section=$1 sys=$2 why=$3 tag=$4 label size path list kind case_name unit better threads args line v
  shift 4
  for c in "${REMOTE_CASES[@]}"; do
    IFS='|' read -r label size path list <<<"$c"
    for kind in lat bw; do
      if [ $kind = lat ]; then case_name="$label latency"; unit=us/file; better=lower; threads=1
      else case_name="$label throughput"; unit=MiB/s; better=higher; threads=4; fi
      if [ -n "$why" ]; then record "$section" "$case_name" "$sys" "$unit" "$better" "$why"; continue; fi
      # One pass, no warm-up: the client caches what it fetched, so a second pass would time cache hits.
      args=(--op read --path "$MOUNT/$path" --list "$LISTS/$list" --threads "$threads" --warmup 0 --min-time 0 --block 4194304)
      line=$(measure none "$tag-$size-$kind" "$@" "$IOBENCH" "${args[@]}")
      if is_error "$line"; then record "$section" "$case_name" "$sys" "$unit" "$better" "$line"; continue; fi
      if [ $kind = lat ]; then v=$(awk -v n="$(field "$line" 6)" 'BEGIN {printf "%.2f", n / 1000}'); else v=$(field "$line" 8); fi
      record "$section" "$case_name" "$sys" "$unit" "$better" "$v"
    done
  done
}

# Whole-file reads (fanstore-daemon) and fetches alone (fanstore-fetch) through the daemon at $DAEMON_SOCKET;
# `why` non-empty: every row says it instead.
record_daemon_reads() {
  local section=$1 why=$2 tag=$3 out
  iobench_rows "$section" fanstore-daemon "$why" "$tag-daemon" "$FANSTORE" run --daemon "$DAEMON_SOCKET" --mount "$MOUNT" --
  out=""
  if [ -z "$why" ] && [ -x "$BENCH_REMOTE" ]; then
    out=$(FANSTORE_DAEMON=$DAEMON_SOCKET timeout 300 "$BENCH_REMOTE" --sizes "$(remote_sizes)" --threads 4 \
      --min-time "$MIN_TIME" 2>"$LOGS/$tag-fetch.log") || out=""
    echo "$out" >>"$LOGS/$tag-fetch.log"
  fi
  local r
  r=${why:-$([ -x "$BENCH_REMOTE" ] && echo "error (logs/$tag-fetch.log)" || echo "n/a (not built: bench_remote)")}
  record_csv "$section" fanstore-fetch "$out" "$r"
}

remote_sizes() {
  local c sizes="" size
  for c in "${REMOTE_CASES[@]}"; do IFS='|' read -r _ size _ _ <<<"$c"; sizes+="${sizes:+,}$size"; done
  echo "$sizes"
}

# --- remote: shared memory ---------------------------------------------------------------------------------------
remote_shm_rows() {
  log "remote: MPI ping-pong, local image, daemons (shared memory)"
  note remote "4 daemons on this machine (Open MPI shared memory), started with --cache-bytes 0 so that every read is remote. 'via daemon': each file read once, whole (open+read+close), by a fresh client process on rank 0's socket through \`fanstore run --daemon\` (about 3/4 of the files live on other ranks; the client decodes, checks and caches). 'daemon fetch': bench_remote, the stored bytes of remote files only, fetched through rank 0's daemon into the caller's buffer, looped for $MIN_TIME s -- what an MPI receive does. Latency: one reader; throughput: 4 readers. MPI ping-pong: 4 ranks, rank 0 asks ranks 1-3 round-robin for the file's size in bytes (1, then 4 in flight). 6 processes share 2 cores: Open MPI runs oversubscribed (yielding) and every figure moves with other load."
  local pp
  pp=$(timeout 120 "${MPIRUN[@]}" -np 4 "$PINGPONG" --sizes "$(remote_sizes)" --min-time "$MIN_TIME" --window 4 \
    2>"$LOGS/pingpong.log") || pp=""
  echo "$pp" >>"$LOGS/pingpong.log"
  record_csv remote mpi-pingpong "$pp" "error (logs/pingpong.log)"
  local why=""
  if [ $HAVE_SERVE = 0 ]; then why=$NA_SERVE
  elif [ -n "$REMOTE_LOCAL_WHY" ]; then why="n/a (no image to serve: $REMOTE_LOCAL_WHY)"
  else
    unset DAEMON_LAUNCH
    start_daemons "$REMOTE_IMG" "$TMPFS/nodes" --cache-bytes 0 || why="error (daemons did not start: logs/serve.log)"
  fi
  record_daemon_reads remote "$why" remote
  # The local image: the same reads without a daemon, its files in the page cache first (as the daemons' staged
  # copies on tmpfs are): one run found them evicted by the sections before and timed the disk (4.4 ms per 4 MiB).
  [ -z "$REMOTE_LOCAL_WHY" ] && { cat "$REMOTE_IMG"/* >/dev/null 2>&1 || true; }
  iobench_rows remote fanstore-local "$REMOTE_LOCAL_WHY" remote-local "$FANSTORE" run --image "$REMOTE_IMG" --mount "$MOUNT" --
  # Idle CPU of these daemons (default settings but the cache), then with 2,000 idle connections on rank 0.
  local cpu
  if [ -z "$why" ]; then
    cpu=$("$PY" "$HELPERS/daemon_cpu.py" --parent "$DAEMON_PID" --seconds "$CPU_SECONDS" 2>>"$LOGS/daemon-cpu.log") || cpu="error (logs/daemon-cpu.log)"
    record daemon "idle CPU, each of 4 daemons" fanstore-daemon "% of a core" lower "$cpu"
    cpu=$("$PY" "$HELPERS/daemon_cpu.py" --parent "$DAEMON_PID" --rank 0 --socket "$DAEMON_SOCKET" \
      --idle-connections 2000 --seconds "$CPU_SECONDS" 2>>"$LOGS/daemon-cpu.log") || cpu="error (logs/daemon-cpu.log)"
    record daemon "idle CPU, 2,000 idle client connections" fanstore-daemon "% of a core" lower "$cpu"
    stop_daemons
    start_daemons "$REMOTE_IMG" "$TMPFS/nodes" --progress || true
    cpu=$("$PY" "$HELPERS/daemon_cpu.py" --parent "$DAEMON_PID" --seconds "$CPU_SECONDS" 2>>"$LOGS/daemon-cpu.log") || cpu="error (logs/daemon-cpu.log)"
    record daemon "idle CPU, each of 4 daemons" fanstore-progress "% of a core" lower "$cpu"
    stop_daemons
  else
    record daemon "idle CPU, each of 4 daemons" fanstore-daemon "% of a core" lower "$why"
  fi
}

# --- remote-tcp: 4 network namespaces ----------------------------------------------------------------------------
remote_tcp_rows() {
  log "remote-tcp: 4 network namespaces, Open MPI over TCP"
  note remote-tcp "4 network namespaces on one bridge (scripts/netns-hosts.sh), one daemon per namespace, Open MPI over TCP on the veths (mpirun starts an orted in each namespace; btl tcp,self). Rows as in the shared-memory table, daemons with --cache-bytes 0; the MPI ping-pong runs across the same veths. All namespaces share this machine's 2 cores and its kernel: the veth hop costs what a loopback TCP hop costs, not a NIC's latency."
  local why="" pp=""
  if [ $HAVE_SERVE = 0 ]; then why=$NA_SERVE
  elif [ -n "$REMOTE_LOCAL_WHY" ]; then why="n/a (no image to serve: $REMOTE_LOCAL_WHY)"
  elif ! "$REPO/scripts/netns-hosts.sh" up "$NETNS_TAG" 4 "$TMPFS/netns" >"$LOGS/netns.log" 2>&1; then
    why="n/a ($(tail -1 "$LOGS/netns.log" | sed 's/^netns-hosts: //'))"
  else
    NETNS_UP=1
    mapfile -t DAEMON_LAUNCH <"$TMPFS/netns/mpirun"
    pp=$(timeout 300 "${DAEMON_LAUNCH[@]}" -np 4 "$PINGPONG" --sizes "$(remote_sizes)" --min-time "$MIN_TIME" \
      --window 4 2>"$LOGS/pingpong-tcp.log") || pp=""
    echo "$pp" >>"$LOGS/pingpong-tcp.log"
    DAEMON_LAUNCH+=(-np 4)
    start_daemons "$REMOTE_IMG" "$TMPFS/tcpnodes" --cache-bytes 0 || why="error (daemons did not start: logs/serve.log)"
  fi
  if [ -n "$why" ]; then
    for c in "${REMOTE_CASES[@]}"; do
      IFS='|' read -r label _ _ _ <<<"$c"
      record remote-tcp "$label latency" mpi-pingpong us/file lower "$why"
    done
  else
    record_csv remote-tcp mpi-pingpong "$pp" "error (logs/pingpong-tcp.log)"
  fi
  record_daemon_reads remote-tcp "$why" tcp
  if [ -n "$DAEMON_PID" ]; then stop_daemons; fi
  unset DAEMON_LAUNCH
  remote_cleanup
}

# --- prefetch: DataLoader epochs ---------------------------------------------------------------------------------
prefetch_rows() {
  local n
  n=$(find "$SRC/imagenet/train" -type f | wc -l)
  log "prefetch: DataLoader epoch over $n files, local image vs 4 daemons with and without hints"
  note prefetch "$n files of 100-120 KB (the loader table's tree) packed raw in 4 partitions; torchvision ImageFolder + DataLoader (batch 64, shuffle, num_workers=2, bytes mode: each worker reads the whole file), $PY under \`fanstore run\`. Local image: \`--image\`, every file on this node. Daemons: 4 ranks on this machine, the reader on rank 0's socket, so 3/4 of the files are remote; two epochs in one process on freshly started daemons (default --cache-bytes, 1 GiB): 'epoch 1' starts with a cold fetch cache whose memory the kernel must first hand out and zero, 'epoch 2' is the steady state of a training run (a new shuffle; the cache's memory is reused, and part of the data is still in it). With hints: tools/python/fanstore_prefetch.py's HintingSampler sends each epoch's order when the epoch starts; the daemon fetches ahead into its fetch cache. '+ --cache-prefault': the same with the daemons started with --cache-prefault (each rank's 1 GiB cache faulted in before ready, so it is not in the epoch's time; on this machine that is 4 GiB for the one node that reads). Worker start-up is timed. Everything shares 2 cores: the daemons' prefetching competes with the loader for CPU."
  local img=$DISK/img-imagenet4 why="" line
  if [ $HAVE_SERVE = 0 ]; then why=$NA_SERVE
  elif ! timed pack-imagenet4 "$FANSTORE" pack "$SRC/imagenet" -o "$img" --parts 4 --level 0 --threads 2 >/dev/null; then
    why="error (logs/pack-imagenet4.log)"
  fi
  local args=("$HELPERS/loader_epoch.py" --root "$MOUNT/train" --mode bytes --epochs 2)
  if [ -d "$img" ]; then
    cat "$img"/* >/dev/null 2>&1 || true
    line=$(measure none prefetch-local "$FANSTORE" run --image "$img" --mount "$MOUNT" -- "$PY" "${args[@]}" --label local)
    record_epochs fanstore-local "$line"
  else
    record_epochs fanstore-local "${why:-error (logs/pack-imagenet4.log)}"
  fi
  local sys hint serve
  for sys in fanstore-daemon fanstore-hinted fanstore-prefault; do
    if [ -n "$why" ]; then record_epochs "$sys" "$why"; continue; fi
    unset DAEMON_LAUNCH
    serve=(); [ $sys = fanstore-prefault ] && serve=(--cache-prefault)
    if ! start_daemons "$img" "$TMPFS/pfnodes" "${serve[@]}"; then
      record_epochs "$sys" "error (daemons did not start: logs/serve.log)"
      continue
    fi
    hint=(); [ $sys != fanstore-daemon ] && hint=(--hint)
    line=$(PYTHONPATH="$REPO/tools/python${PYTHONPATH:+:$PYTHONPATH}" measure none "prefetch-$sys" "$FANSTORE" run \
      --daemon "$DAEMON_SOCKET" --mount "$MOUNT" -- "$PY" "${args[@]}" --label "$sys" "${hint[@]}")
    stop_daemons
    grep "rank 0\]: stopping" "$LOGS/serve.log" >>"$LOGS/prefetch-$sys.log" || true
    record_epochs "$sys" "$line"
  done
}

# record_epochs SYSTEM LINE : the two epoch rows from loader_epoch's line (files/s in fields 5 and 7), or LINE
# itself (an error, or why the row is missing) in both.
record_epochs() {
  local sys=$1 line=$2
  if is_error "$line" || [[ $line == n/a* ]]; then
    record prefetch "epoch 1 (cold fetch cache), bytes" "$sys" files/s higher "$line"
    record prefetch "epoch 2 (steady state), bytes" "$sys" files/s higher "$line"
  else
    record prefetch "epoch 1 (cold fetch cache), bytes" "$sys" files/s higher "$(field "$line" 5)"
    record prefetch "epoch 2 (steady state), bytes" "$sys" files/s higher "$(field "$line" 7)"
  fi
}

# --- daemon: a dead peer under a 1,000-file read -----------------------------------------------------------------
dead_peer_rows() {
  log "daemon: 1,000 files after one of 4 daemons was SIGKILLed"
  note daemon "Idle CPU: utime+stime from /proc over ${CPU_SECONDS} s, percent of one core, averaged over the 4 daemons (with 2,000 connections: rank 0); default settings (a hot window of 0.5 ms of polling after activity, then sleeps of 0.2-2 ms between looks at MPI) next to --progress (never sleeps: a core). Dead peer: 1,000 files of 4-64 KiB in 8 partitions, 4 daemons (--timeout 2, --cache-bytes 0, mpirun --mca orte_abort_on_non_zero_status 0), daemon_check with 4 threads on rank 0: the tree once before and once right after rank 1 is SIGKILLed (every file must still read right: its 1/4 of the remote files from the image directory). The goal: no more than --timeout + 2 s on top of the normal time."
  local why="" tree=$TMPFS/dead-src img=$DISK/img-dead t0 t1 normal dead pid
  if [ $HAVE_SERVE = 0 ]; then why=$NA_SERVE
  elif [ ! -x "$DAEMON_CHECK" ]; then why="n/a (not built: daemon_check)"
  else
    "$PY" - "$tree" <<'PYEOF'
import os, random, sys
r = random.Random(9)
for i in range(1000):
    d = os.path.join(sys.argv[1], f"d{i % 10}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:04d}"), "wb") as f:
        f.write(r.randbytes(r.choice((4096, 16384, 65536))))
PYEOF
    timed pack-dead "$FANSTORE" pack "$tree" -o "$img" --parts 8 --threads 2 >/dev/null || why="error (logs/pack-dead.log)"
  fi
  if [ -z "$why" ]; then
    # Without this flag Open MPI's mpirun aborts the whole job when a rank dies.
    DAEMON_LAUNCH=("${MPIRUN[@]}" --mca orte_abort_on_non_zero_status 0 -np 4)
    start_daemons "$img" "$TMPFS/deadnodes" --timeout 2 --cache-bytes 0 || why="error (daemons did not start: logs/serve.log)"
    unset DAEMON_LAUNCH
  fi
  if [ -z "$why" ]; then
    t0=$(date +%s.%N)
    FANSTORE_DAEMON=$DAEMON_SOCKET FANSTORE_CACHE_BYTES=0 "$DAEMON_CHECK" --src "$tree" --threads 4 >>"$LOGS/dead-peer.log" 2>&1 || why="error (logs/dead-peer.log)"
    t1=$(date +%s.%N)
    normal=$(echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}')
    pid=$(for p in $(pgrep -f "fanstore serve --image $img" || true); do
      if grep -qa "OMPI_COMM_WORLD_RANK=1" "/proc/$p/environ" 2>/dev/null; then echo "$p"; fi; done | head -1)
    if [ -n "$pid" ] && [ -z "$why" ]; then
      kill -KILL "$pid"
      while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
      t0=$(date +%s.%N)
      # Every file still reads right: the dead rank's from the image directory (docs/daemon.md, "Faults").
      FANSTORE_DAEMON=$DAEMON_SOCKET FANSTORE_CACHE_BYTES=0 "$DAEMON_CHECK" --src "$tree" --threads 4 \
        >>"$LOGS/dead-peer.log" 2>&1 || why="error (logs/dead-peer.log)"
      t1=$(date +%s.%N)
      dead=$(echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}')
    else
      why=${why:-"error (no rank 1 to kill)"}
    fi
    stop_daemons
    grep "rank 0\]: stopping" "$LOGS/serve.log" >>"$LOGS/dead-peer.log" || true
  fi
  record daemon "1,000 files, 4 daemons, rank 1 SIGKILLed (--timeout 2 s)" normal s lower "${normal:-$why}"
  record daemon "1,000 files, 4 daemons, rank 1 SIGKILLed (--timeout 2 s)" fanstore-daemon s lower "${why:-$dead}"
}

remote_rows() {
  REMOTE_CASES=("4 KiB|4096|d10k|d10k.txt" "128 KiB|131072|f128k|f128k.txt" "4 MiB|4194304|f4m|f4m.txt")
  if [ "$QUICK" = 1 ]; then CPU_SECONDS=3; else CPU_SECONDS=10; fi
  # Its own image of micro/ in 4 partitions, so that 4 ranks each own one and 3/4 of the reads are remote.
  REMOTE_IMG=$DISK/img-remote
  REMOTE_LOCAL_WHY=$(unavailable fanstore-local)
  if [ -z "$REMOTE_LOCAL_WHY" ] && ! timed pack-remote "$FANSTORE" pack "$SRC/micro" -o "$REMOTE_IMG" --parts 4 \
      --level 0 --threads 2 >/dev/null; then
    REMOTE_LOCAL_WHY="error (logs/pack-remote.log)"
  fi
  remote_shm_rows
  remote_tcp_rows
  prefetch_rows
  dead_peer_rows
}
