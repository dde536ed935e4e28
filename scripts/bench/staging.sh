#!/usr/bin/env bash
# The staging rows of the benchmark (docs/daemon.md, "Staging rules"): 4 "nodes" (network namespaces of
# scripts/netns-hosts.sh, Open MPI over TCP) whose links are capped with tc, and a shared file system that is a real
# network file system: sshfs (FUSE client, one mount per node) of an OpenSSH server in a namespace of its own, over
# a link capped lower than the nodes'. Rows: time from mpirun to the first correct read of a remote file, for two
# image sizes, with staging in the background and with --strict-staging (the old rule: ready once staged); bytes
# read from the shared file system (the server's sftp-server processes' rchar) against the image size, for
# --replicas 1 and 2; wall time until every node has staged, against each node copying its share and the
# replicated partition (a quarter of the image) with cp from its mount.
# Usage: scripts/bench/staging.sh OUT_DIR [--quick]     (bench.sh runs it; it can also run alone; needs root)
# Appends rows to OUT_DIR/raw.csv and notes to OUT_DIR/notes.tsv. Env: BUILD_DIR, BENCH_DISK (data there),
# STAGE_NODE_RATE (tc rate of each node's link, default 1gbit), STAGE_FS_RATE (the file server's, default 400mbit).
set -euo pipefail
# shellcheck source=scripts/bench/standalone.sh
source "$(dirname "$0")/standalone.sh" staging "$@"
FS=$BUILD_DIR/bin/fanstore
NODE_RATE=${STAGE_NODE_RATE:-1gbit}
FS_RATE=${STAGE_FS_RATE:-400mbit}
N=4 TAG=stg$$ SERVER=10.99.0.100
na() {
  record "time to the first correct read" fanstore s lower "n/a ($1)"
  log "skipped: $1"
  exit 0
}
[ "$(id -u)" = 0 ] || na "needs root for network namespaces"
for c in ip tc sshfs /usr/sbin/sshd ssh-keygen mpirun; do command -v "$c" >/dev/null || na "no $c (scripts/install-deps.sh)"; done

now() { date +%s.%N; }
secs() { "$PY" -c "print(round($2 - $1, 2))"; }
cleanup() {
  pkill -f "sshfs.*$SERVER" 2>/dev/null || true
  [ -f "$TMP/sshd.pid" ] && kill "$(cat "$TMP/sshd.pid")" 2>/dev/null || true
  ip netns del "fsrv-$TAG" 2>/dev/null || true
  bash "$REPO/scripts/netns-hosts.sh" down "$TAG" "$N" || true
  rm -rf "$TMP"
}
trap cleanup EXIT
rm -rf "$TMP" && mkdir -p "$TMP/export" "$TMP/ssh"

# --- the nodes, the file server, the caps ---------------------------------------------------------------------
bash "$REPO/scripts/netns-hosts.sh" up "$TAG" "$N" "$TMP/hosts" >/dev/null || na "network namespaces cannot be made here"
br=daemon-$TAG-br
ip netns add "fsrv-$TAG"
ip link add "fsv$$" type veth peer name "fsw$$"
ip link set "fsv$$" netns "fsrv-$TAG"
ip link set "fsw$$" netns "$br"
ip -n "fsrv-$TAG" link set "fsv$$" name eth0
ip -n "fsrv-$TAG" addr add "$SERVER/24" dev eth0
ip -n "fsrv-$TAG" link set eth0 up
ip -n "fsrv-$TAG" link set lo up
ip -n "$br" link set "fsw$$" master br0
ip -n "$br" link set "fsw$$" up
cap() { tc -n "$1" qdisc replace dev "$2" root tbf rate "$3" burst 256kb latency 50ms; }
for ((i = 0; i < N; i++)); do cap "daemon-$TAG-$i" eth0 "$NODE_RATE"; done
for dev in $(ip -n "$br" -o link show master br0 | awk -F': ' '{print $2}' | cut -d@ -f1); do
  if [ "$dev" = "fsw$$" ]; then cap "$br" "$dev" "$FS_RATE"; else cap "$br" "$dev" "$NODE_RATE"; fi
