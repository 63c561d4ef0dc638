#!/usr/bin/env python3
"""segfs's control/merge grammar and control/status texts, end to end:
each request below is written to a real mount, and what is checked is the
write's errno, the request's line in control/status (parsed as JSON) and
that the directory and its catalog did not change (docs/USAGE.md,
"Control files"). Also: two segfs mounts of one directory merging the same
inputs, where the losing job must name the catalog change as its cause.

The mounts and helpers are test_segfs.py's (imported, not copied).

Usage: test_control.py SEGFS KVSEG [TEST...]
Skips (exit 77) only where /dev/fuse is missing.
"""
import errno
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import test_segfs as T  # noqa: E402  (reads SEGFS and KVSEG from sys.argv)

check = T.check


def rejected(m, d, line, want, words, what=None):
    """Writes line; it must fail with errno want, leave a `rejected` line
    whose error holds each of words, and change nothing in d."""
    what = what or repr(line)
    before = T.dir_state(d)
    n = len(T.status(m))
    got = T.request(m, line)
    check(got == want, "%s: errno %s, want %s" % (
        what, errno.errorcode.get(got, got), errno.errorcode[want]))
    st = T.status(m)
    last = st[-1] if st else {}
    check(len(st) == n + 1 and last.get("state") == "rejected" and
          last.get("output") is None and
          all(w in (last.get("error") or "") for w in words),
          "%s: the reason in control/status names %r: %r" % (what, words, last))
    check(T.dir_state(d) == before, "%s: nothing changed" % what)
    return last


def accepted(m, line, what=None):
    """Writes line; it must be accepted and its job end done."""
    what = what or repr(line)
    got = T.request(m, line)
    check(got == 0, "%s: accepted (errno %s)" % (what, errno.errorcode.get(got, got)))
    if got == 0:
        w = T.wait(m, T.status(m)[-1]["id"])
        check(w["state"] == "done", "%s: the job is done: %r" % (what, w))
        return w
    return None


def test_control_bytes(tmp):
    """Any byte below 0x20 but the newline that ends a request, and DEL,
    fails the write with EINVAL, naming the byte; nothing is merged. (A CR
    or a tab used to pass as a separator: `merge all\\r\\n` merged.)"""
    d = os.path.join(tmp, "ctlbytes")
    os.mkdir(d)
    T.stack(d, 3, 300, random.Random(31))
    m = T.Mount(d)
    try:
        for line, byte in [
                (b"merge all\r\n", "0x0d"),
                (b"merge\tall\n", "0x09"),
                (b"merge all\x7f\n", "0x7f"),
                (b"merge all\x0b\n", "0x0b"),
                (b"merge all\x1b\n", "0x1b"),
                (b"merge\x01all\n", "0x01"),
                (b"cancel 1\r\n", "0x0d"),
                (b"merge all \x00\n", "0x00"),
                (b"merge all\r", "0x0d")]:
            rejected(m, d, line, errno.EINVAL, [byte])
        # one bad line in a write of several: nothing of it is queued
        rejected(m, d, b"merge s0.seg\nmerge s1.seg\r\n", errno.EINVAL, ["0x0d"])
        check(T.listdir(m.path("segments")) == [b"s0.seg", b"s1.seg", b"s2.seg"],
              "no merge ran")
        accepted(m, b"merge all\n", "after them, a good request")
    finally:
        m.close()
    T.check_clean(d, "after control bytes")


