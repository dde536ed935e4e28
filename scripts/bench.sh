#!/usr/bin/env bash
# Runs every FanStore benchmark against baselines measured in the same run; writes bench-results/ and prints the table.
# Usage: scripts/bench.sh [--quick] [--keep] [--update-doc] [--gpu] [--out DIR]
#   --quick       small sizes (~8 minutes on 2 cores); the full run takes ~24 minutes
#   --gpu         also the trainer on one CUDA device (bf16) against its goals per H100; "no CUDA device" skips it
#   --keep        keep the generated tree and images (in BENCH_TMPFS and BENCH_DISK) after the run
#   --update-doc  put the table and machine description into docs/performance.md
# Environment: BUILD_DIR (default build/), BENCH_TMPFS (default /dev/shm/fanstore-bench),
#              BENCH_DISK (default /var/tmp/fanstore-bench; must be on a real disk, not tmpfs),
#              BENCH_DRIVERS (where tools/bench is built when BUILD_DIR lacks the drivers; kept between runs),
#              BENCH_SKIP (sections that have their own script not to run, e.g. "spatial ltfb": spatial,
#              remote-cost, staging, env, ltfb; their rows are then missing from this run's table).
# A piece that is not built yet (pack, run, mount, serve, fanstore-train --benchmark) gives an "n/a" row, never a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
HELPERS=$REPO/scripts/bench
PY=${FANSTORE_PYTHON:-/usr/bin/python3}

QUICK=0 KEEP=0 UPDATE_DOC=0 GPU=0 OUT=$REPO/bench-results
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --keep) KEEP=1 ;;
    --update-doc) UPDATE_DOC=1 ;;
    --gpu) GPU=1 ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

