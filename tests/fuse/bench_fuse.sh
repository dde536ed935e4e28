#!/usr/bin/env bash
# Benchmark (not a test): sequential read of a 256 MiB file and stat/walk rates over 10,000 files, on tmpfs
# (the baseline), through `fanstore mount` (cold = first access after mounting, warm = again, from the
# kernel caches) and, when libfanstore_preload.so is built, through the interposer -- all in one run.
# Usage: tests/fuse/bench_fuse.sh [BUILD_DIR]   (default: build-fuse, else build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-}
if [[ -z $build ]]; then
  for b in "$root/build-fuse" "$root/build"; do [[ -x $b/bin/fanstore ]] && build=$b && break; done
fi
cli=$build/bin/fanstore
drv=$build/bin/fuse_bench_io
[[ -x $cli && -x $drv ]] || { echo "bench_fuse: build fanstore and fuse_bench_io first (missing in '$build')" >&2; exit 1; }
preload=$build/lib/libfanstore_preload.so

work=$(mktemp -d /dev/shm/fanstore-bench-XXXXXX)
srv=""
cleanup() {
  for m in "$work/mnt" "$work/mnt2"; do mountpoint -q "$m" 2>/dev/null && fusermount3 -u "$m" || true; done
  [[ -n $srv ]] && wait "$srv" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== generating 256 MiB file + 10,000 small files on tmpfs ($work)"
mkdir -p "$work/src" "$work/mnt" "$work/mnt2"
head -c $((256 << 20)) /dev/urandom > "$work/src/big.bin"
"${FANSTORE_PYTHON:-/usr/bin/python3}" - "$work/src" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(100):
    p = os.path.join(root, "small", "d%02d" % d)
    os.makedirs(p)
    for f in range(100):
        with open(os.path.join(p, "f%05d.txt" % (d * 100 + f)), "w") as fh:
            fh.write("sample %d\n" % (d * 100 + f) * 8)
PY
echo "== packing"
"$cli" pack "$work/src" -o "$work/image" >/dev/null

mount_bg() {  # mount_bg MOUNTPOINT [extra args...]: foreground server in the background, waits until mounted
  local mp=$1; shift
  "$cli" mount -f --image "$work/image" "$@" "$mp" & srv=$!
  for _ in $(seq 200); do mountpoint -q "$mp" && return 0; sleep 0.05; done
  echo "bench_fuse: mount did not come up" >&2; exit 1
}
unmount() { fusermount3 -u "$1"; wait "$srv" || true; srv=""; }

declare -A R
run() {  # run LABEL MODE PATH [env...]: one driver call, keeps its rate
  local label=$1 mode=$2 path=$3; shift 3
  local line; line=$(env "$@" "$drv" "$mode" "$path")
  R[$label.$mode]=$(awk '{print $5}' <<<"$line")
  printf '%-22s %s\n' "$label" "$line"
}

echo "== results (mode ops bytes seconds rate)"
for m in read stat walk; do
  p=$work/src; [[ $m == read ]] && p=$work/src/big.bin
  run tmpfs "$m" "$p"
done
# cold = first access after mounting (every request reaches the server); warm = the same again, answered
# from the kernel's page/dentry/attribute caches. A cold walk needs its own fresh mount (a stat pass
# before it would warm the dentries), once with readdirplus (the default) and once without.
mount_bg "$work/mnt"
run fuse-cold read "$work/mnt/big.bin"
run fuse-cold stat "$work/mnt"
run fuse-warm read "$work/mnt/big.bin"
run fuse-warm stat "$work/mnt"
run fuse-warm walk "$work/mnt"
unmount "$work/mnt"
mount_bg "$work/mnt2"
run fuse-cold walk "$work/mnt2"
unmount "$work/mnt2"
mount_bg "$work/mnt2" -o readdirplus=no
run fuse-noplus-cold walk "$work/mnt2"
unmount "$work/mnt2"
if [[ -f $preload ]]; then
  for m in read stat walk; do
    p=/fanstore; [[ $m == read ]] && p=/fanstore/big.bin
    run interposer "$m" "$p" LD_PRELOAD="$preload" FANSTORE_IMAGE="$work/image" FANSTORE_MOUNT=/fanstore
  done
else
  echo "(interposer not measured: $preload is not built)"
fi

echo "== ratios against tmpfs (higher is better; 1.00 = as fast as tmpfs)"
for label in fuse-cold fuse-noplus-cold fuse-warm interposer; do
  for m in read stat walk; do
    v=${R[$label.$m]:-}; b=${R[tmpfs.$m]}
    [[ -n $v ]] && printf '%-12s %-5s %8.2f\n' "$label" "$m" "$(echo "$v / $b" | bc -l)"
  done
done