done
cap "fsrv-$TAG" eth0 "$FS_RATE"

ssh-keygen -q -t ed25519 -N '' -f "$TMP/ssh/host" && ssh-keygen -q -t ed25519 -N '' -f "$TMP/ssh/client"
cp "$TMP/ssh/client.pub" "$TMP/ssh/authorized_keys"
cat >"$TMP/ssh/sshd_config" <<EOF
ListenAddress $SERVER
HostKey $TMP/ssh/host
PidFile $TMP/sshd.pid
PermitRootLogin prohibit-password
AuthorizedKeysFile $TMP/ssh/authorized_keys
StrictModes no
UsePAM no
Subsystem sftp /usr/lib/openssh/sftp-server
EOF
mkdir -p /run/sshd
ip netns exec "fsrv-$TAG" /usr/sbin/sshd -f "$TMP/ssh/sshd_config" || na "sshd did not start"
SSHFS_OPTS="IdentityFile=$TMP/ssh/client,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,LogLevel=ERROR"
# Mounts the shared file system at $2 in the namespace of node $1, then runs the rest there.
cat >"$TMP/on-node" <<EOF
#!/bin/sh
mnt=\$1; shift
mkdir -p "\$mnt"
sshfs -o "$SSHFS_OPTS" "root@$SERVER:$TMP/export" "\$mnt" || exit 1
exec "\$@"
EOF
chmod +x "$TMP/on-node"
# Bytes the file server has read from its disk for the clients: every sftp-server's rchar (requests are tiny). Each
# mount has its own sftp-server, whose count goes with it: runs start with none and sample before unmounting.
no_servers() {
  pkill -f "sshfs.*$SERVER" 2>/dev/null || true
  for _ in $(seq 100); do pgrep -x sftp-server >/dev/null || return 0; sleep 0.1; done
  log "sftp-server processes outlived their mounts"
}
served_bytes() {
  local t=0 p v
  for p in $(pgrep -x sftp-server); do
    v=$(awk '/^rchar/{print $2}' "/proc/$p/io" 2>/dev/null || echo 0)
    t=$((t + v))
  done
  echo "$t"
}

# --- two images: 1 MiB files of random bytes (stored as they are), a quarter of them replicated -----------------
SIZES=$([ $QUICK = 1 ] && echo "32 128" || echo "64 512")
make_image() {  # MiB
  local mib=$1 src=$TMP/src-$1
  "$PY" - "$src" "$mib" <<'PYEOF'
import os, random, sys
root, mib = sys.argv[1], int(sys.argv[2])
rnd = random.Random(mib)
for i in range(mib):
    d = os.path.join(root, "val" if i % 4 == 3 else "train")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as f:
        f.write(rnd.randbytes(1 << 20))
PYEOF
  "$FS" pack "$src" -o "$TMP/export/img-$mib" --parts 8 --replicate 'val/*' --level 0 >/dev/null
}
for s in $SIZES; do make_image "$s"; done
note "4 nodes: network namespaces over TCP, links capped at $NODE_RATE; the shared file system: sshfs of an OpenSSH server in its own namespace, its link capped at $FS_RATE; images of 1 MiB random files (stored raw), 8 partitions + a replicated quarter (val/); one run each"

