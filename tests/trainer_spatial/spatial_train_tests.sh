#!/usr/bin/env bash
# End-to-end fanstore-train runs on sample x spatial grids (CI-sized, fixed seeds).
# Usage: spatial_train_tests.sh CASE WORKDIR
# Env: FANSTORE_BIN_DIR (fanstore, fanstore-train, fanstore-datagen), FANSTORE_MPIRUN (may be empty).
# Exit 77 = skipped (no mpirun).
set -euo pipefail
case_name=$1 work=$2
bin=${FANSTORE_BIN_DIR:?}
train=$bin/fanstore-train datagen=$bin/fanstore-datagen fanstore=$bin/fanstore
py=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work"
cd "$work"

# mpirun_n N ARGS...: N ranks oversubscribed on this machine's cores, no binding.
mpirun_n() {
  local n=$1 mpirun=${FANSTORE_MPIRUN:-$(command -v mpirun || true)} root_flag=()
  shift
  if [[ -z "$mpirun" ]]; then echo "SKIP: no mpirun"; exit 77; fi
  [[ $(id -u) == 0 ]] && root_flag=(--allow-run-as-root)
  # Hang detection only: a healthy run of these cases takes well under this. When a rank exits non-zero, mpirun
  # signals the others and waits odls_base_sigkill_timeout (1 s) before SIGKILL, even for ranks already gone: about
  # 2 s per refused run, of which these cases make dozens. None of them signals a run (train_tests.sh's do).
  OMPI_MCA_odls_base_sigkill_timeout=0 timeout 900 "$mpirun" "${root_flag[@]}" --oversubscribe --bind-to none \
    -np "$n" "$@"
}

# summary FIELD METRICS_FILE: a field of the final {"event":"summary"} line.
summary() { $py -c 'import json,sys; print(json.loads(open(sys.argv[2]).read().splitlines()[-1])[sys.argv[1]])' "$1" "$2"; }

check() {
  if $py -c "import sys; sys.exit(0 if ($2) else 1)"; then echo "ok   $1"; else echo "FAIL $1"; exit 1; fi
}

# compare_losses A B TOL: per-step losses of two metrics.jsonl files agree within TOL (relative).
compare_losses() {
  $py - "$1" "$2" "$3" <<'EOF'
import json, sys
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"event":"step"' in l]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) and len(a) > 0, f"{len(a)} vs {len(b)} steps"
worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))
print("per-step losses serial:", " ".join(f"{x:.6f}" for x in a))
print("per-step losses grid:  ", " ".join(f"{y:.6f}" for y in b))
print(f"largest relative difference {worst:.2e} (tolerance {tol})")
sys.exit(0 if worst <= tol else 1)
EOF
}

# serial_vs_grid SIZE: 5 SGD steps of CosmoFlow SIZE^3 (5 samples, batch 1) serially into serial/ and on a
# 1,2,2,1 grid into grid/; per-step losses within 1e-4.
serial_vs_grid() {
  "$datagen" cosmoflow -o data --samples 5 --size "$1" --seed 4 --val-fraction 0 > /dev/null
  local common=(--model cosmoflow --data data/train --epochs 1 --batch 1 --lr 0.01 --optimizer sgd --momentum 0.9
                --seed 5 --prefetch-threads 1 --max-steps 5)
  "$train" "${common[@]}" --threads 2 --checkpoint serial > /dev/null
  mpirun_n 4 "$train" "${common[@]}" --threads 1 --grid 1,2,2,1 --checkpoint grid > /dev/null
  compare_losses serial/metrics.jsonl grid/metrics.jsonl 1e-4
}

