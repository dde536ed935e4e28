#!/bin/bash
# Runs aio_read_test (one reader per fio engine, bytes checked against the source) on a file of a packed
# tree through `fanstore run`, one engine per process, on a zstd and on a raw image.
# Usage: run_aio.sh BUILD_DIR AIO_READ_TEST_BINARY
set -euo pipefail
build=$1 bin=$2
fanstore=$build/bin/fanstore
tmp=$(mktemp -d /tmp/fanstore-aio.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
# 3.5 MiB: half compressible text, half random, so the zstd image stores it compressed.
{ head -c $((1792 * 1024)) /dev/zero | tr '\0' 'a'; head -c $((1792 * 1024)) /dev/urandom; } > "$tmp/src/big.bin"
"$fanstore" pack "$tmp/src" -o "$tmp/zstd" > /dev/null
"$fanstore" pack "$tmp/src" -o "$tmp/raw" --level 0 > /dev/null
status=0
for img in zstd raw; do
  for engine in psync pvsync2 mmap posixaio libaio io_uring io_uring-syscall io_uring-fixed; do
    echo "== $engine ($img image)"
    if ! "$fanstore" run --image "$tmp/$img" --mount /fanstore -- "$bin" "$tmp/src/big.bin" /fanstore/big.bin "$engine"; then
      status=1
    fi
  done
done
exit $status
