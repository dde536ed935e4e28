#!/usr/bin/env bash
# Prints the machine a benchmark ran on as a Markdown list (cores, CPU, memory, kernel, what backs /tmp, /dev/shm, the disk dir).
# Usage: machine_info.sh [DISK_DIR]
set -uo pipefail
disk_dir=${1:-/var/tmp}
fs_line() {  # "<dir>: <fs type> on <device> (<rotational|non-rotational|virtual>)"
  local d=$1 type src dev rot kind
  type=$(findmnt -no FSTYPE -T "$d" 2>/dev/null | head -1 || stat -f -c %T "$d" 2>/dev/null || echo "?")
  src=$(df --output=source "$d" 2>/dev/null | tail -1)
  kind=""
  if [[ $src == /dev/* ]]; then
    dev=$(basename "$(readlink -f "$src")")
    rot=$(cat "/sys/class/block/$dev/queue/rotational" 2>/dev/null || true)
    [[ -z $rot ]] && rot=$(cat "/sys/class/block/$dev/../queue/rotational" 2>/dev/null || true)
    case "$rot" in 1) kind=" (reports rotational)" ;; 0) kind=" (non-rotational)" ;; esac
    [[ $dev == vd* ]] && kind="$kind, virtio disk"
  fi
  echo "$d: $type on $src$kind"
}
echo "- Cores (nproc): $(nproc)"
echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "- Memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "- Kernel: $(uname -sr); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
echo "- Storage: $(fs_line /tmp); $(fs_line /dev/shm); disk baseline $(fs_line "$disk_dir")"
echo "- Load when started: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min)"
