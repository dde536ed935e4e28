#!/bin/bash
# The real-program suite through LD_PRELOAD (`fanstore run`): builds the edge-case tree, packs it twice
# (3 zstd partitions; --level 0 raw), runs realprograms.sh on both, proves the suite catches a single
# wrong byte, and checks the failure modes (EROFS, ENOENT, EIO on a corrupt partition, a truncated index).
# Usage: run_preload.sh BUILD_DIR [FSIO_BINARY]
set -uo pipefail
build=$(cd "$1" && pwd)
fsio=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
fanstore=$build/bin/fanstore
py=${FANSTORE_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d /tmp/fanstore-preload.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failed=0
pass() { echo "ok    $1"; }
fail() { echo "FAIL  $1"; failed=$((failed + 1)); }

"$py" "$here/make_tree.py" "$tmp/src" || { echo "FAIL: cannot generate the tree"; exit 1; }
"$fanstore" pack "$tmp/src" -o "$tmp/zstd" --parts 3 > /dev/null || { echo "FAIL: pack --parts 3"; exit 1; }
"$fanstore" pack "$tmp/src" -o "$tmp/raw" --parts 1 --level 0 > /dev/null || { echo "FAIL: pack --level 0"; exit 1; }

# 1. The same comparisons on both images.
for img in zstd raw; do
  echo "== realprograms on the $img image"
  skip_torch=0
  [ $img = raw ] && skip_torch=${SKIP_TORCH_RAW:-0}
  if FSIO=$fsio SKIP_TORCH=$skip_torch bash "$here/realprograms.sh" "$tmp/src" \
       "$fanstore run --image $tmp/$img --mount /fanstore --" /fanstore; then
    pass "realprograms ($img image)"
  else
    fail "realprograms ($img image)"
  fi
done

# 2. The suite must notice one wrong byte: pack a copy with a byte flipped (same size, same mtime).
echo "== realprograms against a deliberately wrong image (must fail)"
cp -a "$tmp/src" "$tmp/wrong"
victim=$tmp/wrong/imagefolder/cat/cat_03.jpg
printf '\x00' | dd of="$victim" bs=1 seek=200 conv=notrunc status=none
touch -r "$tmp/src/imagefolder/cat/cat_03.jpg" "$victim"
"$fanstore" pack "$tmp/wrong" -o "$tmp/wrongimg" --parts 3 > /dev/null
if SKIP_TORCH=1 bash "$here/realprograms.sh" "$tmp/src" "$fanstore run --image $tmp/wrongimg --mount /fanstore --" \
     /fanstore > "$tmp/wrong.log" 2>&1; then
  fail "the suite passed on a wrong image: its comparisons are not real"
  cat "$tmp/wrong.log"
elif grep -q '^FAIL  md5sum' "$tmp/wrong.log" && grep -q '^FAIL  cat' "$tmp/wrong.log"; then
  pass "a flipped byte is caught ($(grep -c '^FAIL' "$tmp/wrong.log") checks failed: $(grep '^FAIL' "$tmp/wrong.log" | awk '{print $2}' | tr -d : | tr '\n' ' '))"
else
  fail "the wrong image failed, but not in md5sum/cat"
  cat "$tmp/wrong.log"
fi

run="$fanstore run --image $tmp/zstd --mount /fanstore --"

# 3. Writes, creates, renames, unlinks under the mount: EROFS; missing paths: ENOENT.
echo "== negative cases"
expect_err() {  # expect_err NAME PATTERN CMD...: CMD fails and its stderr matches PATTERN
  local name=$1 pattern=$2
  shift 2
  if "$@" > "$tmp/out" 2> "$tmp/err"; then
    fail "$name: succeeded"
  elif grep -q -- "$pattern" "$tmp/err"; then
    pass "$name ($(head -1 "$tmp/err"))"
  else
    fail "$name: stderr did not say '$pattern': $(head -2 "$tmp/err")"
  fi
}
expect_err "touch -> EROFS" "Read-only file system" $run touch /fanstore/new.txt
expect_err "echo > existing -> EROFS" "Read-only file system" $run bash -c 'echo x > /fanstore/empty.txt'
expect_err "mkdir -> EROFS" "Read-only file system" $run mkdir /fanstore/newdir
expect_err "rm -> EROFS" "Read-only file system" $run rm /fanstore/empty.txt
expect_err "rm -r -> EROFS" "Read-only file system" $run rm -rf /fanstore/text
expect_err "mv out -> EROFS" "Read-only file system" $run mv /fanstore/empty.txt "$tmp/moved"
expect_err "cp into -> EROFS" "Read-only file system" $run cp /etc/hostname /fanstore/
expect_err "chmod -> EROFS" "Read-only file system" $run chmod 600 /fanstore/empty.txt
expect_err "python open(w) -> EROFS" "errno 30\|Read-only" $run "$py" -c 'open("/fanstore/x", "w")'
expect_err "cat missing -> ENOENT" "No such file or directory" $run cat /fanstore/no/such/file
expect_err "file as dir -> ENOTDIR" "Not a directory" $run cat /fanstore/empty.txt/below
[ -e "$tmp/moved" ] && fail "mv created $tmp/moved"

# 4. A flipped byte in a partition: reading that file is EIO with exactly one line from fanstore on
#    stderr, other files still read, and `fanstore verify` exits non-zero naming the file.
cp -r "$tmp/zstd" "$tmp/corrupt"
info=$("$fanstore" stat "$tmp/corrupt" sci/volume.h5)
part=$(echo "$info" | awk '/part:/ {print $3}' | tr -d '()')
off=$(echo "$info" | awk '/offset:/ {print $2}')
stored=$(echo "$info" | awk '/stored:/ {print $2}')
pos=$((off + stored / 2))
byte=$(od -An -tu1 -j "$pos" -N1 "$tmp/corrupt/$part" | tr -d ' ')
printf "$(printf '\\%03o' $(((byte + 1) % 256)))" | dd of="$tmp/corrupt/$part" bs=1 seek="$pos" conv=notrunc status=none
crun="$fanstore run --image $tmp/corrupt --mount /fanstore --"
$crun cat /fanstore/sci/volume.h5 > /dev/null 2> "$tmp/err"
rc=$?
lines=$(grep -c '^fanstore:' "$tmp/err")
if [ $rc -ne 0 ] && grep -q "Input/output error" "$tmp/err" && [ "$lines" -eq 1 ] && grep -q 'sci/volume.h5' "$tmp/err"; then
  pass "corrupt file -> EIO + one line: $(grep '^fanstore:' "$tmp/err")"
else
  fail "corrupt file: rc=$rc, $lines fanstore lines: $(cat "$tmp/err")"
fi
if $crun "$py" -c 'import h5py; h5py.File("/fanstore/sci/volume.h5", "r")' 2> "$tmp/err"; then
  fail "h5py opened a corrupt file"
else
  pass "h5py on the corrupt file fails ($(grep -c '^fanstore:' "$tmp/err") fanstore line(s))"
fi
if $crun cmp -s /fanstore/bin/random5.bin "$tmp/src/bin/random5.bin"; then
  pass "other files of the corrupt image still read correctly"
else
  fail "an intact file of the corrupt image did not read back"
fi
if "$fanstore" verify "$tmp/corrupt" > "$tmp/out" 2>&1; then
  fail "fanstore verify exited 0 on a corrupt image"
elif grep -q 'sci/volume.h5' "$tmp/out"; then
  pass "fanstore verify exits non-zero naming the file: $(grep 'sci/volume.h5' "$tmp/out" | head -1)"
else
  fail "fanstore verify did not name sci/volume.h5: $(cat "$tmp/out")"
fi

# 5. A truncated index is refused at start-up with one clear line.
cp -r "$tmp/zstd" "$tmp/trunc"
idx=$(ls "$tmp/trunc" | grep -v '^part-' | head -1)
truncate -s $(($(stat -c %s "$tmp/trunc/$idx") / 2)) "$tmp/trunc/$idx"
expect_err "fanstore run on a truncated index" "$idx\|index\|truncated" \
  "$fanstore" run --image "$tmp/trunc" -- true
# Preloaded directly (no `fanstore run` check first): one start-up line, and paths under the mount are EIO.
LD_PRELOAD=$build/lib/libfanstore_preload.so FANSTORE_IMAGE=$tmp/trunc FANSTORE_MOUNT=/fanstore \
  ls /fanstore > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc -ne 0 ] && grep -q "^fanstore: cannot open image $tmp/trunc" "$tmp/err" && grep -q "Input/output error" "$tmp/err"; then
  pass "preload with a truncated index: $(head -1 "$tmp/err")"
