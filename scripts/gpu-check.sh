#!/bin/sh
# One command for a GPU node: runs every CUDA path of fanstore-train, keeps going past failures, and writes
# OUT/summary.md (one line per part, every failing case by name) with each part's log beside it.
#   a  the conformance suite in fp32, bf16 and fp16
#   b  compute-sanitizer memcheck over the op cases and two bf16 training steps, racecheck over a subset
#   c  the smoke training of gpu-smoke.sh (losses fall, the GPU's first loss equals the CPU's)
#   d  training throughput, ResNet-50 224 bf16, CosmoFlow 128^3 and U-Net 128^3, next to PyTorch on the same GPU
#   e  training on data read through `fanstore run` from a packed image (JPEGs, CosmoFlow HDF5): samples/s, stall
# Each part has a time budget (the whole under 8 minutes on one H100); a part that runs out is cut short and says so.
# Exit 0 all passed, 1 something failed, 77 no CUDA device (nothing ran). Works from a build tree or a bundle.
# Usage: gpu-check.sh [--bin DIR] [--out DIR] [--parts abcde] [--budget-scale F]
# (Plain sh: a bundle unpacked where nothing else is still says "no device". A part runs as this script again with
# --run-part P, under `timeout`.)
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin="" out=gpu-check parts=abcde scale=1 run_part=""
while [ $# -gt 0 ]; do
  case "$1" in
    --run-part) run_part=$2; shift ;;
    --bin) bin=$2; shift ;;
    --out) out=$2; shift ;;
    --parts) parts=$2; shift ;;
    --budget-scale) scale=$2; shift ;;  # budgets x F (tests of this script use a small one)
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$parts" in *[!a-e]* | "") echo "gpu-check: --parts takes letters a-e, e.g. --parts ac" >&2; exit 2 ;; esac
# The programs: beside this script in a bundle (bin/), else the build tree's.
if [ -z "$bin" ]; then
  if [ -x "$here/fanstore-train" ]; then bin=$here; else bin=$here/../build/bin; fi
fi
train=$bin/fanstore-train
smoke=$here/gpu-smoke.sh
models=$here/bench/torch_models.py
[ -f "$models" ] || models=$here/../share/fanstore/torch_models.py
py=${FANSTORE_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3 || echo "$py")
export FANSTORE_PYTHON=$py  # gpu-smoke.sh's too
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.md
say() { echo "$*" | tee -a "$summary"; }

# Seconds per part (x --budget-scale). Measured on nothing yet: sized so the sum stays under 8 minutes.
budget() {
  case $1 in a) echo 120 ;; b) echo 110 ;; c) echo 60 ;; d) echo 120 ;; e) echo 50 ;; esac
}
seconds() { awk -v b="$(budget "$1")" -v f="$scale" 'BEGIN { s = int(b * f + 0.5); print (s < 1 ? 1 : s) }'; }

part_a() {
  for precision in fp32 bf16 fp16; do
    "$bin/trainer_conformance" --backend cuda --precision $precision >"$out/a-$precision.out" 2>&1
    rc=$?
    cat "$out/a-$precision.out"
    sed -n "s/^\[  FAILED  \] \([A-Za-z0-9_/]*\.[A-Za-z0-9_./]*\).*/FAIL $precision \1/p" "$out/a-$precision.out" | sort -u
    [ "$rc" -eq 0 ] || grep -q '^\[  FAILED  \]' "$out/a-$precision.out" || echo "FAIL $precision (exit $rc)"
  done
}

part_b() {
  cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
  [ -x "$cs" ] || { echo "FAIL compute-sanitizer not found (set COMPUTE_SANITIZER)"; return; }
  work=$(mktemp -d)
  "$cs" --tool memcheck --error-exitcode 1 --leak-check full "$bin/trainer_conformance" --backend cuda \
    --gtest_filter='-*Model*' >"$out/b-memcheck.out" 2>&1 || echo "FAIL memcheck over the op cases"
  grep -m5 '^========= [A-Z]' "$out/b-memcheck.out" | grep -v 'ERROR SUMMARY: 0' | sed 's/^/  /'
  "$bin/fanstore-datagen" cosmoflow -o "$work/cf" --samples 8 --size 32 --seed 3 --val-fraction 0 >/dev/null
  "$cs" --tool memcheck --error-exitcode 1 "$train" --model cosmoflow --data "$work/cf/train" --batch 2 --max-steps 2 \
    --device cuda --precision bf16 --checkpoint "$work/ck" >"$out/b-train.out" 2>&1 || echo "FAIL memcheck over two bf16 steps"
  "$cs" --tool racecheck --error-exitcode 1 "$bin/trainer_conformance" --backend cuda \
    --gtest_filter='*Conv*:*Pool*:*Norm*' >"$out/b-racecheck.out" 2>&1 || echo "FAIL racecheck over conv, pool, norm"
  rm -rf "$work"
}

part_c() {
  "$smoke" --build "$bin/.." >"$out/c-smoke.out" 2>&1
  rc=$?
  cat "$out/c-smoke.out"
  sed -n 's/^FAIL \{1,\}\(.*\)/FAIL \1/p' "$out/c-smoke.out"
  [ "$rc" -eq 0 ] || grep -q '^FAIL ' "$out/c-smoke.out" || echo "FAIL gpu-smoke.sh (exit $rc)"
}