case $case_name in
bad_grids)
  # One line (rank 0's, for all) before any work, and the run exits non-zero.
  "$datagen" cosmoflow -o data --samples 8 --size 32 --seed 2 --val-fraction 0 > /dev/null
  expect_grid_error() {  # expect_grid_error "what" "text" NP ARGS...
    local what=$1 expect=$2 np=$3
    shift 3
    if mpirun_n "$np" "$train" --model cosmoflow --data data/train --batch 1 --threads 1 --checkpoint ck "$@" \
        > out.txt 2> err.txt; then
      echo "FAIL $what: exit 0"; exit 1
    fi
    local lines
    lines=$(grep -c "^fanstore-train: error: " err.txt || true)
    if [[ $lines -ne 1 ]] || ! grep -qF -- "$expect" err.txt || [[ -e ck/metrics.jsonl ]]; then
      echo "FAIL $what: expected one line with '$expect' from $np ranks and no training, got:"; cat err.txt; exit 1
    fi
    echo "ok   $what: $(grep -m1 "^fanstore-train: error: " err.txt)"
  }
  expect_grid_error "product differs from the ranks" "needs 8 ranks (the product), but 4 were started" 4 --grid 2,2,2,1
  expect_grid_error "2D grid for a 3D model" "takes S,D,H,W" 2 --grid 1,2,1
  expect_grid_error "not a number" "'x' is not an integer from 1 to 1048576" 2 --grid 1,x,1,1
  expect_grid_error "a layer forced finer than it" \
    "conv_blocks.4.pool (MaxPool3d, output (1, 512, 1, 1, 1)) has D = 1, fewer positions than the 2 parts" \
    2 --grid 1,2,1,1 --layer-split conv_blocks.4.pool=2,1,1
  expect_grid_error "--layer-split naming no layer" "cosmoflow has no layer of that name" 2 --grid 1,2,1,1 \
    --layer-split conv9=1,1,1
  expect_grid_error "--layer-split without a grid" "--layer-split goes with a spatial --grid" 2 \
    --layer-split conv_blocks.0.conv=1,1,1
  expect_grid_error "--layer-split on a grid that splits nothing" "2,1,1,1 splits no sample" 2 --grid 2,1,1,1 \
    --layer-split conv9=1,1,1
  expect_grid_error "--shard-weights without sharded state" "leave out --no-shard-state" 2 --grid 1,2,1,1 \
    --shard-weights --no-shard-state
  expect_grid_error "--shard-weights on a grid without a split" "2,1,1,1 splits no sample" 2 --grid 2,1,1,1 \
    --shard-weights
  ;;
losses_match_serial)
  # 5 SGD steps of CosmoFlow 64^3 serially (batch 1) and on a 1,2,2,1 grid: per-step losses within 1e-4.
  # (SGD with momentum, as two_ranks_match_one: Adam's m/sqrt(v) turns rounding-level differences in
  # near-zero gradients into full-size steps, an optimizer property and not the split's.)
  serial_vs_grid 64
  check "summary carries the grid and peak RSS" \
    "'$(summary grid grid/metrics.jsonl)' == '1,2,2,1' and $(summary peak_rss_bytes grid/metrics.jsonl) > 1e7"
  ;;
losses_match_serial_small)
  # 32^3 on 1,2,2,1: the last pooling's output (1^3) cannot be split, so it runs on one part, its input
  # gathered from the 4 ranks (and its gradient sent back). 5 SGD steps, per-step losses within 1e-4 of
  # the serial run.
  serial_vs_grid 32
  ;;
losses_match_serial_hybrid)
  # 2 sample groups x 2 spatial ranks (2,1,2,1), batch 1 per group, vs one rank with batch 2: the same
  # samples per step, the gradients averaged over the groups. 5 SGD steps, per-step losses within 1e-4.
  "$datagen" cosmoflow -o data --samples 10 --size 64 --seed 4 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 1 --lr 0.01 --optimizer sgd --momentum 0.9 --seed 5
          --prefetch-threads 1 --max-steps 5)
  "$train" "${common[@]}" --batch 2 --threads 2 --checkpoint serial > /dev/null
  mpirun_n 4 "$train" "${common[@]}" --batch 1 --threads 1 --grid 2,1,2,1 --checkpoint grid > /dev/null
  compare_losses serial/metrics.jsonl grid/metrics.jsonl 1e-4
  ;;
