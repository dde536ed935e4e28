#!/bin/bash
# What scripts/gpu-check.sh and the bundle's fanstore-env compute on the host, checked without a GPU: the programs
# they call are stand-ins here (a device that exists, a conformance case that fails, a part that overruns its
# budget), so that part selection, time budgets, the summary's format and the CUDA library discovery are tested.
# Usage: gpu_check_test.sh SOURCE_ROOT
set -u
S=$1
T=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-gpucheck-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The check beside stand-ins, as in a bundle's bin/.
B=$T/b/bin
mkdir -p "$B"
cp "$S/scripts/gpu-check.sh" "$B/"
stub() { printf '#!/bin/sh\n%s\n' "$2" >"$B/$1"; chmod 755 "$B/$1"; }
stub fanstore-train '
case " $* " in
  *" --benchmark "*)
    [ -e "$(dirname "$0")/no-device" ] && { echo "fanstore-train: error: --device cuda: no CUDA device (stub); use --device cpu or --device auto" >&2; exit 1; }
    echo "train: 123.45 samples/s, inference: 200.00 samples/s, device: cuda device 0: Stub GPU (sm_90, 79 GiB), bf16, channels-last" ;;
  *) echo "summary: model x  ranks 1  grid 1,1,1,1  steps 4  time 1 s  train 55.5 samples/s (input stall 3.0%, 60 samples/s without the waits)" ;;
esac'
stub trainer_conformance '
case " $* " in
  *" bf16 "*) echo "[  FAILED  ] Conv.Backward3d (5 ms)"; echo "[  FAILED  ] 1 test, listed below:"; echo "[  FAILED  ] Conv.Backward3d"; exit 1 ;;
esac
echo "[  PASSED  ] 40 tests."'
stub gpu-smoke.sh 'exec sleep 30'
stub fanstore-datagen 'while [ $# -gt 0 ]; do [ "$1" = -o ] && mkdir -p "$2"; shift; done'
stub fanstore 'if [ "$1" = run ]; then while [ "$1" != -- ]; do shift; done; shift; exec "$@"; fi'
stub sanitizer 'echo "========= ERROR SUMMARY: 0 errors"'

# No device: one line, exit 77, a summary that says so.
: >"$B/no-device"
sh "$B/gpu-check.sh" --out "$T/none" >/dev/null 2>&1
rc=$?
rm "$B/no-device"
[ $rc -eq 77 ] || fail "no device: rc $rc"
grep -q '^gpu-check: SKIP: no CUDA device: .*no CUDA device (stub)' "$T/none/summary.md" || fail "no device: $(cat "$T/none/summary.md")"

# Parts a, c, e at 1/20 of their budgets: a names its failing case, c is cut short, e reports its figures, b and d
# do not run; exit 1.
COMPUTE_SANITIZER=$B/sanitizer FANSTORE_PYTHON=/bin/false sh "$B/gpu-check.sh" --out "$T/ace" --parts ace \
  --budget-scale 0.05 >"$T/ace.out" 2>&1
rc=$?
sum=$T/ace/summary.md
[ $rc -eq 1 ] || fail "parts ace: rc $rc: $(cat "$T/ace.out")"
head -1 "$sum" | grep -q '^# gpu-check .* on cuda device 0: Stub GPU (sm_90, 79 GiB), bf16, channels-last$' || fail "title: $(head -1 "$sum")"
grep -q '^- (a) conformance, fp32 bf16 fp16: FAIL in [0-9]* s: bf16 Conv.Backward3d (part-a.log)$' "$sum" || fail "part a: $(cat "$sum")"
grep -q '^- (c) smoke training (gpu-smoke.sh): CUT SHORT after its budget of 3 s (part-c.log)$' "$sum" || fail "part c: $(cat "$sum")"
grep -q '^- (e) training through fanstore run: ok in [0-9]* s$' "$sum" || fail "part e: $(cat "$sum")"
grep -q '^  - resnet50 through fanstore run: 55.5 samples/s, input stall 3.0%$' "$sum" || fail "part e rows: $(cat "$sum")"
grep -q '^- (b)\|^- (d)' "$sum" && fail "parts b or d ran: $(cat "$sum")"
grep -q '^gpu-check: FAILED (see above); logs in ' "$sum" || fail "last line: $(tail -1 "$sum")"
[ -s "$T/ace/part-a.log" ] && [ -s "$T/ace/a-bf16.out" ] || fail "logs missing: $(ls "$T/ace")"

