#!/bin/bash
# Runs the fsio harness scripts against a small tree and against its image under `fanstore run`; diffs the outputs.
# Usage: run_fsio.sh BUILD_DIR FSIO_BINARY SCRIPTS_DIR
set -euo pipefail
build=$1 fsio=$2 scripts=$3
fanstore=$build/bin/fanstore
tmp=$(mktemp -d /tmp/fanstore-fsio.XXXXXX)
ro_mounted=0
trap '[ $ro_mounted = 1 ] && umount "$tmp/ro"; rm -rf "$tmp"' EXIT

# The tree the scripts expect: a.txt, empty, exec.sh, dir/b.txt, dir/sub/deep.bin, emptydir/, loops/{a,b}.
src=$tmp/src
mkdir -p "$src/dir/sub" "$src/emptydir"
printf 'hello\n' > "$src/a.txt"
: > "$src/empty"
printf '#!/bin/sh\necho hi\n' > "$src/exec.sh"
chmod 755 "$src/exec.sh"
echo bbb > "$src/dir/b.txt"
head -c 100000 /dev/urandom > "$src/dir/sub/deep.bin"
# A symlink loop, for the walks (nftw without FTW_PHYS stops at it with ELOOP).
mkdir -p "$src/loops" && ln -s b "$src/loops/a" && ln -s a "$src/loops/b"
"$fanstore" pack "$src" -o "$tmp/img" --parts 2 > /dev/null

status=0
"$fsio" "$src" < "$scripts/read.fsio" > "$tmp/src.out"
"$fanstore" run --image "$tmp/img" --mount /fanstore -- "$fsio" /fanstore < "$scripts/read.fsio" > "$tmp/mnt.out"
if diff -u "$tmp/src.out" "$tmp/mnt.out"; then
  echo "OK: read.fsio: $(grep -vc '^#' "$tmp/src.out") calls agree between the tree and the mount"
else
  echo "FAIL: read.fsio differs (- source tree, + mount)"
  status=1
fi
# The mount need not exist and may be anywhere: run the write script under a different prefix too.
for mount in /fanstore /tmp/fanstore-nonexistent/deeper; do
  "$fanstore" run --image "$tmp/img" --mount "$mount" -- "$fsio" "$mount" < "$scripts/write.fsio" > "$tmp/w.out"
  if diff -u "$scripts/write.expected" "$tmp/w.out"; then
    echo "OK: write.fsio under $mount matches write.expected"
  else
    echo "FAIL: write.fsio under $mount differs from write.expected"
    status=1
  fi
done
# ro.fsio: opens and mutations with the errnos of a real read-only mount, plus the tree walks
# (scandir callbacks, glob, nftw, ftw). The mount must print ro.expected; when we may mount (root), the
# same script on a real read-only tmpfs holding the same tree must print it too, which is what makes
# ro.expected Linux's behaviour rather than ours.
"$fanstore" run --image "$tmp/img" --mount /fanstore -- "$fsio" /fanstore < "$scripts/ro.fsio" > "$tmp/ro.out"
if diff -u "$scripts/ro.expected" "$tmp/ro.out"; then
  echo "OK: ro.fsio on the mount matches ro.expected"
else
  echo "FAIL: ro.fsio on the mount differs from ro.expected (- expected, + mount)"
  status=1
fi
mkdir "$tmp/ro"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=16m tmpfs "$tmp/ro" 2>/dev/null; then
  ro_mounted=1
  cp -a "$src/." "$tmp/ro/"
  mount -o remount,ro "$tmp/ro"
  "$fsio" "$tmp/ro" < "$scripts/ro.fsio" > "$tmp/ro-real.out"
  if diff -u "$scripts/ro.expected" "$tmp/ro-real.out"; then
    echo "OK: ro.fsio on a real read-only tmpfs matches ro.expected"
  else
    echo "FAIL: ro.expected is not what Linux does on a read-only mount (- expected, + real)"
    status=1
  fi
else
  echo "note: not root or no mount(2): ro.expected not re-checked against a real read-only mount"
fi
exit $status
