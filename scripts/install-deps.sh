#!/usr/bin/env bash
# Installs every build and test dependency of FanStore from Debian's apt (idempotent, non-interactive).
# Run as root (or with sudo available). Skips apt entirely when everything is already present.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libzstd-dev zstd libxxhash-dev
  libfuse3-dev fuse3
  libopenmpi-dev openmpi-bin
  slurmd slurmctld slurm-client munge libpmix-dev iproute2  # tests/slurm: a private virtual cluster (srun --mpi=pmix dlopens libpmix.so, ss finds free ports); the system services stay unused; iproute2 also: tests/mpi netns hosts (ip netns)
  libhdf5-dev hdf5-tools
  libdnnl-dev ocl-icd-opencl-dev
  libturbojpeg0-dev libjpeg62-turbo-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-dev clang-format  # clang-format: .clang-format (CONTRIBUTING.md)
  python3 python3-numpy python3-h5py python3-pil python3-torch python3-torchvision
  coreutils findutils tar diffutils file
  patchelf binutils  # scripts/bundle.sh: relocatable RPATHs, debug info kept aside
  fio busybox-static rsync libaio-dev liburing-dev util-linux
  gnuplot-nox
  gdb  # tests/slurm: the backtrace of a task that dumped core
  squashfs-tools squashfuse strace  # scripts/bench/env.sh: the mksquashfs + squashfuse columns, metadata calls counted
  sshfs openssh-server openssh-client  # scripts/bench/staging.sh: the shared file system, served from its own namespace
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root to install: ${missing[*]} (re-run as root or install them yourself)" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