else
  fail "preload with a truncated index: rc=$rc $(cat "$tmp/err")"
fi
# Through a daemon that is not there, the line names its socket (it once said "cannot open image (none)").
LD_PRELOAD=$build/lib/libfanstore_preload.so FANSTORE_DAEMON=$tmp/no-daemon.sock FANSTORE_MOUNT=/fanstore \
  ls /fanstore > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc -ne 0 ] && grep -q "^fanstore: cannot open the image through the daemon at $tmp/no-daemon.sock: " "$tmp/err"; then
  pass "preload with no daemon: $(head -1 "$tmp/err")"
else
  fail "preload with no daemon: rc=$rc $(cat "$tmp/err")"
fi
# ... and everything outside the mount still works in that process.
if LD_PRELOAD=$build/lib/libfanstore_preload.so FANSTORE_IMAGE=$tmp/trunc cat /etc/hostname > /dev/null 2>&1; then
  pass "paths outside the mount pass through with a broken image"
else
  fail "paths outside the mount broke with a broken image"
fi

# 6. FANSTORE_STATS=1: one summary line per process at exit.
FANSTORE_STATS=1 $run cat /fanstore/text/lorem.txt > /dev/null 2> "$tmp/err"
if [ "$(grep -c '^fanstore\[pid [0-9]*\]: opens=1 ' "$tmp/err")" -eq 1 ]; then
  pass "FANSTORE_STATS=1: $(head -1 "$tmp/err")"
