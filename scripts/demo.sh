#!/usr/bin/env bash
# The whole story on a fresh machine: install, build, make a small dataset, pack it, and read it
# through FanStore with an unmodified PyTorch DataLoader, next to the same read from the plain directory;
# then train ResNet-50 briefly on a packed image through FanStore, on 1 and on 2 MPI ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BIN=${BUILD_DIR:-build}/bin
WORK=${DEMO_DIR:-$(mktemp -d /tmp/fanstore-demo.XXXXXX)}
PY=${FANSTORE_PYTHON:-/usr/bin/python3}
echo
echo "== 1. a small ImageNet-style dataset in $WORK/data"
$PY scripts/demo/make_dataset.py "$WORK/data" 8 60
echo "   $(find "$WORK/data" -type f | wc -l) files, $(du -sh "$WORK/data" | cut -f1)"
echo
echo "== 2. pack it into 4 partitions, the validation set replicated to every node"
rm -rf "$WORK/image"
$BIN/fanstore pack "$WORK/data" -o "$WORK/image" --parts 4 --replicate 'val/*'
$BIN/fanstore info "$WORK/image"
$BIN/fanstore verify "$WORK/image"
echo
echo "== 3. an unmodified program reads it through FanStore (LD_PRELOAD, no daemon on one node)"
$BIN/fanstore run --image "$WORK/image" -- ls -l /fanstore/train | head -5
$BIN/fanstore run --image "$WORK/image" -- md5sum /fanstore/labels.npy
md5sum "$WORK/data/labels.npy"
echo
echo "== 4. torchvision ImageFolder + DataLoader(num_workers=2): plain directory, then through FanStore"
$PY scripts/demo/read_dataset.py "$WORK/data/train"
$BIN/fanstore run --stats --image "$WORK/image" -- $PY scripts/demo/read_dataset.py /fanstore/train
echo
echo "== 5. training: a 4-class image folder, packed, ResNet-50 trained briefly through FanStore"
rm -rf "$WORK/train-data" "$WORK/train-image" "$WORK/train-1rank" "$WORK/train-2ranks"
$BIN/fanstore-datagen imagefolder -o "$WORK/train-data" --samples 400 --classes 4 --size 32 --seed 5
$BIN/fanstore pack "$WORK/train-data" -o "$WORK/train-image" --parts 2 > /dev/null
TRAIN=(--model resnet50 --data /fanstore/train --val /fanstore/val --input-size 32 --epochs 3
       --lr 0.001 --optimizer adam --warmup-epochs 0.5 --schedule cosine --seed 1)
$BIN/fanstore run --image "$WORK/train-image" -- $BIN/fanstore-train "${TRAIN[@]}" --batch 16 --threads 2 --checkpoint "$WORK/train-1rank"
echo
echo "== 6. the same on 2 MPI ranks x batch 8 (global batch 16): each rank reads its shard through its own fanstore run"
if command -v mpirun > /dev/null; then
  ROOT_FLAG=(); [[ $(id -u) == 0 ]] && ROOT_FLAG=(--allow-run-as-root)
  mpirun "${ROOT_FLAG[@]}" --oversubscribe -np 2 --bind-to none \
    $BIN/fanstore run --image "$WORK/train-image" -- $BIN/fanstore-train "${TRAIN[@]}" --batch 8 --threads 1 --checkpoint "$WORK/train-2ranks"
else
  echo "   (mpirun not installed: skipped)"
fi
echo
echo "== 7. metrics (JSON lines; the last line is the summary)"
for run in train-1rank train-2ranks; do
  [[ -f "$WORK/$run/metrics.jsonl" ]] || continue
  echo "   $run: $(grep -c '"event":"step"' "$WORK/$run/metrics.jsonl") steps; $(grep '"event":"validation"' "$WORK/$run/metrics.jsonl" | tail -1)"
  echo "   $(tail -1 "$WORK/$run/metrics.jsonl")"
done
echo
echo "demo: the digests above match when FanStore served the same bytes; outputs are in $WORK"
echo "      (training: checkpoints and metrics.jsonl in $WORK/train-1rank and $WORK/train-2ranks; see docs/training.md)"
