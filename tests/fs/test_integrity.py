#!/usr/bin/env python3
"""Integrity under damage and load (issue 40): no merge certifies a damaged
input, no listing of damaged data loops, no symbolic link is followed, key
files are no more readable than their segment files, and merged-away
segments give their disk space and memory back. Reuses test_segfs.py's
mounts and its model of the name mapping.

Usage: test_integrity.py SEGFS KVSEG [TEST ...]
Skips (exit 77) only where /dev/fuse is missing.
"""
import errno
import os
import random
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_segfs as T  # noqa: E402  (reads SEGFS and KVSEG from argv)
from test_segfs import (KVSEG, Mount, build, check, dir_state,  # noqa: E402
                        listdir, read, request, wait)


def kvseg(*args, **kw):
    return subprocess.run([KVSEG, *args], capture_output=True, **kw)


# ---- damaged inputs of a merge ------------------------------------------------

VALUE = b"value-of-k01425!"  # one record's value, found in the file


def damaged_pair(d):
    """Two segments in d, a.kvs (seq 1) holding VALUE under k01425 and
    b.kvs (seq 2); returns a.kvs's bytes."""
    recs = [(b"k%05d" % i, 48, VALUE if i == 1425 else b"v")
            for i in range(1, 2001)]
    build(os.path.join(d, "a.kvs"), recs, seq=1)
    build(os.path.join(d, "b.kvs"), [(b"zzz", 24, b"1")], seq=2)
    return read(os.path.join(d, "a.kvs"))


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x01]))


def damage(path, data, how):
    """Damages a.kvs: a flipped value byte, a flipped key byte (of a
    restart key, stored whole) or a cut."""
    if how == "value":
        flip(path, data.index(VALUE) + 3)
    elif how == "key":
        flip(path, data.index(b"k01426") + 4)  # 1425 is a restart's next
    else:
        os.truncate(path, len(data) - 100)


def test_merge_damaged_cli(tmp):
    """kvseg merge and kvseg catalog merge refuse a damaged input (exit 3,
    naming it) and leave the inputs and the catalog as they were."""
    for how in ("value", "key", "cut"):
        d = os.path.join(tmp, "dmg-cli-" + how)
        os.mkdir(d)
        data = damaged_pair(d)
        check(kvseg("catalog", d, "init").returncode == 0, "catalog init")
        damage(os.path.join(d, "a.kvs"), data, how)
        before = dir_state(d)
        a_bytes = read(os.path.join(d, "a.kvs"))
        out = os.path.join(tmp, "dmg-out-%s.kvs" % how)
        r = kvseg("merge", "-o", out, os.path.join(d, "a.kvs"),
                  os.path.join(d, "b.kvs"))
        check(r.returncode == 3 and b"a.kvs" in r.stderr,
              "%s: kvseg merge of a damaged input: exit %d, %r" % (how, r.returncode, r.stderr))
        check(not os.path.exists(out), "%s: kvseg merge wrote no output" % how)
        r = kvseg("catalog", d, "merge", "all")
        check(r.returncode == 3 and b"a.kvs" in r.stderr,
              "%s: kvseg catalog merge of a damaged input: exit %d, %r"
              % (how, r.returncode, r.stderr))
        check(dir_state(d) == before, "%s: catalog merge changed nothing" % how)
        check(read(os.path.join(d, "a.kvs")) == a_bytes, "%s: a.kvs kept as it was" % how)
        if how != "cut":
            check(b"CRC32C" in r.stderr, "%s: the message names the CRC: %r" % (how, r.stderr))


def test_merge_damaged_control(tmp):
    """A merge through control/merge of an input damaged under the mount
    fails as a job naming the input; inputs and the catalog stay."""
    for how in ("value", "key", "cut"):
        d = os.path.join(tmp, "dmg-fs-" + how)
        os.mkdir(d)
        data = damaged_pair(d)
        m = Mount(d)
        try:
            check(read(m.path("view", "k01425")) == VALUE, "%s: served before" % how)
            damage(os.path.join(d, "a.kvs"), data, how)
            before = dir_state(d)
            check(request(m, b"merge all\n") == 0, "%s: request taken" % how)
            st = wait(m, 1)
            check(st.get("state") == "failed" and "a.kvs" in st.get("error", ""),
                  "%s: the job fails naming a.kvs: %r" % (how, st))
            cause = "cut short" if how == "cut" else "CRC32C"
            check(cause in st.get("error", ""), "%s: the job names the cause: %r" % (how, st))
            check(dir_state(d) == before, "%s: nothing changed in the directory" % how)
            check(sorted(listdir(m.path("segments"))) == [b"a.kvs", b"b.kvs"],
                  "%s: both inputs still live" % how)
        finally:
            m.close()


