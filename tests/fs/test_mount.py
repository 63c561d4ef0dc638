#!/usr/bin/env python3
"""segfs's mount (issue 41): its exit statuses, one row per case of
docs/USAGE.md's segfs "Exit status" table; directories without a catalog
(bad segment files, other files, an empty directory); -o skip_bad; -o ro;
and the mount's name (fsname, subtype), through mount -t fuse.segfs and the
fstab line and systemd unit that docs/USAGE.md shows, taken from its text.

What must not change in a directory is compared with a snapshot the
script takes itself: every entry's name, type, size, mtime and bytes.

Usage: test_mount.py SEGFS KVSEG [TEST ...]
Skips (exit 77) only where /dev/fuse is missing.
"""
import errno
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_segfs as T  # noqa: E402  (reads SEGFS and KVSEG from argv)
# absolute: test_fsname mounts from another working directory
T.SEGFS, T.KVSEG = os.path.abspath(T.SEGFS), os.path.abspath(T.KVSEG)
from test_segfs import (KVSEG, SEGFS, Mount, build, check,  # noqa: E402
                        listdir, read, request, run_tests, status)

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
USAGE = os.path.join(TOP, "docs", "USAGE.md")


def kvseg(*args):
    return subprocess.run([KVSEG, *args], capture_output=True)


def snapshot(d):
    """Every entry of d (dot files too) and d itself: type, size, mtime
    and, for files, a hash of the bytes."""
    def one(p):
        st = os.lstat(p)
        h = None
        if stat.S_ISREG(st.st_mode):
            h = hashlib.sha256(read(p)).hexdigest()
        return (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, h)
    snap = {".": one(d)}
    for n in sorted(os.listdir(d)):
        snap[n] = one(os.path.join(d, n))
    return snap


def same_dir(before, d, what):
    after = snapshot(d)
    diff = sorted(n for n in set(before) | set(after)
                  if before.get(n) != after.get(n))
    check(not diff, "%s: the directory changed: %r" % (what, diff))


def segdir(path, *names, catalog=True):
    """A directory of one-record segments (sequence 1, 2, ...), with its
    catalog made by kvseg (or none)."""
    os.makedirs(path)
    for i, n in enumerate(names):
        build(os.path.join(path, n), [(b"k%d" % i, 16, b"v%d" % i)],
              seq=i + 1)
    if catalog:
        r = kvseg("catalog", path, "init")
        assert r.returncode == 0, r.stderr
    return path


def cut_copy(src, dst, n=200):
    """dst: the first n bytes of the segment src (a segment cut short)."""
    with open(dst, "wb") as f:
        f.write(read(src)[:n])


def mountinfo(mnt):
    """(source, fstype, mount options, super options) of the topmost mount
    at mnt, from /proc/self/mountinfo (octal escapes decoded)."""
    def dec(s):
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a, b = line.rstrip("\n").split(" - ", 1)
            fields, rest = a.split(" "), b.split(" ")
            if dec(fields[4]) == mnt:
                found = (dec(rest[1]), rest[0], fields[5].split(","),
                         rest[2].split(","))
    return found