BUILD_DIR=${BUILD_DIR:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
TMPFS=${BENCH_TMPFS:-/dev/shm/fanstore-bench}
DISK=${BENCH_DISK:-/var/tmp/fanstore-bench}
MOUNT=/fanstore
FANSTORE=$BUILD_DIR/bin/fanstore
TRAIN=$BUILD_DIR/bin/fanstore-train
if [ $QUICK = 1 ]; then MIN_TIME=0.2; MODE=quick; else MIN_TIME=1.0; MODE=full; fi
STEP_TIMEOUT=${BENCH_STEP_TIMEOUT:-300}
START=$(date +%s)

SRC=$TMPFS/src            # the tree, on tmpfs (baseline 1)
DSRC=$DISK/src            # the same tree on the local disk (baseline 2)
LISTS=$TMPFS/lists        # relative file lists, read with the real libc
IMG_RAW=$DISK/img-raw     # images on the local disk too: FanStore's node-local copy
IMG_ZSTD=$DISK/img-zstd
FUSE_MNT=$TMPFS/fuse-mnt
LOGS=$OUT/logs
DAEMON_PID=""

log() { printf '[bench %4ss] %s\n' "$(($(date +%s) - START))" "$*" >&2; }

cleanup() {
  log "cleaning up"
  if mountpoint -q "$FUSE_MNT" 2>/dev/null; then fusermount3 -u "$FUSE_MNT" 2>/dev/null || true; fi
  if [ -n "$DAEMON_PID" ]; then stop_daemons; fi
  if declare -F remote_cleanup >/dev/null; then remote_cleanup; fi
  if [ $KEEP = 0 ]; then
    rm -rf "$TMPFS"
    # Deleting GBs on this disk (mounted with discard) takes tens of seconds: rename, then delete in the background.
    if [ -d "$DISK" ] && mv "$DISK" "$DISK.old.$$"; then (rm -rf "$DISK.old.$$" &) else rm -rf "$DISK"; fi
  fi
}
trap cleanup EXIT

# --- where results go -------------------------------------------------------------------------------------------
# Only what a previous run wrote is removed: --out may name a directory that holds other things.
rm -rf "$LOGS" "$OUT"/*.csv "$OUT"/*.md "$OUT"/*.png "$OUT"/*.dat "$OUT"/notes.tsv
mkdir -p "$OUT" "$LOGS"
echo "section,case,system,unit,better,value" >"$OUT/raw.csv"
: >"$OUT/notes.tsv"
# record SECTION CASE SYSTEM UNIT higher|lower VALUE   (VALUE: number or the reason it is missing)
record() { printf '"%s","%s",%s,%s,%s,"%s"\n' "${1//\"/\'}" "${2//\"/\'}" "$3" "$4" "$5" "${6//\"/\'}" >>"$OUT/raw.csv"; }
note() { printf '%s\t%s\n' "$1" "$2" >>"$OUT/notes.tsv"; }
# field N of a CSV line
field() { echo "$1" | cut -d, -f"$2"; }

# --- what is built ----------------------------------------------------------------------------------------------
# A subcommand exists when the top-level help lists it (`fanstore NOPE --help` exits 0 with the top-level help).
has_sub() { [ -x "$FANSTORE" ] && "$FANSTORE" --help 2>/dev/null | grep -qE "^ +$1 "; }
HAVE_PACK=0 HAVE_RUN=0 HAVE_MOUNT=0 HAVE_SERVE=0 HAVE_TRAIN=0
has_sub pack && HAVE_PACK=1
has_sub run && [ -f "$BUILD_DIR/lib/libfanstore_preload.so" ] && HAVE_RUN=1
has_sub mount && [ -e /dev/fuse ] && command -v fusermount3 >/dev/null && HAVE_MOUNT=1
# serve exists as a stub in a build without MPI; that counts as not built.
has_sub serve && has_sub wait && ! grep -qi "without MPI" <<<"$("$FANSTORE" serve --help 2>&1)" &&
  grep -q -- --daemon <<<"$("$FANSTORE" run --help 2>/dev/null)" && HAVE_SERVE=1
# (grep -q on a pipe would stop reading early: under pipefail the writer's SIGPIPE fails the test.)
[ -x "$TRAIN" ] && grep -q -- --benchmark <<<"$("$TRAIN" --help 2>&1)" && HAVE_TRAIN=1
NA_PACK="n/a (not built: fanstore pack)"
NA_RUN="n/a (not built: fanstore run / libfanstore_preload.so)"
NA_MOUNT="n/a (not built: fanstore mount)"
NA_SERVE="n/a (not built: fanstore serve / wait / run --daemon)"
NA_TRAIN="n/a (fanstore-train --benchmark not available)"
log "build dir $BUILD_DIR: pack=$HAVE_PACK run=$HAVE_RUN mount=$HAVE_MOUNT serve=$HAVE_SERVE train-benchmark=$HAVE_TRAIN"

# --- data -------------------------------------------------------------------------------------------------------
rm -rf "$TMPFS" "$DISK"
mkdir -p "$TMPFS" "$DISK"
if [ "$(findmnt -no FSTYPE -T "$DISK" | head -1)" = tmpfs ]; then
  log "warning: BENCH_DISK=$DISK is on tmpfs; the 'disk' column will not be a disk"
fi
# The drivers come from the main build once tools/bench is part of it; until then, build them on the side.
BIN=$BUILD_DIR/bin
if [ ! -x "$BIN/fanstore-iobench" ] || [ ! -x "$BIN/fanstore-dlio" ]; then
  log "drivers not in $BIN: building tools/bench on its own"
  BIN=$("$HELPERS/build_drivers.sh" "${BENCH_DRIVERS:-/var/tmp/fanstore-bench-drivers}")
fi
IOBENCH=$BIN/fanstore-iobench
DLIO=$BIN/fanstore-dlio
PINGPONG=$BIN/fanstore-pingpong

"$HELPERS/machine_info.sh" "$DISK" >"$OUT/machine.md"
log "generating the $MODE tree in $SRC"
gen_args=(--out "$SRC" --lists "$LISTS")
# --quick: unet3d samples of 16 MiB instead of 32 (its compute time is scaled from the real size below).
[ $QUICK = 1 ] && gen_args+=(--quick --unet3d-mib 16)
$PY "$HELPERS/make_data.py" "${gen_args[@]}"
cp -a "$SRC" "$DSRC"
sync   # the disk copy's dirty pages must not be written back during the timed reads
SRC_BYTES=$(du -sb "$SRC" | cut -f1)
SRC_FILES=$(find "$SRC" -type f | wc -l)
BIG_MIB=$(( $(stat -c %s "$SRC/micro/big.bin") >> 20 ))

# --- pack: fanstore pack vs tar | zstd over the same tree (also builds the images the other sections read) --------
# timed CMD...: runs CMD, prints its wall seconds; the log keeps its output.
timed() {
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  if ! timeout "$STEP_TIMEOUT" "$@" >"$LOGS/$name.log" 2>&1; then return 1; fi
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.4f", $2 - $1}'
}
rate() { awk -v n="$1" -v s="$2" 'BEGIN {printf "%.2f", n / s}'; }
MB=$(awk -v b="$SRC_BYTES" 'BEGIN {print b / 1e6}')
note pack "Tree: $SRC_FILES files, $(awk -v b="$SRC_BYTES" 'BEGIN {printf "%.0f", b / 1e6}') MB (tmpfs -> image on the local disk); 2 threads on both sides. Most bytes are random (JPEG-like, DLIO samples) and stay raw; micro/ is ~2:1 compressible. MB/s counts input bytes. Each writer runs twice (two rounds in opposite orders, each run after a sync, the previous output removed untimed) and its faster run counts. fanstore pack fsyncs its partitions and index before it renames the image into place (a finished pack is on disk); tar and zstd do not sync."
HAVE_RAW=0 HAVE_ZSTD=0
# record_pack CASE_PREFIX SYSTEM LOGNAME SECONDS_OR_EMPTY : the MB/s and files/s rows of one pack run.
record_pack() {
  local prefix=$1 sys=$2 name=$3 s=$4
  if [ -z "$s" ]; then
    record pack "$prefix: MB/s" "$sys" MB/s higher "error (logs/$name.log)"
    record pack "$prefix: files/s" "$sys" files/s higher "error (logs/$name.log)"
  else
    record pack "$prefix: MB/s" "$sys" MB/s higher "$(rate "$MB" "$s")"
    record pack "$prefix: files/s" "$sys" files/s higher "$(rate "$SRC_FILES" "$s")"
  fi
}
log "pack: fanstore pack (zstd, raw) vs tar | zstd -T2"
# Two rounds, the second in the opposite order, and the faster run of each writer counts: the first writer after
# the tree was made pays for evicting its disk copy's page cache (measured here: the same pack 11.8 s first, 4.6 s
# after), whichever writer that is. Every run starts after a sync (each pays for its own writes only).
declare -A PACK_BEST=()
pack_run() {
  local name=$1 s
  shift
  sync
  s=$(timed "$name" "$@") || return 0  # a failed run changes nothing (a writer with no good run: an "error" row)
  if [ -z "${PACK_BEST[$name]:-}" ] || awk -v a="$s" -v b="${PACK_BEST[$name]}" 'BEGIN {exit !(a < b)}'; then
    PACK_BEST[$name]=$s
  fi
}
# pack_image NAME IMAGE ARGS... : one timed `fanstore pack` into IMAGE. The image of the first round is moved aside
# first (pack refuses an existing image) and removed after a good run, both outside the timing, as tar's output is.
pack_image() {
  local name=$1 img=$2
  shift 2
  [ $HAVE_PACK = 1 ] || return 0
  rm -rf "$img.prev"
  [ -e "$img" ] && mv "$img" "$img.prev"
  pack_run "$name" "$FANSTORE" pack "$SRC" -o "$img" "$@"
  if [ -e "$img" ]; then rm -rf "$img.prev"; elif [ -e "$img.prev" ]; then mv "$img.prev" "$img"; fi
}
pack_step() {
  case $1 in
    pack-zstd) pack_image pack-zstd "$IMG_ZSTD" --threads 2 ;;
    pack-raw) pack_image pack-raw "$IMG_RAW" --level 0 --threads 2 ;;
    tar-zstd)
      pack_run tar-zstd bash -c "set -o pipefail; tar cf - -C '$TMPFS' src | zstd -T2 -3 -q -f -o '$DISK/src.tar.zst'"
      rm -f "$DISK/src.tar.zst" ;;
    tar)
      pack_run tar bash -c "tar cf '$DISK/src.tar' -C '$TMPFS' src"
      rm -f "$DISK/src.tar" ;;
  esac
  return 0
}
for step in pack-zstd tar-zstd pack-raw tar tar pack-raw tar-zstd pack-zstd; do pack_step "$step"; done
if [ $HAVE_PACK = 1 ]; then
  [ -n "${PACK_BEST[pack-zstd]:-}" ] && HAVE_ZSTD=1
  [ -n "${PACK_BEST[pack-raw]:-}" ] && HAVE_RAW=1
  record_pack zstd fanstore-pack pack-zstd "${PACK_BEST[pack-zstd]:-}"
  record_pack "raw (--level 0)" fanstore-pack pack-raw "${PACK_BEST[pack-raw]:-}"
else
  for c in "zstd: MB/s" "zstd: files/s" "raw (--level 0): MB/s" "raw (--level 0): files/s"; do
    record pack "$c" fanstore-pack "${c##* }" higher "$NA_PACK"
  done
fi
record_pack zstd tar-zstd tar-zstd "${PACK_BEST[tar-zstd]:-}"
record_pack "raw (--level 0)" tar tar "${PACK_BEST[tar]:-}"
sync

# --- how each system is reached ---------------------------------------------------------------------------------
# with_system SYSTEM CMD... : runs CMD with ROOT exported as where the tree appears for SYSTEM.
# Returns 3 (and prints the reason on stdout) when SYSTEM is not available.
FUSE_OK=0
if [ $HAVE_MOUNT = 1 ] && [ $HAVE_RAW = 1 ]; then
  mkdir -p "$FUSE_MNT"
  if timeout 30 "$FANSTORE" mount --image "$IMG_RAW" "$FUSE_MNT" >"$LOGS/mount.log" 2>&1 && mountpoint -q "$FUSE_MNT"; then
    FUSE_OK=1
  fi
fi
unavailable() {  # prints why SYSTEM cannot be measured, or nothing
  case "$1" in
    fanstore-raw|fanstore|fanstore-local)
      [ $HAVE_RUN = 1 ] || { echo "$NA_RUN"; return; }
      [ $HAVE_RAW = 1 ] || echo "n/a (no raw image: $([ $HAVE_PACK = 1 ] && echo 'see logs/pack-raw.log' || echo 'fanstore pack not built'))" ;;
    fanstore-zstd)
      [ $HAVE_RUN = 1 ] || { echo "$NA_RUN"; return; }
      [ $HAVE_ZSTD = 1 ] || echo "n/a (no zstd image: $([ $HAVE_PACK = 1 ] && echo 'see logs/pack-zstd.log' || echo 'fanstore pack not built'))" ;;
    fuse)
      [ $HAVE_MOUNT = 1 ] || { echo "$NA_MOUNT"; return; }
      [ $FUSE_OK = 1 ] || echo "n/a (fanstore mount failed: logs/mount.log)" ;;
  esac
}
root_of() {
  case "$1" in
    tmpfs) echo "$SRC" ;;
    disk) echo "$DSRC" ;;
    fuse) echo "$FUSE_MNT" ;;
    *) echo "$MOUNT" ;;
  esac
}
runner_of() {  # the command prefix that puts the tree at root_of SYSTEM
  case "$1" in
    fanstore-raw|fanstore|fanstore-local) echo "$FANSTORE run --image $IMG_RAW --mount $MOUNT --" ;;
    fanstore-zstd) echo "$FANSTORE run --image $IMG_ZSTD --mount $MOUNT --" ;;
    *) echo "" ;;
  esac
}
# measure SYSTEM LOGNAME CMD... : prints CMD's last output line, or "error (logs/LOGNAME.log)".
measure() {
  local sys=$1 name=$2; shift 2
  local out
  # shellcheck disable=SC2046
  if out=$(timeout "$STEP_TIMEOUT" $(runner_of "$sys") "$@" 2>"$LOGS/$name.log"); then
    echo "$out" >>"$LOGS/$name.log"
    echo "$out" | tail -1
  else
    echo "$out" >>"$LOGS/$name.log"
    echo "error (logs/$name.log)"
  fi
}
is_error() { [[ $1 == error* ]]; }
# warm SYSTEM SUBDIR : pulls what SYSTEM will read into the page cache, so that the one-epoch runs (loader, DLIO),
# which have no warm-up pass of their own, compare software paths rather than whatever memory pressure evicted.
warm() {
  case "$1" in
    disk) find "$DSRC/$2" -type f -exec cat {} + >/dev/null ;;
    fanstore|fanstore-raw|fuse) cat "$IMG_RAW"/* >/dev/null 2>&1 || true ;;
  esac
}

# --- micro: metadata and small-file ops -------------------------------------------------------------------------
log "micro: stat/open/read/readdir/seqread through FanStore, FUSE, tmpfs, disk"
note micro "Per-op wall time of one thread. Warm page cache throughout: caches cannot be dropped here, so the disk copy is read from memory. Rows without 'first read': one warm-up pass, then repeated passes (FanStore then serves compressed files from its decoded-chunk caches, this process's or the node's, and raw ones from the partition's page cache, verified again; the baselines from the kernel page cache). 'first read': one pass by a fresh process, each file read once (FanStore decodes from its partition file, itself in the page cache). Files: 10,000 x 4 KiB in one directory, $(wc -l <"$LISTS/f128k.txt") x 128 KiB, one $BIG_MIB MiB file; contents ~2:1 compressible. FanStore images live on the local disk; 'raw' is --level 0."
# case|op|path|list|unit|passes. passes "warm": a warm-up pass, then whole passes for MIN_TIME (steady state:
# the baselines hit the kernel page cache, FanStore its decoded-chunk caches or the partition's page cache);
# "first": one pass, no warm-up, each file read once by a fresh process (FanStore decodes from the partition,
# which is in the page cache; for tmpfs/disk this is the same page-cache read as "warm").
MICRO_CASES=(
  "stat|stat|micro/d10k|d10k.txt|ns/op|warm"
  "open+close|open|micro/d10k|d10k.txt|ns/op|warm"
  "open+read+close 4 KiB|read|micro/d10k|d10k.txt|ns/op|warm"
  "open+read+close 4 KiB, first read|read|micro/d10k|d10k.txt|ns/op|first"
  "open+read+close 128 KiB|read|micro/f128k|f128k.txt|ns/op|warm"
  "open+read+close 128 KiB, first read|read|micro/f128k|f128k.txt|ns/op|first"
  "readdir 10,000 entries|readdir|micro/d10k||us/listing|warm"
  "sequential read $BIG_MIB MiB|seqread|micro/big.bin||MiB/s|warm"
)
for sys in fanstore-raw fanstore-zstd fuse tmpfs disk; do
  why=$(unavailable "$sys")
  for c in "${MICRO_CASES[@]}"; do
    IFS='|' read -r case op path list unit passes <<<"$c"
    better=lower; [ "$unit" = MiB/s ] && better=higher
    if [ -n "$why" ]; then record micro "$case" "$sys" "$unit" "$better" "$why"; continue; fi
    args=(--op "$op" --path "$(root_of "$sys")/$path" --label "$sys")
    if [ "$passes" = first ]; then args+=(--warmup 0 --min-time 0); else args+=(--min-time "$MIN_TIME"); fi
    [ -n "$list" ] && args+=(--list "$LISTS/$list")
    line=$(measure "$sys" "micro-$sys-$op-${path##*/}-$passes" "$IOBENCH" "${args[@]}")
    if is_error "$line"; then record micro "$case" "$sys" "$unit" "$better" "$line"; continue; fi
    case "$unit" in
      MiB/s) v=$(field "$line" 8) ;;
      us/listing) v=$(awk -v n="$(field "$line" 6)" 'BEGIN {printf "%.1f", n / 1000}') ;;
      *) v=$(field "$line" 6) ;;
    esac
    record micro "$case" "$sys" "$unit" "$better" "$v"
  done
