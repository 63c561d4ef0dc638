#!/usr/bin/env python3
"""test_kvseg.py — the kvseg tool end to end, against an oracle.

Usage: test_kvseg.py PATH/TO/kvseg   (meson: suite 'cli')

The oracle is this script's own model of the records, written from
docs/USAGE.md and never from kvseg's code: keys are strings of '0'/'1'
(a byte key is its bits, MSB first), so Python's string order is the
segment's key order (first differing bit, a prefix first); values are
bytes, None for a tombstone. Inputs are encoded here with every spelling
the manual allows (raw bytes, either hex case, \\b keys, JSON \\u escapes,
members in any order), and outputs are decoded or compared here.

KVSEG_TEST_SEED=N reproduces a run; the seed is printed first.
"""

import fcntl
import json
import os
import pty
import random
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata

KVSEG = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
SEED = int(os.environ.get("KVSEG_TEST_SEED", random.randrange(1 << 32)))
rng = random.Random(SEED)
TMP = None
MODES = [(p, f) for p in ("byte", "bit") for f in ("typed", "raw")]
failures = 0
checks = 0


# ---- running kvseg --------------------------------------------------------


class Result:
    def __init__(self, args, proc):
        self.args = args
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr.decode("utf-8", "replace")


def kvseg(*args, stdin=b""):
    args = [str(a) for a in args]
    proc = subprocess.run([KVSEG] + args, input=stdin, capture_output=True,
                          timeout=240)
    r = Result(args, proc)
    # Under the sanitizer build a report means failure whatever the status.
    for word in ("Sanitizer", "runtime error:", "LeakSanitizer"):
        if word in r.err:
            fail("sanitizer report for kvseg %s:\n%s" % (args, r.err))
    return r


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg, flush=True)
    if failures > 20:
        sys.exit("too many failures (seed %d)" % SEED)


def check(cond, msg, r=None):
    global checks
    checks += 1
    if not cond:
        if r is not None:
            msg += "\n  kvseg %s -> rc %d\n  stderr: %s\n  stdout: %r" % (
                " ".join(repr(a) for a in r.args), r.rc, r.err.strip(),
                r.out[:300])
        fail(msg)
    return cond


def expect_rc(r, rc, what):
    return check(r.rc == rc, "%s: expected exit %d" % (what, rc), r)


def expect_error(r, rc, what, *needles):
    """Exit rc, one 'kvseg ...: ' message on stderr holding the needles."""
    ok = expect_rc(r, rc, what)
    ok = check(r.err.startswith("kvseg"), what + ": no 'kvseg' message",
               r) and ok
    for n in needles:
        ok = check(n in r.err, "%s: %r not in the message" % (what, n),
                   r) and ok
    return ok


# ---- the oracle's bit strings and text syntax ------------------------------


def bits_of(data):
    return "".join(format(b, "08b") for b in data)


def bytes_of(bits):
    padded = bits + "0" * (-len(bits) % 8)
    return bytes(int(padded[i:i + 8], 2) for i in range(0, len(padded), 8))


SPECIAL = {0x5c: "\\\\", 0x09: "\\t", 0x0a: "\\n", 0x0d: "\\r", 0x00: "\\0"}


def utf8_char_at(data, i):
    """The character whose UTF-8 sequence starts at data[i], or None."""
    for n in (1, 2, 3, 4):
        try:
            text = data[i:i + n].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(text) == 1:
            return text
    return None


def escape(data):
    """The canonical text of bytes (USAGE.md: what kvseg prints): the five
    named escapes, characters as themselves unless they are controls
    (Unicode category Cc: C0, DEL, C1), every other byte as \\xHH."""
    out = []
    i = 0
    while i < len(data):
        b = data[i]
        ch = utf8_char_at(data, i)
        if b in SPECIAL:
            out.append(SPECIAL[b])
        elif ch is not None and unicodedata.category(ch) != "Cc":
            out.append(ch)
            i += len(ch.encode("utf-8"))
            continue
        else:
            out.append("\\x%02x" % b)
        i += 1
    return "".join(out)


def key_text(bits):
    if len(bits) % 8:
        return "\\b" + bits
    return escape(bytes_of(bits))


def canonical_line(key, value):
    if value is None:
        return key_text(key) + "\n"
    return key_text(key) + "\t" + escape(value) + "\n"


def expected_dump(records):
    return "".join(canonical_line(k, records[k])
                   for k in sorted(records)).encode("utf-8")


def hexcase(h):
    return h.upper() if rng.random() < 0.5 else h


def any_escape(data):
    """Some valid TSV spelling of bytes: raw, \\xHH in either case, named."""
    out = bytearray()
    for b in data:
        choice = rng.random()
        if b in (0x09, 0x0a, 0x5c) or choice < 0.3:
            if b in SPECIAL and choice < 0.6:
                out += SPECIAL[b].encode()
            else:
                out += hexcase("\\x%02x" % b).replace("\\X", "\\x").encode()
        else:
            out.append(b)  # raw: NUL, CR, 0xff and all others are literal
    return bytes(out)


def any_key_text(bits, profile):
    if len(bits) % 8 or (profile == "bit" and rng.random() < 0.2):
        return b"\\b" + bits.encode()
    return any_escape(bytes_of(bits))


def tsv_input(items, profile):
    lines = []
    for k, v in items:
        line = any_key_text(k, profile)
        if v is not None:
            line += b"\t" + any_escape(v)
        lines.append(line + b"\n")
    data = b"".join(lines)
    # The last line needs no newline, unless it is empty (the tombstone
    # of the empty key), which would vanish with it.
    if lines and lines[-1] != b"\n" and rng.random() < 0.3:
        data = data[:-1]
    return data


def json_field(name, data_bits):
    if len(data_bits) % 8:
        return '"%s_bits":"%s"' % (name, data_bits)
    data = bytes_of(data_bits)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or rng.random() < 0.3:
        return '"%s_hex":"%s"' % (name, hexcase(data.hex()))
    return '"%s":%s' % (name, json.dumps(text,
                                          ensure_ascii=rng.random() < 0.5))


def jsonl_input(items):
    lines = []
    for k, v in items:
        members = [json_field("key", k)]
        if v is None:
            members.append('"tombstone":true')
        else:
            members.append(json_field("value", bits_of(v)))
            if rng.random() < 0.2:
                members.append('"tombstone": false')
        rng.shuffle(members)
        sep = rng.choice([",", ", ", " ,\t"])
        lines.append(("{" + sep.join(members) + "}").encode() + b"\n")
    return b"".join(lines)


def nul_input(items):
    return b"".join(bytes_of(k) + b"\0" + v + b"\0" for k, v in items)


# ---- random records --------------------------------------------------------

NASTY = [0x00, 0x09, 0x0a, 0x0d, 0x5c, 0xff, 0x80, ord("b"), ord("x"),
         ord("a")]


# Characters for text values: UTF-8 that scan prints as text, controls
# (C0, DEL, C1) that TSV escapes, and the bytes TSV's syntax escapes.
TEXT = ["a", "é", "€", "𝄞", "ü", "\u2028", "\u0085", "\u009b", "\x7f",
        "\t", "\n", "\r", "\\", "\"", "\x01", "\ufeff", "\U0010ffff"]


def random_bytes(maxlen, nul=True):
    n = rng.randrange(maxlen + 1)
    out = bytearray()
    for _ in range(n):
        b = rng.choice(NASTY) if rng.random() < 0.5 else rng.randrange(256)
        out.append(b if nul or b else 1)
    return bytes(out)


def random_value(nul=True):
    r = rng.random()
    if r < 0.15:
        return b""
    if r < 0.3:
        return "héllo €𝄞 \"q\"".encode()[:rng.randrange(20)].decode(
            "utf-8", "ignore").encode()
    if r < 0.45:
        return "".join(rng.choice(TEXT) for _ in range(rng.randrange(12))
                       ).encode("utf-8")
    return random_bytes(20, nul)


def random_records(n, profile, tombstones, nul=True):
    """n records: key bits -> value bytes or None."""
    recs = {}
    if rng.random() < 0.5:
        recs[""] = random_value(nul)  # the empty key
    while len(recs) < n:
        if profile == "bit" and rng.random() < 0.5:
            key = "".join(rng.choice("01")
                          for _ in range(rng.randrange(41)))
        elif rng.random() < 0.2:
            key = bits_of("".join(rng.choice(TEXT) for _ in
                                  range(rng.randrange(5))).encode("utf-8"))
        else:
            key = bits_of(random_bytes(8, nul))
        if key in recs:
            continue
        if tombstones and rng.random() < 0.15:
            recs[key] = None
        else:
            recs[key] = random_value(nul)
    return recs


def shuffled(records):
    items = list(records.items())
    rng.shuffle(items)
    return items


def encode_input(fmt, items, profile):
    if fmt == "tsv":
        return tsv_input(items, profile)
    if fmt == "jsonl":
        return jsonl_input(items)
    return nul_input(items)


def path(name):
    return os.path.join(TMP, name)


def build(out, records, profile="byte", framing="typed", fmt="tsv",
          extra=(), items=None):
    items = shuffled(records) if items is None else items
    r = kvseg("build", "--profile", profile, "--framing", framing,
              "--input", fmt, *extra, out,
              stdin=encode_input(fmt, items, profile))
    expect_rc(r, 0, "build %s-%s from %s" % (framing, profile, fmt))
    return r


# ---- tests -----------------------------------------------------------------


def test_help():
    r = kvseg("--help")
    expect_rc(r, 0, "--help")
    for verb in ("build", "get", "scan", "dump", "verify", "stat", "merge",
                 "catalog"):
        check(("\n  %s " % verb).encode() in r.out, "--help lists " + verb,
              r)
        for args in (("help", verb), (verb, "--help"), (verb, "-h")):
            v = kvseg(*args)
            expect_rc(v, 0, " ".join(args))
            check(v.out.startswith(b"Usage: kvseg " + verb.encode()),
                  " ".join(args) + " prints the usage", v)
    # The version is the project's, as meson.build gives it.
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(top, "meson.build")) as f:
        version = re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)
    for opt in ("--version", "-V"):
        r = kvseg(opt)
        expect_rc(r, 0, opt)
        check(re.fullmatch(rb"kvseg %s \(segment format \d+\)\n"
                           % re.escape(version.encode()), r.out) is not None
              and r.err == "", opt + " prints the project's version", r)
        r = kvseg("--help")
        check(("kvseg %s" % opt).encode() in r.out, "--help names " + opt, r)


