#!/bin/bash
# Changed and crafted images through the serving paths: `fanstore run` (MODE=run) or a FUSE mount (MODE=fuse).
# Each case must give EIO (with one fanstore line through run), never a crash, a SIGBUS, an unbounded allocation
# or a wrong byte, and leave the other files (and the mount) working.
# Usage: corruption_frontends.sh run|fuse FANSTORE CRAFT_INDEX     (exit 77: FUSE cannot mount here)
set -u
MODE=$1 F=$2 CRAFT=$3
PY=${FANSTORE_PYTHON:-/usr/bin/python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-corrupt-XXXXXX")
MNT=$T/mnt
cleanup() {
  if [ "$MODE" = fuse ] && mountpoint -q "$MNT" 2>/dev/null; then fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"; fi
  rm -rf "$T"
}
trap cleanup EXIT
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# a/ sorts first, so its files come first in the partition and survive a truncation further on.
mkdir -p "$T/src/a" "$T/src/b"
"$PY" - "$T/src" <<'EOF'
import os, random, sys
root = sys.argv[1]
r = random.Random(1)
words = [b"cat ", b"dog ", b"tensor ", b"epoch ", b"batch\n"]
def text(n):
    out = bytearray()
    while len(out) < n: out += r.choice(words)
    return bytes(out[:n])
open(f"{root}/a/x.txt", "wb").write(text(50000))
open(f"{root}/a/y.txt", "wb").write(text(60000))
open(f"{root}/a/z.txt", "wb").write(text(70000))
open(f"{root}/b/big.bin", "wb").write(text(6 << 20))           # 6 chunks, zstd
open(f"{root}/b/raw.bin", "wb").write(os.urandom(3 << 20))     # 3 chunks, raw
open(f"{root}/b/raw2.bin", "wb").write(os.urandom(2 << 20))
EOF
"$F" pack "$T/src" -o "$T/img" --threads 2 >/dev/null || { echo "pack failed"; exit 1; }

field() { "$F" stat "$1" "$2" | sed -n "s/^ *$3: *//p" | awk '{print $1}'; }
PART=$T/img/part-00000.fsp

# How a program reaches the image in this mode.
start() {  # start IMAGE: for fuse, (re)mount IMAGE at $MNT
  if [ "$MODE" = fuse ]; then
    if mountpoint -q "$MNT" 2>/dev/null; then fusermount3 -u "$MNT"; fi
    mkdir -p "$MNT"
    "$F" mount --image "$1" "$MNT" 2>"$T/mount.err" || { echo "SKIP: cannot mount FUSE here: $(cat "$T/mount.err")"; exit 77; }
    ROOT=$MNT RUN=()
  else
    ROOT=/fanstore RUN=("$F" run --image "$1" --)
  fi
}
alive() {  # the other files still read back, and (FUSE) the mount still answers
  if "${RUN[@]}" cmp -s "$ROOT/a/x.txt" "$T/src/a/x.txt"; then pass "$1: other files still read correctly"; else fail "$1: a/x.txt no longer reads"; fi
  if [ "$MODE" = fuse ]; then
    if mountpoint -q "$MNT" && stat "$MNT/b" >/dev/null; then pass "$1: mount still alive"; else fail "$1: the mount died"; fi
  fi
}
eio() {  # eio WHAT CMD...: CMD fails with EIO (and, through run, exactly one fanstore line), not a signal
  local what=$1; shift
  "$@" >/dev/null 2>"$T/err"
  local rc=$?
  if [ $rc -ge 128 ]; then fail "$what: killed by signal $((rc - 128)): $(tail -2 "$T/err")"; return; fi
  if [ $rc -eq 0 ] || ! grep -q "Input/output error" "$T/err"; then fail "$what: rc=$rc, no EIO: $(tail -2 "$T/err")"; return; fi
  if [ "$MODE" = run ] && [ "$(grep -c '^fanstore:' "$T/err")" -ne 1 ]; then fail "$what: not one fanstore line: $(cat "$T/err")"; return; fi
  pass "$what -> EIO"
}

# 1. A partition truncated after first use, under a reader that keeps reading.
cp -r "$T/img" "$T/trunc"
start "$T/trunc"
off=$(field "$T/trunc" b/big.bin offset); stored=$(field "$T/trunc" b/big.bin stored)
timeout 120 "${RUN[@]}" "$PY" - "$ROOT/b/big.bin" "$T/go" >"$T/reader.out" 2>"$T/reader.err" <<'EOF' &
import os, sys, time
f = open(sys.argv[1], "rb", buffering=0)
head = f.read(100 << 10)
print("first", len(head), flush=True)
while not os.path.exists(sys.argv[2]):  # the test truncates the partition, then creates this file
    time.sleep(0.01)
try:
    while f.read(1 << 20): pass
    print("no error")
except OSError as e:
    print("errno", e.errno)
EOF
reader=$!
# (no FIFO: a reader that died early must not leave this script blocked on one)
for _ in $(seq 600); do grep -q first "$T/reader.out" 2>/dev/null && break; kill -0 $reader 2>/dev/null || break; sleep 0.1; done
truncate -s $((off + stored / 2)) "$T/trunc/part-00000.fsp"
touch "$T/go"
wait $reader; rc=$?
if [ $rc -eq 0 ] && grep -q "errno 5" "$T/reader.out"; then pass "truncated under a reader -> EIO, no SIGBUS"
else fail "truncated under a reader: rc=$rc out=$(cat "$T/reader.out") err=$(tail -2 "$T/reader.err")"; fi
eio "truncated partition: a fresh read of the lost part" "${RUN[@]}" tail -c 1000 "$ROOT/b/big.bin"
alive "truncated partition"

# 2. An index with valid checksums whose entry points past the end of the partition.
cp -r "$T/img" "$T/crafted"
"$CRAFT" "$T/crafted" a/y.txt offset $((1 << 40)) || fail "craft_index failed"
start "$T/crafted"
eio "entry offset past the partition" "${RUN[@]}" cat "$ROOT/a/y.txt"
alive "entry offset past the partition"

# 3. An entry claiming a huge size for a compressed file: refused, nothing allocated for it (4 GiB address space).
cp -r "$T/img" "$T/huge"
"$CRAFT" "$T/huge" a/z.txt size $((1 << 40)) || fail "craft_index failed"
start "$T/huge"
runner=""; [ ${#RUN[@]} -gt 0 ] && runner=$(printf '%q ' "${RUN[@]}")
eio "huge size on a zstd file" bash -c "ulimit -v 4000000; $runner head -c 100 '$ROOT/a/z.txt'"
if [ "$MODE" = fuse ]; then
  srv=$(pgrep -n -f "fanstore mount --image $T/huge" || true)
  rss=$([ -n "$srv" ] && awk '/VmRSS/ {print $2}' "/proc/$srv/status" || echo 0)
  if [ "${rss:-0}" -lt 200000 ]; then pass "FUSE server RSS ${rss} kB after the huge entry"; else fail "FUSE server grew to $rss kB"; fi
fi
alive "huge size"

# 4. A partition modified in place (rsync --inplace, bit rot) after the file was first read and verified.
cp -r "$T/img" "$T/inplace"
start "$T/inplace"
roff=$(field "$T/inplace" b/raw.bin offset)
flip() { "$PY" -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); b=f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0]^16]))" "$1" "$2"; }
if [ "$MODE" = run ]; then
  for cache in default none; do
    envs=(); [ $cache = none ] && envs=(env FANSTORE_CACHE_BYTES=0 FANSTORE_NODE_CACHE=off)
    cp "$T/img/part-00000.fsp" "$T/inplace/part-00000.fsp"
    timeout 120 "${envs[@]}" "${RUN[@]}" "$PY" - "$ROOT/b/raw.bin" "$T/go2.$cache" "$T/src/b/raw.bin" >"$T/mod.$cache.out" 2>"$T/mod.$cache.err" <<'EOF' &
