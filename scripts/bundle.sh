#!/usr/bin/env bash
# Makes a relocatable runtime bundle for nodes that have glibc and (for GPUs) the NVIDIA driver and a CUDA runtime,
# but none of the packages FanStore builds against: OUT/fanstore-VERSION-linux-x86_64.tar.zst holds the programs,
# the preload library, the CUDA module, trainer_conformance, the GPU check and its scripts, and every shared library
# they need beyond glibc and CUDA (oneDNN, Open MPI with its plugins and help files, PMIx, HDF5, libjpeg-turbo, zstd,
# xxHash, libfuse3, the compiler runtime). The CUDA libraries are found on the node (bin/fanstore-env). Binaries are
# stripped; their debug info goes to fanstore-VERSION-linux-x86_64-debug.tar.zst beside it. docs/gpu.md, "Bundle".
# Usage: scripts/bundle.sh [--build DIR] [--out DIR] [--level N]   (after scripts/build.sh; needs patchelf, zstd)
# --build defaults to the checkout's build/, --out to the current directory; relative paths are from the latter.
set -euo pipefail
caller=$PWD  # relative --build and --out name directories from where the script was started
cd "$(dirname "$0")/.."
src=$PWD build=build out=$caller level=19
value() { [ $# -ge 2 ] || { echo "bundle: $1 needs a value (see --help)" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) value "$@"; build=$(cd "$caller" && realpath -m "$2"); shift ;;
    --out) value "$@"; out=$(cd "$caller" && realpath -m "$2"); shift ;;
    --level) value "$@"; level=$2; shift ;;  # zstd level (tests use a fast one; the size limit is for 19)
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bundle: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for tool in patchelf zstd ldd objcopy strip; do
  command -v $tool >/dev/null || { echo "bundle: $tool not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
[ -x "$build/bin/fanstore" ] || { echo "bundle: $build/bin/fanstore not built (scripts/build.sh)" >&2; exit 1; }
version=$("$build/bin/fanstore" --version | awk '{print $2}')
name=fanstore-$version-linux-$(uname -m)
work=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT
B=$work/$name
D=$work/$name-debug

# 1. Ours: the installed runtime (bin/, lib/), the conformance suite and the scripts the GPU check runs.
cmake --install "$build" --prefix "$B" --component runtime >/dev/null
rm -rf "$B/share/doc"
cp "$build/bin/trainer_conformance" "$B/bin/"
install -m 755 scripts/gpu-check.sh scripts/gpu-smoke.sh scripts/bundle/fanstore-env "$B/bin/"
mkdir -p "$B/share/fanstore"
cp scripts/bench/torch_models.py "$B/share/fanstore/"
# What README.md and docs/ send a user to: the prefetch module, the launch examples, and the docs themselves.
install -D -m 644 tools/python/fanstore_prefetch.py "$B/share/fanstore/python/fanstore_prefetch.py"
install -D -m 755 scripts/mpirun-example.sh "$B/share/fanstore/scripts/mpirun-example.sh"
install -D -m 755 scripts/slurm/fanstore.sbatch scripts/slurm/virtual-cluster.sh -t "$B/share/fanstore/scripts/slurm/"
install -m 755 scripts/netns-hosts.sh scripts/plot-metrics.sh -t "$B/share/fanstore/scripts/"
install -D -m 644 README.md "$B/share/fanstore/doc/README.md"
cp -r docs "$B/share/fanstore/doc/"
# What the CUDA module was built against, for fanstore-env to set beside what a node has.
sed -n 's/^FANSTORE_CUDA_BUILD_VERSIONS:INTERNAL=//p' "$build/CMakeCache.txt" | tr ' ' '\n' >"$B/share/fanstore/build-info" 
echo "fanstore=$version" >>"$B/share/fanstore/build-info"
[ -e "$B/lib/libfanstore-trainer-cuda.so" ] &&
  echo "needs=$(patchelf --print-needed "$B/lib/libfanstore-trainer-cuda.so" | grep -E 'cud|nccl|cublas' | tr '\n' ' ')" >>"$B/share/fanstore/build-info"

# 2. Open MPI (relocated with OPAL_PREFIX=$B/mpi, the layout it computes from its prefix) and PMIx
# (PMIX_INSTALL_PREFIX=$B/mpi/pmix). Plugins that need UCX, libfabric, verbs or PSM stay out: the bundle's MPI
# speaks TCP and shared memory (docs/gpu.md says how to use a site's MPI instead).
ompi_pkglib=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
ompi_prefix=$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')
ompi_data=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
rel_pkglib=${ompi_pkglib#"$ompi_prefix"/}
mkdir -p "$B/mpi/bin" "$B/mpi/$rel_pkglib" "$B/mpi/share" "$B/mpi/pmix/lib/pmix"
for p in orterun orted ompi_info; do cp -L "$(command -v $p)" "$B/mpi/bin/"; done
ln -s orterun "$B/mpi/bin/mpirun"  # run by that name, the process is "mpirun" to pkill and ps, as a site's is
unwanted='libucp|libucs|libuct|libfabric|libibverbs|libpsm|librdmacm|libmlx|libcuda|libhcoll|libxpmem|libknem'
for plugin in "$ompi_pkglib"/*.so; do
  ldd "$plugin" 2>/dev/null | grep -Eq "$unwanted|not found" || cp -L "$plugin" "$B/mpi/$rel_pkglib/"
done
cp -rL "$ompi_data" "$B/mpi/share/"
pmix_lib=$(dirname "$(ldconfig -p | awk '/libpmix\.so\.2 / {print $NF; exit}')")
if [ -d "$pmix_lib/pmix2/lib/pmix" ]; then
  for plugin in "$pmix_lib"/pmix2/lib/pmix/*.so; do
    ldd "$plugin" 2>/dev/null | grep -Eq "$unwanted|not found" || cp -L "$plugin" "$B/mpi/pmix/lib/pmix/"
  done
  [ -d /usr/share/pmix ] && cp -rL /usr/share/pmix "$B/mpi/pmix/share"
fi
# mpirun: Open MPI's launcher with the bundle's prefix (the ranks it starts inherit it).
cat >"$B/bin/mpirun" <<'EOF'
#!/bin/sh
# Open MPI's mpirun from this bundle (its plugins and help files are found through OPAL_PREFIX).
here=$(cd "$(dirname "$0")/.." && pwd)
# Without ssh or rsh Open MPI refuses to start even a job on this node alone: name a stand-in (only remote
# launches use it, and they then fail saying so).
if [ -z "${OMPI_MCA_plm_rsh_agent:-}" ] && ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; then
  export OMPI_MCA_plm_rsh_agent=false
fi
OPAL_PREFIX=$here/mpi PMIX_INSTALL_PREFIX=$here/mpi/pmix exec "$here/mpi/bin/mpirun" "$@"
EOF
chmod 755 "$B/bin/mpirun"

# 3. Every library those files need beyond glibc and CUDA (found on the node), into lib/ under its soname.
glibc='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil|libanl|libnsl|libmvec|libBrokenLocale|libthread_db|libcrypt)\.so'
cudalibs='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver|libnvidia-ml)\.so'
elves() { find "$B" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c 'head -c4 "$1" | grep -q "ELF"' _ {} \; -print; }
# One ldd pass: it lists each file's whole closure, so the copied libraries' own needs are in it already.
for f in $(elves); do ldd "$f" 2>/dev/null; done | sort -u >"$work/ldd"
awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' "$work/ldd" | sort -u | while read -r soname path; do
  echo "$soname" | grep -Eq "$glibc|$cudalibs" && continue
  [ -e "$B/lib/$soname" ] || cp -L "$path" "$B/lib/$soname"
done
missing=$(awk '/not found/ {print $1}' "$work/ldd" | sort -u | grep -Ev "$cudalibs" || true)
[ -z "$missing" ] || { echo "bundle: libraries not found on this machine: $missing" >&2; exit 1; }

# 4. Relocatable: every ELF finds lib/ relative to itself; debug info aside, then stripped.
for f in $(elves); do
  dir=$(dirname "$f")
  rel=$(realpath --relative-to="$dir" "$B/lib")
  # DT_RPATH, not RUNPATH: it holds for what the libraries load too, and before LD_LIBRARY_PATH (a node's other
  # oneDNN or libstdc++ there must not replace the bundle's); the CUDA libraries, not in lib/, come from the node.
  patchelf --force-rpath --set-rpath "\$ORIGIN/$rel" "$f"
  dbg=""
  case "$f" in
    "$B"/lib/libfanstore* | "$B"/bin/*)
      if objcopy --only-keep-debug "$f" "$work/dbg" 2>/dev/null && [ -s "$work/dbg" ]; then
        dbg=$D/${f#"$B"/}.debug
        mkdir -p "$(dirname "$dbg")"
        mv "$work/dbg" "$dbg"
      fi ;;
  esac
  strip --strip-unneeded "$f" 2>/dev/null || true
  [ -z "$dbg" ] || objcopy --add-gnu-debuglink="$dbg" "$f"
done

mkdir -p "$out"
tar -C "$work" -cf - "$name" | zstd -q -T0 -"$level" -o "$out/$name.tar.zst" -f
[ -d "$D" ] && tar -C "$work" -cf - "$name-debug" | zstd -q -T0 -"$level" -o "$out/$name-debug.tar.zst" -f
size=$(stat -c %s "$out/$name.tar.zst")
echo "bundle: $out/$name.tar.zst ($((size / 1048576)) MiB; $(find "$B" -type f | wc -l) files; unpack anywhere, then" \
     "eval \"\$($name/bin/fanstore-env)\")"
