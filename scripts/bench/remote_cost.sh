#!/usr/bin/env bash
# What a remote read costs in CPU, beside its wall time: a client on rank 0's node reads files that live on the
# other 3 of 4 daemons (--cache-bytes 0, so every read crosses), and remote_cost.py reports, per 1,000 files, the
# wall seconds and the CPU seconds of the client, of the asking daemon (rank 0) and of the owning daemons (ranks 1-3
# summed). Over shared memory (4 ranks on this machine) and over TCP (4 network namespaces, scripts/netns-hosts.sh).
# Each daemon mechanism that can be switched off is measured with and without it, in alternating rounds, so that
# whether it earns its place is decided on this table (docs/daemon.md, "Progress").
# Usage: scripts/bench/remote_cost.sh OUT_DIR [--quick]   (bench.sh runs it; it can also run alone; TCP needs root)
# Appends rows to OUT_DIR/raw.csv and notes to OUT_DIR/notes.tsv. Env: BUILD_DIR, BENCH_DISK; COST_ROUNDS (default 3,
# 1 with --quick); COST_ALT=PATH adds a column "alt": daemons of another build's `fanstore` (an A/B across commits;
# the clients stay this build's);
# COST_ONLY="default alt" runs only the variants named. The daemons are found by a program name ending in "fanstore".
set -euo pipefail
# shellcheck source=scripts/bench/standalone.sh
source "$(dirname "$0")/standalone.sh" remote-cost "$@"
FS=$BUILD_DIR/bin/fanstore
IOBENCH=${IOBENCH:-$BUILD_DIR/bin/fanstore-iobench}
HERE=$(dirname "$0")
ROUNDS=${COST_ROUNDS:-$([ "$QUICK" = 1 ] && echo 1 || echo 3)}
TAG=rc$$
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl "self,vader")
LOGS=$TMP
# shellcheck source=scripts/bench/start_daemons.sh
source "$HERE/start_daemons.sh"
# name|fanstore binary|serve options: the default, then each mechanism off.
VARIANTS=("default|$FS|" "no-doorbell|$FS|--no-doorbell" "no-mapped|$FS|--mapped-send-min 0")
[ -n "${COST_ALT:-}" ] && VARIANTS+=("alt|$COST_ALT|")
if [ -n "${COST_ONLY:-}" ]; then
  kept=()
  for v in "${VARIANTS[@]}"; do [[ " $COST_ONLY " == *" ${v%%|*} "* ]] && kept+=("$v"); done
  [ ${#kept[@]} -gt 0 ] || { log "COST_ONLY='$COST_ONLY' names no variant: use default, no-doorbell, no-mapped or alt (with COST_ALT)"; exit 2; }
  VARIANTS=("${kept[@]}")
fi
# directory|files|bytes each, and the cases read from them: label|directory|reader threads (4: a loader's workers;
# "paced": one read every 10 ms, so that the daemons' loops have left their hot window before each).
FILES=("d4k|2000|4096" "d128k|600|131072" "d2m|80|2097152")
CASES=("4 KiB files|d4k|4" "4 KiB files, one reader|d4k|1" "4 KiB files, one every 10 ms|d4k|paced"
  "128 KiB files|d128k|4" "2 MiB files|d2m|4")
SECONDS_EACH=$([ "$QUICK" = 1 ] && echo 0.5 || echo 2)
PACED_READS=$([ "$QUICK" = 1 ] && echo 50 || echo 200)

DAEMON_PID="" NETNS=0
cleanup() {
  [ -n "$DAEMON_PID" ] && stop_daemons
  [ $NETNS = 1 ] && bash "$REPO/scripts/netns-hosts.sh" down "$TAG" 4 >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT
rm -rf "$TMP" && mkdir -p "$TMP/src"
for f in "${FILES[@]}"; do
  IFS='|' read -r dir n bytes <<<"$f"
  "$PY" -c "
import os, random, sys
r = random.Random(7); d = sys.argv[1]; os.makedirs(d)
for i in range(int(sys.argv[2])):
    open(os.path.join(d, f'f{i:05d}'), 'wb').write(r.randbytes(int(sys.argv[3])))" "$TMP/src/$dir" "$n" "$bytes"
done
"$FS" pack "$TMP/src" -o "$TMP/img" --parts 4 --level 0 --threads 2 >/dev/null

# start BIN LAUNCH... -- SERVE OPTIONS : 4 daemons of BIN (start_daemons.sh: DAEMON_PID, DAEMON_SOCKET), staged.
start() {
  local bin=$1
  shift
  DAEMON_LAUNCH=()
  while [ "$1" != -- ]; do DAEMON_LAUNCH+=("$1"); shift; done
  shift
  rm -rf "$TMP/n"
  FANSTORE=$bin start_daemons "$TMP/img" "$TMP/n" --cache-bytes 0 "$@"
}

# The files rank 0 does not hold, per size directory: $TMP/remote-DIR.txt (from the partitions it staged).
remote_lists() {
  local held
  held=$(cd "$TMP/n/node0" && ls part-*.fsp | sed 's/^part-0*\([0-9]\)/\1/; s/\.fsp$//' | tr '\n' ' ')
  "$PY" - "$FS" "$TMP" "$held" "${FILES[@]}" <<'PYEOF'
import subprocess, sys
fs, tmp, held = sys.argv[1], sys.argv[2], set(sys.argv[3].split())
for s in sys.argv[4:]:
    d = s.split("|")[0]
    files = sorted(__import__("os").listdir(f"{tmp}/src/{d}"))
    remote = []
    for f in files:
        out = subprocess.run([fs, "stat", f"{tmp}/img", f"/{d}/{f}"], capture_output=True, text=True, check=True).stdout
        part = next(l.split()[1] for l in out.splitlines() if l.strip().startswith("part:"))
        if part not in held:
            remote.append(f"{d}/{f}")
    open(f"{tmp}/remote-{d}.txt", "w").write("\n".join(remote) + "\n")
PYEOF
}

# measure SYSTEM TRANSPORT : one round of every size against the running daemons, appended to $TMP/samples.
measure() {
  local c label dir threads line client
  for c in "${CASES[@]}"; do
    IFS='|' read -r label dir threads <<<"$c"
    # Passes over the list for SECONDS_EACH, the client's caches off so that every read crosses (tick-based CPU
    # figures need seconds, not a 0.1 s pass).
    client=("$IOBENCH" --op read --path /fanstore --list "$TMP/remote-$dir.txt" --threads "$threads" --warmup 0
      --min-time "$SECONDS_EACH" --block 4194304)
    [ "$threads" = paced ] && client=("$PY" "$HERE/paced_read.py" /fanstore "$TMP/remote-$dir.txt" 10 "$PACED_READS")
    line=$(FANSTORE_CACHE_BYTES=0 FANSTORE_NODE_CACHE=off "$PY" "$HERE/remote_cost.py" --parent "$DAEMON_PID" -- "$FS" \
      run --daemon "$DAEMON_SOCKET" --mount /fanstore -- "${client[@]}") || line="error,error,error,error"
    echo "$1|$2|$label|$line" >>"$TMP/samples"
  done
}

# rounds TRANSPORT LAUNCH... : ROUNDS rounds, each starting every variant's daemons afresh, in turn.
rounds() {
  local transport=$1 v name bin opts r
  shift
  for ((r = 0; r < ROUNDS; r++)); do
    for v in "${VARIANTS[@]}"; do
      IFS='|' read -r name bin opts <<<"$v"
      # shellcheck disable=SC2086  # opts: serve options, split on purpose
      start "$bin" "$@" -- $opts || { log "$transport $name: daemons did not stage (\$TMP/serve.log)"; stop_daemons; continue; }
      [ -f "$TMP/remote-d4k.txt" ] || remote_lists
      log "$transport, round $((r + 1))/$ROUNDS: $name"
      measure "$name" "$transport"
      stop_daemons
    done
  done
}

rounds "shared memory" "${MPIRUN[@]}" -np 4
if [ "$(id -u)" = 0 ] && bash "$REPO/scripts/netns-hosts.sh" up "$TAG" 4 "$TMP/hosts" >/dev/null 2>&1; then
  NETNS=1
  mapfile -t TCP <"$TMP/hosts/mpirun"
  rounds TCP "${TCP[@]}" -np 4
else
  log "TCP: no network namespaces here (needs root); shared memory only"
fi

# The median of the rounds, per system, transport, size and quantity.
[ -s "$TMP/samples" ] || { log "no measurement was made (see the lines above)"; exit 1; }
"$PY" - "$TMP/samples" "$OUT/raw.csv" <<'PYEOF'
import csv, statistics, sys
samples, raw = sys.argv[1], sys.argv[2]
what = ["wall", "client CPU", "asking daemon CPU", "owning daemons CPU"]
got = {}
for line in open(samples):
    system, transport, label, values = line.rstrip("\n").split("|")
    for w, v in zip(what, values.split(",")):
        got.setdefault((transport, label, w), {}).setdefault(system, []).append(v)
with open(raw, "a", newline="") as f:
    out = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
    for (transport, label, w), systems in got.items():
        for system, vals in systems.items():
            nums = [float(v) for v in vals if v != "error"]
            failed = len(vals) - len(nums)
            value = f"{statistics.median(nums):.3f}" if not failed else f"error ({failed} of {len(vals)} rounds failed)"
            out.writerow(["remote-cost", f"{label}, {transport}: {w}", system, "s per 1,000 files", "lower", value])
PYEOF
note "Files that live on the other 3 of 4 daemons (--cache-bytes 0, packed raw in 4 partitions), each read whole by 4 reader threads (one, in the 'one reader' rows) of a fresh client (\`fanstore run --daemon\` on rank 0's socket + fanstore-iobench, passes over the list for $SECONDS_EACH s, FANSTORE_CACHE_BYTES=0 and FANSTORE_NODE_CACHE=off so that every read crosses). 'One every 10 ms': one reader (scripts/bench/paced_read.py, Python) sleeping 10 ms before each of $PACED_READS reads, so that every daemon has left its hot window: what a request after a quiet spell costs. Per 1,000 files: wall seconds (the client's own timed seconds; paced: the reads' alone), and CPU seconds (utime+stime) of the client (getrusage), of the asking daemon (rank 0) and of the owning daemons (ranks 1-3 summed), from /proc (paced: with the daemons' idle waits between reads). Median of $ROUNDS rounds; each round starts every variant's daemons afresh, in turn. Shared memory: 4 ranks on this machine; TCP: 4 network namespaces (Open MPI over TCP on veths). All processes share $(nproc) cores: on a cluster the daemons do not compete with three stand-in nodes, so the CPU rows are what limits throughput there."
