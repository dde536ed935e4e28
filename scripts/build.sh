#!/usr/bin/env bash
# Configures and builds FanStore into build/ (binaries in build/bin, libfanstore_preload.so in build/lib).
# Extra arguments go to CMake, e.g. scripts/build.sh -DFANSTORE_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >"$BUILD_DIR.configure.log" 2>&1 || {
  cat "$BUILD_DIR.configure.log" >&2
  echo "build.sh: CMake configure failed (log above); did scripts/install-deps.sh run?" >&2
  exit 1
}
grep -E "^-- FanStore" "$BUILD_DIR.configure.log" || true
rm -f "$BUILD_DIR.configure.log"
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "build.sh: built into $BUILD_DIR/ (bin/fanstore, lib/libfanstore_preload.so)"