done

# --- loader: torchvision ImageFolder + DataLoader epoch ----------------------------------------------------------
NIMG=$(find "$SRC/imagenet/train" -type f | wc -l)
log "loader: DataLoader epoch over $NIMG files"
LOADER_MODES=(bytes)
[ $QUICK = 0 ] && LOADER_MODES+=(decode)
note loader "$NIMG files of 100-120 KB (a real 128x96 JPEG padded with random bytes to ImageNet's mean size), batch 64, shuffle, num_workers=2, $PY. 'bytes': each worker reads the whole file (the I/O path); 'decode': PIL decode + ToTensor as well (full run only). The directory scan is not timed; worker start-up is. The page cache is warmed (cat) before each run."
for sys in fanstore fuse tmpfs disk; do
  why=$(unavailable "$sys")
  for m in "${LOADER_MODES[@]}"; do
    case_name="epoch, $m"
    if [ -n "$why" ]; then record loader "$case_name" "$sys" files/s higher "$why"; continue; fi
    warm "$sys" imagenet
    line=$(measure "$sys" "loader-$sys-$m" $PY "$HELPERS/loader_epoch.py" --root "$(root_of "$sys")/imagenet/train" \
      --mode "$m" --label "$sys")
    if is_error "$line"; then record loader "$case_name" "$sys" files/s higher "$line"; else
      record loader "$case_name" "$sys" files/s higher "$(field "$line" 5)"; fi
  done