import os, sys, time
want = open(sys.argv[3], "rb").read()
assert open(sys.argv[1], "rb").read() == want
print("verified", flush=True)
while not os.path.exists(sys.argv[2]):  # the test modifies the partition, then creates this file
    time.sleep(0.01)
try:
    got = open(sys.argv[1], "rb").read()
    print("same" if got == want else "WRONG BYTES")
except OSError as e:
    print("errno", e.errno)
EOF
    p=$!
    for _ in $(seq 600); do grep -q verified "$T/mod.$cache.out" 2>/dev/null && break; kill -0 $p 2>/dev/null || break; sleep 0.1; done
    flip "$T/inplace/part-00000.fsp" $((roff + (1 << 20) + 77))
    touch "$T/go2.$cache"
    wait $p; rc=$?
    out=$(tail -1 "$T/mod.$cache.out")
    if [ $rc -ne 0 ] || [ "$out" = "WRONG BYTES" ]; then fail "modified in place ($cache cache): rc=$rc $out $(cat "$T/mod.$cache.err")"
    elif [ $cache = none ] && [ "$out" != "errno 5" ]; then fail "modified in place, no cache: expected EIO, got '$out'"
    else pass "modified in place after a verified read ($cache cache): $out"; fi
  done
  eio "modified in place: a fresh process" "${RUN[@]}" cat "$ROOT/b/raw.bin"
