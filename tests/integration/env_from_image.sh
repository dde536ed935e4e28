#!/bin/bash
# A software environment served from an image: copies of the system's numpy and torch packages, a C library pair
# (soname symlinks, DT_NEEDED through RUNPATH $ORIGIN) and a program linked against it, packed and used through
# `fanstore run --image` (lazy fds and FANSTORE_LAZY=0) and the FUSE mount; every front end must print what the
# source tree prints (env_probe.py: imports, results, multiprocessing fork/spawn/forkserver, DataLoader workers,
# python -m, ctypes dlopen, LD_LIBRARY_PATH). Usage: env_from_image.sh BUILD_DIR. Exit 77 without a C compiler.
set -uo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
fanstore=$build/bin/fanstore
py=${FANSTORE_PYTHON:-/usr/bin/python3}
cc=$(command -v cc || command -v gcc) || { echo "skip: no C compiler"; exit 77; }
tmp=$(mktemp -d /tmp/fanstore-env.XXXXXX)
mnt=""
cleanup() {
  [ -n "$mnt" ] && fusermount3 -u "$mnt" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
fail() { echo "FAIL  $*"; failed=$((failed + 1)); }

src=$tmp/src
mkdir -p "$src/py" "$src/env/lib" "$src/env/plugins" "$src/env/bin"
dist=$("$py" -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))')
cp -a "$dist/numpy" "$src/py/"
if "$py" -c 'import torch' 2>/dev/null; then
  cp -a "$dist/torch" "$src/py/"
  # Debian's torch/lib links climb out of the package to /usr/lib ("../../../../x86_64-linux-gnu/..."): in a copy
  # they would dangle. Point them at the system's files, absolute: links that lead out of the image.
  for l in "$src"/py/torch/lib/*; do
    [ -L "$l" ] && ln -sfn "$(readlink -f "$dist/torch/lib/${l##*/}")" "$l"
  done
fi
mkdir -p "$src/py/probe_pkg"
printf 'import sys\nprint("python -m from", __file__.split("/py/")[1], sys.argv[1:])\n' > "$src/py/probe_pkg/tool.py"
: > "$src/py/probe_pkg/__init__.py"
cp "$here/env_probe.py" "$src/py/env_probe.py"
printf 'int foo(void) { return 42; }\n' > "$tmp/foo.c"
printf 'int foo(void);\nint bar(void) { return foo() + 1; }\n' > "$tmp/bar.c"
printf '#include <stdio.h>\nint foo(void);\nint main(void) { printf("foo() = %%d\\n", foo()); return 0; }\n' > "$tmp/main.c"
"$cc" -shared -fPIC -Wl,-soname,libfoo.so.1 -o "$src/env/lib/libfoo.so.1.2" "$tmp/foo.c" &&
  ln -s libfoo.so.1.2 "$src/env/lib/libfoo.so.1" && ln -s libfoo.so.1 "$src/env/lib/libfoo.so" &&
  ln -s lib "$src/env/lib64" && ln -s libloop2.so "$src/env/lib/libloop.so" && ln -s libloop.so "$src/env/lib/libloop2.so" &&
  "$cc" -shared -fPIC -o "$src/env/plugins/libbar.so" "$tmp/bar.c" -L"$src/env/lib" -lfoo \
    -Wl,-rpath,'$ORIGIN/../lib64' -Wl,--enable-new-dtags &&
  "$cc" -o "$src/env/bin/foo-rpath" "$tmp/main.c" -L"$src/env/lib" -lfoo -Wl,-rpath,'$ORIGIN/../lib' &&
  "$cc" -o "$tmp/foo-llp" "$tmp/main.c" -L"$src/env/lib" -lfoo || { echo "FAIL: cannot build the test libraries"; exit 1; }
# A program that finds its data next to itself, through /proc/self/exe and through dladdr of its library (a JDK, a
# Python, GDAL do so): started by a shell, it runs from a copy, whose paths must lead back into the image.
mkdir -p "$src/env/share"
echo "data beside the program" > "$src/env/share/data.txt"
cat > "$tmp/whereami.c" << 'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int foo(void);
static void show(const char* how, const char* file) { /* ../share/data.txt from the directory of `file` */
  char path[4096], dir[4096], line[256] = "";
  snprintf(dir, sizeof dir, "%s", file);
  snprintf(path, sizeof path, "%s/../share/data.txt", dirname(dir));
  FILE* f = fopen(path, "r");
  if (f == NULL || fgets(line, sizeof line, f) == NULL) snprintf(line, sizeof line, "MISSING\n");
  if (f) fclose(f);
  printf("%s: %s", how, line);
}
int main(void) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  show("beside /proc/self/exe", exe);
  Dl_info info;
  if (dladdr((void*)foo, &info) && info.dli_fname) show("beside dladdr of libfoo", info.dli_fname);
  return 0;
}
EOF
"$cc" -o "$src/env/bin/whereami" "$tmp/whereami.c" -L"$src/env/lib" -lfoo -Wl,-rpath,'$ORIGIN/../lib' ||
  { echo "FAIL: cannot build whereami"; exit 1; }
