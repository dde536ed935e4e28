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
if [[ -f $make_tree ]]; then
  "$py" "$make_tree" "$work/src"
else
  # Fallback while the suite has no generator: text, binary, numpy, PNG/JPEG, HDF5, nesting, empty dir.
  "$py" - "$work/src" <<'PY'
import os, sys
import numpy as np
from PIL import Image
import h5py
root = sys.argv[1]
rng = np.random.default_rng(7)
for d in ("text/nested/deeper", "images/cat", "arrays", "empty_dir"):
    os.makedirs(os.path.join(root, d))
for i in range(20):
    with open(os.path.join(root, "text", "f%02d.txt" % i), "w") as f:
        f.write("".join("line %d of file %d\n" % (j, i) for j in range(50 + i)))
open(os.path.join(root, "text/empty.txt"), "w").close()
with open(os.path.join(root, "blob.bin"), "wb") as f:
    f.write(rng.integers(0, 256, 3 << 20, dtype=np.uint8).tobytes())
for i in range(8):
    a = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(a).save(os.path.join(root, "images/cat", "%03d.png" % i))
    Image.fromarray(a).save(os.path.join(root, "images/cat", "%03d.jpg" % i), quality=90)
np.save(os.path.join(root, "arrays/a.npy"), rng.standard_normal((64, 64)).astype(np.float32))
with h5py.File(os.path.join(root, "arrays/v.h5"), "w") as h:
    h.create_dataset("x", data=rng.standard_normal((4, 16, 16, 16)).astype(np.float32))
PY
fi
# Several zstd partitions, as the interposer's run packs it.
"$cli" pack "$work/src" -o "$work/image" --parts 3 >/dev/null

"$cli" mount -f --image "$work/image" "$mnt" 2>"$work/mount.log" &
srv=$!
for _ in $(seq 400); do mountpoint -q "$mnt" && break; kill -0 "$srv" 2>/dev/null || break; sleep 0.05; done
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