else
  fail "FANSTORE_STATS=1 printed: $(cat "$tmp/err")"
fi
# Bytes read through a kernel fd (mmap here; fopen and np.fromfile alike) count too: they counted 0.
size=$(stat -c %s "$tmp/src/text/lorem.txt")
FANSTORE_STATS=1 $run /usr/bin/python3 -c '
import mmap
with open("/fanstore/text/lorem.txt", "rb") as f:
    mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)[:]' 2> "$tmp/err"
if grep -q "^fanstore\[pid [0-9]*\]: opens=1 .* bytes=$size " "$tmp/err"; then
  pass "FANSTORE_STATS=1 counts the bytes of a mapped file ($size)"
else
  fail "FANSTORE_STATS=1 with mmap, want bytes=$size: $(cat "$tmp/err")"
fi
# A forked child (a DataLoader worker) counts its own work: it once repeated its parent's counters.
FANSTORE_STATS=1 $run /usr/bin/python3 -c '
import os
open("/fanstore/text/lorem.txt", "rb").read()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)' 2> "$tmp/err"
if [ "$(grep -c '^fanstore\[pid [0-9]*\]: opens=0 stats=0 readdirs=0 missing=0 bytes=0 ' "$tmp/err")" -eq 1 ] &&
  [ "$(grep -c '^fanstore\[pid [0-9]*\]: opens=1 ' "$tmp/err")" -eq 1 ]; then
  pass "FANSTORE_STATS=1: a forked child counts from zero"
else
  fail "FANSTORE_STATS=1 with a fork printed: $(cat "$tmp/err")"
fi

# 7. Programs LD_PRELOAD cannot reach: `fanstore run` serves a static one through FUSE in a mount namespace
#    of its own (the prefix need not exist; a real directory there is covered, not read); --fuse never refuses.
echo "== static programs"
want=$(md5sum < "$tmp/src/sci/volume.h5")
got=$($run busybox md5sum /fanstore/sci/volume.h5 2> "$tmp/err" | cut -d" " -f1)
if [ "$got  -" = "$want" ] || [ "$got" = "${want%  -}" ]; then
  pass "fanstore run -- busybox md5sum (static, through FUSE)"
