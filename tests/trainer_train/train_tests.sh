#!/usr/bin/env bash
# End-to-end fanstore-train cases (CI-sized, fixed seeds). Usage: train_tests.sh CASE WORKDIR
# Env: FANSTORE_BIN_DIR (fanstore, fanstore-train, fanstore-datagen), FANSTORE_MPIRUN (may be empty),
# FANSTORE_TRAIN_TESTS_DIR (this folder). Exit 77 = skipped (no mpirun / python3).
set -euo pipefail
case_name=$1 work=$2
bin=${FANSTORE_BIN_DIR:?} here=${FANSTORE_TRAIN_TESTS_DIR:-$(dirname "$0")}
train=$bin/fanstore-train datagen=$bin/fanstore-datagen fanstore=$bin/fanstore
py=${FANSTORE_PYTHON:-/usr/bin/python3}
rm -rf "$work" && mkdir -p "$work"
cd "$work"

mpirun_n() {  # mpirun_n RANKS PROGRAM ARGS...
  local mpirun=${FANSTORE_MPIRUN:-$(command -v mpirun || true)} n=$1
  shift
  if [[ -z "$mpirun" ]]; then echo "SKIP: no mpirun"; exit 77; fi
  local root_flag=()
  [[ $(id -u) == 0 ]] && root_flag=(--allow-run-as-root)
  "$mpirun" "${root_flag[@]}" --oversubscribe -np "$n" --bind-to none "$@"
}
mpirun_2() { mpirun_n 2 "$@"; }

# stop_mid_run SIGNAL CK_DIR PID [RANK [TIMES]]: once CK_DIR/metrics.jsonl has 3 step records, sends SIGNAL to PID,
# or to the process of MPI rank RANK started in this directory (TIMES times, 2 ms apart), and waits for PID. The run
# must stop at a step's end with a checkpoint: it dies of the signal (mpirun then exits 128 + its number too), writes
# a "stopped" record, and says how to go on.
stop_mid_run() {
  local sig=$1 dir=$2 pid=$3 rank=${4:-} times=${5:-1} steps=0 target= status=0
  until (( steps >= 3 )); do
    sleep 0.05
    kill -0 "$pid" 2> /dev/null || { echo "FAIL the run ended before it was signalled"; exit 1; }
    steps=$(grep -c '"event":"step"' "$dir/metrics.jsonl" 2> /dev/null || true)
  done
  if [[ -z "$rank" ]]; then target=$pid
  else
    for child in $(pgrep -f "fanstore-train.*--checkpoint $dir"); do
      [[ $(readlink "/proc/$child/cwd") == "$PWD" ]] &&
        tr '\0' '\n' < "/proc/$child/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$rank" && target=$child
    done
    [[ -n "$target" ]] || { echo "FAIL found no process of rank $rank"; exit 1; }
  fi
  kill "-$sig" "$target" || { echo "FAIL the run ended before it was signalled"; exit 1; }
  for ((k = 1; k < times; ++k)); do sleep 0.002; kill "-$sig" "$target" 2> /dev/null || break; done
  wait "$pid" || status=$?
  local expect=$((128 + $(kill -l "$sig")))
  (( status == expect )) || { echo "FAIL exit $status after SIG$sig, not $expect"; exit 1; }
  tail -1 "$dir/metrics.jsonl" | grep -q "\"event\":\"stopped\".*\"signal\":\"SIG$sig\"" ||
    { echo "FAIL no stopped record"; tail -2 "$dir/metrics.jsonl"; exit 1; }
  grep -q "^fanstore-train: stopped by SIG$sig after step [0-9]*; checkpoint in $dir (the same command with --resume" \
    stop.out || { echo "FAIL no stop line"; cat stop.out; exit 1; }
  stopped_at=$(sed -n 's/^fanstore-train: stopped by SIG[A-Z0-9]* after step \([0-9]*\);.*/\1/p' stop.out)
}

# check_rounds METRICS EXPECTED_ROUNDS: every tournament record is sane, partners agree, and two
# trainers that kept the same winner hold bit-identical state (the hash of weights and optimizer state).
check_rounds() {
  $py - "$1" "$2" << 'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
rounds = {}
for e in lines:
    if e["event"] == "tournament":
        rounds.setdefault(e["round"], {})[e["trainer"]] = e
assert len(rounds) == int(sys.argv[2]), "rounds: %d, expected %s" % (len(rounds), sys.argv[2])
same = 0
for n, r in sorted(rounds.items()):
    for t, e in r.items():
        p = e["partner"]
        assert r[p]["partner"] == t, "round %d: trainer %d met %d, which met %d" % (n, t, p, r[p]["partner"])
        if p == t:
            continue
        winner_same = e["winner"] == r[p]["winner"]
        assert (e["state_hash"] == r[p]["state_hash"]) == winner_same, \
            "round %d: trainers %d and %d kept winners %d and %d but hashes %s %s" % (
                n, t, p, e["winner"], r[p]["winner"], e["state_hash"], r[p]["state_hash"])
        same += winner_same
print("ok   %d rounds, partners agree; %d time(s) a trainer kept the model that also won its partner's tournament, "
      "with the partner's exact state" % (len(rounds), same // 2))
PY
}

# summary FIELD METRICS_FILE: a field of the final {"event":"summary"} line.
summary() { $py -c 'import json,sys; print(json.loads(open(sys.argv[2]).read().splitlines()[-1])[sys.argv[1]])' "$1" "$2"; }

# check "description" PYTHON_BOOLEAN_EXPRESSION
check() {
  if $py -c "import sys; sys.exit(0 if ($2) else 1)"; then echo "ok   $1"; else echo "FAIL $1"; exit 1; fi
}

case $case_name in
learn_resnet50_fanstore_run)
  # ResNet-50 at 32x32 on 4 classes (chance 0.25), reading a packed image through `fanstore run`, with LARS
  # (warm-up + poly decay), the large-batch recipe of docs/training.md.
  "$datagen" imagefolder -o data --samples 400 --classes 4 --size 32 --seed 5 > /dev/null
  "$fanstore" pack data -o image --parts 2 > /dev/null
  "$fanstore" run --image image -- "$train" --model resnet50 --data /fanstore/train --val /fanstore/val \
    --input-size 32 --epochs 3 --batch 16 --lr 5 --optimizer lars --lars-eta 0.001 --weight-decay 5e-5 \
    --warmup-epochs 1 --schedule poly --threads 2 --seed 1 --checkpoint ck
  acc=$(summary val_metric ck/metrics.jsonl)
  check "resnet50 + LARS through fanstore run: val top-1 $acc >= 0.9 (chance 0.25)" "$acc >= 0.9"
  ;;
learn_cosmoflow)
  # CosmoFlow learns, on one rank: the recipe of the grid's learning test (trainer_spatial.e2e.learn_cosmoflow_grid,
  # label long), whose grid the spatial tests show computes what one rank does. The MAE of the 4 regressed targets
  # must fall well below predicting each target's mean.
  "$datagen" cosmoflow -o data --samples 160 --size 32 --seed 3 > /dev/null
  "$train" --model cosmoflow --data data/train --val data/val --epochs 8 --batch 4 --lr 0.001 --optimizer adam \
    --warmup-epochs 1 --schedule cosine --threads 2 --seed 1 --checkpoint ck
  mae=$(summary val_metric ck/metrics.jsonl) base=$(summary baseline_mae ck/metrics.jsonl)
  check "cosmoflow on one rank: val MAE $mae < 0.75 x predict-the-mean $base" "$mae < 0.75 * $base"
  ;;