resnet50_grid)
  # ResNet-50 (batch norm over the spatial group, image slabs) on 1,2,2: the first step's loss equals
  # the serial one within 1e-4; then 5 steps and a validation run through. (Later steps are not compared: at this
  # size a one-ulp change of the serial input alone moves ResNet-50's gradients by up to 18%, so any
  # two float32 runs that round differently part after the first update; see docs/parallelism.md.)
  "$datagen" imagefolder -o data --samples 14 --classes 3 --size 64 --seed 5 --val-fraction 0.3 > /dev/null
  common=(--model resnet50 --data data/train --val data/val --input-size 64 --epochs 1 --batch 2 --lr 0.001
          --optimizer sgd --momentum 0.9 --seed 5 --prefetch-threads 1 --max-steps 5)
  "$train" "${common[@]}" --threads 2 --checkpoint serial > /dev/null
  mpirun_n 4 "$train" "${common[@]}" --threads 1 --grid 1,2,2 --checkpoint grid > /dev/null
  first() { $py -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1]) if json.loads(l)["event"] == "step"][0])' "$1"; }
  a=$(first serial/metrics.jsonl) b=$(first grid/metrics.jsonl) acc=$(summary val_metric grid/metrics.jsonl)
  check "resnet50 on 1,2,2: first-step loss $b vs serial $a within 1e-4; validation accuracy $acc" \
    "abs($a - $b) <= 1e-4 * abs($a) and 0 <= $acc <= 1"
  ;;
sharded_state)
  # Optimizer state and gradients sharded over the spatial group (the default: ZeRO stage 2), the weights too
  # (--shard-weights: stage 3), vs not (--no-shard-state: the allreduce of whole gradients): Adam, 5 steps of
  # CosmoFlow 32^3 on 1,2,2,1, per-step losses within 1e-6 (the sums run in another order), and checkpoints that
  # resume to the same sixth loss (serially; stage 3's on its grid with its weights sharded); then 4 steps on
  # 2,1,2,1 (two sample groups) likewise.
  "$datagen" cosmoflow -o data --samples 12 --size 32 --seed 4 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 1 --lr 0.001 --optimizer adam --seed 5
          --prefetch-threads 1 --threads 1)
  mpirun_n 4 "$train" "${common[@]}" --batch 2 --grid 1,2,2,1 --max-steps 5 --no-shard-state --checkpoint whole > /dev/null
  mpirun_n 4 "$train" "${common[@]}" --batch 2 --grid 1,2,2,1 --max-steps 5 --checkpoint sharded > /dev/null
  mpirun_n 4 "$train" "${common[@]}" --batch 2 --grid 1,2,2,1 --max-steps 5 --shard-weights --checkpoint weights \
    > /dev/null
  compare_losses whole/metrics.jsonl sharded/metrics.jsonl 1e-6
  compare_losses whole/metrics.jsonl weights/metrics.jsonl 1e-6
  echo "peak RSS per rank: whole state $(summary peak_rss_bytes whole/metrics.jsonl) B," \
    "sharded $(summary peak_rss_bytes sharded/metrics.jsonl) B, weights too $(summary peak_rss_bytes weights/metrics.jsonl) B"
  check "checkpoints of the same size" "$(stat -c %s whole/checkpoint.bin) == $(stat -c %s sharded/checkpoint.bin)"
  cmp sharded/checkpoint.bin weights/checkpoint.bin  # the same values and state, gathered another way
  for run in whole sharded; do "$train" "${common[@]}" --batch 2 --checkpoint "$run" --resume --max-steps 6 > /dev/null 2>&1; done
  mpirun_n 4 "$train" "${common[@]}" --batch 2 --grid 1,2,2,1 --shard-weights --checkpoint weights --resume \
    --max-steps 6 > /dev/null 2>&1
  compare_losses whole/metrics.jsonl sharded/metrics.jsonl 1e-6
  compare_losses whole/metrics.jsonl weights/metrics.jsonl 1e-6
  # Two sample groups: each part's sum over its group, then over the groups.
  mpirun_n 4 "$train" "${common[@]}" --grid 2,1,2,1 --batch 1 --max-steps 4 --no-shard-state --checkpoint whole2 > /dev/null
  mpirun_n 4 "$train" "${common[@]}" --grid 2,1,2,1 --batch 1 --max-steps 4 --checkpoint sharded2 > /dev/null
  mpirun_n 4 "$train" "${common[@]}" --grid 2,1,2,1 --batch 1 --max-steps 4 --shard-weights --checkpoint weights2 \
    > /dev/null
  compare_losses whole2/metrics.jsonl sharded2/metrics.jsonl 1e-6
  compare_losses whole2/metrics.jsonl weights2/metrics.jsonl 1e-6
  ;;