else
  fail "busybox md5sum through fanstore run: '$got' vs '$want': $(cat "$tmp/err")"
fi
mkdir -p "$tmp/covered"
echo "real file, must stay hidden" > "$tmp/covered/real.txt"
out=$("$fanstore" run --image "$tmp/zstd" --mount "$tmp/covered" -- busybox sh -c 'ls "$0"; cat "$0/names/.hidden"' "$tmp/covered" 2>&1)
if [ "$out" = "$(ls "$tmp/src"; cat "$tmp/src/names/.hidden")" ]; then
  pass "a static program sees the image over a non-empty real directory, not the directory"
else
  fail "static program over a real directory printed: $out"
fi
out=$("$fanstore" run --image "$tmp/zstd" --mount "$tmp/not/there/yet" -- busybox cat "$tmp/not/there/yet/names/.hidden" 2>&1)
[ "$out" = hidden ] && pass "a missing mount prefix is created for the FUSE mount" || fail "missing prefix: $out"
$run busybox sh -c 'exit 7'
rc=$?
[ $rc = 7 ] && pass "a static program's exit status comes back (7)" || fail "exit status $rc instead of 7"
rc=$(sh -c "$run busybox sh -c 'kill -TERM \$\$'; echo \$?" 2> /dev/null)  # (no "Terminated" line here)
[ $rc = 143 ] && pass "a static program killed by SIGTERM: status 143" || fail "killed by SIGTERM gave status $rc"
"$fanstore" run --image "$tmp/zstd" -- busybox sleep 30 &
sup=$!
sleep 0.5
kill -TERM $sup
wait $sup
rc=$?
[ $rc = 143 ] && pass "SIGTERM to fanstore run reaches the static program (status 143)" || fail "SIGTERM to the supervisor: $rc"
# The FUSE mount must outlive every read of the program: a SIGKILL to the supervisor (the OOM killer, `kill -9`
# of the pid a parent knows) or a SIGTERM to the whole job (Slurm, pkill) must never leave the program reading
# the real directory the mount covered. Generous hang detection only: no timing is asserted.
wait_file() { for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }
gone() { for _ in $(seq 300); do kill -0 "$1" 2> /dev/null || return 0; sleep 0.1; done; return 1; }
mkdir -p "$tmp/kill/covered"
echo "real file, must stay hidden" > "$tmp/kill/covered/real.txt"
# start_lister STATUS: a static program over that directory that ignores SIGTERM, lists the mount 30 times and
# exits with STATUS, in the background ($sup: its `fanstore run`); true once it has listed the mount.
start_lister() {
  rm -f "$tmp/kill/pid" "$tmp/kill/listed"
  "$fanstore" run --image "$tmp/zstd" --mount "$tmp/kill/covered" -- busybox sh -c \
    'trap "" TERM; echo $$ > "$0/../pid"; for i in $(seq 30); do ls "$0" | head -1; [ $i = 1 ] && echo > "$0/../listed"; sleep 0.1; done; exit '"$1" \
    "$tmp/kill/covered" > "$tmp/kill/out" 2> "$tmp/kill/err" &
  sup=$!
  wait_file "$tmp/kill/listed" && return 0
  fail "the program under fanstore run never listed the mount: $(cat "$tmp/kill/out" "$tmp/kill/err")"
  return 1
}
if start_lister 0; then
  kill -KILL $sup
  wait $sup 2> /dev/null
  if ! gone "$(cat "$tmp/kill/pid")"; then
    fail "SIGKILL to fanstore run: the static program lives on without its supervisor"
  elif grep -q real.txt "$tmp/kill/out"; then
    fail "SIGKILL to fanstore run: the program then read the covered directory: $(tr '\n' ' ' < "$tmp/kill/out")"
  else
    pass "SIGKILL to fanstore run ends the static program; it never reads the covered directory"
  fi
