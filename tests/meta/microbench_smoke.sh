#!/usr/bin/env bash
# microbench.smoke: fanstore-microbench runs every benchmark that scripts/bench.sh turns into a row (core in process,
# interposer under `fanstore run`) without an error. A smoke test only: no figure is compared with anything here.
# Usage: microbench_smoke.sh FANSTORE_MICROBENCH SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-microbench-smoke-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bin" --dir "$work/run" --json "$work/mb" --benchmark_min_time=0.01 > "$work/out.log" 2>&1 || {
  cat "$work/out.log"; echo "FAIL microbench.smoke: fanstore-microbench exited with an error" >&2; exit 1; }
bash "$src/tests/run_python.sh" "$src/scripts/bench/microbench_rows.py" --check "$work/mb" || {
  cat "$work/out.log"; echo "FAIL microbench.smoke: benchmarks missing or in error (above)" >&2; exit 1; }
[ ! -e "$work/run/src" ] || { echo "FAIL microbench.smoke: the generated tree was not removed" >&2; exit 1; }
echo "microbench.smoke: every benchmark of scripts/bench.sh's microbench rows ran"
