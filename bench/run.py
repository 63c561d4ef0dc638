#!/usr/bin/env python3
"""run.py - run a segfs benchmark as fresh processes and summarize it.

For each workload there are P rounds (--processes, default 3). In each round
every variant runs once, as a fresh process (from a fresh copy of its program
file), and the order of the variants is rotated from one round to the next
(A/B, B/A, A/B ... for two variants). Each
process prints one CSV row per observation, warm-ups included and flagged;
all rows go into one CSV file, with a metadata JSON file next to it (host,
compilers, git revision, program hashes, the schedule).

The summary gives, per workload and variant, the median of the process
medians of the measured (non-warm-up) iterations and the minimum-maximum of
those process medians; with --baseline, the ratio to the baseline variant of
the same workload and whether the two process-median ranges overlap.

Examples (bench/README.md has more):
  bench/run.py build/bench/bench_codes
  bench/run.py --variant kvseg=build/bench/bench_ef \\
               --variant sdsl=build/bench/bench_ef_sdsl --baseline kvseg
  bench/run.py --variant typed-byte@old=../old/build/bench/bench_merge \\
               --variant typed-byte@new=build/bench/bench_merge \\
               --baseline typed-byte@old
  bench/run.py --summarize bench/results/ef-20260101T000000Z.csv \\
               --baseline kvseg

Python 3 standard library only.
"""

import argparse
import csv
import datetime
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEADER = ["bench", "workload", "variant", "process", "iteration", "warmup",
          "metric", "value", "unit"]
BENCH_DIR = Path(__file__).resolve().parent


def die(message):
    print(f"run.py: {message}", file=sys.stderr)
    sys.exit(1)


# ---- asking a program what it offers -------------------------------------

