#!/bin/bash
# Runs one libFuzzer target for SECONDS from seeds made here (a small packed image), with the corpus in CORPUS
# (kept between runs when given, else a temporary one). Exit 0: no finding; otherwise the crash input is saved
# in FANSTORE_FUZZ_ARTIFACTS (default TMPDIR or /tmp) and named on stderr.
# Usage: run_fuzz.sh index|image_read|daemon_socket FUZZ_BINARY FANSTORE SECONDS [CORPUS]
set -u
TARGET=$1 BIN=$2 F=$3 SECS=$4 CORPUS=${5:-}
ART=${FANSTORE_FUZZ_ARTIFACTS:-${TMPDIR:-/tmp}}
T=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-fuzzrun-XXXXXX")
trap 'rm -rf "$T"' EXIT
[ -n "$CORPUS" ] || CORPUS=$T/corpus
mkdir -p "$CORPUS" "$T/src/d" "$T/seeds"
# Seeds: one of each entry kind (empty, one byte, raw, zstd, several chunks of 64 KiB, nested directories, symlinks
# relative, absolute and dangling, a hard link).
: >"$T/src/empty"
printf x >"$T/src/one"
head -c 5000 /dev/urandom >"$T/src/d/raw.bin"
seq 1 3000 >"$T/src/d/text.txt"
seq 1 40000 >"$T/src/d/chunks.txt"
ln -s text.txt "$T/src/d/link" && ln -s /etc "$T/src/abs" && ln -s nowhere "$T/src/dangling" && ln "$T/src/one" "$T/src/d/hard"
"$F" pack "$T/src" -o "$T/img" --chunk 64K --threads 1 >/dev/null || { echo "run_fuzz: pack failed" >&2; exit 1; }
if [ "$TARGET" = index ]; then
  cp "$T/img/index.fsi" "$T/seeds/index"
  cp "$(dirname "$0")/../data/v2-image/index.fsi" "$T/seeds/index-v2"  # the older format, still served
elif [ "$TARGET" = daemon_socket ]; then
  # Operations of fuzz_daemon_socket.cpp (it makes its own image). Seed 1: fetch 16 known ranges (those of the
  # remote partition land in the fetch cache), then ask each cached partition for offset 2^64 - L + 100, length L,
  # L = 200 and 256 MiB: the requests that crashed `fanstore serve` (ranges wrapping past 2^64). Seed 2: hellos, a cache map, a hint
  # of real paths, a raw header and a fetch on each connection.
  /usr/bin/python3 - "$T/seeds" <<'PY'
import struct, sys
def fetch(conn, how, k, len_index, extra=b""):
    return bytes([conn << 4 | 0, how, k]) + bytes(8) + bytes([len_index]) + extra
crash = b"".join(fetch(k % 3, 0, k, 0) for k in range(16))
crash += b"".join(fetch(k % 3, 2, k, li, bytes([100])) for li in (2, 5) for k in range(16))
open(sys.argv[1] + "/overflow", "wb").write(crash)
mixed = bytes([0x04 | 8, 0x14, 0x24 | 8])                              # hello, cache map, hello
mixed += bytes([0x03, 4]) + b"".join(bytes([1, k]) for k in range(4)) + bytes([2, 0, 0])  # a hint, true length
mixed += bytes([0x12]) + struct.pack("<IHHQIIQQQ", 0x51445346, 2, 2, 0, 1, 0, 0, 100, 0) + bytes([0])
mixed += b"".join(fetch(c, 1, 3 + c, 0, bytes([10, 1])) for c in range(3))
open(sys.argv[1] + "/mixed", "wb").write(mixed)
PY
else
  /usr/bin/python3 - "$T/img" "$T/seeds/image" <<'PY'
import struct, sys
idx = open(sys.argv[1] + "/index.fsi", "rb").read()
part = open(sys.argv[1] + "/part-00000.fsp", "rb").read()
open(sys.argv[2], "wb").write(struct.pack("<I", len(idx)) + idx + part)
PY
fi
# The daemon target's server logs a line per refused request: its stderr is closed (findings still print).
MAXLEN=1048576 EXTRA=()
[ "$TARGET" = daemon_socket ] && MAXLEN=16384 EXTRA=(-close_fd_mask=2)
"$BIN" "$CORPUS" "$T/seeds" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=2048 -max_len=$MAXLEN "${EXTRA[@]}" \
  -artifact_prefix="$ART/fanstore-fuzz-crash-$TARGET-" -print_final_stats=1 2>"$T/log"
rc=$?
tail -15 "$T/log"
if [ $rc -ne 0 ]; then
  echo "run_fuzz: $TARGET found a problem (rc $rc); the input is $ART/fanstore-fuzz-crash-$TARGET-*" >&2
  exit 1
fi
echo "run_fuzz: $TARGET ran $SECS s without a finding"
