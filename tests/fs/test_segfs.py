#!/usr/bin/env python3
"""segfs end to end: mounts real segment directories and checks what ls,
cat, xattrs and the errno of every mutation show against this script's own
model: records generated here, the newest-wins view computed here, and the
name mapping of docs/USAGE.md implemented here from its text (not from
fs/names.c).

Usage: test_segfs.py SEGFS KVSEG
Skips (exit 77) only where /dev/fuse is missing.
"""
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

SEGFS, KVSEG = sys.argv[1], sys.argv[2]
MODES = [("byte", "typed"), ("byte", "raw"), ("bit", "typed"), ("bit", "raw")]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


# ---- the name mapping, from docs/USAGE.md ---------------------------------

def name_of(comp: bytes, bits: int) -> bytes:
    if bits == 0:
        return b"%_"
    nb, tail = divmod(bits, 8)
    full = comp[:nb]
    dots = tail == 0 and full in (b".", b"..")
    toks, i = [], 0
    while i < nb:
        b = full[i]
        if not dots and 0x20 <= b <= 0x7E and b not in b"%/":
            toks.append(bytes([b]))
            i += 1
            continue
        if b >= 0x80:
            took = False
            for n in (2, 3, 4):
                seq = full[i:i + n]
                if len(seq) < n:
                    break
                try:
                    ch = seq.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if len(ch) == 1 and ord(ch) >= 0xA0:
                    toks.append(seq)
                    i += n
                    took = True
                break
            if took:
                continue
        toks.append(b"%%%02X" % b)
        i += 1
    byte_toks = list(toks)
    if tail:
        last = comp[nb]
        toks.append(b"%:" + bytes(
            ord("1") if last >> (7 - k) & 1 else ord("0") for k in range(tail)))
    name = b"".join(toks)
    if len(name) <= 255:
        return name
    prefix = b""
    for t in byte_toks:
        if len(prefix) + len(t) > 221:
            break
        prefix += t
    h = hashlib.sha256(comp[:(bits + 7) // 8] + bits.to_bytes(8, "little"))
    return prefix + b"%#" + h.hexdigest()[:32].encode()


# ---- segments and mounts ----------------------------------------------------

def build(path, records, profile="byte", framing="typed", seq=0, restart=None):
    """records: list of (key bytes, key bits, value bytes or None)."""
    lines = []
    for key, bits, value in records:
        if bits != len(key) * 8:
            r = {"key_bits": "".join(format(b, "08b") for b in key)[:bits]}
        else:
            r = {"key_hex": key.hex()}
        if value is None:
            r["tombstone"] = True
        else:
            r["value_hex"] = value.hex()
        lines.append(json.dumps(r))
    cmd = [KVSEG, "build", "--input", "jsonl", "--profile", profile,
           "--framing", framing, "--sequence", str(seq), path]
    if restart:
        cmd[2:2] = ["--restart", str(restart)]
    subprocess.run(cmd, input=("\n".join(lines) + "\n").encode(), check=True)


def bitkey_sort(recs):
    """Sorts (key, bits, value) in bit-string order."""
    def k(r):
        key, bits, _ = r
        s = "".join(format(b, "08b") for b in key)[:bits]
        return s
    return sorted(recs, key=k)


class Mount:
    def __init__(self, segdir, *opts, expect_fail=False, env=None, mnt=None):
        """mnt: an existing mount point (default: a new one, removed by
        close)."""
        self.own_mnt = mnt is None
        self.mnt = mnt or tempfile.mkdtemp(prefix="segfs-mnt-")
        self.log = tempfile.TemporaryFile()
        args = [SEGFS, "-f", segdir, self.mnt]
        for o in opts:
            args += ["-o", o]
        self.proc = subprocess.Popen(args, stderr=self.log,
                                     stdout=subprocess.DEVNULL,
                                     env=dict(os.environ, **(env or {})))
        deadline = time.time() + 30
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None:
                if not expect_fail:
                    raise RuntimeError("segfs exited: " + self.stderr())
                return
            if time.time() > deadline:
                raise RuntimeError("segfs did not mount")
            time.sleep(0.02)

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def path(self, *parts):
        return os.path.join(os.fsencode(self.mnt), *[
            os.fsencode(p) for p in parts])

    def close(self, check_rc=True, lazy=False):
        if lazy:
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], check=True)
        if os.path.ismount(self.mnt):
            for _ in range(100):
                r = subprocess.run(["fusermount3", "-u", self.mnt],
                                   stderr=subprocess.DEVNULL)
                if r.returncode == 0:
                    break
                time.sleep(0.05)
            else:
                subprocess.run(["fusermount3", "-u", "-z", self.mnt])
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if check_rc:
            err = self.stderr()
            check(rc == 0 and "Sanitizer" not in err and "runtime error" not in err,
                  "segfs exited %s: %s" % (rc, err[-3000:]))
        if self.own_mnt:
            os.rmdir(self.mnt)
        return rc


def listdir(path):
    return os.listdir(path)  # readdir order


def read(path):
    with open(path, "rb") as f:
        return f.read()


def expect_errno(fn, codes, what):
    try:
        fn()
    except OSError as e:
        check(e.errno in codes, "%s: errno %s, want %s" % (
            what, errno.errorcode.get(e.errno), [errno.errorcode[c] for c in codes]))
        return
    check(False, "%s: succeeded, want %s" % (what, [errno.errorcode[c] for c in codes]))


# ---- tests ------------------------------------------------------------------

def gen_keys(rng, n, bit_profile):
    keys = set()
    while len(keys) < n:
        depth = rng.randint(1, 3)
        k = b"/".join(rng.choice([b"usr", b"etc", b"home", b"var", b"lib"]) +
                      b"%d" % rng.randint(0, 40) for _ in range(depth))
        if bit_profile and rng.random() < 0.2:
            extra = rng.randint(1, 7)
            keys.add((k + bytes([rng.randrange(256) & (0xFF << (8 - extra) & 0xFF)]),
                      len(k) * 8 + extra))
        else:
            keys.add((k, len(k) * 8))
    return list(keys)


def test_modes(tmp):
    """ls and cat in segments/ and view/ for all four modes."""
    for profile, framing in MODES:
        rng = random.Random(hash((profile, framing)) & 0xFFFF)
        d = os.path.join(tmp, "modes-%s-%s" % (profile, framing))
        os.mkdir(d)
        keys = gen_keys(rng, 400, profile == "bit")
        segs = []
        for s in range(3):
            recs = {}
            for key, bits in rng.sample(keys, 150):
                if framing == "typed" and rng.random() < 0.2:
                    recs[(key, bits)] = None
                else:
                    recs[(key, bits)] = rng.randbytes(rng.randint(0, 40))
            rl = bitkey_sort([(k, b, v) for (k, b), v in recs.items()])
            build(os.path.join(d, "s%d.seg" % s), rl, profile, framing,
                  seq=s + 1, restart=rng.choice([1, 4, 15]))
            segs.append(rl)
        view = {}
        for rl in segs:  # oldest first: later wins
            for k, b, v in rl:
                view[(k, b)] = v
        m = Mount(d)
        try:
            check(listdir(m.path("segments")) == [b"s0.seg", b"s1.seg", b"s2.seg"],
                  "%s-%s: segments/ lists the catalog" % (profile, framing))
            for s, rl in enumerate(segs):
                want = [name_of(k, b) for k, b, v in rl if v is not None]
                got = listdir(m.path("segments", "s%d.seg" % s))
                check(got == want, "%s-%s s%d: listing (%d vs %d names)" % (
                    profile, framing, s, len(got), len(want)))
                for k, b, v in rl:
                    p = m.path("segments", "s%d.seg" % s, name_of(k, b))
                    if v is None:
                        check(not os.path.exists(p), "tombstone hidden")
                        continue
                    check(read(p) == v, "%s-%s: cat %r" % (profile, framing, k))
                    check(os.getxattr(p, "user.segfs.key") == k,
                          "xattr key %r" % k)
                    check(int(os.getxattr(p, "user.segfs.key_bits")) == b,
                          "xattr key_bits %r" % k)
            vrl = bitkey_sort([(k, b, v) for (k, b), v in view.items()])
            want = [name_of(k, b) for k, b, v in vrl if v is not None]
            got = listdir(m.path("view"))
            check(got == want, "%s-%s: view/ listing" % (profile, framing))
            for k, b, v in vrl:
                p = m.path("view", name_of(k, b))
                if v is None:
                    expect_errno(lambda: read(p), [errno.ENOENT],
                                 "view hides tombstoned %r" % k)
                else:
                    check(read(p) == v, "%s-%s: view cat %r" % (profile, framing, k))
                    check(os.stat(p).st_size == len(v), "view size %r" % k)
            cat = read(m.path("control", "catalog")).decode()
            check("generation 1" in cat and "s2.seg 3 %s-%s" % (framing, profile) in cat,
                  "control/catalog: %r" % cat)
        finally:
            m.close()
        if framing == "typed":  # tombstones shown on request
            m = Mount(d, "tombstones")
            try:
                rl = segs[0]
                got = listdir(m.path("segments", "s0.seg"))
                check(got == [name_of(k, b) for k, b, v in rl],
                      "-o tombstones lists every record")
                for k, b, v in rl:
                    p = m.path("segments", "s0.seg", name_of(k, b))
                    attrs = os.listxattr(p)
                    if v is None:
                        check(os.stat(p).st_size == 0 and
                              os.getxattr(p, "user.segfs.tombstone") == b"1",
                              "tombstone marked %r" % k)
                    else:
                        check("user.segfs.tombstone" not in attrs,
                              "value not marked %r" % k)
                want = [name_of(k, b) for k, b, v in
                        bitkey_sort([(k, b, v) for (k, b), v in view.items()])
                        if v is not None]
                check(listdir(m.path("view")) == want,
                      "-o tombstones leaves view/ alone")
            finally:
                m.close()


def weird_records():
    ks = [b"", b".", b"..", b"...", b".hidden", b"a/b", b"/", b"%", b"%41",
          b"a\x00b", b"\x00", b"\x7f", b"\xff\xfe", b"caf\xc3\xa9",
          b"\xe2\x82\xac", b"\xed\xa0\x80", b"\xc0\xaf", b"\xc2\x85",
          b"\xf0\x9f\x98\x80", b"sp ace", b"x" * 300, b"x" * 299 + b"y",
          b"\x01" * 300, "é".encode() * 150, b"%" * 120, b"A", b"a",
          b"tab\there", b"new\nline", b"~"]
    return [(k, len(k) * 8, b"v:" + k[:20]) for k in set(ks)]


