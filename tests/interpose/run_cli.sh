#!/bin/bash
# `fanstore run`'s own checks and the ways a program of the image is started: a prefix that would hide the
# system's files is refused; a run inside a run with another image is refused in one line naming the outer
# image and prefix (the same image at the same prefix runs; `fanstore mount` of the second image under the outer
# run works, as the refusal suggests); a relative program path is found from the working directory, a virtual one
# included; fexecve of an image program whose libraries come through RUNPATH $ORIGIN loads them.
# Usage: run_cli.sh BUILD_DIR. Exit 77 without a C compiler.
set -uo pipefail
build=$(cd "$1" && pwd)
fanstore=$build/bin/fanstore
cc=$(command -v cc || command -v gcc) || { echo "SKIP: no C compiler"; exit 77; }
tmp=$(mktemp -d /tmp/fanstore-runcli.XXXXXX)
fmnt=""
cleanup() {
  [ -n "$fmnt" ] && fusermount3 -u "$fmnt" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
pass() { echo "ok    $1"; }
fail() { echo "FAIL  $1"; failed=$((failed + 1)); }
# check NAME WANT_RC WANT_OUT CMD...: exit status and stdout+stderr, exactly.
check() {
  local name=$1 want_rc=$2 want=$3
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" = "$want_rc" ] && [ "$out" = "$want" ]; then
    pass "$name"
  else
    fail "$name: exit $rc (want $want_rc), output:"
    printf '%s\n' "$out" | head -5 | sed 's/^/      /'
  fi
}

# One image with a program whose library is found through RUNPATH $ORIGIN/../lib, a data file and a program that
# fexecve's its argument; a second image with one file.
src=$tmp/src
mkdir -p "$src/bin" "$src/lib" "$tmp/src2/d"
printf 'int bar(void) { return 43; }\n' > "$tmp/bar.c"
printf '#include <stdio.h>\nint bar(void);\nint main(void) { printf("bar=%%d\\n", bar()); return 0; }\n' \
  > "$tmp/main.c"
printf '#define _GNU_SOURCE\n#include <fcntl.h>\n#include <stdio.h>\n#include <unistd.h>\nextern char** environ;
int main(int c, char** v) { int fd = open(v[1], O_RDONLY | O_CLOEXEC); char* av[] = {v[1], 0};
fexecve(fd, av, environ); perror("fexecve"); return 1; }\n' > "$tmp/fx.c"
"$cc" -shared -fPIC -o "$src/lib/libbar.so" "$tmp/bar.c" &&
  "$cc" -o "$src/bin/prog" "$tmp/main.c" -L"$src/lib" -lbar -Wl,-rpath,'$ORIGIN/../lib' -Wl,--enable-new-dtags &&
  "$cc" -o "$tmp/fx" "$tmp/fx.c" || { echo "FAIL: cannot build the test programs"; exit 1; }
echo data > "$src/bin/data.txt"
echo two > "$tmp/src2/d/f"
"$fanstore" pack "$src" -o "$tmp/img" > /dev/null && "$fanstore" pack "$tmp/src2" -o "$tmp/img2" > /dev/null ||
  { echo "FAIL: pack"; exit 1; }
img=$tmp/img img2=$tmp/img2

# 1. A prefix that would hide the system's own files: one line, the program never runs.
check "--mount / is refused" 1 \
  "fanstore run: --mount / would hide the whole file system from the program, which it and the system need: give a prefix of its own, such as /fanstore (the default) or /data/NAME" \
  "$fanstore" run --image "$img" --mount / -- echo ran
check "--mount /usr/ is refused" 1 \
  "fanstore run: --mount /usr/ would hide /usr from the program, which it and the system need: give a prefix of its own, such as /fanstore (the default) or /data/NAME" \
  "$fanstore" run --image "$img" --mount /usr/ -- echo ran
check "a prefix below /usr runs" 0 "data" "$fanstore" run --image "$img" --mount /usr/fanstore-test-x -- \
  cat /usr/fanstore-test-x/bin/data.txt
check "--mount at \$HOME is refused" 1 \
  "fanstore run: --mount $tmp/home would hide $tmp/home from the program, which it and the system need: give a prefix of its own, such as /fanstore (the default) or /data/NAME" \
  env HOME="$tmp/home" "$fanstore" run --image "$img" --mount "$tmp/home" -- echo ran
check "a prefix below \$HOME runs" 0 "data" env HOME="$tmp/home" "$fanstore" run --image "$img" \
  --mount "$tmp/home/data" -- cat "$tmp/home/data/bin/data.txt"

# The byte-count variables are checked before the program starts: "abc" made every path EIO, "-5" a huge budget.
check "FANSTORE_CACHE_BYTES=abc is refused" 1 \
  "fanstore run: FANSTORE_CACHE_BYTES='abc' is not a byte count: give a number of bytes (0 disables the per-process cache) or unset it" \
  env FANSTORE_CACHE_BYTES=abc "$fanstore" run --image "$img" -- echo ran
check "FANSTORE_NODE_CACHE_BYTES=-5 is refused" 1 \
  "fanstore run: FANSTORE_NODE_CACHE_BYTES='-5' is not a byte count above 0: give a number of bytes, or set FANSTORE_NODE_CACHE=off to run without the node chunk cache" \
  env FANSTORE_NODE_CACHE_BYTES=-5 "$fanstore" run --image "$img" -- echo ran
check "FANSTORE_NODE_CACHE_BYTES is not read with FANSTORE_NODE_CACHE=off" 0 "data" \
  env FANSTORE_NODE_CACHE=off FANSTORE_NODE_CACHE_BYTES=-5 "$fanstore" run --image "$img" -- cat /fanstore/bin/data.txt
check "FANSTORE_CACHE_BYTES=0 runs" 0 "data" env FANSTORE_CACHE_BYTES=0 "$fanstore" run --image "$img" -- \
  cat /fanstore/bin/data.txt

# 2. A run inside a run. Another image (or prefix) would silently take the outer image away: refused, naming both.
check "a nested run with another image is refused" 1 \
  "fanstore run: already under \`fanstore run --image $img --mount /envA\`, and the interposer serves one image per process tree, so /envA would vanish for the program: under that run, mount this image with FUSE instead (\`fanstore mount --image $img2 DIR\`, DIR an empty directory) and use it there" \
  "$fanstore" run --image "$img" --mount /envA -- "$fanstore" run --image "$img2" --mount /dataB -- echo ran
check "a nested run with the same image and prefix runs" 0 "data" \
  "$fanstore" run --image "$img" --mount /envA -- "$fanstore" run --image "$img" --mount /envA -- cat /envA/bin/data.txt
# What the refusal suggests: the second image through FUSE under the outer run.
if [ -e /dev/fuse ] && command -v fusermount3 > /dev/null; then
  fmnt=$tmp/dataB
  mkdir "$fmnt"
  out=$("$fanstore" run --image "$img" --mount /envA -- sh -c \
    "'$fanstore' mount --image '$img2' '$fmnt' && cat /envA/bin/data.txt '$fmnt/d/f'; fusermount3 -u '$fmnt'" 2>&1)
  if [ "$out" = "$(printf 'data\ntwo')" ]; then
    pass "fanstore mount of a second image under a run"
  elif grep -q "fuse\|FUSE" <<< "$out" && ! grep -q "^data" <<< "$out"; then
    echo "skip  fanstore mount under a run: $(head -1 <<< "$out")"
  else
    fail "fanstore mount of a second image under a run: $out"
  fi
fi

# 3. A relative program path: from the working directory, the mount's below it included, and from a virtual cwd
#    (a shell that entered the image, then runs `fanstore run` again with a relative path). An image program runs
#    through FUSE (skipped where FUSE cannot be had).
mkdir "$tmp/wd"
out=$(cd "$tmp" && "$fanstore" run --image "$img" --mount "$tmp/wd/m" -- wd/m/bin/prog 2>&1)
if [ "$out" = "bar=43" ]; then
  pass "a relative path to a program of the image"
  check "a relative path from a virtual cwd" 0 "bar=43" "$fanstore" run --image "$img" -- sh -c \
    "cd /fanstore/bin && '$fanstore' run --image '$img' -- ./prog"
elif grep -q "FUSE\|fuse" <<< "$out"; then
  echo "skip  a relative path to a program of the image (FUSE): $(head -1 <<< "$out")"
else
  fail "a relative path to a program of the image: $out"
fi
cp "$(type -P true)" "$tmp/wd/mytrue"
check "a relative path to a real program" 0 "" sh -c "cd '$tmp' && '$fanstore' run --image '$img' -- wd/mytrue"

# 4. fexecve of an image program whose library comes through RUNPATH $ORIGIN: from its copy, as execve runs it.
check "fexecve of a program of the image (RUNPATH \$ORIGIN)" 0 "bar=43" \
  "$fanstore" run --image "$img" -- "$tmp/fx" /fanstore/bin/prog
check "execve of the same program" 0 "bar=43" "$fanstore" run --image "$img" -- /fanstore/bin/prog

# fanstore itself is left alone by the interposer: under a run, `pack` of a path in the mount (absolute, or relative
# from a directory of the image) is refused in one line, where it packed the empty directory the prefix really is.
words="fanstore run --image $img --mount /fanstore"
check "pack of a source in the run's mount" 1 \
  "fanstore pack: /fanstore/bin is in the mount /fanstore of the \`$words\` this runs under, which fanstore's own commands do not see: give the directory the image was packed from, or run fanstore outside that run" \
  "$fanstore" run --image "$img" -- "$fanstore" pack /fanstore/bin -o "$tmp/packed-bin"
check "pack of . from a directory of the image" 1 \
  "fanstore pack: . is in the mount /fanstore of the \`$words\` this runs under, which fanstore's own commands do not see: give the directory the image was packed from, or run fanstore outside that run" \
  "$fanstore" run --image "$img" -- sh -c "cd /fanstore/bin && exec '$fanstore' pack . -o '$tmp/packed-dot'"
[ ! -e "$tmp/packed-bin" ] && [ ! -e "$tmp/packed-dot" ] || fail "a refused pack under a run wrote an image"

# 5. A daemon socket that no daemon answers: each case says what to do. A socket whose daemon died (it said only
# "Connection refused"); one whose daemon hangs (it said "daemon socket: timed out waiting for the daemon's reply",
# after 5 s); a socket name too long to reach (it blamed a directory that opens fine).
/usr/bin/python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$tmp/dead.sock"
check "a socket whose daemon died" 1 \
  "fanstore run: I/O error: cannot connect to the fanstore daemon at $tmp/dead.sock: Connection refused (no daemon listens there: the one that made it stopped or died; start \`fanstore serve\` again)" \
  "$fanstore" run --daemon "$tmp/dead.sock" -- true
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8); time.sleep(30)' "$tmp/hung.sock" &
hung=$!
for _ in $(seq 100); do [ -S "$tmp/hung.sock" ] && break; sleep 0.05; done
check "a socket whose daemon does not answer" 1 \
  "fanstore run: timeout: the fanstore daemon at $tmp/hung.sock did not answer within 5.0 s (stopped, or too busy to answer: check its \`fanstore serve\`)" \
  "$fanstore" run --daemon "$tmp/hung.sock" -- true
kill $hung 2> /dev/null
long=$tmp/$(printf 'x%.0s' $(seq 120))
check "a socket name longer than a socket holds" 1 \
  "fanstore wait: name too long: daemon socket path '$long' is $((${#long})) bytes, more than a Unix socket path holds (107), and its file name is too long to reach through its directory: give the socket path \`fanstore serve\` reported (\`fanstore serve\` refuses longer ones)" \
  "$fanstore" wait "$long" --timeout 1

[ $failed -eq 0 ] && echo "run_cli: all checks passed"
exit $((failed > 0))
