#!/usr/bin/env bash
# One task of the test jobs that slurm_test.sh submits through scripts/slurm/fanstore.sbatch; it runs under
# `fanstore run --daemon`, so every read below /fanstore goes through this task's node daemon.
# Usage: job_task.sh train WORK SRC FANSTORE_TRAIN
#   1. task 0 says "running" (WORK/job-running) and waits for the test to look at the daemons (WORK/checked);
#   2. every task joins one data-parallel fanstore-train run (MPI over srun --mpi=pmix) on the image;
#   3. every task byte-compares the whole image, as its node sees it, with the source tree.
# Usage: job_task.sh train_until_cancelled WORK SRC FANSTORE_TRAIN
#   task 0 says "running"; every task joins a fanstore-train run far longer than the test waits, into
#   WORK/checkpoint-stop, which the test cancels (scancel) once it has trained a few steps.
# Usage: job_task.sh survive WORK SRC
#   task 0 says "running", waits until the test has killed another node's daemon (WORK/killed), then reads every
#   file at once and writes "PATH ok" or "PATH failed: ERROR" lines to WORK/survive.txt; other tasks do nothing.
set -euo pipefail
mode=$1 work=$2 src=$3
node=${SLURMD_NODENAME:?not in a Slurm job step}
rank=${SLURM_PROCID:?not in a Slurm job step}

# Bounded wait for a file the test creates.
await() {
  for ((i = 0; i < 1200; i++)); do [ -e "$work/$1" ] && return 0; sleep 0.1; done
  echo "job_task: the test did not create $1 within 120 s" >&2
  exit 1
}

case $mode in
  train)
    train=$4
    if [ "$rank" = 0 ]; then
      touch "$work/job-running"
      await checked
    fi
    # Small and short on purpose: 8 ranks share 2 cores. One thread each; batch 1 per rank.
    # A crash leaves its core in WORK/cores/TASK for slurm_test.sh to print a backtrace of.
    mkdir -p "$work/cores/$rank"
    (ulimit -c unlimited 2>/dev/null || true; cd "$work/cores/$rank" && exec "$train" --model cosmoflow \
      --data /fanstore/train --val /fanstore/val --checkpoint "$work/checkpoint" \
      --epochs 1 --batch 1 --threads 1 --prefetch-threads 1 --lr 0.001 --optimizer adam --seed 7)
    diff -r /fanstore "$src"
    files=$(find /fanstore -type f | wc -l)
    echo "compare: rank $rank on $node: $files files identical to the source"
    ;;
  train_until_cancelled)
    train=$4
    [ "$rank" = 0 ] && touch "$work/job-running"
    exec "$train" --model cosmoflow --data /fanstore/train --checkpoint "$work/checkpoint-stop" --epochs 1000 \
      --batch 1 --threads 1 --prefetch-threads 1 --lr 0.001 --optimizer adam --seed 7
    ;;
  survive)
    [ "$rank" = 0 ] || exit 0
    touch "$work/job-running"
    await killed
    # All at once: each read of the dead node's files may wait out the daemon's --timeout.
    mkdir "$work/survive.d"
    n=0
    while read -r f; do
      n=$((n + 1))
      if err=$(cmp "/fanstore/$f" "$src/$f" 2>&1); then echo "$f ok"; else echo "$f failed: ${err//$'\n'/; }"; fi \
        >"$work/survive.d/$n" &
    done < <(cd "$src" && find . -type f | sed 's|^\./||')
    wait
    cat "$work"/survive.d/* | sort >"$work/survive.txt"
    echo "survive: rank $rank on $node: $(grep -c ' ok$' "$work/survive.txt" || true) files read, $(grep -c ' failed: ' "$work/survive.txt" || true) failed"
    ;;
  *) echo "job_task: unknown mode $mode" >&2; exit 2 ;;
esac