# ---- listings of damaged data -----------------------------------------------

def list_within(path, seconds, what):
    """ls -fR of path in a process of its own: its exit code and the number
    of names, or a failure when it does not end in time."""
    try:
        r = subprocess.run(["ls", "-fR", path], capture_output=True,
                           timeout=seconds)
    except subprocess.TimeoutExpired:
        check(False, "%s: ls -fR %s did not end in %d s" % (what, path, seconds))
        return None, 0
    return r.returncode, len(r.stdout.splitlines())


def test_listing_loop(tmp):
    """The review's repro: one changed body byte made `ls -f view` go round
    three names for ever. It must end, with EIO, having listed fewer names
    than the segment holds."""
    d = os.path.join(tmp, "loop")
    os.mkdir(d)
    lines = "".join("k%05d\tv\n" % i for i in range(1, 2001)).encode()
    subprocess.run([KVSEG, "build", os.path.join(d, "a.kvs")], input=lines,
                   check=True, capture_output=True)
    with open(os.path.join(d, "a.kvs"), "r+b") as f:
        f.seek(499)
        f.write(b"\x14")
    m = Mount(d)
    try:
        for sub in ("view", os.path.join("segments", "a.kvs")):
            rc, n = list_within(m.path(sub), 20, "loop " + sub)
            check(rc is not None and rc != 0 and n < 2000,
                  "loop %s: ls ends with an error: rc %s, %d names" % (sub, rc, n))
            try:
                os.listdir(m.path(sub))
                check(False, "loop %s: listdir succeeded" % sub)
            except OSError as e:
                check(e.errno == errno.EIO, "loop %s: errno %s" % (sub, e.errno))
    finally:
        m.close()


def test_damaged_listings(tmp):
    """Mutated segments (random body bytes changed, in every mode), mounted
    flat and with -o sep=/: listing view/, segments/ and the sep tree
    always ends in time and never lists more names than there are keys,
    and the daemon survives (Mount.close checks its exit and stderr)."""
    rng = random.Random(40)
    keys = sorted({b"d%d/k%04d" % (rng.randrange(8), rng.randrange(3000))
                   for _ in range(600)})
    for mi, (profile, framing) in enumerate(T.MODES):
        good = os.path.join(tmp, "good-%d.kvs" % mi)
        build(good, [(k, len(k) * 8, b"v%d" % i) for i, k in enumerate(keys)],
              profile, framing, seq=1)
        data = read(good)
        body = 128 + 32 * int.from_bytes(data[52:56], "little")
        for t in range(6):
            d = os.path.join(tmp, "mut-%d-%d" % (mi, t))
            os.mkdir(d)
            b = bytearray(data)
            for _ in range(rng.choice((1, 1, 2, 4))):
                at = rng.randrange(body, len(b))
                b[at] ^= rng.randrange(1, 256)
            with open(os.path.join(d, "m.kvs"), "wb") as f:
                f.write(b)
            if kvseg("catalog", d, "init").returncode != 0:
                continue  # refused at open: nothing to list
            for opts in ((), ("sep=/",)):
                what = "%s-%s try %d %s" % (profile, framing, t, opts)
                m = Mount(d, *opts, expect_fail=True)
                if m.proc.poll() is not None:
                    os.rmdir(m.mnt)
                    continue
                try:
                    for sub in ("view", "segments"):
                        rc, n = list_within(m.path(sub), 30, what)
                        check(n <= 2 * len(keys) + 10,
                              "%s: %s listed %d names" % (what, sub, n))
                finally:
                    m.close()


# ---- what the catalog names must be the file itself ---------------------------

