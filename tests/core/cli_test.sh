#!/bin/bash
# CLI smoke test: pack/ls/cat/stat/info/verify outputs and exit codes, including refused images. Usage: cli_test.sh FANSTORE
set -u
F=$1
T=$(mktemp -d "${TMPDIR:-/tmp}/fanstore-cli-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_rc() { local want=$1; shift; "$@" >"$T/out" 2>"$T/err"; local rc=$?; [ $rc -eq $want ] || fail "rc $rc (want $want): $* :: $(cat "$T/err")"; }
one_line() { [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^$1" "$T/err" || fail "not one line starting '$1': $(cat "$T/err")"; }

mkdir -p "$T/src/a/b" "$T/src/empty" "$T/src/val"
echo hello >"$T/src/a/x.txt"
seq 1 20000 >"$T/src/a/b/nums.txt"
printf 'v' >"$T/src/val/v1"
ln -s nowhere "$T/src/dangling"
mkfifo "$T/src/fifo"

expect_rc 0 "$F" pack "$T/src" -o "$T/img" --parts 2 --replicate 'val/*' --threads 2
grep -q '^packed 3 files, 5 dirs: .* stored (ratio .*) in .* s, 1 symlink, skipped 1' "$T/out" || fail "summary: $(cat "$T/out")"
grep -q 'warning: skipped 1 special file (1 FIFO), e.g. fifo' "$T/err" || fail "warning: $(cat "$T/err")"
[ -e "$T/img/part-rep.fsp" ] || fail "no replicated partition"
# --follow-symlinks: what links point at; a dangling one is skipped with its own line. --strict refuses the FIFO.
expect_rc 0 "$F" pack "$T/src" -o "$T/img-follow" --follow-symlinks --threads 2
grep -q 'warning: skipping dangling symlink dangling' "$T/err" || fail "follow warning: $(cat "$T/err")"
grep -q ', skipped 2' "$T/out" || fail "follow summary: $(cat "$T/out")"
expect_rc 1 "$F" pack "$T/src" -o "$T/img-strict" --strict
grep -q 'fifo is a FIFO: .*pack without --strict' "$T/err" || fail "strict: $(cat "$T/err")"
[ ! -e "$T/img-strict" ] || fail "--strict left an image"
rm "$T/src/fifo"
# --replicate takes one GLOB each time (it took SRC as a second glob, then said "SRC is required"), and a glob that
# matches no file is named.
expect_rc 0 "$F" pack --replicate 'val/*' "$T/src" -o "$T/img-rep" --replicate '/val/*'
[ -e "$T/img-rep/part-rep.fsp" ] || fail "--replicate before SRC replicated nothing"
grep -q "warning: --replicate /val/\* matches no file, so nothing is replicated for it" "$T/err" ||
  fail "no warning for a glob that matches nothing: $(cat "$T/err")"

expect_rc 0 "$F" ls "$T/img"
[ "$(cat "$T/out")" = "$(printf 'a\ndangling\nempty\nval')" ] || fail "ls: $(cat "$T/out")"
expect_rc 0 "$F" stat "$T/img" dangling
grep -q 'type: symlink' "$T/out" && grep -q 'target: nowhere' "$T/out" && grep -q "owner: $(id -u):$(id -g)" "$T/out" ||
  fail "stat of a symlink: $(cat "$T/out")"
expect_rc 0 "$F" ls "$T/img" /a/ -l
grep -q '^drwx' "$T/out" || fail "ls -l: $(cat "$T/out")"
expect_rc 0 "$F" cat "$T/img" a/b/nums.txt
cmp -s "$T/out" "$T/src/a/b/nums.txt" || fail "cat differs"
# Partition files swapped by name: each holds the other's partition of this very image, which is said (it was
# "belongs to another image").
cp -r "$T/img" "$T/swapped" && mv "$T/swapped/part-00000.fsp" "$T/swapped/p0" &&
  mv "$T/swapped/part-00001.fsp" "$T/swapped/part-00000.fsp" && mv "$T/swapped/p0" "$T/swapped/part-00001.fsp"
expect_rc 1 "$F" verify "$T/swapped"
grep -q "part-00000.fsp holds partition 1 of this image, not 0: the partition files were renamed" "$T/err" ||
  fail "swapped partitions: $(head -2 "$T/err")"
expect_rc 1 "$F" cat "$T/img" /  # the root has an empty name in the index: it said "is a directory:  is a directory"
one_line "fanstore cat: is a directory: / is a directory"
: >"$T/afile"
expect_rc 1 "$F" pack "$T/src" -o "$T/afile"
one_line "fanstore pack: exists: output $T/afile already exists and is not a directory: remove it"
expect_rc 0 "$F" stat "$T/img" a/x.txt
grep -q 'size: 6' "$T/out" || fail "stat: $(cat "$T/out")"
# A symlink that names a path in the source by its absolute path reads the source later, not the image: one warning
# for all of them (through a link to the source too); relative links and absolute ones elsewhere get none.
mkdir -p "$T/abs/d" && echo a >"$T/abs/d/f" && ln -s "$T/abs/d/f" "$T/abs/in1" && ln -s "$T/abs/../abs/d" "$T/abs/in2"
ln -s d/f "$T/abs/rel" && ln -s /etc/hostname "$T/abs/out" && ln -s "$T/abs" "$T/abs-link"
expect_rc 0 "$F" pack "$T/abs-link" -o "$T/abs-img"
[ "$(grep -c warning "$T/err")" = 1 ] && grep -q "warning: 2 symlinks name a path in the source by its absolute path (e.g. in1 -> $T/abs/d/f), kept as is: .*--follow-symlinks" "$T/err" ||
  fail "absolute links into the source: $(cat "$T/err")"
rm "$T/abs/in1" "$T/abs/in2"
expect_rc 0 "$F" pack "$T/abs" -o "$T/abs-img2"
[ ! -s "$T/err" ] || fail "a warning for links that do not name the source: $(cat "$T/err")"
# Seconds since the epoch as GNU stat prints them, before 1970 too (it printed -315619200.123456789 for this one).
mkdir "$T/old" && touch -d '1960-01-01 00:00:00.123456789 UTC' "$T/old/f" && touch -d '@-1.5' "$T/old/g"
expect_rc 0 "$F" pack "$T/old" -o "$T/old-img"
for f in f g; do
  expect_rc 0 "$F" stat "$T/old-img" $f
  grep -q "mtime: .*($(stat -c %.9Y "$T/old/$f"))\$" "$T/out" || fail "stat of a time before 1970: $(cat "$T/out")"
done
expect_rc 0 "$F" info "$T/img"
grep -q 'part-rep.fsp.*(replicated)' "$T/out" || fail "info: $(cat "$T/out")"
expect_rc 0 "$F" verify "$T/img" --threads 2

expect_rc 1 "$F" cat "$T/img" nope
grep -q '^fanstore cat: not found' "$T/err" || fail "missing: $(cat "$T/err")"
# A damaged chunk of a file of 64 KiB chunks: the two good chunks before it go out, and one line says why.
mkdir -p "$T/dmg"
head -c $((4 * 65536)) /dev/urandom > "$T/dmg/f"
expect_rc 0 "$F" pack "$T/dmg" -o "$T/dmg-img" --chunk 64K --level 0
printf '\x5a' | dd of="$T/dmg-img/part-00000.fsp" bs=1 seek=$((64 + 2 * 65536 + 10)) conv=notrunc status=none
expect_rc 1 "$F" cat "$T/dmg-img" f
[ "$(stat -c %s "$T/out")" = 131072 ] && cmp -s "$T/out" <(head -c 131072 "$T/dmg/f") || fail "cat before the damage"
[ "$(wc -l <"$T/err")" -eq 1 ] && grep -q '^fanstore cat: .*checksum mismatch in chunk 2 of f' "$T/err" || fail "cat damaged: $(cat "$T/err")"
# ls -l shows a symlink, set-ID and sticky bits as ls does.
mkdir -p "$T/modes/sticky" && touch "$T/modes/suid" && chmod 4755 "$T/modes/suid" && chmod 1777 "$T/modes/sticky"
ln -sf suid "$T/modes/lnk"
expect_rc 0 "$F" pack "$T/modes" -o "$T/modes-img"
expect_rc 0 "$F" ls "$T/modes-img" -l
[ "$(cut -c1-10 "$T/out" | tr '\n' ' ')" = "lrwxrwxrwx drwxrwxrwt -rwsr-xr-x " ] || fail "ls -l modes: $(cat "$T/out")"
# Symlinks inside PATH are followed as through the mount: cat and ls through a link to a directory, cat of a link
# to a file; stat shows the link itself.
mkdir -p "$T/links/dir" && echo hello > "$T/links/dir/file" && ln -s dir "$T/links/dlink" && ln -s dir/file "$T/links/flink"
ln -s loop2 "$T/links/loop1" && ln -s loop1 "$T/links/loop2" && ln -s nowhere "$T/links/dangling"
expect_rc 0 "$F" pack "$T/links" -o "$T/links-img"
expect_rc 0 "$F" cat "$T/links-img" dlink/file && [ "$(cat "$T/out")" = hello ] || fail "cat dlink/file: $(cat "$T/err")"
expect_rc 0 "$F" cat "$T/links-img" flink && [ "$(cat "$T/out")" = hello ] || fail "cat flink: $(cat "$T/err")"
expect_rc 0 "$F" ls "$T/links-img" dlink/ && [ "$(cat "$T/out")" = file ] || fail "ls dlink/: $(cat "$T/out")"
expect_rc 0 "$F" stat "$T/links-img" flink && grep -q 'type: symlink' "$T/out" || fail "stat flink: $(cat "$T/out")"
# A trailing / names a directory, as through the mount: the last link is followed, and a file is ENOTDIR.
expect_rc 0 "$F" stat "$T/links-img" dlink/ && grep -q 'type: directory' "$T/out" || fail "stat dlink/: $(cat "$T/out")"
expect_rc 1 "$F" cat "$T/links-img" flink/
one_line "fanstore cat: not a directory: flink/: a trailing / names a directory"
# Through links, the line names the path asked for; a loop is said once.
expect_rc 1 "$F" cat "$T/links-img" dangling
one_line "fanstore cat: not found: no such file in the image: nowhere (through symlinks from dangling)"
expect_rc 1 "$F" cat "$T/links-img" loop1
one_line "fanstore cat: too many levels of symbolic links: a symlink loop in the image (over 40 links followed): loop1"
expect_rc 1 "$F" pack "$T/src" -o "$T/img"            # non-empty output
expect_rc 1 "$F" pack "$T/nosuch" -o "$T/img2"        # missing source
[ ! -e "$T/img2" ] || fail "img2 left behind"

cp -r "$T/img" "$T/newer"
printf '\x04' | dd of="$T/newer/index.fsi" bs=1 seek=8 conv=notrunc 2>/dev/null
expect_rc 1 "$F" info "$T/newer"
grep -q 'index.fsi reads as image version 4 but its header checksum does not match: it is most likely damaged' \
  "$T/err" || fail "version: $(cat "$T/err")"
cp -r "$T/img" "$T/short"
truncate -s 300 "$T/short/index.fsi"
expect_rc 1 "$F" ls "$T/short"
grep -q 'truncated (300 of' "$T/err" || fail "truncated: $(cat "$T/err")"
cp -r "$T/img" "$T/bad"
part=$("$F" stat "$T/img" a/b/nums.txt | sed -n 's/.*part: [0-9]* (\(.*\))/\1/p')
off=$("$F" stat "$T/img" a/b/nums.txt | sed -n 's/^offset: //p')
printf 'Z' | dd of="$T/bad/$part" bs=1 seek=$((off + 20)) conv=notrunc 2>/dev/null
expect_rc 1 "$F" verify "$T/bad"
grep -q 'BAD a/b/nums.txt' "$T/err" || fail "verify: $(cat "$T/err")"
# A damaged file whose name holds a newline and a backslash: one line each, the name escaped as `ls -b` does.
mkdir -p "$T/nl" && printf 'some text for a damaged file\n' >"$T/nl/a
b\\c" && expect_rc 0 "$F" pack "$T/nl" -o "$T/nlimg"
off=$("$F" stat "$T/nlimg" "a
b\\c" | sed -n 's/^offset: //p')
printf 'Z' | dd of="$T/nlimg/part-00000.fsp" bs=1 seek=$((off + 3)) conv=notrunc 2>/dev/null
expect_rc 1 "$F" verify "$T/nlimg"
[ "$(wc -l <"$T/err")" -eq 2 ] && grep -qF 'BAD a\nb\\c: corrupt: ' "$T/err" && grep -qF 'mismatch in a\nb\\c (' "$T/err" ||
  fail "verify of a name with a newline: $(cat "$T/err")"
expect_rc 1 "$F" cat "$T/nlimg" "a
b\\c"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "cat of a name with a newline: $(cat "$T/err")"
# `wait --timeout` in whole milliseconds of an int: 1e10 s once wrapped to "-2147483648 ms" and gave up at once.
for t in 1e10 -5 nan; do
  expect_rc 1 "$F" wait "$T/no.sock" --timeout $t
  grep -q "^fanstore wait: --timeout: $t is not a number of seconds from 0 to 2000000" "$T/err" || fail "wait --timeout $t: $(cat "$T/err")"
done
# A format-2 image (tests/core/data/v2-image, made before symlinks and owners were kept) is still served as it is.
V2=$(cd "$(dirname "$0")" && pwd)/data/v2-image
expect_rc 0 "$F" verify "$V2"
expect_rc 0 "$F" info "$V2"
grep -q 'format version: 2' "$T/out" || fail "v2 info: $(cat "$T/out")"
expect_rc 0 "$F" cat "$V2" docs/long.txt
[ "$(md5sum <"$T/out" | cut -c1-32)" = 81e50e0ec04232ed930bb4e2e7d951c1 ] || fail "v2 content"
expect_rc 0 "$F" stat "$V2" one
grep -q 'mode: 0640' "$T/out" && ! grep -q 'owner:' "$T/out" || fail "v2 stat: $(cat "$T/out")"
# A format-1 image (tests/core/data/v1-image, made by fanstore 0.1 before chunking) is refused with the command
# that converts it; convert keeps every file, checksum, mode, mtime and partition, and refuses a current image.
V1=$(cd "$(dirname "$0")" && pwd)/data/v1-image
expect_rc 1 "$F" ls "$V1"
grep -q 'fanstore convert IMAGE -o NEW_IMAGE' "$T/err" || fail "v1 refusal: $(cat "$T/err")"
expect_rc 0 "$F" convert "$V1" -o "$T/v2" --threads 2
grep -q '^converted 5 files, 5 dirs' "$T/out" || fail "convert summary: $(cat "$T/out")"
expect_rc 0 "$F" verify "$T/v2"
expect_rc 0 "$F" stat "$T/v2" docs/text.txt
grep -q 'xxh3: 506d3dfcaf2efd1c' "$T/out" && grep -q '2020-01-02 03:04:05.123456789' "$T/out" || fail "converted stat: $(cat "$T/out")"
expect_rc 0 "$F" stat "$T/v2" one
grep -q 'mode: 0640' "$T/out" && grep -q 'xxh3: 65cd25028f98f158' "$T/out" || fail "converted mode: $(cat "$T/out")"
expect_rc 0 "$F" cat "$T/v2" one
[ "$(cat "$T/out")" = 1 ] || fail "converted content: $(cat "$T/out")"
expect_rc 0 "$F" info "$T/v2"
grep -q 'part-rep.fsp.*(replicated)' "$T/out" || fail "converted partitions: $(cat "$T/out")"
expect_rc 1 "$F" convert "$T/v2" -o "$T/v3"
grep -q 'not a format-1 image' "$T/err" || fail "convert of a current image: $(cat "$T/err")"
cp -r "$V1" "$T/v1bad"
printf 'Z' | dd of="$T/v1bad/part-00001.fsp" bs=1 seek=2000 conv=notrunc 2>/dev/null
expect_rc 1 "$F" convert "$T/v1bad" -o "$T/v2bad"
grep -q 'in the old image' "$T/err" || fail "convert of a damaged image: $(cat "$T/err")"
[ ! -e "$T/v2bad" ] || fail "a failed convert left $T/v2bad"
# A missing partition says what to copy; a FIFO in place of a partition or of the index is refused, never waited on.
cp -r "$V1" "$T/v1gone" && rm "$T/v1gone/part-00001.fsp"
expect_rc 1 "$F" convert "$T/v1gone" -o "$T/v2gone"
grep -q 'part-00001.fsp is missing: copy it next to the image.s index.fsi, then convert again' "$T/err" ||
  fail "convert, missing partition: $(cat "$T/err")"
rm "$T/v1gone/index.fsi" && mkfifo "$T/v1gone/index.fsi"
expect_rc 1 timeout 10 "$F" convert "$T/v1gone" -o "$T/v2gone"
grep -q 'index.fsi is not a regular file' "$T/err" || fail "convert, FIFO index: $(cat "$T/err")"
cp "$V1/index.fsi" "$T/v1gone/index.fsi.new" && mv "$T/v1gone/index.fsi.new" "$T/v1gone/index.fsi"
mkfifo "$T/v1gone/part-00001.fsp"
expect_rc 1 timeout 10 "$F" convert "$T/v1gone" -o "$T/v2gone"
[ ! -e "$T/v2gone" ] || fail "a failed convert left $T/v2gone"

# pack --chunk: sizes with suffixes, the limits refused with one line
expect_rc 0 "$F" pack "$T/src" -o "$T/c64" --chunk 64K
expect_rc 0 "$F" info "$T/c64"
grep -q 'chunk size: 64.0 KiB' "$T/out" || fail "chunk size: $(cat "$T/out")"
expect_rc 1 "$F" pack "$T/src" -o "$T/c3" --chunk 3000
grep -q -- '--chunk must be a power of two' "$T/err" || fail "bad chunk: $(cat "$T/err")"
# Usage errors: exit 1 and one line "fanstore <cmd>: ..." for every command (CLI11's own codes and two-line
# messages never reach the user); --help and --version are not errors.
expect_rc 1 "$F"
one_line 'fanstore: give a command: pack, '
cmds=$(sed -n 's/^fanstore: give a command: \(.*\) (.*/\1/p' "$T/err" | tr -d ,)
[ "$(echo $cmds | wc -w)" -ge 11 ] || fail "command list: $cmds"
for c in $cmds; do
  expect_rc 1 "$F" "$c" --no-such-option
  one_line "fanstore $c: "
  expect_rc 0 "$F" "$c" --help
done
expect_rc 1 "$F" nosuch
one_line 'fanstore: no command nosuch; the commands are pack, '
expect_rc 1 "$F" pack -o "$T/x"
one_line 'fanstore pack: SRC is required; `fanstore pack --help` shows its usage'
expect_rc 1 "$F" pack "$T/src" -o "$T/x" --bogus
one_line 'fanstore pack: unknown option --bogus; `fanstore pack --help` lists its options'
expect_rc 1 "$F" pack "$T/src" -o "$T/x" --level 99
[ "$(cat "$T/err")" = 'fanstore pack: --level 99 is outside 0-22; use 1-22, or 0 to store raw' ] || fail "level: $(cat "$T/err")"
expect_rc 1 "$F" pack "$T/src" -o "$T/x" --threads 100000
one_line 'fanstore pack: --threads 100000 is outside 0-1024; use 0 for all cores, or at most 1024'
expect_rc 1 "$F" convert "$T/src" -o "$T/x" --level x
one_line 'fanstore convert: --level x is not a whole number; use 1-22, or 0 to store raw'
# A negative byte count, which CLI11's size parser took as a huge one.
expect_rc 1 "$F" pack "$T/src" -o "$T/x" --chunk -64K
one_line 'fanstore pack: --chunk: a size >= 0 is needed, not -64K'
expect_rc 1 "$F" pack "$T/src" -o "$T/x" --parts 0
one_line 'fanstore pack: --parts 0 is outside 1-100000'
# serve's counts say their range as pack's do (--stage-readers printed CLI11's 0 to 1.8e308 range); refused
# before MPI starts, so no mpirun is needed. (Without MPI, serve refuses every command line alike.)
if "$F" serve --help 2>/dev/null | grep -q -- --stage-readers; then
  expect_rc 1 "$F" serve --image "$T/img" --local "$T/x" --stage-readers -1
  one_line 'fanstore serve: --stage-readers -1 is outside 0-1048576; use 0 for every rank at once, or how many'
  expect_rc 1 "$F" serve --image "$T/img" --local "$T/x" --stage-readers two
  one_line 'fanstore serve: --stage-readers two is not a whole number; use 0 for every rank at once'
  # Past 2^64 - 1 a byte count was taken as 2^64 - 1, and prefetch took a directory for an empty list, a negative
  # stream for a huge one and a relative --mount as is.
  expect_rc 1 "$F" serve --image "$T/img" --local "$T/x" --cache-bytes 99999999999999999999
  one_line 'fanstore serve: --cache-bytes: a size below 16E is needed, not 99999999999999999999'
  expect_rc 1 "$F" prefetch --daemon "$T/no.sock" "$T"
  one_line "fanstore prefetch: the list $T is a directory: give a file with one path per line"
  expect_rc 1 "$F" prefetch --daemon "$T/no.sock" --stream -1 /dev/null
  one_line 'fanstore prefetch: --stream: a whole number from 0 to 2^64 - 1 is needed, not -1'
  expect_rc 1 "$F" prefetch --daemon "$T/no.sock" --mount rel /dev/null
  one_line 'fanstore prefetch: --mount rel is not an absolute path'
  expect_rc 1 "$F" serve --image "$T/img" --local ''  # (a singleton MPI job: it said "mkdir : No such file")
  one_line 'fanstore serve\[rank 0\]: invalid argument: --local is empty: give a node-local directory'
fi
expect_rc 1 "$F" ls "$T/img/index.fsi"
one_line "fanstore ls: not a directory: image $T/img/index.fsi is not a directory: pass the directory"
expect_rc 1 "$F" pack "$T/src" -o "$T/x" --chunk 99999999999999999999
one_line 'fanstore pack: --chunk: a size below 16E is needed, not 99999999999999999999'
[ ! -e "$T/x" ] || fail "a refused command line made $T/x"
# An unknown option where a positional is missing names the option (it said "PATH is required"); `--` passes a
# name that starts with '-'.
expect_rc 1 "$F" cat "$T/img" -dash
one_line "fanstore cat: unknown option -dash; a name that starts with '-' goes after \`--\` (\`-- -dash\`)"
expect_rc 1 "$F" cat "$T/img" -- -dash
one_line 'fanstore cat: not found: no such file in the image: -dash'
# A misspelt option with every positional given is named (CLI11 blamed what was left over: run's command, a value).
expect_rc 1 "$F" run --imgae "$T/img" -- true
one_line 'fanstore run: unknown option --imgae; `fanstore run --help` lists its options'
expect_rc 1 "$F" pack "$T/src" -o "$T/x" --lvl 3
one_line 'fanstore pack: unknown option --lvl; `fanstore pack --help` lists its options'
# A value the option's type cannot hold: named as such (it was CLI11's "could not convert: --replicas = ...").
expect_rc 1 "$F" serve --image "$T/img" --local "$T/nowhere" --replicas 99999999999
one_line 'fanstore serve: --replicas 99999999999 is not a value --replicas takes (a number in its range; on or off for a switch)'
expect_rc 1 "$F" run --image "$T/img" --
one_line 'fanstore run: CMD is required'
# An option given twice, and a relative --mount, say what to do (CLI11 said "At Most 1 required but received 2").
expect_rc 1 "$F" run --image "$T/img" --image "$T/img" -- true
one_line 'fanstore run: --image is given 2 times: pass it once'
expect_rc 1 "$F" run --image "$T/img" --mount fanstore -- true
one_line "fanstore run: --mount must be an absolute path, got 'fanstore': give the prefix, e.g. /fanstore"
expect_rc 1 "$F" run --image "$T/img" --log info -- true
one_line "fanstore run: --log must be debug (or off), got 'info'"
[ "$(FANSTORE_LOG=debug "$F" run --image "$T/img" --log off -- sh -c 'echo "${FANSTORE_LOG-unset}"')" = unset ] ||
  fail "--log off must turn off an inherited FANSTORE_LOG=debug"

# pack's messages name files through Printable: a newline in a name is written \n, and the message stays one line.
NL=$(printf 'p\nq')
mkdir -p "$T/nlp" && mkfifo "$T/nlp/$NL"
expect_rc 1 "$F" pack "$T/nlp" -o "$T/nlpimg" --strict
one_line "fanstore pack: invalid argument: source $T/nlp/p\\\\nq is a FIFO"
expect_rc 0 "$F" pack "$T/nlp" -o "$T/nlpimg"
one_line 'fanstore pack: warning: skipped 1 special file (1 FIFO), e.g. p\\nq: '
expect_rc 1 "$F" pack "$T/nlp/$NL" -o "$T/nlpimg2"
one_line "fanstore pack: not a directory: source $T/nlp/p\\\\nq is not a directory"
# -o naming a symlink (to an empty directory): said so, not "already exists and is not empty"; nothing written.
mkdir -p "$T/emptyout" && ln -s emptyout "$T/outlink"
expect_rc 1 "$F" pack "$T/src" -o "$T/outlink"
one_line "fanstore pack: exists: output $T/outlink is a symlink: give the directory it points to, or a name that"
[ -z "$(ls -A "$T/emptyout")" ] && [ -L "$T/outlink" ] || fail "a refused -o symlink changed something"
# -o naming a mount point (a fresh NVMe or tmpfs): refused before any work, which the final rename(2) onto it
# refused with EBUSY after the whole pack. Needs root to mount.
mkdir -p "$T/mnt-out"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=1M tmpfs "$T/mnt-out" 2>/dev/null; then
  expect_rc 1 "$F" pack "$T/src" -o "$T/mnt-out"
  one_line "fanstore pack: invalid argument: output $T/mnt-out is a mount point, which the finished image cannot"
  [ -z "$(ls -d "$T"/mnt-out.tmp-* 2>/dev/null)" ] || fail "a refused mount point left $(ls -d "$T"/mnt-out.tmp-*)"
  umount "$T/mnt-out"
fi
# --follow-symlinks: a loop is a loop, not a dangling link.
mkdir -p "$T/loop" && ln -s b "$T/loop/a" && ln -s a "$T/loop/b" && echo x >"$T/loop/f"
expect_rc 0 "$F" pack "$T/loop" -o "$T/loopimg" --follow-symlinks
[ "$(grep -c 'warning: skipping symlink loop [ab] (too many levels of symlinks)$' "$T/err")" -eq 2 ] &&
  ! grep -q dangling "$T/err" || fail "symlink loops: $(cat "$T/err")"
expect_rc 0 "$F" --version
# pack S -o S: refused whatever S holds (an empty S used to become the image); S stays as it was.
mkdir -p "$T/emptysrc"
expect_rc 1 "$F" pack "$T/emptysrc" -o "$T/emptysrc"
one_line "fanstore pack: invalid argument: output $T/emptysrc is the source"
expect_rc 1 "$F" pack "$T/emptysrc/" -o "$T/emptysrc/."
[ -z "$(ls -A "$T/emptysrc")" ] || fail "pack S -o S wrote into S: $(ls -A "$T/emptysrc")"
expect_rc 1 "$F" pack "$T/src" -o "$T/src/a/../inner"
one_line "fanstore pack: invalid argument: output $T/src/a/../inner is the source"

# A FIFO in place of a partition or of the index (a broken copy) is refused in one line, never waited on.
cp -a "$T/img" "$T/fifo-part" && rm "$T/fifo-part/part-00001.fsp" && mkfifo "$T/fifo-part/part-00001.fsp"
expect_rc 0 timeout 20 "$F" info "$T/fifo-part"
grep -q "part-00001.fsp .*BAD: partition $T/fifo-part/part-00001.fsp is not a regular file" "$T/out" ||
  fail "info, FIFO partition: $(cat "$T/out")"
expect_rc 1 timeout 20 "$F" verify "$T/fifo-part"
cp -a "$T/img" "$T/fifo-index" && rm "$T/fifo-index/index.fsi" && mkfifo "$T/fifo-index/index.fsi"
expect_rc 1 timeout 20 "$F" ls "$T/fifo-index"
one_line "fanstore ls: corrupt: $T/fifo-index/index.fsi is not a regular file: pass the directory"
expect_rc 1 "$F" ls "$T/no-such-image"
one_line "fanstore ls: not found: image $T/no-such-image does not exist: pass the directory \`fanstore pack -o\` made"
# A truncated partition: info says so; a read of a chunk cut off names the chunk and the file.
cp -a "$T/img" "$T/cut" && truncate -s 200 "$T/cut/part-00000.fsp" && truncate -s 200 "$T/cut/part-00001.fsp"
expect_rc 0 "$F" info "$T/cut"
grep -q "BAD: partition $T/cut/part-0000[01].fsp is truncated: 200 of [0-9]* bytes (copy it again or re-pack)" "$T/out" ||
  fail "info, truncated partition: $(cat "$T/out")"
expect_rc 1 "$F" cat "$T/cut" a/b/nums.txt
one_line "fanstore cat: corrupt: part-0000[01].fsp is truncated: a/b/nums.txt is cut off (copy the image"
# Output that cannot be written (a full disk) is a failure, not exit 0 with nothing said.
for cmd in "ls -l" stat info verify; do
  arg=; [ "$cmd" = stat ] && arg=a/b/nums.txt
  "$F" $cmd "$T/img" $arg >/dev/full 2>"$T/err"; rc=$?
  [ $rc -eq 1 ] || fail "$cmd >/dev/full: rc $rc"
  one_line "fanstore: cannot write the output: No space left on device"
done

# verify, as a user who cannot read a partition: said so, not "copy the image again".
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  cp -a "$T/img" "$T/denied" && chmod 000 "$T/denied/part-00000.fsp" && chmod 755 "$T" "$T/denied"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$F" verify "$T/denied" >/dev/null 2>"$T/err"; rc=$?
  [ $rc -eq 1 ] && tail -1 "$T/err" | grep -q "files cannot be read by this user (listed above): check the permissions" ||
    fail "verify as a user who cannot read a partition: rc $rc: $(cat "$T/err")"
  chmod 700 "$T"
fi

# A signal stops pack cleanly: SIGINT, SIGTERM and SIGHUP remove IMAGE.tmp-PID and pack dies of the signal;
# after a SIGKILL the next pack into the same output names what was left. (zstd level 19 on random bytes is slow
# enough that the signal lands while the partitions are being written.)
mkdir -p "$T/slow"
for i in 1 2 3 4; do head -c 12000000 /dev/urandom >"$T/slow/f$i"; done
partial() { # starts a pack (pid in $p) and waits until its temporary directory holds partition bytes
  # (a background job of a script starts with SIGINT ignored, which pack leaves as it is: restored here)
  env --default-signal=INT,TERM,HUP "$F" pack "$T/slow" -o "$T/simg" --level 19 --threads 1 >"$T/out" 2>"$T/err" &
  p=$!
  local n=0
  until [ -n "$(find "$T/simg.tmp-$p" -name '*.fsp' -size +0 2>/dev/null)" ]; do
    n=$((n + 1)); [ $n -lt 600 ] || fail "pack made no partition bytes in 60 s"; sleep 0.1
  done
}
for sig in INT TERM HUP; do
  partial
  kill -$sig "$p"; wait "$p" 2>/dev/null; rc=$?
  [ $rc -eq $((128 + $(kill -l $sig))) ] || fail "SIG$sig: rc $rc"
  one_line "fanstore pack: stopped by SIG$sig; the partial image was removed"
  [ -z "$(ls -d "$T"/simg* 2>/dev/null)" ] || fail "SIG$sig left $(ls -d "$T"/simg*)"
done
# `timeout` signals the process and then its group: the same signal again within a second is one request (the first
# is being handled: the kernel merges only pending ones), still cleaned up.
partial
kill -TERM "$p"; sleep 0.1; kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; rc=$?
[ $rc -eq 143 ] || fail "SIGTERM twice: rc $rc"
one_line "fanstore pack: stopped by SIGTERM; the partial image was removed"
[ -z "$(ls -d "$T"/simg* 2>/dev/null)" ] || fail "SIGTERM twice left $(ls -d "$T"/simg*)"
partial
kill -KILL "$p"; wait "$p" 2>/dev/null
[ -d "$T/simg.tmp-$p" ] || fail "no leftover after SIGKILL"
expect_rc 0 "$F" pack "$T/src" -o "$T/simg" --threads 2
grep -q "warning: $T/simg.tmp-$p is left from a pack that was killed (pid $p is not running on this host).*rm -r $T/simg.tmp-$p" "$T/err" ||
  fail "leftover not named: $(cat "$T/err")"
# Open files: a reader keeps one per partition and pack writes every partition at once. Under a soft limit below
# the partitions (1024, a common default) every command raises it to the hard one: a program under `run` reads all
# (84 of 1,100 files failed with EIO, and verify called the image damaged). Under a hard limit that low, pack
# refuses before any work and a reader names the limit, not damage.
if [ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge 2048 ]; then
  mkdir -p "$T/many"
  for i in $(seq 0 1099); do echo "$i" >"$T/many/f$i"; done
  expect_rc 0 "$F" pack "$T/many" -o "$T/many-img" --parts 1100 --threads 2
  (ulimit -Sn 1024 && expect_rc 0 "$F" run --image "$T/many-img" -- sh -c 'cat /fanstore/* | wc -l' &&
    [ "$(cat "$T/out")" = 1100 ] || fail "reading 1,100 partitions under a soft limit of 1024: $(cat "$T/out" "$T/err")") || exit 1
  (ulimit -Sn 1024 && expect_rc 0 "$F" verify "$T/many-img") || exit 1
  # The partition fds go above 1024, so that the program's own fds stay where select(2) can take them.
  expect_rc 0 "$F" run --image "$T/many-img" -- /usr/bin/python3 -c '
import glob, os
for f in glob.glob("/fanstore/*"):
    open(f, "rb").read()
print(max(os.pipe()))'
  [ "$(cat "$T/out")" -lt 1024 ] || fail "after reading 1,100 partitions a new pipe got fd $(cat "$T/out")"
  (
    ulimit -n 1024
    expect_rc 1 "$F" pack "$T/many" -o "$T/many-img2" --parts 1100
    one_line "fanstore pack: --parts 1100 needs about 1164 files open at once, and this process may open 1024: raise"
    [ ! -e "$T/many-img2" ] || fail "the refused pack left an output"
    expect_rc 0 "$F" run --image "$T/many-img" -- sh -c 'cat /fanstore/* > /dev/null; true'
    grep -q "Too many open files: a reader keeps one open file per partition it reads, and this image has 1100 (open files allowed: 1024): raise .ulimit -n." "$T/err" ||
      fail "no word of the open-file limit: $(head -3 "$T/err")"
    expect_rc 1 "$F" verify "$T/many-img"
    tail -1 "$T/err" | grep -q "^fanstore verify: [0-9]* of 1100 files could not be read: their partitions could not be opened within this process's open-file limit" ||
      fail "verify's last line: $(tail -1 "$T/err")"
  ) || exit 1
else
  echo "cli_test: the open-file checks are skipped: the hard limit $(ulimit -Hn) is below 2048"
fi
echo "cli_test: all good"
