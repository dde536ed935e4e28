#!/usr/bin/env bash
# The spatial-parallelism rows of the benchmark (docs/parallelism.md): CosmoFlow on sample x spatial grids.
# Usage: scripts/bench/spatial.sh OUT_DIR [--quick]     (bench.sh runs it; it can also run alone)
# Appends rows to OUT_DIR/raw.csv (section,case,system,unit,better,value) and notes to OUT_DIR/notes.tsv,
# logs to OUT_DIR/logs/spatial-*.log. Env: BUILD_DIR (default build/), MPIRUN (default: mpirun on PATH),
# SPATIAL_PARTS (default "memory cap scaling model": rerun the timing parts alone at a quiet moment).
#   memory   peak RSS (max over ranks) of one training step, batch 1, at 64^3 and 128^3: grids 1,2,1,1
#            and 1,2,2,1 (also with --shard-weights) against one rank; and of a short training run that writes
#            its checkpoint (64^3)
#   cap      CosmoFlow 128^3, one step, under a per-rank `ulimit -v` halfway between the 4-rank and the
#            1-rank peak virtual size: one rank runs out of memory, 4 ranks (1,2,2,1) train
#   scaling  one 64^3 sample per step on 1, 2, 4 ranks (spatial); global batch 2 and 4 on spatial, hybrid
#            and data-parallel grids
#   model    CosmoFlow and U-Net 64^3, every grid of 2 and 4 ranks: the predicted step time (--explain)
#            next to the measured one (--benchmark), and --grid auto's choice and the model alone's against
#            the measured best
set -euo pipefail
# shellcheck source=scripts/bench/standalone.sh
source "$(dirname "$0")/standalone.sh" spatial "$@"
TRAIN=$BUILD_DIR/bin/fanstore-train
MODEL=cosmoflow  # bench()'s model: CosmoFlow everywhere but the model part, which also measures U-Net
MPIRUN=${MPIRUN:-$(command -v mpirun || true)}
LOGS=$OUT/logs
mkdir -p "$LOGS"
STEPS=3
[ $QUICK = 1 ] && STEPS=1
PARTS=${SPATIAL_PARTS:-memory cap scaling model}
part() { [[ " $PARTS " == *" $1 "* ]]; }


if [ -z "$MPIRUN" ] || ! grep -q -- --grid <<<"$("$TRAIN" --help 2>&1)"; then
  record "all" spatial - higher "n/a (needs mpirun and fanstore-train --grid)"
  exit 0
fi
root_flag=()
[ "$(id -u)" = 0 ] && root_flag=(--allow-run-as-root)

# launch NP: the words that start NP ranks (mpirun, oversubscribed, unbound; none for one rank), in LAUNCH.
launch() {
  LAUNCH=()
  if [ "$1" -gt 1 ]; then LAUNCH=("$MPIRUN" "${root_flag[@]}" --oversubscribe --bind-to none -np "$1"); fi
}

# bench NP GRID BATCH SIZE [prefix...]: one --benchmark run of $MODEL (with the options in BENCH_FLAGS); prints
# "step_ms rss_bytes virtual_bytes samples_per_s tensor_bytes" or "error". The details line of grid_benchmark_command
# carries the step time and the peaks.
BENCH_FLAGS=()
bench() {
  local np=$1 grid=$2 batch=$3 size=$4 name="spatial-${MODEL}-$1-${2//,/x}-b$3-s$4${BENCH_FLAGS[*]// /}"
  shift 4
  launch "$np"
  local cmd=("${LAUNCH[@]}" "$TRAIN" --model "$MODEL" --benchmark "$STEPS" --grid "$grid" --batch "$batch"
    --input-size "$size" --threads 1 "${BENCH_FLAGS[@]}")
  # stdin from /dev/null: mpirun forwards stdin to rank 0 and would eat a calling loop's input.
  if ! OMP_NUM_THREADS=1 timeout 1500 "$@" "${cmd[@]}" </dev/null >"$LOGS/$name.log" 2>&1; then echo error; return; fi
  local step rss vm rate tensors
  step=$(grep -oE 'benchmark: step [0-9.]+ ms' "$LOGS/$name.log" | grep -oE '[0-9.]+' | head -1)
  rss=$(grep -oE 'peak_rss_bytes [0-9]+' "$LOGS/$name.log" | grep -oE '[0-9]+' | head -1)
  vm=$(grep -oE 'peak_virtual_bytes [0-9]+' "$LOGS/$name.log" | grep -oE '[0-9]+' | head -1)
  rate=$(grep -oE '^train: [0-9.]+' "$LOGS/$name.log" | grep -oE '[0-9.]+' | head -1)
  tensors=$(grep -oE 'peak_tensor_bytes [0-9]+' "$LOGS/$name.log" | grep -oE '[0-9]+' | head -1)
  echo "${step:-error} ${rss:-0} ${vm:-0} ${rate:-0} ${tensors:-0}"
}
mib() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1048576}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