def test_not_regular(tmp):
    """A symbolic link (to a valid segment outside SEGDIR), a FIFO, a
    directory, or another segment in place of a live segment: kvseg and
    segfs refuse it, naming the file and what it is; with -o skip_bad
    segfs serves the rest, never the replacement's keys."""
    outside = os.path.join(tmp, "outside.kvs")
    build(outside, [(b"o", 8, b"secret")], seq=2)
    other = os.path.join(tmp, "other.kvs")
    build(other, [(b"o", 8, b"Secret")], seq=2)
    kinds = {  # the link's target is the very segment the catalog records
        "symlink": (lambda p: os.symlink(outside, p), "symbolic link"),
        "fifo": (lambda p: os.mkfifo(p), "FIFO"),
        "directory": (lambda p: os.mkdir(p), "directory"),
        "other segment": (lambda p: shutil.copy(other, p),
                          "not the segment the catalog names"),
    }
    for kind, (make, says) in kinds.items():
        d = os.path.join(tmp, "nreg-" + kind.replace(" ", "-"))
        os.mkdir(d)
        build(os.path.join(d, "a.kvs"), [(b"a", 8, b"1")], seq=1)
        shutil.copy(outside, os.path.join(d, "out.kvs"))
        check(kvseg("catalog", d, "init").returncode == 0, "%s: init" % kind)
        os.unlink(os.path.join(d, "out.kvs"))
        make(os.path.join(d, "out.kvs"))
        r = kvseg("catalog", d, "list")
        check(r.returncode == 3 and b"out.kvs" in r.stderr and says.encode() in r.stderr,
              "%s: kvseg catalog list: %d %r" % (kind, r.returncode, r.stderr))
        m = Mount(d, expect_fail=True)
        rc = m.proc.wait(timeout=30)
        err = m.stderr()
        check(rc != 0 and "out.kvs" in err and says in err,
              "%s: segfs refuses to mount: %s %r" % (kind, rc, err))
        os.rmdir(m.mnt)
        m = Mount(d, "skip_bad")
        try:
            check(listdir(m.path("segments")) == [b"a.kvs"], "%s: skip_bad leaves it out" % kind)
            check(sorted(listdir(m.path("view"))) == [b"a"], "%s: view/ has a only" % kind)
            T.expect_errno(lambda: read(m.path("view", "o")), (errno.ENOENT,),
                           "%s: the outside key is not served" % kind)
            check(says in m.stderr(), "%s: skip_bad says why" % kind)
        finally:
            m.close()


# ---- retired segments give their space back ------------------------------------

def held(m, d):
    """What merged-away segments hold: bytes of deleted files of d that the
    daemon still maps, .retired files in d, and the daemon's resident
    memory."""
    pid = m.proc.pid
    mapped, prefix = 0, os.path.realpath(d) + "/"
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            fields = line.split(None, 5)
            name = fields[5].strip() if len(fields) > 5 else ""
            if name.startswith(prefix) and name.endswith("(deleted)"):
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                mapped += hi - lo
    retired = [x for x in os.listdir(d) if x.endswith(".retired")]
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    return mapped, retired, rss * 1024


def until(cond, seconds):
    deadline = time.time() + seconds
    while not cond() and time.time() < deadline:
        time.sleep(0.05)
    return cond()


def test_retired_without_drop(tmp):
    """Keys the kernel has cached (entry timeout one year) no longer keep
    merged-away segments: after a merge their files go and the daemon maps
    none of them, without dropping caches; in both threading modes."""
    for opts in ((), ("mt",)):
        d = os.path.join(tmp, "retired-cached" + "-".join(opts))
        os.mkdir(d)
        view = T.stack(d, 3, 3000, random.Random(3))
        m = Mount(d, *opts)
        try:
            live = [k for k, v in view.items() if v is not None]
            for k in live:  # the kernel caches every one of these entries
                read(m.path("view", T.name_of(k, len(k) * 8)))
            listdir(m.path("segments", "s0.seg"))
            check(request(m, b"merge all\n") == 0 and wait(m, 1)["state"] == "done",
                  "%s: merge 1" % (opts,))
            ok = until(lambda: held(m, d)[:2] == (0, []), 10)
            check(ok, "%s: retired segments let go: %r" % (opts, held(m, d)[:2]))
            # a file opened (looked up afresh) and still open when the
            # catalog changes: its entry must not stay cached once closed
            k = live[0]
            f = open(m.path("view", T.name_of(k, len(k) * 8)), "rb")
            check(request(m, b"merge all\n") == 0 and wait(m, 2)["state"] == "done",
                  "%s: merge 2" % (opts,))
            check(f.read() == view[k], "%s: the open file reads on" % (opts,))
            f.close()
            ok = until(lambda: held(m, d)[:2] == (0, []), 10)
            check(ok, "%s: the segment of a file open across a merge let go "
                  "once closed: %r" % (opts, held(m, d)[:2]))
            T.view_ok(m, view, "%s after the merges" % (opts,))
        finally:
            m.close()


