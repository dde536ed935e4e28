#!/usr/bin/env bash
# The tournament-training rows of the benchmark (docs/training.md, "Tournament training"): samples and
# wall time to a target validation score for K = 1, 2 and 4 trainers of one rank each, the same
# per-trainer batch, the same number of epochs (so the same total samples: K trainers each go through
# 1/K of the set per epoch), on synthetic CosmoFlow and ImageFolder sets.
# Usage: scripts/bench/ltfb.sh OUT_DIR [--quick]     (bench.sh runs it; it can also run alone)
# Appends rows to OUT_DIR/raw.csv and notes to OUT_DIR/notes.tsv; logs and metrics in OUT_DIR/logs/ltfb-*.
# Env: BUILD_DIR (default build/), MPIRUN (default: mpirun on PATH), BENCH_DISK (data under BENCH_DISK/ltfb).
set -euo pipefail
# shellcheck source=scripts/bench/standalone.sh
source "$(dirname "$0")/standalone.sh" ltfb "$@"
TRAIN=$BUILD_DIR/bin/fanstore-train DATAGEN=$BUILD_DIR/bin/fanstore-datagen
MPIRUN=${MPIRUN:-$(command -v mpirun || true)}
LOGS=$OUT/logs
mkdir -p "$LOGS"

if [ -z "$MPIRUN" ] || ! grep -q -- --trainers <<<"$("$TRAIN" --help 2>&1)"; then
  record "all" ltfb - lower "n/a (needs mpirun and fanstore-train --trainers)"
  exit 0
fi
root_flag=()
[ "$(id -u)" = 0 ] && root_flag=(--allow-run-as-root)
rm -rf "$TMP" && mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT

INTERVAL=10  # rounds per trainer epoch: 2-10 here (the default, 100, is for real sets)

# run NAME K ARGS...: trains with K trainers of one rank (K = 1: the plain run); metrics in $LOGS/NAME.jsonl.
run() {
  local name=$1 k=$2
  shift 2
  local cmd=("$TRAIN" "$@" --threads $((k == 1 ? 2 : 1)) --prefetch-threads 1 --checkpoint "$TMP/$name" --metrics "$LOGS/$name.jsonl")
  if [ "$k" -gt 1 ]; then
    cmd=("$MPIRUN" "${root_flag[@]}" --oversubscribe --bind-to none -np "$k" "${cmd[@]}" --trainers "$k" --ltfb-interval "$INTERVAL")
  fi
  log "$name: ${cmd[*]##*/}"
  OMP_NUM_THREADS=1 timeout 3000 "${cmd[@]}" </dev/null >"$LOGS/$name.log" 2>&1 || { log "$name failed (see $LOGS/$name.log)"; return 1; }
}

# to_target METRICS BETTER TARGET: "samples seconds best_score exchange_pct" at the first validation where
# any trainer reaches TARGET (samples: every trainer's, up to that step), or "never ..." with the best seen.
to_target() {
  "$PY" - "$@" << 'EOF'
import json, sys
path, better, target = sys.argv[1], sys.argv[2], float(sys.argv[3])
lines = [json.loads(l) for l in open(path)]
summary = lines[-1]
k = summary.get("trainers", 1)
per_step = summary["samples"] / summary["steps"]              # every trainer's samples of one step
times = {e["step"]: e["time_s"] for e in lines if e["event"] == "step"}
metric = summary["metric"]
ok = (lambda v: v >= target) if better == "higher" else (lambda v: v <= target)
best = None
for e in lines:
    if e["event"] != "validation" or e.get(metric) is None:
        continue
    v = e[metric]
    best = v if best is None or (v > best if better == "higher" else v < best) else best
    if ok(v):
        print("%d %.1f %.4g" % (e["step"] * per_step, times[e["step"]], v), end="")
        break
else:
    print("never %.1f %.4g" % (summary["time_s"], best if best is not None else float("nan")), end="")
# The exchange's share of the step time at the default interval (100 steps): one round's exchange
# (everything but scoring) over 100 mean steps.
rounds = [e for e in lines if e["event"] == "tournament"]
step_s = summary["time_s"] / summary["steps"]
if rounds:
    ex = sum(e["round_s"] - e["score_s"] for e in rounds) / len(rounds)
    print(" %.3f %.3f" % (100 * ex / (100 * step_s), 100 * sum(e["round_s"] for e in rounds) / summary["time_s"]))
else:
    print(" - -")
EOF
}

