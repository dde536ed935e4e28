#!/usr/bin/env bash
# The whole story on a fresh machine: install, build, make a small dataset, pack it, and read it
# through FanStore with an unmodified PyTorch DataLoader, next to the same read from the plain directory.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BIN=${BUILD_DIR:-build}/bin
WORK=${DEMO_DIR:-$(mktemp -d /tmp/fanstore-demo.XXXXXX)}
PY=/usr/bin/python3
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
echo "demo: the digests above match when FanStore served the same bytes; outputs are in $WORK"
