#!/usr/bin/env python3
"""segfs's messages once it has detached (issue 41, point 3): -o log=FILE
and syslog get the mount, the unmount, merge jobs, refused requests,
catalog changes, retired and skipped segments, and every EIO with its
segment and reason; repeated errors are limited; no line holds a raw
control byte. What each line must say comes from docs/USAGE.md
("Messages"), the expected values from what this script built and did.

The syslog test does not rely on a syslog daemon: it runs itself again
in a mount namespace of its own (unshare -m), with a tmpfs on /dev that
holds the device nodes segfs needs and the script's own AF_UNIX datagram
socket as /dev/log, so that segfs's syslog(3) is the real code path.

Usage: test_log.py SEGFS KVSEG [TEST ...]
Skips (exit 77) only where /dev/fuse is missing.
"""
import datetime
import errno
import os
import re
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_segfs as T  # noqa: E402  (reads SEGFS and KVSEG from argv)
from test_segfs import (KVSEG, SEGFS, Mount, build, check,  # noqa: E402
                        expect_errno, read, request, wait)

# USAGE.md: at most 10 messages a minute per segment, then a count
BURST = 10
# USAGE.md's line: TIME segfs[PID] LEVEL SEGDIR: MESSAGE
LINE = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) segfs\[(\d+)\] "
                  rb"(error|warning|notice|info) (/[^:]*): (.*)$")
# no environment of ours reaches the daemon's leak check: a fault abandons
# what the faulting request had allocated (fs/guard.h)
ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
SEGFS_ABS = os.path.abspath(SEGFS)  # the daemon is started elsewhere too


def damaged_dir(d, nkeys=20000):
    """a.seg (keys k000000.., seq 1) and b.seg (z1, seq 2) in d."""
    os.mkdir(d)
    build(os.path.join(d, "a.seg"),
          [(b"k%06d" % i, 56, b"v" * 50) for i in range(nkeys)], seq=1)
    build(os.path.join(d, "b.seg"), [(b"z1", 16, b"one")], seq=2)
    subprocess.run([KVSEG, "catalog", d, "init"], check=True,
                   capture_output=True)


class Daemon:
    """segfs mounted the default way: it detaches, and the command returns
    once the mount is ready."""

    def __init__(self, segdir, *opts, cwd=None, stderr=None):
        """stderr: a file for segfs's standard error (default: captured,
        and checked to be empty)."""
        self.mnt = os.path.realpath(os.path.join(
            os.path.dirname(segdir), os.path.basename(segdir) + ".mnt"))
        os.mkdir(self.mnt)
        args = [SEGFS_ABS, segdir, self.mnt]
        for o in opts:
            args += ["-o", o]
        if stderr is None:
            r = subprocess.run(args, capture_output=True, env=ENV, cwd=cwd,
                               timeout=120)
            check(r.stderr == b"", "nothing on the terminal: %r" % r.stderr)
        else:
            r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=stderr,
                               env=ENV, cwd=cwd, timeout=120)
        check(r.returncode == 0 and os.path.ismount(self.mnt),
              "segfs %s mounts detached: %d %r" % (opts, r.returncode, r.stderr))
        self.pid = self.find_pid(segdir)

    def find_pid(self, segdir):
        """The daemon: the segfs process whose arguments name our mount."""
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if args and args[0] == os.fsencode(SEGFS_ABS) and \
                    os.fsencode(self.mnt) in args:
                return int(p)
        check(False, "the daemon of %s is running" % self.mnt)
        return None

    def path(self, *parts):
        return os.path.join(os.fsencode(self.mnt), *[os.fsencode(p) for p in parts])

    def alive(self):
        """Is the daemon running (not gone, nor a zombie of its reaper)?"""
        try:
            with open("/proc/%d/cmdline" % self.pid, "rb") as f:
                return f.read() != b""
        except (OSError, TypeError):
            return False

    def close(self):
        """Unmounts, and waits (generously) for the daemon to end."""
        if os.path.ismount(self.mnt):
            for _ in range(100):
                if subprocess.run(["fusermount3", "-u", self.mnt],
                                  stderr=subprocess.DEVNULL).returncode == 0:
                    break
                time.sleep(0.05)
            else:
                subprocess.run(["fusermount3", "-u", "-z", self.mnt])
        deadline = time.time() + 60
        while self.pid and self.alive() and time.time() < deadline:
            time.sleep(0.02)
        check(not self.alive(), "the daemon ended after the unmount")
        os.rmdir(self.mnt)