class Program:
    def __init__(self, path):
        self.path = path
        try:
            out = subprocess.run([path, "--list"], check=True,
                                 capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            die(f"cannot list {path}: {e}")
        self.bench, self.compiler = None, None
        self.workloads, self.variants = [], []
        for line in out.splitlines():
            key, _, value = line.partition(" ")
            if key == "bench":
                self.bench = value
            elif key == "compiler":
                self.compiler = value
            elif key == "workload":
                self.workloads.append(value)
            elif key == "variant":
                self.variants.append(value)
        if not self.bench or not self.workloads or not self.variants:
            die(f"{path} --list printed no bench, workloads or variants")


def program_variant(name):
    """The program's own name of variant NAME or NAME@TAG: a tag tells
    apart the same variant of two builds (typed-byte@old=old/bench_merge,
    typed-byte@new=new/bench_merge), which then run paired in one run."""
    return name.partition("@")[0]


def resolve(args):
    """Returns the bench name, [(variant, Program)] and the workloads."""
    programs = {}

    def program(path):
        if path not in programs:
            programs[path] = Program(path)
        return programs[path]

    variants = []
    if args.variant:
        for spec in args.variant:
            name, sep, path = spec.partition("=")
            if not sep:
                if not args.program:
                    die(f"--variant {name}: give NAME=PROGRAM or a PROGRAM")
                path = args.program
            variants.append((name, program(path)))
    elif args.program:
        p = program(args.program)
        variants = [(name, p) for name in p.variants]
    else:
        die("give a PROGRAM or --variant NAME=PROGRAM (see --help)")

    names = [name for name, _ in variants]
    if len(set(names)) != len(names):
        die(f"a variant is named twice: {' '.join(names)}")
    for name, p in variants:
        if program_variant(name) not in p.variants:
            die(f"{p.path} does not offer variant "
                f"'{program_variant(name)}' here "
                f"(it offers: {' '.join(p.variants)})")
    benches = {p.bench for p in programs.values()}
    if len(benches) != 1:
        die(f"the programs belong to different benchmarks: {benches}")

    offered = []
    for _, p in variants:
        offered += [w for w in p.workloads if w not in offered]
    if args.workload:
        for w in args.workload:
            if w not in offered:
                die(f"no program offers workload '{w}' "
                    f"(offered: {' '.join(offered)})")
        workloads = args.workload
    else:
        workloads = offered
    return benches.pop(), variants, workloads


# ---- metadata --------------------------------------------------------------

def read_text(path):
    try:
        return Path(path).read_text()
    except OSError:
        return None


def cpu_model():
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Processor", "cpu model"):
            return value.strip()
    return platform.processor() or None


def loadavg():
    text = read_text("/proc/loadavg")
    return text.split()[:3] if text else None


def git(directory, *argv):
    try:
        return subprocess.run(["git", "-C", str(directory), *argv],
                              check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def compiler_version(argv):
    try:
        out = subprocess.run([*argv, "--version"], check=True,
                             capture_output=True, text=True).stdout
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.CalledProcessError):
        return None


def meson_info(program_path):
    """The compile commands and build options of a program built by meson,
    from the meson-info directory of its build dir."""
    program = Path(program_path).resolve()
    for d in program.parents:
        info = d / "meson-info"
        if not info.is_dir():
            continue
        out = {"build_dir": str(d)}
        try:
            about = json.loads((info / "meson-info.json").read_text())
            out["source_dir"] = about["directories"]["source"]
            opts = json.loads((info / "intro-buildoptions.json").read_text())
            keep = ("buildtype", "optimization", "debug", "b_ndebug",
                    "b_lto", "b_pgo", "c_args", "cpp_args", "werror",
                    "peers")
            out["options"] = {o["name"]: o["value"] for o in opts
                              if o["name"] in keep}
            targets = json.loads((info / "intro-targets.json").read_text())
            for t in targets:
                if str(program) in t.get("filename", []):
                    out["compile"] = [
                        {"language": s["language"],
                         "compiler": s["compiler"],
                         "version": compiler_version(s["compiler"]),
                         "parameters": s["parameters"]}
                        for s in t.get("target_sources", [])]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return out
    return None


def metadata(args, bench, variants, workloads, csv_path, schedule):
    governor = read_text("/sys/devices/system/cpu/cpu0/cpufreq/"
                         "scaling_governor")
    programs = {}
    sources = []
    for _, p in variants:
        meson = meson_info(p.path)
        programs[p.path] = {"sha256": sha256(p.path),
                            "compiler": p.compiler,
                            "meson": meson}
        src = (meson or {}).get("source_dir", str(BENCH_DIR))
        if src not in sources:
            sources.append(src)
    revisions = {}
    for src in sources:  # the source trees the programs were built from
        status = git(src, "status", "--porcelain")
        revisions[src] = {"revision": git(src, "rev-parse", "HEAD"),
                          "dirty": bool(status) if status is not None
                          else None}
    return {
        "bench": bench,
        "csv": csv_path.name,
        "created_utc": datetime.datetime.now(datetime.timezone.utc)
        .isoformat(timespec="seconds"),
        "command": sys.argv,
        "processes": args.processes,
        "warmups": args.warmups,
        "iterations": args.iterations,
        "cpu": args.cpu,
        "variants": {name: p.path for name, p in variants},
        "workloads": workloads,
        "host": {
            "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(),
            "kernel": f"{platform.system()} {platform.release()}",
            "machine": platform.machine(),
            "scaling_governor": governor.strip() if governor else None,
            "loadavg_start": loadavg(),
            "python": platform.python_version(),
        },
        "git": revisions,
        "programs": programs,
        "schedule": schedule,
    }


# ---- running ---------------------------------------------------------------

def rotate(items, k):
    k %= len(items)
    return items[k:] + items[:k]


def plan(variants, workloads, processes):
    """The runs in order: for each workload, `processes` rounds, each
    running every variant that offers the workload once, rotated."""
    runs = []
    for w in workloads:
        vs = [(name, p) for name, p in variants if w in p.workloads]
        for r in range(processes):
            for pos, (name, p) in enumerate(rotate(vs, r)):
                runs.append({"workload": w, "variant": name,
                             "program": p.path, "round": r,
                             "position": pos})
    for i, run in enumerate(runs, 1):
        run["process"] = i
    return runs


def fresh_copy(program, tmpdir, process):
    """A new file with the program's bytes and name, for one process:
    where a program file's pages sit in the page cache is fixed while it
    stays cached and can move its timings for a whole run (bench/README.md,
    "A fresh copy of the program per process")."""
    d = Path(tmpdir) / str(process)
    d.mkdir()
    dst = d / Path(program).name
    with open(program, "rb") as src, open(dst, "wb") as out:
        for block in iter(lambda: src.read(1 << 20), b""):
            out.write(block)
    os.chmod(dst, 0o755)
    return dst


def run_one(run, args, bench, writer, tmpdir):
    exe = fresh_copy(run["program"], tmpdir, run["process"])
    cmd = [str(exe), "--workload", run["workload"],
           "--variant", program_variant(run["variant"]),
           "--warmups", str(args.warmups),
           "--iterations", str(args.iterations),
           "--process", str(run["process"])]
    pin = None
    if args.cpu is not None:
        def pin():
            os.sched_setaffinity(0, {args.cpu})
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              preexec_fn=pin)
    finally:
        exe.unlink()
        exe.parent.rmdir()
    cmd[0] = run["program"]  # for the messages: the program run
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        die(f"process {run['process']} failed ({proc.returncode}): "
            f"{' '.join(cmd)}")
    if proc.stderr:
        sys.stderr.write(proc.stderr)
    rows = list(csv.reader(proc.stdout.splitlines()))
    if not rows or rows[0] != HEADER:
        die(f"process {run['process']} printed no CSV header: "
            f"{' '.join(cmd)}")
    expect = [bench, run["workload"], program_variant(run["variant"]),
              str(run["process"])]
    measured = 0
    for row in rows[1:]:
        if len(row) != len(HEADER) or row[:4] != expect or \
                row[5] not in ("0", "1"):
            die(f"process {run['process']} printed a bad row: {row}")
        try:
            float(row[7])
        except ValueError:
            die(f"process {run['process']} printed a bad value: {row}")
        measured += row[5] == "0"
        row[2] = run["variant"]
        writer.writerow(row)
    if measured == 0:
        die(f"process {run['process']} printed no measured row")
    return len(rows) - 1