fi
if start_lister 5; then
  # Every process of the job, as Slurm's scancel or `kill -TERM -- -PGID` would (the program ignores it).
  pkill -TERM -P $sup
  wait $sup
  rc=$?
  if grep -q real.txt "$tmp/kill/out"; then
    fail "SIGTERM to the job: the program read the covered directory: $(tr '\n' ' ' < "$tmp/kill/out" | cut -c1-200)"
  elif [ $rc != 5 ]; then
    fail "SIGTERM to the job: status $rc instead of the program's 5"
  else
    pass "SIGTERM to every process of the job: the mount stays until the program ends (status 5)"
  fi
fi
# A FUSE server that dies under the program: its reads fail (never the covered directory), fanstore run says so.
if start_lister 6; then
  pkill -KILL -x -P $sup fanstore
  wait $sup
  rc=$?
  if [ $rc = 6 ] && ! grep -q real.txt "$tmp/kill/out" && grep -q "^fanstore run: the FUSE server .* ended" "$tmp/kill/err"; then
    pass "a FUSE server killed under the program: reads fail, one line says so, status 6 kept"
  else
    fail "FUSE server killed: rc=$rc out=$(tr '\n' ' ' < "$tmp/kill/out" | cut -c1-120) err=$(head -2 "$tmp/kill/err")"
  fi
