#!/bin/bash
# Real programs on a tree and on the same tree served by FanStore must print the same bytes.
# Usage: realprograms.sh SOURCE_TREE RUNNER MOUNT
#   SOURCE_TREE  the directory that was packed
#   RUNNER       command prefix that serves the image to its command, e.g.
#                "build/bin/fanstore run --image img.fst --mount /fanstore --"; "" for a FUSE mount
#   MOUNT        where the tree appears under RUNNER (the --mount prefix, or the FUSE mountpoint)
# Optional environment: FSIO=path to tests/interpose's fsio harness (adds the fd-semantics checks),
# SKIP_TORCH=1 (skip the torchvision check). Exit status: 0 when every check agrees, 1 otherwise.
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
trap 'rm -rf "$work"' EXIT
failed=0 passed=0

# check NAME SCRIPT: runs SCRIPT with ROOT=<source tree> directly and ROOT=<mount> under RUNNER, with
# the root prefix of both outputs replaced by "@", and compares the two byte for byte (stdout + exit status).
check() {
  local name=$1 script=$2
  ROOT=$src OUT=$work/a bash -c "$script" > "$work/src.out" 2> "$work/src.err"
  echo "exit=$?" >> "$work/src.out"
  # shellcheck disable=SC2086  # RUNNER is a word list on purpose
  ROOT=$mnt OUT=$work/b $runner bash -c "$script" > "$work/mnt.out" 2> "$work/mnt.err"
  echo "exit=$?" >> "$work/mnt.out"
  sed -i "s|$src|@|g" "$work/src.out"
  sed -i "s|$mnt|@|g" "$work/mnt.out"
  if cmp -s "$work/src.out" "$work/mnt.out" && [ -s "$work/src.out" ]; then
    passed=$((passed + 1))
    printf 'ok    %-22s %s lines, %s bytes\n' "$name" "$(wc -l < "$work/src.out")" "$(wc -c < "$work/src.out")"
  else
    failed=$((failed + 1))
    echo "FAIL  $name: outputs differ (- source tree, + mount)"
    diff -u "$work/src.out" "$work/mnt.out" | head -20 | sed 's/^/      /'
    head -5 "$work/mnt.err" | sed 's/^/      stderr: /'
  fi
  rm -rf "$work/a" "$work/b"
}

check cat            'find "$ROOT" -type f -print0 | sort -z | xargs -0 cat | md5sum'
check md5sum         'cd "$ROOT" && find . -type f -print0 | sort -z | xargs -0 md5sum'
check ls-lR          'ls -lR --time-style=+%s.%N "$ROOT"'
check ls-las        'ls -las "$ROOT/text" "$ROOT/text/many" "$ROOT/emptydir"'
check find           'find "$ROOT" -printf "%P|%y|%s|%m|%n|%T@|%U\n" | sort'
check find-type      'find "$ROOT" -type f -name "*.jpg" | sort; find "$ROOT" -type d -empty | sort'
check du-ab          'du -ab "$ROOT" | sort -k2'
check du-sh          'du -s --apparent-size "$ROOT"/*'
check stat           'cd "$ROOT" && find . -print0 | sort -z | xargs -0 stat -c "%n %s %f %h %Y %y %U %G"'
check tar-bytes      'tar -C "$ROOT" --sort=name --numeric-owner -cf - . | md5sum'
check tar-tv         'tar -C "$ROOT" --sort=name --numeric-owner -cf - . | tar -tvf - --full-time'
check cp-r-diff      'cp -r "$ROOT" "$OUT" && diff -r "$ROOT" "$OUT" && (cd "$OUT" && find . -type f -print0 | sort -z | xargs -0 md5sum)'
check head-tail      'head -c 100 "$ROOT/text/lorem.txt"; tail -c 77 "$ROOT/bin/random5.bin" | od -An -tx1 | md5sum; wc -c "$ROOT/bin/zeros.bin"'
check grep-r         'grep -rc "lorem" "$ROOT/text" | sort'
check cmp            'cmp "$ROOT/bin/random5.bin" "$ROOT/bin/random5.bin" && echo same'
check sh-cd          'cd "$ROOT/deep/d00/d01" && pwd && ls && cd ../../.. && pwd && cat names/.hidden'
check python         "$py '$here/pyread.py' \"\$ROOT\""
if [ "${SKIP_TORCH:-0}" != 1 ]; then
  check torchvision  "$py '$here/torchread.py' \"\$ROOT/imagefolder\""
fi
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

echo "realprograms: $passed passed, $failed failed (source $src, mount $mnt${runner:+, runner: $runner})"
[ $failed -eq 0 ]