sharded_rollback)
  # A NaN written into a weight after step 3 on 1,2,2,1: every rank rolls back (with sharded state each
  # restores its part of the values and the parts are shared again), with or without sharding the same run;
  # with the weights sharded too the NaN is in one rank's part, and every rank sees it.
  "$datagen" cosmoflow -o data --samples 12 --size 32 --seed 4 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 1 --batch 2 --lr 0.001 --optimizer adam --seed 5
          --prefetch-threads 1 --threads 1 --grid 1,2,2,1 --inject-nan-at-step 3)
  mpirun_n 4 "$train" "${common[@]}" --no-shard-state --checkpoint whole > /dev/null 2>&1
  mpirun_n 4 "$train" "${common[@]}" --checkpoint sharded > /dev/null 2> err.txt
  grep -q '"event":"rollback","step":4' sharded/metrics.jsonl
  rollbacks=$(summary rollbacks sharded/metrics.jsonl)
  check "sharded: $rollbacks rollback" "$rollbacks == 1"
  compare_losses whole/metrics.jsonl sharded/metrics.jsonl 1e-6
  mpirun_n 4 "$train" "${common[@]}" --shard-weights --checkpoint weights > /dev/null 2>&1
  check "weights sharded: $(summary rollbacks weights/metrics.jsonl) rollback" "$(summary rollbacks weights/metrics.jsonl) == 1"
  compare_losses whole/metrics.jsonl weights/metrics.jsonl 1e-6
  ;;
resume_across_grids)
  # A checkpoint written on 1,2,2,1 (sharded state, batch 2) after 2 steps resumes on 2,1,1,1 (2 groups of
  # batch 1), on 1,1,2,2 and serially (batch 2): steps 3 and 4 give the losses of 4 steps straight.
  "$datagen" cosmoflow -o data --samples 8 --size 32 --seed 4 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 1 --lr 0.01 --optimizer sgd --momentum 0.9 --seed 5
          --prefetch-threads 1 --threads 1)
  "$train" "${common[@]}" --batch 2 --checkpoint straight --max-steps 4 > /dev/null
  mpirun_n 4 "$train" "${common[@]}" --batch 2 --grid 1,2,2,1 --checkpoint split --max-steps 2 > /dev/null
  for target in 2,1,1,1 1,1,2,2 serial; do
    cp -r split "on_$target"
    case $target in
    serial) "$train" "${common[@]}" --batch 2 --checkpoint "on_$target" --resume --max-steps 4 > /dev/null 2>&1 ;;
    2,1,1,1) mpirun_n 2 "$train" "${common[@]}" --batch 1 --grid "$target" --checkpoint "on_$target" --resume \
               --max-steps 4 > /dev/null 2>&1 ;;
    *) mpirun_n 4 "$train" "${common[@]}" --batch 2 --grid "$target" --checkpoint "on_$target" --resume \
         --max-steps 4 > /dev/null 2>&1 ;;
    esac
    $py -c '
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r["event"] == "step"}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in (3, 4))
print(f"resumed on {sys.argv[3]}: steps 3, 4 losses {b[3]:.7f} {b[4]:.7f} vs straight {a[3]:.7f} {a[4]:.7f}, "
      f"largest relative difference {worst:.1e}")