fi
# A program killed by a core-dumping signal: the same status, and no core file of fanstore itself (which
# would overwrite the program's own core where core_pattern is a plain file name).
mkdir -p "$tmp/core"
st=$(cd "$tmp/core" && "$py" -c '
import os, resource, sys
hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, st = os.waitpid(pid, 0)
print(os.WTERMSIG(st) if os.WIFSIGNALED(st) else "exit", os.WCOREDUMP(st))
' "$fanstore" run --image "$tmp/zstd" -- busybox sh -c 'ulimit -c 0; kill -SEGV $$' 2> /dev/null)
if [ "$st" = "11 False" ] && ! ls "$tmp/core" | grep -q core; then
  pass "a program killed by SIGSEGV: fanstore run dies of SIGSEGV too, without dumping a core of its own"
else
  fail "program killed by SIGSEGV: supervisor '$st' (want '11 False'), files: $(ls "$tmp/core")"
fi
# A working directory at or below the prefix is re-entered through the mount, never the real directory.
out=$(cd "$tmp/covered" && "$fanstore" run --image "$tmp/zstd" --mount "$tmp/covered" -- busybox ls 2>&1 | head -2 | tr '\n' ' ')
[ "$out" = "bin deep " ] && pass "a static program started in the covered directory lists the image" ||
  fail "static program started in the covered directory listed: $out"
mkdir -p "$tmp/covered/names"
out=$(cd "$tmp/covered/names" && "$fanstore" run --image "$tmp/zstd" --mount "$tmp/covered" -- bash -c 'busybox cat .hidden; busybox pwd' 2>&1 | tr '\n' ' ')
[ "$out" = "hidden $tmp/covered/names " ] && pass "a static program exec'd from a real cwd under the prefix reads the image" ||
  fail "static program exec'd from a real cwd under the prefix: $out"
out=$(cd "$tmp/covered" && mkdir -p not-in-image && cd not-in-image &&
      "$fanstore" run --image "$tmp/zstd" --mount "$tmp/covered" -- busybox ls 2>&1)
rc=$?
rmdir "$tmp/covered/not-in-image"
if [ $rc != 0 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "not-in-image"; then
  pass "a cwd under the prefix that the image lacks: one line, nothing run ($out)"
else
  fail "a cwd under the prefix that the image lacks: rc=$rc: $out"
fi
expect_err "--fuse never refuses a static program" "statically linked.*fanstore mount" \
  "$fanstore" run --fuse never --image "$tmp/zstd" -- busybox cat /fanstore/names/.hidden
# Without /dev/fuse (a private /dev without it): one line with advice that does not lead to `fanstore mount`,
# which needs the same device.
if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2> /dev/null; then
  FANSTORE_NODE_CACHE=off unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /dev &&
    mknod -m 666 /dev/null c 1 3 && exec "$@"' sh "$fanstore" run --image "$tmp/zstd" -- busybox cat /fanstore/names/.hidden \
    > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc = 1 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "no /dev/fuse" "$tmp/err" &&
    ! grep -q "fanstore mount" "$tmp/err"; then
    pass "a static program where FUSE is missing: one line, no circular advice"
  else
    fail "static program without /dev/fuse: rc=$rc out=$(cat "$tmp/out") err=$(cat "$tmp/err")"
  fi
else
  echo "skip  a static program where FUSE is missing (needs root and unshare)"
fi
out=$($run /fanstore/bin/script.sh 2>&1)
[ "$out" = script ] && pass "fanstore run -- a program stored in the image (through FUSE)" || fail "program in the image: $out"
out=$("$fanstore" run --fuse always --image "$tmp/zstd" -- cat /fanstore/names/.hidden 2>&1)
[ "$out" = hidden ] && pass "--fuse always serves a dynamic program too" || fail "--fuse always: $out"
# A static program started later by a dynamic one is handed to `fanstore run` (it gets its own FUSE mount),
# keeping its argv[0] and the virtual cwd.
out=$($run bash -c 'cd /fanstore/deep/d00 && exec -a sh busybox -c "echo \$0; pwd; ls | head -1"' 2>&1)
if [ "$out" = "$(printf 'sh\n/fanstore/deep/d00\nd01')" ]; then
  pass "a static program exec'd by bash: same argv[0], same cwd, sees the image"
else
  fail "static program exec'd by bash printed: $out"
fi
# Any argv[0] survives the hand-over, an empty one and those that look like options included.
for a0 in "" "-sh" "--help" "--"; do
  want=$(bash -c "exec -a '$a0' busybox sh -c 'echo \$0'" 2>&1)
  got=$($run bash -c "exec -a '$a0' busybox sh -c 'echo \$0'" 2>&1)
  [ "$got" = "$want" ] && pass "hand-over keeps argv[0] '$a0' ($got)" || fail "hand-over with argv[0] '$a0': '$got' instead of '$want'"
done
# Preloaded by hand (no `fanstore run` to hand it to): the exec fails with one line, never a silent miss.
LD_PRELOAD=$build/lib/libfanstore_preload.so FANSTORE_IMAGE=$tmp/zstd FANSTORE_MOUNT=/fanstore \
  bash -c 'busybox cat /fanstore/names/.hidden' > "$tmp/out" 2> "$tmp/err"
if [ $? -ne 0 ] && grep -q "statically linked.*fanstore run" "$tmp/err" && [ ! -s "$tmp/out" ]; then
  pass "a static exec under a hand-made LD_PRELOAD fails loudly: $(grep '^fanstore:' "$tmp/err")"
else
  fail "static exec under a hand-made LD_PRELOAD: out=$(cat "$tmp/out") err=$(cat "$tmp/err")"
fi
# As a user without root: a user namespace where the kernel allows one (and /dev/fuse is open to users),
# otherwise one line (naming `fanstore mount` when /dev/fuse is open to the user) and the program does not run.
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
  chmod 755 "$tmp"
  mkdir -p "$tmp/usermnt"
  chmod 777 "$tmp/usermnt"
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$fanstore" run --image "$tmp/zstd" --mount "$tmp/usermnt" -- busybox cat "$tmp/usermnt/names/.hidden" \
    > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc = 0 ] && [ "$(cat "$tmp/out")" = hidden ]; then
    pass "as an unprivileged user: served through FUSE in a user namespace"
  elif [ $rc = 1 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l < "$tmp/err")" = 1 ] &&
    grep -q "fanstore mount\|/dev/fuse is not open to this user" "$tmp/err"; then
    pass "as an unprivileged user where FUSE is out of reach: one line, nothing run: $(cat "$tmp/err")"
  else
    fail "unprivileged static run: rc=$rc out=$(cat "$tmp/out") err=$(cat "$tmp/err")"
  fi
  # A set-user-ID program started by a user (su, sudo, mount, passwd, fusermount3, ping...): FUSE would need
  # a user namespace, where the kernel drops its privileges. It runs as before, privileged and without the
  # image, after one line saying so -- neither refused nor silently stripped of what it exists for.
  cp "$(command -v id)" "$tmp/suid-id"
  chmod 4755 "$tmp/suid-id"
  if [ "$(setpriv --reuid=65534 --regid=65534 --clear-groups "$tmp/suid-id" -u 2> /dev/null)" != 0 ]; then
    echo "skip  set-user-ID programs under fanstore run ($tmp is mounted nosuid)"
  else
    for how in "run" "exec"; do
      if [ $how = run ]; then set -- "$tmp/suid-id" -u; else set -- bash -c "\"$tmp/suid-id\" -u"; fi
      setpriv --reuid=65534 --regid=65534 --clear-groups "$fanstore" run --image "$tmp/zstd" -- "$@" \
        > "$tmp/out" 2> "$tmp/err"
      rc=$?
      if [ $rc = 0 ] && [ "$(cat "$tmp/out")" = 0 ] && [ "$(wc -l < "$tmp/err")" = 1 ] &&
         grep -q "set-user-ID.*without the image.*fanstore mount" "$tmp/err"; then
        pass "a set-user-ID program ($how) keeps its privileges, with one line: $(cat "$tmp/err")"
      else
        fail "set-user-ID program ($how) as a user: rc=$rc out=$(cat "$tmp/out") err=$(cat "$tmp/err")"
      fi
    done
    set --
  fi
fi

# 7b. "#!" scripts stored in the image run as the kernel runs them from a real mount: the interpreter gets the
#     script's own path (so `$0`, `__file__`, `sys.path[0]` point next to it, where its helpers are), and an
#     interpreter stored in the image too (a packed venv's `pip`, `torchrun`) is run from the image.
echo "== scripts stored in the image"
mkdir -p "$tmp/venv/bin" "$tmp/venv/code"
cp "$(type -P echo)" "$tmp/venv/bin/echo.elf"
printf '#!/fanstore/bin/echo.elf  from the image \n' > "$tmp/venv/bin/tool"
printf '#!/fanstore/bin/tool\n' > "$tmp/venv/bin/nested"
printf '#!%s\nimport sys\nprint(sys.argv[0], sys.path[0])\nimport helper\nprint(helper.X)\n' "$py" > "$tmp/venv/code/train.py"
echo 'X = "helper imported"' > "$tmp/venv/code/helper.py"
printf '#!/bin/sh\necho "$0 $*"; cat "$(dirname "$0")/helper.py"\n' > "$tmp/venv/code/run.sh"
chmod 755 "$tmp/venv/bin/"* "$tmp/venv/code/"*
"$fanstore" pack "$tmp/venv" -o "$tmp/venvimg" > /dev/null
vrun="$fanstore run --image $tmp/venvimg --"
want="from the image /fanstore/bin/tool x"
for how in bash python-subprocess posix_spawn env; do
  case $how in
    bash) out=$($vrun bash -c '/fanstore/bin/tool x' 2>&1) ;;
    python-subprocess) out=$($vrun "$py" -c 'import subprocess; subprocess.run(["/fanstore/bin/tool", "x"])' 2>&1) ;;
    posix_spawn) out=$($vrun "$py" -c 'import os; os.waitpid(os.posix_spawn("/fanstore/bin/tool", ["tool", "x"], os.environ), 0)' 2>&1) ;;
    env) out=$($vrun env /fanstore/bin/tool x 2>&1) ;;
  esac
  [ "$out" = "$want" ] && pass "a script with its interpreter in the image ($how)" || fail "script with its interpreter in the image ($how): '$out'"
