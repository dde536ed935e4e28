#!/usr/bin/env bash
# The --device cuda smoke test: trains CosmoFlow (fp32, bf16, fp16) and ResNet-50 (bf16) for a few
# steps on the GPU, checks the losses are finite and fall, that the GPU run matches the CPU's first
# loss, and (with 2 GPUs) that a 1,2,1,1 spatial split over NCCL gives one CPU rank's losses; with
# --sanitizer runs the CUDA conformance suite and a training step under compute-sanitizer (memcheck)
# instead. Exit 0 pass, 1 fail, 77 no CUDA device (nothing ran).
# Usage: scripts/gpu-smoke.sh [--sanitizer] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build sanitizer=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitizer) sanitizer=1 ;;
    --build) build=$2; shift ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-smoke: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
bin=$build/bin
train=$bin/fanstore-train
py=${FANSTORE_PYTHON:-/usr/bin/python3}
[ -x "$train" ] || { echo "gpu-smoke: $train not built (scripts/build.sh)" >&2; exit 1; }

# No device (or no CUDA in this build): say so and skip, the way ctest counts a skip. A CUDA module that is
# missing or does not load is a failure, not a skip.
if probe=$("$train" --model cosmoflow --benchmark 1 --batch 1 --input-size 32 --device cuda 2>&1 >/dev/null); then :; else
  case "$probe" in
    *"--device cuda: no CUDA device"* | *"built without the CUDA backend"*)
      echo "gpu-smoke: SKIP: no CUDA device: $(echo "$probe" | tail -1)"
      exit 77 ;;
  esac
  echo "gpu-smoke: FAIL: --device cuda: $(echo "$probe" | tail -1)" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ $sanitizer = 1 ]; then
  sanitizer_bin=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
  [ -x "$sanitizer_bin" ] || { echo "gpu-smoke: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 1; }
  # Every op of the suite; the model cases are left out only because memcheck makes them take minutes.
  "$sanitizer_bin" --tool memcheck --error-exitcode 1 --leak-check full "$bin/trainer_conformance" --backend cuda \
    --gtest_filter='-*Model*'
  "$bin/fanstore-datagen" cosmoflow -o "$work/cf" --samples 8 --size 32 --seed 3 --val-fraction 0 > /dev/null
  "$sanitizer_bin" --tool memcheck --error-exitcode 1 "$train" --model cosmoflow --data "$work/cf/train" --batch 2 \
    --max-steps 2 --device cuda --precision bf16 --checkpoint "$work/ck-sanitizer"
  echo "gpu-smoke: compute-sanitizer memcheck: no errors"
  exit 0
fi

"$bin/fanstore-datagen" cosmoflow -o "$work/cf" --samples 48 --size 32 --seed 3 --val-fraction 0.25 > /dev/null
"$bin/fanstore-datagen" imagefolder -o "$work/img" --samples 96 --classes 4 --size 64 --seed 5 > /dev/null
losses() { $py -c 'import json,sys; print(" ".join(str(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"step\"" in l))' "$1"; }
falls() {  # falls NAME METRICS: the mean of the last 3 step losses below the mean of the first 3, all finite
  $py - "$@" << 'EOF'
import json, math, sys
name, path = sys.argv[1], sys.argv[2]
l = [json.loads(x)["loss"] for x in open(path) if '"step"' in x]
ok = all(v is not None and math.isfinite(v) for v in l) and len(l) >= 6 and sum(l[-3:]) < sum(l[:3])
print(("ok   " if ok else "FAIL ") + f"{name}: losses {' '.join(f'{v:.4g}' for v in l)}")
sys.exit(0 if ok else 1)
EOF
}
common=(--model cosmoflow --data "$work/cf/train" --val "$work/cf/val" --batch 4 --epochs 3 --optimizer adam --seed 1)
for precision in fp32 bf16 fp16; do
  "$train" "${common[@]}" --device cuda --precision $precision --checkpoint "$work/cf-$precision" > "$work/cf-$precision.out"
  tail -2 "$work/cf-$precision.out" | head -1
  falls "cosmoflow $precision" "$work/cf-$precision/metrics.jsonl"
done
# The first step's loss is computed from the same weights and data: GPU fp32 and CPU agree closely.
"$train" "${common[@]}" --device cpu --max-steps 1 --checkpoint "$work/cf-cpu" > /dev/null
first_gpu=$(losses "$work/cf-fp32/metrics.jsonl" | cut -d' ' -f1) first_cpu=$(losses "$work/cf-cpu/metrics.jsonl" | cut -d' ' -f1)
$py -c "import sys; a, b = $first_gpu, $first_cpu; ok = abs(a - b) <= 1e-4 * abs(b); print(('ok   ' if ok else 'FAIL ') + f'first loss GPU fp32 {a} vs CPU {b}'); sys.exit(0 if ok else 1)"
"$train" --model resnet50 --data "$work/img/train" --val "$work/img/val" --input-size 64 --batch 16 --epochs 2 \
  --device cuda --precision bf16 --checkpoint "$work/rn" > "$work/rn.out"
tail -2 "$work/rn.out" | head -1
falls "resnet50 bf16" "$work/rn/metrics.jsonl"
"$train" --model resnet50 --benchmark 5 --batch 32 --input-size 224 --device cuda --precision bf16

# A spatial split over two GPUs (halos and spatial sums over NCCL): the same per-step losses as one
# CPU rank (docs/gpu.md). NCCL takes one GPU per rank, so this needs two GPUs and mpirun.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
mpirun=${FANSTORE_MPIRUN:-$(command -v mpirun || true)}
if [ "${gpus:-0}" -ge 2 ] && [ -n "$mpirun" ]; then
  root_flag=()
  [ "$(id -u)" = 0 ] && root_flag=(--allow-run-as-root)
  # 64^3: CosmoFlow's last pooling of a 32^3 input has one position, too few to split.
  "$bin/fanstore-datagen" cosmoflow -o "$work/cf64" --samples 6 --size 64 --seed 3 --val-fraction 0 > /dev/null
  grid_common=(--model cosmoflow --data "$work/cf64/train" --batch 1 --epochs 1 --max-steps 5 --optimizer sgd --lr 0.01
               --warmup-epochs 0 --seed 1)
  "$train" "${grid_common[@]}" --device cpu --checkpoint "$work/grid-cpu" > /dev/null
  "$mpirun" "${root_flag[@]}" -np 2 "$train" "${grid_common[@]}" --device cuda --grid 1,2,1,1 \
    --checkpoint "$work/grid-gpu" > "$work/grid-gpu.out"
  $py - "$(losses "$work/grid-gpu/metrics.jsonl")" "$(losses "$work/grid-cpu/metrics.jsonl")" << 'EOF'
import sys
a, b = [float(x) for x in sys.argv[1].split()], [float(x) for x in sys.argv[2].split()]
ok = len(a) == len(b) == 5 and all(abs(x - y) <= 1e-4 * abs(y) for x, y in zip(a, b))
print(("ok   " if ok else "FAIL ") + f"cosmoflow on grid 1,2,1,1 over 2 GPUs {a} vs one CPU rank {b}")
sys.exit(0 if ok else 1)
EOF
else
  echo "gpu-smoke: skip: the spatial split over GPUs needs 2 GPUs and mpirun (found ${gpus:-0} GPU(s))"
fi
echo "gpu-smoke: all passed"
