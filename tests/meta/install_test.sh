#!/usr/bin/env bash
# An installed FanStore works on its own: `cmake --install` into a prefix that is then moved (case `prefix`), or the
# .deb packages unpacked with dpkg -x (case `deb`), and then, with the build and source trees hidden, `fanstore run
# --image IMG -- cat /fanstore/x` serves the image and a tiny C++ program builds against the prefix with
# find_package(FanStore) and reads the image through FanStore::client. In a build with the trainer's CUDA backend
# (CUDA_MODULE=1), the installed fanstore-train also finds and loads its module libfanstore-trainer-cuda.so for
# --device cuda (here without a GPU: "no CUDA device", said by the module).
# Usage: install_test.sh prefix|deb BUILD_DIR SOURCE_DIR [CUDA_MODULE (0|1)]
set -euo pipefail
case=$1 build=$(cd "$2" && pwd) src=$(cd "$3" && pwd) cuda_module=${4:-0}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL install.$case: $*" >&2; exit 1; }
case $work/ in "$build"/* | "$src"/*) fail "the scratch directory $work lies inside the build or source tree (set TMPDIR)" ;; esac

# The same bytes are served from the image and read back by the consumer program.
mkdir -p "$work/data/sub"
echo "hello from an installed fanstore" > "$work/data/x"
head -c 100000 /dev/urandom > "$work/data/sub/random.bin"

if [ "$case" = prefix ]; then
  cmake --install "$build" --prefix "$work/staged" > "$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
  # A prefix must not depend on where it was installed: move it before using it.
  mv "$work/staged" "$work/prefix"
  prefix=$work/prefix
elif [ "$case" = deb ]; then
  # cpack stages and writes into $work only (-B), never into the build tree other tests are using.
  cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/pkg" > "$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack -G DEB"; }
  runtime=$(ls "$work"/pkg/fanstore_*.deb) dev=$(ls "$work"/pkg/fanstore-dev_*.deb)
  dpkg-deb -c "$runtime" | awk '{print $NF}' > "$work/runtime.list"
  dpkg-deb -c "$dev" | awk '{print $NF}' > "$work/dev.list"
  runtime_files=(./usr/bin/fanstore ./usr/bin/fanstore-datagen ./usr/lib/libfanstore_preload.so)
  [ "$cuda_module" = 1 ] && runtime_files+=(./usr/lib/libfanstore-trainer-cuda.so)
  for f in "${runtime_files[@]}"; do
    grep -qx "$f" "$work/runtime.list" || fail "$(basename "$runtime") lacks $f"
  done
  ! grep -qx ./usr/bin/fanstore_option_tables "$work/runtime.list" || fail "$(basename "$runtime") ships the docs check's fanstore_option_tables"
  recommends=$(dpkg-deb -f "$runtime" Recommends)
  [[ "$recommends" == *openmpi-bin* && "$recommends" == *fuse3* ]] || fail "$(basename "$runtime") recommends '$recommends', not openmpi-bin and fuse3"
  for f in ./usr/include/fanstore/client.hpp ./usr/include/fanstore/image.hpp ./usr/lib/libfanstore_core.a \
           ./usr/lib/cmake/FanStore/FanStoreConfig.cmake ./usr/lib/cmake/FanStore/FanStoreTargets.cmake; do
    grep -qx "$f" "$work/dev.list" || fail "$(basename "$dev") lacks $f"
  done
  # dpkg -i would change this machine (and need the dependencies): check that dpkg would accept the packages here,
  # i.e. every dependency dpkg-shlibdeps derived is installed, then unpack them where dpkg -i would put them.
  for deb in "$runtime" "$dev"; do
    depends=$(dpkg-deb -f "$deb" Depends)
    [ -n "$depends" ] || fail "$(basename "$deb") declares no dependencies (dpkg-shlibdeps did not run?)"
    echo "$(basename "$deb"): Depends: $depends"
    IFS=',' read -ra alternatives <<< "$depends"
    for alt in "${alternatives[@]}"; do
      ok=0
      IFS='|' read -ra choices <<< "$alt"
      for choice in "${choices[@]}"; do
        pkg=$(echo "$choice" | sed -E 's/^ *([^ (]+).*/\1/')
        [ "$pkg" = fanstore ] && { ok=1; break; }  # satisfied by the other package of the pair
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && { ok=1; break; }
      done
      [ $ok = 1 ] || fail "$(basename "$deb") depends on '$alt', which is not installed here"
    done
  done
  dpkg -x "$runtime" "$work/root"
  dpkg -x "$dev" "$work/root"
  prefix=$work/root/usr
else
  fail "unknown case '$case' (prefix or deb)"
fi