# bench_model LABEL BETTER TARGET DESCRIPTION ARGS...: K = 1, 2, 4 on the same data and budget.
bench_model() {
  local label=$1 better=$2 target=$3 what=$4
  shift 4
  local k r one_samples="" one_time=""
  for k in 1 2 4; do
    if ! run "ltfb-$label-k$k" "$k" "$@"; then
      record "$what: samples to target, $k trainers" "$([ $k = 1 ] && echo one-trainer || echo ltfb-k)" samples lower "error"
      continue
    fi
    read -r samples seconds score ex_pct round_pct <<<"$(to_target "$LOGS/ltfb-$label-k$k.jsonl" "$better" "$target")"
    log "$label K=$k: samples $samples, time $seconds s, score $score, exchange $ex_pct% of a step at interval 100, rounds $round_pct% of the run"
    if [ "$samples" = never ]; then samples="never (best $score in $seconds s)" seconds="never"; fi
    if [ $k = 1 ]; then
      one_samples=$samples one_time=$seconds
      continue
    fi
    record "$what: samples to target, $k trainers vs 1" ltfb-k samples lower "$samples"
    record "$what: samples to target, $k trainers vs 1" one-trainer samples lower "$one_samples"
    record "$what: wall time to target, $k trainers vs 1" ltfb-k s lower "$seconds"
    record "$what: wall time to target, $k trainers vs 1" one-trainer s lower "$one_time"
    note "$what, $k trainers: a round's exchange (state capture, transfer, install, hash) is $ex_pct% of the step time at the default --ltfb-interval 100; all rounds here (interval $INTERVAL, with scoring) took $round_pct% of the run."
  done
}

EPOCHS=8
[ $QUICK = 1 ] && EPOCHS=4
log "CosmoFlow 32^3: 512 universes, $EPOCHS epochs"
"$DATAGEN" cosmoflow -o "$TMP/cosmo" --samples 576 --size 32 --seed 3 --val-fraction 0.111 >/dev/null
bench_model cosmoflow lower 0.33 "CosmoFlow 32^3, val MAE <= 0.33" --model cosmoflow --data "$TMP/cosmo/train" \
  --val "$TMP/cosmo/val" --epochs "$EPOCHS" --batch 4 --optimizer adam --lr 0.001 --warmup-epochs 1 --seed 1
if [ $QUICK = 0 ]; then
  # 8 classes: with 4 one trainer passes 0.9 after its first epoch, too early for a comparison to mean anything.
  log "ResNet-50 32x32, 8 classes: 960 images, 4 epochs"
  "$DATAGEN" imagefolder -o "$TMP/img" --samples 1056 --classes 8 --size 32 --seed 5 --val-fraction 0.091 >/dev/null
  bench_model resnet50 higher 0.95 "ResNet-50 32x32 (8 classes), val top-1 >= 0.95" --model resnet50 --data "$TMP/img/train" \
    --val "$TMP/img/val" --input-size 32 --epochs 4 --batch 16 --optimizer adam --lr 0.001 --warmup-epochs 0.5 --seed 1
fi
note "One rank per trainer, the same per-trainer batch and epochs (K trainers each see 1/K of the training set per epoch, so every K processes the same total samples), tournament fraction 0.1, interval $INTERVAL steps, metric loss. Samples to target count every trainer's training samples up to the first validation (once per trainer epoch, i.e. every N(1-0.1) samples of all trainers together) where any trainer reaches the target. On 2 cores 2 and 4 trainers share the cores (1 thread each, against 2 threads for one trainer), so compare samples, not wall time."