learn_unet3d_2ranks)
  # 3D U-Net on 2 MPI ranks (each reads its shard), on the centred 64x32x32 window of 64^3 cases:
  # mean Dice after 2 epochs vs the untrained model's (the same run with --lr 0).
  "$datagen" unet3d -o data --samples 40 --size 64 --seed 7 --val-fraction 0.2 > /dev/null
  common=(--model unet3d --data data/train --val data/val --input-size 32 --batch 1 --optimizer adam --threads 1
          --prefetch-threads 1 --seed 1)
  mpirun_2 "$train" "${common[@]}" --epochs 1 --max-steps 1 --lr 0 --checkpoint untrained
  mpirun_2 "$train" "${common[@]}" --epochs 2 --lr 0.003 --checkpoint ck
  before=$(summary val_metric untrained/metrics.jsonl)
  dice=$(summary val_metric ck/metrics.jsonl) ranks=$(summary ranks ck/metrics.jsonl)
  check "unet3d on $ranks ranks: mean Dice $dice >= 0.6 and >= untrained $before + 0.3" "$ranks == 2 and $dice >= 0.6 and $dice >= $before + 0.3"
  ;;
learn_resnet50_defaults)
  # A user who gives no optimizer options gets a run that learns: default settings (sgd, lr 0.1 x 32/256, warm-up
  # and cosine decay): 4 classes (chance 0.25), 480 images of 48x48, 2 ranks x batch 16, 4 epochs,
  # no --lr/--optimizer/--checkpoint. --input-size 48 trains at the images' own size (the default,
  # 224, would upsample them ~20x in pixels and make this a half-hour test).
  "$datagen" imagefolder -o data --samples 480 --classes 4 --size 48 --seed 11 > /dev/null
  mpirun_2 "$train" --model resnet50 --data data/train --val data/val --epochs 4 --batch 16 --input-size 48 \
    --threads 1 --prefetch-threads 1 > out.txt
  cat out.txt
  first=$(head -1 out.txt)
  [[ $first == *"lr 0.0125 (default 0.1 x 32/256)"* ]] || { echo "FAIL first line: $first"; exit 1; }
  dir=$(sed -n 's/.*checkpoint and metrics in \(run-resnet50-[0-9-]*\) (default.*/\1/p' <<< "$first")
  [[ -n $dir && -f $dir/checkpoint.bin && -f $dir/metrics.jsonl ]] || { echo "FAIL default run directory '$dir'"; exit 1; }
  acc=$(summary val_metric "$dir/metrics.jsonl")
  check "resnet50 with default optimizer settings: val top-1 $acc >= 0.9 (chance 0.25), outputs in $dir" "$acc >= 0.9"
  ;;
plot_metrics)
  # Input stall in every step record and the summary, and scripts/plot-metrics.sh's four PNG curves.
  "$datagen" cosmoflow -o data --samples 24 --size 32 --seed 3 --val-fraction 0.3 > /dev/null
  "$train" --model cosmoflow --data data/train --val data/val --epochs 2 --batch 4 --optimizer adam --threads 2 \
    --checkpoint ck > out.txt
  grep "summary:" out.txt | grep -q "input stall" || { echo "FAIL no input stall in the summary"; cat out.txt; exit 1; }
  $py - ck/metrics.jsonl << 'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [e for e in lines if e["event"] == "step"]
assert steps and all(0 <= e["input_stall_pct"] <= 100 and e["data_wait_s"] >= 0 for e in steps), "stall fields"
assert all(e["compute_samples_per_s"] >= e["samples_per_s"] > 0 for e in steps), "throughput with the wait <= without"
s = lines[-1]
assert s["event"] == "summary" and 0 <= s["input_stall_pct"] <= 100 and s["compute_samples_per_s"] >= s["samples_per_s"]
print("ok   stall fields in %d step records and the summary (run: %.1f%% input stall)" % (len(steps), s["input_stall_pct"]))
EOF
  "$here/../../scripts/plot-metrics.sh" ck/metrics.jsonl plots
  for png in loss metric throughput stall; do
    [[ $(head -c 8 "plots/$png.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a && $(stat -c %s "plots/$png.png") -gt 2000 ]] ||
      { echo "FAIL plots/$png.png is not a PNG curve"; exit 1; }
  done
  echo "ok   plot-metrics.sh wrote loss, metric, throughput and stall PNGs"
  echo "not json" > bad.jsonl
  if "$here/../../scripts/plot-metrics.sh" bad.jsonl plots2 2> err.txt; then echo "FAIL accepted a non-metrics file"; exit 1; fi
  grep -q "not a JSON line" err.txt && echo "ok   refuses a non-metrics file: $(cat err.txt)"
  ;;
resume_bitwise)
  # k steps straight == k/2 steps, stop, --resume, k/2 more: checkpoints byte-identical. The stop
  # falls mid-epoch (8 steps per epoch), so the resumed run must also skip the right batches.
  "$datagen" cosmoflow -o data --samples 40 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 2 --batch 4 --lr 0.001 --optimizer adam --schedule cosine
          --warmup-epochs 0.5 --threads 2 --seed 9)
  "$train" "${common[@]}" --checkpoint straight --max-steps 14
  "$train" "${common[@]}" --checkpoint split --max-steps 5
  "$train" "${common[@]}" --checkpoint split --max-steps 14 --resume
  if cmp straight/checkpoint.bin split/checkpoint.bin; then echo "ok   resume: 14 steps straight == 5 + resume + 9, bit-identical"
  else $py "$here/compare_checkpoints.py" straight/checkpoint.bin split/checkpoint.bin 0 || true; echo "FAIL resume differs"; exit 1; fi
  # SIGTERM (Slurm's at the time limit) stops at the end of a step with a checkpoint the run resumes from: the
  # resumed run to the straight run's 14 steps gives its checkpoint. The signalled run is given all 20 steps of its
  # 2 epochs, so that a late signal still stops it; a stop after step 13 is a failure of the test's timing.
  "$train" "${common[@]}" --checkpoint signalled > stop.out &
  stop_mid_run TERM signalled $!
  (( stopped_at < 14 )) || { echo "FAIL stopped at step $stopped_at, not before 14"; exit 1; }
  "$train" "${common[@]}" --checkpoint signalled --max-steps 14 --resume
  cmp straight/checkpoint.bin signalled/checkpoint.bin || { echo "FAIL the resume after SIGTERM differs"; exit 1; }
  echo "ok   SIGTERM: stopped after step $stopped_at, resumed to the straight run's checkpoint"
  # 300 SIGTERMs, one every 2 ms or so: the run still stops at a step's end. (Before the signals were taken by a
  # thread of their own, one that reached oneDNN's JIT GEMM, which points the stack register at the heap, could
  # corrupt the heap: a run so signalled aborted at --threads 1 whenever the heap's layout showed it.)
  # (common's --threads 2 becomes --prefetch-threads 2.)
  "$train" "${common[@]/--threads/--prefetch-threads}" --threads 1 --checkpoint storm > stop.out &
  stop_mid_run TERM storm $! "" 300
  [[ -s storm/checkpoint.bin ]] || { echo "FAIL no checkpoint after the SIGTERMs"; exit 1; }
  echo "ok   300 SIGTERMs: stopped after step $stopped_at with a checkpoint"
  # A stop in a step that ends its epoch (here every step does): that epoch's validation runs, then the run stops.
  "$datagen" cosmoflow -o tiny --samples 8 --size 32 --seed 3 --val-fraction 0.5 > /dev/null
  "$train" --model cosmoflow --data tiny/train --val tiny/val --batch 4 --epochs 100 --threads 1 --prefetch-threads 1 \
    --checkpoint epochs > stop.out 2> /dev/null &
  stop_mid_run TERM epochs $!
  tail -2 epochs/metrics.jsonl | head -1 | grep -q "\"event\":\"validation\",\"epoch\":$((stopped_at - 1)),\"step\":$stopped_at," ||
    { echo "FAIL no validation of the epoch of step $stopped_at before the stop:"; tail -3 epochs/metrics.jsonl; exit 1; }
  echo "ok   a stop at an epoch's last step: epoch $stopped_at validated, then stopped"
  # A run that ends inside an epoch (--max-steps) validates there: its record goes to metrics.jsonl too (it was only
  # in the summary).
  "$datagen" cosmoflow -o mid --samples 16 --size 32 --seed 3 --val-fraction 0.25 > /dev/null
  "$train" --model cosmoflow --data mid/train --val mid/val --batch 2 --max-steps 3 --threads 1 --prefetch-threads 1 \
    --checkpoint mid-run > /dev/null 2> mid.err
  tail -2 mid-run/metrics.jsonl | head -1 | grep -q '"event":"validation","epoch":0,"step":3,"mae":' &&
    grep -q "^fanstore-train: step 3 (in epoch 1) validation mae " mid.err ||
    { echo "FAIL no validation record where the run ended:"; tail -2 mid-run/metrics.jsonl; cat mid.err; exit 1; }
  echo "ok   a run ending inside an epoch records its validation"
  ;;
resume_rank0_decides)
  # Rank 0 alone decides whether to resume and sends its checkpoint to the others: here rank 1's
  # checkpoint directory is empty (as a node-local one would be), yet 2 ranks x (5 + resume + 9) steps
  # must give rank 0's checkpoint of 14 steps straight, byte for byte.
  "$datagen" cosmoflow -o data --samples 40 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 2 --batch 2 --lr 0.001 --optimizer adam --threads 1
          --prefetch-threads 1 --seed 9)
  mpirun_2 "$train" "${common[@]}" --checkpoint straight --max-steps 14
  mpirun_2 "$train" "${common[@]}" --checkpoint split --max-steps 5
  mkdir -p elsewhere
  mpirun_mpmd() {  # rank 0 resumes from split/, rank 1 from the empty elsewhere/
    local mpirun=${FANSTORE_MPIRUN:-$(command -v mpirun || true)} root_flag=()
    [[ $(id -u) == 0 ]] && root_flag=(--allow-run-as-root)
    # Before the fix rank 1 started from scratch and waited forever for 5 more steps than rank 0 ran.
    timeout 600 "$mpirun" "${root_flag[@]}" --oversubscribe --bind-to none -np 1 "$train" "${common[@]}" --checkpoint split \
      --max-steps 14 --resume : -np 1 "$train" "${common[@]}" --checkpoint elsewhere --max-steps 14 --resume
  }
  mpirun_mpmd
  if cmp straight/checkpoint.bin split/checkpoint.bin; then echo "ok   rank 1 without a checkpoint resumed from rank 0's"
  else $py "$here/compare_checkpoints.py" straight/checkpoint.bin split/checkpoint.bin 0 || true; echo "FAIL resume differs"; exit 1; fi
  # A stop signal that reaches one rank only (here rank 1, which writes nothing) stops every rank at the same step.
  mpirun_2 "$train" "${common[@]}" --checkpoint signalled > stop.out 2> stop.err &
  stop_mid_run USR1 signalled $! 1
  (( stopped_at < 14 )) || { echo "FAIL stopped at step $stopped_at, not before 14"; exit 1; }
  mpirun_2 "$train" "${common[@]}" --checkpoint signalled --max-steps 14 --resume
  cmp straight/checkpoint.bin signalled/checkpoint.bin || { echo "FAIL the resume after SIGUSR1 differs"; exit 1; }
  echo "ok   SIGUSR1 to rank 1 alone: both ranks stopped after step $stopped_at, resumed to the straight run's checkpoint"
  ;;
