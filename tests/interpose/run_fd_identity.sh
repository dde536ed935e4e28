#!/bin/bash
# Runs fd_identity_test through `fanstore run` on a raw image (large raw files are served from a mapping of
# their partition, which a reused partition fd number would make fault) and on a zstd image.
# Usage: run_fd_identity.sh BUILD_DIR FD_IDENTITY_TEST_BINARY
set -euo pipefail
build=$1 bin=$2
fanstore=$build/bin/fanstore
tmp=$(mktemp -d /tmp/fanstore-fdid.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/raw"
echo "a small text file" > "$tmp/src/small.txt"
head -c $((4096 * 300)) /dev/urandom > "$tmp/src/raw/large.bin"
for i in 1 2 3; do head -c 300000 /dev/urandom > "$tmp/src/raw/fresh$i.bin"; done
"$fanstore" pack "$tmp/src" -o "$tmp/raw" --level 0 > /dev/null
"$fanstore" pack "$tmp/src" -o "$tmp/zstd" --parts 2 > /dev/null
status=0
for img in raw zstd; do
  echo "== $img image"
  "$fanstore" run --image "$tmp/$img" --mount /fanstore -- "$bin" "$tmp/src" /fanstore || status=1
done
exit $status