def log_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    return data, data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


def parse(lines, segdir, pid, what):
    """Each line as (level, message), checking its form: an ISO-8601 UTC
    time close to now, the daemon's pid, SEGDIR."""
    out = []
    now = datetime.datetime.now(datetime.timezone.utc)
    for line in lines:
        m = LINE.match(line)
        check(m is not None, "%s: a line of the documented form: %r" % (what, line))
        if not m:
            continue
        t = datetime.datetime.strptime(m.group(1).decode(), "%Y-%m-%dT%H:%M:%S.%fZ")
        t = t.replace(tzinfo=datetime.timezone.utc)
        check(abs((now - t).total_seconds()) < 600,
              "%s: the time is UTC now: %r" % (what, line))
        check(int(m.group(2)) == pid, "%s: the daemon's pid %s: %r" % (what, pid, line))
        check(m.group(4) == os.fsencode(segdir), "%s: names SEGDIR: %r" % (what, line))
        out.append((m.group(3).decode(), m.group(5)))
    return out


def find(entries, *words, level=None):
    """The messages holding every word (bytes)."""
    return [msg for lv, msg in entries
            if all(w in msg for w in words) and (level is None or lv == level)]


def no_control_bytes(data, what):
    bad = [b for b in data if (b < 0x20 and b != 0x0A) or b == 0x7F]
    check(not bad, "%s: no control byte but the newlines: %r" % (what, bad[:10]))


def test_file_eio(tmp):
    """(a) Detached with -o log=FILE (a relative path: the daemon changes to
    /): a segment cut short under the mount gives the reader EIO, and FILE
    has a line naming the segment and the reason, and the key looked up."""
    d = os.path.join(tmp, "eio")
    damaged_dir(d)
    m = Daemon(d, "log=eio.log", cwd=tmp)  # relative to tmp
    logf = os.path.join(tmp, "eio.log")
    try:
        check(read(m.path("view", "k000001")) == b"v" * 50, "a key before the cut")
        os.truncate(os.path.join(d, "a.seg"), 300000)
        expect_errno(lambda: read(m.path("view", "k019999")), [errno.EIO],
                     "view/k019999 after the cut")
        expect_errno(lambda: read(m.path("segments", "a.seg", "k019998")), [errno.EIO],
                     "segments/a.seg/k019998 after the cut")
        check(read(m.path("view", "z1")) == b"one", "the other segment is served")
        # a name's bytes are escaped: UTF-8 and a backslash
        expect_errno(lambda: read(m.path("view", "k\u00e9\\n")), [errno.EIO],
                     "view/ of a key a.seg would decide")
    finally:
        m.close()
    data, lines = log_lines(logf)
    no_control_bytes(data, "eio.log")
    e = parse(lines, d, m.pid, "eio.log")
    check(find(e, b"mounted at " + os.fsencode(m.mnt), b"generation 1",
               b"2 segments", level="notice"),
          "the mount's line names the mount point, generation and segments: %r" % e[:1])
    check(find(e, b"a.seg", b"SIGBUS", b"shorter than when it was opened",
               level="error"), "the cut is named, with the reason: %r" % e)
    check(find(e, b"a.seg: EIO to a lookup of \"k019999\" in view/",
               b"SIGBUS", level="error"),
          "view/k019999's EIO: segment, key and reason: %r" % e)
    check(find(e, b"a.seg: EIO to a lookup of \"k019998\" in segments/a.seg/",
               b"damaged", level="error"),
          "segments/a.seg/k019998's EIO: %r" % e)
    check(find(e, b"a.seg: EIO to a lookup of \"k\\xc3\\xa9\\\\n\" in view/"),
          "the name's bytes escaped: %r" % e)
    check(not find(e, b"z1"), "nothing about the key served")
    check(e and e[-1][1] == b"unmounted from " + os.fsencode(m.mnt),
          "the last line is the unmount: %r" % e[-1:])


