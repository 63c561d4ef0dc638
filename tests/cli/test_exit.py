#!/usr/bin/env python3
"""test_exit.py — kvseg's exit status for every case docs/USAGE.md's
"Exit status" table names, one row each.

Usage: test_exit.py PATH/TO/kvseg   (meson: suite 'cli')

Each row runs kvseg once and requires the documented status and a
substring of its one message: on stderr ("kvseg VERB: ...") for a
failure, on stdout for success. The rows were written from the table,
not from kvseg's code. "No permission" rows run as nobody when this
script is root (root reads any file whatever its mode), with a file of
mode 0600; as another user, with a file of mode 000.
"""

import os
import shutil
import subprocess
import sys
import tempfile

KVSEG = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
NOBODY = 65534
failures = 0
rows = 0


def run(args, stdin=b"", stdout_to=None, as_nobody=False):
    """stdin: bytes, or a path to open as the standard input."""
    cmd = [KVSEG] + [str(a) for a in args]
    if as_nobody and os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
               "--clear-groups"] + cmd
    out = open(stdout_to, "ab") if stdout_to else subprocess.PIPE
    inp = open(stdin, "rb") if isinstance(stdin, str) else None
    try:
        p = subprocess.run(cmd, input=None if inp else stdin, stdin=inp,
                           stdout=out, stderr=subprocess.PIPE, timeout=60)
    finally:
        if stdout_to:
            out.close()
        if inp:
            inp.close()
    return p.returncode, p.stdout or b"", p.stderr.decode("utf-8", "replace")


def row(status, what, args, needle, stdin=b"", stdout_to=None,
        as_nobody=False):
    global failures, rows
    rows += 1
    rc, out, err = run(args, stdin, stdout_to, as_nobody)
    if status == 0:
        ok = rc == 0 and needle.encode() in out
    else:
        lines = err.splitlines()
        ok = (rc == status and lines and lines[0].startswith("kvseg") and
              needle in lines[0] and
              (len(lines) == 1 or lines[1].startswith("Try 'kvseg")))
    if not ok:
        failures += 1
        print("FAIL: %s: exit %d, wanted %d with %r\n  kvseg %s\n"
              "  stderr: %s  stdout: %r" % (what, rc, status, needle,
                                           " ".join(map(str, args)),
                                           err, out[:200]), flush=True)


