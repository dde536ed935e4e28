#!/bin/bash
# Permission checks through the interposer: tests/interpose/scripts/perm.fsio runs on a tree of files with
# restrictive modes and owners and on its image under `fanstore run`, as root, as nobody, as nobody with a
# supplementary group, and as root with the effective uid of nobody; every call must answer as the kernel
# answers on the tree; the same on `fanstore mount -o allow_other` (where FUSE mounts). Then `cat` of a 0000 file
# by nobody, through the preload and, where a user may mount FUSE, through `fanstore run --fuse always`. Needs root (to make the owners and switch users) and setpriv:
# exit 77 (skipped) without them.
# Usage: run_perm.sh BUILD_DIR FSIO_BINARY SCRIPTS_DIR
set -uo pipefail
build=$1 fsio=$2 scripts=$3
fanstore=$build/bin/fanstore
if [ "$(id -u)" != 0 ] || ! command -v setpriv > /dev/null; then
  echo "SKIP: needs root and setpriv"
  exit 77
fi
tmp=$(mktemp -d /tmp/fanstore-perm.XXXXXX)
trap 'fusermount3 -u "$tmp/fmnt" 2> /dev/null; rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
# The test programs must be reachable and runnable by nobody.
cp "$fsio" "$tmp/fsio"
chmod 755 "$tmp/fsio"
fsio=$tmp/fsio
group=4242  # a group nobody is not in, given as a supplementary group for the group-class run

src=$tmp/src
mkdir -p "$src/closed/sub" "$src/xonly" "$src/ronly"
mk() {  # mk PATH MODE OWNER:GROUP [CONTENT]
  printf '%s\n' "${4:-$1}" > "$src/$1"
  chown "$3" "$src/$1"
  chmod "$2" "$src/$1"
}
mk secret 0000 0:0
mk pub 0644 0:0
mk owned 0400 65534:65534
mk owned_nr 0044 65534:65534
mk grp 0040 0:$group
mk grp_no 0604 0:$group
mk egid 0040 0:65534
mk closed/inner 0644 0:0
mk closed/sub/deep 0644 0:0
mk xonly/f 0644 0:0
mk ronly/f 0644 0:0
ln -s ../pub "$src/closed/out"
ln -s closed/inner "$src/viaclosed"
for m in x:0755 nx:0644 ox:0700 gx:0710; do
  cp "$(type -P true)" "$src/true_${m%%:*}"
  chmod "${m#*:}" "$src/true_${m%%:*}"
done
chgrp $group "$src/true_gx"
printf '#!/bin/sh\nexit 3\n' > "$src/script_x"
cp "$src/script_x" "$src/script_nx"
cp "$src/script_x" "$src/script_xonly"
chmod 0755 "$src/script_x"
chmod 0644 "$src/script_nx"
chmod 0711 "$src/script_xonly"
chmod 0700 "$src/closed"
chmod 0711 "$src/xonly"
chmod 0744 "$src/ronly"
"$fanstore" pack "$src" -o "$tmp/img" > /dev/null || exit 1
chmod -R a+rX "$tmp/img"

status=0
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
as_member=(setpriv --reuid=65534 --regid=65534 --groups=$group)
declare -A who=([root]="" [nobody]="${as_nobody[*]}" [member]="${as_member[*]}")
for name in root nobody member euid; do
  script=$scripts/perm.fsio
  run=${who[$name]:-}
  if [ $name = euid ]; then  # real uid root, effective uid nobody (set inside the program: the loader
    script=$tmp/euid.fsio    # ignores LD_PRELOAD when the ids differ at exec)
    { echo "seteuid 65534"; grep -E '^(#|access|faccessat|euidaccess|open|fopen|stat)' "$scripts/perm.fsio"; } > "$script"
  fi
  $run "$fsio" "$src" < "$script" > "$tmp/$name.src" 2>&1
  $run "$fanstore" run --image "$tmp/img" --mount /fanstore -- "$fsio" /fanstore < "$script" > "$tmp/$name.mnt" 2>&1
  if diff -u "$tmp/$name.src" "$tmp/$name.mnt"; then
    echo "OK: perm.fsio as $name: $(grep -vc '^#' "$tmp/$name.src") calls agree between the tree and the mount" \
         "($(grep -c ' = -1 EACCES' "$tmp/$name.src") EACCES)"
  else
    echo "FAIL: perm.fsio as $name differs (- source tree, + mount)"
    status=1
  fi