sys.exit(0 if worst <= 1e-5 else 1)' straight/metrics.jsonl "on_$target/metrics.jsonl" "$target"
  done
  echo "ok   a 1,2,2,1 checkpoint resumes on 2,1,1,1, 1,1,2,2 and serially"
  ;;
resume_on_grid)
  # A checkpoint written once (rank 0) resumes on the same grid: 6 steps straight == 3 + resume + 3.
  "$datagen" cosmoflow -o data --samples 6 --size 64 --seed 4 --val-fraction 0 > /dev/null
  common=(--model cosmoflow --data data/train --epochs 1 --batch 1 --lr 0.001 --optimizer adam --seed 5
          --prefetch-threads 1 --threads 1 --grid 1,2,1,1)
  mpirun_n 2 "$train" "${common[@]}" --checkpoint straight --max-steps 6 > /dev/null
  mpirun_n 2 "$train" "${common[@]}" --checkpoint split --max-steps 3 > /dev/null
  mpirun_n 2 "$train" "${common[@]}" --checkpoint split --max-steps 6 --resume > /dev/null
  if cmp straight/checkpoint.bin split/checkpoint.bin; then echo "ok   resume on grid 1,2,1,1: bit-identical"
  else echo "FAIL resume on a grid differs"; exit 1; fi
  ;;
spatial_io_bytes)
  # Under `fanstore run`, each of the 4 ranks of a 1,2,2,1 grid reads about a quarter of every sample
  # (its slab + a one-voxel halo), not the whole sample.
  "$datagen" cosmoflow -o data --samples 4 --size 64 --seed 4 --val-fraction 0 > /dev/null
  "$fanstore" pack data -o image --parts 1 > /dev/null
  # Format 1 compresses each file whole, so any read decodes (and counts) the whole file; format 2's
  # chunked range reads count the bytes a program reads.
  if "$fanstore" info image | grep -q "^format version: 1$"; then
    echo "SKIP: this fanstore packs format-1 images (whole-file decode); the slab I/O needs format 2's range reads"
    exit 77
  fi
  sample_bytes=$(stat -c %s data/train/univ_00000.h5)
  run_grid() {  # run_grid GRID NP: prints each rank's bytes read from the image
    FANSTORE_STATS=1 mpirun_n "$2" "$fanstore" run --image image -- "$train" --model cosmoflow \
      --data /fanstore/train --epochs 1 --batch 1 --lr 0.001 --optimizer adam --seed 5 --prefetch-threads 1 \
      --threads 1 --grid "$1" --checkpoint "ck_$1" > "out_$1.txt" 2> "stats_$1.txt"
    grep -oE ' bytes=[0-9]+' "stats_$1.txt" | cut -d= -f2
  }
  whole=$(run_grid 1,1,1,1 1 | sort -n | tail -1)
  quarter=$(run_grid 1,2,2,1 4 | sort -n | tail -1)
  echo "bytes read per rank for 4 samples of $sample_bytes B: 1 rank $whole, busiest of 4 ranks (1,2,2,1) $quarter"
  check "a rank of a 4-way split reads <= 0.35 of what one rank reads" "$quarter <= 0.35 * $whole"
  check "and at least a quarter of it" "$quarter >= 0.25 * $whole"
  ;;
explain)
  # --grid auto --explain: the table of every candidate grid and the chosen grid's plan, then exit.
  mpirun_n 2 "$train" --model cosmoflow --input-size 64 --batch 1 --threads 1 --grid auto --explain > table.txt
  cat table.txt
  for g in 2,1,1,1 1,2,1,1 1,1,2,1 1,1,1,2; do grep -q "^$g " table.txt || { echo "FAIL no row for $g"; exit 1; }; done
  grep -q "<- chosen" table.txt
  # The chosen grid's plan, whichever it is (an unsplit choice printed none).
  grep -q "^  conv_blocks.0.conv (Conv3d, " table.txt || { echo "FAIL no plan of the chosen grid"; exit 1; }
  echo "ok   --explain lists every 2-rank grid, marks the choice and prints its plan"
  # The trials: 3 grids measured (data parallelism among them), the choice the fastest measured.
  $py -c '