done

# --- dlio: MLPerf Storage workloads, DLIO-style ------------------------------------------------------------------
# workload|batch|read_threads|compute s/batch. Compute is DLIO's A100 computation_time; unet3d's is scaled by
# the sample-size ratio (32 MiB / 146.6 MB) so that the I/O-to-compute balance of the real workload is kept.
log "dlio: unet3d, resnet50, cosmoflow"
UNET_MIB=$(( $(stat -c %s "$SRC/dlio/unet3d/$(head -1 "$LISTS/unet3d.txt")") >> 20 ))
UNET_COMPUTE=$(awk -v m="$UNET_MIB" 'BEGIN {printf "%.4f", 0.636 * m * 1048576 / 146600628}')
DLIO_CASES=(
  "unet3d|7|4|$UNET_COMPUTE"
  "resnet50|400|8|0.435"
  "cosmoflow|1|4|0.00551"
)
note dlio "Samples: unet3d $(wc -l <"$LISTS/unet3d.txt") x $UNET_MIB MiB (MLPerf: ~140 MiB; scaled down to fit memory), resnet50 $(wc -l <"$LISTS/resnet50.txt") x 114,660 B, cosmoflow $(wc -l <"$LISTS/cosmoflow.txt") x 2,828,486 B, one file per sample, seeded shuffle, one epoch, 2 batches prefetched per reader thread, page cache warmed (cat) before each run. 'no compute' = pure I/O rate; 'AU' = emulated compute / wall time with DLIO's A100 computation_time per batch (unet3d's scaled by sample size to $UNET_COMPUTE s); MLPerf requires AU >= 90% (unet3d, resnet50) / 70% (cosmoflow). Few batches: pipeline fill weighs more than in a real run."
for sys in fanstore fuse tmpfs disk; do
  why=$(unavailable "$sys")
  for c in "${DLIO_CASES[@]}"; do
    IFS='|' read -r wl batch threads compute <<<"$c"
    for comp in 0 "$compute"; do
      if [ "$comp" = 0 ]; then case_name="$wl (batch $batch), no compute"; unit=samples/s
      else case_name="$wl (batch $batch), compute $comp s/batch"; unit="% AU"; fi
      if [ -n "$why" ]; then record dlio "$case_name" "$sys" "$unit" higher "$why"; continue; fi
      warm "$sys" "dlio/$wl"
      line=$(measure "$sys" "dlio-$sys-$wl-$comp" "$DLIO" --path "$(root_of "$sys")/dlio/$wl" \
        --list "$LISTS/$wl.txt" --batch "$batch" --threads "$threads" --compute "$comp" --label "$sys")
      if is_error "$line"; then record dlio "$case_name" "$sys" "$unit" higher "$line"; continue; fi
      if [ "$comp" = 0 ]; then v=$(field "$line" 5); else v=$(field "$line" 7); fi
      record dlio "$case_name" "$sys" "$unit" higher "$v"
    done
  done