def decode_jsonl_record(line):
    """A record of scan --format jsonl, decoded by Python's json module;
    the member names follow USAGE.md's rule (text for valid UTF-8)."""
    obj = json.loads(line)
    if "key_bits" in obj:
        key = obj.pop("key_bits")
        check(len(key) % 8 != 0, "key_bits only for keys of odd bit length")
    elif "key_hex" in obj:
        data = bytes.fromhex(obj.pop("key_hex"))
        check(not valid_utf8(data), "key_hex only when key is not UTF-8: "
              "%r" % data)
        key = bits_of(data)
    else:
        data = obj.pop("key").encode("utf-8")
        key = bits_of(data)
    if obj.pop("tombstone", False):
        value = None
    elif "value_hex" in obj:
        value = bytes.fromhex(obj.pop("value_hex"))
        check(not valid_utf8(value), "value_hex only when not UTF-8: %r"
              % value)
    else:
        value = obj.pop("value").encode("utf-8")
    check(not obj, "no other members: %r" % obj)
    return key, value


def jsonl_lines(out):
    """The lines of JSONL output: split at "\n" only. str.splitlines would
    also split inside a string at U+0085, U+2028 or U+2029, which JSON
    leaves unescaped."""
    lines = out.decode("utf-8").split("\n")
    check(lines[-1] == "", "JSONL output ends with a newline: %r"
          % lines[-1][-80:])
    return lines[:-1]


def valid_utf8(data):
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_modes_and_formats():
    """Every mode from every input format: dump, JSON scan, round trip."""
    for profile, framing in MODES:
        for fmt in ("tsv", "jsonl", "nul"):
            nul = fmt == "nul"
            records = random_records(rng.randrange(1, 300), "byte"
                                     if nul else profile,
                                     framing == "typed" and not nul,
                                     nul=not nul)
            seg = path("m-%s-%s-%s.seg" % (profile, framing, fmt))
            restart = rng.choice([1, 2, 3, 15, 64, 65536])
            build(seg, records, profile, framing, fmt,
                  ("--restart", restart))
            what = "%s-%s from %s" % (framing, profile, fmt)
            r = kvseg("verify", seg)
            check(r.rc == 0 and r.out == (seg + ": ok\n").encode(),
                  what + ": verify", r)
            r = kvseg("dump", seg)
            check(r.rc == 0 and r.out == expected_dump(records),
                  what + ": dump equals the oracle", r)
            r = kvseg("scan", seg, "--format", "jsonl")
            got = [decode_jsonl_record(line)
                   for line in jsonl_lines(r.out)]
            check(r.rc == 0 and got == sorted(records.items()),
                  what + ": scan --format jsonl equals the oracle", r)
            # scan's TSV is build's input: the same records again.
            r = kvseg("scan", seg)
            again = seg + ".again"
            r2 = kvseg("build", "--profile", profile, "--framing", framing,
                       again, stdin=r.out)
            expect_rc(r2, 0, what + ": build from scan output")
            r3 = kvseg("dump", again)
            check(r3.out == expected_dump(records),
                  what + ": scan | build keeps the records", r3)
            r = kvseg("scan", seg, "--format", "jsonl")
            r2 = kvseg("build", "--profile", profile, "--framing", framing,
                       "--input", "jsonl", again, stdin=r.out)
            expect_rc(r2, 0, what + ": build from scan --format jsonl")
            r3 = kvseg("dump", again)
            check(r3.out == expected_dump(records),
                  what + ": scan --format jsonl | build --input jsonl "
                  "keeps the records", r3)
            r = kvseg("stat", "--json", seg)
            st = json.loads(r.out)
            check(st["mode"] == "%s-%s" % (framing, profile) and
                  st["restart_interval"] == restart,
                  what + ": stat mode and restart interval", r)


def test_text_output():
    """Text stays text: TSV and JSON lines print UTF-8 as itself (so grep
    finds it), escape controls, and fall back to \\x or hex for bytes
    that are not UTF-8."""
    cases = [  # key, value, TSV line, JSON object (Python's json as oracle)
        (b"G\xc3\xbcrkan", b"line1\nline2",
         "Gürkan\tline1\\nline2\n", {"key": "Gürkan", "value": "line1\nline2"}),
        (b"n\x00l", b"\ttab\\\r\x7f",
         "n\\0l\t\\ttab\\\\\\r\\x7f\n",
         {"key": "n\x00l", "value": "\ttab\\\r\x7f"}),
        (b"bad\xff", b"\xc3(", "bad\\xff\t\\xc3(\n",
         {"key_hex": "626164ff", "value_hex": "c328"}),
        (b"c1\xc2\x85", "\u2028€𝄞\"".encode(), "c1\\xc2\\x85\t\u2028€𝄞\"\n",
         {"key": "c1\u0085", "value": "\u2028€𝄞\""}),
    ]
    seg = path("text.seg")
    items = [(bits_of(k), v) for k, v, _, _ in cases]
    build(seg, dict(items), items=items)
    r = kvseg("dump", seg)
    want = "".join(line for _, _, line, _ in
                   sorted(cases, key=lambda c: c[0])).encode("utf-8")
    check(r.rc == 0 and r.out == want, "dump prints text as text", r)
    r = kvseg("scan", seg, "--format", "jsonl")
    got = [json.loads(l) for l in jsonl_lines(r.out)]
    check(got == [c[3] for c in sorted(cases, key=lambda c: c[0])],
          "scan --format jsonl writes UTF-8 as JSON strings", r)
    check(b"\\u0000" in r.out and b"\\n" in r.out,
          "JSON escapes NUL and newline", r)
    r = kvseg("scan", seg, "--prefix", "Gü")
    check(r.out == "Gürkan\tline1\\nline2\n".encode(),
          "a UTF-8 prefix on the command line", r)


def test_dump_across_modes():
    records = random_records(200, "byte", False)
    dumps = set()
    for i, (profile, framing) in enumerate(MODES):
        seg = path("same-%d.seg" % i)
        build(seg, records, profile, framing,
              rng.choice(["tsv", "jsonl"]))
        dumps.add(kvseg("dump", seg).out)
    check(dumps == {expected_dump(records)},
          "the four modes dump the same records identically")


def test_get():
    for profile in ("byte", "bit"):
        records = random_records(150, profile, True)
        seg = path("get-%s.seg" % profile)
        build(seg, records, profile, "typed")
        keys = list(records)
        for key in rng.sample(keys, min(40, len(keys))):
            r = kvseg("get", seg, "--", key_text(key))
            if records[key] is None:
                expect_error(r, 1, "get of a tombstone", "deleted")
                check(r.out == b"", "get of a tombstone prints no value")
            else:
                check(r.rc == 0 and r.out == records[key],
                      "get returns the value bytes unchanged", r)
        for _ in range(30):
            key = "".join(rng.choice("01") for _ in range(rng.randrange(
                0, 30)))
            if key in records:
                continue
            r = kvseg("get", seg, "--", key_text(key))
            expect_error(r, 1, "get of an absent key", "not found")
            r = kvseg("get", "-q", seg, "--", key_text(key))
            check(r.rc == 1 and r.err == "", "get -q is quiet", r)
        # Non-canonical spellings of the same key find it.
        key = rng.choice([k for k in keys if len(k) % 8 == 0])
        spelled = "".join("\\X%02X" % b for b in bytes_of(key)).replace(
            "\\X", "\\x")
        r = kvseg("get", "-q", seg, spelled)
        check(r.rc == (1 if records[key] is None else 0),
              "get with a \\xHH spelling of the key", r)


def scan_bound(records, profile):
    """A key argument: a record's key, a prefix of one, or random bits."""
    keys = list(records)
    r = rng.random()
    if r < 0.4 and keys:
        return rng.choice(keys)
    if r < 0.8 and keys:
        k = rng.choice(keys)
        cut = rng.randrange(len(k) + 1)
        if profile == "byte" and rng.random() < 0.7:
            cut -= cut % 8
        return k[:cut]
    return "".join(rng.choice("01") for _ in range(rng.randrange(20)))


def test_scan_filters():
    for profile, framing in MODES:
        records = random_records(400, profile, framing == "typed")
        seg = path("scan-%s-%s.seg" % (profile, framing))
        build(seg, records, profile, framing)
        ordered = sorted(records.items())
        for _ in range(25):
            args, keep = [], list(ordered)
            if rng.random() < 0.5:
                p = scan_bound(records, profile)
                args += ["--prefix", key_text(p)]
                keep = [kv for kv in keep if kv[0].startswith(p)]
            if rng.random() < 0.5:
                a = scan_bound(records, profile)
                args += ["--from=" + key_text(a)]
                keep = [kv for kv in keep if kv[0] >= a]
            if rng.random() < 0.5:
                b = scan_bound(records, profile)
                args += ["--to", key_text(b)]
                keep = [kv for kv in keep if kv[0] < b]
            if rng.random() < 0.4:
                n = rng.randrange(0, 10)
                args += ["--limit", n]
                keep = keep[:n]
            fmt = rng.choice(["tsv", "jsonl"])
            r = kvseg("scan", seg, "--format", fmt, *args)
            if fmt == "tsv":
                want = "".join(canonical_line(k, v)
                               for k, v in keep).encode("utf-8")
                ok = r.out == want
            else:
                ok = [decode_jsonl_record(line)
                      for line in jsonl_lines(r.out)] == keep
            check(r.rc == 0 and ok, "scan %s-%s %s equals the oracle"
                  % (framing, profile, args), r)


def test_duplicates():
    for fmt in ("tsv", "jsonl", "nul"):
        records = random_records(50, "byte", False, nul=False)
        items = shuffled(records)
        k, v = items[10]
        dup_value = v + b"-later"
        dup_items = items[:20] + [(k, dup_value)] + items[20:]
        data = encode_input(fmt, dup_items, "byte")
        seg = path("dup-%s.seg" % fmt)
        r = kvseg("build", "--input", fmt, seg, stdin=data)
        unit = "record" if fmt == "nul" else "line"
        expect_error(r, 3, "duplicate key from " + fmt,
                     "%ss 11 and 21" % unit)
        check(not os.path.exists(seg), "no segment after a duplicate")
        r = kvseg("build", "--input", fmt, "--last-wins", seg, stdin=data)
        expect_rc(r, 0, "--last-wins")
        want = dict(records)
        want[k] = dup_value
        check(kvseg("dump", seg).out == expected_dump(want),
              "--last-wins keeps the later record (%s)" % fmt)
    # A later tombstone wins over a value, and the reverse.
    data = b"a\t1\nb\t2\na\nb\nb\t3\n"
    r = kvseg("build", "--last-wins", path("lw.seg"), stdin=data)
    check(r.rc == 0 and kvseg("dump", path("lw.seg")).out == b"a\nb\t3\n",
          "--last-wins with tombstones", r)


