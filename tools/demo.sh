#!/usr/bin/env bash
# demo.sh — the README's run command: install what is missing, build, make
# a demo segment directory (generated deterministically: path-like keys in
# three segments, the newer ones overwriting and deleting keys of the
# older), mount it with segfs, show it, and merge it through
# control/merge. It stays mounted; the last line says how to unmount.
#
#   tools/demo.sh [DIR]     DIR defaults to build/demo (segments/ and mnt/)
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
if [ ! -d build/meson-private ]; then
	meson setup build
fi
ninja -C build fs/segfs tools/kvseg

dir=${1:-build/demo}
segs=$dir/segments
mnt=$dir/mnt
kvseg=build/tools/kvseg
mkdir -p "$dir" "$mnt"
if mountpoint -q "$mnt"; then
	fusermount3 -u "$mnt"
fi
rm -rf "$segs"
mkdir -p "$segs"

# 001-base.seg: a small "host": config files, home directories, logs.
python3 - "$segs" <<'EOF' | "$kvseg" build --sequence 1 "$segs/001-base.seg"
import random, sys
rng = random.Random(2026)  # the same data every time
recs = {
    "etc/hostname": "demo-host",
    "etc/motd": "Welcome to segfs (base segment)",
    "etc/os-release": "NAME=Debian\\nVERSION_ID=12",
    "home/ann/notes.txt": "buy milk\\ncall bob",
    "home/bob/todo.txt": "write the merge worker",
    "home/bob/.profile": "export EDITOR=vi",
}
users = ["ann", "bob", "cho", "dev", "eve"]
for day in range(1, 31):
    for n in range(40):
        u = rng.choice(users)
        recs["var/log/2026-11-%02d/%04d" % (day, n)] = "%s logged in from 10.0.%d.%d" % (
            u, rng.randrange(256), rng.randrange(256))
for i in range(500):
    recs["users/%04d/name" % i] = rng.choice(users) + str(i)
    recs["users/%04d/email" % i] = "user%d@example.org" % i
for k in sorted(recs):
    print("%s\t%s" % (k, recs[k]))
EOF

# 002-update.seg: newer values for some keys, and new keys.
printf '%s\t%s\n' \
	"etc/motd" "Welcome to segfs (updated by 002-update)" \
	"home/ann/notes.txt" "buy milk\\ncall bob\\nmerge segments" \
	"home/cho/plan.md" "# plan\\n- mount\\n- ls\\n- cat" \
	"users/0007/name" "renamed-seven" |
	"$kvseg" build --sequence 2 "$segs/002-update.seg"

# 003-cleanup.seg: tombstones (a line without a TAB) delete older keys.
printf '%s\n' "home/bob/todo.txt" "users/0003/email" "var/log/2026-11-01/0000" |
	"$kvseg" build --sequence 3 "$segs/003-cleanup.seg"

build/fs/segfs -o sep=/ "$segs" "$mnt"

show() { # COMMAND...
	echo "\$ $*"
	"$@"
	echo
}
echo
echo "== segfs: $segs mounted at $mnt (keys split at / into directories)"
echo
show ls "$mnt" "$mnt/segments"
show cat "$mnt/control/catalog"
show ls "$mnt/view" "$mnt/view/home"
show ls -a "$mnt/view/home/bob"
show cat "$mnt/segments/001-base.seg/etc/motd"
show cat "$mnt/view/etc/motd"
echo "\$ cat $mnt/view/home/bob/todo.txt   # deleted by 003-cleanup"
cat "$mnt/view/home/bob/todo.txt" || true
echo
show ls "$mnt/segments/001-base.seg/home/bob"
echo "\$ ls $mnt/view/var/log/2026-11-02 | head -3"
ls "$mnt/view/var/log/2026-11-02" | head -3
echo
echo "\$ grep -r 'from 10.0.1\.' $mnt/view/var/log | head -3"
grep -r 'from 10.0.1\.' "$mnt/view/var/log" | head -3 || true
echo
echo "== merge the three segments while mounted (tombstones dropped)"
echo
echo "\$ exec 3<> $mnt/control/merge; echo 'merge all tombstones=drop' >&3; read -r id <&3"
exec 3<>"$mnt/control/merge"
echo 'merge all tombstones=drop' >&3
read -r id <&3
exec 3>&-
echo
show cat "$mnt/control/wait/$id"
show ls "$mnt/segments"
show cat "$mnt/view/etc/motd"
echo
echo "Unmount with:  fusermount3 -u $mnt"