done

# --- remote: daemons vs MPI ping-pong (shared memory and TCP), prefetch epochs, idle CPU, a dead peer -------------
# shellcheck source=scripts/bench/remote.sh
source "$HELPERS/remote.sh"
remote_rows

# --- trainer: fanstore-train vs PyTorch --------------------------------------------------------------------------
# Its own script (scripts/bench/trainer.sh, runnable alone); about 2 minutes on 2 cores, ~1 with --quick.
log "trainer: fanstore-train vs PyTorch"
BUILD_DIR=$BUILD_DIR bash "$HELPERS/trainer.sh" "$OUT" $([ $QUICK = 1 ] && echo --quick) || log "trainer: failed (see $LOGS/train-*.log)"

# --- microbench: fanstore-microbench (Google Benchmark): the core's and the interposer's hot paths ---------------
microbench_section() {
  local mb=$BUILD_DIR/bin/fanstore-microbench line
  log "microbench: core lookup/decode/checksum in process, interposer stat/open/read under fanstore run"
  note microbench "Google Benchmark wall time (real_time) of one thread, the median of 3 repetitions of at least $MIN_TIME s each; each row names the FanStore path, then after 'vs' the baseline measured in the same run by the same binary. Core rows call the public Image/Client API in process on an image packed from a tree on tmpfs; interposer rows run the binary again under \`fanstore run\` (after the first pass its decoded-file cache holds every file); tmpfs rows run without the preload. Files: 2,000 x 4 KiB and 64 x 128 KiB text (~3:1 zstd), 64 x 128 KiB random (stored raw), one 4 MiB text file. Log: logs/microbench.log."
  local rows=()
  if [ ! -x "$mb" ]; then
    mapfile -t rows < <($PY "$HELPERS/microbench_rows.py" --missing "n/a (fanstore-microbench not built)" x)
  elif timeout "$STEP_TIMEOUT" "$mb" --dir "$TMPFS/microbench" --json "$OUT/microbench" \
         --benchmark_min_time="$MIN_TIME" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
         >"$LOGS/microbench.log" 2>&1; then
    mapfile -t rows < <($PY "$HELPERS/microbench_rows.py" "$OUT/microbench")
  else
    mapfile -t rows < <($PY "$HELPERS/microbench_rows.py" --missing "error (logs/microbench.log)" x)
  fi
  for line in "${rows[@]}"; do
    IFS=$'\t' read -r case sys unit better v <<<"$line"
    record microbench "$case" "$sys" "$unit" "$better" "$v"
  done
  rm -rf "$TMPFS/microbench"
}
microbench_section

# --- asyncio: fio's engines and a static program through `fanstore run` (interpose) ------------------------------
asyncio_section() {
  local sys why eng depth line case_name t0 t1 out
  log "asyncio: fio engines and a static program through fanstore run vs tmpfs"
  local FIO_SECONDS; FIO_SECONDS=$([ $QUICK = 1 ] && echo 1 || echo 3)
  note asyncio "fio --rw=randread --bs=4k on the $BIG_MIB MiB file for ${FIO_SECONDS} s per engine (iodepth 16 for libaio, io_uring, posixaio). Through fanstore run, psync/pvsync2 are served from user space; the kernel-async engines and mmap read a memfd the file was materialized into once (not timed). 'static program': wall time of busybox (statically linked) md5sum of the file, which fanstore run serves through a FUSE mount in a private mount namespace (set-up included)."
  for sys in fanstore-raw fanstore-zstd tmpfs; do
    why=$(unavailable "$sys")
    for eng in psync pvsync2 libaio io_uring posixaio mmap; do
      case_name="fio randread 4 KiB, $eng"
      if [ -n "$why" ] || ! command -v fio >/dev/null; then
        record asyncio "$case_name" "$sys" IOPS higher "${why:-n/a (fio not installed)}"
        continue
      fi
      depth=1
      case $eng in libaio|io_uring|posixaio) depth=16 ;; esac
      line=$(measure "$sys" "asyncio-$sys-$eng" fio --name=b --filename="$(root_of "$sys")/micro/big.bin" --readonly \
             --rw=randread --bs=4k --ioengine="$eng" --iodepth=$depth --time_based --runtime="$FIO_SECONDS" \
             --output-format=terse --terse-version=3)
      if is_error "$line" || [ "$(echo "$line" | cut -d';' -f5)" != 0 ]; then
        record asyncio "$case_name" "$sys" IOPS higher "error (logs/asyncio-$sys-$eng.log)"
      else
        record asyncio "$case_name" "$sys" IOPS higher "$(echo "$line" | cut -d';' -f8)"
      fi
    done
    case_name="static program (busybox md5sum $BIG_MIB MiB)"
    if [ -n "$why" ] || ! command -v busybox >/dev/null; then
      record asyncio "$case_name" "$sys" s lower "${why:-n/a (busybox not installed)}"
      continue
    fi
    t0=$(date +%s.%N)
    out=$(measure "$sys" "asyncio-$sys-busybox" busybox md5sum "$(root_of "$sys")/micro/big.bin")
    t1=$(date +%s.%N)
    if is_error "$out"; then record asyncio "$case_name" "$sys" s lower "$out"; continue; fi
    record asyncio "$case_name" "$sys" s lower "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')"
  done
}
asyncio_section

