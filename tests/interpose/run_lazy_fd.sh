#!/bin/bash
# Runs lazy_fd_test on a small (in-cache, heap-backed) and a large (memfd-backed) file of a packed tree,
# with lazy fds (the default) and with FANSTORE_LAZY=0 (a memfd at every open): both must match the real file.
# Then two stresses of forks beside readers. Usage: run_lazy_fd.sh BUILD_DIR LAZY_FD_TEST_BINARY
set -euo pipefail
build=$1 bin=$2
fanstore=$build/bin/fanstore
tmp=$(mktemp -d /tmp/fanstore-lazyfd.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/d"
head -c 20000 /dev/urandom > "$tmp/src/small.bin"
head -c 300000 /dev/urandom > "$tmp/src/d/large.bin"
"$fanstore" pack "$tmp/src" -o "$tmp/img" --parts 2 > /dev/null
status=0
for f in small.bin d/large.bin; do
  for lazy in 1 0; do
    echo "== $f (FANSTORE_LAZY=$lazy)"
    if ! FANSTORE_LAZY=$lazy LAZY_EXPECT=$lazy "$fanstore" run --image "$tmp/img" --mount /fanstore -- \
        "$bin" "$tmp/src/$f" "/fanstore/$f"; then
      status=1
    fi
  done
done
# The image inside the mount's prefix: the Client's own opens of its partitions (a read, sendfile, copy_file_range
# on a lazy fd) must reach the real files, not the image. No node cache, which would serve the bytes without them.
mkdir "$tmp/m"
"$fanstore" pack "$tmp/src" -o "$tmp/m/img" --parts 2 > /dev/null
for only in sendfile-first copy-file-range-first; do
  echo "== $only, image under the prefix"
  if ! FANSTORE_NODE_CACHE=off LAZY_EXPECT=1 "$fanstore" run --image "$tmp/m/img" --mount "$tmp/m" -- \
      "$bin" --only $only "$tmp/src/small.bin" "$tmp/m/small.bin"; then
    status=1
  fi
done
echo "== stress: threads reading while the main thread forks"
if ! "$fanstore" run --image "$tmp/img" --mount /fanstore -- "$bin" --stress "$tmp/src/d/large.bin" /fanstore/d/large.bin; then
  status=1
fi
echo "== stress: FANSTORE_LAZY=0 (a memfd per open) while the main thread forks"
mkdir "$tmp/many"
for i in $(seq 0 1499); do head -c $((1000 + i * 7)) /dev/urandom > "$tmp/many/f$i"; done
"$fanstore" pack "$tmp/many" -o "$tmp/many-img" > /dev/null
if ! FANSTORE_LAZY=0 "$fanstore" run --image "$tmp/many-img" --mount /fanstore -- \
    "$bin" --fork-while-opening "$tmp/many" /fanstore 1500; then
  status=1
fi
exit $status