def test_jobs_and_refusals(tmp):
    """(c) A merge job's start and end, refused requests (escaped), a
    catalog generation another process published, retired segments and,
    with -o skip_bad, a skipped one."""
    d = os.path.join(tmp, "jobs")
    os.mkdir(d)
    build(os.path.join(d, "a.seg"), [(b"a%03d" % i, 32, b"x") for i in range(300)], seq=1)
    build(os.path.join(d, "b.seg"), [(b"b%03d" % i, 32, b"y") for i in range(200)], seq=2)
    subprocess.run([KVSEG, "catalog", d, "init"], check=True, capture_output=True)
    logf = os.path.join(tmp, "jobs.log")
    m = Daemon(d, "log=" + logf, "skip_bad")
    try:
        check(request(m, b"merge nosuch.seg\n") == errno.ENOENT, "an unknown segment")
        check(request(m, b"merge\x01 a\tb\xff\\x41\n") == errno.EINVAL,
              "control bytes")
        check(request(m, b"merge all\n") == 0, "merge all")
        job = wait(m, 3)
        check(job["state"] == "done", "the merge: %r" % job)
        out_bytes = os.path.getsize(os.path.join(d, "seg-2.kvs"))
        # another process adds a segment: segfs picks the generation up
        build(os.path.join(d, "c.seg"), [(b"c1", 16, b"z")], seq=3)
        subprocess.run([KVSEG, "catalog", d, "add", "c.seg"], check=True,
                       capture_output=True)
        deadline = time.time() + 60
        while time.time() < deadline and b"generation 3" not in open(logf, "rb").read():
            time.sleep(0.02)
        # ... and one that is bad by the time segfs opens it (stopped
        # meanwhile, so that it cannot open it before the damage)
        build(os.path.join(d, "e.seg"), [(b"e1", 16, b"z")], seq=4)
        os.kill(m.pid, 19)  # SIGSTOP
        try:
            subprocess.run([KVSEG, "catalog", d, "add", "e.seg"], check=True,
                           capture_output=True)
            with open(os.path.join(d, "e.seg"), "r+b") as f:
                f.write(b"XXXX")  # its magic
        finally:
            os.kill(m.pid, 18)  # SIGCONT
        deadline = time.time() + 60
        while time.time() < deadline and b"skipping" not in open(logf, "rb").read():
            time.sleep(0.02)
    finally:
        m.close()
    data, lines = log_lines(logf)
    no_control_bytes(data, "jobs.log")
    e = parse(lines, d, m.pid, "jobs.log")
    check(find(e, b"control/merge: refused \"merge nosuch.seg\" (ENOENT)",
               b"nosuch.seg", level="warning"),
          "the refused request, its errno and why: %r" % e)
    check(find(e, b"control/merge: refused \"merge\\x01 a\\x09b\\xff\\\\x41\" (EINVAL)",
               b"0x01", level="warning"),
          "the request's bytes escaped (a backslash too): %r" % e)
    check(find(e, b"job 3 started: \"merge all\", inputs a.seg b.seg, output seg-2.kvs",
               level="info"), "the job's start: %r" % e)
    done = find(e, b"job 3 done: \"merge all\", inputs a.seg b.seg, output seg-2.kvs",
                b"records 500 of 500", b"bytes out %d," % out_bytes, b"elapsed ",
                level="info")
    check(done, "the job's end: outcome, records, bytes: %r" % e)
    check(not done or b"error" not in done[0], "no error in a done job")
    for name in (b"a.seg", b"b.seg"):
        check(find(e, name + b" retired: catalog generation 2 no longer names it"),
              "%s retired: %r" % (name, e))
    check(find(e, b"serving catalog generation 3 (was 2), which another process "
               b"published: 2 segments", level="notice"),
          "the generation another process published: %r" % e)
    check(find(e, b"skipping bad segment", b"e.seg", level="warning"),
          "the skipped segment: %r" % e)