done
# The tree must really exercise the checks: nobody is refused, root is not.
grep -q '^fopen @/secret r = -1 EACCES' "$tmp/nobody.src" || { echo "FAIL: nobody read the 0000 file"; status=1; }
grep -q '^fopen @/secret r = 7 ' "$tmp/root.src" || { echo "FAIL: root could not read the 0000 file"; status=1; }
grep -q '^fopen @/grp r = 4 ' "$tmp/member.src" || { echo "FAIL: the group member could not read grp"; status=1; }

# cat as nobody: the kernel's message and status, through the preload and through FUSE.
want=$("${as_nobody[@]}" cat "$src/secret" 2>&1; echo "rc=$?")
got=$("${as_nobody[@]}" "$fanstore" run --image "$tmp/img" -- cat /fanstore/secret 2>&1; echo "rc=$?")
if [ "${got//\/fanstore/$src}" = "$want" ]; then
  echo "OK: cat of a 0000 file as nobody through the preload: ${got//$'\n'/ }"
else
  echo "FAIL: cat of a 0000 file as nobody through the preload: '$got', the tree says '$want'"
  status=1
fi
# `fanstore mount` by root: with allow_other the kernel checks every other user against the modes and owners the
# mount reports (default_permissions), as on the tree; without it the kernel refuses other users outright.
mkdir -m 755 "$tmp/fmnt"
if "$fanstore" mount --image "$tmp/img" -o allow_other "$tmp/fmnt" 2> "$tmp/mount.err"; then
  for name in nobody member; do
    ${who[$name]} "$fsio" "$tmp/fmnt" < "$scripts/perm.fsio" > "$tmp/$name.fuse" 2>&1
    if diff -u "$tmp/$name.src" "$tmp/$name.fuse"; then
      echo "OK: perm.fsio as $name on \`fanstore mount -o allow_other\`: every call agrees with the tree"
    else
      echo "FAIL: perm.fsio as $name on the FUSE mount differs (- source tree, + mount)"
      status=1
    fi
  done
  fusermount3 -u "$tmp/fmnt"
  "$fanstore" mount --image "$tmp/img" "$tmp/fmnt"
  if "${as_nobody[@]}" stat "$tmp/fmnt/pub" > /dev/null 2>&1; then
    echo "FAIL: another user reached a FUSE mount made without allow_other"
    status=1
  else
    echo "OK: without allow_other the FUSE mount refuses other users"
  fi
  fusermount3 -u "$tmp/fmnt"
else
  echo "skip: FUSE cannot mount here: $(cat "$tmp/mount.err")"
fi
mkdir -m 777 "$tmp/mnt"
for p in secret pub owned closed/inner; do
  want=$("${as_nobody[@]}" cat "$src/$p" 2>&1; echo "rc=$?")
  got=$("${as_nobody[@]}" "$fanstore" run --fuse always --image "$tmp/img" --mount "$tmp/mnt" -- cat "$tmp/mnt/$p" 2>&1
        echo "rc=$?")
  if [ "${got//$tmp\/mnt/$src}" = "$want" ]; then
    echo "OK: cat $p as nobody through FUSE: ${got//$'\n'/ }"
  elif grep -q "fanstore mount\|/dev/fuse is not open to this user" <<< "$got"; then
    echo "skip: FUSE as a user is out of reach here: $got"
    break
  else
    echo "FAIL: cat $p as nobody through FUSE: '$got', the tree says '$want'"
    status=1
  fi
done
exit $status
