#!/bin/bash
# A program that runs out of fds under `fanstore run` meets EMFILE where it would on the plain tree, less the few
# fds a reader cannot do without (its partitions, the lazy-fd placeholder): the fds the client keeps only for later
# (idle node-chunk-cache files of large files, cached memfds) are closed first. Usage: run_emfile.sh BUILD_DIR
set -euo pipefail
build=$1
fanstore=$build/bin/fanstore
py=${FANSTORE_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d /tmp/fanstore-emfile.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$py" - "$tmp/src" << 'PY'
import os, random, sys
random.seed(7)
os.makedirs(sys.argv[1])
for i in range(160):  # 3 chunks of 64 KiB each: read through the node chunk cache, a file of its own per file
    with open(os.path.join(sys.argv[1], "f%03d.bin" % i), "wb") as f:
        f.write(random.randbytes(150000))
PY
"$fanstore" pack "$tmp/src" -o "$tmp/img" --chunk 64K --parts 2 > /dev/null
cat > "$tmp/hold.py" << 'PY'
import glob, sys
paths = sorted(glob.glob(sys.argv[1] + "/*.bin"))
for p in paths[:60]:  # read and closed: the node chunk cache keeps their files for later
    with open(p, "rb") as f:
        f.read()
held = []
try:
    for p in paths[60:]:
        f = open(p, "rb")
        f.read(10)
        held.append(f)
except OSError as e:
    assert e.errno == 24, e
print(len(held))
PY
plain=$(ulimit -n 64 && "$py" "$tmp/hold.py" "$tmp/src")
served=$(ulimit -n 64 && "$fanstore" run --image "$tmp/img" -- "$py" "$tmp/hold.py" /fanstore)
echo "files held open with a limit of 64 fds: plain tree $plain, under fanstore run $served"
# Two partitions and the placeholder are the reader's own; one more of slack.
if [ "$served" -lt $((plain - 4)) ]; then
  echo "FAIL: fanstore run kept $((plain - served)) more fds than the 4 a reader needs"
  exit 1
fi