part_d() {
  # The first Python whose PyTorch sees the GPU: FANSTORE_PYTHON's, else the one on PATH (a GPU node's venv).
  torch_ok=0
  for cand in "$py" "$(command -v python3)"; do
    if [ -n "$cand" ] && "$cand" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      py=$cand torch_ok=1
      break
    fi
  done
  for spec in "resnet50 224 64" "cosmoflow 128 4" "unet3d 128 1"; do
    set -- $spec
    ours=$("$train" --model "$1" --input-size "$2" --batch "$3" --benchmark 10 --device cuda --precision bf16 2>&1 |
           sed -n 's/^train: \([0-9.]*\) samples\/s.*/\1/p')
    [ -n "$ours" ] || { echo "FAIL $1 benchmark"; continue; }
    if [ $torch_ok = 1 ]; then
      theirs=$("$py" "$models" --model "$1" --input-size "$2" --batch "$3" --mode train --iters 10 --warmup 3 \
               --device cuda --precision bf16 | awk -F, '{print $6}')
      ratio=$(awk -v a="$ours" -v b="${theirs:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "?" }')
      echo "ROW $1 $2 bf16 batch $3: fanstore-train $ours samples/s, PyTorch ${theirs:-?} samples/s ($ratio)"
    else
      echo "ROW $1 $2 bf16 batch $3: fanstore-train $ours samples/s (no PyTorch with CUDA here)"
    fi
  done
}

part_e() {
  work=$(mktemp -d)
  "$bin/fanstore-datagen" imagefolder -o "$work/img" --samples 512 --classes 4 --size 160 --seed 5 >/dev/null &&
    "$bin/fanstore" pack "$work/img" -o "$work/img.fst" >/dev/null || echo "FAIL make the JPEG image"
  "$bin/fanstore-datagen" cosmoflow -o "$work/cf" --samples 32 --size 128 --seed 3 --val-fraction 0 >/dev/null &&
    "$bin/fanstore" pack "$work/cf" -o "$work/cf.fst" >/dev/null || echo "FAIL make the CosmoFlow image"
  for spec in "resnet50 img 64 --input-size 128" "cosmoflow cf 4"; do
    set -- $spec
    m=$1 d=$2 b=$3
    shift 3
    line=$("$bin/fanstore" run --image "$work/$d.fst" -- "$train" --model "$m" --data /fanstore/train --batch "$b" \
           --epochs 1 --device cuda --precision bf16 --checkpoint "$work/ck-$m" "$@" 2>&1 | grep '^summary:')
    [ -n "$line" ] || { echo "FAIL $m through fanstore run"; continue; }
    echo "ROW $m through fanstore run: $(echo "$line" | sed -n 's/.*train \([0-9.]*\) samples\/s (input stall \([0-9.]*%\).*/\1 samples\/s, input stall \2/p')"
  done
  rm -rf "$work"
}

if [ -n "$run_part" ]; then  # one part, under run_part's timeout (below)
  "part_$run_part"
  exit 0
fi
: >"$summary"
if [ ! -x "$train" ]; then
  say "gpu-check: FAIL: $train not found (give --bin DIR)"
  exit 1
fi
# No device: one line and 77, as the conformance suite and gpu-smoke.sh skip.
if ! device=$("$train" --model cosmoflow --benchmark 1 --batch 1 --input-size 32 --device cuda 2>"$out/probe.err"); then
  probe=$(tail -1 "$out/probe.err")
  case "$probe" in
    *"no CUDA device"* | *"built without the CUDA backend"*)
      say "gpu-check: SKIP: no CUDA device: $probe"
      exit 77 ;;
  esac
  say "gpu-check: FAIL: --device cuda: $probe"
  exit 1
fi
device=$(echo "$device" | sed -n 's/.*device: \(.*\)/\1/p' | head -1)
say "# gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on ${device:-an unnamed CUDA device}"
say ""
failed=0

# Runs part $1 ($2: its title) as `gpu-check.sh --run-part $1` under its budget; its log is OUT/part-$1.log, in
# which the part prints "FAIL <case>" for each failing case and "ROW <text>" for the summary's figures.
run_part() {
  p=$1 title=$2
  s=$(seconds "$p")
  start=$(date +%s)
  timeout -k 10 "$s" sh "$0" --run-part "$p" --bin "$bin" --out "$out" >"$out/part-$p.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  cases=$(sed -n 's/^FAIL \(.*\)/\1/p' "$out/part-$p.log" | sort -u | tr '\n' ';' | sed 's/;$//; s/;/; /g')
  rows=$(sed -n 's/^ROW //p' "$out/part-$p.log")
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    say "- ($p) $title: CUT SHORT after its budget of $s s${cases:+; failing before that: $cases} (part-$p.log)"
    failed=1
  elif [ $rc -ne 0 ] || [ -n "$cases" ]; then
    say "- ($p) $title: FAIL in $took s: ${cases:-exit $rc} (part-$p.log)"
    failed=1
  else
    say "- ($p) $title: ok in $took s"
  fi
  [ -z "$rows" ] || echo "$rows" | sed 's/^/  - /' | tee -a "$summary"
}

for p in a b c d e; do
  case "$parts" in *$p*) ;; *) continue ;; esac
  case $p in
    a) run_part a "conformance, fp32 bf16 fp16" ;;
    b) run_part b "compute-sanitizer memcheck and racecheck" ;;
    c) run_part c "smoke training (gpu-smoke.sh)" ;;
    d) run_part d "throughput next to PyTorch" ;;
    e) run_part e "training through fanstore run" ;;
  esac
done
say ""
say "gpu-check: $([ $failed = 0 ] && echo "all parts passed" || echo "FAILED (see above)"); logs in $out"
exit $failed