two_ranks_match_one)
  # 2 ranks x batch 4 == 1 rank x batch 8 (CosmoFlow has no batch norm, so the maths is the same;
  # only the float summation order differs). Tolerance: max |w diff| <= 1e-5 after 6 SGD steps.
  "$datagen" cosmoflow -o data --samples 48 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 1 --lr 0.01 --optimizer sgd --momentum 0.9 --seed 4 --prefetch-threads 1)
  "$train" "${common[@]}" --batch 8 --threads 2 --checkpoint one
  mpirun_2 "$train" "${common[@]}" --batch 4 --threads 1 --bucket-mb 1 --checkpoint two
  $py "$here/compare_checkpoints.py" one/checkpoint.bin two/checkpoint.bin 1e-5
  echo "ok   2 ranks x 4 match 1 rank x 8"
  # A bucket past 2^64 bytes is one bucket, as any past the model's size (the byte count wrapped: one per tensor).
  mpirun_2 "$train" "${common[@]}" --batch 4 --threads 1 --max-steps 1 --bucket-mb 1e20 --checkpoint huge > /dev/null
  check "--bucket-mb 1e20 gives one bucket" "$(summary allreduce_buckets huge/metrics.jsonl) == 1"
  ;;
guard_rollback)
  # A NaN written into a weight after step 3 must be caught by step 4's loss and rolled back.
  "$datagen" cosmoflow -o data --samples 40 --size 32 --seed 3 --val-fraction 0 > /dev/null
  "$train" --model cosmoflow --data data/train --epochs 1 --batch 4 --lr 0.001 --optimizer adam --threads 2 \
    --checkpoint ck --inject-nan-at-step 3 2> err.txt
  cat err.txt
  # The rollback names the step whose loss was bad, as its step record does (it said step 3, one too few).
  grep -q '^fanstore-train: warning: step 4: NaN/Inf' err.txt || { echo "FAIL the warning does not name step 4"; exit 1; }
  $py - ck/metrics.jsonl << 'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
rollbacks = [(e["step"], e["loss"]) for e in lines if e["event"] == "rollback"]
steps = {e["step"]: e["loss"] for e in lines if e["event"] == "step"}
assert len(rollbacks) == 1 and rollbacks[0][0] == 4 and steps[4] == rollbacks[0][1] != steps[3], (rollbacks, steps)
print("ok   the rollback record says step 4, whose step record has the rejected loss %g" % steps[4])
PY
  loss=$(summary final_loss ck/metrics.jsonl) rollbacks=$(summary rollbacks ck/metrics.jsonl)
  check "guard: $rollbacks rollback, final loss $loss finite" "$rollbacks == 1 and '$loss' != 'None'"
  ;;