def test_names(tmp):
    """Odd keys: names map back to exact keys; every listed name opens;
    non-canonical names are ENOENT."""
    d = os.path.join(tmp, "names")
    os.mkdir(d)
    recs = bitkey_sort(weird_records())
    build(os.path.join(d, "w.seg"), recs)
    bitrecs = bitkey_sort([(b"", 0, b"empty"), (b"\x80", 1, b"1"),
                           (b"\x00", 1, b"0"), (b"\xa0", 3, b"101"),
                           (b"ab\xfe", 23, b"ab+7"), (b"ab", 16, b"ab"),
                           (b"." + b"\x80", 9, b"dot+1"),
                           (b"z" * 300 + b"\x80", 2401, b"long+1")])
    build(os.path.join(d, "b.seg"), bitrecs, profile="bit", seq=1)
    m = Mount(d)
    try:
        for seg, rl in (("w.seg", recs), ("b.seg", bitrecs)):
            got = listdir(m.path("segments", seg))
            want = [name_of(k, b) for k, b, v in rl]
            check(got == want, "%s: names %r vs %r" % (seg, got, want))
            check(len(set(got)) == len(got), "names are distinct")
            for (k, b, v), name in zip(rl, got):
                p = m.path("segments", seg, name)
                check(len(name) <= 255, "name length %d" % len(name))
                check(read(p) == v, "%s: cat %r" % (seg, name))
                check(os.getxattr(p, "user.segfs.key") == k, "xattr %r" % name)
                check(int(os.getxattr(p, "user.segfs.key_bits")) == b,
                      "key_bits %r" % name)
        seg = m.path("segments", "w.seg")
        for bad in [b"%2e", b"%2E%2e", b"%61", b"%41%41", b"%zz", b"%", b"%4",
                    b"%c3%a9", b"caf%C3%A9", b"%2f", b"%e", b"%:1",
                    b"x" * 221 + b"%#" + b"0" * 32, b"%_x", b"a%:2"]:
            expect_errno(lambda: os.stat(os.path.join(seg, bad)), [errno.ENOENT],
                         "non-canonical name %r" % bad)
        expect_errno(lambda: os.stat(os.path.join(seg, b"n" * 256)),
                     [errno.ENAMETOOLONG], "256-byte name")
        expect_errno(lambda: os.stat(os.path.join(seg, b"absent")),
                     [errno.ENOENT], "absent key")
    finally:
        m.close()


def test_mutations(tmp):
    d = os.path.join(tmp, "ro")
    os.mkdir(d)
    build(os.path.join(d, "a.seg"), [(b"k", 8, b"v")])
    m = Mount(d)
    try:
        f = m.path("view", "k")
        seg = m.path("segments", "a.seg")
        read(f)
        cases = [
            (lambda: open(os.path.join(seg, b"new"), "wb"), "create"),
            (lambda: os.mkdir(os.path.join(seg, b"dir")), "mkdir"),
            (lambda: os.mkdir(m.path("view", "dir")), "mkdir in view"),
            (lambda: os.unlink(f), "unlink"),
            (lambda: os.rmdir(seg), "rmdir"),
            (lambda: os.rename(f, m.path("view", "k2")), "rename"),
            (lambda: os.symlink(b"x", os.path.join(seg, b"ln")), "symlink"),
            (lambda: os.link(f, m.path("view", "k3")), "link"),
            (lambda: os.chmod(f, 0o777), "chmod"),
            (lambda: os.truncate(f, 0), "truncate"),
            (lambda: os.utime(f, (1, 1)), "utime"),
            (lambda: os.setxattr(f, "user.x", b"1"), "setxattr"),
            (lambda: os.removexattr(f, "user.segfs.key"), "removexattr"),
            (lambda: os.mknod(os.path.join(seg, b"node")), "mknod"),
        ]
        for fn, what in cases:
            expect_errno(fn, [errno.EROFS], what)

        def write():
            fd = os.open(f, os.O_WRONLY)
            try:
                os.write(fd, b"x")
            finally:
                os.close(fd)
        expect_errno(write, [errno.EROFS], "write")
        check(read(f) == b"v", "value unchanged after mutations")
        expect_errno(lambda: os.getxattr(f, "security.selinux"), [errno.EOPNOTSUPP],
                     "other xattr namespaces are not supported")
        expect_errno(lambda: os.getxattr(f, "user.other"), [errno.ENODATA],
                     "an absent user xattr")
        expect_errno(lambda: os.getxattr(seg, "user.segfs.key"), [errno.ENODATA],
                     "a directory has no key")
        check(os.listxattr(f) == ["user.segfs.key", "user.segfs.key_bits",
                                  "user.segfs.segment"], "listxattr")
        check(os.getxattr(f, "user.segfs.segment") == b"a.seg", "the binding's segment")
        expect_errno(lambda: read(m.path("view")), [errno.EISDIR], "read a directory")
        expect_errno(lambda: os.listdir(f), [errno.ENOTDIR], "list a file")
    finally:
        m.close()


class Dirent(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                ("d_name", ctypes.c_char * 256)]


libc = ctypes.CDLL(None, use_errno=True)
libc.opendir.restype = ctypes.c_void_p
libc.opendir.argtypes = [ctypes.c_char_p]
libc.readdir.restype = ctypes.POINTER(Dirent)
libc.readdir.argtypes = [ctypes.c_void_p]
libc.telldir.restype = ctypes.c_long
libc.telldir.argtypes = [ctypes.c_void_p]
libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
libc.closedir.argtypes = [ctypes.c_void_p]
libc.dirfd.argtypes = [ctypes.c_void_p]


def drop_dir_cache(dp):
    """Drops the kernel's cached listing of the open directory dp (segfs
    lets the kernel cache listings), so that readdir after a seekdir asks
    segfs to find the position."""
    os.posix_fadvise(libc.dirfd(dp), 0, 0, os.POSIX_FADV_DONTNEED)


def check_seekdir(path, rng, seeks):
    """telldir before each entry of a whole readdir walk; then, with the
    kernel's cached listing dropped, seekdir to random ones must give that
    entry and the next. Returns the walk's names."""
    dp = libc.opendir(path)
    check(dp is not None, "opendir %r" % path)
    names, marks = [], []
    while True:
        mark = libc.telldir(dp)
        e = libc.readdir(dp)
        if not e:
            break
        names.append(e.contents.d_name)
        marks.append(mark)
    drop_dir_cache(dp)
    bad = []
    for _ in range(seeks):
        i = rng.randrange(len(names))
        libc.seekdir(dp, marks[i])
        got = []
        for _ in range(2):
            e = libc.readdir(dp)
            got.append(e.contents.d_name if e else None)
        want = (names[i:i + 2] + [None])[:2]
        if got != want:
            bad.append((i, got, want))
    libc.closedir(dp)
    check(not bad, "%r: seekdir, uncached: %d wrong, first %r" % (
        path, len(bad), bad[:1]))
    return names


def test_large(tmp):
    """262,144 keys list completely and in order; seekdir resumes exactly."""
    n = 262144
    d = os.path.join(tmp, "large")
    os.mkdir(d)
    keys = sorted(b"key/%08d/%x" % (i * 7, i % 13) for i in range(n))
    # two segments: the view merges them; the newer one rewrites a tenth
    build(os.path.join(d, "a.seg"), [(k, len(k) * 8, b"a") for k in keys], seq=1)
    newer = keys[::10]
    build(os.path.join(d, "b.seg"), [(k, len(k) * 8, b"b") for k in newer], seq=2)
    m = Mount(d)
    try:
        want = [name_of(k, len(k) * 8) for k in keys]
        for where in (("segments", "a.seg"), ("view",)):
            got = listdir(m.path(*where))
            check(got == want, "%s: %d of %d names, in order" % (
                "/".join(where), len(got), n))
            dp = libc.opendir(m.path(*where))
            check(dp is not None, "opendir")
            names, marks = [], {}
            while True:
                if len(names) in (1000, 77777, 200001):
                    marks[len(names)] = libc.telldir(dp)
                e = libc.readdir(dp)
                if not e:
                    break
                nm = e.contents.d_name
                if nm not in (b".", b".."):
                    names.append(nm)
            check(names == want, "%s: readdir walk" % "/".join(where))
            for at in sorted(marks, reverse=True):
                libc.seekdir(dp, marks[at])
                got = []
                for _ in range(3000):
                    e = libc.readdir(dp)
                    if not e:
                        break
                    got.append(e.contents.d_name)
                check(got == names[at:at + 3000],
                      "%s: seekdir to entry %d resumes exactly" % ("/".join(where), at))
            libc.closedir(dp)
            check_seekdir(m.path(*where), random.Random(6), 200)
        for k in random.Random(5).sample(keys, 200):
            check(read(m.path("view", name_of(k, len(k) * 8))) ==
                  (b"b" if k in set(newer) else b"a"), "view value %r" % k)
    finally:
        m.close()


