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
import hashlib
import json
import os
import random
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
    def __init__(self, segdir, *opts, expect_fail=False):
        self.mnt = tempfile.mkdtemp(prefix="segfs-mnt-")
        self.log = tempfile.TemporaryFile()
        args = [SEGFS, "-f", segdir, self.mnt]
        for o in opts:
            args += ["-o", o]
        self.proc = subprocess.Popen(args, stderr=self.log,
                                     stdout=subprocess.DEVNULL)
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


def main():
    if not os.path.exists("/dev/fuse"):
        print("SKIP: /dev/fuse is missing: segfs cannot mount here")
        return 77
    only = sys.argv[3:]
    tests = [test_modes, test_names, test_mutations, test_large, test_threads,
             test_sep, test_bad_segment, test_corrupt_body, test_signals]
    with tempfile.TemporaryDirectory(prefix="segfs-test-") as tmp:
        for t in tests:
            if only and t.__name__ not in only:
                continue
            t0 = time.time()
            before = len(failures)
            t(tmp)
            print("%-18s %s (%.1f s)" % (t.__name__,
                  "ok" if len(failures) == before else "FAILED", time.time() - t0),
                  flush=True)
    if failures:
        print("%d failures" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