bad_input)
  "$datagen" imagefolder -o img --samples 24 --classes 3 --size 32 --seed 2 --val-fraction 0 > /dev/null
  "$datagen" cosmoflow -o cosmo --samples 8 --size 32 --seed 2 --val-fraction 0 > /dev/null
  run_expect_fail() {  # run_expect_fail "what" "text the one line must hold" ARGS...
    local what=$1 expect=$2; shift 2
    expect_fail "$what" "$expect" "$@" --checkpoint ck_fail --threads 2
  }
  expect_fail() {  # expect_fail "what" "text the one line must hold" ARGS...: exit status 1 and that line
    local what=$1 expect=$2 status=0; shift 2
    "$train" "$@" > out.txt 2> err.txt || status=$?
    if (( status != 1 )); then echo "FAIL $what: exit $status, not 1"; cat err.txt; exit 1; fi
    if [[ $(wc -l < err.txt) -ne 1 ]] || ! grep -qF -- "$expect" err.txt; then
      echo "FAIL $what: expected one line with '$expect', got:"; cat err.txt; exit 1
    fi
    echo "ok   $what: $(cat err.txt)"
  }
  run_expect_fail "missing data dir" "$work/nope" --model resnet50 --data "$work/nope" --input-size 32 --batch 4
  mkdir -p img_empty/train/a img_empty/train/b && cp img/train/class_0000/*.jpg img_empty/train/a/
  run_expect_fail "empty class" "img_empty/train/b" --model resnet50 --data img_empty/train --input-size 32 --batch 4
  bad=$(ls img/train/class_0001/*.jpg | head -1)
  head -c 300 "$bad" > trunc.jpg && mv trunc.jpg "$bad"
  run_expect_fail "corrupt JPEG" "$bad" --model resnet50 --data img/train --input-size 32 --batch 4 --epochs 1
  "$train" --model resnet50 --data img/train --input-size 32 --batch 4 --epochs 1 --lr 0.001 --optimizer adam --threads 2 \
    --checkpoint ck_skip --skip-bad-samples > out.txt 2> err.txt || { echo "FAIL skip-bad-samples run"; cat err.txt; exit 1; }
  grep -q "skipping bad sample" err.txt && grep -q "bad samples" out.txt
  echo "ok   --skip-bad-samples: $(grep -c 'skipping bad sample' err.txt) warning(s); $(grep summary out.txt)"
  badh5=$(ls cosmo/train/*.h5 | sed -n 3p)
  echo "garbage" > "$badh5"
  run_expect_fail "corrupt HDF5" "$badh5" --model cosmoflow --data cosmo/train --batch 2 --epochs 1
  "$datagen" cosmoflow -o cosmo64 --samples 2 --size 64 --seed 2 --val-fraction 0 > /dev/null
  rm -f "$badh5" && cp cosmo64/train/univ_00000.h5 "$badh5"
  run_expect_fail "wrong shape" "$badh5" --model cosmoflow --data cosmo/train --batch 2 --epochs 1
  run_expect_fail "fewer samples than a batch" "cosmo64/train" --model cosmoflow --data cosmo64/train --batch 4
  "$datagen" imagefolder -o img2 --samples 8 --classes 2 --size 32 --seed 2 --val-fraction 0 > /dev/null
  run_expect_fail "--val with other classes" "give --val the same class directories" --model resnet50 \
    --data img2/train --val img/train --input-size 32 --batch 4
  # Options that cannot be right: one line before any work (NaN passes a plain "< 0" check).
  ok=(--model cosmoflow --data cosmo64/train --batch 1)
  run_expect_fail "--lr nan" "--lr: a finite number >= 0 is needed, not nan" "${ok[@]}" --lr nan
  run_expect_fail "--momentum inf" "--momentum: a finite number >= 0 is needed" "${ok[@]}" --momentum inf
  run_expect_fail "negative --batch" "--batch: a finite number >= 0 is needed, not -3" "${ok[@]}" --batch -3
  run_expect_fail "negative --classes" "--classes: a finite number >= 0" "${ok[@]}" --classes -3
  run_expect_fail "--epochs 0" "--epochs: a finite number >= 1" "${ok[@]}" --epochs 0
  run_expect_fail "warm-up past the run" "--warmup-epochs must lie between 0 and --epochs (1)" "${ok[@]}" \
    --epochs 1 --warmup-epochs 1e300
  run_expect_fail "a grid of 2^32 + 1 ranks" "more than 1048576 ranks in all" "${ok[@]}" --grid 3,43,281,947881
  # Thread counts far beyond any node: one line (they crashed: a segfault, std::terminate).
  for opt in --threads --prefetch-threads; do
    if "$train" "${ok[@]}" --checkpoint ck_threads "$opt" 100000 > out.txt 2> err.txt || [[ $(wc -l < err.txt) -ne 1 ]] ||
        ! grep -qF -- "$opt: a thread count from 0 to 1024 is needed, not 100000" err.txt; then
      echo "FAIL $opt 100000:"; cat err.txt; exit 1
    fi
    echo "ok   $opt 100000: $(cat err.txt)"
  done
  run_expect_fail "--seed past 2^64" "--seed: a seed from 0 to 18446744073709551615 is needed, not 18446744073709551616" \
    "${ok[@]}" --seed 18446744073709551616
  run_expect_fail "an option twice" "--epochs is given 2 times: pass it once" "${ok[@]}" --epochs 1 --epochs 2
  # CLI11 named the wrong thing: "--model is required" for a misspelt --model, "Could not convert" for a value.
  expect_fail "a misspelt option" "error: unknown option --modle (--help lists the options)" --modle cosmoflow --describe
  run_expect_fail "--epochs past an int" "--epochs 1000000000000 is not a value --epochs takes" "${ok[@]}" \
    --epochs 1000000000000
  # Options that would be ignored: refused, as the tournament's are without --trainers.
  run_expect_fail "--auto-trials without --grid auto" "--auto-trials sets how --grid auto chooses its grid" "${ok[@]}" \
    --auto-trials 5
  run_expect_fail "--input-size other than the files'" \
    "holds volumes of 64^3 but --input-size is 32: CosmoFlow trains at the files' size" "${ok[@]}" --input-size 32
  run_expect_fail "negative --inject-nan-at-step" "--inject-nan-at-step: a finite number >= 0" "${ok[@]}" \
    --inject-nan-at-step -3
  # A seed is decimal: CLI11 alone refused 099 as a bad octal number (and took 010 for 8).
  "$train" --model cosmoflow --describe --seed 099 > /dev/null || { echo "FAIL --seed 099 refused"; exit 1; }
  # fanstore-datagen's command-line errors: one line, exit 1 (CLI11's own were two lines and exit 106).
  for args in "cosmoflow --samples 2" "" "cosmoflow -o x --samples 2 --threads 0"; do
    status=0
    "$datagen" $args > out.txt 2> err.txt || status=$?
    if (( status != 1 )) || [[ $(wc -l < err.txt) -ne 1 ]] || ! grep -q "^fanstore-datagen: error: " err.txt; then
      echo "FAIL fanstore-datagen $args: exit $status:"; cat err.txt; exit 1
    fi
    echo "ok   fanstore-datagen $args: $(cat err.txt)"
  done
  # --describe and --benchmark would ignore what the file options ask for.
  expect_fail "--describe with --data" "--describe prints the model's layers and runs nothing" --model cosmoflow \
    --describe --data cosmo64/train
  expect_fail "--benchmark with --val" "--benchmark times synthetic batches and reads or writes no files" \
    --model cosmoflow --benchmark 1 --input-size 32 --val cosmo64/train
  # Options that would be ignored: --describe with a grid, --explain with --benchmark (it exits before timing),
  # --zero-init-residual on a model without residual blocks.
  expect_fail "--describe with --grid" "runs nothing: drop --grid, --trainers" --model cosmoflow --describe \
    --grid 1,2,1,1 --trainers 2
  expect_fail "--benchmark with --explain" "--explain prints the grid's plan and exits, so nothing would be timed" \
    --model cosmoflow --benchmark 1 --input-size 32 --explain --grid 1,1,1,1
  expect_fail "--zero-init-residual for cosmoflow" "--zero-init-residual sets ResNet-50's residual blocks" \
    --model cosmoflow --describe --zero-init-residual true
  # A model that cannot fit in memory: what to pass, not "std::bad_alloc".
  expect_fail "--input-size 100000" "error: out of memory (std::bad_alloc): " --model cosmoflow --describe \
    --input-size 100000
  # --val with other targets names the target shapes (it named the samples' shapes, which were the same).
  if $py -c 'import h5py' 2> /dev/null; then
    mkdir -p val5 && for f in cosmo64/train/*.h5; do cp "$f" val5/; done
    $py -c '
import glob, h5py, numpy as np
for f in glob.glob("val5/*.h5"):
    with h5py.File(f, "r+") as h:
        t = h["unitPar"][()]
        del h["unitPar"]
        h["unitPar"] = np.concatenate([t, t[:1]])' || { echo "FAIL could not write val5's targets"; exit 1; }
    run_expect_fail "--val with 5 targets" "val5: targets have shape (5), the training data's (4)" --model cosmoflow \
      --data cosmo64/train --val val5 --batch 1
  else
    echo "skip --val with 5 targets: no h5py"
  fi
  # An empty checkpoint.bin is a damaged checkpoint, not "none yet" (which started afresh over it).
  "$train" "${ok[@]}" --lr 0.001 --max-steps 1 --checkpoint ck_empty > /dev/null 2>&1
  : > ck_empty/checkpoint.bin
  if "$train" "${ok[@]}" --lr 0.001 --max-steps 2 --checkpoint ck_empty --resume > out.txt 2> err.txt \
    || ! grep -q "too short to be a checkpoint" err.txt || [[ -s ck_empty/checkpoint.bin ]]; then
    echo "FAIL an empty checkpoint.bin on --resume:"; cat err.txt; exit 1
  fi
  echo "ok   empty checkpoint on --resume: $(grep error: err.txt)"
  # A checkpoint of other layer shapes names the first that differs, both shapes and the likely cause.
  "$datagen" imagefolder -o img3 --samples 12 --classes 3 --size 32 --seed 2 --val-fraction 0 > /dev/null
  "$train" --model resnet50 --data img3/train --input-size 32 --batch 4 --optimizer adam --max-steps 1 --threads 2 \
    --checkpoint ck_classes > /dev/null 2>&1
  rm -rf ck_fail && cp -r ck_classes ck_fail  # run_expect_fail resumes from ck_fail
  run_expect_fail "resume on other classes" \
    "fc.weight is [3, 2048] in the checkpoint and [2, 2048] here (other classes in the data, or --classes?)" \
    --model resnet50 --data img2/train --input-size 32 --batch 4 --optimizer adam --max-steps 2 --resume
  "$datagen" cosmoflow -o cosmo32 --samples 2 --size 32 --seed 2 --val-fraction 0 > /dev/null
  "$train" --model cosmoflow --data cosmo32/train --batch 1 --lr 0.001 --max-steps 1 --threads 2 --checkpoint ck_size \
    > /dev/null 2>&1
  rm -rf ck_fail && cp -r ck_size ck_fail
  run_expect_fail "resume on another input size" \
    "fc1.weight is [128, 512] in the checkpoint and [128, 4096] here (another input size of the data, or --input-size?)" \
    "${ok[@]}" --lr 0.001 --max-steps 2 --resume
  # A run resumed at its end says so instead of a summary of no steps and a NaN loss.
  "$train" "${ok[@]}" --lr 0.001 --max-steps 1 --checkpoint ck_end > /dev/null 2>&1
  "$train" "${ok[@]}" --lr 0.001 --max-steps 1 --checkpoint ck_end --resume > out.txt 2> err.txt \
    && grep -q "is at the run's end (step 1, epoch 0 of 1); nothing to train: pass a larger --max-steps" out.txt \
    || { echo "FAIL resuming a run at its end:"; cat out.txt err.txt; exit 1; }
  echo "ok   resumed at the end: $(grep 'nothing to train' out.txt)"
  ;;
resume_rebatch)
  # --resume on another batch maps the position by the samples done (it crashed with "cannot create std::vector
  # larger than max_size()", or skipped the rest of the epoch with no step and a NaN loss).
  "$datagen" cosmoflow -o data --samples 40 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --lr 0.001 --optimizer adam --threads 2 --prefetch-threads 1 --seed 9)
  "$train" "${common[@]}" --epochs 2 --batch 2 --max-steps 6 --checkpoint ck > /dev/null
  "$train" "${common[@]}" --epochs 2 --batch 8 --resume --checkpoint ck > out.txt 2> err.txt ||
    { echo "FAIL resume with batch 8:"; cat out.txt err.txt; exit 1; }
  grep -qF "its step 6 (epoch 0, batch 6) is step 1 (epoch 0, batch 1) of this batching" err.txt ||
    { echo "FAIL the warning does not give the mapped position:"; cat err.txt; exit 1; }
  $py - ck/metrics.jsonl << 'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [(e["step"], e["epoch"]) for e in lines if e["event"] == "step"]
# 6 steps of 2 samples (12 of epoch 0's 40), then batch 8: epoch 0 goes on at its batch 1 (8 samples), steps 2..5,
# and epoch 1 is steps 6..10.
assert steps == [(s, 0) for s in range(1, 7)] + [(s, 0) for s in range(2, 6)] + [(s, 1) for s in range(6, 11)], steps
s = lines[-1]
assert s["event"] == "summary" and s["steps"] == 10 and s["final_loss"] is not None, s
print("ok   batch 2 -> 8: 6 steps of 2 samples went on as step 1 of 5 per epoch, then epoch 1; final loss %g" % s["final_loss"])
PY
  # The same global batch (1 x 4 resumed on 2 x 2) deals each step the same samples: the warning said "the data
  # order changes".
  "$train" "${common[@]}" --epochs 2 --batch 4 --max-steps 2 --checkpoint same > /dev/null
  mpirun_2 "$train" --model cosmoflow --data data/train --lr 0.001 --optimizer adam --threads 1 --prefetch-threads 1 \
    --seed 9 --epochs 2 --batch 2 --max-steps 3 --resume --checkpoint same > out.txt 2> err.txt || { echo "FAIL resume on 2 x 2:"; cat out.txt err.txt; exit 1; }
  grep -qF "of this batching (each step takes the same samples, summed in another order: the run is not" err.txt ||
    { echo "FAIL the warning on the same global batch:"; cat err.txt; exit 1; }
  echo "ok   the same global batch on other ranks: $(grep -o 'each step takes[^)]*' err.txt)"
  # An epoch that the mapping finds done goes on with the next one, or ends the run with the "nothing to train" line.
  "$datagen" cosmoflow -o data20 --samples 20 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common20=(--model cosmoflow --data data20/train --lr 0.001 --optimizer adam --threads 2 --prefetch-threads 1)
  "$train" "${common20[@]}" --seed 9 --epochs 1 --batch 2 --max-steps 9 --checkpoint end > /dev/null
  "$train" "${common20[@]}" --seed 9 --epochs 1 --batch 8 --resume --checkpoint end > out.txt 2> err.txt &&
    grep -q "is at the run's end (step 2, epoch 1 of 1); nothing to train: pass more --epochs" out.txt ||
    { echo "FAIL an epoch done in the new batching:"; cat out.txt err.txt; exit 1; }
  echo "ok   18 of 20 samples done, batch 8 (2 steps per epoch): $(cat out.txt)"
  # Another --seed on --resume: the checkpoint's goes on, with a warning (it was ignored without a word).
  "$train" "${common20[@]}" --seed 5 --epochs 2 --batch 8 --resume --checkpoint end > out.txt 2> err.txt ||
    { echo "FAIL resume into epoch 1:"; cat out.txt err.txt; exit 1; }
  grep -qF "warning: checkpoint was written with --seed 9; continuing with its seed" err.txt ||
    { echo "FAIL no warning for another --seed:"; cat err.txt; exit 1; }
  [[ $(summary steps end/metrics.jsonl) == 4 && $(summary final_loss end/metrics.jsonl) != None ]] ||
    { echo "FAIL epoch 1 after the mapping:"; cat out.txt; exit 1; }
  echo "ok   then epoch 1 with --seed 5: $(grep -o 'warning: checkpoint was written with --seed 9[^(]*' err.txt)"
  # The same batching on fewer samples: a position past the new epoch's end goes on with the next epoch (it died
  # with "cannot create std::vector larger than max_size()").
  mkdir -p data4 && cp data20/train/univ_0000[0-3].h5 data4/
  "$train" "${common20[@]}" --epochs 2 --batch 1 --max-steps 7 --checkpoint shrunk > /dev/null
  "$train" --model cosmoflow --data data4 --lr 0.001 --optimizer adam --threads 2 --prefetch-threads 1 --epochs 2 \
    --batch 1 --resume --checkpoint shrunk > out.txt 2> err.txt ||
    { echo "FAIL resume on fewer samples:"; cat out.txt err.txt; exit 1; }
  grep -qF "checkpoint's step 7 (epoch 0, batch 7) is past the 4 steps of an epoch of this data" err.txt &&
    [[ $(summary steps shrunk/metrics.jsonl) == 8 ]] || { echo "FAIL resume on fewer samples:"; cat out.txt err.txt; exit 1; }
  echo "ok   resumed on 4 of 20 samples: $(grep -o "warning: checkpoint's step 7.*" err.txt)"
  ;;
run_directories)
  # Default directories of runs started in the same second, a directory another run holds, a fresh run into a
  # directory with a checkpoint, and a --checkpoint that is a file.
  "$datagen" cosmoflow -o data --samples 8 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --batch 2 --lr 0.001 --threads 1 --prefetch-threads 1 --max-steps 1)
  # Every name this minute's runs could get is taken already: the run must take the next free one, "-2".
  now=$(date +%s)
  for i in $(seq 0 120); do mkdir -p "run-cosmoflow-$(date -d "@$((now + i))" +%Y%m%d-%H%M%S)"; done
  "$train" "${common[@]}" > out.txt
  dir=$(sed -n 's/.*checkpoint and metrics in \(run-cosmoflow-[0-9-]*\) (default.*/\1/p' out.txt)
  [[ $dir == *-2 && -f $dir/checkpoint.bin && $(find run-cosmoflow-* -name checkpoint.bin | wc -l) == 1 ]] ||
    { echo "FAIL the default directory when its name is taken: '$dir'"; cat out.txt; exit 1; }
  echo "ok   a default name already taken: the run wrote $dir"
  # Two runs at once with the default directory: two directories (they shared one and one failed in rename).
  "$train" "${common[@]}" > a.txt 2> a.err & pid=$!
  "$train" "${common[@]}" > b.txt 2> b.err || { echo "FAIL the second of two runs:"; cat b.err; exit 1; }
  wait "$pid" || { echo "FAIL the first of two runs:"; cat a.err; exit 1; }
  a=$(sed -n 's/.*metrics in \(run-[^ ]*\) (default.*/\1/p' a.txt) b=$(sed -n 's/.*metrics in \(run-[^ ]*\) (default.*/\1/p' b.txt)
  [[ -n $a && -n $b && $a != "$b" && -f $a/checkpoint.bin && -f $b/checkpoint.bin ]] ||
    { echo "FAIL two runs at once: '$a' '$b'"; exit 1; }
  echo "ok   two runs at once: $a and $b"
  expect_one_line() {  # expect_one_line "what" "text" ARGS...
    local what=$1 expect=$2; shift 2
    if "$train" "${common[@]}" "$@" > out.txt 2> err.txt; then echo "FAIL $what: exit 0"; exit 1; fi
    if [[ $(wc -l < err.txt) -ne 1 ]] || ! grep -qF -- "$expect" err.txt; then
      echo "FAIL $what: expected one line with '$expect', got:"; cat err.txt; exit 1
    fi
    echo "ok   $what: $(cat err.txt)"
  }
  # A run into a directory another run is using (here the lock is held by flock(1) around it).
  mkdir -p busy
  flock busy/.fanstore-train.lock "$train" "${common[@]}" --checkpoint busy > out.txt 2> err.txt &&
    { echo "FAIL a run into a locked directory: exit 0"; exit 1; }
  [[ $(wc -l < err.txt) -eq 1 ]] && grep -qF -- "--checkpoint busy: another fanstore-train run is using this directory" err.txt &&
    [[ ! -e busy/checkpoint.bin && ! -e busy/metrics.jsonl ]] || { echo "FAIL a locked directory:"; cat err.txt; exit 1; }
  echo "ok   a directory another run holds: $(cat err.txt)"
  # A fresh run into a directory with a checkpoint: refused, the checkpoint and metrics untouched.
  "$train" "${common[@]}" --checkpoint ck > /dev/null
  cp ck/checkpoint.bin kept.bin && cp ck/metrics.jsonl kept.jsonl
  expect_one_line "a fresh run over a checkpoint" \
    "ck holds a checkpoint (ck/checkpoint.bin): pass --resume to continue it, or choose another --checkpoint" --checkpoint ck
  cmp ck/checkpoint.bin kept.bin && cmp ck/metrics.jsonl kept.jsonl
  echo "ok   the checkpoint and metrics.jsonl are untouched"
  # --resume still goes on (the whole epoch: 4 steps).
  "$train" "${common[@]/--max-steps/--checkpoint-every}" --checkpoint ck --resume > /dev/null
  [[ $(summary steps ck/metrics.jsonl) == 4 ]] || { echo "FAIL --resume after the refusal"; exit 1; }
  touch ckfile
  expect_one_line "--checkpoint names a file" "--checkpoint ckfile: exists and is not a directory" --checkpoint ckfile
  # --metrics naming another run's file: refused while that run writes it (it got NUL bytes from the truncation) and,
  # without --resume, once it holds records (they were thrown away); with --resume the run appends.
  cp ck/metrics.jsonl other.jsonl && cp other.jsonl other.kept
  flock other.jsonl "$train" "${common[@]}" --checkpoint m1 --metrics other.jsonl > out.txt 2> err.txt &&
    { echo "FAIL a run into a metrics file another run writes: exit 0"; exit 1; }
  grep -qF -- "--metrics other.jsonl: another fanstore-train run writes this file" err.txt && cmp other.jsonl other.kept ||
    { echo "FAIL a metrics file another run writes:"; cat err.txt; exit 1; }
  echo "ok   a metrics file another run writes: $(cat err.txt)"
  expect_one_line "a fresh run over another run's --metrics" \
    "--metrics other.jsonl holds another run's records: pass --resume to append to them" --checkpoint m2 --metrics other.jsonl
  cmp other.jsonl other.kept
  # A refused run leaves no directory it made (it left one holding only the lock file), the default one included.
  runs_before=$(ls -d run-* | wc -l)
  expect_one_line "a fresh run over another run's --metrics, default directory" \
    "--metrics other.jsonl holds another run's records" --metrics other.jsonl
  [[ ! -e m2 && $(ls -d run-* | wc -l) == "$runs_before" ]] || { echo "FAIL a refused run left its directory:"; ls -a m2 run-*; exit 1; }
  # A directory that was there before keeps being there, without the lock file.
  mkdir -p given
  expect_one_line "a fresh run over another run's --metrics, a given directory" \
    "--metrics other.jsonl holds another run's records" --checkpoint given --metrics other.jsonl
  [[ -d given && -z $(ls -A given) ]] || { echo "FAIL a refused run into an existing directory:"; ls -a given; exit 1; }
  echo "ok   a refused run leaves no directory behind, and an existing one as it was"
  "$train" "${common[@]}" --checkpoint m3 --metrics other.jsonl --resume > /dev/null 2>&1
  [[ $(grep -c '"event":"summary"' other.jsonl) == $(($(grep -c '"event":"summary"' other.kept) + 1)) ]] && head -c "$(stat -c %s other.kept)" other.jsonl | cmp - other.kept ||
    { echo "FAIL --resume did not append to the metrics file"; exit 1; }
  echo "ok   --metrics with --resume appends to the records there"
  ;;