# ---- summary ---------------------------------------------------------------

def fmt(v):
    a = abs(v)
    if a >= 1000:
        return f"{v:.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 10:
        return f"{v:.2f}"
    return f"{v:.3f}"


def summarize(rows, baseline=None, out=sys.stdout):
    """rows: dicts with the CSV columns. Prints one line per workload,
    variant and metric, in order of first appearance."""
    workloads, variants, metrics = [], [], []
    warmups = measured = 0
    benches = []
    for r in rows:
        if r["bench"] not in benches:
            benches.append(r["bench"])
        for lst, key in ((workloads, "workload"), (variants, "variant"),
                         (metrics, ("metric", "unit"))):
            v = tuple(r[k] for k in key) if isinstance(key, tuple) \
                else r[key]
            if v not in lst:
                lst.append(v)
        if r["warmup"] == "1":
            warmups += 1
        else:
            measured += 1
    if not measured:
        print("no measured rows", file=out)
        return

    proc_medians = measured_medians(rows)
    stats = {}
    for key, procs in proc_medians.items():
        medians = list(procs.values())
        stats[key] = (statistics.median(medians), min(medians),
                      max(medians), len(medians))
    paired = paired_ratios(proc_medians, baseline) if baseline else {}
    nproc = len({(r["workload"], r["variant"], r["process"]) for r in rows})
    print(f"{', '.join(benches)}: {nproc} processes, {measured} measured "
          f"rows, {warmups} warm-up rows excluded. Median of process "
          f"medians [min\u2013max of process medians].", file=out)

    head = ["workload", "variant", "metric", "median [min\u2013max]",
            "unit", "procs"]
    if baseline:
        head += [f"/{baseline}", "ranges", "paired [min\u2013max]"]
    table = [head]
    for w in workloads:
        for metric, unit in metrics:
            base = stats.get((w, baseline, metric, unit))
            for v in variants:
                s = stats.get((w, v, metric, unit))
                if s is None:
                    continue
                med, lo, hi, n = s
                line = [w, v, metric,
                        f"{fmt(med)} [{fmt(lo)}\u2013{fmt(hi)}]", unit,
                        str(n)]
                if baseline:
                    if v == baseline:
                        line += ["1.000\u00d7", "baseline", ""]
                    elif base is None or base[0] == 0:
                        line += ["-", "-", "-"]
                    else:
                        ranges = "overlap" if lo <= base[2] and \
                            base[1] <= hi else "disjoint"
                        pr = paired.get((w, v, metric, unit))
                        line += [f"{med / base[0]:.3f}\u00d7", ranges,
                                 f"{pr[0]:.3f}\u00d7 [{pr[1]:.3f}\u2013"
                                 f"{pr[2]:.3f}]" if pr else "-"]
                table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.ljust(wd) for c, wd in zip(row, widths)).rstrip(),
              file=out)
    if baseline:
        print(f"/{baseline}: this variant's median divided by {baseline}'s "
              f"(for ns a ratio above 1 is slower, for GB/s faster); "
              f"ranges: whether the process-median ranges overlap; "
              f"paired: the median [min\u2013max] over rounds of the "
              f"ratio of the two process medians of one round (processes "
              f"run back to back, so a slow spell of the machine "
              f"affects both).",
              file=out)