else
  flip "$T/inplace/part-00000.fsp" $(($(field "$T/inplace" b/raw2.bin offset) + 4242))
  eio "modified in place before its first read" cat "$ROOT/b/raw2.bin"
  # Read and verified before the change: the kernel keeps serving those verified pages, or EIO; never wrong.
  cat "$ROOT/b/raw.bin" >/dev/null
  flip "$T/inplace/part-00000.fsp" $((roff + (1 << 20) + 77))
  if cmp -s "$ROOT/b/raw.bin" "$T/src/b/raw.bin" 2>/dev/null; then pass "modified after a verified read: the verified bytes"
  elif cat "$ROOT/b/raw.bin" 2>&1 >/dev/null | grep -q "Input/output error"; then pass "modified after a verified read: EIO"
  else fail "modified after a verified read: wrong bytes"; fi
fi
alive "modified in place"

# 5. A partition that cannot be read (missing, a damaged header, another image's, a directory in its place): EIO
# with the reason `fanstore verify` gives (it used to be "not on this node and no daemon is configured" for all
# four), through this front end and `fanstore cat`; files of the other partition still read.
"$F" pack "$T/src/a" -o "$T/two" --parts 2 >/dev/null && "$F" pack "$T/src/b" -o "$T/other" --parts 2 >/dev/null ||
  fail "pack of two partitions failed"