# Relative library paths from a directory of the image (a virtual cwd under the interposer): dlopen of "./lib/..."
# and "lib/...", and a relative LD_LIBRARY_PATH entry of a program of the image without RUNPATH.
printf '#include <dlfcn.h>\n#include <stdio.h>\nint main(int c, char** v) { for (int i = 1; i < c; ++i) printf("dlopen %%s: %%s\\n", v[i], dlopen(v[i], RTLD_NOW) ? "loaded" : "not loaded"); return 0; }\n' > "$tmp/dltest.c"
"$cc" -o "$tmp/dltest" "$tmp/dltest.c" -ldl && cp "$tmp/foo-llp" "$src/env/bin/foo-llp" ||
  { echo "FAIL: cannot build dltest"; exit 1; }
"$fanstore" pack "$src" -o "$tmp/img" --parts 2 > /dev/null || { echo "FAIL: pack"; exit 1; }

# First, before any library of the image was loaded on this node: a program with RUNPATH $ORIGIN/../lib started
# by a shell and by Python. The loader searches that RUNPATH for the audit module's own libraries before the
# module runs; the mirror's lib/ must already exist then, or the loader never looks there again.
"$fanstore" run --image "$tmp/img" -- sh -c '/fanstore/env/bin/foo-rpath; echo "sh: $?"
  '"$py"' -c "import subprocess; print(subprocess.run([\"/fanstore/env/bin/foo-rpath\"]).returncode)"' \
  > "$tmp/first" 2>&1
if [ "$(cat "$tmp/first")" = "$(printf 'foo() = 42\nsh: 0\nfoo() = 42\n0')" ]; then
  echo "ok    RUNPATH \$ORIGIN/../lib on a fresh node, from sh and from Python"
else
  fail "RUNPATH \$ORIGIN/../lib on a fresh node: $(head -3 "$tmp/first")"
fi

# A program that carries its own libzstd.so.1 and libxxhash.so.0 (a conda environment's, older or newer than ours):
# the interposer's copies are linked in and hidden, so neither stands in for the other (before, the preload bound to
# the program's and the run died with "undefined symbol: ZSTD_decompressDCtx").
mkdir -p "$tmp/own"
printf 'unsigned ZSTD_versionNumber(void) { return 99999; }\n' > "$tmp/zs.c"
printf 'unsigned XXH_versionNumber(void) { return 4242; }\n' > "$tmp/xx.c"
cat > "$tmp/own.c" << 'EOF'
#include <stdio.h>
unsigned ZSTD_versionNumber(void);
unsigned XXH_versionNumber(void);
int main(int argc, char** argv) {  /* its own libraries' versions, then a file of the image copied to stdout */
  fprintf(stderr, "own %u %u\n", ZSTD_versionNumber(), XXH_versionNumber());
  FILE* f = argc > 1 ? fopen(argv[1], "rb") : NULL;
  char b[4096];
  size_t n;
  if (f == NULL) return 2;
  while ((n = fread(b, 1, sizeof b, f)) > 0) fwrite(b, 1, n, stdout);
  return 0;
}
EOF
"$cc" -shared -fPIC -Wl,-soname,libzstd.so.1 -o "$tmp/own/libzstd.so.1" "$tmp/zs.c" &&
  "$cc" -shared -fPIC -Wl,-soname,libxxhash.so.0 -o "$tmp/own/libxxhash.so.0" "$tmp/xx.c" &&
  "$cc" -o "$tmp/own/prog" "$tmp/own.c" "$tmp/own/libzstd.so.1" "$tmp/own/libxxhash.so.0" -Wl,-rpath,'$ORIGIN' ||
  { echo "FAIL: cannot build the program with its own zstd"; exit 1; }
FANSTORE_NODE_CACHE=off "$fanstore" run --image "$tmp/img" -- "$tmp/own/prog" /fanstore/env/lib/libfoo.so \
  > "$tmp/own.out" 2> "$tmp/own.err"
if [ "$(cat "$tmp/own.err")" = "own 99999 4242" ] && cmp -s "$tmp/own.out" "$src/env/lib/libfoo.so.1.2"; then
  echo "ok    a program with its own libzstd.so.1 and libxxhash.so.0 reads the image"
else
  fail "a program with its own libzstd.so.1 and libxxhash.so.0: $(head -3 "$tmp/own.err")"
fi