def test_grammar(tmp):
    """merge = "merge" SP ("all" / NAME *(SP NAME)) *(SP OPTION), words
    separated by one space, numbers plain decimal: everything else is
    EINVAL, with nothing changed."""
    d = os.path.join(tmp, "grammar")
    os.mkdir(d)
    T.stack(d, 3, 300, random.Random(32))
    m = T.Mount(d)
    try:
        for line, words in [
                (b"merge all all\n", ["'all' is given twice"]),
                (b"merge all restart=+5\n", ["restart=+5", "1 to 65536"]),
                (b"merge all restart=015\n", ["restart=015", "1 to 65536"]),
                (b"merge all restart=00\n", ["restart=00"]),
                (b"merge all restart= 5\n", ["restart=: a number from 1 to 65536"]),
                (b"merge  all\n", ["extra space at offset 6"]),
                (b" merge all\n", ["extra space at offset 0"]),
                (b"merge all \n", ["extra space at offset 9"]),
                (b"merge s0.seg  s1.seg\n", ["extra space"]),
                (b"merge restart=4 all\n", ["'all' after an option"]),
                (b"merge restart=4 s0.seg\n", ["'s0.seg' after an option"]),
                (b"merge s0.seg restart=4 s1.seg\n", ["'s1.seg' after an option"]),
                (b"merge all restart=4 all\n", ["'all' is given twice"]),
                (b"merge restart=4\n", ["merge what"]),
                (b"cancel +1\n", ["not a job id"]),
                (b"cancel 01\n", ["not a job id"]),
                (b"cancel 1 2\n", ["one job id"]),
                (b"cancel 99999999999999999999\n", ["not a job id"])]:
            rejected(m, d, line, errno.EINVAL, words)
        check(T.listdir(m.path("segments")) == [b"s0.seg", b"s1.seg", b"s2.seg"],
              "no merge ran")
        # the grammar's own forms are accepted
        w = accepted(m, b"merge s1.seg s0.seg restart=9 name=a.seg\n")
        check(w and w["inputs"] == ["s0.seg", "s1.seg"] and w["output"] == "a.seg",
              "names in any order, then options: %r" % w)
        check(b"a.seg 2 typed-byte 9 " in T.read(m.path("control", "catalog")),
              "restart=9 was taken")
        accepted(m, b"merge all tombstones=keep restart=65536\n")
        rejected(m, d, b"cancel 0\n", errno.ENOENT, ["no job 0"])
    finally:
        m.close()
    T.check_clean(d, "after the grammar")


def test_unknown_options(tmp):
    """A word that looks like an option but is none (KEY=VALUE with an
    unknown KEY, or an option's key without '=') is EINVAL naming it, not
    ENOENT; it is a segment's name only before the options, and only when
    a live segment has exactly that name."""
    d = os.path.join(tmp, "unknownopt")
    os.mkdir(d)
    T.stack(d, 2, 300, random.Random(33))
    T.build(os.path.join(d, "k=v"), [(b"x", 8, b"1")], seq=3)
    T.build(os.path.join(d, "restart"), [(b"y", 8, b"2")], seq=4)
    m = T.Mount(d)
    try:
        check(T.listdir(m.path("segments")) ==
              [b"s0.seg", b"s1.seg", b"k=v", b"restart"], "the segments")
        for line, words in [
                (b"merge all foo=bar\n", ["unknown option 'foo=bar'"]),
                (b"merge all =1\n", ["unknown option '=1'"]),
                (b"merge all restart\n", ["option restart without a value"]),
                (b"merge all name\n", ["option name without a value"]),
                (b"merge s0.seg foo=bar\n", ["unknown option 'foo=bar'"]),
                (b"merge foo=bar\n", ["unknown option 'foo=bar'"]),
                (b"merge s1.seg restart=3 k=v\n", ["unknown option 'k=v'"]),
                (b"merge all k=v\n", ["unknown option 'k=v'"]),
                (b"merge k=v restart=3 restart\n", ["option restart without a value"]),
                (b"merge all Restart=3\n", ["unknown option 'Restart=3'"])]:
            rejected(m, d, line, errno.EINVAL, words)
        rejected(m, d, b"merge nosuch\n", errno.ENOENT,
                 ["no live segment is called 'nosuch'"])
        # live segments of those names are merged by name
        w = accepted(m, b"merge restart k=v restart=4\n")
        check(w and w["inputs"] == ["k=v", "restart"], "by name: %r" % w)
    finally:
        m.close()
    T.check_clean(d, "after unknown options")