log "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
note "CosmoFlow (MLPerf HPC), synthetic input, 1 oneDNN thread per rank, ranks oversubscribed on $(nproc) cores (mpirun --oversubscribe --bind-to none); load average at start $(cut -d' ' -f1 /proc/loadavg) (the machine is shared). Step time: mean of $STEPS steps after a warm-up step (forward, loss, backward, gradient sums, SGD). Peak RSS and peak virtual size: the largest over the ranks (getrusage, /proc/self/status VmPeak). Peak host tensors: the most bytes of host tensors alive at once in the run (Storage::host_peak_bytes, start-up included), the largest over the ranks: what a GPU would hold in device memory, without the libraries, the runtime and the memory kept for reuse."

# --- memory ------------------------------------------------------------------------------------------------------
declare -A VM
for size in 64 128; do
  part memory || part cap || continue
  [ $QUICK = 1 ] && [ $size = 128 ] && continue
  read -r _ one_rss one_vm _ one_tensors <<<"$(bench 1 1,1,1,1 1 $size)"
  VM[1-$size]=$one_vm
  log "memory ${size}^3: one rank $(mib "$one_rss") MiB"
  for g in "2 1,2,1,1" "4 1,2,2,1"; do
    read -r np grid <<<"$g"
    read -r _ rss vm _ tensors <<<"$(bench "$np" "$grid" 1 $size)"
    VM[$np-$size]=$vm
    part memory || continue
    case_name="peak RSS per rank, ${size}^3 batch 1, grid $grid ($np ranks)"
    record "$case_name" spatial MiB lower "$(mib "$rss")"
    record "$case_name" one-rank MiB lower "$(mib "$one_rss")"
    log "memory ${size}^3 $grid: $(mib "$rss") MiB = $(ratio "$rss" "$one_rss") x one rank"
    case_name="peak host tensors per rank, ${size}^3 batch 1, grid $grid ($np ranks)"
    record "$case_name" spatial MiB lower "$(mib "$tensors")"
    record "$case_name" one-rank MiB lower "$(mib "$one_tensors")"
  done
  # The weights sharded too (ZeRO stage 3, off by default).
  part memory || continue
  BENCH_FLAGS=(--shard-weights)
  read -r _ rss _ _ tensors <<<"$(bench 4 1,2,2,1 1 $size)"
  BENCH_FLAGS=()
  case_name="peak RSS per rank, ${size}^3 batch 1, grid 1,2,2,1 (4 ranks) with --shard-weights"
  record "$case_name" spatial MiB lower "$(mib "$rss")"
  record "$case_name" one-rank MiB lower "$(mib "$one_rss")"
  log "memory ${size}^3 1,2,2,1 --shard-weights: $(mib "$rss") MiB = $(ratio "$rss" "$one_rss") x one rank"
  case_name="peak host tensors per rank, ${size}^3 batch 1, grid 1,2,2,1 (4 ranks) with --shard-weights"
  record "$case_name" spatial MiB lower "$(mib "$tensors")"
  record "$case_name" one-rank MiB lower "$(mib "$one_tensors")"
done