def measured_medians(rows):
    """(workload, variant, metric, unit) -> process -> the median of its
    measured (not warm-up) rows."""
    per_process = {}
    for r in rows:
        if r["warmup"] != "1":
            key = (r["workload"], r["variant"], r["metric"], r["unit"])
            per_process.setdefault(key, {}).setdefault(r["process"], []) \
                .append(float(r["value"]))
    return {key: {p: statistics.median(v) for p, v in procs.items()}
            for key, procs in per_process.items()}


# The targets of the issues, as bench/README.md states them.
MERGE_MODES = ("typed-byte", "raw-byte", "typed-bit", "raw-bit")
MERGE_FASTER_THAN_LEVELDB = 5.0  # every row, every mode
MERGE_FF16_BYTE_PER_FLOOR = 3.0  # FF16 rows, byte modes
MERGE_BIT_PER_BYTE = 2.0         # each bit mode against its byte mode
CODES_MAX_NS = 3.0               # each of seed 001's count workloads
CODES_WORKLOADS = ("eg0-small", "eg0-wide", "eg3", "g7")


def targets(rows, out=sys.stdout):
    """Prints each target of the merge or count benchmark against the
    rows, a cell with * where it is missed and - where the rows cannot
    tell (a variant missing); returns the number missed or not checked.
    Merge ratios are paired (see summarize), so both variants must have
    run in the same rounds."""
    pm = measured_medians(rows)
    bench = rows[0]["bench"] if rows else ""
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    missed = unchecked = 0
    table = []
    if bench == "codes":
        variants = list(dict.fromkeys(r["variant"] for r in rows))
        workloads += [w for w in CODES_WORKLOADS if w not in workloads]
        table.append(["workload"] + [f"{v} (ns)" for v in variants])
        for w in workloads:
            line = [w]
            for v in variants:
                procs = pm.get((w, v, "decode", "ns/count"))
                if not procs:
                    unchecked += w in CODES_WORKLOADS
                    line.append("-")
                    continue
                med = statistics.median(procs.values())
                bad = w in CODES_WORKLOADS and med > CODES_MAX_NS
                missed += bad
                line.append(f"{fmt(med)}{'*' if bad else ''}")
            table.append(line)
        note = (f"target: {', '.join(CODES_WORKLOADS)} at most "
                f"{CODES_MAX_NS:g} ns per count (median of process "
                f"medians); other workloads are shown, not judged")
    elif bench == "merge":
        vs_leveldb = paired_ratios(pm, "leveldb")
        vs_floor = paired_ratios(pm, "floor")
        vs_byte = {b: paired_ratios(pm, b)
                   for b in ("typed-byte", "raw-byte")}
        table.append(["workload"] + [f"leveldb/{m}" for m in MERGE_MODES] +
                     ["typed-byte/floor", "raw-byte/floor",
                      "typed-bit/byte", "raw-bit/byte"])

        def cell(ratio, limit, above_fails):
            nonlocal missed, unchecked
            if ratio is None:
                unchecked += 1
                return "-"
            bad = ratio > limit if above_fails else ratio < limit
            missed += bad
            return f"{ratio:.2f}{'*' if bad else ''}"

        for w in workloads:
            line = [w]
            unit = rows_unit(rows, w)
            for m in MERGE_MODES:
                pr = vs_leveldb.get((w, m, "time", unit))
                line.append(cell(1 / pr[0] if pr else None,
                                 MERGE_FASTER_THAN_LEVELDB, False))
            for m in ("typed-byte", "raw-byte"):
                pr = vs_floor.get((w, m, "time", unit))
                line.append(cell(pr[0] if pr else None,
                                 MERGE_FF16_BYTE_PER_FLOOR, True)
                            if "-ff16-" in w else "n/a")
            for bit, byte in (("typed-bit", "typed-byte"),
                              ("raw-bit", "raw-byte")):
                pr = vs_byte[byte].get((w, bit, "time", unit))
                line.append(cell(pr[0] if pr else None, MERGE_BIT_PER_BYTE,
                                 True))
            table.append(line)
        note = (f"targets: leveldb/MODE (LevelDB's time over the mode's) at "
                f"least {MERGE_FASTER_THAN_LEVELDB:g} on every row; on the "
                f"FF16 rows BYTE/floor at most "
                f"{MERGE_FF16_BYTE_PER_FLOOR:g}; BIT/byte at most "
                f"{MERGE_BIT_PER_BYTE:g}, on the workloads the CSV holds. "
                f"Each cell is the paired ratio (median over rounds); n/a: "
                f"no target")
    else:
        die(f"no targets are known for the '{bench}' benchmark "
            f"(merge and codes have them)")
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(wd) for c, wd in zip(row, widths)).rstrip(),
              file=out)
    print(f"{note}; * missed: {missed}; - not checked (a variant did not "
          f"run): {unchecked}.", file=out)
    return missed + unchecked


