#!/usr/bin/env bash
# The software-environment rows of the benchmark (docs/interpose.md, "Shared libraries from the image"): a copy of
# the system's torch and numpy packages served four ways, 16 processes running `python3 -c "import torch"` at
# once, against the same tree on the local disk; pack time and image size against mksquashfs; the metadata calls
# that reach the kernel for paths of the image (strace).
# Usage: scripts/bench/env.sh OUT_DIR [--quick]     (bench.sh runs it; it can also run alone)
# Appends rows to OUT_DIR/raw.csv and notes to OUT_DIR/notes.tsv. Env: BUILD_DIR, BENCH_DISK (data there).
set -euo pipefail
# shellcheck source=scripts/bench/standalone.sh
source "$(dirname "$0")/standalone.sh" env "$@"
FS=$BUILD_DIR/bin/fanstore

NPROC=16 RUNS=$([ $QUICK = 1 ] && echo 1 || echo 3)
CASE="$NPROC x python3 -c 'import torch', wall"
if ! "$PY" -c 'import torch' 2>/dev/null; then
  record "$CASE" fanstore-run s lower "n/a (no torch for $PY)"
  exit 0
fi
mnts=()
cleanup() {
  for m in "${mnts[@]}"; do fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
rm -rf "$TMP" && mkdir -p "$TMP/src/py"
dist=$("$PY" -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))')
cp -a "$dist/numpy" "$dist/torch" "$TMP/src/py/"
# Debian's torch/lib links climb out of the package: point them at the system's files (links out of the image).
for l in "$TMP"/src/py/torch/lib/*; do [ -L "$l" ] && ln -sfn "$(readlink -f "$dist/torch/lib/${l##*/}")" "$l"; done
files=$(find "$TMP/src" | wc -l)
size=$(du -sm --apparent-size "$TMP/src" | cut -f1)

secs() { local t0=$1 t1=$2; "$PY" -c "print(round($t1 - $t0, 3))"; }
now() { date +%s.%N; }
t0=$(now); "$FS" pack "$TMP/src" -o "$TMP/img" --threads 2 >/dev/null; t1=$(now)
record "pack the environment ($files entries, $size MiB)" fanstore-pack s lower "$(secs "$t0" "$t1")"
record "image size" fanstore-pack MiB lower "$(du -sm "$TMP/img" | cut -f1)"
have_sq=0
if command -v mksquashfs >/dev/null; then
  t0=$(now); mksquashfs "$TMP/src" "$TMP/env.sqfs" -comp zstd -processors 2 -quiet -noappend >/dev/null; t1=$(now)
  record "pack the environment ($files entries, $size MiB)" mksquashfs s lower "$(secs "$t0" "$t1")"
  record "image size" mksquashfs MiB lower "$(du -sm "$TMP/env.sqfs" | cut -f1)"
  have_sq=1
else
  record "pack the environment ($files entries, $size MiB)" mksquashfs s lower "n/a (no mksquashfs)"
fi

# Mounts: FanStore's FUSE, squashfuse, the kernel's squashfs (root and a loop device).
mkdir -p "$TMP/m-fuse" "$TMP/m-squashfuse" "$TMP/m-squashfs"
fuse_ok=0 sqf_ok=0 sqk_ok=0
"$FS" mount -i "$TMP/img" "$TMP/m-fuse" 2>/dev/null && { fuse_ok=1; mnts+=("$TMP/m-fuse"); }
[ $have_sq = 1 ] && command -v squashfuse >/dev/null && squashfuse "$TMP/env.sqfs" "$TMP/m-squashfuse" 2>/dev/null &&
  { sqf_ok=1; mnts+=("$TMP/m-squashfuse"); }
[ $have_sq = 1 ] && mount -t squashfs -o loop,ro "$TMP/env.sqfs" "$TMP/m-squashfs" 2>/dev/null &&
  { sqk_ok=1; mnts+=("$TMP/m-squashfs"); }

# many ROOT [RUNNER...]: NPROC processes importing torch from ROOT/py at once, under RUNNER; wall seconds.
many() {
  local root=$1
  shift
  local t0 t1
  t0=$(now)
  "$@" bash -c 'for i in $(seq '"$NPROC"'); do PYTHONPATH='"$root"'/py '"$PY"' -c "import torch" & done; wait' >/dev/null 2>&1
  t1=$(now)
  secs "$t0" "$t1"
}
declare -A times
for system in disk fanstore-run fuse squashfuse squashfs; do times[$system]=""; done
for run in $(seq 0 "$RUNS"); do  # run 0 warms every page cache and the node's library copies; not recorded
  for system in disk fanstore-run fuse squashfuse squashfs; do
    case $system in
      disk) t=$(many "$TMP/src") ;;
      fanstore-run) t=$(many /fanstore "$FS" run --image "$TMP/img" --) ;;
      fuse) [ $fuse_ok = 1 ] || continue; t=$(many "$TMP/m-fuse") ;;
      squashfuse) [ $sqf_ok = 1 ] || continue; t=$(many "$TMP/m-squashfuse") ;;
      squashfs) [ $sqk_ok = 1 ] || continue; t=$(many "$TMP/m-squashfs") ;;
    esac
    [ "$run" = 0 ] || times[$system]+="$t "
  done
done
median() { printf '%s\n' $1 | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
for system in disk fanstore-run fuse squashfuse squashfs; do
  if [ -n "${times[$system]}" ]; then
    record "$CASE" "$system" s lower "$(median "${times[$system]}")"
  else
    record "$CASE" "$system" s lower "n/a (cannot mount here)"
  fi
done

# Metadata calls that reach the kernel for paths of the environment, one `import torch`: strace -f over the
# process (and the runner), counting calls whose path names the tree (disk) or the mount prefix (FanStore).
if command -v strace >/dev/null; then
  strace -f -qq -e trace=%file -o "$TMP/disk.trace" env PYTHONPATH="$TMP/src/py" "$PY" -c 'import torch' 2>/dev/null
  strace -f -qq -e trace=%file -o "$TMP/fs.trace" "$FS" run --image "$TMP/img" -- \
    env PYTHONPATH=/fanstore/py "$PY" -c 'import torch' 2>/dev/null
  record "file-system calls naming the environment's paths, one import" disk calls lower \
    "$(grep -c "\"$TMP/src/" "$TMP/disk.trace" || true)"
  record "file-system calls naming the environment's paths, one import" fanstore-run calls lower \
    "$(grep -c '"/fanstore' "$TMP/fs.trace" || true)"
fi
note "A copy of Debian's numpy and torch packages ($files entries, $size MiB; torch's lib/ links point at the system's libraries, which stay outside every image). '$CASE': $NPROC processes started together, PYTHONPATH on the environment, from the first start to the last exit; median of $RUNS interleaved runs after one warm-up run of every system (page cache warm, FanStore's library copies made), 2 shared cores. fanstore-run: one \`fanstore run --image\` hosting all $NPROC (its start-up included); FUSE: \`fanstore mount\`; squashfuse and the kernel's squashfs mount the mksquashfs image (-comp zstd, 2 processors). 'file-system calls': strace -f -e trace=%file over one import, lines naming a path of the tree (disk) or of the mount prefix (FanStore: what the interposer and the audit module answer never reaches the kernel)."
