# shellcheck shell=bash
# Sourced by the benchmark sections that also run alone (env.sh, ltfb.sh, remote_cost.sh, spatial.sh, staging.sh):
#   source "$(dirname "$0")/standalone.sh" SECTION "$@"      (the script's own arguments: OUT_DIR [--quick])
# Sets OUT, QUICK (0/1), REPO, BUILD_DIR (absolute), PY and TMP ($BENCH_DISK/SECTION), makes OUT/raw.csv, and
# defines record CASE SYSTEM UNIT BETTER VALUE (a raw.csv row of SECTION; double quotes become single ones), note
# TEXT (a line under SECTION's table) and log TEXT... (stderr, timed).
SECTION=${1:?standalone.sh: the section name}
OUT=${2:?usage: $(basename "$0") OUT_DIR [--quick]}
QUICK=0
[ "${3:-}" = --quick ] && QUICK=1
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$REPO/build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
PY=${FANSTORE_PYTHON:-/usr/bin/python3}
TMP=${BENCH_DISK:-/var/tmp/fanstore-bench}/$SECTION
mkdir -p "$OUT"
[ -f "$OUT/raw.csv" ] || echo "section,case,system,unit,better,value" >"$OUT/raw.csv"
record() {
  printf '"%s","%s",%s,%s,%s,"%s"\n' "$SECTION" "${1//\"/\'}" "$2" "$3" "$4" "${5//\"/\'}" >>"$OUT/raw.csv"
}
note() { printf '%s\t%s\n' "$SECTION" "$1" >>"$OUT/notes.tsv"; }
log() { printf '[%s %s] %s\n' "$SECTION" "$(date +%H:%M:%S)" "$*" >&2; }