# Training holds more than a benchmark step: the loss guard's last good values and, at the end, the checkpoint
# being written. 4 SGD steps of 64^3 samples, batch 1, then the checkpoint; the summary's peak (max over ranks).
if part memory; then
  rm -rf "$TMP/train" && mkdir -p "$TMP/train"
  "$BUILD_DIR/bin/fanstore-datagen" cosmoflow -o "$TMP/train/data" --samples 8 --size 64 --seed 4 --val-fraction 0 \
    >/dev/null
  train_rss() {  # train_rss NP [--grid G]: the run's peak RSS in bytes, or 0
    local np=$1 name="spatial-train-$1"
    shift
    launch "$np"
    local cmd=("${LAUNCH[@]}" "$TRAIN" --model cosmoflow --data "$TMP/train/data/train" --epochs 1 --batch 1
      --optimizer sgd --seed 5 --prefetch-threads 1 --threads 1 --max-steps 4 --checkpoint "$TMP/train/ck-$np" "$@")
    if ! OMP_NUM_THREADS=1 timeout 1500 "${cmd[@]}" </dev/null >"$LOGS/$name.log" 2>&1; then echo 0; return; fi
    grep -oE '"peak_rss_bytes":[0-9]+' "$TMP/train/ck-$np/metrics.jsonl" | grep -oE '[0-9]+' | tail -1
  }
  one_rss=$(train_rss 1)
  rss=$(train_rss 4 --grid 1,2,2,1)
  case_name="peak RSS per rank, training 64^3 batch 1 with checkpoint, grid 1,2,2,1 (4 ranks)"
  record "$case_name" spatial MiB lower "$(mib "$rss")"
  record "$case_name" one-rank MiB lower "$(mib "$one_rss")"
  log "memory training 64^3 1,2,2,1: $(mib "$rss") MiB = $(ratio "$rss" "$one_rss") x one rank"
fi

# --- a sample that does not fit one rank's memory cap ---------------------------------------------------------------
if part cap && [ $QUICK = 0 ] && [ "${VM[1-128]:-0}" -gt 0 ] && [ "${VM[4-128]:-0}" -gt 0 ]; then
  cap_kib=$(( (VM[1-128] + VM[4-128]) / 2 / 1024 ))
  one=$(bench 1 1,1,1,1 1 128 prlimit --as=$((cap_kib * 1024)))
  four=$(bench 4 1,2,2,1 1 128 prlimit --as=$((cap_kib * 1024)))
  outcome() { if [ "$1" = error ]; then grep -m1 -oE "fanstore-train: error: .*|std::bad_alloc|Killed" "$LOGS/$2.log" | head -1 || echo failed; else echo "trained one step"; fi; }
  case_name="128^3, one step, ulimit -v $(( cap_kib / 1024 )) MiB per rank"
  record "$case_name" spatial text higher "1,2,2,1: $(outcome "$(echo "$four" | cut -d' ' -f1)" "spatial-$MODEL-4-1x2x2x1-b1-s128")"
  record "$case_name" one-rank text higher "1 rank: $(outcome "$(echo "$one" | cut -d' ' -f1)" "spatial-$MODEL-1-1x1x1x1-b1-s128")"
  log "cap $(( cap_kib / 1024 )) MiB: one rank -> $(echo "$one" | cut -d' ' -f1), 4 ranks -> $(echo "$four" | cut -d' ' -f1)"
fi

# --- strong scaling -----------------------------------------------------------------------------------------------
declare -A SPATIAL_RATE=() DP_RATE=()
part scaling && read -r one_step _ _ one_rate _ <<<"$(bench 1 1,1,1,1 1 64)"
for g in "2 1,2,1,1" "4 1,2,2,1"; do
  part scaling || break
  read -r np grid <<<"$g"
  read -r step _ _ rate _ <<<"$(bench "$np" "$grid" 1 64)"
  case_name="one 64^3 sample per step, $np ranks spatial ($grid)"
  record "$case_name" spatial samples/s higher "$rate"
  record "$case_name" one-rank samples/s higher "$one_rate"
  SPATIAL_RATE[$np]=$rate
done
for g in "2 1,2,1,1 2 2,1,1,1 1" "4 1,2,2,1 4 4,1,1,1 1" "4 2,2,1,1 2 4,1,1,1 1"; do
  part scaling || break
  read -r np grid batch dp dp_batch <<<"$g"
  read -r _ _ _ rate _ <<<"$(bench "$np" "$grid" "$batch" 64)"
  read -r _ _ _ dp_rate _ <<<"$(bench "$np" "$dp" "$dp_batch" 64)"
  case_name="global batch $((np * dp_batch)) of 64^3 on $np ranks: $grid vs $dp"
  record "$case_name" spatial samples/s higher "$rate"
  record "$case_name" data-parallel samples/s higher "$dp_rate"
  [ "$dp_batch" = 1 ] && DP_RATE[$np]=$dp_rate