def readers(m, recs, nthreads, stop, errors, counts):
    def run(i):
        rng = random.Random(i)
        while not stop.is_set():
            k, b, v = rng.choice(recs)
            try:
                got = read(m.path("view", name_of(k, b)))
            except OSError as e:
                errors.append((i, e.errno))
                return
            if got != v:
                errors.append((i, "wrong value for %r" % k))
                return
            counts[i] += 1
    ts = [threading.Thread(target=run, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    return ts


def test_threads(tmp):
    """8 threads read random keys; then unmount while they read."""
    d = os.path.join(tmp, "threads")
    os.mkdir(d)
    rng = random.Random(8)
    recs = [(b"t/%06d" % i, 64, rng.randbytes(rng.randint(0, 300)))
            for i in range(20000)]
    build(os.path.join(d, "a.seg"), recs)
    for opts in ((), ("mt",)):
        m = Mount(d, *opts)
        stop = threading.Event()
        errors, counts = [], [0] * 8
        ts = readers(m, recs, 8, stop, errors, counts)
        time.sleep(1.5)
        stop.set()
        for t in ts:
            t.join()
        check(not errors and all(counts), "8 readers %s: %r %r" % (opts, errors[:3], counts))
        # unmount while they read: the daemon exits cleanly
        stop = threading.Event()
        errors, counts = [], [0] * 8
        ts = readers(m, recs, 8, stop, errors, counts)
        time.sleep(0.5)
        m.close(lazy=True)
        stop.set()
        for t in ts:
            t.join()
        check(all(counts), "readers ran before the unmount %s" % (opts,))


def test_sep(tmp):
    """-o sep=/: nested directories by skip scan; a key that is also a
    directory's prefix is DIR/%@."""
    d = os.path.join(tmp, "sep")
    os.mkdir(d)
    recs = [(b"users/1/name", b"ann"), (b"users/1/mail", b"a@x"),
            (b"users/2/name", b"bob"), (b"users/2", b"two"),
            (b"users/2-x", b"dash"), (b"users/10/name", b"ten"),
            (b"top", b"t"), (b"users//empty", b"e"), (b"users/", b"slash"),
            (b"z%/q", b"pct")]
    recs += [(b"users/3/k%05d" % i, b"%d" % i) for i in range(3000)]
    old = sorted([(k, len(k) * 8, v) for k, v in recs])
    build(os.path.join(d, "a.seg"), old, seq=1)
    build(os.path.join(d, "b.seg"), [(b"users/1/mail", 96, None),
                                     (b"users/1/name", 96, b"ANN")], seq=2)
    m = Mount(d, "sep=/")
    try:
        check(listdir(m.path("view")) == [b"top", b"users", b"z%25"],
              "sep: top level %r" % listdir(m.path("view")))
        got = listdir(m.path("view", "users"))
        # key order: users/ (a directory "%_", since users//empty exists),
        # users/1/.., users/10/.., users/2-x, users/2/.. (a directory
        # that also holds the key users/2 as %@), users/3/..
        check(got == [b"%_", b"1", b"10", b"2-x", b"2", b"3"],
              "sep: users/ lists components %r" % got)
        check(listdir(m.path("view", "users", "%_")) == [b"%@", b"empty"],
              "users/%_ holds users/ as %@ and users//empty")
        check(read(m.path("view", "users", "%_", "%@")) == b"slash", "users/ key as %@")
        check(read(m.path("view", "users", "%_", "empty")) == b"e", "empty component")
        expect_errno(lambda: os.stat(m.path("view", "%@")), [errno.ENOENT],
                     "no %@ at the top")
        check(read(m.path("view", "users", "2", "%@")) == b"two", "users/2 as users/2/%@")
        check(read(m.path("view", "users", "2", "name")) == b"bob", "users/2/name")
        check(read(m.path("view", "users", "1", "name")) == b"ANN", "newest wins in sep")
        check(listdir(m.path("view", "users", "1")) == [b"name"], "tombstone hides in sep")
        check(read(m.path("view", "users", "2-x")) == b"dash", "users/2-x file")
        check(os.path.isdir(m.path("view", "users", "2")), "users/2 is a directory")
        check(len(listdir(m.path("view", "users", "3"))) == 3000, "3000 below users/3")
        check(read(m.path("view", "z%25", "q")) == b"pct", "escaped component")
        seen = []
        for root, dirs, files in os.walk(m.path("view")):
            for f in files:
                seen.append(os.path.join(root, f))
        # every key but the one the newer segment deletes, once
        check(len(seen) == len(recs) - 1, "find sees every key once (%d vs %d)" % (
            len(seen), len(recs) - 1))
        check(os.path.isdir(m.path("segments", "a.seg", "users", "1")),
              "sep applies to segments/")
        check(listdir(m.path("segments", "a.seg", "users", "1")) == [b"mail", b"name"],
              "segments/a.seg/users/1")
    finally:
        m.close()


def sep_listing(visible, prefix, sep=b"/"):
    """The entries of directory `prefix` under -o sep, from the visible
    (key, value) pairs in key order, per docs/USAGE.md: each next component
    once, in the order of its first key; a key that is also a directory's
    prefix is not listed beside it (it is DIR/%@). (name, is_dir) pairs."""
    dirs = set()  # every prefix of a visible key that ends at a separator
    for k, v in visible:
        i = k.find(sep)
        while i >= 0:
            dirs.add(k[:i + 1])
            i = k.find(sep, i + 1)
    out = []
    for k, v in visible:
        if not k.startswith(prefix):
            continue
        rest = k[len(prefix):]
        i = rest.find(sep)
        if i >= 0:
            e = (name_of(rest[:i], 8 * i), True)
        elif k + sep in dirs:
            continue  # shadowed by its directory
        else:
            e = (name_of(rest, 8 * len(rest)), False)
        if not out or out[-1] != e:
            out.append(e)
    return out


def test_many_dirs(tmp):
    """-o sep with 2,500 directories: complete listings across many
    readdir replies (directories at their boundaries), directories that a
    newer segment empties, and lookups of hashed names (a long key, a long
    directory component) on a fresh mount, before any listing."""
    d = os.path.join(tmp, "many-dirs")
    os.mkdir(d)
    old = {}
    for i in range(2500):
        old[b"dir%05d/x" % i] = b"x%d" % i
        if i % 2 == 0:  # more below it: a seek must pass them all
            old[b"dir%05d/y" % i] = b"y%d" % i
            old[b"dir%05d/z/deep" % i] = b"z%d" % i
        if i % 3 == 0:
            old[b"dir%05d" % i] = b"self%d" % i  # dir%05d/%@
        if i % 7 == 0:
            old[b"file%05d" % i] = b"f%d" % i
    long_file, long_dir = b"a" * 300, b"b" * 300
    old[long_file] = b"long file"
    old[long_dir + b"/inner"] = b"long dir"
    build(os.path.join(d, "a.seg"), sorted((k, 8 * len(k), v) for k, v in old.items()),
          seq=1)
    # the newer segment deletes dir%05d/x for odd i % 11 == 0: the
    # directory goes, and where dir%05d is a key too it is a file again
    new = {b"dir%05d/x" % i: None for i in range(11, 2500, 22)}
    new[b"dir00001/y"] = b"y"
    build(os.path.join(d, "b.seg"), sorted((k, 8 * len(k), v) for k, v in new.items()),
          seq=2)
    view = dict(old)
    view.update(new)
    visible = sorted((k, v) for k, v in view.items() if v is not None)

    m = Mount(d, "sep=/")
    try:
        # fresh: no listing has told the kernel these names
        hf, hd = name_of(long_file, 2400), name_of(long_dir, 2400)
        check(b"%#" in hf and b"%#" in hd, "the long names are hashed")
        for where, want in (((b"view", hf), b"long file"),
                            ((b"view", hd, b"inner"), b"long dir"),
                            ((b"segments", b"a.seg", hd, b"inner"), b"long dir")):
            try:
                got = read(m.path(*where))
            except OSError as e:
                got = e
            check(got == want, "cold lookup of %r: %r" % (b"/".join(where)[:40], got))
        bad = hf[:-1] + (b"0" if hf[-1:] != b"0" else b"1")
        expect_errno(lambda: os.stat(m.path("view", bad)), [errno.ENOENT],
                     "a hashed name with another digest")
        want = sep_listing(visible, b"")
        for where in (("view",), ("segments", "a.seg")):
            if where == ("view",):
                w = want
            else:
                w = sep_listing(sorted(old.items()), b"")
            with os.scandir(m.path(*where)) as it:
                got = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            check(got == w, "%s: %d entries vs %d, in order" % (
                "/".join(where), len(got), len(w)))
            names = check_seekdir(m.path(*where), random.Random(len(where)), 150)
            check(names == [b".", b".."] + [n for n, isdir in w],
                  "%s: readdir walk" % "/".join(where))
        check(read(m.path("view", "dir00033")) == b"self33",
              "a directory emptied by the newer segment is its key again")
        expect_errno(lambda: os.stat(m.path("view", "dir00055")), [errno.ENOENT],
                     "a directory emptied by the newer segment is gone")
        check(listdir(m.path("view", "dir00003")) == [b"%@", b"x"], "dir00003")
        check(listdir(m.path("view", "dir00006")) == [b"%@", b"x", b"y", b"z"],
              "dir00006")
        check(listdir(m.path("view", "dir00001")) == [b"x", b"y"], "dir00001")
        check(read(m.path("view", "dir00003", "%@")) == b"self3", "dir00003/%@")
        if os.geteuid() == 0:
            # the kernel forgets the directories' inodes but the one held
            # open; then they are looked up anew
            held = os.open(m.path("view", "dir00006"), os.O_RDONLY | os.O_DIRECTORY)
            with open("/proc/sys/vm/drop_caches", "w") as dc:
                dc.write("2\n")
            try:
                got = sorted(os.listdir(held))
            except OSError as e:
                got = e
            check(got == ["%@", "x", "y", "z"],
                  "a directory held open across the kernel's forgetting: %r" % (got,))
            os.close(held)
            with os.scandir(m.path("view")) as it:
                got = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            check(got == want, "view/ after the kernel forgot its directories")
            for i in (0, 6, 2498):
                check(read(m.path("view", "dir%05d" % i, "z", "deep")) == b"z%d" % i,
                      "dir%05d/z/deep after forgetting" % i)
    finally:
        m.close()


def test_bad_segment(tmp):
    d = os.path.join(tmp, "bad")
    os.mkdir(d)
    build(os.path.join(d, "good.seg"), [(b"g", 8, b"good")], seq=1)
    build(os.path.join(d, "bad.seg"), [(b"b", 8, b"bad")], seq=2)
    m = Mount(d)  # the catalog now names both
    m.close()
    with open(os.path.join(d, "bad.seg"), "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0xFF]))
    m = Mount(d, expect_fail=True)
    rc = m.proc.wait(timeout=30)
    err = m.stderr()
    check(rc != 0 and "bad.seg" in err, "mount refuses a bad segment: %r" % err)
    os.rmdir(m.mnt)
    m = Mount(d, "skip_bad")
    try:
        check(listdir(m.path("segments")) == [b"good.seg"], "skip_bad leaves it out")
        check(read(m.path("view", "g")) == b"good", "skip_bad serves the rest")
        check("bad.seg" in m.stderr(), "skip_bad names the segment")
    finally:
        m.close()


def test_corrupt_body(tmp):
    """Damaged records: reads fail with EIO (or ENOENT), never crash the
    daemon or return a short read; -o verify refuses the mount."""
    d = os.path.join(tmp, "corrupt")
    os.mkdir(d)
    rng = random.Random(13)
    recs = [(b"c/%05d" % i, 56, rng.randbytes(rng.randint(0, 60)))
            for i in range(3000)]
    build(os.path.join(d, "a.seg"), recs, seq=1)
    build(os.path.join(d, "z.seg"), [(b"zz", 16, b"fine")], seq=2)
    Mount(d).close()  # the catalog names both
    path = os.path.join(d, "a.seg")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # the body only: open's checks pass
        for off in rng.sample(range(400, size // 2), 40):
            f.seek(off)
            f.write(bytes([rng.randrange(256)]))
    m = Mount(d)
    try:
        outcomes = {"ok": 0, "eio": 0, "enoent": 0}
        try:
            listdir(m.path("view"))
        except OSError as e:
            check(e.errno == errno.EIO, "listing fails with EIO: %s" % e)
        for k, b, v in recs:
            p = m.path("view", name_of(k, b))
            try:
                with open(p, "rb") as f:
                    got = f.read()
                size_seen = os.stat(p).st_size
                check(len(got) == size_seen, "no short read of %r" % k)
                outcomes["ok"] += 1
            except OSError as e:
                check(e.errno in (errno.EIO, errno.ENOENT), "errno %s for %r" % (e, k))
                outcomes["eio" if e.errno == errno.EIO else "enoent"] += 1
        check(outcomes["eio"] > 0, "some reads see the damage: %r" % outcomes)
        check(read(m.path("view", "zz")) == b"fine", "the daemon keeps serving")
    finally:
        m.close()
    m = Mount(d, "verify", expect_fail=True)
    rc = m.proc.wait(timeout=60)
    err = m.stderr()
    check(rc == 1 and "a.seg" in err, "-o verify refuses the damaged segment: %r" % err)
    os.rmdir(m.mnt)


def test_signals(tmp):
    d = os.path.join(tmp, "sig")
    os.mkdir(d)
    build(os.path.join(d, "a.seg"), [(b"k", 8, b"v")])
    for sig in (signal.SIGTERM, signal.SIGINT):
        m = Mount(d)
        m.proc.send_signal(sig)
        rc = m.proc.wait(timeout=30)
        check(rc == 0 and not os.path.ismount(m.mnt),
              "signal %d unmounts cleanly (rc %s)" % (sig, rc))
        os.rmdir(m.mnt)
    # the default: daemonize, return once mounted
    mnt = tempfile.mkdtemp(prefix="segfs-mnt-")
    r = subprocess.run([SEGFS, d, mnt], capture_output=True)
    check(r.returncode == 0 and os.path.ismount(mnt), "daemon mode mounts")
    if os.path.ismount(mnt):
        check(read(os.path.join(mnt, "view", "k")) == b"v", "daemon mode serves")
        subprocess.run(["fusermount3", "-u", mnt], check=True)
    os.rmdir(mnt)
    r = subprocess.run([SEGFS, "--version"], capture_output=True)
    check(r.returncode == 0 and b"segfs" in r.stdout, "--version")
    r = subprocess.run([SEGFS, "--help"], capture_output=True)
    check(r.returncode == 0 and b"SEGDIR MOUNTPOINT" in r.stdout, "--help")
    r = subprocess.run([SEGFS, d], capture_output=True)
    check(r.returncode == 2, "a missing mountpoint is a usage error")
    r = subprocess.run([SEGFS, "-o", "sep=ab", d, "/nonexistent"], capture_output=True)
    check(r.returncode == 2 and b"sep" in r.stderr, "bad sep option")
    mnt = tempfile.mkdtemp(prefix="segfs-mnt-")
    for opt, word in (("workers=0", b"workers"), ("workers=65", b"workers"),
                      ("queue=0", b"queue"), ("timeout=-1", b"timeout")):
        r = subprocess.run([SEGFS, "-f", "-o", opt, d, mnt], capture_output=True)
        check(r.returncode == 2 and word in r.stderr and not os.path.ismount(mnt),
              "-o %s is a usage error: %r" % (opt, r.stderr[-200:]))
    os.rmdir(mnt)


# ---- control files (merges) ----------------------------------------------------

def request(m, line):
    """Writes one request to control/merge: 0 or the errno (of the open
    too: a read-only mount refuses it there)."""
    try:
        fd = os.open(m.path("control", "merge"), os.O_WRONLY)
    except OSError as e:
        return e.errno
    try:
        os.write(fd, line)
        return 0
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)


def status(m):
    return [json.loads(l) for l in read(m.path("control", "status")).splitlines()]


def wait(m, job):
    return json.loads(read(m.path("control", "wait", str(job))))


def dir_state(d):
    """What must not change: the names in the directory (but segfs's lock
    file, made at its first mount) and the catalog."""
    return (sorted(set(os.listdir(d)) - {".segfs.lock"}),
            read(os.path.join(d, "CATALOG")))


def stack(d, nseg, nkeys, rng, framing="typed", profile="byte", seq0=1):
    """nseg segments of overlapping keys (with tombstones when typed);
    returns the newest-wins view as a dict."""
    view = {}
    keys = [b"k/%07d" % i for i in range(nkeys)]
    for s in range(nseg):
        recs = {}
        for k in rng.sample(keys, nkeys // 2):
            if framing == "typed" and rng.random() < 0.1:
                recs[k] = None
            else:
                recs[k] = b"%d:" % s + rng.randbytes(rng.randint(0, 24))
        build(os.path.join(d, "s%d.seg" % s),
              [(k, len(k) * 8, v) for k, v in sorted(recs.items())],
              profile, framing, seq=seq0 + s)
        view.update(recs)
    return view


def check_clean(d, what):
    """Every file is named by the catalog (or is the catalog), and every
    named segment verifies."""
    cat = subprocess.run([KVSEG, "catalog", d, "list"], capture_output=True)
    check(cat.returncode == 0, "%s: kvseg catalog list: %s" % (what, cat.stderr))
    names = set()
    for line in cat.stdout.decode().splitlines():
        parts = line.split()
        if parts and not line.startswith(("#", "generation")):
            names.add(parts[0])
    extra = set(os.listdir(d)) - names - {"CATALOG", "CATALOG.lock",
                                          ".segfs.lock"}
    check(not extra, "%s: files the catalog does not name: %r" % (what, extra))
    for n in names:
        r = subprocess.run([KVSEG, "verify", os.path.join(d, n)], capture_output=True)
        check(r.returncode == 0, "%s: %s verifies: %s" % (what, n, r.stderr))
    return names


def view_ok(m, view, what):
    want = sorted(k for k, v in view.items() if v is not None)
    got = sorted(os.listdir(m.path("view")))
    check(got == [name_of(k, len(k) * 8) for k in want], "%s: view/ listing" % what)
    for k in random.Random(1).sample(want, min(200, len(want))):
        check(read(m.path("view", name_of(k, len(k) * 8))) == view[k],
              "%s: view/%r" % (what, k))


def test_merge_live(tmp):
    """A merge through control/merge while 4 readers cat view/ non-stop:
    no read fails, every value is the key's newest binding."""
    d = os.path.join(tmp, "live")
    os.mkdir(d)
    rng = random.Random(21)
    view = stack(d, 4, 60000, rng)
    recs = [(k, len(k) * 8, v) for k, v in view.items() if v is not None]
    m = Mount(d)
    try:
        stop = threading.Event()
        errors, counts = [], [0] * 4
        ts = readers(m, recs, 4, stop, errors, counts)
        time.sleep(0.3)
        before = list(counts)
        check(request(m, b"merge all\n") == 0, "merge all accepted")
        jobs = status(m)
        check(len(jobs) == 1 and jobs[0]["state"] in ("queued", "running", "done"),
              "status shows the job: %r" % jobs)
        w = wait(m, jobs[0]["id"])
        time.sleep(0.5)  # readers go on over the new catalog
        stop.set()
        for t in ts:
            t.join()
        check(not errors, "readers during the merge: %r" % errors[:3])
        check(all(c > b for c, b in zip(counts, before)), "readers kept reading")
        check(w["state"] == "done" and w["records_total"] > 0 and
              w["records_done"] == w["records_total"] and w["error"] is None and
              w["inputs"] == ["s0.seg", "s1.seg", "s2.seg", "s3.seg"],
              "the job is done: %r" % w)
        out = w["output"]
        check(listdir(m.path("segments")) == [out.encode()], "segments/ shows the output")
        check(w["bytes_out"] == os.path.getsize(os.path.join(d, out)),
              "bytes_out is the output's size: %r" % w)
        cat = read(m.path("control", "catalog")).decode()
        check(cat.startswith("generation 2\nsegments 1\n") and out in cat,
              "control/catalog moved on: %r" % cat)
        view_ok(m, view, "after the merge")
        # the output holds the tombstones (the inputs' oldest is in, but
        # nobody asked to drop them); the segment's listing hides them
        check(sorted(listdir(m.path("segments", out))) ==
              sorted(name_of(k, len(k) * 8) for k, v in view.items() if v is not None),
              "the output's keys")
        # a second merge, dropping tombstones, of the single segment
        check(request(m, b"merge %s tombstones=drop name=final.seg restart=4\n" %
                      out.encode()) == 0, "second merge accepted")
        w2 = wait(m, 2)
        check(w2["state"] == "done" and w2["output"] == "final.seg", "second merge: %r" % w2)
        view_ok(m, view, "after dropping tombstones")
        check(b"final.seg 4 typed-byte 4" in read(m.path("control", "catalog")),
              "restart=4 and the newest sequence")
    finally:
        m.close()
    names = check_clean(d, "after unmount")
    check(names == {"final.seg"}, "only the last output is left: %r" % names)
    r = subprocess.run([KVSEG, "stat", os.path.join(d, "final.seg")], capture_output=True)
    check(b"tombstones       0" in r.stdout, "tombstones dropped: %r" % r.stdout[:400])


def test_retired_readers(tmp):
    """Open files and listings on segments a merge retires keep working
    until closed; the retired files go once nothing reads them."""
    d = os.path.join(tmp, "retired")
    os.mkdir(d)
    view = stack(d, 2, 20000, random.Random(9))
    m = Mount(d)
    try:
        live = sorted(k for k, v in view.items() if v is not None)
        k0 = live[0]
        f = open(m.path("view", name_of(k0, len(k0) * 8)), "rb")
        dp = libc.opendir(m.path("view"))
        sp = libc.opendir(m.path("segments", "s0.seg"))
        first = [libc.readdir(dp).contents.d_name for _ in range(102)][2:]
        check(request(m, b"merge all\n") == 0 and wait(m, 1)["state"] == "done",
              "the merge")
        check(os.path.exists(os.path.join(d, ".s0.seg.retired")),
              "s0.seg is kept while read")
        check(f.read() == view[k0], "an open file of the old view reads on")
        f.close()
        rest = []
        while True:
            e = libc.readdir(dp)
            if not e:
                break
            rest.append(e.contents.d_name)
        check(first + rest == [name_of(k, len(k) * 8) for k in live],
              "an open listing of the old view completes")
        n = 0
        while libc.readdir(sp):
            n += 1
        check(n > 2, "an open listing of a retired segment completes")
        libc.closedir(dp)
        libc.closedir(sp)
        if os.geteuid() == 0:  # the kernel forgets unused inodes
            with open("/proc/sys/vm/drop_caches", "w") as dc:
                dc.write("2\n")
            deadline = time.time() + 5
            while time.time() < deadline and any(
                    x.endswith(".retired") for x in os.listdir(d)):
                time.sleep(0.05)
            check(not any(x.endswith(".retired") for x in os.listdir(d)),
                  "retired files deleted once unread: %r" % os.listdir(d))
        view_ok(m, view, "after the merge")
    finally:
        m.close()
    check_clean(d, "after unmount")


def test_bad_requests(tmp):
    d = os.path.join(tmp, "badreq")
    os.mkdir(d)
    stack(d, 3, 3000, random.Random(3))
    build(os.path.join(d, "r.seg"), [(b"r%d" % i, 16, b"x") for i in range(5)],
          framing="raw", seq=9)
    # the newest two, large: their merge holds the one worker while the
    # EBUSY case below queues a merge behind it
    for i in range(2):
        build(os.path.join(d, "b%d.seg" % i),
              [(b"b/%07d" % k, 72, b"%032d" % k) for k in range(i, 300000, 2)],
              seq=10 + i)
    m = Mount(d, "workers=1", "queue=1")
    try:
        before = dir_state(d)
        cases = [
            (b"\n", errno.EINVAL, "empty"),
            (b"   \n", errno.EINVAL, "empty"),
            (b"\xff\xfe\x01garbage\n", errno.EINVAL, "control byte"),
            (b"\xff\xfe garbage\n", errno.EINVAL, "unknown request"),
            (b"merge " + b"a" * (1 << 20) + b"\n", errno.EINVAL, "longer"),
            (b"merge\n", errno.EINVAL, "merge what"),
            (b"merge nosuch.seg\n", errno.ENOENT, "no live segment"),
            (b"merge s0.seg s0.seg\n", errno.EINVAL, "twice"),
            (b"merge ../x\n", errno.EINVAL, "cannot be a segment name"),
            (b"merge a/b\n", errno.EINVAL, "cannot be a segment name"),
            (b"merge .hidden\n", errno.EINVAL, "cannot be a segment name"),
            (b"merge all s0.seg\n", errno.EINVAL, "together"),
            (b"merge all restart=0\n", errno.EINVAL, "restart=0"),
            (b"merge all restart=65537\n", errno.EINVAL, "restart=65537"),
            (b"merge all restart=-1\n", errno.EINVAL, "restart=-1"),
            (b"merge all profile=word\n", errno.EINVAL, "profile=word"),
            (b"merge all framing=raw\n", errno.EINVAL, "tombstones"),
            (b"merge all tombstones=maybe\n", errno.EINVAL, "keep or drop"),
            (b"merge all name=../evil\n", errno.EINVAL, "cannot be a segment name"),
            (b"merge all name=s1.seg\n", errno.EEXIST, "exists"),
            (b"merge all profile=bit profile=byte\n", errno.EINVAL, "twice"),
            (b"merge s1.seg s2.seg tombstones=drop\n", errno.EINVAL, "oldest"),
            (b"merge s0.seg s2.seg\n", errno.EINVAL, "consecutive"),
            (b"merge s0.seg\nmerge bogus.seg\n", errno.ENOENT, "no live segment"),
            (b"merge s0.seg\nmerge r.seg\n", errno.EAGAIN, "queued already"),
            (b"cancel 99\n", errno.ENOENT, "no job"),
            (b"cancel x\n", errno.EINVAL, "not a job id"),
            (b"frobnicate all\n", errno.EINVAL, "unknown request"),
        ]
        for line, want, words in cases:
            n = len(status(m))
            got = request(m, line)
            check(got == want, "%r: errno %s, want %s" % (
                line[:40], errno.errorcode.get(got, got), errno.errorcode[want]))
            st = status(m)
            check(len(st) == n + 1 and st[-1]["state"] == "rejected" and
                  words in (st[-1]["error"] or ""),
                  "%r: the reason in control/status: %r" % (line[:40], st[-1:]))
            check(dir_state(d) == before, "%r: nothing changed" % line[:40])
        got = request(m, b"merge \x00\n")
        check(got == errno.EINVAL and "NUL byte" in status(m)[-1]["error"],
              "a NUL byte: errno %s" % errno.errorcode.get(got, got))
    finally:
        m.close()
    # EBUSY: a queued job's inputs are taken. The merge of b0 and b1 holds
    # the one worker, so the merge of s0 and s1 still waits in the queue
    # (room for two) when the overlapping request comes, however fast a
    # merge of two small segments would be.
    m = Mount(d, "workers=1", "queue=2")
    try:
        check(request(m, b"merge b0.seg b1.seg\n") == 0, "a long merge")
        check(request(m, b"merge s0.seg s1.seg\n") == 0, "first merge")
        got = request(m, b"merge s1.seg s2.seg\n")
        check(got == errno.EBUSY, "overlapping merge: %s" % errno.errorcode.get(got, got))
        check("already being merged" in (status(m)[-1]["error"] or ""),
              "EBUSY's reason")
        for j in status(m):
            if j["state"] != "rejected":
                check(wait(m, j["id"])["state"] == "done",
                      "merge %d ends: %r" % (j["id"], j["request"]))
        # two requests of one write over the same input: neither is queued
        n = len(status(m))
        got = request(m, b"merge s2.seg r.seg\nmerge r.seg\n")
        st = status(m)
        check(got == errno.EBUSY and len(st) == n + 1 and
              st[-1]["state"] == "rejected" and
              "r.seg is an input of an earlier request of this write" in
              (st[-1]["error"] or ""), "one write's overlapping requests: %s %r"
              % (errno.errorcode.get(got, got), st[n:]))
        check(request(m, b"merge s2.seg r.seg\n") == 0,
              "the inputs of a rejected write are free")
        check(wait(m, status(m)[-1]["id"])["state"] == "done", "that merge ends")
    finally:
        m.close()
    check_clean(d, "after bad requests")


def test_status_after_listing(tmp):
    """A listing of control/ with attributes (ls -l: READDIRPLUS) must not
    make the kernel keep one text of control/status: each read after it
    shows the requests written since."""
    d = os.path.join(tmp, "stlist")
    os.mkdir(d)
    stack(d, 2, 200, random.Random(11))
    m = Mount(d)
    try:
        def listed():
            names = os.listdir(m.path("control"))
            for n in names:
                os.stat(m.path("control", n))
            return sorted(names)
        check(listed() == [b"catalog", b"merge", b"status", b"wait"],
              "control/ lists its four names")
        check(status(m) == [], "no request yet")
        check(request(m, b"frobnicate\n") == errno.EINVAL, "a bad request")
        listed()
        st = status(m)
        check(len(st) == 1 and st[0]["state"] == "rejected",
              "the rejection after a listing: %r" % st)
        check(request(m, b"merge all\n") == 0, "merge all")
        check(wait(m, 2)["state"] == "done", "the merge ends")
        listed()
        st = status(m)
        check([j["state"] for j in st] == ["rejected", "done"],
              "the merge after a listing: %r" % st)
        check(read(m.path("control", "catalog")).startswith(b"generation 2\n"),
              "control/catalog after the merge")
    finally:
        m.close()
    check_clean(d, "after listings")


def test_truncated_segment(tmp):
    """A segment file cut short while mounted (truncated in place by another
    process): reads of what is gone fail with EIO and nothing else, segfs
    names the file on stderr, keeps serving the other segment and refuses
    to merge the damaged one, leaving no file behind."""
    for when in ("read", "merge"):
        d = os.path.join(tmp, "cut-" + when)
        os.mkdir(d)
        keys = [b"k%06d" % i for i in range(20000)]
        build(os.path.join(d, "a.seg"), [(k, 8 * len(k), b"v" * 50) for k in keys],
              seq=1)
        build(os.path.join(d, "b.seg"), [(b"z1", 16, b"one")], seq=2)
        subprocess.run([KVSEG, "catalog", d, "init"], check=True,
                       capture_output=True)
        before = dir_state(d)
        # a fault abandons what the faulting request had allocated (fs/guard.h)
        m = Mount(d, env={"ASAN_OPTIONS": "detect_leaks=0"})
        try:
            check(read(m.path("view", "k000001")) == b"v" * 50, "a key before")
            os.truncate(os.path.join(d, "a.seg"), 300000)
            if when == "read":
                for path in (("view", "k019999"), ("segments", "a.seg", "k019998"),
                             ("view", "k000002")):
                    expect_errno(lambda: read(m.path(*path)), [errno.EIO],
                                 "%s: %s after the cut" % (when, "/".join(path)))
                expect_errno(lambda: os.listdir(m.path("segments", "a.seg")),
                             [errno.EIO], "a listing of the cut segment")
                # view/ (USAGE.md): what the newer segment decides is
                # served; what needs the damaged one, and a listing, fail
                check(read(m.path("view", "z1")) == b"one",
                      "view/ serves a key of the newer segment")
                expect_errno(lambda: os.listdir(m.path("view")), [errno.EIO],
                             "a listing of view/ with a damaged live segment")
            check(read(m.path("segments", "b.seg", "z1")) == b"one",
                  "%s: the other segment is served" % when)
            check(request(m, b"merge all\n") == 0, "%s: merge all" % when)
            job = wait(m, 1)
            check(job["state"] == "failed" and "a.seg" in job["error"] and
                  "shorter" in job["error"],
                  "%s: the merge fails, naming the file: %r" % (when, job))
            check(dir_state(d) == before, "%s: nothing changed in %s" % (when, d))
        finally:
            m.close()
        err = m.stderr()
        check("a.seg" in err and "SIGBUS" in err and "shorter" in err,
              "%s: stderr names the cut file: %r" % (when, err[-500:]))


def test_cut_while_opening(tmp):
    """A segment cut short while segfs opens and checks it (-o verify, at
    mount): segfs stops it at the first read of what is gone, names the
    file and exits 1 without mounting, and never dies of SIGBUS."""
    d = os.path.join(tmp, "cut-open")
    os.mkdir(d)
    build(os.path.join(d, "a.seg"),
          [(b"k%07d" % i, 64, b"v" * 40) for i in range(600000)], seq=1)
    subprocess.run([KVSEG, "catalog", d, "init"], check=True,
                   capture_output=True)
    seg = os.path.join(d, "a.seg")
    whole = open(seg, "rb").read()
    target = os.fsencode(os.path.realpath(seg))
    caught = None
    for attempt in range(6):
        with open(seg, "wb") as f:
            f.write(whole)
        mnt = tempfile.mkdtemp(prefix="segfs-mnt-")
        # a fault abandons what the faulting call had allocated (guard.h)
        proc = subprocess.Popen([SEGFS, "-f", d, mnt, "-o", "verify"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
        stopped = False
        while proc.poll() is None and not os.path.ismount(mnt):
            try:
                with open("/proc/%d/maps" % proc.pid, "rb") as f:
                    mapped = target in f.read()
            except OSError:
                mapped = False
            if mapped:  # opened: its checks read the mapping
                os.kill(proc.pid, signal.SIGSTOP)
                stopped = True
                break
        if stopped:
            os.truncate(seg, 4096)
            os.kill(proc.pid, signal.SIGCONT)
            deadline = time.time() + 60
            while (proc.poll() is None and not os.path.ismount(mnt) and
                   time.time() < deadline):
                time.sleep(0.01)
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")
            if stopped:
                caught = (proc.returncode, err)
                os.rmdir(mnt)
                break
        # mounted before the cut could reach it: again
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", mnt], check=True)
        proc.wait(timeout=60)
        os.rmdir(mnt)
    print("  cut while opening: %d attempt(s)" % (attempt + 1))
    check(caught is not None, "segfs stopped while it checked a.seg")
    if caught is not None:
        rc, err = caught
        check(rc == 1 and "a.seg" in err and "SIGBUS" in err and
              "shorter than when it was opened" in err and
              "Sanitizer" not in err,
              "segfs names the cut file and exits 1: rc %d, %r" % (rc, err[-500:]))


def test_random_requests(tmp):
    """500 random requests, from the grammar's words and random bytes:
    each is accepted or fails with one of the documented errnos, the
    daemon survives, control/status stays JSON lines, the directory stays
    clean."""
    d = os.path.join(tmp, "randreq")
    os.mkdir(d)
    stack(d, 4, 2000, random.Random(11))
    rng = random.Random(12)
    words = [b"merge", b"cancel", b"all", b"s0.seg", b"s1.seg", b"s2.seg", b"s3.seg",
             b"profile=bit", b"profile=byte", b"framing=raw", b"framing=typed",
             b"restart=1", b"restart=65536", b"restart=99999999999999999999",
             b"tombstones=drop", b"tombstones=keep", b"name=x.seg", b"name=",
             b"=", b"1", b"2", b"-1", b"../s0.seg", b"s0.seg/", b"\t", b"  "]
    allowed = {0, errno.EINVAL, errno.ENOENT, errno.EEXIST, errno.EBUSY, errno.EAGAIN}
    m = Mount(d, "workers=1", "queue=2")
    try:
        for i in range(500):
            if rng.random() < 0.2:
                line = rng.randbytes(rng.randint(0, 64))
            else:
                first = rng.choice([b"merge"] * 3 + [b"cancel", rng.choice(words)])
                # the live names too, so that some requests are good
                live = listdir(m.path("segments"))
                pool = words + live * 3
                line = b" ".join([first] + [rng.choice(pool)
                                            for _ in range(rng.randint(0, 5))])
            if rng.random() < 0.8:
                line += b"\n"
            if not line:
                continue
            got = request(m, line)
            check(got in allowed, "%r: errno %s" % (line, errno.errorcode.get(got, got)))
        deadline = time.time() + 60
        while time.time() < deadline and any(
                j["state"] in ("queued", "running") for j in status(m)):
            time.sleep(0.05)
        states = {}
        for j in status(m):
            check(j["state"] in ("done", "failed", "cancelled", "rejected"),
                  "job ended: %r" % j)
            states[j["state"]] = states.get(j["state"], 0) + 1
        print("  random requests: %r" % states)
        check(states.get("done", 0) > 0 and states.get("rejected", 0) > 0,
              "both accepted and rejected requests")
        check(read(m.path("control", "catalog")).startswith(b"generation"),
              "the daemon serves on")
    finally:
        m.close()
    check_clean(d, "after random requests")


def test_cancel(tmp):
    """cancel ID: a queued job at once, a running one at its next step;
    nothing is published, nothing is left."""
    d = os.path.join(tmp, "cancel")
    os.mkdir(d)
    rng = random.Random(4)
    stack(d, 4, 200000, rng)
    m = Mount(d, "workers=1")
    before = dir_state(d)
    try:
        check(request(m, b"merge s0.seg s1.seg s2.seg\n") == 0, "big merge")
        check(request(m, b"merge s3.seg\n") == 0, "queued merge")
        check(request(m, b"cancel 2\ncancel 1\n") == 0, "cancel both")
        for job in (1, 2):
            w = wait(m, job)
            check(w["state"] == "cancelled", "job %d cancelled: %r" % (job, w))
        got = request(m, b"cancel 1\n")
        check(got == errno.EINVAL and "already ended" in status(m)[-1]["error"],
              "cancelling an ended job")
        check(listdir(m.path("segments")) == [b"s0.seg", b"s1.seg", b"s2.seg", b"s3.seg"],
              "nothing published")
    finally:
        m.close()
    check(dir_state(d) == before, "nothing left by the cancelled merges")
    # unmounting (SIGTERM) while a merge runs: a clean exit, a clean
    # directory, the old or the new generation
    m = Mount(d)
    check(request(m, b"merge all\n") == 0, "a merge to interrupt")
    time.sleep(0.01)
    m.proc.send_signal(signal.SIGTERM)
    try:
        rc = m.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rc = "hung"
    check(rc == 0, "SIGTERM during a merge: exit %s" % rc)
    subprocess.run(["fusermount3", "-u", "-z", m.mnt], stderr=subprocess.DEVNULL)
    os.rmdir(m.mnt)
    check_clean(d, "after SIGTERM during a merge")


def test_wait_interrupted(tmp):
    """Readers of control/wait/ID wait while job ID runs: Ctrl-C ends one
    at once, and reaches the handler of another (EINTR), and the job runs
    on; the others, though other processes
    look the name up and stat it meanwhile, each read exactly the job's
    final line (no zeros after it, as when the kernel kept a size it was
    told before). The job is held running by this test's exclusive lock
    on CATALOG.lock, which its publication waits for."""
    d = os.path.join(tmp, "wait-intr")
    os.mkdir(d)
    view = stack(d, 2, 2000, random.Random(9))
    m = Mount(d)
    lock = os.open(os.path.join(d, "CATALOG.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        check(request(m, b"merge all\n") == 0, "the merge")
        path = m.path("control", "wait", "1")
        waiters = [subprocess.Popen(["cat", path], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE) for _ in range(3)]
        waiters.append(subprocess.Popen(  # one byte a read
            ["dd", b"if=" + path, "bs=1", "status=none"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        handled = subprocess.Popen(  # a reader that handles SIGINT
            [sys.executable, "-c", "import sys\ntry:\n"
             "    open(sys.argv[1], 'rb').read()\n"
             "except KeyboardInterrupt:\n    print('interrupted')\n", path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5)
        for _ in range(2):  # another process looks and stats
            subprocess.run(["stat", path], stdout=subprocess.DEVNULL)
            os.stat(path)
            time.sleep(0.2)
        check(all(w.poll() is None for w in waiters), "the readers wait")
        waiters[0].send_signal(signal.SIGINT)
        try:
            rc = waiters[0].wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = "still waiting"
        check(rc == -signal.SIGINT, "Ctrl-C ends a wait at once: %r" % rc)
        handled.send_signal(signal.SIGINT)
        try:
            out, err = handled.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            handled.kill()
            out, err = handled.communicate()
            out = b"still waiting"
        check(out == b"interrupted\n", "Ctrl-C reaches a reader's handler at "
              "once (EINTR): %r %r" % (out, err[-300:]))
        check(status(m)[0]["state"] == "running" and
              all(w.poll() is None for w in waiters[1:]),
              "the job and the other readers go on: %r" % status(m)[0]["state"])
        fcntl.flock(lock, fcntl.LOCK_UN)
        outs = [w.communicate(timeout=60) for w in waiters[1:]]
        line = read(m.path("control", "status")).splitlines()[0] + b"\n"
        check(json.loads(line)["state"] == "done", "the job: %r" % line)
        for w, (out, err) in zip(waiters[1:], outs):
            check(w.returncode == 0 and out == line,
                  "a reader reads the final line: %r %r" % (out[:300], err))
        check(os.stat(path).st_size == len(line), "the size of the final line")
        # job 1 exists: only its canonical decimal name finds it
        for bad in ["01", "+1", "1x", " 1", "-1", "0x1", "1.0",
                    str((1 << 40) + 1), str((1 << 64) + 1)]:
            expect_errno(lambda: os.stat(m.path("control", "wait", bad)),
                         [errno.ENOENT], "control/wait/%r" % bad)
        view_ok(m, view, "after")
    finally:
        os.close(lock)
        m.close()


def test_history(tmp):
    """-o history=N: control/status keeps the last N jobs to end and every
    unfinished one, so that a script retrying a bad request forever does
    not grow segfs without bound; a dropped job's number is unknown to
    control/wait/ and cancel."""
    d = os.path.join(tmp, "history")
    os.mkdir(d)
    view = stack(d, 4, 200000, random.Random(4))
    m = Mount(d, "workers=1", "history=3")
    try:
        check(request(m, b"merge s0.seg s1.seg s2.seg\n") == 0, "big merge")
        check(request(m, b"merge s3.seg\n") == 0, "queued merge")
        for i in range(5):  # jobs 3..7, each ended (rejected) at once
            check(request(m, b"merge nosuch%d.seg\n" % i) == errno.ENOENT,
                  "bad request %d" % i)
        st = {j["id"]: j["state"] for j in status(m)}
        check(sorted(st) == [1, 2, 5, 6, 7] and st[2] == "queued" and
              st[1] in ("queued", "running"),
              "the unfinished jobs and the last 3 ended: %r" % st)
        expect_errno(lambda: read(m.path("control", "wait", "3")), [errno.ENOENT],
                     "control/wait/ of a dropped job")
        check(request(m, b"cancel 4\n") == errno.ENOENT and
              status(m)[-1]["error"] == "no job 4", "cancel of a dropped job")
        check(request(m, b"cancel 2\ncancel 1\n") == 0, "cancel both")
        for job in (1, 2):
            w = wait(m, job)
            check(w["state"] == "cancelled", "job %d cancelled: %r" % (job, w))
        st = {j["id"]: j["state"] for j in status(m)}
        check(st == {1: "cancelled", 2: "cancelled", 8: "rejected"},
              "the last 3 to end, in number order: %r" % st)
        view_ok(m, view, "after")
    finally:
        m.close()
    mnt = tempfile.mkdtemp(prefix="segfs-mnt-")
    r = subprocess.run([SEGFS, "-f", "-o", "history=0", d, mnt],
                       capture_output=True, timeout=30)
    os.rmdir(mnt)
    check(r.returncode == 2 and b"history= 1..1000000" in r.stderr,
          "-o history=0 is refused: %r" % r.stderr)


def test_kill_during_merge(tmp):
    """SIGKILL during a merge, at 8 moments; after each, a remount sees
    the old or the new generation, every segment verifies, no orphan."""
    d = os.path.join(tmp, "kill")
    os.mkdir(d)
    view = stack(d, 3, 100000, random.Random(5))
    first = {f: read(os.path.join(d, f)) for f in os.listdir(d)}
    generations = set()
    for delay in [0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3]:
        m = Mount(d)
        request(m, b"merge all\n")
        time.sleep(delay)
        m.proc.kill()
        m.proc.wait()
        subprocess.run(["fusermount3", "-u", "-z", m.mnt])
        os.rmdir(m.mnt)
        m = Mount(d)  # recovers
        try:
            cat = read(m.path("control", "catalog")).decode()
            generations.add(cat.split("\n")[0])
            view_ok(m, view, "after a kill at %.3f s" % delay)
        finally:
            m.close()
        check_clean(d, "after a kill at %.3f s" % delay)
        if "segments 1" in cat:  # merged: start again from the three segments
            for f in os.listdir(d):
                os.unlink(os.path.join(d, f))
            for f, data in first.items():
                with open(os.path.join(d, f), "wb") as out:
                    out.write(data)
    print("  generations seen after kills: %s" % sorted(generations))


def stop_merging(m, d):
    """Requests `merge all name=out.seg` of m (on directory d) and stops
    segfs (SIGSTOP) once the merge's temporary output exists, or after a
    minute; returns the job's id. The caller sends SIGCONT."""
    check(request(m, b"merge all name=out.seg\n") == 0, "the merge")
    job = status(m)[-1]["id"]
    deadline = time.monotonic() + 60
    while (time.monotonic() < deadline and not any(
            ".pub-" in x for x in os.listdir(d))):
        pass
    os.kill(m.proc.pid, signal.SIGSTOP)
    return job


def test_output_taken(tmp):
    """Another process creates a file at a merge's output name while the
    merge runs: that file stays as it was, the merge fails saying so, and
    nothing is published or left behind."""
    theirs = b"another process's file\n"
    for attempt in range(3):
        d = os.path.join(tmp, "taken%d" % attempt)
        os.mkdir(d)
        stack(d, 3, 200000, random.Random(8 + attempt))
        m = Mount(d)  # makes the catalog
        before = dir_state(d)
        try:
            # stopped once its temporary output exists, segfs cannot
            # publish while the file is created
            job = stop_merging(m, d)
            try:
                with open(os.path.join(d, "out.seg"), "xb") as f:
                    f.write(theirs)
                created = True
            except FileExistsError:  # the merge ended first: again
                created = False
            finally:
                os.kill(m.proc.pid, signal.SIGCONT)
            w = wait(m, job)
            if not created:
                continue
            check(w["state"] == "failed" and "out.seg" in w["error"] and
                  "appeared" in w["error"],
                  "the merge fails naming the file: %r" % w)
            check(listdir(m.path("segments")) == [b"s0.seg", b"s1.seg", b"s2.seg"],
                  "nothing is published")
        finally:
            m.close()
        with open(os.path.join(d, "out.seg"), "rb") as f:
            check(f.read() == theirs, "the other process's file is unchanged")
        os.unlink(os.path.join(d, "out.seg"))
        check(dir_state(d) == before, "nothing else is changed or left")
        return
    check(False, "three merges ended before the file could be created")


def test_recover_marks(tmp):
    """What a merge killed before publishing left, a mount removes: its
    temporary output (.NAME.pub-XXXXXX) and NAME when that is the same
    file. Another process's NAME stays, and so does a merge in progress of
    another segfs mounted on the same directory."""
    d = os.path.join(tmp, "marks")
    os.mkdir(d)
    stack(d, 2, 1000, random.Random(9))
    Mount(d).close()  # makes the catalog
    before = dir_state(d)
    theirs = b"another process's file\n"
    # killed before the output had its name; meanwhile another process
    # made a file of that name
    shutil.copy(os.path.join(d, "s1.seg"), os.path.join(d, ".x.seg.pub-abcdef"))
    with open(os.path.join(d, "x.seg"), "wb") as f:
        f.write(theirs)
    # killed after the output had its name, before it was published
    shutil.copy(os.path.join(d, "s1.seg"), os.path.join(d, "y.seg"))
    os.link(os.path.join(d, "y.seg"), os.path.join(d, ".y.seg.pub-ghijkl"))
    m = Mount(d)
    try:
        check(listdir(m.path("segments")) == [b"s0.seg", b"s1.seg"],
              "the catalog is as it was")
    finally:
        m.close()
    x = os.path.join(d, "x.seg")
    check(os.path.exists(x) and open(x, "rb").read() == theirs,
          "the other process's x.seg is unchanged")
    if os.path.exists(x):
        os.unlink(x)
    check(dir_state(d) == before,
          "the temporary outputs and the unpublished y.seg are gone: %r" % (
              sorted(os.listdir(d)),))
    # a second segfs mounted while the first merges leaves the first's
    # temporary output alone (the writer holds a lock on it), and the
    # first publishes
    for attempt in range(3):
        d = os.path.join(tmp, "marks%d" % (attempt + 2))
        os.mkdir(d)
        stack(d, 3, 200000, random.Random(10 + attempt))
        first = Mount(d)
        try:
            job = stop_merging(first, d)
            try:
                temps = [x for x in os.listdir(d) if ".pub-" in x]
                Mount(d).close()
                kept = all(os.path.exists(os.path.join(d, x))
                           for x in temps)
            finally:
                os.kill(first.proc.pid, signal.SIGCONT)
            w = wait(first, job)
            if temps:
                check(kept, "a second segfs leaves the first's merge "
                      "alone: %r" % sorted(os.listdir(d)))
                check(w["state"] == "done" and
                      listdir(first.path("segments")) == [b"out.seg"],
                      "the first segfs publishes its merge: %r" % w)
        finally:
            first.close()
        check(not any(".pub-" in x for x in os.listdir(d)),
              "no temporary output is left: %r" % sorted(os.listdir(d)))
        if temps:
            return
    check(False, "three merges ended before segfs could be stopped")


def test_enospc(tmp):
    """A merge that runs out of space: the job fails with the reason;
    inputs, catalog and view are unchanged; the daemon keeps serving."""
    if os.geteuid() != 0:
        print("SKIP test_enospc: mounting a small tmpfs needs root")
        return
    d = os.path.join(tmp, "small")
    os.mkdir(d)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", d], check=True)
    try:
        rng = random.Random(6)
        view = {}
        for s in range(2):  # disjoint, about 1.3 MB each
            recs = [(b"s%d/%06d" % (s, i), rng.randbytes(40)) for i in range(25000)]
            build(os.path.join(d, "s%d.seg" % s), [(k, len(k) * 8, v) for k, v in recs],
                  seq=s + 1)
            view.update(dict(recs))
        m = Mount(d)
        before = dir_state(d)
        try:
            check(request(m, b"merge all\n") == 0, "merge accepted")
            w = wait(m, 1)
            check(w["state"] == "failed" and "space" in (w["error"] or ""),
                  "the job failed for lack of space: %r" % w)
            check(dir_state(d) == before, "nothing changed")
            view_ok(m, view, "after ENOSPC")
        finally:
            m.close()
    finally:
        subprocess.run(["umount", d])


def test_external_change(tmp):
    """kvseg changing the catalog of a mounted directory: segfs notices
    (inotify) and serves the new generation."""
    d = os.path.join(tmp, "external")
    os.mkdir(d)
    build(os.path.join(d, "a.seg"), [(b"k1", 16, b"old"), (b"k2", 16, b"two")], seq=1)
    m = Mount(d)
    try:
        check(read(m.path("view", "k1")) == b"old", "before")
        build(os.path.join(d, "b.seg"), [(b"k1", 16, b"new"), (b"k3", 16, b"three")], seq=2)
        subprocess.run([KVSEG, "catalog", d, "add", "b.seg"], check=True,
                       capture_output=True)
        deadline = time.time() + 5
        while time.time() < deadline and read(m.path("view", "k1")) != b"new":
            time.sleep(0.01)
        check(read(m.path("view", "k1")) == b"new", "view/ serves the added segment")
        check(listdir(m.path("segments")) == [b"a.seg", b"b.seg"], "segments/ too")
        check(read(m.path("view", "k3")) == b"three", "a new key appears")
        # again and again, the key read in a tight loop all along (a
        # cached entry of it must not outlive a change)
        for i in range(10):
            build(os.path.join(d, "n%d.seg" % i), [(b"k1", 16, b"v%d" % i)], seq=3 + i)
            subprocess.run([KVSEG, "catalog", d, "add", "n%d.seg" % i], check=True,
                           capture_output=True)
            deadline = time.time() + 5
            while time.time() < deadline and read(m.path("view", "k1")) != b"v%d" % i:
                pass
            check(read(m.path("view", "k1")) == b"v%d" % i, "change %d is served" % i)
        subprocess.run([KVSEG, "catalog", d, "merge", "all"], check=True,
                       capture_output=True)
        deadline = time.time() + 5
        while time.time() < deadline and len(listdir(m.path("segments"))) != 1:
            time.sleep(0.01)
        check(len(listdir(m.path("segments"))) == 1, "an external merge is served")
        check(read(m.path("view", "k2")) == b"two", "view/ after the external merge")
    finally:
        m.close()


def read_within(path, seconds, what):
    """path's bytes, read by a child that is killed after `seconds` (a
    read that blocks fails the test instead of hanging it)."""
    try:
        r = subprocess.run(["cat", path], capture_output=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        check(False, "%s: no answer in %d s" % (what, seconds))
        return None
    check(r.returncode == 0, "%s: %r" % (what, r.stderr))
    return r.stdout


def test_fifo_catalog(tmp):
    """A FIFO in CATALOG's place (opening one for reading waits for a
    writer): a mount refuses it at once, naming it; a mounted segfs whose
    CATALOG is replaced by one says so, keeps serving, and fails a merge
    naming it; with the file back, merges publish again."""
    d = os.path.join(tmp, "fifo")
    os.mkdir(d)
    view = stack(d, 2, 300, random.Random(21))
    Mount(d).close()  # makes the catalog
    cat, saved = os.path.join(d, "CATALOG"), os.path.join(d, "catalog.saved")
    os.rename(cat, saved)
    os.mkfifo(cat)
    mnt = tempfile.mkdtemp(prefix="segfs-mnt-")
    try:
        r = subprocess.run([SEGFS, "-f", d, mnt], capture_output=True, timeout=20)
        err = r.stderr.decode(errors="replace")
        check(r.returncode != 0 and "CATALOG: not a regular file" in err,
              "a mount refuses the FIFO, naming it: %s %r" % (r.returncode, err))
    except subprocess.TimeoutExpired:
        check(False, "a mount over a FIFO CATALOG did not end in 20 s")
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt])
        os.rmdir(mnt)
    os.unlink(cat)
    os.rename(saved, cat)

    m = Mount(d)
    try:
        view_ok(m, view, "before")
        fifo = os.path.join(d, "fifo.new")
        os.mkfifo(fifo)
        os.link(cat, saved)
        os.rename(fifo, cat)  # the watcher sees CATALOG change
        deadline = time.time() + 10
        while time.time() < deadline and "not a regular file" not in m.stderr():
            time.sleep(0.02)
        check("the catalog changed but cannot be served" in m.stderr() and
              "CATALOG: not a regular file" in m.stderr(),
              "segfs says why it keeps the catalog it had: %r" % m.stderr())
        view_ok(m, view, "with a FIFO as CATALOG")
        check(request(m, b"merge all\n") == 0, "merge accepted")
        w = read_within(m.path("control", "wait", "1"), 20, "the merge's end")
        w = json.loads(w) if w is not None else {}
        check(w.get("state") == "failed" and
              "CATALOG: not a regular file" in (w.get("error") or ""),
              "the merge fails, naming CATALOG: %r" % w)
        check(sorted(os.listdir(m.path("segments"))) == [b"s0.seg", b"s1.seg"],
              "segments/ unchanged")
        os.rename(saved, cat)  # the file back
        check(request(m, b"merge all\n") == 0, "second merge accepted")
        w = read_within(m.path("control", "wait", "2"), 60, "the second merge's end")
        w = json.loads(w) if w is not None else {}
        check(w.get("state") == "done", "with the file back a merge publishes: %r" % w)
        view_ok(m, view, "after the merge")
        check(len(os.listdir(m.path("segments"))) == 1, "one segment after it")
    finally:
        m.close()


def test_watch_overflow(tmp):
    """Events lost to a full inotify queue (IN_Q_OVERFLOW) may include
    CATALOG's: segfs then reloads, so a catalog changed meanwhile is
    served. The queue is filled while segfs is stopped (SIGSTOP): writes
    to two other files alternately (identical events in a row would be
    merged), one more than the queue holds, then kvseg adds a segment."""
    d = os.path.join(tmp, "overflow")
    os.mkdir(d)
    build(os.path.join(d, "a.seg"), [(b"k1", 16, b"old")], seq=1)
    m = Mount(d)
    fill = [os.path.join(d, "fill-a"), os.path.join(d, "fill-b")]
    try:
        check(read(m.path("view", "k1")) == b"old", "before")
        build(os.path.join(d, "b.seg"), [(b"k1", 16, b"new")], seq=2)
        time.sleep(0.2)  # its events read: not CATALOG's
        with open("/proc/sys/fs/inotify/max_queued_events") as f:
            limit = int(f.read())
        os.kill(m.proc.pid, signal.SIGSTOP)
        try:
            for i in range(limit + 10):
                with open(fill[i % 2], "wb") as f:
                    f.write(b"x")
            subprocess.run([KVSEG, "catalog", d, "add", "b.seg"], check=True,
                           capture_output=True, timeout=60)
        finally:
            os.kill(m.proc.pid, signal.SIGCONT)
        deadline = time.time() + 10
        while time.time() < deadline and read(m.path("view", "k1")) != b"new":
            time.sleep(0.02)
        check(read(m.path("view", "k1")) == b"new",
              "the change whose event was lost is served")
        check(listdir(m.path("segments")) == [b"a.seg", b"b.seg"], "segments/ too")
    finally:
        m.close()
        for f in fill:
            os.unlink(f)


def test_read_only(tmp):
    """A directory that cannot be written (a read-only bind mount), with a
    catalog and without: kvseg catalog list and segfs show it as it is and
    write nothing; what would change it fails with a clear error."""
    if os.geteuid() != 0:
        print("SKIP test_read_only: a read-only bind mount needs root")
        return
    rng = random.Random(8)
    for with_catalog in (True, False):
        what = "read-only, %s catalog" % ("with a" if with_catalog else "without a")
        d = os.path.join(tmp, "ro-src-%d" % with_catalog)
        ro = os.path.join(tmp, "ro-%d" % with_catalog)
        os.mkdir(d)
        os.mkdir(ro)
        view = stack(d, 3, 3000, rng)
        if with_catalog:
            subprocess.run([KVSEG, "catalog", d, "init"], check=True,
                           capture_output=True)
            # what a killed writer left: recovery would remove it
            with open(os.path.join(d, ".s7.seg.tmp-abcdef"), "wb") as f:
                f.write(b"half a segment")
        before = {n: read(os.path.join(d, n)) for n in os.listdir(d)}
        subprocess.run(["mount", "--bind", d, ro], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", ro], check=True)
            lst = subprocess.run([KVSEG, "catalog", ro, "list"], capture_output=True)
            check(lst.returncode == 0, "%s: catalog list: %s" % (what, lst.stderr))
            rows = [l.split("\t") for l in lst.stdout.decode().splitlines()[1:]]
            check([r[0] for r in rows] == ["s0.seg", "s1.seg", "s2.seg"] and
                  [r[1] for r in rows] == ["1", "2", "3"],
                  "%s: catalog list names the segments oldest first: %r" % (what, rows))
            for verb in (["init"], ["add", "s0.seg"], ["merge", "all"]):
                r = subprocess.run([KVSEG, "catalog", ro] + verb, capture_output=True)
                check(r.returncode == 4 and b"Read-only file system" in r.stderr,
                      "%s: catalog %s fails naming the cause: %s %r" % (
                          what, verb[0], r.returncode, r.stderr))
            m = Mount(ro)
            try:
                view_ok(m, view, what)
                check(listdir(m.path("segments")) == [b"s0.seg", b"s1.seg", b"s2.seg"],
                      "%s: segments/" % what)
                check(request(m, b"merge all\n") == errno.EROFS,
                      "%s: control/merge refuses with EROFS" % what)
                st = status(m)
                check(len(st) == 1 and st[0]["state"] == "rejected" and
                      "cannot be written" in st[0]["error"],
                      "%s: control/status says why: %r" % (what, st))
                view_ok(m, view, what + ", after the refused merge")
            finally:
                m.close()
            check("cannot be written" in m.stderr(),
                  "%s: segfs says it shows the directory read-only: %r" % (
                      what, m.stderr()))
        finally:
            subprocess.run(["umount", ro], check=True)
        after = {n: read(os.path.join(d, n)) for n in os.listdir(d)}
        check(after == before, "%s: nothing in the directory changed: %r" % (
            what, sorted(set(after) ^ set(before))))


def test_mount_over_segdir(tmp):
    """A mount point that would hide SEGDIR (SEGDIR itself, a directory
    above it) is refused before mounting: mounted there, segfs would wait
    for its own answers forever."""
    top = os.path.join(tmp, "over")
    d = os.path.join(top, "segs")
    os.makedirs(d)
    build(os.path.join(d, "a.seg"), [(b"k", 8, b"v")], seq=1)
    for mnt in (d, top, os.path.join(d, ".")):
        real = os.path.realpath(mnt)  # not once segfs may hang on it
        p = subprocess.Popen([SEGFS, "-f", d, mnt], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        try:
            _, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            check(False, "segfs over %s: still running after 20 s" % mnt)
            # it hangs in a request to itself (and so does anything that
            # looks at the mount): detach the mount, then kill it
            subprocess.run(["fusermount3", "-u", "-z", real])
            p.kill()
            try:
                p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                print("segfs over %s: cannot be stopped (pid %d)" % (mnt, p.pid))
            continue
        check(p.returncode == 2 and b"would hide" in err,
              "segfs over %s: exit %s, %r" % (mnt, p.returncode, err))
        check(not os.path.ismount(mnt), "segfs over %s: nothing mounted" % mnt)
    # a directory whose name only starts the same hides nothing
    mnt = d + "x"
    os.mkdir(mnt)
    m = Mount(d, mnt=mnt)
    try:
        check(read(m.path("view", "k")) == b"v", "%s/view/k" % mnt)
    finally:
        m.close()

def test_lock_unusable(tmp):
    """Where segfs cannot open SEGDIR/.segfs.lock (here a directory of that
    name) it says so, leaves the marks a killed segfs left (it cannot tell
    whether another segfs uses them) and serves; with the lock file back,
    a mount removes them."""
    d = os.path.join(tmp, "nolock")
    os.mkdir(d)
    view = stack(d, 2, 500, random.Random(12))
    Mount(d).close()  # makes the catalog and the lock file
    lock = os.path.join(d, ".segfs.lock")
    os.unlink(lock)
    os.mkdir(lock)
    mark = os.path.join(d, ".s0.seg.retired")  # of a live segment
    os.link(os.path.join(d, "s0.seg"), mark)
    m = Mount(d)
    try:
        view_ok(m, view, "without a usable .segfs.lock")
    finally:
        m.close()
    check(".segfs.lock: Is a directory" in m.stderr() and
          "not removed" in m.stderr(),
          "segfs names the lock file and what it leaves: %r" % m.stderr())
    check(os.path.exists(mark), "the mark stays")
    os.rmdir(lock)
    Mount(d).close()
    check(not os.path.exists(mark) and os.path.exists(os.path.join(d, "s0.seg")),
          "with the lock file back the mark goes, the live segment stays: %r" %
          sorted(os.listdir(d)))


def test_lock_links(tmp):
    """Symbolic links in the lock files' places must not make segfs create
    or open a file elsewhere (as root, anywhere): CATALOG.lock as a link
    refuses the mount, naming it; .segfs.lock as a link is named on stderr
    and segfs serves on without removing leftovers."""
    d = os.path.join(tmp, "locklinks")
    away = os.path.join(tmp, "locklinks-away")
    os.mkdir(d)
    os.mkdir(away)
    view = stack(d, 2, 200, random.Random(13))
    Mount(d).close()  # makes the catalog and both lock files
    for name in ("CATALOG.lock", ".segfs.lock"):
        os.unlink(os.path.join(d, name))
        os.symlink(os.path.join(away, name), os.path.join(d, name))
    m = Mount(d, expect_fail=True)
    rc = m.proc.wait(timeout=30)
    err = m.stderr()
    check(rc != 0 and "CATALOG.lock: a symbolic link, not a lock file" in err,
          "the mount is refused, naming CATALOG.lock: %s %r" % (rc, err))
    os.rmdir(m.mnt)
    check(os.listdir(away) == [], "nothing created through the links: %r" %
          os.listdir(away))
    os.unlink(os.path.join(d, "CATALOG.lock"))
    m = Mount(d)
    try:
        view_ok(m, view, "with .segfs.lock a link")
    finally:
        m.close()
    check(".segfs.lock: a symbolic link, not a lock file" in m.stderr(),
          "segfs names .segfs.lock: %r" % m.stderr())
    check(os.listdir(away) == [], "nothing created through the link: %r" %
          os.listdir(away))
    check(os.path.islink(os.path.join(d, ".segfs.lock")), "the link stays")


def run_tests(tests, prefix, only):
    """Runs each test (the names in only, when given) in one temporary
    directory, saying how each went; the exit status. The other test
    scripts of this directory run theirs through it too."""
    if not os.path.exists("/dev/fuse"):
        print("SKIP: /dev/fuse is missing: segfs cannot mount here")
        return 77
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for t in tests:
            if only and t.__name__ not in only:
                continue
            t0 = time.time()
            before = len(failures)
            t(tmp)
            print("%-28s %s (%.1f s)" % (t.__name__,
                  "ok" if len(failures) == before else "FAILED", time.time() - t0),
                  flush=True)
    if failures:
        print("%d failures" % len(failures))
        return 1
    return 0


def main():
    tests = [test_modes, test_names, test_mutations, test_large, test_threads,
             test_sep, test_many_dirs, test_bad_segment, test_corrupt_body, test_signals,
             test_merge_live, test_retired_readers, test_bad_requests,
             test_status_after_listing, test_truncated_segment,
             test_cut_while_opening,
             test_random_requests, test_cancel, test_wait_interrupted, test_history, test_kill_during_merge,
             test_output_taken, test_recover_marks, test_enospc, test_external_change,
             test_fifo_catalog, test_watch_overflow, test_read_only, test_mount_over_segdir,
             test_lock_unusable, test_lock_links]
    return run_tests(tests, "segfs-test-", sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