done
out=$($vrun bash -c '/fanstore/bin/nested y' 2>&1)
[ "$out" = "from the image /fanstore/bin/tool /fanstore/bin/nested y" ] && pass "a script whose interpreter is such a script" ||
  fail "nested image interpreters: '$out'"
want=$(printf '/fanstore/code/train.py /fanstore/code\nhelper imported\n/fanstore/code/run.sh a b\nX = "helper imported"')
for how in bash posix_spawn; do
  case $how in
    bash) out=$($vrun bash -c '/fanstore/code/train.py; cd /fanstore/code && ./run.sh a b | sed "s|^\./|/fanstore/code/|"' 2>&1) ;;
    posix_spawn) out=$($vrun "$py" -c '
import os, sys
for argv in (["/fanstore/code/train.py"], ["/fanstore/code/run.sh", "a", "b"]):
    sys.stdout.flush()
    os.waitpid(os.posix_spawn(argv[0], argv, os.environ), 0)' 2>&1) ;;
  esac
  [ "$out" = "$want" ] && pass "a script of the image sees its own path and its neighbours ($how)" ||
    fail "script of the image ($how): '$out'"
done

# 8. A mount below an existing directory (--mount DATA/imagenet): the parent lists it, walks enter it, and a
#    temp-file writer (sed -i) gets EROFS and leaves nothing in a real directory.
echo "== a mount inside an existing directory"
mkdir -p "$tmp/data/other"
drun="$fanstore run --image $tmp/zstd --mount $tmp/data/imagenet --"
out=$($drun ls "$tmp/data" 2>&1 | tr '\n' ' ')
[ "$out" = "imagenet other " ] && pass "ls DATA lists imagenet" || fail "ls DATA: $out"
out=$($drun find "$tmp/data" -name lorem.txt 2>&1)
[ "$out" = "$tmp/data/imagenet/text/lorem.txt" ] && pass "find DATA -name enters the mount" || fail "find DATA: $out"
out=$($drun "$py" -c "import glob; print(glob.glob('$tmp/data/*/text'))" 2>&1)
[ "$out" = "['$tmp/data/imagenet/text']" ] && pass "glob DATA/*/text" || fail "glob: $out"
out=$($drun du -s --apparent-size "$tmp/data" 2>&1 | cut -f1)
want=$(du -s --apparent-size "$tmp/src" | cut -f1)
[ "$out" -ge "$want" ] 2>/dev/null && pass "du DATA counts the mount ($out KiB)" || fail "du DATA: $out (source $want)"
mkdir -p "$tmp/writable"
echo "keep" > "$tmp/writable/keep.txt"
$fanstore run --image "$tmp/zstd" --mount "$tmp/writable" -- sed -i s/lorem/X/ "$tmp/writable/text/lorem.txt" 2> "$tmp/err"
if grep -q "Read-only file system" "$tmp/err" && [ "$(ls -A "$tmp/writable")" = keep.txt ]; then
  pass "sed -i over a writable directory: EROFS, nothing written there"
else
  fail "sed -i over a writable directory: $(cat "$tmp/err"); left: $(ls -A "$tmp/writable")"
fi
$fanstore run --image "$tmp/zstd" --mount "$tmp/writable" -- "$py" "$here/write_attempts.py" "$tmp/writable" /etc/hostname \
  > "$tmp/out" 2>&1
if [ "$(ls -A "$tmp/writable")" = keep.txt ] && ! grep -q created "$tmp/out"; then
  pass "every way Python creates a file (temp files, link, fifo, Unix sockets) over a writable directory: nothing there"
else
  fail "creating over a writable directory left: $(ls -A "$tmp/writable" | tr '\n' ' '): $(grep created "$tmp/out")"
fi

# A path through a sibling whose name starts with the mount's ("DATA/imagenet-old/../imagenet/x") is under the
# mount once normalised: the image's file, never the real one the mount covers.
mkdir -p "$tmp/sib/m/text" "$tmp/sib/mx"
echo "real file, must stay hidden" > "$tmp/sib/m/text/lorem.txt"
out=$("$fanstore" run --image "$tmp/zstd" --mount "$tmp/sib/m" -- head -c 11 "$tmp/sib/mx/../m/text/lorem.txt" 2>&1)
[ "$out" = "lorem ipsum" ] && pass "a path through a sibling named like the mount reads the image" ||
  fail "path through a sibling named like the mount read: $out"

echo "run_preload: $failed failure(s)"
[ $failed -eq 0 ]
