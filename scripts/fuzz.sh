#!/usr/bin/env bash
# Runs the libFuzzer targets (index parser, reading every file of a mutated image, the daemon's socket protocol)
# for longer than CI does, keeping their corpora in fuzz-corpus/ so later runs start where this one stopped.
# Usage: scripts/fuzz.sh [SECONDS per target, default 600] [index|image_read|daemon_socket ...]
# Needs a build with the fuzzers (clang + libclang-rt-dev: scripts/install-deps.sh, then scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
SECS=${1:-600}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(index image_read daemon_socket)
cmake --build "$BUILD_DIR" --target fanstore fanstore_fuzzers >/dev/null || {
  echo "fuzz.sh: no fuzz build in $BUILD_DIR (is clang installed? see the FanStore: fuzz line of scripts/build.sh)" >&2
  exit 1
}
for t in "${TARGETS[@]}"; do
  mkdir -p "fuzz-corpus/$t"
  FANSTORE_FUZZ_ARTIFACTS=$PWD/fuzz-corpus tests/core/fuzz/run_fuzz.sh "$t" "$BUILD_DIR/fuzz/fuzz_$t" \
    "$BUILD_DIR/bin/fanstore" "$SECS" "$PWD/fuzz-corpus/$t"
done
