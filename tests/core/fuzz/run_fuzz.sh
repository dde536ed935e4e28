#!/bin/bash
# Runs one libFuzzer target for SECONDS from seeds made here (a small packed image), with the corpus in CORPUS
# (kept between runs when given, else a temporary one). Exit 0: no finding; otherwise the crash input is saved
# in FANSTORE_FUZZ_ARTIFACTS (default TMPDIR or /tmp) and named on stderr.
# Usage: run_fuzz.sh index|image_read FUZZ_BINARY FANSTORE SECONDS [CORPUS]
set -u
TARGET=$1 BIN=$2 F=$3 SECS=$4 CORPUS=${5:-}
ART=${FANSTORE_FUZZ_ARTIFACTS:-${TMPDIR:-/tmp}}
T=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-fuzzrun-XXXXXX")
trap 'rm -rf "$T"' EXIT
[ -n "$CORPUS" ] || CORPUS=$T/corpus
mkdir -p "$CORPUS" "$T/src/d" "$T/seeds"
# Seeds: one of each file kind (empty, one byte, raw, zstd, several chunks of 64 KiB, nested directories).
: >"$T/src/empty"
printf x >"$T/src/one"
head -c 5000 /dev/urandom >"$T/src/d/raw.bin"
seq 1 3000 >"$T/src/d/text.txt"
seq 1 40000 >"$T/src/d/chunks.txt"
"$F" pack "$T/src" -o "$T/img" --chunk 64K --threads 1 >/dev/null || { echo "run_fuzz: pack failed" >&2; exit 1; }
if [ "$TARGET" = index ]; then
  cp "$T/img/index.fsi" "$T/seeds/index"
else
  /usr/bin/python3 - "$T/img" "$T/seeds/image" <<'PY'
import struct, sys
idx = open(sys.argv[1] + "/index.fsi", "rb").read()
part = open(sys.argv[1] + "/part-00000.fsp", "rb").read()
open(sys.argv[2], "wb").write(struct.pack("<I", len(idx)) + idx + part)
PY
fi
"$BIN" "$CORPUS" "$T/seeds" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=2048 -max_len=1048576 \
  -artifact_prefix="$ART/fanstore-fuzz-crash-$TARGET-" -print_final_stats=1 2>"$T/log"
rc=$?
tail -15 "$T/log"
if [ $rc -ne 0 ]; then
  echo "run_fuzz: $TARGET found a problem (rc $rc); the input is $ART/fanstore-fuzz-crash-$TARGET-*" >&2
  exit 1
fi
echo "run_fuzz: $TARGET ran $SECS s without a finding"
