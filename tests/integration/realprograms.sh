#!/bin/bash
# Real programs on a tree and on the same tree served by FanStore must print the same bytes.
# Usage: realprograms.sh SOURCE_TREE RUNNER MOUNT
#   SOURCE_TREE  the directory that was packed
#   RUNNER       command prefix that serves the image to its command, e.g.
#                "build/bin/fanstore run --image img.fst --mount /fanstore --"; "" for a FUSE mount
#   MOUNT        where the tree appears under RUNNER (the --mount prefix, or the FUSE mountpoint)
# Optional environment: FSIO=path to tests/interpose's fsio harness (adds the fd-semantics checks),
# SKIP_TORCH=1 (skip the torchvision check). Exit status: 0 when every check agrees, 1 otherwise.
# Checks of programs that try to write (sed -i, rsync into the tree, mktemp...) compare stdout, stderr and
# exit status with the same script on a read-only bind mount of the source tree: what a real read-only
# file system says. They need root (mount --bind); without it they are skipped with a note.
set -uo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 SOURCE_TREE RUNNER MOUNT" >&2
  exit 2
fi
src=$(cd "$1" && pwd) runner=$2 mnt=$3
here=$(cd "$(dirname "$0")" && pwd)
py=${FANSTORE_PYTHON:-/usr/bin/python3}
export LC_ALL=C
work=$(mktemp -d /tmp/fanstore-realprograms.XXXXXX)
ro=""
cleanup() {
  [ -n "$ro" ] && umount "$ro" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
failed=0 passed=0 skipped=0
# The reference for the write checks: the source tree, read-only.
mkdir "$work/ro"
if [ "$(id -u)" = 0 ] && mount --bind "$src" "$work/ro" 2>/dev/null; then
  ro=$work/ro
  mount -o remount,bind,ro "$ro" 2>/dev/null || { umount "$ro"; ro=""; }
fi
# A small file outside both trees for the programs that copy into them.
printf 'input line\n' > "$work/input.txt"
export IN=$work/input.txt

# compare NAME SCRIPT REFERENCE WRITES: runs SCRIPT with ROOT=REFERENCE directly and ROOT=<mount> under
# RUNNER; the root prefix of both outputs becomes "@", and the outputs (stdout and the exit status; with
# WRITES=1 also stderr, and the random part of temporary names becomes XXXXXX) must be identical.
compare() {
  local name=$1 script=$2 ref=$3 writes=$4
  ROOT=$ref OUT=$work/a bash -c "$script" > "$work/ref.out" 2> "$work/ref.err"
  echo "exit=$?" >> "$work/ref.out"
  # shellcheck disable=SC2086  # RUNNER is a word list on purpose
  ROOT=$mnt OUT=$work/b $runner bash -c "$script" > "$work/mnt.out" 2> "$work/mnt.err"
  echo "exit=$?" >> "$work/mnt.out"
  local norm='s/(sed|tmp\.|\.[^./ "]+\.|tmp|\.txt)[A-Za-z0-9_]{6,10}\b/\1XXXXXX/g'
  if [ "$writes" = 1 ]; then
    cat "$work/ref.err" >> "$work/ref.out"
    cat "$work/mnt.err" >> "$work/mnt.out"
    sed -i -E -e "$norm" "$work/ref.out" "$work/mnt.out"
  fi
  sed -i "s|$ref|@|g" "$work/ref.out"
  sed -i "s|$mnt|@|g" "$work/mnt.out"
  if cmp -s "$work/ref.out" "$work/mnt.out" && [ -s "$work/ref.out" ]; then
    passed=$((passed + 1))
    printf 'ok    %-22s %s lines, %s bytes%s\n' "$name" "$(wc -l < "$work/ref.out")" "$(wc -c < "$work/ref.out")" \
      "$([ "$writes" = 1 ] && echo ": $(head -1 "$work/ref.out" | cut -c1-80)")"
  else
    failed=$((failed + 1))
    echo "FAIL  $name: outputs differ (- $([ "$writes" = 1 ] && echo 'read-only bind mount of the source' || echo 'source tree'), + mount)"
    diff -u "$work/ref.out" "$work/mnt.out" | head -20 | sed 's/^/      /'
    head -5 "$work/mnt.err" | sed 's/^/      stderr: /'
  fi
  rm -rf "$work/a" "$work/b"
}

# check NAME SCRIPT: the source tree against the mount, stdout and exit status.
check() { compare "$1" "$2" "$src" 0; }

# check_ro NAME SCRIPT: for programs that try to write: a read-only bind mount of the source against the
# mount, stdout, stderr and exit status (what a real read-only file system says).
check_ro() {
  if [ -z "$ro" ]; then
    skipped=$((skipped + 1))
    echo "skip  $1 (no read-only bind mount of the source: needs root)"
    return
  fi
  compare "$1" "$2" "$ro" 1
}

check cat            'find "$ROOT" -type f -print0 | sort -z | xargs -0 cat | md5sum'
check md5sum         'cd "$ROOT" && find . -type f -print0 | sort -z | xargs -0 md5sum'
check ls-lR          'ls -lR --time-style=+%s.%N "$ROOT"'
check ls-las        'ls -las "$ROOT/text" "$ROOT/text/many" "$ROOT/emptydir"'
check find           'find "$ROOT" -printf "%P|%y|%s|%m|%n|%T@|%U\n" | sort'
check find-type      'find "$ROOT" -type f -name "*.jpg" | sort; find "$ROOT" -type d -empty | sort'
check du-ab          'du -abl "$ROOT" | sort -k2'  # -l: which name of a hard link du counts depends on readdir order
check du-sh          'du -s --apparent-size "$ROOT"/*'
check stat           'cd "$ROOT" && find . -print0 | sort -z | xargs -0 stat -c "%n %s %f %h %Y %y %U %G"'
check tar-bytes      'tar -C "$ROOT" --sort=name --numeric-owner -cf - . | md5sum'
check tar-tv         'tar -C "$ROOT" --sort=name --numeric-owner -cf - . | tar -tvf - --full-time'
check cp-r-diff      'cp -r "$ROOT" "$OUT" && diff -r "$ROOT" "$OUT" && (cd "$OUT" && find . -type f -print0 | sort -z | xargs -0 md5sum)'
check head-tail      'head -c 100 "$ROOT/text/lorem.txt"; tail -c 77 "$ROOT/bin/random5.bin" | od -An -tx1 | md5sum; wc -c "$ROOT/bin/zeros.bin"'
check grep-r         'grep -rc "lorem" "$ROOT/text" | sort'
check cmp            'cmp "$ROOT/bin/random5.bin" "$ROOT/bin/random5.bin" && echo same'
check sh-cd          'cd "$ROOT/deep/d00/d01" && pwd && ls && cd ../../.. && pwd && cat names/.hidden'
check find-links     'find "$ROOT" -printf "%P %y %m %s %l %n %U %G %T@\n" | sort'
check links          'cd "$ROOT/env" && for l in lib/libfoo.so lib64 bin/python dangling up abs_out loop1; do readlink "$l"; done
                      cat lib64/libfoo.so bin/python up/lorem.txt | md5sum; cat loop1 dangling lib64/x too_long 2>&1; cat abs_out
                      bin/python through-a-link; "$ROOT/env/bin/python" absolute; (cd bin && ./python relative)
                      stat -L -c "%n %F %s %a" bin/python lib64/libfoo.so up; stat -c "%n %F %s %h" lib64 bin/python3-hard
                      realpath --relative-to="$ROOT" lib64/libfoo.so up/many bin/python; head -c 4 shadow | od -c
                      ls -l --time-style=+ lib | sed "s/ [0-9]* root root//"; cd lib64 && pwd -P | sed "s|$ROOT|@|"
                      [ "$(stat -c %i ../bin/python3)" = "$(stat -c %i ../bin/python3-hard)" ] && echo one-inode'
check links-py       '"'"$py"'" - "$ROOT/env" <<"PY"
import os, stat, sys
e = sys.argv[1]
print(sorted((d.name, d.is_symlink(), d.is_dir(follow_symlinks=False)) for d in os.scandir(e)))
print(os.readlink(e + "/lib64"), os.path.realpath(e + "/lib64/libfoo.so")[len(e):], stat.S_ISLNK(os.lstat(e + "/bin/python").st_mode))
for flags in (os.O_RDONLY | os.O_NOFOLLOW, os.O_RDONLY):
    try:
        os.close(os.open(e + "/lib/libfoo.so", flags)); print("opened")
    except OSError as x:
        print(x.errno)
print(os.stat(e + "/bin/python3").st_ino == os.stat(e + "/bin/python3-hard").st_ino, os.stat(e + "/bin/python3").st_nlink)
print(open(e + "/up/many/f001.txt").read(), sorted(os.listdir(e + "/lib64")))
PY'
check python         "$py '$here/pyread.py' \"\$ROOT\""
check exec-image     "bash '$here/exec_from_image.sh' \"\$ROOT\" '$py'"
# ldd of a real program and of one in the tree: the loader's LD_TRACE_LOADED_OBJECTS must reach the program, not
# `fanstore run` (to which ld.so, a static program, is handed) -- less the preload library and its own libraries.
check ldd            'ldd /bin/true "$ROOT/bin/echo.elf" | sed "s/ (0x[0-9a-f]*)//; s|$ROOT|@|" |
                      grep -v -e fanstore_preload -e libzstd -e libxxhash'
# Children started with a cleared or explicit environment (env -i, subprocess's env=, posix_spawn's envp) see the
# tree too: the interposer puts back what it needs.
check env-cleared    'env -i /bin/cat "$ROOT/names/.hidden"; (cd "$ROOT/deep" && env -i /bin/ls d00)
                      "'"$py"'" - "$ROOT" <<"PY"
import os, subprocess, sys
r = sys.argv[1]
print(subprocess.run(["/bin/cat", r + "/names/.hidden"], env={}, capture_output=True, text=True).stdout.strip())
sys.stdout.flush()
pid = os.posix_spawn("/bin/cat", ["cat", r + "/names/.hidden"], {})
print(os.waitpid(pid, 0)[1])
PY'
if [ "${SKIP_TORCH:-0}" != 1 ]; then
  check torchvision  "$py '$here/torchread.py' \"\$ROOT/imagefolder\""
fi

# fio with every engine it has for reading a file: psync/pvsync2 (served in user space), libaio and
# io_uring (the kernel reads the fd), posixaio (glibc's helper threads do), mmap. Error and bytes read.
check fio '
  jobs=()
  for eng in psync pvsync2 libaio io_uring posixaio mmap; do
    for rw in read randread; do
      for bs in 4k 1m; do jobs+=(--name="$eng-$rw-$bs" --ioengine=$eng --rw=$rw --bs=$bs); done
    done
  done
  # One fio run, its 24 jobs in parallel (forked processes, each with its own fds; start-up dominates).
  fio --filename="$ROOT/bin/big.bin" --readonly --randseed=7 --output-format=terse --terse-version=3 "${jobs[@]}" 2>/dev/null |
    awk -F";" "{print \$3, \"error=\" \$5, \"kb=\" \$6}" | sort'

# A statically linked program (busybox): LD_PRELOAD cannot reach it, so `fanstore run` hands it a FUSE mount.
# One busybox shell per check: its applets run inside it, so one FUSE hand-over serves them all.
check busybox        'busybox sh -c "busybox md5sum \"\$0/bin/random5.bin\" \"\$0/text/lorem.txt\" \"\$0/sci/volume.h5\";
                      cd \"\$0\" && busybox find . | sort | busybox md5sum; busybox stat -c \"%s %a %Y\" \"\$0/bin/\"*;
                      busybox ls \"\$0/imagefolder/cat\" | busybox wc -l; busybox cat \"\$0/names/.hidden\"" "$ROOT"'
check busybox-cwd    'cd "$ROOT/deep/d00/d01" && busybox sh -c "pwd; ls; cat ../../../names/.hidden" | sed "s|^$ROOT|@|"'
check rsync-read     'rsync -a "$ROOT/text/many/" "$OUT/" && cd "$OUT" && md5sum * | sort'

# The mount point in its parent's listings, and paths relative to a directory fd or cwd above it. find's
# output line says it found the mount; its exit status is not compared: with the mount at /fanstore it walks
# /, where /proc entries vanish as other processes exit (exit 1 under a busy ctest -j2).
check parent         'P=$(dirname "$ROOT") B=$(basename "$ROOT");
                      ls -a "$P" | grep -qx "$B" && echo "ls lists it";
                      find "$P" -maxdepth 2 -path /proc -prune -o -path "*/$B/text" -print 2>/dev/null;
                      cd "$P" && cat "$B/names/.hidden" && ls "$B/sci" && stat -c "%s %a" "$B/bin/random1.bin"'
check parent-python  "$py '$here/parent_listing.py' \"\$ROOT\""

# Programs that try to write: the same errors, messages and exit codes as a real read-only file system.
check_ro sed-i       'sed -i s/lorem/LOREM/ "$ROOT/text/lorem.txt"; echo "sed: $?"; head -c 26 "$ROOT/text/lorem.txt"'
check_ro busybox-sed 'busybox sed -i s/lorem/LOREM/ "$ROOT/text/lorem.txt"; echo "busybox sed: $?"'
check_ro rsync-into  'rsync -a "$IN" "$ROOT/text/"; echo "rsync: $?"; rsync -a "$IN" "$ROOT/nodir/"; echo "rsync: $?"'
check_ro mktemp      'mktemp -p "$ROOT/text"; mktemp -d -p "$ROOT"; mktemp "$ROOT/nodir/x.XXXXXX"; mktemp -u -p "$ROOT" >/dev/null; echo "-u: $?"'
check_ro cp-ln-touch 'cp "$IN" "$ROOT/text/"; ln "$IN" "$ROOT/hard"; ln -s x "$ROOT/sym"; touch "$ROOT/new";
                      dd if="$IN" of="$ROOT/text/lorem.txt" 2>&1 | head -1; mkdir -p "$ROOT/a/b"'
check_ro python-tmp  "$py '$here/write_attempts.py' \"\$ROOT\" \"\$IN\""

if [ -n "${FSIO:-}" ]; then
  # fd semantics on real files of the tree: fdopen+fread, mmap, dup/dup2/F_DUPFD_CLOEXEC, lseek/pread,
  # a forked child and an exec'd child reading an inherited fd.
  cat > "$work/fd.fsio" <<'SCRIPT'
open h @/bin/random5.bin O_RDONLY
fstat h
pread h 1000 12345
lseek h 0 END
lseek h 7 SET
read h 100
dup h2 h
fstat h2
dup2 h3 h 77
fstat h3
dupfd_cloexec h4 h
fstat h4
mmap h4 300000
fork_read h3
exec_read h2
close h3
close h4
fdopen_read h2
fdopen_read h
open d @/sci O_RDONLY|O_DIRECTORY
fstatat d volume.h5 0
openat s d picture.png O_RDONLY
readall s
fdopendir dd d
readdir dd
closedir dd
chdir @/imagefolder/cat
exec_getcwd
SCRIPT
  check fd-semantics "\"$FSIO\" \"\$ROOT\" < '$work/fd.fsio'"
fi

echo "realprograms: $passed passed, $failed failed, $skipped skipped (source $src, mount $mnt${runner:+, runner: $runner})"
[ $failed -eq 0 ]