import re, sys
rows = [l.split() for l in open(sys.argv[1]) if re.match(r"^[0-9]+(,[0-9]+)+ ", l)]
head = open(sys.argv[1]).read().splitlines()[1].split()
col = head.index("tried") - 1  # the heading "step ms" is two words, its value one
tried = {r[0]: float(r[col]) for r in rows if r[col] != "-"}
chosen = [r[0] for r in rows if "<-" in r][0]
print("tried (ms):", tried, "chosen:", chosen)
assert len(tried) == 3 and "2,1,1,1" in tried, tried
assert chosen in tried and tried[chosen] == min(tried.values()), chosen' table.txt
  echo "ok   --grid auto tried 3 grids, data parallelism among them, and chose the fastest measured"
  # --explain on an explicit grid: the plan per layer, a coarser tail redistributed at 32^3.
  mpirun_n 4 "$train" --model cosmoflow --input-size 32 --batch 1 --threads 1 --grid 1,2,2,1 --explain > plan.txt
  cat plan.txt
  grep -qF "conv_blocks.3.conv (Conv3d, (1, 256, 4, 4, 4)): split 2,2,1" plan.txt
  grep -qF "conv_blocks.4.pool (MaxPool3d, (1, 512, 1, 1, 1)): split 1,1,1 x 4; input 0 redistributed from 2,2,1" \
    plan.txt
  echo "ok   --explain on 1,2,2,1 at 32^3 prints the plan per layer"
  # Without --data the table still counts --optimizer's state: Adam keeps two values per weight, SGD one.
  for opt in sgd adam; do
    mpirun_n 2 "$train" --model cosmoflow --input-size 32 --batch 1 --threads 1 --grid auto --explain \
      --optimizer $opt > opt_$opt.txt
  done
  $py -c '
import sys
def mem(path):
    lines = open(path).read().splitlines()
    col = lines[1].split().index("mem") - 1  # "step ms" is two words in the heading, one value in a row
    return float([l.split() for l in lines if l.startswith("2,1,1,1 ")][0][col])
sgd, adam = mem(sys.argv[1]), mem(sys.argv[2])
print("mem MiB on 2,1,1,1: sgd", sgd, "adam", adam)
assert adam > sgd + 10, (sgd, adam)' opt_sgd.txt opt_adam.txt
  echo "ok   --explain without --data counts the --optimizer's state"
  ;;
