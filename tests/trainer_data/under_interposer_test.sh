#!/usr/bin/env bash
# The data readers under FanStore's interposer: one epoch of each dataset kind must give the same
# checksum read from a plain tree and from a packed image via `fanstore run`.
# Usage: under_interposer_test.sh FANSTORE_BIN DATAGEN_BIN PROBE_BIN
set -euo pipefail
fanstore=$1 datagen=$2 probe=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-data-interpose-XXXXXX")
trap 'rm -rf "$work"' EXIT

"$datagen" imagefolder -o "$work/tree/img" --samples 40 --classes 4 --size 40 > /dev/null
"$datagen" cosmoflow -o "$work/tree/cosmo" --samples 10 --size 8 > /dev/null
"$datagen" unet3d -o "$work/tree/unet" --samples 10 --size 8 > /dev/null
"$fanstore" pack "$work/tree" -o "$work/image" --parts 2 --threads 2 > /dev/null

status=0
for pair in imagefolder:img cosmoflow:cosmo unet3d:unet; do
  kind=${pair%%:*} dir=${pair#*:}
  plain=$("$probe" "$kind" "$work/tree/$dir/train")
  served=$("$fanstore" run --image "$work/image" -- "$probe" "$kind" "/fanstore/$dir/train")
  if [[ "$plain" == "$served" ]]; then
    echo "ok   $kind: $served"
  else
    echo "FAIL $kind: plain '$plain' vs fanstore '$served'"
    status=1
  fi
done
exit $status