def listdir_clean(before, what):
    check(sorted(os.listdir(TMP)) == before,
          what + ": the directory is unchanged (no temporary file left)")


def test_bad_input():
    cases = [
        ("tsv", b"a\t1\nb\t2\tx\n", "line 2", "second TAB"),
        ("tsv", b"a\t1\n\\q\t2\n", "line 2", "unknown escape"),
        ("tsv", b"a\t\\x4g\n", "line 1", "two hex digits"),
        ("tsv", b"a\t1\nb\tends\\", "line 2", "lone backslash"),
        ("tsv", b"a\t\\b01\n", "line 1", "keys only"),
        ("tsv", b"ab\\b01\t1\n", "line 1", "only start a key"),
        ("tsv", b"x\t1\n\\b0121\tv\n", "line 2", "not 0 or 1"),
        ("tsv", b"\\b0101\tv\n", "line 1", "--profile bit"),
        ("nul", b"a\x001\x00b", "record 2", "ends inside a key"),
        ("nul", b"a\x001\x00b\x00", "record 2", "without a value"),
        ("nul", b"a\x001\x00b\x002", "record 2", "inside a value"),
        ("jsonl", b'{"key":"a","value":"1"}\n\n', "line 2", "blank line"),
        ("jsonl", b'{"key":"a","value":1}\n', "line 1", "must be a string"),
        ("jsonl", b'{"key":"a"}\n', "line 1", "no value"),
        ("jsonl", b'{"value":"a"}\n', "line 1", "no key"),
        ("jsonl", b'{"key":"a","key_hex":"61","value":""}\n', "line 1",
         "more than one"),
        ("jsonl", b'{"key":"a","value":"","key":"b"}\n', "line 1", "duplicate"),
        ("jsonl", b'{"key":"a","value":"","extra":"b"}\n', "line 1",
         "unknown member"),
        ("jsonl", b'{"key":"a","value":"\xff"}\n', "line 1", "UTF-8"),
        ("jsonl", b'{"key":"a","value":"\\ud800"}\n', "line 1",
         "invalid Unicode"),
        ("jsonl", b'{"key":"a","value":"x"} x\n', "line 1", "end of file expected"),
        ("jsonl", b'{"key":"a","value":"x"\n', "line 1", "expected"),
        ("jsonl", b'{"key_hex":"6","value":"x"}\n', "line 1", "odd"),
        ("jsonl", b'{"key_hex":"zz","value":"x"}\n', "line 1", "hex digit"),
        ("jsonl", b'{"key":"a","tombstone":true,"value":"x"}\n', "line 1",
         "no value"),
        ("jsonl", b'{"key":"a","tombstone":"yes"}\n', "line 1",
         "true or false"),
        ("jsonl", b'["key","a"]\n', "line 1", "not a JSON object"),
        ("jsonl", b'{"key":"a\tb","value":"x"}\n', "line 1",
         "control character"),
        ("jsonl", b'{"key":"a","value":"x"}\n{"key":null,"value":""}\n',
         "line 2", "must be a string"),
    ]
    before = sorted(os.listdir(TMP))
    seg = path("bad.seg")
    for fmt, data, where, why in cases:
        profile = "bit" if b"\\b0121" in data else "byte"
        r = kvseg("build", "--input", fmt, "--profile", profile, seg,
                  stdin=data)
        expect_error(r, 3, "bad %s input %r" % (fmt, data), where, why)
        check(not os.path.exists(seg), "no segment after bad input")
    # Tombstones are refused by raw framing, in each format that has them.
    for fmt, data in (("tsv", b"a\t1\nb\n"),
                      ("jsonl", b'{"key":"a","value":""}\n'
                                b'{"key":"b","tombstone":true}\n')):
        for profile in ("byte", "bit"):
            r = kvseg("build", "--framing", "raw", "--profile", profile,
                      "--input", fmt, seg, stdin=data)
            expect_error(r, 3, "tombstone in raw " + fmt, "line 2",
                         "tombstone")
            check(not os.path.exists(seg), "no segment after a tombstone")
    # An over-long key (the limit is 2^23 bits).
    r = kvseg("build", seg, stdin=b"k" * ((1 << 20) + 1) + b"\tv\n")
    expect_error(r, 3, "over-long key", "line 1", "limit")
    listdir_clean(before, "failed builds")


def test_empty_and_bits():
    seg = path("empty.seg")
    r = kvseg("build", seg, stdin=b"")
    expect_rc(r, 0, "build from empty input")
    check(kvseg("dump", seg).out == b"", "an empty segment dumps nothing")
    st = json.loads(kvseg("stat", "--json", seg).out)
    check(st["records"] == 0 and st["bits_per_record"] is None,
          "stat of an empty segment")
    check(kvseg("verify", seg).rc == 0, "verify an empty segment")
    # A lone newline is the tombstone of the empty key.
    r = kvseg("build", seg, stdin=b"\n")
    check(r.rc == 0 and kvseg("dump", seg).out == b"\n",
          "an empty line is the tombstone of the empty key", r)
    r = kvseg("get", "-q", seg, "")
    check(r.rc == 1, "get of the deleted empty key", r)
    # Bit keys that are whole bytes print as bytes.
    r = kvseg("build", "--profile", "bit", seg,
              stdin=b"\\b01100001\tA\n\\b0110\tB\n\\b\tE\n")
    check(r.rc == 0 and kvseg("dump", seg).out == b"\tE\n\\b0110\tB\na\tA\n",
          "bit keys of whole bytes print as bytes", r)
    # In the byte profile, scan seeks to a bit bound correctly.
    r = kvseg("build", seg, stdin=b"a\t1\nb\t2\nc\t3\n")
    r = kvseg("scan", seg, "--from", "\\b0110001", "--to", "\\b01100011")
    check(r.out == b"b\t2\n", "byte-profile scan with bit bounds", r)
    r = kvseg("get", "-q", seg, "\\b0110")
    check(r.rc == 1, "byte-profile get of a bit key is not found", r)


