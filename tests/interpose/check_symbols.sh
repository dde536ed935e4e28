#!/bin/bash
# The preload library exports exactly interpose/symbols.txt, and each name there exists in libc unless marked optional.
# Usage: check_symbols.sh LIBFANSTORE_PRELOAD.so SYMBOLS.txt
set -euo pipefail
lib=$1 list=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^[[:space:]]*#' "$list" | awk 'NF {print $1}' | sort > "$tmp/listed"
nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort > "$tmp/exported"
if ! diff -u "$tmp/listed" "$tmp/exported"; then
  echo "FAIL: exports of $lib differ from $list (- listed only, + exported only)"
  exit 1
fi
libc=$(ldd "$lib" | awk '/libc.so/ {print $3}')
nm -D --defined-only "$libc" | awk '{print $3}' | sed 's/@.*//' | sort -u > "$tmp/libc"
missing=0
while read -r sym opt; do
  if ! grep -qx -- "$sym" "$tmp/libc"; then
    if [ "${opt:-}" = optional ]; then
      echo "note: optional symbol $sym is not in $libc"
    else
      echo "FAIL: $sym is listed in $list but $libc does not define it (mark it optional?)"
      missing=1
    fi
  fi
done < <(grep -v '^[[:space:]]*#' "$list" | awk 'NF')
[ $missing -eq 0 ] || exit 1
echo "OK: $(wc -l < "$tmp/listed") symbols exported, all present in $libc"