# --- largefile: large files and big indexes (reads decode only the chunks they touch; one decoded copy per node) --
# Own data, kept apart from the shared tree so the other sections' rows do not move: a compressible file (base64 of
# random bytes, ~1.33:1) and an incompressible one, a 128 MiB file to map, and a synthetic index of many files.
# Every value is the median of 3 interleaved runs; each FanStore run gets a fresh node chunk cache (its own root).
bench_largefile() {
  local LSRC=$TMPFS/large-src LDISK=$DISK/large LF=$BIN/fanstore-largefile
  local SEQ_MIB=1024 HEAD_MIB=4096 NFILES=10000000
  if [ $QUICK = 1 ]; then SEQ_MIB=256 HEAD_MIB=1024 NFILES=1000000; fi
  local why=""
  [ $HAVE_RUN = 1 ] || why=$NA_RUN
  [ -x "$LF" ] || why="n/a (fanstore-largefile not built)"
  local SYNTH=$BUILD_DIR/bin/synth_index
  local cases=("head -c 16, $((HEAD_MIB / 1024)) GiB zstd file: ms|ms|lower" "head -c 16: peak RSS|MiB|lower"
               "random 4 KiB preads, $SEQ_MIB MiB zstd file|ns/op|lower" "sequential read, $SEQ_MIB MiB|MiB/s|higher"
               "4 processes mapping one 128 MiB file: memory|MiB|lower"
               "fresh process: index open + first stat, $((NFILES / 1000000))M files|ms|lower"
               "serving a raw file from the page cache, per pass|ms/GiB|lower")
  if [ -n "$why" ]; then
    for c in "${cases[@]}"; do IFS='|' read -r name unit better <<<"$c"; record largefile "$name" fanstore-zstd "$unit" "$better" "$why"; done
    return
  fi
  mkdir -p "$LSRC" "$LDISK/head-src"
  log "largefile: generating $SEQ_MIB MiB + $HEAD_MIB MiB + 128 MiB and a $NFILES-file index"
  head -c $((SEQ_MIB * 3 / 4 << 20)) /dev/urandom | base64 -w 100 >"$LSRC/seq.txt"  # ~SEQ_MIB MiB
  head -c $((SEQ_MIB << 20)) /dev/urandom >"$LSRC/seq.bin"
  head -c $((96 << 20)) /dev/urandom | base64 -w 100 >"$LSRC/map.txt"  # ~128 MiB
  head -c $((HEAD_MIB * 3 / 4 << 20)) /dev/urandom | base64 -w 100 >"$LDISK/head-src/huge.txt"
  "$FANSTORE" pack "$LSRC" -o "$LDISK/img-zstd" --threads 2 >"$LOGS/large-pack-zstd.log" 2>&1 &&
    "$FANSTORE" pack "$LSRC" -o "$LDISK/img-raw" --level 0 --threads 2 >"$LOGS/large-pack-raw.log" 2>&1 &&
    "$FANSTORE" pack "$LDISK/head-src" -o "$LDISK/img-head" --threads 2 >"$LOGS/large-pack-head.log" 2>&1 ||
    { record largefile "${cases[0]%%|*}" fanstore-zstd ms lower "error (logs/large-pack-*.log)"; return; }
  rm -rf "$LDISK/head-src"
  zstd -q -3 -T2 "$LSRC/seq.txt" -o "$LDISK/seq.txt.zst"
  [ -x "$SYNTH" ] && "$SYNTH" "$NFILES" "$LDISK/img-index" >"$LOGS/large-synth.log" 2>&1
  cat "$LDISK"/img-*/* "$LDISK/seq.txt.zst" >/dev/null 2>&1
  local n=0
  # fs IMAGE CMD...: CMD under fanstore run with a node chunk cache of its own (no run shares it: cold each time).
  fs() {
    local img=$1; shift
    n=$((n + 1)); mkdir -p "$TMPFS/nc-$n"
    FANSTORE_NODE_CACHE=$TMPFS/nc-$n timeout "$STEP_TIMEOUT" "$FANSTORE" run --image "$img" --mount "$MOUNT" -- "$@"
  }
  med() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "error"}'; }
  local t_head=() r_head=() d_head=() dr_head=() z_pr=() t_pr=() z_seq=() r_seq=() t_seq=() c_seq=() z_map=() t_map=()
  local z_stat=() u_stat=() t_stat=() v_ver=() v_map=() v_plain=() line
  for rep in 1 2 3; do
    line=$(fs "$LDISK/img-head" "$LF" --mode head --path "$MOUNT/huge.txt" --block 16) && {
      t_head+=("$(field "$line" 3)"); r_head+=("$(awk -v k="$(field "$line" 5)" 'BEGIN {printf "%.1f", k / 1024}')"); }
    line=$("$LF" --mode head --path "$LSRC/seq.txt" --block 16) && {
      d_head+=("$(field "$line" 3)"); dr_head+=("$(awk -v k="$(field "$line" 5)" 'BEGIN {printf "%.1f", k / 1024}')"); }
    line=$(fs "$LDISK/img-zstd" "$LF" --mode pread --path "$MOUNT/seq.txt" --ops 50000) && z_pr+=("$(field "$line" 3)")
    line=$("$LF" --mode pread --path "$LSRC/seq.txt" --ops 50000) && t_pr+=("$(field "$line" 3)")
    line=$(fs "$LDISK/img-zstd" "$LF" --mode seq --path "$MOUNT/seq.txt" --block 1048576) && z_seq+=("$(field "$line" 3)")
    line=$(fs "$LDISK/img-raw" "$LF" --mode seq --path "$MOUNT/seq.bin" --block 1048576) && r_seq+=("$(field "$line" 3)")
    line=$("$LF" --mode seq --path "$LSRC/seq.bin" --block 1048576) && t_seq+=("$(field "$line" 3)")
    local s; s=$(timed zstd-d zstd -d -T0 -c "$LDISK/seq.txt.zst" -o /dev/null -f) && c_seq+=("$(rate "$SEQ_MIB" "$s")")
    local base mapped
    base=$(fs "$LDISK/img-zstd" "$LF" --mode map-baseline --path "$MOUNT/map.txt") &&
      mapped=$(fs "$LDISK/img-zstd" "$LF" --mode map --path "$MOUNT/map.txt") &&
      z_map+=("$(awk -v a="$(field "$mapped" 3)" -v b="$(field "$base" 3)" 'BEGIN {printf "%.1f", a - b}')")
    base=$("$LF" --mode map-baseline --path "$LSRC/map.txt") && mapped=$("$LF" --mode map --path "$LSRC/map.txt") &&
      t_map+=("$(awk -v a="$(field "$mapped" 3)" -v b="$(field "$base" 3)" 'BEGIN {printf "%.1f", a - b}')")
    if [ -d "$LDISK/img-index" ]; then
      line=$(FANSTORE_NODE_CACHE=off "$FANSTORE" run --image "$LDISK/img-index" --mount "$MOUNT" -- \
        "$LF" --mode fresh-stat --path "$MOUNT/d0000123/f0123456") && z_stat+=("$(field "$line" 3)")
      line=$(FANSTORE_NODE_CACHE=off "$FANSTORE" run --image "$LDISK/img-index" --mount "$MOUNT" -- env FANSTORE_INDEX_TRUST= \
        "$LF" --mode fresh-stat --path "$MOUNT/d0000123/f0123456") && u_stat+=("$(field "$line" 3)")
      line=$("$LF" --mode fresh-stat --path "$LSRC/seq.txt") && t_stat+=("$(field "$line" 3)")
    fi
    line=$("$LF" --mode verify-cost --path "$LSRC/seq.bin" --block 1048576) &&
      { v_map+=("$(field "$line" 5)"); v_ver+=("$(field "$line" 7)"); v_plain+=("$(field "$line" 9)"); }
    rm -rf "$TMPFS"/nc-*
  done
  local m
  rec() {  # rec CASE SYSTEM UNIT BETTER VALUES...
    local c=$1 sys=$2 unit=$3 better=$4; shift 4
    m=$(printf '%s\n' "$@" | grep -v '^$' | med)
    record largefile "$c" "$sys" "$unit" "$better" "$m"
  }
  IFS='|' read -r c0 _ _ <<<"${cases[0]}"; IFS='|' read -r c1 _ _ <<<"${cases[1]}"; IFS='|' read -r c2 _ _ <<<"${cases[2]}"
  IFS='|' read -r c3 _ _ <<<"${cases[3]}"; IFS='|' read -r c4 _ _ <<<"${cases[4]}"; IFS='|' read -r c5 _ _ <<<"${cases[5]}"
  IFS='|' read -r c6 _ _ <<<"${cases[6]}"
  rec "$c0" fanstore-zstd ms lower "${t_head[@]}"; rec "$c0" tmpfs ms lower "${d_head[@]}"
  rec "$c1" fanstore-zstd MiB lower "${r_head[@]}"; rec "$c1" tmpfs MiB lower "${dr_head[@]}"
  rec "$c2" fanstore-zstd ns/op lower "${z_pr[@]}"; rec "$c2" tmpfs ns/op lower "${t_pr[@]}"
  rec "$c3" fanstore-zstd MiB/s higher "${z_seq[@]}"; rec "$c3" fanstore-raw MiB/s higher "${r_seq[@]}"
  rec "$c3" tmpfs MiB/s higher "${t_seq[@]}"; rec "$c3" zstd-cli MiB/s higher "${c_seq[@]}"
  rec "$c4" fanstore-zstd MiB lower "${z_map[@]}"; rec "$c4" tmpfs MiB lower "${t_map[@]}"
  if [ ${#z_stat[@]} -gt 0 ]; then
    rec "$c5" fanstore-zstd ms lower "${z_stat[@]}"; rec "$c5" fanstore-untrusted ms lower "${u_stat[@]}"
    rec "$c5" tmpfs ms lower "${t_stat[@]}"
  else
    record largefile "$c5" fanstore-zstd ms lower "n/a (synth_index not built)"
  fi
  rec "$c6" fanstore-raw ms/GiB lower "${v_ver[@]}"; rec "$c6" tmpfs ms/GiB lower "${v_plain[@]}"
  rec "$c6" mapped-v1 ms/GiB lower "${v_map[@]}"
  note largefile "Own data: a ${SEQ_MIB} MiB compressible file (base64 of random bytes, zstd ~1.33:1) and a ${SEQ_MIB} MiB incompressible one on tmpfs, images on the local disk, chunks of 1 MiB; the head file is ${HEAD_MIB} MiB. Median of 3 interleaved runs; every FanStore run starts with an empty node chunk cache of its own. 'head': open + read(16) + close in the reading process, and its peak RSS. 'preads': random 4 KiB preads of one open file, second pass timed (the first decodes; the second reads this process's chunks or the node chunk cache's). 'sequential': one process, read(2) of 1 MiB; zstd -d -T0 decodes the same data (zstd -3) to /dev/null. 'mapping': 4 processes each mmap and touch the whole file; total PSS minus that of 4 identical processes mapping nothing (FanStore: the node chunk cache holds one shared copy; tmpfs: the page cache). 'fresh process': exec of a process whose first call is stat(), ms until it answers: with the trust token fanstore run hands down, with the index re-hashed (FANSTORE_INDEX_TRUST unset), and a stat on tmpfs; synthetic index of $NFILES empty files. 'serving a raw file': the per-pass cost of the safe way (pread into the reader's buffer + XXH3 of every chunk, every time: 'FanStore raw'), of a plain pread ('tmpfs' column) and of format 1's way (map the partition range, verify once, then memcpy from the mapping: SIGBUS when truncated, unverified bytes after an in-place change), over the same page-cached file."
  rm -rf "$LSRC" "$LDISK"
}
log "largefile: head, preads, sequential, mapping, index start-up"
bench_largefile

# --- gpu: fanstore-train on one CUDA device (bf16, channels-last) vs its goals per H100 ----------------------------
gpu_section() {
  # model|batch|input size|goal samples/s (ResNet-50 above the PyTorch A100 AMP reference of 2,470 img/s; CosmoFlow at
  # the MLPerf HPC v3.0 level per H100; 3D U-Net at 128^3).
  local cases=("resnet50|256|224|3000" "cosmoflow|8|128|185" "unet3d|2|128|50") iters=20 probe
  note gpu "One CUDA device, --precision bf16 (fp32 master weights), synthetic inputs, $iters timed training steps after 1 warm-up (cuDNN's algorithm search happens there). Goals per H100: docs/gpu.md."
  probe=$("$TRAIN" --model cosmoflow --benchmark 1 --batch 1 --input-size 32 --device cuda 2>&1 >/dev/null | tail -1) || true
  if [ $HAVE_TRAIN = 0 ] || echo "$probe" | grep -q "no CUDA device\|without the CUDA backend"; then
    # The goals, and one row saying why nothing was measured (the probe's own line is in the log).
    local why="not run: no CUDA device"
    [ $HAVE_TRAIN = 0 ] && why=$NA_TRAIN
    log "gpu: $why${probe:+ ($probe)}; only the goals are printed"
    echo "bench.sh --gpu: no CUDA device here; the GPU section prints the goals only" >&2
    for c in "${cases[@]}"; do
      IFS='|' read -r model batch size goal <<<"$c"
      record gpu "$model train (batch $batch, $size, bf16)" goal samples/s higher "$goal"
    done
    record gpu "all models" fanstore-train-gpu samples/s higher "$why"
    return
  fi
  log "gpu: ${cases[*]}"
  for c in "${cases[@]}"; do
    IFS='|' read -r model batch size goal <<<"$c"
    local out v
    out=$(timeout "$STEP_TIMEOUT" "$TRAIN" --model "$model" --benchmark $iters --batch "$batch" --input-size "$size" \
      --device cuda --precision bf16 2>&1) || out="FAILED: $out"
    echo "$out" >"$LOGS/gpu-$model.log"
    v=$(echo "$out" | grep -oE "train: *[0-9]+(\.[0-9]+)? *samples/s" | head -1 | grep -oE '[0-9]+(\.[0-9]+)?' | head -1 || true)
    record gpu "$model train (batch $batch, $size, bf16)" fanstore-train-gpu samples/s higher "${v:-error (logs/gpu-$model.log)}"
    record gpu "$model train (batch $batch, $size, bf16)" goal samples/s higher "$goal"
  done
}
[ $GPU = 1 ] && gpu_section

# own_script_section NAME "WHAT" SCRIPT [FAILURE HINT]: a section with a script of its own, unless BENCH_SKIP names it.
own_script_section() {
  if [[ " ${BENCH_SKIP:-} " == *" $1 "* ]]; then log "$1: skipped (BENCH_SKIP)"; return; fi
  log "$1: $2"
  BUILD_DIR=$BUILD_DIR IOBENCH=$IOBENCH bash "$HELPERS/$3" "$OUT" $([ $QUICK = 1 ] && echo --quick) || log "$1: failed${4:-}"
}

# --- spatial: CosmoFlow on sample x spatial grids (memory, a memory cap, scaling, the model) -------------------------
# Its own script (scripts/bench/spatial.sh, runnable alone); about 15 minutes on 2 cores, ~3 with --quick.
own_script_section spatial "CosmoFlow on sample x spatial grids" spatial.sh " (see $LOGS/spatial-*.log)"

# --- remote-cost: wall and CPU per 1,000 remote files, each daemon mechanism on and off ----------------------------
# Its own script (scripts/bench/remote_cost.sh, runnable alone; TCP rows need root); about 6 minutes on 2 cores.
own_script_section remote-cost "CPU of remote reads, mechanisms on and off" remote_cost.sh

# --- staging: 4 namespace nodes, an sshfs shared file system, tc-capped links -------------------------------------
# Its own script (scripts/bench/staging.sh, runnable alone; needs root); about 2 minutes on 2 cores.
own_script_section staging "4 nodes staging from an sshfs image directory" staging.sh

# --- env: a Python environment from an image (16 x import torch; pack time and size vs mksquashfs) ------------------
# Its own script (scripts/bench/env.sh, runnable alone); about 5 minutes on 2 cores, ~2 with --quick.
own_script_section env "a Python environment from an image" env.sh

# --- ltfb: tournament training, samples and time to a target for 1, 2 and 4 trainers ----------------------------------
# Its own script (scripts/bench/ltfb.sh, runnable alone); about 12 minutes on 2 cores, ~4 with --quick (CosmoFlow only).
own_script_section ltfb "tournament training to a target score" ltfb.sh " (see $LOGS/ltfb-*.log)"

# --- report -----------------------------------------------------------------------------------------------------
ELAPSED=$(($(date +%s) - START))
# The build directory relative to the repository (a machine's absolute path does not belong in the docs).
BUILD_SHOWN=${BUILD_DIR#"$REPO"/}
tables=$($PY "$HELPERS/report.py" --dir "$OUT")
{
  echo "## FanStore benchmark results ($MODE run, $(date -u '+%Y-%m-%d %H:%M UTC'), ${ELAPSED} s)"
  echo
  cat "$OUT/machine.md"
  echo
  echo "Build: \`$BUILD_SHOWN\`, git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' + uncommitted changes'). Every ratio compares two columns measured in this run; > 1x means the first-named side is faster."
  echo
  echo "$tables"
} >"$OUT/results.md"
cat "$OUT/results.md"
if [ $UPDATE_DOC = 1 ]; then $PY "$HELPERS/update_doc.py" "$OUT/results.md" "$REPO/docs/performance.md"; fi
log "done in ${ELAPSED} s: $OUT/results.md, results.csv, *.png, logs/"
