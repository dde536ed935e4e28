#!/usr/bin/env bash
# ctest fuse.realprograms: the interposer's real-program comparison suite, run against a FUSE mount of the
# same kind of tree (empty runner prefix: the programs run unmodified, the kernel routes them to the mount).
# Usage: realprograms_fuse.sh FANSTORE_CLI REALPROGRAMS_SH [FSIO_BINARY]
#   FSIO_BINARY (optional): tests/interpose's one-syscall-at-a-time harness; adds the suite's fd checks.
# Exit 77 (ctest SKIP) with a loud banner only where FUSE cannot be mounted on this machine.
set -euo pipefail
cli=$1
suite=$2
[[ -n ${3:-} ]] && export FSIO=$3

skip() {
  printf '\n%s\n*** SKIPPED fuse.realprograms: %s\n%s\n\n' "$(printf '*%.0s' {1..72})" "$1" "$(printf '*%.0s' {1..72})" >&2
  exit 77
}
[[ -c /dev/fuse ]] || skip "/dev/fuse does not exist on this machine"

work=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-fuse-real-XXXXXX")
mnt=$work/mnt
srv=""
cleanup() {
  if mountpoint -q "$mnt" 2>/dev/null; then fusermount3 -u "$mnt" || fusermount3 -u -z "$mnt" || true; fi
  [[ -n $srv ]] && wait "$srv" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/src" "$mnt"
# The interposer's edge-case tree (same generator, same seed), so both front ends face the same checks.
make_tree=$(dirname "$suite")/make_tree.py
py=${FANSTORE_PYTHON:-/usr/bin/python3}
"$py" "$make_tree" "$work/src" || { echo "fuse.realprograms: $make_tree failed" >&2; exit 1; }
# Several zstd partitions, as the interposer's run packs it.
"$cli" pack "$work/src" -o "$work/image" --parts 3 >/dev/null

"$cli" mount -f --image "$work/image" "$mnt" 2>"$work/mount.log" &
srv=$!
# Hang detection only (2 minutes): the loop ends as soon as the mount is up or the server has exited.
for _ in $(seq 2400); do mountpoint -q "$mnt" && break; kill -0 "$srv" 2>/dev/null || break; sleep 0.05; done
if ! mountpoint -q "$mnt"; then
  if grep -qiE "not permitted|permission denied" "$work/mount.log"; then skip "mounting is not permitted: $(cat "$work/mount.log")"; fi
  echo "fuse.realprograms: fanstore mount did not come up: $(cat "$work/mount.log")" >&2
  exit 1
fi

status=0
bash "$suite" "$work/src" "" "$mnt" || status=$?
fusermount3 -u "$mnt"
wait "$srv" || { echo "fuse.realprograms: the mount server exited with an error: $(cat "$work/mount.log")" >&2; status=1; }
srv=""
exit $status