def test_retire_after(tmp):
    """A file held open on a merged-away segment keeps it only for -o
    retire_after seconds: then the file fails with ESTALE, the segment's
    file and mapping go, and the daemon says so."""
    for opts in ((), ("mt",)):
        d = os.path.join(tmp, "retire-after" + "-".join(opts))
        os.mkdir(d)
        view = T.stack(d, 2, 2000, random.Random(4))
        m = Mount(d, "retire_after=2", *opts)
        try:
            live = sorted(k for k, v in view.items() if v is not None)
            f = open(m.path("view", T.name_of(live[0], len(live[0]) * 8)), "rb")
            g = open(m.path("view", T.name_of(live[-1], len(live[-1]) * 8)), "rb")
            check(f.read() == view[live[0]], "%s: read before" % (opts,))
            t0 = time.time()
            check(request(m, b"merge all\n") == 0 and wait(m, 1)["state"] == "done",
                  "%s: merge" % (opts,))
            check(held(m, d)[1] != [], "%s: the held segment stays at first" % (opts,))
            ok = until(lambda: held(m, d)[:2] == (0, []), 8)
            took = time.time() - t0
            check(ok and took >= 1.5, "%s: let go after retire_after: %r in %.1f s"
                  % (opts, held(m, d)[:2], took))
            T.expect_errno(lambda: os.pread(g.fileno(), 100, 0), (errno.ESTALE,),
                           "%s: a file of a closed segment" % (opts,))
            check("retire_after" in m.stderr(), "%s: the daemon says so" % (opts,))
            f.close()
            g.close()
            T.view_ok(m, view, "%s after" % (opts,))
        finally:
            m.close()


def dir_bytes(d, keep=lambda name: True):
    """The bytes of d's files (those keep admits); a file removed between
    the listing and its stat (a retired segment's death) counts 0."""
    total = 0
    for x in os.listdir(d):
        if keep(x):
            try:
                total += os.path.getsize(os.path.join(d, x))
            except FileNotFoundError:
                pass
    return total