in_part() { for f in x.txt y.txt z.txt; do [ "$(field "$T/two" $f part)" = "$1" ] && { echo $f; return; }; done; }
bad=$(in_part 0) good=$(in_part 1)
for how in missing header foreign directory; do
  rm -rf "$T/p5"; cp -r "$T/two" "$T/p5"
  case $how in
    missing) rm "$T/p5/part-00000.fsp"; words="is missing: copy it next to the index" ;;
    header) printf 'Z' | dd of="$T/p5/part-00000.fsp" bs=1 seek=3 conv=notrunc 2>/dev/null; words="has a damaged header" ;;
    foreign) cp "$T/other/part-00000.fsp" "$T/p5/"; words="belongs to another image" ;;
    directory) rm "$T/p5/part-00000.fsp"; mkdir "$T/p5/part-00000.fsp"; words="is not a regular file" ;;
  esac
  "$F" verify "$T/p5" 2>"$T/verify.err" >/dev/null
  grep -q "BAD $bad: .*$words" "$T/verify.err" || fail "$how partition: verify says $(head -1 "$T/verify.err")"
  start "$T/p5"
  eio "$how partition" "${RUN[@]}" cat "$ROOT/$bad"
  if [ "$MODE" = run ] && ! grep -q "^fanstore: .*$words" "$T/err"; then fail "$how partition: the reason is not verify's: $(cat "$T/err")"; fi
  if [ "$MODE" = run ] && [ "$how" = missing ] && [ -e /dev/fuse ]; then  # `fanstore run` through FUSE names itself
    "$F" run --image "$T/p5" --fuse always -- cat "/fanstore/$bad" >/dev/null 2>"$T/err"
    if grep -q "^fanstore run: warning: 1 of 2 partitions cannot be read whole" "$T/err" && ! grep -q "fanstore mount" "$T/err"
    then pass "missing partition: fanstore run --fuse always warns in its own name"
    else fail "missing partition through fanstore run --fuse always: $(cat "$T/err")"; fi
  fi
  "$F" cat "$T/p5" "$bad" >/dev/null 2>"$T/err"
  grep -q "^fanstore cat: .*$words" "$T/err" && pass "$how partition: fanstore cat says why" || fail "$how partition: fanstore cat says $(cat "$T/err")"
  if "${RUN[@]}" cmp -s "$ROOT/$good" "$T/src/a/$good"; then pass "$how partition: the other partition reads"; else fail "$how partition: $good no longer reads"; fi
done

# 6. index.fsi overwritten in place (`cp` of a smaller image's index over it) under a running reader: the reader
# keeps answering from the index it started with (the run's copy in the node cache, the mount's memfd), with no
# SIGBUS and no answer from the new bytes.
mkdir -p "$T/tiny/q" && echo q >"$T/tiny/q/f"
"$F" pack "$T/tiny" -o "$T/tiny-img" >/dev/null || fail "pack tiny"
cp -r "$T/img" "$T/inplace"
start "$T/inplace"
timeout 120 "${RUN[@]}" "$PY" - "$ROOT" "$T/go6" "$T/src/a/x.txt" >"$T/r6.out" 2>"$T/r6.err" <<'EOF' &
import os, sys, time
root = sys.argv[1]
print("first", sorted(os.listdir(root)), flush=True)
while not os.path.exists(sys.argv[2]):  # the test overwrites the index, then creates this file
    time.sleep(0.01)
print("after", sorted(os.listdir(root)), sorted(os.listdir(root + "/a")), os.stat(root + "/b/big.bin").st_size,
      open(root + "/a/x.txt", "rb").read(8) == open(sys.argv[3], "rb").read(8), flush=True)
EOF
reader=$!
for _ in $(seq 600); do grep -q first "$T/r6.out" 2>/dev/null && break; kill -0 $reader 2>/dev/null || break; sleep 0.1; done
cat "$T/tiny-img/index.fsi" >"$T/inplace/index.fsi"
touch "$T/go6"
wait $reader; rc=$?
if [ $rc -eq 0 ] && grep -q "^after \['a', 'b'\] \['x.txt', 'y.txt', 'z.txt'\] 6291456 True" "$T/r6.out"; then
  pass "index overwritten in place under a reader: it keeps the index it started with"
else fail "index overwritten in place under a reader: rc=$rc out=$(cat "$T/r6.out") err=$(tail -2 "$T/r6.err")"; fi
if [ "$MODE" = fuse ]; then alive "index overwritten in place"; fi
# A program under that run given another image (FANSTORE_IMAGE) maps that image's index, not the run's copy.
if [ "$MODE" = run ]; then
  got=$("$F" run --image "$T/img" -- env FANSTORE_IMAGE="$T/tiny-img" ls /fanstore 2>/dev/null)
  if [ "$got" = q ]; then pass "another FANSTORE_IMAGE under a run: its own tree"
  else fail "another FANSTORE_IMAGE under a run lists '$got', not the tiny image's 'q'"; fi
fi

echo "corruption_frontends ($MODE): $fails failure(s)"
[ $fails -eq 0 ]