def test_verify_and_corruption():
    records = random_records(3000, "byte", True)
    seg = path("v.seg")
    build(seg, records)
    data = open(seg, "rb").read()
    bad = path("flipped.seg")
    with open(bad, "wb") as f:
        mid = len(data) // 2
        f.write(data[:mid] + bytes([data[mid] ^ 0xff]) + data[mid + 1:])
    short = path("short.seg")
    with open(short, "wb") as f:
        f.write(data[:len(data) // 2])
    junk = path("junk.seg")
    with open(junk, "wb") as f:
        f.write(bytes(rng.randrange(256) for _ in range(5000)))
    for name in (bad, short, junk):
        r = kvseg("verify", name)
        expect_error(r, 3, "verify " + os.path.basename(name),
                     "kvseg verify: " + name + ": ")
        check(b"ok" not in r.out, "no ok for a damaged segment", r)
        # Reading a damaged segment fails cleanly or not at all.
        for args in (("dump", name), ("scan", name, "--limit", 5),
                     ("get", name, "a"), ("stat", name)):
            r = kvseg(*args)
            check(r.rc in (0, 1, 3), "%s on a damaged segment exits 0, 1 "
                  "or 3" % args[0], r)
    # verify goes on after a failure.
    r = kvseg("verify", seg, bad, seg)
    check(r.rc == 3 and r.out == ("%s: ok\n%s: ok\n" % (seg, seg)).encode()
          and bad in r.err, "verify reports each file", r)
    r = kvseg("verify", seg, path("missing.seg"))
    expect_error(r, 4, "verify of a missing file", "missing.seg")


def test_damage_mid_stream():
    """dump and scan print every record before a damaged one, then name
    the file and the record on stderr and exit 3. The damage is made from
    FORMAT.md §6.1: k10000 follows k09999, so with K = 15 it is the
    non-restart record 9999, stored as h = 4 * lcp (lcp 1, "k") and the
    suffix "10000", then its value "v"; an h of 4 * 31 claims an LCP
    longer than the previous key, which no reader may accept."""
    n = 20000
    records = {bits_of(b"k%05d" % i): b"v" for i in range(1, n + 1)}
    good = path("undamaged.kvs")
    build(good, records, extra=("--restart", 15))
    # the oracle is the dump of the undamaged file (itself checked
    # against the records, so that a dump of nothing cannot pass)
    oracle = kvseg("dump", good).out.splitlines(keepends=True)
    check(b"".join(oracle) == expected_dump(records), "the undamaged dump")
    data = open(good, "rb").read()
    rec = bytes([4]) + b"10000v"
    if not check(data.count(rec) == 1, "record 9999's bytes are found once"):
        return
    at = data.find(rec)
    bad = path("damaged.kvs")
    with open(bad, "wb") as f:
        f.write(data[:at] + bytes([4 * 31]) + data[at + 1:])
    for args, first in ((("dump", bad), 0), (("scan", bad), 0),
                        (("scan", bad, "--from", "k05000"), 4999)):
        r = kvseg(*args)
        lines = r.out.splitlines(keepends=True)
        expect_error(r, 3, "%s of a segment damaged mid-stream" % args[0],
                     "kvseg %s: %s: record 9999: " % (args[0], bad))
        check(len(r.err.splitlines()) == 1, "one message: %r" % r.err)
        check(len(lines) > 0 and lines == oracle[first:first + len(lines)],
              "%r prints the undamaged file's records before the damage"
              % (args,), r)
        check(first + len(lines) == 9999, "%r prints all %d records "
              "before record 9999, not %d" % (args, 9999 - first,
                                               len(lines)))
    # a --limit that stops before the damage never reaches it
    r = kvseg("scan", bad, "--limit", 9999)
    check(r.rc == 0 and r.err == "" and
          r.out.splitlines(keepends=True) == oracle[:9999],
          "a scan that stops before the damage succeeds", r)


def test_stat():
    for profile, framing in MODES:
        records = random_records(500, profile, framing == "typed")
        seg = path("stat-%s-%s.seg" % (profile, framing))
        extra = ["--sequence", 18446744073709551615, "--restart", 7]
        if profile == "bit":
            extra += ["--codes", "eg3,deg0,g7"]
        build(seg, records, profile, framing, "tsv", extra)
        r = kvseg("stat", "--json", seg)
        expect_rc(r, 0, "stat --json")
        st = json.loads(r.out)
        size = os.path.getsize(seg)
        values = [v for v in records.values() if v is not None]
        what = "stat %s-%s: " % (framing, profile)
        check(st["records"] == len(records), what + "records", r)
        check(st["tombstones"] == len(records) - len(values),
              what + "tombstones", r)
        check(st["file_bytes"] == size, what + "file_bytes is the size", r)
        parts = ("stream_bytes", "ef_bytes", "fence_bytes", "other_bytes")
        check(sum(st[p] for p in parts) == st["file_bytes"],
              what + "components sum to the total", r)
        check(st["stream_bits"] <= 8 * st["stream_bytes"],
              what + "stream bits fit in stream bytes", r)
        check(st["key_bits"] == sum(len(k) for k in records),
              what + "key_bits", r)
        check(st["key_bytes"] == st["key_bits"] / 8, what + "key_bytes", r)
        check(st["max_key_bits"] == max(len(k) for k in records),
              what + "max_key_bits", r)
        check(st["value_bytes"] == sum(len(v) for v in values),
              what + "value_bytes", r)
        check(st["sequence"] == 18446744073709551615, what + "sequence", r)
        check(st["restart_interval"] == 7 and
              st["restarts"] == (len(records) + 6) // 7,
              what + "restart interval and restarts", r)
        check(abs(st["bits_per_record"] - 8 * size / len(records)) < 0.001,
              what + "bits per record", r)
        check(st["version"] == 1, what + "version", r)
        if profile == "bit":
            check(st["codes"] == {"lcp": "eg3", "keylen": "deg0",
                                  "vallen": "g7"}, what + "codes", r)
        else:
            check(st["codes"] is None, what + "no codes", r)
        r = kvseg("stat", seg)
        check(r.rc == 0 and b"file_bytes" in r.out and
              ("%d" % size).encode() in r.out, what + "text form", r)


def test_bad_arguments():
    seg = path("args.seg")
    kvseg("build", seg, stdin=b"a\t1\n")
    out = path("never.seg")
    usage = [
        (), ("frobnicate",), ("help", "nope"), ("help", "get", "scan"),
        ("build",), ("build", out, out + "2"), ("build", "--bogus", out),
        ("build", "-x", out), ("build", out, "--input"),
        ("build", "--restart", "0", out), ("build", "--restart", "65537",
                                           out),
        ("build", "--restart", "-1", out), ("build", "--restart", "1e3",
                                            out),
        ("build", "--restart", "", out),
        ("build", "--sequence", "18446744073709551616", out),
        ("build", "--profile", "nibble", out),
        ("build", "--framing", "cooked", out),
        ("build", "--input", "csv", out), ("build", "--last-wins=1", out),
        ("build", "--codes", "eg3,deg0,g7", out),
        ("build", "--profile", "bit", "--codes", "eg3,deg0", out),
        ("build", "--profile", "bit", "--codes", "eg3,deg0,g7,g1", out),
        ("build", "--profile", "bit", "--codes", "eg64,deg0,g7", out),
        ("build", "--profile", "bit", "--codes", "eg3,,g7", out),
        ("build", "--profile", "bit", "--codes", "eg3,g0,g7", out),
        ("get", seg), ("get", seg, "a", "b"), ("get", seg, "a\\q"),
        ("get", seg, "\\x4"), ("get", seg, "-a"), ("get",),
        ("scan",), ("scan", seg, seg), ("scan", seg, "--limit", "x"),
        ("scan", seg, "--limit", "-1"), ("scan", seg, "--format", "xml"),
        ("scan", seg, "--from", "\\b012"), ("scan", seg, "--prefix"),
        ("dump",), ("dump", seg, seg), ("dump", seg, "--limit", "1"),
        ("verify",), ("verify", "--quick", seg),
        ("stat",), ("stat", seg, seg), ("stat", "--json=1", seg),
    ]
    for args in usage:
        r = kvseg(*args, stdin=b"a\t1\n")
        expect_error(r, 2, "usage error %r" % (args,))
        check(r.out == b"", "no output on a usage error %r" % (args,), r)
    check(not os.path.exists(out), "no segment from a usage error")
    system = [
        ("get", path("nope.seg"), "a"), ("scan", path("nope.seg")),
        ("dump", path("nope.seg")), ("stat", path("nope.seg")),
        ("stat", TMP), ("build", path("no/such/dir/x.seg")),
    ]
    for args in system:
        r = kvseg(*args, stdin=b"a\t1\n")
        expect_error(r, 4, "system error %r" % (args,))
    # A FIFO is refused at once (opening one for reading would wait for
    # a writer), and so is a merge with one among its inputs.
    fifo = path("args.fifo")
    os.mkfifo(fifo)
    for args in [("get", fifo, "a"), ("scan", fifo), ("dump", fifo),
                 ("stat", fifo), ("verify", fifo), ("merge", "-o", out, seg, fifo)]:
        r = kvseg(*args)
        expect_error(r, 4, "a FIFO %r" % (args,), fifo + ": not a regular file")
    check(not os.path.exists(out), "no segment from a merge with a FIFO")
    # Nor does a segment replace one (or a directory, or a device: as
    # root, "kvseg build /dev/null" would have replaced the device).
    for args in [("build", fifo), ("merge", "--force", "-o", fifo, seg)]:
        r = kvseg(*args, stdin=b"a\t1\n")
        expect_error(r, 4, "OUT a FIFO %r" % (args,),
                     fifo + ": is a FIFO, which a segment would replace")
        check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO stays %r" % (args,))
    os.unlink(fifo)
    # A closed stdin is an error, not an empty input.
    proc = subprocess.run([KVSEG, "build", out], stdin=None,
                          capture_output=False, stderr=subprocess.PIPE,
                          preexec_fn=lambda: os.close(0), timeout=60)
    check(proc.returncode == 4 and b"stdin" in proc.stderr and
          not os.path.exists(out), "build with stdin closed exits 4")
    # A key that starts with '-' after --.
    kvseg("build", seg, stdin=b"-a\t1\n")
    r = kvseg("get", seg, "--", "-a")
    check(r.rc == 0 and r.out == b"1", "get -- -KEY", r)


def test_large():
    """A larger unsorted input: correct, and not quadratic."""
    n = 60000
    keys = rng.sample(range(10 * n), n)
    lines = b"".join(b"key%09d\tvalue %d\n" % (k, k * 7) for k in keys)
    seg = path("large.seg")
    t = time.monotonic()
    r = kvseg("build", "--restart", 31, seg, stdin=lines)
    t = time.monotonic() - t
    expect_rc(r, 0, "large build")
    r = kvseg("dump", seg)
    want = b"".join(b"key%09d\tvalue %d\n" % (k, k * 7) for k in
                    sorted(keys))
    check(r.out == want, "large dump in order")
    print("  large: %d records built in %.2f s" % (n, t))


# ---- merge ------------------------------------------------------------------


def merged_oracle(inputs, drop=False):
    """Inputs oldest first (dicts): the newest binding of each key wins."""
    out = {}
    for recs in inputs:
        out.update(recs)
    if drop:
        out = {k: v for k, v in out.items() if v is not None}
    return out


def merge_counts(inputs, drop):
    union = merged_oracle(inputs)
    total = sum(len(r) for r in inputs)
    dropped = sum(1 for v in union.values() if v is None) if drop else 0
    return total, len(union) - dropped, total - len(union), dropped


SUMMARY = re.compile(rb"^merged (\d+) segments? into (.*): (\d+) records in, "
                     rb"(\d+) out, (\d+) replaced, (\d+) tombstones "
                     rb"dropped\n")


def check_summary(r, n_inputs, out, counts, what):
    m = SUMMARY.match(r.out)
    if not check(m is not None, what + ": a summary line", r):
        return
    check(int(m.group(1)) == n_inputs and m.group(2) == out.encode() and
          tuple(int(m.group(i)) for i in range(3, 7)) == counts,
          what + ": summary %r, expected %r" % (m.groups(), counts), r)


def random_overlapping_inputs(n, profile, typed):
    """n record sets over one pool of keys, so that keys repeat."""
    pool = list(random_records(rng.randrange(20, 300), profile, False))
    inputs = []
    for _ in range(n):
        recs = {}
        for k in rng.sample(pool, rng.randrange(0, len(pool) + 1)):
            recs[k] = None if typed and rng.random() < 0.2 else \
                random_value()
        inputs.append(recs)
    return inputs


def test_merge():
    for trial in range(12):
        n = rng.randrange(1, 5)
        # A bit-profile key pool needs bit-profile inputs and output.
        profile = rng.choice(["byte", "bit"])
        inputs = random_overlapping_inputs(n, profile, True)
        names, modes = [], []
        for i, recs in enumerate(inputs):
            p = profile if profile == "bit" else rng.choice(["byte", "bit"])
            f = "raw" if all(v is not None for v in recs.values()) and \
                rng.random() < 0.5 else "typed"
            k = rng.choice([1, 4, 15, 100])
            name = path("mi-%d-%d.seg" % (trial, i))
            build(name, recs, p, f, "tsv",
                  ("--sequence", 10 * trial + rng.randrange(10),
                   "--restart", k))
            names.append(name)
            modes.append((p, f, k))
        seqs = [json.loads(kvseg("stat", "--json", x).out)["sequence"]
                for x in names]
        what = "merge trial %d (%d inputs)" % (trial, n)
        # Defaults (USAGE.md, "Merge defaults"): byte or raw only when
        # every input is, the newest input's K, sequence max + 1.
        out = path("mo-%d.seg" % trial)
        r = kvseg("merge", "-o", out, *names)
        if check(r.rc == 0 and r.err == "", what + ": exit 0, no stderr "
                 "when piped", r):
            check_summary(r, n, out, merge_counts(inputs, False), what)
            check(kvseg("dump", out).out ==
                  expected_dump(merged_oracle(inputs)),
                  what + ": dump equals the oracle (newest wins)")
            st = json.loads(kvseg("stat", "--json", out).out)
            k = modes[-1][2]
            want_mode = "%s-%s" % (
                "raw" if all(f == "raw" for _, f, _ in modes) else "typed",
                "byte" if all(p == "byte" for p, _, _ in modes) else "bit")
            check(st["mode"] == want_mode and st["restart_interval"] == k
                  and st["sequence"] == max(seqs) + 1,
                  what + ": default mode %s K %d sequence %d, got %s"
                  % (want_mode, k, max(seqs) + 1, st))
        # Strong delete, into a chosen mode.
        out2 = path("mo2-%d.seg" % trial)
        p2 = "bit" if profile == "bit" else rng.choice(["byte", "bit"])
        f2 = rng.choice(["typed", "raw"])
        r = kvseg("merge", "--includes-oldest", "--drop-tombstones",
                  "--profile", p2, "--framing", f2, "--restart", 3,
                  "--sequence", 77, "-q", "-o", out2, *names)
        if check(r.rc == 0 and r.out == b"" and r.err == "",
                 what + ": quiet strong delete", r):
            check(kvseg("dump", out2).out ==
                  expected_dump(merged_oracle(inputs, True)),
                  what + ": strong delete drops tombstones and what they "
                  "hide")
            st = json.loads(kvseg("stat", "--json", out2).out)
            check(st["mode"] == "%s-%s" % (f2, p2) and
                  st["restart_interval"] == 3 and st["sequence"] == 77,
                  what + ": mode conversion", r)
        r = kvseg("merge", "--includes-oldest", "--drop-tombstones", "--force",
                  "-o", out2, *names)
        if r.rc == 0:
            check_summary(r, n, out2, merge_counts(inputs, True),
                          what + " (drop)")
        # A raw output cannot take inputs with tombstones.
        if any(v is None for recs in inputs for v in recs.values()):
            bad = path("mo-raw.seg")
            r = kvseg("merge", "--framing", "raw", "-o", bad, *names)
            expect_error(r, 3, what + ": raw output with tombstones",
                         "tombstone")
            check(not os.path.exists(bad), "no output after a refusal")
    # A merge equals a build of the merged records, byte for byte.
    inputs = random_overlapping_inputs(3, "byte", True)
    names = []
    for i, recs in enumerate(inputs):
        names.append(path("eq-%d.seg" % i))
        build(names[-1], recs, extra=("--sequence", i))
    kvseg("merge", "-q", "-o", path("eq.seg"), *names)
    build(path("eq-built.seg"), merged_oracle(inputs),
          extra=("--sequence", 3))
    check(open(path("eq.seg"), "rb").read() ==
          open(path("eq-built.seg"), "rb").read(),
          "merge output is byte-identical to build's")
    # Bit keys into a byte-profile output: refused; by default (a bit
    # input makes the output bit, though the newest is byte) kept.
    build(path("bk.seg"), {"0101": b"x"}, "bit")
    build(path("bb.seg"), {bits_of(b"a"): b"y"}, "byte")
    r = kvseg("merge", "--profile", "byte", "-o", path("bko.seg"),
              path("bk.seg"), path("bb.seg"))
    expect_error(r, 3, "merge of a bit key into the byte profile")
    check(not os.path.exists(path("bko.seg")), "no output after it")
    r = kvseg("merge", "-o", path("bko.seg"), path("bk.seg"), path("bb.seg"))
    check(r.rc == 0 and kvseg("dump", path("bko.seg")).out ==
          b"\\b0101\tx\na\ty\n", "the default (bit) keeps bit keys", r)
    test_merge_errors(names)
    test_merge_progress(names)


def test_merge_errors(names):
    out = path("me.seg")
    for args in ((), ("-o", out), (names[0],), ("-o",),
                 ("-o", out, "-o", out, names[0]),
                 ("--drop-tombstones", "-o", out, names[0]),
                 ("--framing", "cooked", "-o", out, names[0]),
                 ("--restart", "0", "-o", out, names[0]),
                 ("--codes", "eg1,eg1,eg1", "-o", out, names[0]),
                 ("--includes-oldest=1", "-o", out, names[0]),
                 ("--bogus", "-o", out, names[0])):
        r = kvseg("merge", *args)
        expect_error(r, 2, "merge usage error %r" % (args,))
        check(r.out == b"", "no output on a merge usage error", r)
    # No verb that writes replaces a file it reads, nor an existing file
    # unless told to (the repro: "merge old.seg new.seg" replaced
    # old.seg with the merge of new.seg alone).
    before = [open(x, "rb").read() for x in names[:2]]
    os.link(names[0], path("me-link.seg"))
    for args, why in ((names[:2], "no output file given"),
                      (("-o", names[0]) + tuple(names[:2]), "also the input"),
                      (("-o", path("me-link.seg"), names[0]), "also the input"),
                      (("--force", "-o", names[1]) + tuple(names[:2]),
                       "also the input"),
                      (("-o", names[1], names[0]), "exists: --force")):
        r = kvseg("merge", *args)
        expect_error(r, 2, "merge refused %r" % (args,), why)
    check([open(x, "rb").read() for x in names[:2]] == before,
          "refused merges left their inputs as they were")
    with open(names[1], "rb") as f:
        r = subprocess.run([KVSEG, "build", names[1]], stdin=f,
                           capture_output=True)
    check(r.returncode == 2 and b"standard input" in r.stderr and
          open(names[1], "rb").read() == before[1],
          "build refuses OUT as its standard input: %r" % (r,))
    os.unlink(path("me-link.seg"))
    r = kvseg("merge", "--force", "-o", path("me-new.seg"), names[0])
    check(r.rc == 0, "merge into a new file", r)
    r = kvseg("merge", "--force", "-o", path("me-new.seg"), names[1])
    check(r.rc == 0 and kvseg("dump", path("me-new.seg")).out ==
          kvseg("dump", names[1]).out, "--force replaces OUT", r)
    r = kvseg("merge", "-o", out, names[0], path("missing.seg"))
    expect_error(r, 4, "merge of a missing input", "missing.seg")
    data = bytearray(open(names[0], "rb").read())
    data[len(data) // 3] ^= 0x55
    with open(path("dmg.seg"), "wb") as f:
        f.write(data)
    r = kvseg("merge", "-o", out, path("dmg.seg"), names[1])
    expect_error(r, 3, "a damaged input fails its CRC", "CRC32C")
    check(not os.path.exists(out), "no output from a damaged input")
    r = kvseg("merge", "-o", path("no/such/dir/x.seg"), names[0])
    expect_error(r, 4, "merge into a missing directory")
    check([n for n in os.listdir(TMP) if ".tmp-" in n] == [],
          "failed merges leave no temporary file")


def read_pty(master):
    """What one read of a pty's master side gives: b"" at its end (EOF, or
    EIO once the other side is closed)."""
    try:
        return os.read(master, 65536)
    except OSError:
        return b""


def run_on_pty(args, stdin=b""):
    """Runs kvseg with stderr on a terminal; returns (rc, stdout, tty)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([KVSEG] + [str(a) for a in args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=slave)
    os.close(slave)
    out, _ = proc.communicate(stdin, timeout=240)
    tty = b""
    while select.select([master], [], [], 0)[0]:
        chunk = read_pty(master)
        if not chunk:
            break
        tty += chunk
    os.close(master)
    return proc.returncode, out, tty


def test_merge_progress(names):
    """A progress bar on a terminal, nothing when piped or --quiet."""
    out = path("mp.seg")
    rc, stdout, tty = run_on_pty(["merge", "-o", out] + names)
    check(rc == 0 and SUMMARY.match(stdout) is not None and
          b"records" in tty and b"MB/s" in tty and b"left" in tty,
          "merge draws a progress bar on a terminal: %r" % tty[:300])
    check(tty.endswith(b"\r\x1b[K"), "the bar is erased at the end")
    rc, stdout, tty = run_on_pty(["merge", "--quiet", "--force", "-o", out]
                                  + names)
    check(rc == 0 and stdout == b"" and tty == b"",
          "merge --quiet on a terminal draws nothing: %r" % tty[:300])
    r = kvseg("merge", "--force", "-o", out, *names)
    check(r.rc == 0 and r.err == "", "no progress bar when piped", r)


# ---- catalog ----------------------------------------------------------------


def catalog_list(d):
    r = kvseg("catalog", d, "list", "--json")
    if not expect_rc(r, 0, "catalog list --json"):
        return None
    return json.loads(r.out)


def test_catalog():
    d = path("cat")
    os.mkdir(d)
    segs, seqs = {}, {}  # name -> records, sequence
    for i in range(3):
        recs = random_records(rng.randrange(1, 120), "byte", True)
        name = "s%d.kvs" % i
        build(os.path.join(d, name), recs, extra=("--sequence", 3 - i))
        segs[name], seqs[name] = recs, 3 - i
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("not a segment\n")
    r = kvseg("catalog", d, "init")
    check(r.rc == 0 and r.out == b"generation 1\n", "catalog init", r)
    r = kvseg("catalog", d, "init")
    check(r.rc == 0 and r.out == b"generation 1\n",
          "init of a catalogued directory changes nothing", r)
    cat = catalog_list(d)
    # A new catalog orders the files by sequence: s2 (1), s1 (2), s0 (3).
    order = ["s2.kvs", "s1.kvs", "s0.kvs"]
    check(cat == {"generation": 1, "segments": [
        {"name": n, "sequence": seqs[n], "records": len(segs[n]),
         "size": os.path.getsize(os.path.join(d, n))} for n in order]},
        "list --json: %r" % cat)
    r = kvseg("catalog", d, "list")
    want = "generation 1\n" + "".join(
        "%s\t%d\t%d\t%d\n" % (n, seqs[n], len(segs[n]),
                              os.path.getsize(os.path.join(d, n)))
        for n in order)
    check(r.rc == 0 and r.out == want.encode(), "list as text", r)
    # add: by name, by a path into d, and refusals.
    for i, how in ((3, "name"), (4, "path")):
        recs = random_records(rng.randrange(1, 120), "byte", True)
        name = "s%d.kvs" % i
        build(os.path.join(d, name), recs, extra=("--sequence", i + 1))
        segs[name], seqs[name] = recs, i + 1
        arg = name if how == "name" else \
            os.path.join(d, ".", name) if rng.random() < 0.5 else \
            os.path.join(d, name)
        r = kvseg("catalog", d, "add", arg)
        check(r.rc == 0 and r.out == b"generation %d\n" % (i - 1),
              "catalog add by " + how, r)
        order.append(name)
    build(path("outside.kvs"), {bits_of(b"x"): b"x"})
    r = kvseg("catalog", d, "add", path("outside.kvs"))
    expect_error(r, 2, "add of a file outside DIR", "not in")
    r = kvseg("catalog", d, "add", "s3.kvs")
    expect_error(r, 3, "add of a live segment", "already")
    r = kvseg("catalog", d, "add", "notes.txt")
    expect_error(r, 3, "add of a file that is not a segment")
    r = kvseg("catalog", d, "add", "nothere.kvs")
    expect_error(r, 4, "add of a missing file (I/O, as for any verb)",
                 "nothere.kvs", "No such file")
    # A segment not newer by sequence than the newest (s4.kvs, 5): a
    # catalog rebuilt by sequence would put it before, so add refuses it,
    # lower or equal, saying how to mend it.
    for seq in (1, 5):
        low = os.path.join(d, "low.kvs")
        build(low, {bits_of(b"x"): b"x"}, extra=("--sequence", seq))
        r = kvseg("catalog", d, "add", "low.kvs")
        expect_error(r, 3, "add of a segment of sequence %d" % seq,
                     "low.kvs: its sequence %d is not above 5" % seq,
                     "s4.kvs, the newest live segment",
                     "--sequence 6")
        os.unlink(low)
    cat = catalog_list(d)
    check(cat["generation"] == 3 and
          [e["name"] for e in cat["segments"]] == order,
          "failed adds change nothing: %r" % cat)

    def live_records():
        return merged_oracle([segs[n] for n in order])

    everything = live_records()
    # merge of consecutive middle segments, given in any order.
    mid = order[1:4]
    r = kvseg("catalog", d, "merge", *reversed(mid))
    expect_rc(r, 0, "catalog merge of three middle segments")
    cat = catalog_list(d)
    new = [e for e in cat["segments"] if e["name"] not in order]
    if check(len(new) == 1 and cat["generation"] == 4,
             "one new segment, one new generation: %r" % cat):
        name = new[0]["name"]
        check([e["name"] for e in cat["segments"]] ==
              [order[0], name, order[4]],
              "the merged segment takes its inputs' place: %r" % cat)
        check(SUMMARY.match(r.out) is not None and
              r.out.endswith(b"generation 4\n"), "merge prints its "
              "summary and generation", r)
        # Its sequence is the newest input's, and names it.
        check(name == "seg-%d.kvs" % max(seqs[n] for n in mid) and
              new[0]["sequence"] == max(seqs[n] for n in mid),
              "the merged file is seg-SEQUENCE.kvs: %r" % new)
        for n in mid:
            check(not os.path.exists(os.path.join(d, n)),
                  "merged input %s removed" % n)
        segs[name] = merged_oracle([segs[n] for n in mid])
        check(kvseg("dump", os.path.join(d, name)).out ==
              expected_dump(segs[name]), "catalog merge dump equals "
              "the oracle (tombstones kept)")
        order = [order[0], name, order[4]]
    check(live_records() == everything, "the live records are unchanged")
    # Refusals.
    for args, rc, needle in (
            (("merge", order[0], order[2]), 2, "consecutive"),
            (("merge", "nope.kvs"), 2, "not a live segment"),
            (("merge", order[0], order[0]), 2, "twice"),
            (("merge", "--drop-tombstones", order[1], order[2]), 2,
             "oldest"),
            (("merge", "--includes-oldest"), 2, "unknown option"),
            (("list", "--profile", "bit"), 2, "merge only"),
            (("add", "--json", order[0]), 2, "list only"),
            (("frob",), 2, "unknown action"),
            (("list", "extra"), 2, "no operands")):
        r = kvseg("catalog", d, *args)
        expect_error(r, rc, "catalog %r" % (args,), needle)
    r = kvseg("catalog", path("nodir"), "list")
    expect_error(r, 4, "catalog of a missing directory")
    check(catalog_list(d)["generation"] == 4, "refusals change nothing")
    # A strong delete over everything, into another mode.
    r = kvseg("catalog", d, "merge", "all", "--drop-tombstones",
              "--framing", "raw", "--profile", "bit", "-q")
    check(r.rc == 0 and r.out == b"", "catalog merge all --drop-tombstones",
          r)
    cat = catalog_list(d)
    if check(len(cat["segments"]) == 1, "one live segment left: %r" % cat):
        name = cat["segments"][0]["name"]
        seg = os.path.join(d, name)
        check(kvseg("dump", seg).out ==
              expected_dump(merged_oracle([everything], True)),
              "strong delete leaves the live values")
        st = json.loads(kvseg("stat", "--json", seg).out)
        check(st["mode"] == "raw-bit", "catalog merge converts the mode")
        check(sorted(os.listdir(d)) == sorted(["CATALOG", "CATALOG.lock",
                                               "notes.txt", name]),
              "only the live segment is left: %r" % os.listdir(d))
    # a DIR that is not one: the message is about DIR
    r = kvseg("catalog", path("no-such-dir"), "list")
    expect_error(r, 4, "catalog of a missing directory",
                 path("no-such-dir") + ": No such file or directory")
    r = kvseg("catalog", os.path.join(d, name), "init")
    expect_error(r, 4, "catalog of a file",
                 os.path.join(d, name) + ": not a directory")
    test_catalog_conflict()
    test_catalog_merge_interrupted()


def stalled_merge(d):
    """Starts `kvseg catalog D merge` and returns (proc, master) once it
    waits with its temporary output open: it draws its first progress bar
    on a terminal whose buffer is full, and waits there until the
    terminal is read (drain_merge)."""
    master, slave = pty.openpty()
    filler = os.open(os.ttyname(slave), os.O_WRONLY | os.O_NONBLOCK |
                     os.O_NOCTTY)
    # The kernel moves a terminal's output on asynchronously: it is full
    # when writes have been refused for a while.
    refused = 0
    while refused < 20:
        try:
            os.write(filler, b"x" * 256)
            refused = 0
        except BlockingIOError:
            try:
                os.write(filler, b"x")
                refused = 0
            except BlockingIOError:
                refused += 1
                time.sleep(0.01)
    os.close(filler)
    proc = subprocess.Popen([KVSEG, "catalog", d, "merge"],
                            stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    deadline = time.monotonic() + 60
    while (time.monotonic() < deadline and proc.poll() is None and
           not any(".pub-" in n for n in os.listdir(d))):
        time.sleep(0.01)
    return proc, master


def drain_merge(proc, master):
    """Reads a stalled_merge's terminal until it ends; (stdout, tty)."""
    tty = b""
    while True:
        ready = select.select([master], [], [], 0.1)[0]
        if ready:
            chunk = read_pty(master)
            if not chunk:
                break
            tty += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read()
    proc.wait(timeout=60)
    os.close(master)
    return out, tty


def test_catalog_merge_interrupted():
    """A catalog merge killed while it runs, or once its output has its
    name but before the catalog names it, leaves nothing that recovery
    does not remove; one whose output name is taken by another process
    meanwhile leaves that file alone and publishes nothing."""
    d = path("interrupted")
    os.mkdir(d)
    for i, n in enumerate(("a.kvs", "b.kvs")):
        build(os.path.join(d, n), random_records(50, "byte", True),
              extra=("--sequence", i + 1))
    expect_rc(kvseg("catalog", d, "init"), 0, "init")
    before = catalog_list(d)
    inputs = ["CATALOG", "CATALOG.lock", "a.kvs", "b.kvs"]

    proc, master = stalled_merge(d)
    check(proc.poll() is None, "killed: the merge waits on its terminal")
    proc.kill()
    proc.wait(timeout=60)
    os.close(master)
    check(catalog_list(d) == before, "killed: the catalog is unchanged")
    check(sorted(os.listdir(d)) == inputs,
          "killed: after recovery only the catalog and the inputs are "
          "left: %r" % sorted(os.listdir(d)))

    # killed or interrupted publishing: the output is complete and has
    # its name, and the merge waits for the catalog's lock, which this
    # test holds
    for sig in (signal.SIGKILL, signal.SIGINT):
        what = "publishing (%s)" % signal.Signals(sig).name
        proc, master = stalled_merge(d)
        check(proc.poll() is None, "%s: the merge waits on its terminal"
              % what)
        lock = os.open(os.path.join(d, "CATALOG.lock"), os.O_RDWR)
        fcntl.flock(lock, fcntl.LOCK_EX)
        deadline = time.monotonic() + 60
        while (time.monotonic() < deadline and proc.poll() is None and
               not os.path.exists(os.path.join(d, "seg-2.kvs"))):
            if select.select([master], [], [], 0.01)[0]:
                read_pty(master)
        named = os.path.exists(os.path.join(d, "seg-2.kvs"))
        proc.send_signal(sig)
        proc.wait(timeout=60)
        os.close(master)
        os.close(lock)
        check(named and proc.returncode == -sig,
              "%s: the output got its name while the catalog was locked, "
              "and the signal ended the merge (%s)"
              % (what, proc.returncode))
        check(catalog_list(d) == before, "%s: the catalog is unchanged"
              % what)
        check(sorted(os.listdir(d)) == inputs,
              "%s: after recovery only the catalog and the inputs are "
              "left: %r" % (what, sorted(os.listdir(d))))

    proc, master = stalled_merge(d)
    check(proc.poll() is None, "raced: the merge waits on its terminal")
    # its output's name: seg-SEQUENCE.kvs, the newest input's sequence
    theirs = b"another process's file\n"
    with open(os.path.join(d, "seg-2.kvs"), "wb") as f:
        f.write(theirs)
    out, tty = drain_merge(proc, master)
    check(proc.returncode == 3 and b"seg-2.kvs" in tty and
          b"appeared" in tty and out == b"",
          "raced: the merge exits 3 naming the file: rc %s, %r"
          % (proc.returncode, tty[-400:]))
    check(open(os.path.join(d, "seg-2.kvs"), "rb").read() == theirs,
          "raced: the other process's file is unchanged")
    check(sorted(os.listdir(d)) == sorted(inputs + ["seg-2.kvs"]),
          "raced: no temporary file is left: %r" % sorted(os.listdir(d)))
    check(catalog_list(d) == before, "raced: the catalog is unchanged")


def test_catalog_conflict():
    """The catalog changes while a merge runs: nothing is published."""
    d = path("conflict")
    os.mkdir(d)
    for i, n in enumerate(("a.kvs", "b.kvs", "c.kvs")):
        build(os.path.join(d, n), random_records(50, "byte", True),
              extra=("--sequence", i + 1))
    os.rename(os.path.join(d, "c.kvs"), path("c.kvs"))
    expect_rc(kvseg("catalog", d, "init"), 0, "init")
    catalog = os.path.join(d, "CATALOG")
    gen1 = open(catalog, "rb").read()
    os.rename(path("c.kvs"), os.path.join(d, "c.kvs"))
    expect_rc(kvseg("catalog", d, "add", "c.kvs"), 0, "add")
    gen2 = open(catalog, "rb").read()

    def put_catalog(data):
        with open(catalog + ".swap", "wb") as f:
            f.write(data)
        os.rename(catalog + ".swap", catalog)

    put_catalog(gen1)  # at generation 1 again: a and b live
    proc, master = stalled_merge(d)
    check(proc.poll() is None, "the merge waits on its terminal")
    put_catalog(gen2)  # another process added c meanwhile
    out, tty = drain_merge(proc, master)
    check(proc.returncode == 3 and b"changed during the merge" in tty and
          out == b"", "a conflicting merge exits 3 and says so: rc %s, "
          "%r" % (proc.returncode, tty[-400:]))
    check(sorted(os.listdir(d)) == ["CATALOG", "CATALOG.lock", "a.kvs",
                                    "b.kvs", "c.kvs"],
          "the merged file is removed, the inputs kept: %r"
          % os.listdir(d))
    cat = catalog_list(d)
    check(cat["generation"] == 2 and [e["name"] for e in cat["segments"]]
          == ["a.kvs", "b.kvs", "c.kvs"], "the other change stands")


# ---- build --memory ---------------------------------------------------------


def test_build_memory():
    """Inputs far larger than --memory 4K: sorted in runs, then merged."""
    for profile, framing in MODES:
        for fmt in ("tsv", "jsonl", "nul"):
            nul = fmt == "nul"
            records = random_records(rng.randrange(300, 900),
                                     "byte" if nul else profile,
                                     framing == "typed" and not nul,
                                     nul=not nul)
            what = "build --memory 4K %s-%s from %s" % (framing, profile,
                                                         fmt)
            items = shuffled(records)
            small, big = path("mem-small.seg"), path("mem-big.seg")
            data = encode_input(fmt, items, profile)
            before = sorted(os.listdir(TMP))
            r = kvseg("build", "--memory", "4K", "--profile", profile,
                      "--framing", framing, "--input", fmt, small,
                      stdin=data)
            expect_rc(r, 0, what)
            check(kvseg("dump", small).out == expected_dump(records),
                  what + ": dump equals the oracle", r)
            r = kvseg("build", "--profile", profile, "--framing", framing,
                      "--input", fmt, big, stdin=data)
            check(open(small, "rb").read() == open(big, "rb").read(),
                  what + ": the same file as without a bound")
            after = sorted(os.listdir(TMP))
            check(after == sorted(set(before) | {"mem-small.seg",
                                                 "mem-big.seg"}),
                  what + ": no run left behind")
    # Repeated keys: in one run (lines named), across runs (key named).
    records = random_records(800, "byte", True)
    items = shuffled(records)
    k, v = items[0]
    seg = path("memdup.seg")
    before = sorted(os.listdir(TMP))
    for dup_items, needles in (
            (items[:1] + [(k, b"again")] + items[1:], ("lines 1 and 2",)),
            (items + [(k, b"again")], ("given more than once",
                                       "different --memory runs",
                                       key_text(k)))):
        data = tsv_input(dup_items, "byte")
        r = kvseg("build", "--memory", "4K", seg, stdin=data)
        expect_error(r, 3, "build --memory with a repeated key", *needles)
        check(not os.path.exists(seg), "no segment after a repeated key")
        listdir_clean(before, "build --memory with a repeated key")
        # --last-wins: the later record wins, across runs too.
        r = kvseg("build", "--memory", "4K", "--last-wins", seg,
                  stdin=data)
        want = dict(dup_items)
        check(r.rc == 0 and kvseg("dump", seg).out == expected_dump(want),
              "build --memory --last-wins keeps the later record", r)
        os.unlink(seg)
    # A later tombstone across runs wins too.
    data = tsv_input(items + [(k, None)], "byte")
    r = kvseg("build", "--memory", "4K", "--last-wins", seg, stdin=data)
    want = dict(items)
    want[k] = None
    check(r.rc == 0 and kvseg("dump", seg).out == expected_dump(want),
          "a later tombstone wins across runs", r)
    os.unlink(seg)
    # Bad input in a late run: its line is named, nothing is left.
    data = tsv_input(items, "byte")
    if not data.endswith(b"\n"):
        data += b"\n"
    data += b"bad\tx\ty\n"
    r = kvseg("build", "--memory", "4K", seg, stdin=data)
    expect_error(r, 3, "bad input after several runs",
                 "line %d" % (len(items) + 1), "second TAB")
    listdir_clean(before, "build --memory with bad input")
    # A key longer than the bound is still read whole.
    long_key = b"k" * 20000
    r = kvseg("build", "--memory", "4K", seg,
              stdin=b"a\t1\n" + long_key + b"\tv\nb\t2\n")
    check(r.rc == 0 and kvseg("dump", seg).out ==
          b"a\t1\nb\t2\n" + long_key + b"\tv\n",
          "a record longer than --memory", r)
    for bad in ("0", "1", "1023", "5X", "K", "-4K", "1.5M", "99999999999G"):
        r = kvseg("build", "--memory", bad, path("never.seg"),
                  stdin=b"a\t1\n")
        expect_error(r, 2, "build --memory %s" % bad, "--memory")
    for good in ("1024", "1k", "2M", "1G"):
        r = kvseg("build", "--memory", good, seg, stdin=b"a\t1\n")
        check(r.rc == 0, "build --memory %s" % good, r)


# ---- a segment cut short while kvseg reads it -------------------------------


def start_until(args, d, ready, stdin=None):
    """Starts kvseg ARGS in d, stdin fed from a thread, and waits until
    ready() holds or kvseg ends (120 s at most). Returns (proc, caught,
    done): caught when kvseg still runs and ready() held; done() waits for
    its end and gives (exit status, stderr)."""
    proc = subprocess.Popen([KVSEG] + [str(a) for a in args], cwd=d,
                            stdin=subprocess.PIPE if stdin else
                            subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def feed():
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:  # it ended while reading
            pass
    feeder = threading.Thread(target=feed) if stdin else None
    if feeder:
        feeder.start()
    deadline = time.monotonic() + 120
    caught = False
    while proc.poll() is None and time.monotonic() < deadline:
        if ready():
            caught = proc.poll() is None
            break

    def done():
        err = proc.stderr.read().decode("utf-8", "replace")
        rc = proc.wait()
        if feeder:
            feeder.join()
        return rc, err
    return proc, caught, done


def cut_while_stopped(args, d, ready, victim, stdin=None):
    """Runs kvseg ARGS in d, stops it (SIGSTOP) as soon as ready() holds,
    truncates victim (a name, or a function giving it then) to 4096 bytes
    and lets kvseg go on. Returns (rc, stderr), or None when kvseg ended
    before it could be stopped or succeeded (the cut came too late)."""
    proc, caught, done = start_until(args, d, ready, stdin)
    if not caught:
        if proc.poll() is None:
            proc.kill()
        done()
        return None
    os.kill(proc.pid, signal.SIGSTOP)
    os.truncate(os.path.join(d, victim() if callable(victim) else victim),
                4096)
    os.kill(proc.pid, signal.SIGCONT)
    rc, err = done()
    # success: kvseg had read all it needed of victim before the cut
    return None if rc == 0 else (rc, err)


def expect_cut_error(rc, err, verb, victim, what):
    check(rc == 3, "%s: exit %d, not 3: %s" % (what, rc, err.strip()))
    check(err.startswith("kvseg %s: " % verb) and victim in err and
          "cut short" in err and "damaged segment" in err and
          err.count("\n") == 1, "%s: the message %r" % (what, err))
    for word in ("Sanitizer", "runtime error:", "Bus error"):
        check(word not in err, "%s: %r on stderr" % (what, word))


def test_cut_short():
    """A segment file truncated in place while kvseg reads it (another
    process's doing): one message naming the file and exit 3, never "Bus
    error"; no output file, temporary file or run left behind, and the
    files kvseg did not write untouched."""
    d = path("cut")
    os.mkdir(d)
    n = 300000
    lines = b"".join(b"key%09d\tvalue-of-%09d\n" % (i, i) for i in range(n))
    r = kvseg("build", os.path.join(d, "a.seg"), stdin=lines)
    expect_rc(r, 0, "build a.seg")
    # within a's keys: a merge reads a.seg to its end
    r = kvseg("build", os.path.join(d, "b.seg"),
              stdin=b"".join(b"key%09d\tb\n" % i
                             for i in range(0, n, 3)))
    expect_rc(r, 0, "build b.seg")
    b_bytes = open(os.path.join(d, "b.seg"), "rb").read()
    a_bytes = open(os.path.join(d, "a.seg"), "rb").read()

    # dump, blocked on a full pipe: what it printed is the dump's start
    proc = subprocess.Popen([KVSEG, "dump", "a.seg"], cwd=d,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = proc.stdout.read(1 << 16)
    os.truncate(os.path.join(d, "a.seg"), 4096)
    out = head + proc.stdout.read()
    err = proc.stderr.read().decode("utf-8", "replace")
    rc = proc.wait()
    expect_cut_error(rc, err, "dump", "a.seg", "dump of a file cut short")
    check(len(out) < len(lines) and lines.startswith(out[:out.rfind(b"\n")
                                                         + 1]),
          "dump printed %d bytes: a start of the dump" % len(out))

    # merge, stopped once its temporary output exists: none is left
    for attempt in range(6):
        with open(os.path.join(d, "a.seg"), "wb") as f:
            f.write(a_bytes)
        got = cut_while_stopped(
            ["merge", "-o", "out.seg", "a.seg", "b.seg"], d,
            lambda: any(".tmp-" in x for x in os.listdir(d)), "a.seg")
        if got is not None:
            break
        if os.path.exists(os.path.join(d, "out.seg")):
            os.unlink(os.path.join(d, "out.seg"))
    if check(got is not None, "merge: stopped while it ran"):
        expect_cut_error(*got, "merge", "a.seg", "merge of a file cut short")
        check(sorted(os.listdir(d)) == ["a.seg", "b.seg"] and
              open(os.path.join(d, "b.seg"), "rb").read() == b_bytes,
              "merge: no output, nothing hidden left, the other input "
              "unchanged: %r" % os.listdir(d))

    # catalog merge: no output and no temporary file is left, and the
    # catalog stays as it was
    c = path("cutcat")
    os.mkdir(c)
    for name, data in (("a.seg", a_bytes), ("b.seg", b_bytes)):
        with open(os.path.join(c, name), "wb") as f:
            f.write(data)
    r = kvseg("catalog", c, "init")
    expect_rc(r, 0, "catalog init")
    before = kvseg("catalog", c, "list").out
    for attempt in range(6):
        with open(os.path.join(c, "a.seg"), "wb") as f:
            f.write(a_bytes)
        got = cut_while_stopped(
            ["catalog", c, "merge", "all"], c,
            lambda: any(".pub-" in x for x in os.listdir(c)), "a.seg")
        if got is not None:
            break
        # merged and published before the cut: start again
        shutil.rmtree(c)
        os.mkdir(c)
        for name, data in (("a.seg", a_bytes), ("b.seg", b_bytes)):
            with open(os.path.join(c, name), "wb") as f:
                f.write(data)
        kvseg("catalog", c, "init")
    if check(got is not None, "catalog merge: stopped while it ran"):
        expect_cut_error(*got, "catalog", "a.seg",
                         "catalog merge of a file cut short")
        check(sorted(os.listdir(c)) ==
              ["CATALOG", "CATALOG.lock", "a.seg", "b.seg"],
              "catalog merge: no output, nothing hidden "
              "left: %r" % os.listdir(c))
        with open(os.path.join(c, "a.seg"), "wb") as f:
            f.write(a_bytes)
        check(kvseg("catalog", c, "list").out == before,
              "catalog merge: the catalog is unchanged")

    # build --memory, stopped in its merge of the runs: no run is left
    os.unlink(os.path.join(d, "a.seg"))
    for attempt in range(6):
        got = cut_while_stopped(
            ["build", "--memory", "1M", "c.seg"], d,
            lambda: any(".merge-" in x and ".tmp-" in x
                        for x in os.listdir(d)),
            # the input is sorted: the merge reads the runs one after
            # the other, the last one last
            lambda: max((x for x in os.listdir(d)
                         if ".run-" in x and ".tmp-" not in x),
                        key=lambda x: int(x.rsplit("-", 1)[1])),
            stdin=lines)
        if got is not None:
            break
        if os.path.exists(os.path.join(d, "c.seg")):
            os.unlink(os.path.join(d, "c.seg"))
    if check(got is not None, "build --memory: stopped in its merge"):
        expect_cut_error(*got, "build", ".c.seg.run-",
                         "build whose run is cut short")
        check(sorted(os.listdir(d)) == ["b.seg"],
              "build: no output, no run, nothing hidden left: %r"
              % os.listdir(d))
    print("  cut short: dump, merge, catalog merge and build --memory "
          "stopped and cut")


def interrupt_when(args, d, ready, sig, stdin=None):
    """Runs kvseg ARGS in d and sends it sig as soon as ready() holds.
    Returns its exit status, or None when it ended before that."""
    proc, caught, done = start_until(args, d, ready, stdin)
    if caught:
        proc.send_signal(sig)
    elif proc.poll() is None:
        proc.kill()
    rc, _ = done()
    return rc if caught else None


def test_interrupted():
    """kvseg interrupted (Ctrl-C's SIGINT, SIGTERM, SIGHUP) while it
    builds or merges: it ends by the signal, and leaves no output, no
    hidden temporary file and no run behind."""
    d = path("interrupt")
    os.mkdir(d)
    n = 300000
    lines = b"".join(b"key%09d\tvalue-of-%09d\n" % ((i * 7919) % n, i)
                     for i in range(n))
    r = kvseg("build", os.path.join(d, "a.seg"), stdin=lines)
    expect_rc(r, 0, "build a.seg")
    r = kvseg("build", os.path.join(d, "b.seg"),
              stdin=b"".join(b"key%09d\tb\n" % i for i in range(0, n, 3)))
    expect_rc(r, 0, "build b.seg")
    before = sorted(os.listdir(d))

    def has(*parts):
        return lambda: any(all(p in x for p in parts) for x in os.listdir(d))

    cases = [
        ("build --memory, writing its runs", signal.SIGINT,
         ["build", "--memory", "1M", "c.seg"], has(".run-"), lines),
        ("build --memory, merging its runs", signal.SIGTERM,
         ["build", "--memory", "1M", "c.seg"], has(".merge-", ".tmp-"),
         lines),
        ("build", signal.SIGHUP, ["build", "c.seg"], has(".tmp-"), lines),
        ("merge", signal.SIGINT,
         ["merge", "--force", "-o", "c.seg", "a.seg", "b.seg"],
         has(".tmp-"), None),
    ]
    for what, sig, args, ready, stdin in cases:
        for attempt in range(5):
            rc = interrupt_when(args, d, ready, sig, stdin)
            if rc is not None:
                break
            for x in set(os.listdir(d)) - set(before):
                os.unlink(os.path.join(d, x))  # it ended first: again
        if check(rc is not None, "%s: interrupted while it ran" % what):
            check(rc == -sig, "%s: ends by signal %d, not status %d"
                  % (what, sig, rc))
            check(sorted(os.listdir(d)) == before,
                  "%s: nothing left behind: %r"
                  % (what, sorted(set(os.listdir(d)) - set(before))))
        for x in set(os.listdir(d)) - set(before):
            os.unlink(os.path.join(d, x))
    print("  interrupted: build --memory (runs, merge), build, merge")


def test_catalog_view():
    """catalog get and scan read the live segments' merged view: each
    key's newest binding, against merged_oracle; they change nothing in
    DIR, and read a directory without a catalog without making one."""
    for rnd in range(6):
        profile = ("byte", "bit")[rnd % 2]
        n = rng.randrange(1, 6)
        inputs = random_overlapping_inputs(n, profile, True)
        d = path("cat-view-%d" % rnd)
        os.mkdir(d)
        for i, recs in enumerate(inputs):
            # byte keys fit either profile: mix them in one catalog
            prof = profile if profile == "bit" else rng.choice(
                ("byte", "bit"))
            framing = "raw" if (None not in recs.values() and
                                rng.random() < 0.5) else "typed"
            build(os.path.join(d, "s%d.kvs" % i), recs, prof, framing,
                  extra=("--sequence", str(i)))
        if rnd % 3:  # else: no catalog, read as init would make it
            expect_rc(kvseg("catalog", d, "init"), 0, "catalog init")
        before = sorted(os.listdir(d))
        oracle = merged_oracle(inputs)
        live = {k: v for k, v in oracle.items() if v is not None}
        what = "round %d (%d segments, %s)" % (rnd, n, profile)

        r = kvseg("catalog", d, "scan")
        check(r.rc == 0 and r.out == expected_dump(live),
              what + ": catalog scan is the newest-wins view", r)
        r = kvseg("catalog", d, "scan", "--tombstones")
        check(r.rc == 0 and r.out == expected_dump(oracle),
              what + ": catalog scan --tombstones shows them", r)
        for _ in range(5):
            prefix = scan_bound(oracle, profile)
            r = kvseg("catalog", d, "scan", "--prefix", key_text(prefix))
            want = {k: v for k, v in live.items() if k.startswith(prefix)}
            check(r.rc == 0 and r.out == expected_dump(want),
                  what + ": catalog scan --prefix %r" % key_text(prefix), r)

        keys = rng.sample(list(oracle), min(20, len(oracle)))
        for key in keys:
            r = kvseg("catalog", d, "get", "--", key_text(key))
            if oracle[key] is None:
                expect_error(r, 1, what + ": catalog get of a deleted key",
                             "deleted (a tombstone)")
                check(r.out == b"", what + ": no value for a deleted key")
            else:
                check(r.rc == 0 and r.out == oracle[key],
                      what + ": catalog get is the newest value", r)
        absent = [k for k in (scan_bound(oracle, profile) + "1"
                              for _ in range(10)) if k not in oracle]
        for key in absent[:3]:
            r = kvseg("catalog", d, "get", "--", key_text(key))
            expect_error(r, 1, what + ": catalog get of an absent key",
                         "not found")
            r = kvseg("catalog", d, "get", "-q", "--", key_text(key))
            check(r.rc == 1 and r.err == "",
                  what + ": catalog get -q is quiet", r)
        # several keys: a TSV line per key found, in the order given
        many = keys[:6] + absent[:2]
        rng.shuffle(many)
        r = kvseg("catalog", d, "get", "-q", "--",
                  *[key_text(k) for k in many])
        want = "".join(canonical_line(k, oracle[k]) for k in many
                       if oracle.get(k) is not None).encode("utf-8")
        missing = any(oracle.get(k) is None for k in many)
        check(r.rc == (1 if missing else 0) and r.out == want,
              what + ": catalog get of several keys", r)
        check(sorted(os.listdir(d)) == before,
              what + ": get and scan change nothing in DIR: %r"
              % os.listdir(d))


def test_catalog_first():
    """A directory without a catalog (FORMAT.md §10.4): a segment cut short
    stops init, list and add (exit 3, naming it) before anything is
    created; other files are left alone and the segments named."""
    d = path("cat-first")
    os.mkdir(d)
    build(os.path.join(d, "ok.kvs"), {bits_of(b"k"): b"v"})
    with open(os.path.join(d, "ok.kvs"), "rb") as f:
        data = f.read()
    with open(os.path.join(d, "cut.kvs"), "wb") as f:
        f.write(data[:200])
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("not a segment\n")
    before = sorted(os.listdir(d))
    for verb in (["init"], ["list"], ["add", "ok.kvs"]):
        r = kvseg("catalog", d, *verb)
        expect_error(r, 3, "catalog %s beside a segment cut short" % verb[0],
                     "cut.kvs", "200 bytes", "no catalog is made")
        check(sorted(os.listdir(d)) == before,
              "catalog %s created nothing: %r" % (verb[0], os.listdir(d)))
    os.rename(os.path.join(d, "cut.kvs"), path("cut-aside.kvs"))
    r = kvseg("catalog", d, "list")
    check(r.rc == 0 and r.out.startswith(b"generation 1\nok.kvs\t"),
          "init names the segment, not notes.txt", r)


TESTS = [test_help, test_modes_and_formats, test_text_output,
         test_dump_across_modes,
         test_get, test_scan_filters, test_duplicates, test_bad_input,
         test_empty_and_bits, test_verify_and_corruption,
         test_damage_mid_stream, test_stat,
         test_bad_arguments, test_large, test_merge, test_catalog,
         test_catalog_view, test_catalog_first,
         test_build_memory, test_cut_short, test_interrupted]


def main():
    global TMP
    if not KVSEG or not os.access(KVSEG, os.X_OK):
        sys.exit("usage: test_kvseg.py PATH/TO/kvseg")
    print("seed %d (KVSEG_TEST_SEED=%d reproduces)" % (SEED, SEED))
    TMP = tempfile.mkdtemp(prefix="kvseg-cli-")
    try:
        for t in TESTS:
            start = time.monotonic()
            before = failures
            t()
            print("%s %s (%.1f s)" % ("ok  " if failures == before
                                      else "FAIL", t.__name__,
                                      time.monotonic() - start), flush=True)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print("%d checks, %d failures (seed %d)" % (checks, failures, SEED))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