skip_bad_two_ranks)
  # --skip-bad-samples on 2 ranks: the summary counts every rank's skips (it counted rank 0's only).
  "$datagen" cosmoflow -o data --samples 8 --size 32 --seed 3 --val-fraction 0 > /dev/null
  echo garbage > data/train/univ_00001.h5 && echo garbage > data/train/univ_00006.h5
  mpirun_2 "$train" --model cosmoflow --data data/train --batch 2 --epochs 2 --lr 0.001 --threads 1 --prefetch-threads 1 \
    --skip-bad-samples --checkpoint ck > out.txt 2> err.txt || { echo "FAIL the run:"; cat out.txt err.txt; exit 1; }
  warned=$(grep -c "skipping bad sample" err.txt) counted=$(summary bad_samples ck/metrics.jsonl)
  check "summary's bad samples $counted == the $warned warnings of both ranks (2 files x 2 epochs)" \
    "$counted == $warned == 4"
  ;;
benchmark_format)
  line=$("$train" --model cosmoflow --benchmark 2 --batch 2 --input-size 32 --threads 2 2> /dev/null)
  echo "$line"
  [[ "$line" =~ ^train:\ [0-9.]+\ samples/s,\ inference:\ [0-9.]+\ samples/s,\ device:\ cpu-onednn,\ 2\ threads$ ]] ||
    { echo "FAIL format"; exit 1; }
  echo "ok   benchmark line format (with the device)"
  ;;
