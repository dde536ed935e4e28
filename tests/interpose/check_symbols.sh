#!/bin/bash
# The preload library exports exactly interpose/symbols.txt, and each name there exists in libc (or in the
# library a "lib=NAME" word names, when that library is installed) unless marked optional.
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
# defined_in LIBRARY_PATH: the names it exports, one per line (cached per library).
defined_in() {
  local f=$tmp/defs-$(basename "$1")
  [ -f "$f" ] || nm -D --defined-only "$1" | awk '{print $3}' | sed 's/@.*//' | sort -u > "$f"
  echo "$f"
}
missing=0
while read -r sym rest; do
  opt=0 where=$libc
  for w in $rest; do
    case $w in
      optional) opt=1 ;;
      lib=*)
        where=$(ldconfig -p | awk -v n="${w#lib=}" '$1 == n && /x86-64/ && !found {print $NF; found = 1}')
        if [ -z "$where" ]; then
          echo "note: ${w#lib=} is not installed: $sym not checked"
          continue 2
        fi ;;
    esac
  done
  if ! grep -qx -- "$sym" "$(defined_in "$where")"; then
    if [ $opt = 1 ]; then
      echo "note: optional symbol $sym is not in $where"
    else
      echo "FAIL: $sym is listed in $list but $where does not define it (mark it optional?)"
      missing=1
    fi
  fi
done < <(grep -v '^[[:space:]]*#' "$list" | awk 'NF')
[ $missing -eq 0 ] || exit 1
echo "OK: $(wc -l < "$tmp/listed") symbols exported, all present in $libc or the library named"