def test_status_escapes(tmp):
    """control/status is JSON lines: every byte of a request is the
    character of that number, so that any bytes (NUL among them; it used
    to come out as '?') are a valid string, and the lines are ASCII
    (escapes for the controls and for bytes beyond ASCII; DEL as itself,
    which JSON allows and jansson writes so)."""
    d = os.path.join(tmp, "escapes")
    os.mkdir(d)
    T.stack(d, 2, 300, random.Random(34))
    m = T.Mount(d)
    try:
        line = b"merge \x00all\x01\x1f\x7f\"\\\xff"
        check(T.request(m, line + b"\n") == errno.EINVAL, "rejected")
        raw = T.read(m.path("control", "status"))
        check(raw.count(b"\n") == 1 and raw.endswith(b"\n"), "one line: %r" % raw)
        check(all(b < 0x80 for b in raw), "ASCII: %r" % raw)
        st = json.loads(raw)
        check(st["request"] == line.decode("latin-1"),
              "json.loads gives the request back: %r" % st["request"])
        check(st["state"] == "rejected" and "0x00" in st["error"], "why: %r" % st)
        # every control byte, each alone after a word
        for c in list(range(0x20)) + [0x7F]:
            if c == 0x0A:
                continue
            req = b"merge" + bytes([c])
            got = T.request(m, req)
            last = T.status(m)[-1]
            check(got == errno.EINVAL and last["request"] == req.decode("latin-1"),
                  "byte 0x%02x: %s %r" % (c, errno.errorcode.get(got, got), last))
        for l in T.read(m.path("control", "status")).splitlines():
            check(all(0x20 <= b < 0x80 for b in l), "no control byte: %r" % l)
            json.loads(l)
    finally:
        m.close()


def test_two_mounts(tmp):
    """Two segfs mounts of one directory merge the same inputs. B's merge
    is stopped (SIGSTOP) while it writes; A's merge of the same inputs
    publishes meanwhile, under the same default name; then B goes on and
    finds that name taken. B's job must say that the catalog changed
    (another process published generation 2), not that "a file appeared
    there"; A's output stays published, and nothing of B's is left."""
    for attempt in range(3):
        d = os.path.join(tmp, "twomounts%d" % attempt)
        os.mkdir(d)
        T.stack(d, 3, 200000, random.Random(35 + attempt))
        a = T.Mount(d)
        b = T.Mount(d)
        try:
            check(T.request(b, b"merge all\n") == 0, "B's merge")
            deadline = time.monotonic() + 60
            while (time.monotonic() < deadline and not any(
                    ".pub-" in x for x in os.listdir(d))):
                pass
            os.kill(b.proc.pid, signal.SIGSTOP)
            try:
                wa = cat = None
                if T.status(a) == [] and len(T.listdir(a.path("segments"))) == 3:
                    check(T.request(a, b"merge all\n") == 0, "A's merge")
                    wa = T.wait(a, 1)
                    cat = T.read(os.path.join(d, "CATALOG"))
            finally:
                os.kill(b.proc.pid, signal.SIGCONT)
            wb = T.wait(b, 1)
            if wa is None or wb["state"] == "done":
                # B published before it could be stopped: again
                continue
            check(wa["state"] == "done" and wa["output"] == "seg-3.kvs",
                  "A's merge is done: %r" % wa)
            err = wb["error"] or ""
            check(wb["state"] == "failed" and
                  "the catalog changed during the merge" in err and
                  "another process published generation 2" in err and
                  "appeared" not in err,
                  "B's merge names the catalog change: %r" % wb)
            deadline = time.time() + 5
            while time.time() < deadline and T.listdir(b.path("segments")) != [b"seg-3.kvs"]:
                time.sleep(0.02)
            check(T.listdir(b.path("segments")) == [b"seg-3.kvs"],
                  "B serves A's generation")
            check(T.read(os.path.join(d, "CATALOG")) == cat, "B changed no catalog")
        finally:
            a.close()
            b.close()
        names = T.check_clean(d, "after two mounts")
        check(names == {"seg-3.kvs"}, "A's output only: %r" % names)
        return
    check(False, "three merges of B ended before A could publish")


