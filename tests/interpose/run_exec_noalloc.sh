#!/bin/bash
# Runs exec_noalloc_test under `fanstore run`: every exec wrapper reaches an ordinary dynamic program without
# calling malloc in the forked child. Usage: run_exec_noalloc.sh BUILD_DIR EXEC_NOALLOC_TEST_BINARY
set -euo pipefail
build=$1 bin=$2
tmp=$(mktemp -d /tmp/fanstore-noalloc.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
echo x > "$tmp/src/x.txt"
"$build/bin/fanstore" pack "$tmp/src" -o "$tmp/img" > /dev/null
# A path longer than a std::string keeps inline, so an allocation on the way cannot hide.
cp "$(type -P true)" "$tmp/true"
"$build/bin/fanstore" run --image "$tmp/img" --mount /fanstore -- "$bin" "$tmp/true"
