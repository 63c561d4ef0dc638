#!/usr/bin/env python3
"""One merge request, two programs, one output (issue 42): the same request
over the same catalog, run by `kvseg catalog DIR merge` on one copy of a
directory and written to `control/merge` of segfs mounted on another copy,
must give the same output name and a byte-identical output file, since
both ask the core's planner (kvseg/merge_plan.h) what it means. The stack
mixes all four modes, restart intervals and bit keys that are not whole
bytes, so that the defaults (docs/USAGE.md, kvseg "merge") are exercised;
the oracle is each program against the other, and `kvseg verify` and
`kvseg stat` against the documented rule.

The mounts and helpers are test_segfs.py's (imported, not copied).

Usage: test_merge_same.py SEGFS KVSEG [TEST...]
Skips (exit 77) only where /dev/fuse is missing.
"""
import filecmp
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import test_segfs as T  # noqa: E402  (reads SEGFS and KVSEG from sys.argv)

check = T.check

# (profile, framing, restart, bit keys?) of s0.seg (oldest) .. s4.seg
STACK = [("byte", "typed", None, False),
         ("bit", "typed", 8, True),
         ("byte", "raw", 4, False),
         ("bit", "raw", 5, False),
         ("byte", "raw", None, False)]

# control/merge's options and kvseg catalog merge's
OPTIONS = {"profile": "--profile", "framing": "--framing",
           "restart": "--restart"}

REQUESTS = [
    "merge all",                              # bit typed: b and s0's tombstones
    "merge s2.seg s3.seg",                    # bit raw: every input raw
    "merge s4.seg s3.seg restart=7",          # any order; K given
    "merge s3.seg s4.seg s2.seg framing=typed",
    "merge s0.seg s1.seg tombstones=drop",    # a strong delete
    "merge all framing=raw tombstones=drop",
    "merge s4.seg",                           # byte raw, one input
    "merge s0.seg s1.seg s2.seg profile=bit",
]


def make_stack(d, rng):
    os.makedirs(d)
    keys = [b"k%05d" % i for i in range(300)]
    for i, (profile, framing, restart, bitkeys) in enumerate(STACK):
        recs = {}
        for k in rng.sample(keys, 120):
            bits = len(k) * 8
            if bitkeys and rng.random() < 0.5:
                bits -= rng.randint(1, 7)  # a key of whole bits, not bytes
                k = k[:-1] + bytes([k[-1] & (0xFF << (8 - bits % 8)) & 0xFF])
            v = None if framing == "typed" and rng.random() < 0.15 else \
                b"%d:" % i + rng.randbytes(rng.randint(0, 20))
            recs[(k, bits)] = v
        recs = [(k, b, v) for (k, b), v in recs.items()]
        recs = T.bitkey_sort(recs) if profile == "bit" else sorted(recs)
        T.build(os.path.join(d, "s%d.seg" % i), recs, profile, framing,
                seq=i + 1, restart=restart)
    r = subprocess.run([T.KVSEG, "catalog", d, "init"], capture_output=True)
    check(r.returncode == 0, "catalog init: %r" % r.stderr)


def kvseg_args(request):
    words = request.split()[1:]
    names, opts = [], []
    for w in words:
        k, eq, v = w.partition("=")
        if eq and k in OPTIONS:
            opts += [OPTIONS[k], v]
        elif eq and k == "tombstones":
            opts += ["--drop-tombstones"] if v == "drop" else []
        else:
            names.append(w)
    return names + opts


def expected_mode(request):
    """The documented default (docs/USAGE.md, kvseg "merge"), from STACK:
    byte only when every input is byte, raw only when every input is raw,
    the newest input's K; the request's options win."""
    words = request.split()[1:]
    opts = dict(w.split("=", 1) for w in words if "=" in w)
    names = [w for w in words if "=" not in w]
    idx = range(len(STACK)) if names == ["all"] else \
        sorted(int(n[1]) for n in names)
    ins = [STACK[i] for i in idx]
    profile = opts.get("profile") or (
        "byte" if all(p == "byte" for p, _, _, _ in ins) else "bit")
    framing = opts.get("framing") or (
        "raw" if all(f == "raw" for _, f, _, _ in ins) else "typed")
    restart = int(opts.get("restart") or ins[-1][2] or 15)
    return "%s-%s" % (framing, profile), restart


def new_files(d, before):
    return sorted(set(os.listdir(d)) - before - {".segfs.lock"})


def test_same_output(tmp):
    """Every request of REQUESTS, through kvseg and through segfs."""
    template = os.path.join(tmp, "template")
    make_stack(template, random.Random(42))
    for i, req in enumerate(REQUESTS):
        a = os.path.join(tmp, "cli%d" % i)
        b = os.path.join(tmp, "fs%d" % i)
        shutil.copytree(template, a)
        shutil.copytree(template, b)
        before = set(os.listdir(a))
        r = subprocess.run([T.KVSEG, "catalog", a, "merge", "-q"] +
                           kvseg_args(req), capture_output=True)
        check(r.returncode == 0, "%s: kvseg catalog merge: %r" % (req, r.stderr))
        out_a = new_files(a, before)
        m = T.Mount(b)
        try:
            got = T.request(m, req.encode() + b"\n")
            check(got == 0, "%s: control/merge accepted it (errno %s)" % (req, got))
            job = T.wait(m, T.status(m)[-1]["id"]) if got == 0 else {}
            check(job.get("state") == "done", "%s: the job is done: %r" % (req, job))
        finally:
            m.close()
        out_b = new_files(b, before)
        check(out_a == out_b == [job.get("output")],
              "%s: the same output name: kvseg %r, segfs %r (%r)" % (
                  req, out_a, out_b, job.get("output")))
        if len(out_a) == 1 and out_a == out_b:
            fa, fb = os.path.join(a, out_a[0]), os.path.join(b, out_b[0])
            check(filecmp.cmp(fa, fb, shallow=False),
                  "%s: %s is byte-identical from both" % (req, out_a[0]))
            v = subprocess.run([T.KVSEG, "verify", fa], capture_output=True)
            check(v.returncode == 0, "%s: verifies: %r" % (req, v.stderr))
            st = subprocess.run([T.KVSEG, "stat", "--json", fa],
                                capture_output=True)
            info = json.loads(st.stdout) if st.returncode == 0 else {}
            mode, restart = expected_mode(req)
            check((info.get("mode"), info.get("restart_interval")) ==
                  (mode, restart), "%s: mode %s, K %s, want %s, %s" % (
                      req, info.get("mode"), info.get("restart_interval"),
                      mode, restart))
        check(T.read(os.path.join(a, "CATALOG")) ==
              T.read(os.path.join(b, "CATALOG")),
              "%s: the same catalog" % req)


def main():
    return T.run_tests([test_same_output], "segfs-same-", sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