def run_segfs(args, mnt=None, timeout=20):
    """segfs -f ARGS (mnt: its mount point, to clean up after a row that
    mounted though it should not): (exit status, stderr lines)."""
    p = subprocess.Popen([SEGFS, "-f", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if mnt:
            subprocess.run(["fusermount3", "-u", "-z", mnt])
        out, err = p.communicate(timeout=60)
        return None, ["still running after %d s (mounted?)" % timeout]
    lines = [l for l in (out + err).decode(errors="replace").splitlines()
             if l.strip()]
    return p.returncode, lines


def project_version():
    with open(os.path.join(TOP, "meson.build")) as f:
        return re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)


def fuse_version():
    r = subprocess.run(["pkg-config", "--modversion", "fuse3"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def doc_exit_rows():
    """The "when" column of USAGE.md's segfs exit table, by status."""
    text = read(USAGE).decode()
    sec = text[text.index("## segfs (the daemon)"):]
    sec = sec[sec.index("### Exit status"):]
    sec = sec[:sec.index("\n### ", 5)]
    rows = []
    for line in sec.splitlines():
        m = re.match(r"\| ([0-2]) \| (.+?) \| ", line)
        if m:
            rows.append((int(m.group(1)), m.group(2)))
    return rows


# ---- exit statuses ------------------------------------------------------------

def test_exit_table(tmp):
    """One row per case of docs/USAGE.md's segfs exit table: the setup,
    the arguments, the status, and what the one line must say. Every row
    of the documented table has a row here, and no row here is missing
    from it."""
    base = os.path.join(tmp, "exit")
    os.makedirs(base)
    good = segdir(os.path.join(base, "good"), "a.seg")
    mnt = os.path.join(base, "mnt")
    os.mkdir(mnt)
    missing = os.path.join(base, "nothere")
    afile = os.path.join(base, "afile")
    with open(afile, "w") as f:
        f.write("x\n")
    # a segment the catalog names, damaged after
    named = segdir(os.path.join(base, "named"), "a.seg", "b.seg")
    with open(os.path.join(named, "b.seg"), "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0xFF]))
    fresh_bad = segdir(os.path.join(base, "fresh-bad"), "a.seg",
                       catalog=False)
    cut_copy(os.path.join(fresh_bad, "a.seg"),
             os.path.join(fresh_bad, "cut.seg"))
    other = segdir(os.path.join(base, "other"), "a.seg", catalog=False)
    with open(os.path.join(other, "notes.txt"), "w") as f:
        f.write("not a segment\n")
    lockdir = segdir(os.path.join(base, "lock"), "a.seg", catalog=False)
    os.symlink(afile, os.path.join(lockdir, "CATALOG.lock"))
    damaged = segdir(os.path.join(base, "damaged"), "a.seg")
    with open(os.path.join(damaged, "CATALOG"), "r+b") as f:
        f.seek(12)
        f.write(b"\xff")
    top = os.path.dirname(good)
    version = ["segfs " + project_version()]
    fv = fuse_version()
    if fv:
        version.append("libfuse " + fv)

    W = {  # USAGE.md's "when" column
        "unmount": "a clean unmount: `fusermount3 -u`, `umount`, SIGTERM or SIGINT",
        "help": "`--help`, `-h`; `--version`, `-V`",
        "segdir": "SEGDIR is missing or not a directory",
        "mnt-missing": "MOUNTPOINT is missing",
        "mnt-file": "MOUNTPOINT is not a directory",
        "mnt-segfs": "a segfs is mounted at MOUNTPOINT already",
        "named-bad": "a segment the catalog names fails its checks (without `-o skip_bad`)",
        "fresh-bad": "SEGDIR has no catalog and a bad segment file (without `-o skip_bad`)",
        "other": "SEGDIR has no catalog and an entry that is not a segment",
        "catalog": "a damaged `CATALOG`, or a symbolic link as `CATALOG` or `CATALOG.lock`",
        "kernel": "the kernel refuses the mount (no `/dev/fuse`, no permission)",
        "args": "no SEGDIR or MOUNTPOINT, or one argument too many",
        "unknown": "an unknown option",
        "range": "an option's value out of range",
        "hide": "MOUNTPOINT is SEGDIR or a directory above it: mounted there, segfs would hide SEGDIR from everyone, itself included",
    }
    # (doc row, arguments, status, what the line says)
    rows = [
        ("help", ["--help"], 0, ["Usage:", "SEGDIR MOUNTPOINT"]),
        ("help", ["-h"], 0, ["Usage:"]),
        ("help", ["--version"], 0, version),
        ("help", ["-V"], 0, version),
        ("segdir", [missing, mnt], 1, [missing, "No such file"]),
        ("segdir", [afile, mnt], 1, [afile, "not a directory"]),
        ("mnt-missing", [good, missing], 1, [missing, "No such file"]),
        ("mnt-file", [good, afile], 1, [afile, "not a directory"]),
        ("named-bad", [named, mnt], 1, ["bad segment", "b.seg", "skip_bad"]),
        ("fresh-bad", [fresh_bad, mnt], 1,
         ["bad segment", "cut.seg", "200 bytes", "skip_bad"]),
        ("other", [other, mnt], 1, ["notes.txt", "not a segment",
                                    "kvseg catalog %s init" % other]),
        ("other", ["-o", "skip_bad", other, mnt], 1, ["notes.txt"]),
        ("catalog", [lockdir, mnt], 1, ["CATALOG.lock", "symbolic link"]),
        ("catalog", [damaged, mnt], 1, ["CATALOG"]),
        ("args", [], 2, ["usage:"]),
        ("args", [good], 2, ["usage:"]),
        ("args", [good, mnt, "extra"], 2, ["one argument too many", "extra"]),
        ("unknown", ["-o", "bogus", good, mnt], 2, ["unknown option", "bogus"]),
        # a usage error is found first, whatever else is wrong
        ("unknown", ["-o", "bogus", missing, missing], 2, ["bogus"]),
        ("range", ["-o", "sep=ab", good, mnt], 2, ["sep="]),
        ("range", ["-o", "workers=0", good, mnt], 2, ["workers="]),
        ("range", ["-o", "timeout=-1", good, mnt], 2, ["timeout="]),
        ("hide", [good, good], 2, ["would hide"]),
        ("hide", [good, top], 2, ["would hide"]),
    ]
    # below the table's loop: a second mount, clean unmounts, the kernel
    covered = {r[0] for r in rows} | {"unmount", "mnt-segfs", "kernel"}
    for status_, when in doc_exit_rows():
        key = [k for k, v in W.items() if v == when]
        check(key and key[0] in covered,
              "USAGE.md's exit row %r has no test row" % when)
        if key:
            check(any(r[0] == key[0] and r[2] == status_ for r in rows) or
                  key[0] in ("unmount", "mnt-segfs", "kernel"),
                  "USAGE.md's exit row %r: status %d differs" % (when, status_))
    check(set(W.values()) == {w for _, w in doc_exit_rows()},
          "the test's rows and USAGE.md's: %r" % (
              set(W.values()) ^ {w for _, w in doc_exit_rows()}))

    for key, args, want, says in rows:
        what = "exit row %s %r" % (key, args)
        before = {d: snapshot(d) for d in (named, fresh_bad, other, lockdir)}
        rc, lines = run_segfs(args, mnt=mnt)
        check(rc == want, "%s: exit %s, want %d: %r" % (what, rc, want, lines))
        text = "\n".join(lines)
        for s in says:
            check(s in text, "%s: %r not said: %r" % (what, s, lines))
        if want != 0:
            check(len(lines) == 1, "%s: one line, not %r" % (what, lines))
        for d, snap in before.items():
            same_dir(snap, d, what)
    check(not os.path.ismount(mnt), "no row mounted")

    # the kernel refuses: segfs run as nobody, who may not open /dev/fuse
    # (or whose mount fusermount3 refuses: a mount point it cannot write)
    if os.geteuid() == 0 and shutil.which("setpriv"):
        before = snapshot(good)
        os.chmod(tmp, 0o711)
        try:
            p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                                "--clear-groups", SEGFS, "-f", good, mnt],
                               capture_output=True, text=True, timeout=60)
        finally:
            os.chmod(tmp, 0o700)
        lines = p.stderr.splitlines()
        check(p.returncode == 1 and lines and "fuse" in lines[-1],
              "the kernel refuses (as nobody): %s %r" % (p.returncode, lines))
        same_dir(before, good, "a mount the kernel refused")
    else:
        print("(the kernel's refusal is not tried: it needs root and setpriv)")

    # a segfs mounted there already
    m = Mount(good)
    try:
        rc, lines = run_segfs([good, m.mnt], mnt=None)
        check(rc == 1 and len(lines) == 1 and "already" in lines[0] and
              good in lines[0],
              "a second segfs on a segfs mount point: %s %r" % (rc, lines))
        check(os.listdir(m.path("view")) == [b"k0"],
              "the first mount still serves")
    finally:
        m.close()
    # clean unmounts: fusermount3 -u, umount (root), SIGTERM, SIGINT
    ways = ["fusermount3", "SIGTERM", "SIGINT"]
    if os.geteuid() == 0:
        ways.append("umount")
    for how in ways:
        m = Mount(good)
        if how == "fusermount3":
            subprocess.run(["fusermount3", "-u", m.mnt], check=True)
        elif how == "umount":
            subprocess.run(["umount", m.mnt], check=True)
        else:
            m.proc.send_signal(getattr(signal, how))
        try:
            rc = m.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rc = None
        check(rc == 0, "a clean unmount by %s: exit %s: %s" % (
            how, rc, m.stderr()))
        m.close(check_rc=False)


# ---- directories without a catalog ------------------------------------------

def test_fresh_bad(tmp):
    """A directory without a catalog holding a segment cut short: refused
    (exit 1, naming it), nothing created; kvseg catalog init agrees; with
    -o skip_bad the rest is served from memory, the cut file is named on
    stderr and in control/catalog, nothing is written and merges are
    EROFS with the reason in control/status."""
    d = segdir(os.path.join(tmp, "fresh-bad"), "a.seg", "b.seg",
               catalog=False)
    cut_copy(os.path.join(d, "b.seg"), os.path.join(d, "cut.seg"))
    before = snapshot(d)
    mnt = os.path.join(tmp, "fresh-bad-mnt")
    os.mkdir(mnt)
    rc, lines = run_segfs([d, mnt], mnt=mnt)
    check(rc == 1 and len(lines) == 1 and "cut.seg" in lines[0] and
          "skip_bad" in lines[0], "refused: %s %r" % (rc, lines))
    same_dir(before, d, "a refused mount")
    r = kvseg("catalog", d, "init")
    check(r.returncode == 3 and b"cut.seg" in r.stderr,
          "kvseg catalog init refuses it too: %r" % r.stderr)
    same_dir(before, d, "a refused init")

    m = Mount(d, "skip_bad")
    try:
        check(sorted(listdir(m.path("segments"))) == [b"a.seg", b"b.seg"],
              "skip_bad serves the rest")
        check(read(m.path("view", "k1")) == b"v1", "view/ serves the rest")
        cat = read(m.path("control", "catalog")).decode()
        lines = cat.splitlines()
        check(lines[1] == "segments 2" and
              lines[-1].startswith("# skipped cut.seg: ") and
              "200 bytes" in lines[-1] and d not in lines[-1],
              "control/catalog names what was skipped: %r" % cat)
        check(request(m, b"merge all\n") == errno.EROFS,
              "a merge is refused (EROFS)")
        st = status(m)
        check(len(st) == 1 and "skip_bad" in st[0]["error"] and
              "cut.seg" in st[0]["error"],
              "control/status says why: %r" % st)
    finally:
        m.close()
    check("cut.seg" in m.stderr() and "skipping" in m.stderr(),
          "stderr names the skipped file: %r" % m.stderr())
    same_dir(before, d, "skip_bad in a directory without a catalog")


def test_catalog_skip_line(tmp):
    """With a catalog, -o skip_bad names the damaged segment it left out
    as the last line of control/catalog."""
    d = segdir(os.path.join(tmp, "skip-named"), "a.seg", "b.seg")
    with open(os.path.join(d, "b.seg"), "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0xFF]))
    m = Mount(d, "skip_bad")
    try:
        lines = read(m.path("control", "catalog")).decode().splitlines()
        check(lines[1] == "segments 1" and lines[3].startswith("a.seg ") and
              lines[-1].startswith("# skipped b.seg: ") and
              "CRC32C" in lines[-1],
              "control/catalog: %r" % lines)
    finally:
        m.close()


def test_other_files(tmp):
    """A directory without a catalog that holds anything but segments —
    a text file, an empty file, a directory, a symbolic link — is refused
    (exit 1, naming it and saying how to make a catalog), with -o skip_bad
    and -o ro too, and nothing is created; dot files are the directory's
    own. After kvseg catalog init, segfs serves the segments and leaves
    the other files alone."""
    def text(p):
        with open(p, "w") as f:
            f.write("not a segment\n")

    def empty(p):
        open(p, "w").close()
    kinds = [("notes.txt", text), ("empty", empty),
             ("sub", os.mkdir), ("link", lambda p: os.symlink("a.seg", p))]
    for name, make in kinds:
        d = segdir(os.path.join(tmp, "other-" + name), "a.seg",
                   catalog=False)
        make(os.path.join(d, name))
        text(os.path.join(d, ".hidden"))
        before = snapshot(d)
        mnt = os.path.join(tmp, "other-mnt-" + name)
        os.mkdir(mnt)
        for opts in ([], ["-o", "skip_bad"], ["-o", "ro"]):
            rc, lines = run_segfs(opts + [d, mnt], mnt=mnt)
            check(rc == 1 and len(lines) == 1 and name in lines[0] and
                  "kvseg catalog %s init" % d in lines[0],
                  "%s %r: refused: %s %r" % (name, opts, rc, lines))
            same_dir(before, d, "%s %r" % (name, opts))
        r = kvseg("catalog", d, "init")
        check(r.returncode == 0, "%s: kvseg catalog init: %r" % (name, r.stderr))
        m = Mount(d, mnt=mnt)
        try:
            check(listdir(m.path("segments")) == [b"a.seg"],
                  "%s: after init, the segments" % name)
        finally:
            m.close()
        check(os.path.lexists(os.path.join(d, name)),
              "%s: left alone" % name)


def test_empty_dir(tmp):
    """An empty directory is mounted and gets the empty catalog; with
    -o ro nothing is created."""
    d = os.path.join(tmp, "empty-ro")
    os.mkdir(d)
    before = snapshot(d)
    m = Mount(d, "ro")
    try:
        check(read(m.path("control", "catalog")).startswith(
            b"generation 1\nsegments 0\n"), "-o ro: an empty catalog")
    finally:
        m.close()
    same_dir(before, d, "an empty directory mounted -o ro")
    d = os.path.join(tmp, "empty")
    os.mkdir(d)
    m = Mount(d)
    try:
        check(listdir(m.path("segments")) == [], "no segments")
    finally:
        m.close()
    check(os.path.exists(os.path.join(d, "CATALOG")),
          "an empty directory gets its catalog")


# ---- -o ro ---------------------------------------------------------------------

def test_read_only_option(tmp):
    """-o ro on a writable directory, with a catalog and without: the
    directory stays byte for byte as it was (names, sizes, mtimes, bytes;
    a leftover that recovery would remove stays), the view is served, the
    mount is ro, a merge is EROFS in the kernel, and after a remount rw
    segfs still refuses it with the reason in control/status."""
    for with_catalog in (True, False):
        what = "-o ro %s a catalog" % ("with" if with_catalog else "without")
        d = segdir(os.path.join(tmp, "ro-%d" % with_catalog), "a.seg",
                   "b.seg", catalog=with_catalog)
        with open(os.path.join(d, ".c.seg.tmp-abcdef"), "wb") as f:
            f.write(b"half a segment")
        before = snapshot(d)
        m = Mount(d, "ro")
        try:
            check(sorted(listdir(m.path("view"))) == [b"k0", b"k1"] and
                  read(m.path("view", "k1")) == b"v1", "%s: view/" % what)
            info = mountinfo(m.mnt)
            check(info and "ro" in info[2], "%s: the mount is ro: %r" % (what, info))
            check(request(m, b"merge all\n") == errno.EROFS,
                  "%s: a merge is EROFS" % what)
            if os.geteuid() == 0:
                r = subprocess.run(["mount", "-i", "-o", "remount,rw", m.mnt],
                                   capture_output=True)
                check(r.returncode == 0, "%s: remount rw: %r" % (what, r.stderr))
                check("rw" in mountinfo(m.mnt)[2], "%s: remounted rw" % what)
                check(request(m, b"merge all\n") == errno.EROFS,
                      "%s: after remount rw, segfs refuses" % what)
                st = status(m)
                check(len(st) == 1 and st[0]["state"] == "rejected" and
                      "-o ro" in st[0]["error"],
                      "%s: control/status says why: %r" % (what, st))
        finally:
            m.close()
        same_dir(before, d, what)


# ---- the mount's name ----------------------------------------------------------

def test_fsname(tmp):
    """The mount's source is SEGDIR, absolute (a relative SEGDIR, a comma
    and a space in its path), its type fuse.segfs; -o fsname= overrides."""
    d = segdir(os.path.join(tmp, "name, with space"), "a.seg")
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        m = Mount(os.path.basename(d))
    finally:
        os.chdir(cwd)
    try:
        info = mountinfo(m.mnt)
        check(info and info[0] == d and info[1] == "fuse.segfs",
              "source and type: %r" % (info,))
        df = subprocess.run(["df", "--output=source", m.mnt],
                            capture_output=True, text=True)
        check(df.stdout.splitlines()[-1:] == [d], "df: %r" % df.stdout)
    finally:
        m.close()
    m = Mount(d, "fsname=mydb")
    try:
        info = mountinfo(m.mnt)
        check(info and info[0] == "mydb" and info[1] == "fuse.segfs",
              "-o fsname=mydb: %r" % (info,))
    finally:
        m.close()


def doc_block(lang):
    text = read(USAGE).decode()
    sec = text[text.index("### Mounting at boot"):]
    sec = sec[:sec.index("\n### ", 5)]
    return sec, re.search(r"```%s\n(.*?)```" % lang, sec, re.S).group(1)


def ns_mount(tmp, bindir, commands):
    """Runs commands (sh) in a mount namespace of their own, where
    /usr/local/sbin holds segfs: mount(8) clears PATH for mount.fuse3,
    whose shell then looks in the default PATH. Nothing outside sees it."""
    script = "mount --bind %s /usr/local/sbin\n%s" % (bindir, commands)
    return subprocess.run(["unshare", "--mount", "--propagation", "private",
                           "sh", "-ec", script], capture_output=True,
                          text=True, timeout=120)


def test_mount_helper(tmp):
    """mount -t fuse.segfs, the fstab line and the systemd unit of
    docs/USAGE.md, as written there (paths replaced): the source is
    SEGDIR and the type fuse.segfs, with the options given."""
    if os.geteuid() != 0:
        print("SKIP test_mount_helper: mount(8) needs root")
        return
    for tool in ("/sbin/mount.fuse3", shutil.which("unshare")):
        check(tool and os.path.exists(tool),
              "%s is missing (tools/setup.sh installs fuse3 and util-linux)" % tool)
    bindir = os.path.join(tmp, "helper-bin")
    os.mkdir(bindir)
    os.symlink(os.path.abspath(SEGFS), os.path.join(bindir, "segfs"))
    d = segdir(os.path.join(tmp, "helper-db"), "a.seg")
    mnt = os.path.join(tmp, "helper-mnt")
    os.mkdir(mnt)
    before = snapshot(d)
    show = ("grep ' %s ' /proc/self/mountinfo\nls %s/view\numount %s\n" %
            (mnt, mnt, mnt))

    def expect(r, what, ro):
        lines = r.stdout.splitlines()
        check(r.returncode == 0 and lines, "%s: %s %r" % (what, r.returncode, r.stderr))
        if not lines:
            return
        a, b = lines[0].split(" - ", 1)
        fields, rest = a.split(" "), b.split(" ")
        check(rest[0] == "fuse.segfs" and rest[1] == d,
              "%s: type and source: %r" % (what, lines[0]))
        check(("ro" in fields[5].split(",")) == ro,
              "%s: ro: %r" % (what, lines[0]))
        check(lines[1:] == ["k0"], "%s: view/: %r" % (what, lines[1:]))

    r = ns_mount(tmp, bindir, "mount -t fuse.segfs %s %s -o ro\n%s" % (d, mnt, show))
    expect(r, "mount -t fuse.segfs", True)
    same_dir(before, d, "mount -t fuse.segfs -o ro")

    sec, fstab = doc_block("fstab")
    fields = fstab.split()
    check(len(fields) == 6 and fields[2] == "fuse.segfs",
          "USAGE.md's fstab line: %r" % fstab)
    line = fstab.replace(fields[0], d, 1).replace(fields[1], mnt, 1)
    tab = os.path.join(tmp, "fstab")
    with open(tab, "w") as f:
        f.write(line)
    r = ns_mount(tmp, bindir, "mount -T %s %s\n%s" % (tab, mnt, show))
    expect(r, "USAGE.md's fstab line", "ro" in fields[3].split(","))

    sec, unit = doc_block("ini")
    keys = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
    name = re.search(r"/etc/systemd/system/(\S+\.mount)", sec).group(1)
    check(name == keys["Where"].strip("/").replace("/", "-") + ".mount",
          "the unit's name %s is its Where=%s" % (name, keys["Where"]))
    check(keys.get("What") == fields[0] and keys.get("Where") == fields[1] and
          keys.get("Type") == "fuse.segfs",
          "the unit and the fstab line name the same mount: %r" % keys)
    # as systemd runs it: mount What Where -t Type -o Options
    r = ns_mount(tmp, bindir, "mount %s %s -t %s -o %s\n%s" % (
        d, mnt, keys["Type"], keys["Options"], show))
    expect(r, "USAGE.md's systemd unit", "ro" in keys["Options"].split(","))
    if shutil.which("systemd-analyze"):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(unit)
        r = subprocess.run(["systemd-analyze", "verify", path],
                           capture_output=True, text=True)
        check("Failed to parse" not in r.stderr and "Unknown" not in r.stderr,
              "systemd-analyze verify: %r" % r.stderr)
    same_dir(before, d, "the helper mounts (ro)")


def main():
    tests = [test_exit_table, test_fresh_bad, test_catalog_skip_line,
             test_other_files, test_empty_dir, test_read_only_option,
             test_fsname, test_mount_helper]
    return run_tests(tests, "segfs-mount-", sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