MPIRUN=$(cat "$TMP/hosts/mpirun")
# Runs `fanstore serve` on the 4 nodes with image $1 and the options after it; sets T_FIRST (mpirun to the first
# right read of a file rank 0 does not hold), T_STAGED (to the "staged:" line), BYTES (read by the server).
run_fanstore() {
  local mib=$1; shift
  local local_dir=$TMP/node img_dir=$TMP/mnt/img-$mib log=$TMP/serve.log probe
  rm -rf "$TMP"/node* && : >"$log"
  no_servers
  probe=$(cd "$TMP/src-$mib" && ls train | sed -n 2p)  # f00001.bin: partition 1, on rank 1
  local t0; t0=$(now)
  # shellcheck disable=SC2086
  $MPIRUN -np $N --mca orte_abort_on_non_zero_status 0 "$TMP/on-node" "$TMP/mnt" "$FS" serve --image "$img_dir" \
    --local "$local_dir{rank}" --cleanup "$@" >"$log" 2>&1 &
  local job=$!
  "$FS" wait "${local_dir}0/fanstore.sock" --timeout 300 >/dev/null
  until "$FS" run --daemon "${local_dir}0/fanstore.sock" -- cat "/fanstore/train/$probe" 2>/dev/null |
        cmp -s - "$TMP/src-$mib/train/$probe"; do sleep 0.02; done
  T_FIRST=$(secs "$t0" "$(now)")
  until grep -q "fanstore serve: staged:\|staging failed" "$log"; do sleep 0.05; done
  T_STAGED=$(secs "$t0" "$(now)")
  BYTES=$(served_bytes)
  kill -TERM "$job" && wait "$job" || true
  no_servers
  grep "staged:" "$log" | sed 's/^/    /' >&2
}

# cp: each node copies its partitions (p mod 4 == node), the replicated one and the index from its own mount.
run_cp() {
  local mib=$1 pids=() i t0
  rm -rf "$TMP"/cp*
  no_servers
  t0=$(now)
  for ((i = 0; i < N; i++)); do
    mkdir -p "$TMP/cp$i"
    ip netns exec "daemon-$TAG-$i" "$TMP/on-node" "$TMP/cpmnt$i" sh -c \
      "cp $TMP/cpmnt$i/img-$mib/index.fsi $TMP/cpmnt$i/img-$mib/part-rep.fsp $TMP/cpmnt$i/img-$mib/part-0000$i.fsp \
          $TMP/cpmnt$i/img-$mib/part-0000$((i + 4)).fsp $TMP/cp$i/" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  T_CP=$(secs "$t0" "$(now)")
  BYTES_CP=$(served_bytes)
  no_servers
}

img_bytes() { du -sb --apparent-size "$TMP/export/img-$1" | cut -f1; }
for s in $SIZES; do
  size=$(img_bytes "$s")
  log "image of $s MiB: staging in the background"
  run_fanstore "$s"
  record "time to the first correct read, $s MiB image" fanstore s lower "$T_FIRST"
  record "wall time until every node has staged, $s MiB image" fanstore s lower "$T_STAGED"
  record "bytes read from the shared file system / image size, $s MiB, --replicas 1" fanstore "x image" lower \
    "$("$PY" -c "print(round($BYTES / $size, 3))")"
  log "  first read $T_FIRST s, staged $T_STAGED s, $BYTES bytes read of $size"
  log "image of $s MiB: --strict-staging"
  run_fanstore "$s" --strict-staging
  record "time to the first correct read, $s MiB image" strict s lower "$T_FIRST"
  log "  first read $T_FIRST s"
  log "image of $s MiB: cp from each node's mount"
  run_cp "$s"
  record "wall time until every node has staged, $s MiB image" cp s lower "$T_CP"
  record "bytes read from the shared file system / image size, $s MiB, --replicas 1" cp "x image" lower \
    "$("$PY" -c "print(round($BYTES_CP / $size, 3))")"
  log "  cp $T_CP s, $BYTES_CP bytes read"
done
big=${SIZES##* }
log "image of $big MiB: --replicas 2"
run_fanstore "$big" --replicas 2
record "bytes read from the shared file system / image size, $big MiB, --replicas 2" fanstore "x image" lower \
  "$("$PY" -c "print(round($BYTES / $(img_bytes "$big"), 3))")"
note "cp with --replicas 2 would read each regular partition twice and the replicated one 4 times: 2 x 3/4 + 4 x 1/4 = 2.5x the image"