ltfb_data_parallel)
  # 4 ranks as 2 trainers x 2 ranks (data parallel), a round every 4 steps. Trainer 1's weights are
  # poisoned right before round 1: it must lose that round on both sides, take trainer 0's model, state
  # and all, bit for bit, and the run must finish without a rollback.
  "$datagen" cosmoflow -o data --samples 96 --size 32 --seed 3 --val-fraction 0.2 > /dev/null
  mpirun_n 4 "$train" --model cosmoflow --data data/train --val data/val --epochs 2 --batch 2 --optimizer adam --lr 0.001 \
    --threads 1 --prefetch-threads 1 --trainers 2 --ltfb-interval 4 --inject-nan-at-step 4 --inject-nan-trainer 1 \
    --checkpoint ck > out.txt
  cat out.txt
  check_rounds ck/metrics.jsonl 4
  $py - ck/metrics.jsonl << 'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
r1 = {e["trainer"]: e for e in lines if e["event"] == "tournament" and e["round"] == 1}
assert r1[1]["own_score"] is None and r1[1]["kept"] == "partner" and r1[0]["kept"] == "own", r1
assert r1[0]["state_hash"] == r1[1]["state_hash"], "the poisoned trainer does not hold the winner's exact state"
s = lines[-1]
assert s["trainers"] == 2 and s["rollbacks"] == 0 and s["samples"] == 16 * 2 * 4 and len(s["trainer_scores"]) == 2, s
steps = [e for e in lines if e["event"] == "step"]
assert sorted({e["trainer"] for e in steps}) == [0, 1] and len(steps) == 32, "one step record per trainer and step"
print("ok   poisoned trainer 1 lost round 1 on both sides and continued from trainer 0's model; best trainer %d" % s["best_trainer"])
PY
  best=$(summary best_trainer ck/metrics.jsonl)
  cmp ck/checkpoint.bin "ck/checkpoint-t$best.bin"
  echo "ok   checkpoint.bin is the best trainer's ($best)"
  "$here/../../scripts/plot-metrics.sh" ck/metrics.jsonl plots > /dev/null
  [[ $(head -c 8 plots/loss.png | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a && $(stat -c %s plots/loss.png) -gt 2000 ]]
  echo "ok   plot-metrics.sh drew one curve per trainer"
  ;;
ltfb_grid)
  # 4 ranks as 2 trainers, each on the spatial grid 1,2,1,1 with its weights sharded (--shard-weights: the state
  # is captured by a gather over the spatial group, installed part by part): the exchange goes rank to rank.
  # 64^3: every layer is split along D, so the state is captured and installed in parts over the whole model
  # (at 32^3 the 1^3 tail would run unsplit).
  "$datagen" cosmoflow -o data --samples 16 --size 64 --seed 3 --val-fraction 0 > /dev/null
  mpirun_n 4 "$train" --model cosmoflow --data data/train --epochs 1 --batch 1 --optimizer sgd --lr 0.01 --threads 1 \
    --prefetch-threads 1 --trainers 2 --grid 1,2,1,1 --shard-weights --ltfb-interval 3 --max-steps 6 \
    --inject-nan-at-step 3 --inject-nan-trainer 0 --checkpoint ck > out.txt
  cat out.txt
  grep -q "grid 1,2,1,1" out.txt || { echo "FAIL the trainers did not run on grid 1,2,1,1"; exit 1; }
  check_rounds ck/metrics.jsonl 2
  $py - ck/metrics.jsonl << 'PY'