def test_tar(tmp):
    """`tar` of the whole mount (GNU tar stats each name, then opens it,
    and fails with "file changed as we read it" when the two disagree)
    exits 0, before and after a merge; the archive's view/ files hold
    each key's newest value (the oracle: the records the test wrote)."""
    import subprocess
    import tarfile
    d = os.path.join(tmp, "tar")
    os.mkdir(d)
    T.build(os.path.join(d, "a.seg"), [(b"k1", 16, b"old"), (b"k2", 16, b"two")], seq=1)
    T.build(os.path.join(d, "b.seg"), [(b"k1", 16, b"new"), (b"k3", 16, b"three")], seq=2)
    want = {"k1": b"new", "k2": b"two", "k3": b"three"}
    m = T.Mount(d)
    try:
        for when in ("before a merge", "after a merge"):
            for i in range(3):
                out = os.path.join(tmp, "m.tar")
                r = subprocess.run(["tar", "cf", out, "-C", m.mnt, "."],
                                   capture_output=True)
                check(r.returncode == 0, "tar %s: exit %d: %r" % (
                    when, r.returncode, r.stderr[-300:]))
                with tarfile.open(out) as tf:
                    got = {n[len("./view/"):]: tf.extractfile(n).read()
                           for n in tf.getnames()
                           if n.startswith("./view/") and n != "./view/"}
                check(got == want, "tar %s: view/ %r" % (when, got))
            if when == "before a merge":
                check(T.request(m, b"merge all\n") == 0, "merge")
                check(T.wait(m, 1)["state"] == "done", "merge done")
    finally:
        m.close()


def test_job_ids(tmp):
    """A writer learns its jobs' numbers by reading the descriptor it wrote
    to: one line per job its last write made. Two descriptors open at once
    each read their own, as a shell's `exec 3<>` idiom does; the oracle is
    control/status, where each number's line holds that request."""
    import subprocess
    d = os.path.join(tmp, "ids")
    os.mkdir(d)
    for i in range(6):
        T.build(os.path.join(d, "s%d.seg" % i), [(b"k%d" % i, 16, b"v")], seq=i + 1)
    m = T.Mount(d)
    try:
        path = m.path("control", "merge")
        a = os.open(path, os.O_RDWR)
        b = os.open(path, os.O_RDWR)
        try:
            check(os.read(a, 100) == b"", "a new descriptor reads nothing")
            os.write(a, b"merge s0.seg s1.seg\n")
            os.write(b, b"merge s2.seg s3.seg\nmerge s4.seg s5.seg\n")
            got_b = os.read(b, 100)
            got_a = os.read(a, 100)
            try:
                os.write(a, b"merge nosuch.seg\n")
                check(False, "a request naming no segment is refused")
            except OSError as e:
                check(e.errno == errno.ENOENT, "refused with ENOENT: %r" % e)
            check(os.read(a, 100) == b"", "a refused write adds no number")
        finally:
            os.close(a)
            os.close(b)
        st = {j["id"]: j for j in T.status(m)}
        ids_a = [int(x) for x in got_a.split()]
        ids_b = [int(x) for x in got_b.split()]
        check(got_a.endswith(b"\n") and len(ids_a) == 1 and
              st[ids_a[0]]["request"] == "merge s0.seg s1.seg",
              "a's number names its request: %r %r" % (got_a, st))
        check(len(ids_b) == 2 and
              [st[i]["request"] for i in ids_b] ==
              ["merge s2.seg s3.seg", "merge s4.seg s5.seg"],
              "b's numbers name its requests: %r" % got_b)
        for i in ids_a + ids_b:
            check(T.wait(m, i)["state"] == "done", "job %d done" % i)
        # the shell idiom of docs/USAGE.md
        r = subprocess.run(
            ["bash", "-c", 'exec 3<>"$1/control/merge" && '
             'echo "merge all" >&3 && read -r id <&3 && '
             'cat "$1/control/wait/$id"', "sh", m.mnt],
            capture_output=True)
        line = json.loads(r.stdout) if r.returncode == 0 else {}
        check(r.returncode == 0 and line.get("request") == "merge all" and
              line.get("state") == "done",
              "exec 3<>, echo, read, wait: %r %r" % (r.stdout, r.stderr))
    finally:
        m.close()


def main():
    return T.run_tests([test_control_bytes, test_grammar, test_unknown_options,
                        test_status_escapes, test_two_mounts, test_tar,
                        test_job_ids],
                       "segfs-ctl-", sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
