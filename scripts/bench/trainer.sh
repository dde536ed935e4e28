#!/usr/bin/env bash
# The trainer rows of the benchmark: fanstore-train --benchmark next to scripts/bench/torch_models.py (PyTorch) on
# the same models, batch, input size and threads, on the CPU.
# Usage: scripts/bench/trainer.sh OUT_DIR [--quick]     (bench.sh runs it; it can also run alone)
# Appends rows to OUT_DIR/raw.csv and notes to OUT_DIR/notes.tsv; logs in OUT_DIR/logs/train-*.log and torch.log.
# Env: BUILD_DIR (default build/), BENCH_STEP_TIMEOUT (seconds per program, default 300).
set -euo pipefail
# shellcheck source=scripts/bench/standalone.sh
source "$(dirname "$0")/standalone.sh" trainer "$@"
TRAIN=$BUILD_DIR/bin/fanstore-train
STEP_TIMEOUT=${BENCH_STEP_TIMEOUT:-300}
LOGS=$OUT/logs
mkdir -p "$LOGS"
HAVE_TRAIN=0
# (grep -q on a pipe would stop reading early: under pipefail the writer's SIGPIPE fails the test.)
[ -x "$TRAIN" ] && grep -q -- --benchmark <<<"$("$TRAIN" --help 2>&1)" && HAVE_TRAIN=1
NA_TRAIN="n/a (fanstore-train --benchmark not available)"

# model|batch|input size. Inputs are smaller than MLPerf's (ResNet-50 224, CosmoFlow/U-Net 128^3) where a step
# would take minutes on 2 cores; both sides always run the same sizes. U-Net needs >= 64^3 (5 downsamplings).
if [ $QUICK = 1 ]; then CASES=("resnet50|2|32" "cosmoflow|1|32"); else
  CASES=("resnet50|8|224" "cosmoflow|2|64" "unet3d|1|64"); fi
ITERS=5
THREADS=$(nproc)
log "${CASES[*]} on $THREADS threads"
note "CPU, $THREADS threads, synthetic inputs, $ITERS timed iterations after 1 warm-up. Train = forward + loss + backward + SGD-momentum step; inference = forward only. PyTorch: scripts/bench/torch_models.py (torchvision resnet50; MLPerf CosmoFlow; MLPerf 3D U-Net with instance norm)$([ $QUICK = 1 ] && echo "; --quick skips the 3D U-Net (one 64^3 training step takes ~10 s here)")."
# PyTorch: one process for all models (importing torch costs seconds on this machine).
torch_args=(--threads "$THREADS" --iters "$ITERS" --warmup 1)
for c in "${CASES[@]}"; do
  IFS='|' read -r model batch size <<<"$c"
  torch_args+=(--model "$model" --batch "$batch" --input-size "$size")
done
tout_py=$(timeout "$STEP_TIMEOUT" "$PY" "$REPO/scripts/bench/torch_models.py" "${torch_args[@]}" 2>"$LOGS/torch.log") || true
echo "$tout_py" >>"$LOGS/torch.log"
for c in "${CASES[@]}"; do
  IFS='|' read -r model batch size <<<"$c"
  dims="${size}^2"
  [ "$model" != resnet50 ] && dims="${size}^3"
  if [ $HAVE_TRAIN = 1 ]; then
    # Its output: "train: X samples/s, inference: Y samples/s".
    tout=$(timeout "$STEP_TIMEOUT" "$TRAIN" --model "$model" --benchmark $ITERS --batch "$batch" --input-size "$size" \
      --threads "$THREADS" --device cpu 2>&1) || tout="FAILED: $tout"
    echo "$tout" >"$LOGS/train-$model.log"
  fi
  for mode in train infer; do
    case_name="$model $mode (batch $batch, $dims)"
    v=$(echo "$tout_py" | awk -F, -v m="$model" -v p="$mode" '$1 == m && $2 == p {print $6}')
    record "$case_name" pytorch samples/s higher "${v:-error (logs/torch.log)}"
    if [ $HAVE_TRAIN = 1 ]; then
      v=$(echo "$tout" | grep -oiE "${mode}[a-z]*: *[0-9]+(\.[0-9]+)? *samples/s" | head -1 | grep -oE '[0-9]+(\.[0-9]+)?' | head -1 || true)
      record "$case_name" fanstore-train samples/s higher "${v:-error (logs/train-$model.log)}"
    else
      record "$case_name" fanstore-train samples/s higher "$NA_TRAIN"
    fi
  done
done
if [ $QUICK = 1 ]; then
  record "unet3d train/infer" pytorch samples/s higher "skipped in --quick"
  record "unet3d train/infer" fanstore-train samples/s higher "skipped in --quick"
fi