# Part d without PyTorch: the rows say so; b with a clean sanitizer; all passed, exit 0.
COMPUTE_SANITIZER=$B/sanitizer FANSTORE_PYTHON=/bin/false sh "$B/gpu-check.sh" --out "$T/bd" --parts bd >/dev/null 2>&1
rc=$?
[ $rc -eq 0 ] || fail "parts bd: rc $rc: $(cat "$T/bd/summary.md")"
grep -q '^  - resnet50 224 bf16 batch 64: fanstore-train 123.45 samples/s (no PyTorch with CUDA here)$' "$T/bd/summary.md" ||
  fail "part d rows: $(cat "$T/bd/summary.md")"
grep -q '^gpu-check: all parts passed' "$T/bd/summary.md" || fail "bd last line: $(tail -1 "$T/bd/summary.md")"
sh "$B/gpu-check.sh" --parts xyz >/dev/null 2>&1
[ $? -eq 2 ] || fail "--parts xyz must be refused"

# fanstore-env: the CUDA libraries the module needs, from CUDA_HOME and from a Python environment's nvidia/*/lib,
# each with its version beside the build's; a missing one is named with how to point at it.
E=$T/bundle
mkdir -p "$E/bin" "$E/share/fanstore" "$T/cuda/lib64" "$T/site/nvidia/cudnn/lib" "$T/site/nvidia_cudnn_cu13-9.19.0.56.dist-info"
cp "$S/scripts/bundle/fanstore-env" "$E/bin/"
printf 'cuda=13.0.88\ncudnn=9.19\nnccl=2.28\nfanstore=0.1.0\nneeds=libcudart.so.13 libcudnn.so.9 libnccl.so.2 \n' \
  >"$E/share/fanstore/build-info"
: >"$T/cuda/lib64/libcudart.so.13.0.96"
ln -s libcudart.so.13.0.96 "$T/cuda/lib64/libcudart.so.13"
: >"$T/site/nvidia/cudnn/lib/libcudnn.so.9"
printf '#!/bin/sh\necho %s\n' "$T/site" >"$T/python3"
chmod 755 "$T/python3"
env -u LD_LIBRARY_PATH CUDA_HOME="$T/cuda" FANSTORE_ENV_PYTHONS="$T/python3" FANSTORE_ENV_SYSTEM_DIRS="" "$E/bin/fanstore-env" >"$T/env.out" 2>"$T/env.err"
[ $? -eq 0 ] || fail "fanstore-env failed: $(cat "$T/env.err")"
grep -q "^fanstore-env: libcudart.so.13: $T/cuda/lib64/libcudart.so.13 (13.0.96; the bundle was built with cudart 13.0.88)$" "$T/env.err" ||
  fail "cudart line: $(cat "$T/env.err")"
grep -q "^fanstore-env: libcudnn.so.9: $T/site/nvidia/cudnn/lib/libcudnn.so.9 (9.19.0.56; the bundle was built with cudnn 9.19)$" "$T/env.err" ||
  fail "cudnn line: $(cat "$T/env.err")"
grep -q "^fanstore-env: libnccl.so.2 not found (GPU runs need it, CPU runs do not): set CUDA_HOME" "$T/env.err" ||
  fail "nccl line: $(cat "$T/env.err")"
grep -qx "export LD_LIBRARY_PATH='$T/cuda/lib64:$T/site/nvidia/cudnn/lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" "$T/env.out" ||
  fail "LD_LIBRARY_PATH: $(cat "$T/env.out")"
grep -qx "export OPAL_PREFIX='$E/mpi'" "$T/env.out" || fail "OPAL_PREFIX: $(cat "$T/env.out")"
( eval "$(cat "$T/env.out")" && [ "$(command -v fanstore-env)" = "$E/bin/fanstore-env" ] ) || fail "the settings do not evaluate: $(cat "$T/env.out")"
echo "gpu_check_test: all good"