one_line_errors)
  # An error every rank finds after the grid check (on the data, the model, a checkpoint, the options) is one
  # line from rank 0 for the whole job, a non-zero exit and no MPI_Abort; one that a single rank finds still
  # ends the job.
  "$datagen" cosmoflow -o c32 --samples 8 --size 32 --seed 2 --val-fraction 0 > /dev/null
  "$datagen" cosmoflow -o c64 --samples 2 --size 64 --seed 2 --val-fraction 0 > /dev/null
  "$datagen" unet3d -o u32 --samples 2 --size 32 --seed 2 --val-fraction 0 > /dev/null
  one_error() {  # one_error "what" "text" NP ARGS...
    local what=$1 expect=$2 np=$3
    shift 3
    if mpirun_n "$np" "$train" --threads 1 "$@" > out.txt 2> err.txt; then echo "FAIL $what: exit 0"; exit 1; fi
    local lines
    lines=$(grep -c "^fanstore-train: error: " err.txt || true)
    if [[ $lines -ne 1 ]] || ! grep -qF -- "$expect" err.txt || grep -q "MPI_ABORT" out.txt err.txt; then
      echo "FAIL $what: expected one line with '$expect' from $np ranks and no MPI_ABORT, got:"; cat err.txt; exit 1
    fi
    echo "ok   $what: $(grep -m1 "^fanstore-train: error: " err.txt)"
  }
  "$train" --model cosmoflow --data c32/train --batch 1 --optimizer adam --max-steps 1 --threads 2 \
    --checkpoint ck32 > /dev/null
  one_error "resume on a grid with another input size" "fc1.weight is [128, 512] in the checkpoint" 4 --model cosmoflow \
    --data c64/train --batch 1 --optimizer adam --grid 1,2,2,1 --max-steps 2 --resume --checkpoint ck32
  one_error "fewer samples than one step" "has 8 samples, fewer than one step (5 per sample group x 2 groups): give a smaller --batch, or more samples" 4 \
    --model cosmoflow --data c32/train --grid 2,1,2,1 --batch 5 --checkpoint ck_few
  one_error "U-Net input too small" "unet3d: input 32x32x32 needs edges that are multiples of 32" 4 --model unet3d \
    --data u32/train --batch 1 --checkpoint ck_unet
  one_error "an option given twice" "--batch is given 2 times: pass it once" 3 --model cosmoflow \
    --data c32/train --batch 1 --batch 2
  one_error "no --data" "nothing to do; pass --describe, --benchmark N, or --data DIR to train" 3 --model cosmoflow \
    --batch 1
  # Set-up errors that every rank printed, with an MPI_ABORT: lars without --lr, too few samples for a tournament.
  one_error "lars without --lr" "--optimizer lars needs --lr" 2 --model cosmoflow --data c32/train --batch 1 \
    --optimizer lars --checkpoint ck_lars
  one_error "too few samples for a tournament set" "has 4 of the 8 training samples, too few for a tournament set" 2 \
    --model cosmoflow --data c32/train --batch 1 --trainers 2 --tournament-fraction 0.9 --checkpoint ck_tiny
  # --explain without --data splits the ranks into trainers as training does.
  mpirun_n 4 "$train" --model cosmoflow --input-size 32 --batch 1 --threads 1 --trainers 2 --grid 1,2,1,1 --explain \
    > plan.txt 2> err.txt || { echo "FAIL --explain --trainers 2 --grid 1,2,1,1:"; cat err.txt; exit 1; }
  [[ $(grep -c "^plan on --grid 1,2,1,1" plan.txt) -eq 1 ]] || { echo "FAIL one plan expected:"; cat plan.txt; exit 1; }
  echo "ok   --explain --trainers 2 on 4 ranks plans 1,2,1,1 once"
  one_error "--explain with a grid of all the ranks, not a trainer's" "but each of the 2 trainers has 2" 4 \
    --model cosmoflow --input-size 32 --batch 1 --trainers 2 --grid 2,2,1,1 --explain
  one_error "--benchmark with --trainers" "--benchmark times one grid, not a tournament" 4 --model cosmoflow \
    --input-size 32 --batch 1 --trainers 2 --grid 1,2,1,1 --benchmark 1
  one_error "--benchmark with --data" "--benchmark times synthetic batches and reads or writes no files" 2 \
    --model cosmoflow --input-size 32 --batch 1 --data c32/train --benchmark 1
  # --benchmark on 2 ranks without --grid: data parallelism over both, one line of global throughput.
  mpirun_n 2 "$train" --model cosmoflow --input-size 32 --batch 1 --benchmark 1 --threads 1 > out.txt 2> err.txt
  [[ $(wc -l < out.txt) -eq 1 ]] && grep -qE '^train: [0-9.]+ samples/s, inference: [0-9.]+ samples/s' out.txt &&
    [[ $(grep -c "^benchmark: model cosmoflow grid 2,1,1,1 " err.txt) -eq 1 ]] ||
    { echo "FAIL --benchmark on 2 ranks:"; cat out.txt err.txt; exit 1; }
  echo "ok   --benchmark on 2 ranks: $(cat out.txt)"
  # --grid auto --shard-weights weighs only grids that split a sample (it was dropped for 2,1,1,1).
  mpirun_n 2 "$train" --model cosmoflow --data c32/train --batch 1 --optimizer adam --max-steps 1 --threads 1 \
    --grid auto --shard-weights --checkpoint ck_auto > out.txt 2> err.txt
  grep -q "^fanstore-train: --grid auto chose 1," err.txt && ! grep -q "2,1,1,1" out.txt ||
    { echo "FAIL --grid auto --shard-weights:"; cat out.txt err.txt; exit 1; }
  echo "ok   $(grep -- '--grid auto chose' err.txt)"
  one_error "--grid auto --shard-weights on 1 rank" "no grid of one rank splits a sample" 1 --model cosmoflow \
    --data c32/train --batch 1 --grid auto --shard-weights --checkpoint ck_auto1
  # A file that one rank alone reads: that rank's line, and the job ends (no hang).
  cp -r c32 bad && echo garbage > bad/train/univ_00005.h5
  if mpirun_n 2 "$train" --model cosmoflow --data bad/train --batch 1 --threads 1 --checkpoint ck_bad \
      > out.txt 2> err.txt; then echo "FAIL a corrupt file: exit 0"; exit 1; fi
  grep -qF "bad/train/univ_00005.h5" err.txt || { echo "FAIL a corrupt file:"; cat err.txt; exit 1; }
  echo "ok   a file one rank reads ends the job: $(grep -m1 "^fanstore-train: error: " err.txt)"
  # A sample bad in one rank's slab only: --skip-bad-samples would replace it on that rank alone, and the group
  # would train two samples as one. The job stops, saying why (it trained on silently).
  if $py -c 'import h5py' 2> /dev/null; then
    cp -r c32 slab && $py -c '