import json, sys
r1 = {e["trainer"]: e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "tournament" and e["round"] == 1}
assert r1[0]["kept"] == "partner" and r1[1]["kept"] == "own" and r1[0]["state_hash"] == r1[1]["state_hash"], r1
print("ok   on grid 1,2,1,1 the poisoned trainer 0 took trainer 1's model, bit for bit")
PY
  ;;
ltfb_one_trainer)
  # --trainers 1 is the plain run: the same checkpoint, byte for byte, and the same step losses.
  "$datagen" cosmoflow -o data --samples 40 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 1 --batch 4 --lr 0.001 --optimizer adam --threads 2 --seed 5)
  "$train" "${common[@]}" --checkpoint plain > /dev/null
  "$train" "${common[@]}" --checkpoint one --trainers 1 --ltfb-interval 2 > /dev/null
  cmp plain/checkpoint.bin one/checkpoint.bin
  losses() { $py -c 'import json,sys; print([e["loss"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "step"])' "$1"; }
  [[ "$(losses plain/metrics.jsonl)" == "$(losses one/metrics.jsonl)" ]] || { echo "FAIL losses differ"; exit 1; }
  echo "ok   --trainers 1 == the plain run (checkpoint and losses)"
  ;;
ltfb_resume)
  # 2 trainers x 1 rank with lr mutation: 12 steps straight == 5 + --resume + 7, every trainer's
  # checkpoint byte for byte and the same tournament records (rounds at steps 4, 8 and 12).
  "$datagen" cosmoflow -o data --samples 72 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 2 --batch 4 --lr 0.001 --optimizer adam --threads 1
          --prefetch-threads 1 --seed 2 --trainers 2 --ltfb-interval 4 --ltfb-mutate lr=0.5,2)
  mpirun_2 "$train" "${common[@]}" --max-steps 12 --checkpoint straight > /dev/null
  mpirun_2 "$train" "${common[@]}" --max-steps 5 --checkpoint split > /dev/null
  mpirun_2 "$train" "${common[@]}" --max-steps 12 --checkpoint split --resume > /dev/null
  for t in 0 1; do
    cmp "straight/checkpoint-t$t.bin" "split/checkpoint-t$t.bin" || { echo "FAIL trainer $t differs after resume"; exit 1; }
  done
  rounds() { $py -c 'import json,sys; print([(e["round"], e["trainer"], e["partner"], e["kept"], e["lr_scale"], e["state_hash"]) for e in map(json.loads, open(sys.argv[1])) if e["event"] == "tournament"])' "$1"; }
  [[ "$(rounds straight/metrics.jsonl)" == "$(rounds split/metrics.jsonl)" ]] || { echo "FAIL tournament records differ"; exit 1; }
  losses() { $py -c 'import json,sys; print(sorted((e["step"], e["trainer"], e["loss"], e["lr"]) for e in map(json.loads, open(sys.argv[1])) if e["event"] == "step"))' "$1"; }
  [[ "$(losses straight/metrics.jsonl)" == "$(losses split/metrics.jsonl)" ]] || { echo "FAIL step losses differ"; exit 1; }
  echo "ok   resume continues the tournament: both trainers' checkpoints, every step's loss and every round's record identical"
  echo "     $(rounds split/metrics.jsonl)"
  # Another --seed would split the tournament's data anew under the trainers: refused in one line, not warned.
  reseeded=()
  for ((i = 0; i < ${#common[@]}; i++)); do
    if [[ ${common[i]} == --seed ]]; then reseeded+=(--seed 7); i=$((i + 1)); else reseeded+=("${common[i]}"); fi
  done
  if mpirun_2 "$train" "${reseeded[@]}" --max-steps 14 --checkpoint split --resume > out.txt 2> err.txt; then
    echo "FAIL a tournament resumed with another --seed"; exit 1
  fi
  [[ $(grep -c "^fanstore-train: error: .*was written with --seed 2, which split the tournament's data" err.txt) -eq 1 ]] ||
    { echo "FAIL one line expected:"; cat err.txt; exit 1; }
  echo "ok   another --seed on a tournament's resume: $(grep -m1 error: err.txt)"
  rm split/checkpoint-t1.bin
  if mpirun_2 "$train" "${common[@]}" --max-steps 14 --checkpoint split --resume > out.txt 2> err.txt; then
    echo "FAIL resumed with one trainer's checkpoint missing"; exit 1
  fi
  grep -q "error: split: 1 of the 2 trainers' checkpoint-tT.bin files are there, at steps 12 to 12; resume needs" err.txt ||
    { echo "FAIL:"; cat err.txt; exit 1; }
  grep -q "starting from scratch\|resumed from" err.txt && { echo "FAIL it also said it resumes or starts:"; cat err.txt; exit 1; }
  echo "ok   a missing trainer checkpoint: $(grep -m1 error: err.txt)"
  # A plain run's checkpoint resumed as a tournament: refused, never trained over from step 0.
  plain=(--model cosmoflow --data data/train --batch 4 --lr 0.001 --threads 1 --prefetch-threads 1 --seed 2)
  mpirun_2 "$train" "${plain[@]}" --max-steps 2 --checkpoint plain > /dev/null
  before=$(md5sum < plain/checkpoint.bin)
  if mpirun_2 "$train" "${plain[@]}" --max-steps 3 --checkpoint plain --resume --trainers 2 > out.txt 2> err.txt; then
    echo "FAIL a plain checkpoint resumed with --trainers 2"; exit 1
  fi
  grep -q "error: plain holds checkpoint.bin but no trainer's checkpoint-tT.bin" err.txt &&
    [[ $(md5sum < plain/checkpoint.bin) == "$before" ]] || { echo "FAIL plain checkpoint and --trainers:"; cat err.txt; exit 1; }
  echo "ok   a plain run's checkpoint with --resume --trainers 2: $(grep -m1 error: err.txt)"
  # A tournament stopped before its end (only the trainers' files, no checkpoint.bin): a run without --trainers
  # wrote a checkpoint.bin beside them and emptied metrics.jsonl; with --resume it started afresh. Both refused.
  mkdir stopped && cp straight/checkpoint-t0.bin straight/checkpoint-t1.bin straight/metrics.jsonl stopped/
  if "$train" "${plain[@]}" --max-steps 1 --checkpoint stopped > out.txt 2> err.txt; then
    echo "FAIL a plain run over a stopped tournament"; exit 1
  fi
  grep -q "error: stopped holds a checkpoint (stopped/checkpoint-t0.bin): pass --resume" err.txt &&
    [[ ! -e stopped/checkpoint.bin ]] && cmp stopped/metrics.jsonl straight/metrics.jsonl ||
    { echo "FAIL a plain run over a stopped tournament:"; cat err.txt; exit 1; }
  echo "ok   a plain run over a stopped tournament: $(grep -m1 error: err.txt)"
  if "$train" "${plain[@]}" --max-steps 1 --checkpoint stopped --resume > out.txt 2> err.txt; then
    echo "FAIL a stopped tournament resumed without --trainers"; exit 1
  fi
  grep -q "error: stopped holds a tournament's checkpoints (stopped/checkpoint-t0.bin, 2 trainers' files): resume it with --trainers 2" err.txt &&
    [[ ! -e stopped/checkpoint.bin ]] || { echo "FAIL a stopped tournament resumed without --trainers:"; cat err.txt; exit 1; }
  echo "ok   a stopped tournament resumed without --trainers: $(grep -m1 error: err.txt)"
  ;;
ltfb_odd_truncation)
  # 3 trainers of one rank: pairwise leaves one trainer out of every round (it keeps its state, sends
  # nothing); truncation:1 gives the worst trainer the best one's exact state.
  "$datagen" cosmoflow -o data --samples 96 --size 32 --seed 3 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 1 --batch 2 --optimizer adam --lr 0.001 --threads 1
          --prefetch-threads 1 --trainers 3 --ltfb-interval 3 --max-steps 9)
  mpirun_n 3 "$train" "${common[@]}" --checkpoint pairwise > /dev/null
  check_rounds pairwise/metrics.jsonl 3
  mpirun_n 3 "$train" "${common[@]}" --ltfb-strategy truncation --checkpoint truncation > /dev/null
  $py - pairwise/metrics.jsonl truncation/metrics.jsonl << 'PY'
import json, sys
def rounds(path):
    r = {}
    for e in map(json.loads, open(path)):
        if e["event"] == "tournament":
            r.setdefault(e["round"], {})[e["trainer"]] = e
    return r
for n, r in rounds(sys.argv[1]).items():
    alone = [t for t, e in r.items() if e["partner"] == t]
    assert len(alone) == 1, "round %d: %d trainers alone" % (n, len(alone))
    e = r[alone[0]]
    assert e["kept"] == "own" and e["state_bytes"] == 0, e
print("ok   pairwise with 3 trainers: one trainer per round plays itself, keeps its state and moves no bytes")
for n, r in rounds(sys.argv[2]).items():
    scores = {t: e["own_score"] for t, e in r.items()}
    best, worst = min(scores, key=lambda t: (scores[t], t)), max(scores, key=lambda t: (scores[t], t))
    assert r[worst]["kept"] == "partner" and r[worst]["partner"] == best, (n, r)
    assert r[worst]["state_hash"] == r[best]["state_hash"], "round %d: the worst does not hold the best's state" % n
    assert all(r[t]["kept"] == "own" for t in r if t != worst), (n, r)
print("ok   truncation: in every round the worst trainer took the best one's exact state, the others kept theirs")
PY
  ;;
ltfb_bad_options)
  "$datagen" cosmoflow -o cosmo --samples 16 --size 32 --seed 2 --val-fraction 0 > /dev/null
  run_expect_fail() {  # run_expect_fail "what" "text the one line must hold" ARGS...
    local what=$1 expect=$2; shift 2
    if "$train" --model cosmoflow --data cosmo/train --batch 2 --threads 1 --checkpoint ck_fail "$@" > out.txt 2> err.txt; then
      echo "FAIL $what: exit 0"; exit 1
    fi
    if [[ $(wc -l < err.txt) -ne 1 ]] || ! grep -qF -- "$expect" err.txt; then
      echo "FAIL $what: expected one line with '$expect', got:"; cat err.txt; exit 1
    fi
    [[ ! -e ck_fail ]] || { echo "FAIL $what: created ck_fail before the error"; exit 1; }
    echo "ok   $what: $(cat err.txt)"
  }
  run_expect_fail "K not dividing the ranks" "--trainers 2 does not divide the 1 ranks" --trainers 2
  # The values are checked with --trainers 1 too (without --trainers the options are refused, below).
  run_expect_fail "empty tournament set" "--tournament-fraction 0 leaves no tournament set" --trainers 1 \
    --tournament-fraction 0
  run_expect_fail "metric the model lacks" "--tournament-metric dice: this model does not produce it; pass loss or mae" \
    --trainers 1 --tournament-metric dice
  run_expect_fail "bad strategy" "--ltfb-strategy best: pass pairwise or truncation[:K]" --trainers 1 --ltfb-strategy best
  run_expect_fail "bad mutation" "--ltfb-mutate lr=0: '0' is not a positive factor" --trainers 1 --ltfb-mutate lr=0
  # Tournament options without --trainers did nothing, silently; --benchmark --trainers on one process ran.
  run_expect_fail "--ltfb-interval without --trainers" \
    "--ltfb-interval sets up tournament training, which --trainers K (K > 1) turns on" --ltfb-interval 4
  run_expect_fail "--tournament-fraction without --trainers" "--tournament-fraction sets up tournament training" \
    --tournament-fraction 0.5
  if "$train" --model cosmoflow --input-size 32 --batch 1 --threads 1 --trainers 2 --benchmark 1 > out.txt 2> err.txt ||
      [[ $(wc -l < err.txt) -ne 1 ]] || ! grep -q "error: --benchmark times one grid, not a tournament" err.txt; then
    echo "FAIL --benchmark --trainers 2 on one process:"; cat out.txt err.txt; exit 1
  fi
  echo "ok   --benchmark --trainers 2 on one process: $(cat err.txt)"
  # Several ranks: a grid that does not fit a trainer, and too few samples for a tournament set.
  if mpirun_2 "$train" --model cosmoflow --data cosmo/train --batch 2 --threads 1 --trainers 2 --grid 1,2,1,1 \
      --checkpoint ck_fail > out.txt 2> err.txt; then echo "FAIL grid: exit 0"; exit 1; fi
  grep -qF -- "--grid 1,2,1,1 needs 2 ranks, but each of the 2 trainers has 1: pass a grid whose product is 1" err.txt ||
    { echo "FAIL grid:"; cat err.txt; exit 1; }
  echo "ok   grid too big for a trainer: $(grep -m1 -F -- '--grid' err.txt)"
  if mpirun_2 "$train" --model cosmoflow --data cosmo/train --batch 4 --threads 1 --trainers 2 --tournament-fraction 0.6 \
      --checkpoint ck_fail > out.txt 2> err.txt; then echo "FAIL tiny shares: exit 0"; exit 1; fi
  # Once, by rank 0 for the whole job (every rank printed its own trainer's line).
  [[ $(grep -c "^fanstore-train: error: " err.txt) -eq 1 ]] && ! grep -q MPI_ABORT err.txt out.txt &&
    grep -q "has 8 of the 16 training samples, too few for a tournament set of 8 and one step of 4" err.txt ||
    { echo "FAIL tiny shares:"; cat err.txt; exit 1; }
  echo "ok   too few samples per trainer: $(grep -m1 'too few' err.txt)"
  ;;
*) echo "unknown case $case_name"; exit 2 ;;
esac
