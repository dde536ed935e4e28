#!/bin/bash
# The runtime bundle (scripts/bundle.sh) in a bare root: a mount namespace whose root holds only glibc's files,
# busybox as /bin/sh (and its applets), a dynamic test program and the unpacked bundle -- none of the packages
# FanStore builds against. From there: `fanstore pack` and `fanstore run -- PROGRAM` serve an image,
# `fanstore-train --device cpu --benchmark 1` runs, `mpirun -np 2 fanstore-train` runs from the bundle's own Open MPI,
# `--device cuda` stops with the one "no CUDA device" line, and the GPU check exits 77.
# Usage: bundle_test.sh BUILD_DIR SOURCE_ROOT     (exit 77: not root, or no unshare/busybox/patchelf here)
set -u
BUILD=$1 S=$2
skip() { echo "*** SKIPPED: $* ***"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || skip "the bare root needs root (mount namespace, chroot)"
for t in unshare busybox patchelf zstd cc; do command -v $t >/dev/null || skip "$t not found"; done
[ -x "$BUILD/bin/fanstore-train" ] || skip "no fanstore-train in $BUILD (FANSTORE_TRAINER=OFF)"
T=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-bundle-XXXXXX")
trap 'rm -rf "$T"' EXIT

# The bundle, at a fast zstd level (the size limit is checked at level 19 by scripts/bundle.sh users and the note).
bash "$S/scripts/bundle.sh" --build "$BUILD" --out "$T" --level 3 >"$T/bundle.log" 2>&1 || fail "bundle.sh: $(cat "$T/bundle.log")"
tarball=$(ls "$T"/fanstore-*-linux-*.tar.zst | grep -v -- -debug)
name=$(basename "$tarball" .tar.zst)
echo "bundle: $(tail -1 "$T/bundle.log")"
# What README.md and docs/ send a user to is in it: the prefetch module (it imports), launch examples, the docs.
tar -I zstd -tf "$tarball" >"$T/list"
for f in share/fanstore/python/fanstore_prefetch.py share/fanstore/scripts/mpirun-example.sh \
  share/fanstore/scripts/slurm/fanstore.sbatch share/fanstore/scripts/slurm/virtual-cluster.sh \
  share/fanstore/scripts/netns-hosts.sh share/fanstore/scripts/plot-metrics.sh share/fanstore/doc/README.md \
  share/fanstore/doc/docs/daemon.md; do
  grep -qx "$name/$f" "$T/list" || fail "the bundle lacks $f"
done
mkdir -p "$T/py" && tar -I zstd -xf "$tarball" -C "$T/py" "$name/share/fanstore/python/fanstore_prefetch.py"
PYTHONPATH=$T/py/$name/share/fanstore/python /usr/bin/python3 -c 'import fanstore_prefetch' ||
  fail "the bundle's fanstore_prefetch.py does not import"
echo "ok the prefetch module, the launch examples and the docs are in the bundle"

# The bare root.
R=$T/root
mkdir -p "$R/usr/lib/x86_64-linux-gnu" "$R/usr/lib64" "$R/bin" "$R/etc" "$R/opt" "$R/proc" "$R/dev" "$R/sys" "$R/tmp"
ln -s usr/lib "$R/lib"
ln -s usr/lib64 "$R/lib64"
dpkg -L libc6 | grep -E '\.so(\.[0-9.]+)?$' | while read -r f; do
  [ -e "$f" ] || continue
  # As libc6 lays them out: the loader in the multiarch folder and at /lib64 (whose entry is a link to it).
  case "$f" in /lib64/ld-linux-x86-64.so.2) dest=$R/usr/lib64/ld-linux-x86-64.so.2 ;; *) dest=$R/usr/lib/x86_64-linux-gnu/$(basename "$f") ;; esac
  cp -L "$f" "$dest"