"$prefix/bin/fanstore" pack "$work/data" -o "$work/image" > /dev/null || fail "the installed fanstore pack failed"
if [ "$cuda_module" = 1 ]; then
  [ -f "$prefix/lib/libfanstore-trainer-cuda.so" ] || fail "the CUDA module is not installed: $prefix/lib/libfanstore-trainer-cuda.so"
fi

mkdir -p "$work/consumer"
cp "$here/install_consumer.cpp" "$work/consumer/main.cpp"
cat > "$work/consumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(fanstore_consumer CXX)
find_package(FanStore 0.1 REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE FanStore::client)
EOF

# What runs with the build and source trees out of reach (argument: hidden, or visible where they cannot be hidden).
cat > "$work/isolated.sh" <<EOF
set -euo pipefail
if [ "\$1" = hidden ] && [ -e "$build/CMakeCache.txt" -o -e "$src/CMakeLists.txt" ]; then
  echo "FAIL install.$case: the build tree is still visible" >&2; exit 1
fi
out=\$("$prefix/bin/fanstore" run --image "$work/image" -- sh -c 'echo "preload=\$LD_PRELOAD"; cat /fanstore/x')
echo "\$out"
[ "\$(echo "\$out" | tail -1)" = "hello from an installed fanstore" ] || { echo "FAIL install.$case: fanstore run served the wrong bytes" >&2; exit 1; }
case "\$(echo "\$out" | head -1)" in
  "preload=$prefix/"*) ;;
  *) echo "FAIL install.$case: LD_PRELOAD does not point into the installed prefix $prefix" >&2; exit 1 ;;
esac
if [ "$cuda_module" = 1 ]; then
  # The installed fanstore-train loads the installed module (a GPU runs, no GPU says so; anything else is an error).
  if cuda=\$("$prefix/bin/fanstore-train" --model cosmoflow --benchmark 1 --batch 1 --input-size 32 --device cuda 2>&1); then
    echo "fanstore-train --device cuda ran: \$(echo "\$cuda" | tail -1)"
  elif echo "\$cuda" | grep -q -- "--device cuda: no CUDA device"; then
    echo "fanstore-train --device cuda loaded its module: \$(echo "\$cuda" | tail -1)"
  else
    echo "\$cuda"; echo "FAIL install.$case: the installed fanstore-train did not load its CUDA module" >&2; exit 1
  fi
fi
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  > "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; echo "FAIL install.$case: find_package(FanStore) failed" >&2; exit 1; }
cmake --build "$work/consumer/build" >> "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; echo "FAIL install.$case: the consumer did not build" >&2; exit 1; }
"$work/consumer/build/consumer" "$work/image" x sub/random.bin > "$work/consumer.out"
cmp <(cat "$work/data/x" "$work/data/sub/random.bin") "$work/consumer.out" || { echo "FAIL install.$case: the consumer read wrong bytes" >&2; exit 1; }
EOF

# Hide both trees behind empty tmpfs mounts in a private mount namespace (root, or an unprivileged user namespace).
hide="mount -t tmpfs none '$build' && mount -t tmpfs none '$src' && bash '$work/isolated.sh' hidden"
isolation="build and source trees hidden"
if unshare --mount --propagation private true 2>/dev/null; then
  unshare --mount --propagation private sh -c "$hide"
elif unshare --user --map-root-user --mount true 2>/dev/null; then
  unshare --user --map-root-user --mount sh -c "$hide"
else
  isolation="prefix relocated; trees NOT hidden (no mount namespace)"
  # No namespace here: the moved prefix (or unpacked root) and LD_PRELOAD pointing into it still prove that nothing
  # is taken from the build tree; say loudly that the stronger check did not run.
  echo "NOTE install.$case: no mount namespace available; the build tree could not be hidden (relocation still checked)"
  bash "$work/isolated.sh" visible
  ! grep -rqsF "$build" "$work/consumer/build/CMakeCache.txt" || fail "the consumer's build refers to the build tree $build"
fi
if [ "$case" = prefix ]; then
  # Under a path with a space the loader would drop LD_PRELOAD in every process: refused in one line, not run
  # without the image.
  cp -a "$prefix" "$work/pre fix"
  if out=$("$work/pre fix/bin/fanstore" run --image "$work/image" -- cat /fanstore/x 2>&1); then
    fail "fanstore run under a prefix with a space ran: $out"
  fi
  echo "$out" | grep -q "^fanstore run: .* with a space or ':' .*, which LD_PRELOAD cannot carry" ||
    fail "fanstore run under a prefix with a space: $out"
fi
echo "install.$case: ok ($isolation): fanstore run and a find_package(FanStore) consumer work from $prefix"