done
# Scaling efficiency: samples/s on N ranks over N x one rank's. Spatial: the same single sample split N ways (strong
# scaling); data parallel: N samples, one per rank (the same global batch as N spatial groups of one sample).
eff() {  # eff RATE NP: percent of NP x one rank's samples/s
  awk -v r="$1" -v one="$one_rate" -v n="$2" 'BEGIN {if (r + 0 > 0 && one + 0 > 0) printf "%.1f", 100 * r / (n * one); else print "error"}'
}
for np in 2 4; do
  part scaling || break
  case_name="scaling efficiency on $np ranks (samples/s over $np x one rank's): one 64^3 sample split $np ways vs $np samples data parallel"
  record "$case_name" spatial % higher "$(eff "${SPATIAL_RATE[$np]:-0}" "$np")"
  record "$case_name" data-parallel % higher "$(eff "${DP_RATE[$np]:-0}" "$np")"
done
part scaling && note "Scaling efficiency: samples/s on N ranks over N x one rank's samples/s, for one sample split N ways (strong scaling) and for N samples one per rank (data parallelism at the same global batch). With more ranks than cores (--oversubscribe) it is at most cores / N: 50% for 4 ranks on 2 cores."

# --- the performance model against measurement -------------------------------------------------------------------------
for run in "cosmoflow 2" "cosmoflow 4" "unet3d 2" "unet3d 4"; do
  part model || break
  read -r MODEL np <<<"$run"
  launch "$np"
  table=$("${LAUNCH[@]}" "$TRAIN" --model "$MODEL" --grid auto \
    --explain --batch 1 --input-size 64 --threads 1 </dev/null 2>"$LOGS/spatial-explain-$MODEL-$np.err") || { record "$MODEL, $np ranks" spatial ms lower "error"; continue; }
  echo "$table" >"$LOGS/spatial-explain-$MODEL-$np.log"
  chosen=$(echo "$table" | awk '/<- chosen/ {print $1}')
  # The model alone: the lowest predicted step (what --auto-trials 0 would pick, ties aside).
  alone=$(echo "$table" | awk '$1 ~ /^[0-9]+(,[0-9]+)+$/ && $2 ~ /^[0-9]+$/ {print $3, $1}' | sort -g | head -1 | cut -d' ' -f2)
  best_grid="" best_ms="" chosen_ms="" alone_ms=""
  while read -r grid batch predicted _; do
    read -r measured _ _ _ <<<"$(bench "$np" "$grid" "$batch" 64)"
    record "$MODEL predicted vs measured step, grid $grid ($np ranks, batch $batch per group)" spatial ms lower "$measured"
    record "$MODEL predicted vs measured step, grid $grid ($np ranks, batch $batch per group)" predicted ms lower "$predicted"
    if [ "$measured" != error ] && { [ -z "$best_ms" ] || awk -v a="$measured" -v b="$best_ms" 'BEGIN {exit !(a < b)}'; }; then
      best_grid=$grid best_ms=$measured
    fi
    if [ "$grid" = "$chosen" ]; then chosen_ms=$measured; fi
    if [ "$grid" = "$alone" ]; then alone_ms=$measured; fi
  done < <(echo "$table" | awk '$1 ~ /^[0-9]+(,[0-9]+)+$/ && $2 ~ /^[0-9]+$/ {print $1, $2, $3}')
  record "$MODEL best grid of $np ranks: --grid auto's ($chosen) vs the measured best ($best_grid)" model-choice ms lower "${chosen_ms:-error}"
  record "$MODEL best grid of $np ranks: --grid auto's ($chosen) vs the measured best ($best_grid)" measured-best ms lower "$best_ms"
  record "$MODEL best grid of $np ranks: the model alone's ($alone) vs the measured best ($best_grid)" model-choice ms lower "${alone_ms:-error}"
  record "$MODEL best grid of $np ranks: the model alone's ($alone) vs the measured best ($best_grid)" measured-best ms lower "$best_ms"
  log "$MODEL $np ranks: --grid auto chose $chosen (${chosen_ms:-?} ms measured), the model alone $alone (${alone_ms:-?} ms), measured best $best_grid ($best_ms ms)"
done
note "Predicted: --grid auto --explain (global batch = ranks, so each grid's batch per group = ranks / S); measured: --benchmark on that grid and batch. The 'best grid' rows compare the measured step time of a choice with that of the measured best grid: --grid auto's (its 2 best predictions and data parallelism each run three training steps, the one with the fastest step is chosen) and the model alone's (the lowest predicted step)."