def rows_unit(rows, workload):
    """The unit of a workload's time rows."""
    for r in rows:
        if r["workload"] == workload and r["metric"] == "time":
            return r["unit"]
    return ""


def paired_ratios(proc_medians, baseline):
    """(workload, variant, metric, unit) -> (median, min, max) of the
    per-round ratios of the variant's process median to the baseline's.
    Processes are numbered in the order they ran; a workload's rounds are
    consecutive and each has one process of every variant, so the i-th
    process of a variant and the i-th of the baseline (by number) belong
    to the same round."""
    out = {}
    for (w, v, metric, unit), procs in proc_medians.items():
        base = proc_medians.get((w, baseline, metric, unit))
        if v == baseline or not base or len(base) != len(procs):
            continue
        mine = [procs[p] for p in sorted(procs, key=int)]
        theirs = [base[p] for p in sorted(base, key=int)]
        ratios = [a / b for a, b in zip(mine, theirs) if b != 0]
        if ratios:
            out[(w, v, metric, unit)] = (statistics.median(ratios),
                                         min(ratios), max(ratios))
    return out


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != HEADER:
            die(f"{path}: not a benchmark CSV (header {reader.fieldnames})")
        return list(reader)


# ---- main ------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See bench/README.md.")
    ap.add_argument("program", nargs="?",
                    help="benchmark program; without --variant, all the "
                         "variants it offers are run")
    ap.add_argument("--variant", action="append",
                    metavar="NAME[@TAG][=PROGRAM]",
                    help="a variant to run, from PROGRAM (default: the "
                         "positional program); repeat for each variant. "
                         "NAME@TAG runs the program's variant NAME under "
                         "the name NAME@TAG, to pair two builds")
    ap.add_argument("--workload", action="append", metavar="NAME",
                    help="run only this workload (repeatable; default all)")
    ap.add_argument("-p", "--processes", type=int, default=3,
                    help="fresh processes per workload and variant "
                         "(rounds; default 3)")
    ap.add_argument("-w", "--warmups", type=int, default=1,
                    help="warm-up observations per process, excluded "
                         "(default 1)")
    ap.add_argument("-n", "--iterations", type=int, default=5,
                    help="measured observations per process (default 5)")
    ap.add_argument("--cpu", type=int, metavar="N",
                    help="run every process on CPU N only (see "
                         "bench/README.md, Method)")
    ap.add_argument("--csv", type=Path,
                    help="output CSV (default bench/results/"
                         "<bench>-<UTC timestamp>.csv)")
    ap.add_argument("--baseline", metavar="VARIANT",
                    help="print ratios to this variant")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the schedule and exit")
    ap.add_argument("--summarize", type=Path, metavar="CSV",
                    help="only print the summary of an existing CSV")
    ap.add_argument("--targets", type=Path, metavar="CSV",
                    help="only check an existing merge or codes CSV "
                         "against the issues' targets (exit status 1 if "
                         "any is missed or cannot be checked)")
    args = ap.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under | head
    try:
        sys.stdout.reconfigure(errors="replace")
    except AttributeError:
        pass

    if args.targets:
        sys.exit(1 if targets(read_csv(args.targets)) else 0)
    if args.summarize:
        rows = read_csv(args.summarize)
        if args.baseline and args.baseline not in {r["variant"]
                                                   for r in rows}:
            die(f"no variant '{args.baseline}' in {args.summarize}")
        summarize(rows, args.baseline)
        return
    if args.processes < 1 or args.iterations < 1 or args.warmups < 0:
        die("--processes and --iterations must be >= 1, --warmups >= 0")
    if args.cpu is not None and args.cpu not in os.sched_getaffinity(0):
        die(f"--cpu {args.cpu}: not a CPU this process may run on "
            f"({sorted(os.sched_getaffinity(0))})")

    bench, variants, workloads = resolve(args)
    if args.baseline and args.baseline not in [n for n, _ in variants]:
        die(f"--baseline {args.baseline} is not one of the variants")
    runs = plan(variants, workloads, args.processes)
    if args.dry_run:
        for r in runs:
            print(f"{r['process']:4d}  {r['workload']:<18} "
                  f"{r['variant']:<16} round {r['round']}  {r['program']}")
        return

    stamp = datetime.datetime.now(datetime.timezone.utc) \
        .strftime("%Y%m%dT%H%M%SZ")
    csv_path = args.csv or BENCH_DIR / "results" / f"{bench}-{stamp}.csv"
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path = csv_path.with_suffix(".json")
    meta = metadata(args, bench, variants, workloads, csv_path, runs)
    meta["finished_utc"] = None  # stays null if a process fails
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")

    with open(csv_path, "w", newline="") as f, \
            tempfile.TemporaryDirectory(prefix="segfs-run-") as tmpdir:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        for r in runs:
            print(f"[{r['process']}/{len(runs)}] {r['workload']} "
                  f"{r['variant']} (round {r['round'] + 1}/"
                  f"{args.processes})", file=sys.stderr, flush=True)
            run_one(r, args, bench, writer, tmpdir)
            f.flush()
    meta["finished_utc"] = datetime.datetime.now(datetime.timezone.utc) \
        .isoformat(timespec="seconds")
    meta["host"]["loadavg_end"] = loadavg()
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")

    print(f"CSV: {csv_path}\nmetadata: {meta_path}\n")
    summarize(read_csv(csv_path), args.baseline)


if __name__ == "__main__":
    main()