def soak(tmp, opts, seconds):
    """Readers on every key of view/ while merges follow each other for
    `seconds`: no read fails or differs, and what retired segments hold
    stays bounded; returns the samples."""
    d = os.path.join(tmp, "soak" + "-".join(opts))
    os.mkdir(d)
    view = T.stack(d, 4, 20000, random.Random(5))
    live = [k for k, v in view.items() if v is not None]
    m = Mount(d, *opts)
    stop, errors, counts = [False], [], [0]

    def reader(seed):
        r = random.Random(seed)
        while not stop[0]:
            k = r.choice(live)
            try:
                v = read(m.path("view", T.name_of(k, len(k) * 8)))
                if v != view[k]:
                    errors.append("wrong value for %r" % k)
            except OSError as e:
                errors.append("%r: %s" % (k, e))
            counts[0] += 1

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(6)]
    samples, merges = [], 0
    try:
        for t in threads:
            t.start()
        seg_bytes = dir_bytes(d, lambda x: x.endswith(".seg"))
        t_end = time.time() + seconds
        next_sample = time.time()
        while time.time() < t_end:
            merges += 1
            rc = request(m, b"merge all\n")
            st = wait(m, merges) if rc == 0 else {}
            if st.get("state") != "done":
                errors.append("merge %d: %r %r" % (merges, rc, st))
                break
            if time.time() >= next_sample:
                mapped, retired, rss = held(m, d)
                disk = dir_bytes(d)
                samples.append((time.time(), mapped, len(retired), disk, rss))
                next_sample += 1
    finally:
        stop[0] = True
        for t in threads:
            t.join()
        m.close()
    check(not errors, "soak %s: %d errors: %r" % (opts, len(errors), errors[:5]))
    half = samples[len(samples) // 2:]
    peak_mapped = max(s[1] for s in samples)
    peak_disk = max(s[3] for s in samples)
    rss_first, rss_last = half[0][4], max(s[4] for s in half)
    print("  soak %-6s %.0f s: %d merges, %d reads; held deleted mappings "
          "max %.1f MB, .retired files max %d, SEGDIR max %.1f MB (inputs "
          "%.1f MB), daemon RSS %.1f -> %.1f MB (second half)" % (
              "mt" if opts else "single", seconds, merges, counts[0],
              peak_mapped / 1e6, max(s[2] for s in samples), peak_disk / 1e6,
              seg_bytes / 1e6, rss_first / 1e6, rss_last / 1e6), flush=True)
    # bounded: a few segments' worth held at any time, whatever the number
    # of merges (before, every merge's inputs stayed: gigabytes here)
    check(peak_mapped <= 10 * seg_bytes, "soak %s: mapped %d" % (opts, peak_mapped))
    check(peak_disk <= 4 * seg_bytes, "soak %s: disk %d" % (opts, peak_disk))
    check(rss_last <= rss_first + 4e6, "soak %s: RSS grew %d -> %d"
          % (opts, rss_first, rss_last))


def test_soak(tmp):
    """Readers and back-to-back merges (SEGFS_SOAK_SECONDS, default 60,
    each threading mode): disk and daemon memory stay flat."""
    seconds = float(os.environ.get("SEGFS_SOAK_SECONDS", "60"))
    for opts in ((), ("mt",)):
        soak(tmp, opts, seconds)


# ---- permissions ------------------------------------------------------------------

def as_nobody(fn):
    """Runs fn in a child process as user nobody: None, or the errno it
    raised (OSError), or 'wrong' when it returned False."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            code = 0 if fn() is not False else 200
        except OSError as e:
            code = e.errno
        except BaseException:
            code = 201
        os._exit(code)
    _, st = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(st)
    return None if code == 0 else ("wrong" if code == 200 else code)


def test_permissions(tmp):
    """With -o allow_other, key files take their read bits from their
    segment file (view/ from the segment holding the binding), and view/
    is readable only as far as every live segment is: user nobody reads a
    0644 segment's keys but not a 0600 one's."""
    if os.geteuid() != 0:
        print("  permissions: not root, no other user to try")
        return
    d = os.path.join(tmp, "perm")
    os.mkdir(d)
    os.chmod(tmp, 0o755)
    build(os.path.join(d, "pub.kvs"), [(b"p", 8, b"public"), (b"s", 8, b"old")], seq=1)
    build(os.path.join(d, "priv.kvs"), [(b"s", 8, b"secret")], seq=2)
    os.chmod(os.path.join(d, "pub.kvs"), 0o644)
    os.chmod(os.path.join(d, "priv.kvs"), 0o600)
    m = Mount(d, "allow_other", "sep=/")
    try:
        pub = m.path("segments", "pub.kvs", "p")
        priv = m.path("view", "s")
        check(os.stat(pub).st_mode & 0o777 == 0o444, "pub key mode %o" % os.stat(pub).st_mode)
        check(os.stat(priv).st_mode & 0o777 == 0o400, "priv key mode %o" % os.stat(priv).st_mode)
        check(os.stat(m.path("segments", "priv.kvs")).st_mode & 0o777 == 0o500,
              "priv dir mode")
        check(os.stat(m.path("view")).st_mode & 0o777 == 0o500, "view/ mode (a 0600 segment)")
        check(read(priv) == b"secret", "root reads the private key")
        check(as_nobody(lambda: read(pub) == b"public") is None, "nobody reads pub.kvs's key")
        check(as_nobody(lambda: read(m.path("segments", "priv.kvs", "s"))) == errno.EACCES,
              "nobody cannot read priv.kvs's key")
        check(as_nobody(lambda: os.listdir(m.path("segments", "priv.kvs"))) == errno.EACCES,
              "nobody cannot list priv.kvs")
        check(as_nobody(lambda: os.listdir(m.path("view"))) == errno.EACCES,
              "nobody cannot list view/ while a live segment is private")
        check(as_nobody(lambda: sorted(os.listdir(m.path("segments", "pub.kvs"))) == [b"p", b"s"])
              is None, "nobody lists pub.kvs")
    finally:
        m.close()
    # once the private segment is readable by all, so is view/
    os.chmod(os.path.join(d, "priv.kvs"), 0o644)
    m = Mount(d, "allow_other")
    try:
        check(as_nobody(lambda: read(m.path("view", "s")) == b"secret") is None,
              "nobody reads view/s of a 0644 segment")
    finally:
        m.close()


def main():
    if "soak" in sys.argv[3:]:  # its own meson test: two minutes
        return T.run_tests([test_soak], "segfs-soak-", [])
    return T.run_tests([test_merge_damaged_cli, test_merge_damaged_control,
                        test_listing_loop, test_damaged_listings,
                        test_not_regular, test_retired_without_drop,
                        test_retire_after, test_permissions],
                       "segfs-integrity-", sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
