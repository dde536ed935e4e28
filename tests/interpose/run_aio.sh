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
# A program without libaio or liburing that finds their names in the global scope (ours, exported by the preload
# library) gets -ENOSYS on every call, never a jump into the marker of a symbol found missing.
echo "== io_setup and io_uring_queue_init without their libraries, three calls each"
if ! "$fanstore" run --image "$tmp/zstd" --mount /fanstore -- "${FANSTORE_PYTHON:-/usr/bin/python3}" -c '
import ctypes, errno
lib = ctypes.CDLL(None)
for name, args in (("io_setup", (1, ctypes.byref(ctypes.c_void_p()))),
                   ("io_uring_queue_init", (8, ctypes.create_string_buffer(512), 0))):
    got = [getattr(lib, name)(*args) for _ in range(3)]
    assert got == [-errno.ENOSYS] * 3, (name, got)
print("ok: -ENOSYS three times each")'; then
  status=1
fi
exit $status