done
cp "$(command -v busybox)" "$R/bin/busybox"
for applet in $("$R/bin/busybox" --list); do [ -e "$R/bin/$applet" ] || ln -s busybox "$R/bin/$applet"; done
printf 'root:x:0:0:root:/tmp:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
printf '127.0.0.1 localhost %s\n' "$(hostname)" >"$R/etc/hosts"
printf '#include <stdio.h>\nint main(int c, char **v) { FILE *f = fopen(v[1], "r"); int ch; if (!f) { perror(v[1]); return 1; }\n'\
'  while ((ch = fgetc(f)) != EOF) putchar(ch); return 0; }\n' >"$T/dyncat.c"
cc -O1 -o "$R/bin/dyncat" "$T/dyncat.c" || fail "cannot build the test program"
zstd -q -d -c "$tarball" | tar -C "$R/opt" -xf - || fail "unpack"
[ -d "$R/usr/lib/x86_64-linux-gnu/openmpi" ] && fail "the root holds Open MPI"

# Inside: everything the bundle says it does, from nothing but the bundle.
cat >"$R/inside.sh" <<EOF
set -u
B=/opt/$name
eval "\$(\$B/bin/fanstore-env)" || { echo "FAIL fanstore-env"; exit 1; }
mkdir -p /tmp/src/d && echo hello from the image >/tmp/src/d/x.txt
fanstore pack /tmp/src -o /tmp/img >/tmp/pack.out 2>&1 || { echo "FAIL pack: \$(cat /tmp/pack.out)"; exit 1; }
got=\$(fanstore run --image /tmp/img -- /bin/dyncat /fanstore/d/x.txt 2>&1)
[ "\$got" = "hello from the image" ] || { echo "FAIL fanstore run: \$got"; exit 1; }
echo "ok fanstore pack + run"
out=\$(fanstore-train --model cosmoflow --input-size 32 --batch 1 --benchmark 1 --device cpu --threads 1 2>&1)
echo "\$out" | grep -q '^train: [0-9.]* samples/s' || { echo "FAIL fanstore-train --device cpu: \$out"; exit 1; }
echo "ok fanstore-train --device cpu"
out=\$(mpirun --allow-run-as-root --oversubscribe -np 2 fanstore-train --model cosmoflow --input-size 32 --batch 1 \
      --benchmark 1 --device cpu --threads 1 2>&1)
echo "\$out" | grep -q '^train: [0-9.]* samples/s' || { echo "FAIL mpirun -np 2 fanstore-train: \$out"; exit 1; }
echo "ok mpirun -np 2 fanstore-train"
# The launcher's process is named mpirun, so that "pkill -USR1 mpirun" stops a training run (docs/training.md).
mpirun --allow-run-as-root -np 1 sleep 3 & launcher=\$!
sleep 1
[ "\$(cat /proc/\$launcher/comm)" = mpirun ] || { echo "FAIL the launcher's process is \$(cat /proc/\$launcher/comm)"; exit 1; }
wait \$launcher
echo "ok the launcher's process is named mpirun"
out=\$(fanstore-train --model cosmoflow --input-size 32 --batch 1 --benchmark 1 --device cuda 2>&1); rc=\$?
[ \$rc -eq 1 ] && [ "\$(echo "\$out" | wc -l)" -eq 1 ] && echo "\$out" | grep -q -- '--device cuda: no CUDA device' ||
  { echo "FAIL --device cuda (rc \$rc): \$out"; exit 1; }
echo "ok --device cuda: \$out"
gpu-check.sh --out /tmp/gc >/tmp/gc.out 2>&1; rc=\$?
[ \$rc -eq 77 ] || { echo "FAIL gpu-check.sh rc \$rc: \$(cat /tmp/gc.out)"; exit 1; }
echo "ok gpu-check.sh: \$(cat /tmp/gc.out)"
EOF
unshare -m --propagation private /bin/sh -c "
  mount -t proc proc '$R/proc' && mount --rbind /dev '$R/dev' && mount --rbind /sys '$R/sys' &&
  mount -t tmpfs -o mode=1777 tmpfs '$R/tmp' && mount -t tmpfs tmpfs '$R/dev/shm' &&
  exec chroot '$R' /bin/sh /inside.sh" >"$T/inside.out" 2>&1
rc=$?
cat "$T/inside.out"
[ $rc -eq 0 ] || fail "in the bare root (rc $rc)"
echo "bundle_test: all good"