import h5py
with h5py.File("slab/train/univ_00003.h5", "r+") as h:
    h["full"][0, 0, 0, 0] = float("nan")' || { echo "FAIL could not write the NaN"; exit 1; }
    if mpirun_n 2 "$train" --model cosmoflow --data slab/train --batch 1 --threads 1 --grid 1,2,1,1 \
        --skip-bad-samples --checkpoint ck_slab > out.txt 2> err.txt; then echo "FAIL a sample bad in one slab: exit 0"; exit 1; fi
    [[ $(grep -c "hold different samples of batch [0-9]*: a sample is bad in part of its volume only" err.txt) == 1 ]] ||
      { echo "FAIL a sample bad in one slab (one line from the group's first rank):"; cat err.txt; exit 1; }
    echo "ok   a sample bad in one slab stops the job: $(grep -m1 "^fanstore-train: error: " err.txt)"
  fi
  ;;
learn_cosmoflow_grid)
  # CosmoFlow's learning test, on a 1,2,2,1 grid: at 32^3 the early layers are split 2 x 2 and the small tail
  # runs on fewer ranks (the grid computes what one rank does: the model suites). The MAE of the 4 regressed
  # targets must fall well below predicting each target's mean. Adam 1e-3 after one warm-up epoch: at 2e-3
  # without warm-up the 1.2*tanh output saturates on some data draws (then its gradient vanishes and the MAE
  # stays at ~1.17 for good).
  "$datagen" cosmoflow -o data --samples 160 --size 32 --seed 3 > /dev/null
  mpirun_n 4 "$train" --model cosmoflow --grid 1,2,2,1 --data data/train --val data/val --epochs 8 --batch 4 \
    --lr 0.001 --optimizer adam --warmup-epochs 1 --schedule cosine --threads 1 --prefetch-threads 1 --seed 1 \
    --checkpoint ck
  mae=$(summary val_metric ck/metrics.jsonl) base=$(summary baseline_mae ck/metrics.jsonl)
  check "cosmoflow on grid 1,2,2,1: val MAE $mae < 0.75 x predict-the-mean $base" "$mae < 0.75 * $base"
  ;;
*) echo "unknown case $case_name"; exit 2 ;;
esac
