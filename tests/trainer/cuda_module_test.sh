#!/usr/bin/env bash
# CPU processes map no CUDA library, and --device cuda stops with one clear line when CUDA cannot be had.
#  1. fanstore-train needs no CUDA library at start-up (readelf: NEEDED);
#  2. a CPU run (--device cpu, and --device auto on a machine without an NVIDIA driver) loads none
#     (LD_DEBUG=files names every object the loader opens, dlopen()ed ones included);
#  3. --device cuda loads the module and, without a device, says "no CUDA device" (exit 1); a copy of
#     the program without the module, with a module that does not load, or with one of another ABI
#     version says so in one line naming the path (exit 1). In a build without CUDA: "built without".
# Usage: cuda_module_test.sh FANSTORE_TRAIN CUDA_BUILT(0|1) [FAKE_MODULE (another ABI version)]
set -euo pipefail
train=$1 built=$2 fake=${3:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-cuda-module-XXXXXX")
trap 'rm -rf "$work"' EXIT
work=$(cd "$work" && pwd -P)  # /proc/self/exe is canonical: so are the paths the errors name
fail() { echo "FAIL: $*" >&2; exit 1; }
cuda_libs='libcudart|libcudnn|libcublas|libnccl|libcuda\.so|libfanstore-trainer-cuda'
bench=(--model cosmoflow --benchmark 1 --batch 1 --input-size 32 --threads 1)
module=libfanstore-trainer-cuda.so

# 1. Nothing CUDA at start-up.
needed=$(readelf -d "$train" | grep NEEDED || true)
if echo "$needed" | grep -E "$cuda_libs"; then
  fail "$(basename "$train") needs the CUDA libraries above at start-up: every CPU run pays for them"
fi
echo "ok: $(basename "$train") needs no CUDA library ($(echo "$needed" | wc -l) NEEDED entries)"

# run NAME PROGRAM ARGS...: runs it under LD_DEBUG=files; $rc, $work/NAME.err (stderr), $work/NAME.loaded (CUDA objects loaded).
run() {
  local name=$1; shift
  rc=0
  LD_DEBUG=files LD_DEBUG_OUTPUT="$work/$name.ld" "$@" > "$work/$name.out" 2> "$work/$name.err" || rc=$?
  cat "$work/$name".ld.* 2>/dev/null | grep -oE "file=[^ ]*($cuda_libs)[^ ]*" | sort -u > "$work/$name.loaded" || true
}
# error_line NAME PATTERN: exit code 1 and exactly one error line, matching PATTERN (grep -E).
error_line() {
  local name=$1 pattern=$2
  [ "$rc" = 1 ] || { cat "$work/$name.out" "$work/$name.err"; fail "$name: exit code $rc, expected 1"; }
  [ "$(grep -c 'error:' "$work/$name.err")" = 1 ] || { cat "$work/$name.err"; fail "$name: not exactly one error line"; }
  grep -qE -- "$pattern" "$work/$name.err" || { cat "$work/$name.err"; fail "$name: the error does not match: $pattern"; }
  echo "ok: $name: $(grep 'error:' "$work/$name.err")"
}

# 2. CPU runs load nothing CUDA.
devices=(cpu)
if [ -e /dev/nvidiactl ] || [ -e /proc/driver/nvidia ] || [ -e /dev/dxg ]; then
  echo "note: this machine has an NVIDIA driver: --device auto may use CUDA here, only --device cpu is checked"
else
  devices+=(auto)
fi
for d in "${devices[@]}"; do
  run "$d" "$train" "${bench[@]}" --device "$d"
  [ "$rc" = 0 ] || { cat "$work/$d.out" "$work/$d.err"; fail "--device $d: exit code $rc"; }
  grep -q "device: cpu" "$work/$d.out" || { cat "$work/$d.out"; fail "--device $d did not run on the CPU"; }
  [ ! -s "$work/$d.loaded" ] || { cat "$work/$d.loaded"; fail "--device $d loaded CUDA objects (above)"; }
  ! grep -q warning "$work/$d.err" || { cat "$work/$d.err"; fail "--device $d warned"; }
  echo "ok: --device $d ran on the CPU and loaded no CUDA library"
done

# 3. --device cuda.
if [ "$built" != 1 ]; then
  run nocuda "$train" "${bench[@]}" --device cuda
  error_line nocuda "--device cuda: this fanstore-train was built without the CUDA backend"
  exit 0
fi
run cuda "$train" "${bench[@]}" --device cuda
grep -q "$module" "$work/cuda.loaded" && grep -q libcudart "$work/cuda.loaded" ||
  { cat "$work/cuda.loaded" "$work/cuda.err"; fail "--device cuda did not load $module and libcudart (LD_DEBUG above)"; }
if [ "$rc" = 0 ]; then
  echo "ok: --device cuda ran on a CUDA device: $(grep -o 'device: .*' "$work/cuda.out")"
else
  error_line cuda "^fanstore-train: error: --device cuda: no CUDA device \(.+\); use --device cpu or --device auto$"
fi

# A copy of the program in a prefix of its own: bin/fanstore-train, and lib/ without the module.
mkdir -p "$work/prefix/bin" "$work/prefix/lib"
cp "$train" "$work/prefix/bin/fanstore-train"
copy=$work/prefix/bin/fanstore-train
# Without an NVIDIA driver a module problem is also "no CUDA device" (there is none either way), with the module's words.
nodev="(no CUDA device \(no NVIDIA driver on this machine, and )?"
run missing "$copy" "${bench[@]}" --device cuda
error_line missing "--device cuda: ${nodev}the CUDA backend module $module is not installed next to this program \(looked for $work/prefix/lib/$module.*\): install it"
run missing_auto "$copy" "${bench[@]}" --device auto
[ "$rc" = 0 ] || { cat "$work/missing_auto.err"; fail "--device auto without the module: exit code $rc"; }

echo "not a shared object" > "$work/prefix/lib/$module"
run garbage "$copy" "${bench[@]}" --device cuda
error_line garbage "--device cuda: ${nodev}cannot load the CUDA backend module $work/prefix/lib/$module: .+"

if [ -n "$fake" ]; then
  cp "$fake" "$work/prefix/lib/$module"
  run version "$copy" "${bench[@]}" --device cuda
  error_line version "--device cuda: ${nodev}the CUDA backend module $work/prefix/lib/$module has ABI version [0-9]+, this program needs [0-9]+"
fi
echo "cuda_module_test: ok"