# probe ROOT: everything the environment is used for, with ROOT as its location.
probe() {
  local root=$1
  (cd "$tmp" && PYTHONPATH=$root/py "$py" "$root/py/env_probe.py" "$root" 2>&1
   PYTHONPATH=$root/py "$py" -m probe_pkg.tool arg 2>&1
   LD_LIBRARY_PATH=$root/env/lib "$tmp/foo-llp" 2>&1
   sh -c "$root/env/bin/whereami" 2>&1
   cd "$root/env" && "$tmp/dltest" ./lib/libfoo.so lib/libfoo.so.1 2>&1 && LD_LIBRARY_PATH=lib ./bin/foo-llp 2>&1
   "$py" -c 'import os, ctypes; os.environ["FANSTORE_TEST_NEW"] = "1"; os.chdir("lib"); ctypes.CDLL("./libfoo.so")
print("a new variable, chdir, then ctypes ./libfoo.so: loaded")' 2>&1
   cd lib && "$py" -c 'import ctypes; ctypes.CDLL("./libfoo.so"); print("ctypes ./libfoo.so loaded")' 2>&1) |
    sed "s|$root|@|g"
}
export -f probe
export tmp py

probe "$src" > "$tmp/want"
grep -q "torch" "$tmp/want" || echo "note: torch is not installed for $py; numpy only"
check() {
  local name=$1 got=$2
  if cmp -s "$tmp/want" "$got"; then
    echo "ok    $name ($(wc -l < "$got") lines)"
  else
    fail "$name differs from the source tree:"
    diff "$tmp/want" "$got" | head -20 | sed 's/^/      /'
  fi
}
"$fanstore" run --image "$tmp/img" -- bash -c 'probe /fanstore' > "$tmp/run"
check "fanstore run --image" "$tmp/run"
FANSTORE_LAZY=0 "$fanstore" run --image "$tmp/img" -- bash -c 'probe /fanstore' > "$tmp/eager"
check "fanstore run --image, FANSTORE_LAZY=0" "$tmp/eager"
# Where no copy can be made (no space; nowhere to write), one line says why and the loader reports the library
# missing: never a crash, never another library.
nocopy() {
  local name=$1 want=$2
  shift 2
  env "$@" FANSTORE_NODE_CACHE=off "$fanstore" run --image "$tmp/img" -- \
    "$py" -c 'import ctypes; ctypes.CDLL("/fanstore/env/plugins/libbar.so")' > "$tmp/nocopy" 2>&1
  if grep -q "$want" "$tmp/nocopy" && grep -q 'cannot open shared object file' "$tmp/nocopy"; then
    echo "ok    $name: one line, then the loader's error"
  else
    fail "$name: $(head -3 "$tmp/nocopy")"
  fi
}
nocopy "nowhere to write" "fanstore: cannot make loadable copies of the image's shared libraries: .*/nonexistent" \
  TMPDIR=/nonexistent
if [ "$(id -u)" = 0 ] && mkdir "$tmp/tiny" && mount -t tmpfs -o size=12k tmpfs "$tmp/tiny" 2>/dev/null; then
  nocopy "no space" "fanstore: cannot make a loadable copy of /fanstore/env/plugins/libbar.so: no space" \
    TMPDIR="$tmp/tiny"
  umount "$tmp/tiny"
fi
# The container pattern: `fanstore run` started as root, the job then switching users (setpriv here; runuser, gosu).
# The node chunk cache is root's (0700): the job decodes per process, copies libraries and programs into its own
# $TMPDIR/fanstore-libs-65534, and the first process of the new user says so in one line.
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
  chmod -R a+rX "$tmp"
  mkdir -m 1777 "$tmp/t"
  TMPDIR=$tmp/t "$fanstore" run --image "$tmp/img" -- setpriv --reuid 65534 --regid 65534 --clear-groups \
    bash -c 'probe /fanstore' > "$tmp/switched" 2> "$tmp/switched.err"
  check "fanstore run as root, the job as nobody (setpriv)" "$tmp/switched"
  if [ "$(grep -c . "$tmp/switched.err")" = 1 ] && grep -q "node chunk cache .* this job now runs as uid 65534" \
      "$tmp/switched.err" && [ "$(stat -c %U:%a "$tmp/t/fanstore-libs-65534")" = "nobody:700" ]; then
    echo "ok    the switched job: one line, copies in a directory of its own"
  else
    fail "the switched job: $(head -3 "$tmp/switched.err"; ls -ld "$tmp"/t/* 2>&1)"
  fi
fi
if [ -e /dev/fuse ] && command -v fusermount3 > /dev/null; then
  mnt=$tmp/mnt
  mkdir "$mnt"
  if "$fanstore" mount -i "$tmp/img" "$mnt" 2> "$tmp/mount.err"; then
    probe "$mnt" > "$tmp/fuse"
    check "fanstore mount" "$tmp/fuse"
  else
    echo "skip  fanstore mount: $(head -1 "$tmp/mount.err")"
  fi
fi
[ $failed -eq 0 ] && echo "env_from_image: all front ends agree with the source tree"
exit $((failed > 0))