def test_rate_limit(tmp):
    """(d) 1000 reads of a key of a damaged segment: at most BURST lines
    about it, a line saying the rest are held back, and at exit their
    count; every read failed with EIO."""
    d = os.path.join(tmp, "limit")
    damaged_dir(d)
    logf = os.path.join(tmp, "limit.log")
    # one serving thread: under ThreadSanitizer, libfuse's -o mt loop
    # cancels its idle workers at unmount with pthread_cancel, which now
    # and then hangs in TSan's read interceptor (the daemon then never
    # ends); the reads here come from one reader anyway
    m = Daemon(d, "log=" + logf)
    eios = 0
    try:
        os.truncate(os.path.join(d, "a.seg"), 300000)
        p = m.path("segments", "a.seg", "k019998")
        expect_errno(lambda: read(p), [errno.EIO], "the first read")
        t0 = time.time()
        for _ in range(1000):
            try:
                read(p)
            except OSError as x:
                eios += x.errno == errno.EIO
        took = time.time() - t0
    finally:
        m.close()
    check(eios == 1000, "every read failed with EIO: %d" % eios)
    data, lines = log_lines(logf)
    e = parse(lines, d, m.pid, "limit.log")
    shown = find(e, b"a.seg: EIO to ")
    held = find(e, b"a.seg: %d messages in" % BURST, b"held back")
    counted = [int(re.search(rb"a\.seg: (\d+) more messages like the above were "
                             rb"held back", msg).group(1))
               for msg in find(e, b"more messages like the above were held back")]
    print("  1000 reads in %.2f s: %d lines in all, %d EIO lines, held back %r"
          % (took, len(lines), len(shown), counted))
    if took < 55:  # one window (60 s): BURST lines exactly
        check(len(shown) == BURST, "%d EIO lines, want %d" % (len(shown), BURST))
        check(len(held) == 1, "one line says the rest are held back: %r" % held)
        check(len(counted) == 1 and counted[0] + len(shown) >= 1001,
              "the count of those held back: %r" % counted)
    check(len(lines) < 20 + 12 * (int(took) // 60 + 1),
          "the log stays small: %d lines" % len(lines))


def test_foreground(tmp):
    """-f keeps stderr, and -o log=FILE gets the same messages; a FILE that
    cannot be opened refuses the mount (exit 1, naming it)."""
    d = os.path.join(tmp, "fg")
    damaged_dir(d, 100)
    logf = os.path.join(tmp, "fg.log")
    m = Mount(d, "log=" + logf)
    m.close()
    err = m.stderr()
    check("segfs: mounted at " + m.mnt in err and "segfs: unmounted from " + m.mnt in err,
          "-f: the mount and unmount on stderr: %r" % err)
    data, lines = log_lines(logf)
    e = parse(lines, d, m.proc.pid, "fg.log")
    check(find(e, b"mounted at " + os.fsencode(m.mnt)) and
          find(e, b"unmounted from " + os.fsencode(m.mnt)),
          "-f -o log=FILE: the file too: %r" % e)
    mnt = os.path.join(tmp, "fg.mnt")
    os.mkdir(mnt)
    bad = os.path.join(tmp, "no-such-dir", "x.log")
    r = subprocess.run([SEGFS, d, mnt, "-o", "log=" + bad], capture_output=True,
                       timeout=120)
    check(r.returncode == 1 and bad.encode() in r.stderr and not os.path.ismount(mnt),
          "an unusable log file refuses the mount: %d %r" % (r.returncode, r.stderr))
    os.rmdir(mnt)


def test_stderr(tmp):
    """-o log=stderr: the standard error segfs was started with keeps the
    messages once it has detached, as lines of the file's form."""
    d = os.path.join(tmp, "stderr")
    damaged_dir(d, 100)
    errf = os.path.join(tmp, "stderr.txt")
    with open(errf, "wb") as f:
        m = Daemon(d, "log=stderr", stderr=f)
    try:
        check(request(m, b"merge \x7f\n") == errno.EINVAL, "a refused request")
    finally:
        m.close()
    data, lines = log_lines(errf)
    no_control_bytes(data, "stderr")
    e = parse(lines, d, m.pid, "stderr")
    check(find(e, b"mounted at " + os.fsencode(m.mnt), b"messages to stderr") and
          find(e, b"control/merge: refused \"merge \\x7f\" (EINVAL)") and
          find(e, b"unmounted from " + os.fsencode(m.mnt)),
          "the mount, the refusal and the unmount: %r" % e)


# ---- syslog, in a mount namespace of our own ------------------------------------

def test_syslog(tmp):
    """(b) Detached without -o log: messages go to syslog(3), /dev/log,
    as LOG_DAEMON with ident segfs and the daemon's pid, naming SEGDIR."""
    r = subprocess.run(["unshare", "-m", "--", sys.executable,
                        os.path.abspath(__file__), SEGFS_ABS,
                        os.path.abspath(KVSEG),
                        "--in-namespace", tmp],
                       capture_output=True, timeout=600)
    out = r.stdout.decode(errors="replace")
    sys.stdout.write(out)
    check(r.returncode == 0, "the test in its namespace: exit %d, %s" % (
        r.returncode, r.stderr.decode(errors="replace")[-2000:]))


def own_dev(tmp):
    """/dev as a tmpfs with the nodes segfs uses (in this namespace only);
    returns the socket bound at /dev/log."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    nodes = {}
    for n in ("null", "zero", "full", "random", "urandom", "fuse", "tty"):
        try:
            st = os.stat("/dev/" + n)
        except OSError:
            continue
        nodes[n] = st
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "segfs-test-dev",
                    "/dev"], check=True)
    for n, st in nodes.items():
        os.mknod("/dev/" + n, stat.S_IMODE(st.st_mode) | stat.S_IFCHR, st.st_rdev)
        os.chmod("/dev/" + n, stat.S_IMODE(st.st_mode))
    os.symlink("/proc/self/fd", "/dev/fd")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("/dev/log")
    os.chmod("/dev/log", 0o666)
    return s


def syslog_in_namespace(tmp):
    sock = own_dev(tmp)
    d = os.path.join(tmp, "syslog")
    damaged_dir(d)
    m = Daemon(d)
    try:
        check(read(m.path("view", "k000001")) == b"v" * 50, "a key before the cut")
        os.truncate(os.path.join(d, "a.seg"), 300000)
        expect_errno(lambda: read(m.path("view", "k019999")), [errno.EIO],
                     "view/k019999 after the cut")
        check(request(m, b"merge bad\x07name\n") == errno.EINVAL, "a refused request")
    finally:
        m.close()
    got = []
    sock.settimeout(0.2)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            got.append(sock.recv(65536))
        except socket.timeout:
            if any(b"unmounted from" in g for g in got):
                break
    # <PRI>TIMESTAMP segfs[PID]: SEGDIR: MESSAGE (glibc's syslog(3) form)
    form = re.compile(rb"^<(\d+)>.*? segfs\[(\d+)\]: (/[^:]*): (.*)$", re.S)
    msgs = []
    for g in got:
        x = form.match(g)
        check(x is not None, "a syslog datagram of segfs: %r" % g)
        if not x:
            continue
        pri = int(x.group(1))
        check(pri >> 3 == 3, "facility LOG_DAEMON: %r" % g)
        check(int(x.group(2)) == m.pid, "the daemon's pid %s: %r" % (m.pid, g))
        check(x.group(3) == os.fsencode(d), "names SEGDIR: %r" % g)
        check(b"\n" not in x.group(4).rstrip(b"\n"), "one line: %r" % g)
        msgs.append((pri & 7, x.group(4).rstrip(b"\n")))
    print("  %d syslog datagrams" % len(msgs))
    has = lambda sev, *w: [t for s, t in msgs if s == sev and all(x in t for x in w)]
    check(has(5, b"mounted at " + os.fsencode(m.mnt), b"generation 1"),
          "the mount, at LOG_NOTICE: %r" % msgs)
    check(has(3, b"a.seg: EIO to a lookup of \"k019999\" in view/", b"SIGBUS",
              b"shorter than when it was opened"),
          "the EIO, at LOG_ERR, naming the segment and the reason: %r" % msgs)
    check(has(4, b"control/merge: refused \"merge bad\\x07name\" (EINVAL)"),
          "the refused request, escaped, at LOG_WARNING: %r" % msgs)
    check(has(5, b"unmounted from " + os.fsencode(m.mnt)), "the unmount: %r" % msgs)


def main():
    if sys.argv[3:4] == ["--in-namespace"]:
        syslog_in_namespace(sys.argv[4])
        return 1 if T.failures else 0
    return T.run_tests([test_file_eio, test_jobs_and_refusals, test_rate_limit,
                        test_foreground, test_stderr, test_syslog],
                       "segfs-log-", sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