def main():
    if not KVSEG or not os.access(KVSEG, os.X_OK):
        sys.exit("usage: test_exit.py PATH/TO/kvseg")
    tmp = tempfile.mkdtemp(prefix="kvseg-exit-")
    try:
        os.chmod(tmp, 0o755)  # nobody may look in
        cases(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d rows, %d failures" % (rows, failures))
    sys.exit(1 if failures else 0)


def cases(tmp):
    def p(name):
        return os.path.join(tmp, name)

    def fresh(name):
        """A path where nothing is yet (the rows must not leave files)."""
        if os.path.lexists(p(name)):
            os.unlink(p(name))
        return p(name)

    # Fixtures: a good segment with a tombstone, a damaged one, a file
    # that is not a segment, a catalog, a damaged catalog, a FIFO, a
    # directory, an unreadable segment.
    good = p("good.seg")
    rc, _, err = run(["build", good], b"a\t1\nb\n")
    assert rc == 0, err
    data = bytearray(open(good, "rb").read())
    data[20] ^= 0xff  # a header byte: the header CRC fails
    damaged = p("damaged.seg")
    open(damaged, "wb").write(data)
    notseg = p("text.txt")
    open(notseg, "w").write("hello\n")
    db = p("db")
    os.mkdir(db)
    shutil.copy(good, os.path.join(db, "one.seg"))
    rc, _, err = run(["catalog", db, "init"])
    assert rc == 0, err
    baddb = p("baddb")
    os.mkdir(baddb)
    open(os.path.join(baddb, "CATALOG"), "wb").write(b"garbage\n")
    fifo = p("fifo")
    os.mkfifo(fifo)
    adir = p("adir")
    os.mkdir(adir)
    secret = p("secret.seg")
    shutil.copy(good, secret)
    root = os.geteuid() == 0
    os.chmod(secret, 0o600 if root else 0)
    locked = p("locked")  # a directory nobody (or we) cannot write
    os.mkdir(locked, 0o755 if root else 0o555)
    shutil.copy(good, os.path.join(locked, "one.seg"))
    hard = p("hard.seg")
    os.link(good, hard)
    soft = p("soft.seg")
    os.symlink("good.seg", soft)
    missing = p("missing.seg")
    out = fresh("out.seg")

    # ---- 0: success, the version ------------------------------------
    row(0, "--version", ["--version"], "kvseg ")
    row(0, "-V", ["-V"], "kvseg ")
    row(0, "--help", ["--help"], "Usage: kvseg")
    row(0, "dump", ["dump", good], "a\t1\n")
    row(0, "get", ["get", good, "a"], "1")
    row(0, "catalog get", ["catalog", db, "get", "a"], "1")
    row(0, "catalog scan", ["catalog", db, "scan"], "a\t1\n")

    # ---- 1: get, the key absent or deleted --------------------------
    row(1, "get of an absent key", ["get", good, "zz"], "not found")
    row(1, "get of a deleted key", ["get", good, "b"], "deleted")
    row(1, "catalog get of an absent key", ["catalog", db, "get", "zz"],
        "not found")
    row(1, "catalog get of a deleted key", ["catalog", db, "get", "a", "b"],
        "deleted")

    # ---- 2: usage ----------------------------------------------------
    row(2, "no verb", [], "no verb given")
    row(2, "unknown verb", ["frobnicate"], "unknown verb 'frobnicate'")
    for verb, rest in (("build", [out]), ("get", [good, "a"]),
                       ("scan", [good]), ("dump", [good]),
                       ("verify", [good]), ("stat", [good]),
                       ("merge", ["-o", out, good]),
                       ("catalog", [db, "list"])):
        row(2, verb + ": unknown option", [verb] + rest + ["--bogus"],
            "unknown option '--bogus'")
    for what, args, needle in (
            ("build: no OUT", ["build"], "no output file given"),
            ("get: no KEY", ["get", good], "needs SEG and KEY"),
            ("scan: no SEG", ["scan"], "no segment given"),
            ("dump: no SEG", ["dump"], "no segment given"),
            ("verify: no SEG", ["verify"], "no segment given"),
            ("stat: no SEG", ["stat"], "no segment given"),
            ("merge: no OUT", ["merge", good], "no output file given"),
            ("merge: no IN", ["merge", "-o", out], "no input segment"),
            ("catalog: no DIR", ["catalog"], "no directory given"),
            ("catalog: no action", ["catalog", db], "no action given"),
            ("catalog add: no SEG", ["catalog", db, "add"],
             "no segment given"),
            ("get: an extra operand", ["get", good, "a", "b"],
             "too many operands"),
            ("scan: an extra operand", ["scan", good, good],
             "one segment only"),
            ("build: an extra operand", ["build", out, out + "2"], ""),
            ("catalog list: an operand", ["catalog", db, "list", "x"],
             "takes no operands"),
            ("catalog get: no KEY", ["catalog", db, "get"], "no key given"),
            ("catalog get: a malformed KEY", ["catalog", db, "get", "a\\q"],
             "unknown escape"),
            ("catalog scan: an operand", ["catalog", db, "scan", "x"],
             "takes no operands"),
            ("catalog list --tombstones", ["catalog", db, "list",
                                           "--tombstones"],
             "for scan only"),
            ("catalog scan --quiet", ["catalog", db, "scan", "-q"],
             "not for scan"),
            ("build --restart 0", ["build", "--restart", "0", out],
             "--restart"),
            ("scan --limit x", ["scan", good, "--limit", "x"],
             "not a decimal number"),
            ("build: an unknown code",
             ["build", "--profile", "bit", "--codes", "eg64,deg0,g7", out],
             "is not a code"),
            ("scan --format xml", ["scan", good, "--format", "xml"],
             "is not tsv or jsonl"),
            ("build --profile nibble", ["build", "--profile", "nibble", out],
             "is not byte or bit"),
            ("build --memory 1", ["build", "--memory", "1", out], "--memory"),
            ("merge --drop-tombstones alone",
             ["merge", "--drop-tombstones", "-o", out, good],
             "needs --includes-oldest"),
            ("get: a malformed KEY", ["get", good, "a\\q"],
             "unknown escape"),
            ("build: OUT a directory", ["build", adir], "is a directory"),
            ("merge: OUT a directory", ["merge", "--force", "-o", adir, good],
             "is a directory"),
            ("merge: OUT an input", ["merge", "-o", good, good],
             "is also the input"),
            ("merge: OUT an input, spelled otherwise",
             ["merge", "-o", os.path.join(tmp, ".", "good.seg"), good],
             "is also the input"),
            ("merge: OUT a hard link to an input", ["merge", "-o", hard, good],
             "is also the input"),
            ("merge: OUT a symbolic link to an input",
             ["merge", "-o", soft, good], "is also the input"),
            ("merge: OUT exists, no --force",
             ["merge", "-o", notseg, good], "--force replaces it"),
    ):
        row(2, what, args, needle)
    row(2, "build: OUT its standard input", ["build", good],
        "is also the standard input", stdin=good)
    row(2, "build: OUT a link to its standard input", ["build", hard],
        "is also the standard input", stdin=good)
    # Standard output into a file the verb reads (">>": the file is not
    # emptied by the shell, and must stay as it is).
    before = open(good, "rb").read()
    for verb, args in (("dump", [good]), ("scan", [good]),
                       ("get", [good, "a"]), ("stat", [good]),
                       ("verify", [notseg, good]),
                       ("merge", ["-o", fresh("m.seg"), good])):
        row(2, verb + ": stdout is an input", [verb] + args,
            "standard output is the input", stdout_to=hard)
    for action in (["list"], ["init"], ["merge"], ["add", "one.seg"],
                   ["get", "a"], ["scan"]):
        row(2, "catalog %s: stdout a file of DIR" % action[0],
            ["catalog", db] + action, "standard output is",
            stdout_to=os.path.join(db, "one.seg"))
    if open(good, "rb").read() != before:
        rows_fail("a refused verb changed its input")

    # ---- 3: bad data ---------------------------------------------------
    for fmt, data, needle in (
            ("tsv", b"a\t1\tx\n", "line 1: a second TAB"),
            ("tsv", b"a\t1\nb\\q\t1\n", "line 2: key: unknown escape"),
            ("nul", b"a\x001", "record 1"),
            ("jsonl", b'{"key": "a", "value": \n', "line 1: column"),
            ("jsonl", b'{"key":"a","value":"1","key":"b"}\n',
             "line 1: column 28: duplicate"),
            ("jsonl", b'{"key":"a","value":1}\n', "'value' must be a string"),
            ("jsonl", b'{"key":"a","tombstone":1}\n', "true or false"),
            ("jsonl", b'{"key":"a","value":"\xc3("}\n', "UTF-8"),
            ("jsonl", b'{"k\\u0000":"a","value":""}\n', "NUL"),
            ("jsonl", b'{"key":"a","value":"1"}\n[]\n',
             "line 2: not a JSON object"),
            ("tsv", b"a\t1\na\t2\n", "lines 1 and 2"),
    ):
        row(3, "build: bad %s input %r" % (fmt, data),
            ["build", "--input", fmt, fresh("bad.seg")], needle, stdin=data)
    row(3, "build: a tombstone in raw framing",
        ["build", "--framing", "raw", fresh("bad.seg")], "tombstone",
        stdin=b"a\t1\nb\n")
    for verb, args in (("verify", [damaged]), ("dump", [damaged]),
                       ("scan", [damaged]), ("stat", [damaged]),
                       ("get", [damaged, "a"]),
                       ("merge", ["-o", fresh("m.seg"), damaged])):
        row(3, verb + ": a damaged segment", [verb] + args,
            damaged + ": header CRC32C mismatch")
    row(3, "verify: not a segment", ["verify", notseg], "header")
    row(3, "dump: not a segment", ["dump", notseg], "header")
    row(3, "merge: raw output, an input with tombstones",
        ["merge", "--framing", "raw", "-o", fresh("m.seg"), good],
        "raw framing has none")
    for action in (["list"], ["get", "a"], ["scan"]):
        row(3, "catalog %s: a damaged catalog" % action[0],
            ["catalog", baddb] + action, "CATALOG")

    # ---- 4: I/O and system ---------------------------------------------
    for verb, args in (("get", [missing, "a"]), ("scan", [missing]),
                       ("dump", [missing]), ("verify", [missing]),
                       ("stat", [missing]),
                       ("merge", ["-o", fresh("m.seg"), missing]),
                       ("catalog", [db, "add", "missing.seg"])):
        row(4, verb + ": a missing file", [verb] + args,
            "No such file or directory")
    row(4, "build: OUT in a missing directory",
        ["build", p("no/such/x.seg")], "No such file or directory",
        stdin=b"a\t1\n")
    for verb, args in (("get", [secret, "a"]), ("scan", [secret]),
                       ("dump", [secret]), ("verify", [secret]),
                       ("stat", [secret]),
                       ("merge", ["-o", p("locked/m.seg"), secret])):
        row(4, verb + ": no permission", [verb] + args,
            "Permission denied", as_nobody=True)
    row(4, "build: no permission to write OUT's directory",
        ["build", p("locked/x.seg")], "Permission denied",
        stdin=b"a\t1\n", as_nobody=True)
    row(4, "catalog init: no permission to write DIR",
        ["catalog", locked, "init"], "CATALOG.lock", as_nobody=True)
    for verb, args in (("stat", [adir]), ("dump", [adir]),
                       ("verify", [fifo]), ("scan", [fifo]),
                       ("get", [fifo, "a"]),
                       ("merge", ["-o", fresh("m.seg"), fifo])):
        row(4, verb + ": not a regular file", [verb] + args,
            "not a regular file")
    row(4, "build: OUT a FIFO", ["build", fifo], "is a FIFO",
        stdin=b"a\t1\n")
    for name in ("out.seg", "m.seg", "bad.seg"):
        if os.path.lexists(p(name)):
            rows_fail("a failed row left " + name)
    if sorted(os.listdir(locked)) != ["one.seg"]:
        rows_fail("a refused write left a file in %s: %r"
                  % (locked, os.listdir(locked)))


def rows_fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg)


if __name__ == "__main__":
    main()
