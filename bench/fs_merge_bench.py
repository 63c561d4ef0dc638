#!/usr/bin/env python3
"""fs_merge_bench.py - segfs merges (bench/README.md, "segfs merges"):

  merge   the same merge of the same inputs done two ways, alternating,
          each on a fresh copy of the inputs (a merge consumes them):
            segfs-control   segfs mounted on the directory; time from
                            writing "merge all" to MNT/control/merge until
                            `cat MNT/control/wait/1` returns (the job
                            merges, fsyncs, renames, publishes the catalog
                            and moves view/ to it)
            kvseg-catalog   `kvseg catalog DIR merge all -q` as a fresh
                            process (merges, fsyncs, renames, publishes the
                            catalog, unlinks the inputs): the CLI doing
                            what the job does, no daemon mounted
          rows: time (wall ms), cpu (ms of user+system CPU: the kvseg
          process's rusage; the segfs daemon's /proc/PID/stat delta over
          the request), job-elapsed (segfs only: the job's own "elapsed"
          from its status line)
  read    cat latency (open, read, read, close) of random keys of view/,
          by bench_fs_readlat (compiled here from bench_fs_readlat.c), on
          a fresh mount of a fresh copy each time, alternating:
            idle      no merge; the reader runs for --idle-seconds (by
                      default the median segfs merge time of "merge")
            merging   "merge all" written, the reader runs until
                      control/wait/1 returns
          rows per reader run: p50, p90, p99, p999, max, mean (ns/op), ops, errors

Everything lives in a temporary directory (default on /dev/shm); the
binaries are copied there first. Writes
bench/results/fs_merge-<UTC timestamp>.csv (the run.py format; a .json of
metadata next to it), prints the summaries (run.py's, plus ratios of the
two variants paired within each round), and always unmounts and removes
the temporary directory (also on Ctrl-C or SIGTERM). Needs root or
fusermount3, and /dev/fuse. Python 3 standard library only.
"""

import argparse
import csv
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
import run as runpy  # noqa: E402  (bench/run.py: summary and metadata)

HEADER = ["bench", "workload", "variant", "process", "iteration", "warmup",
          "metric", "value", "unit"]
MASK64 = (1 << 64) - 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"fs_merge_bench: {msg}", file=sys.stderr, flush=True)


def die(msg):
    raise SystemExit(f"fs_merge_bench: {msg}")


# ---- fixtures ----------------------------------------------------------------

def key_name(i):
    # 16 bytes, distinct for i < 2^32 (odd multiplier), no escaped byte
    return "u%03d-doc%08x" % (i % 1000, (i * 2654435761) & 0xFFFFFFFF)


def value_of(i, s):
    # 16 hex digits, different in every segment s
    return "%016x" % ((i * 0x9E3779B97F4A7C15 + (s + 1) * 0xBF58476D1CE4E5B9)
                      & MASK64)


def build_inputs(a, kvseg, inputs_dir, keyfile):
    """a.segments segments of a.records records each; segment s holds keys
    [s*step, s*step + records) with step = records * (1 - overlap), so
    neighbours share a.overlap of their keys and the newer wins. Returns
    (segment paths oldest first, distinct keys)."""
    step = max(1, int(a.records * (1 - a.overlap)))
    segs = []
    for s in range(a.segments):
        path = inputs_dir / f"in-{s + 1}.kvs"
        lo = s * step
        p = subprocess.Popen([kvseg, "build", "--sequence", str(s + 1),
                              str(path)], stdin=subprocess.PIPE)
        chunk = []
        for i in range(lo, lo + a.records):
            chunk.append(f"{key_name(i)}\t{value_of(i, s)}\n")
            if len(chunk) == 65536:
                p.stdin.write("".join(chunk).encode())
                chunk = []
        p.stdin.write("".join(chunk).encode())
        p.stdin.close()
        if p.wait() != 0:
            die(f"kvseg build {path} failed")
        segs.append(path)
    total = (a.segments - 1) * step + a.records
    with open(keyfile, "w") as f:
        for i in range(total):
            s = min(i // step, a.segments - 1)
            f.write(f"{key_name(i)}\t{value_of(i, s)}\n")
    return segs, total


def fresh_dir(kvseg, inputs, d):
    """A new segment directory holding copies of the inputs, cataloged."""
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for p in inputs:
        shutil.copyfile(p, d / p.name)
    subprocess.run([kvseg, "catalog", str(d), "init", "-q"], check=True)
    return d


def catalog_list(kvseg, d):
    out = subprocess.run([kvseg, "catalog", str(d), "list", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


# ---- mounting ------------------------------------------------------------------

class Mount:
    """One segfs in the foreground (so its PID is ours)."""

    def __init__(self, segfs, segdir, mnt, opts, logpath):
        self.mnt = mnt
        mnt.mkdir(parents=True, exist_ok=True)
        self.log = open(logpath, "ab")
        argv = [segfs, "-f"]
        for o in opts:
            argv += ["-o", o]
        self.proc = subprocess.Popen(argv + [str(segdir), str(mnt)],
                                     stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None:
                die(f"segfs exited ({self.proc.returncode}) before "
                    f"mounting; see {logpath}")
            if time.monotonic() > deadline:
                self.close()
                die("segfs did not mount within 60 s")
            time.sleep(0.005)

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def close(self):
        if os.path.ismount(self.mnt):
            r = subprocess.run(["fusermount3", "-u", str(self.mnt)],
                               capture_output=True)
            if r.returncode != 0:
                subprocess.run(["fusermount3", "-uz", str(self.mnt)],
                               capture_output=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def request_merge(mnt):
    fd = os.open(mnt / "control" / "merge", os.O_WRONLY)
    try:
        os.write(fd, b"merge all\n")
    finally:
        os.close(fd)


def wait_job(mnt, job=1):
    fd = os.open(mnt / "control" / "wait" / str(job), os.O_RDONLY)
    try:
        data = b""
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            data += b
    finally:
        os.close(fd)
    line = data.decode().strip().splitlines()[-1]
    return json.loads(line)


# ---- output ------------------------------------------------------------------

def num(v):
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.6g}"
    return str(int(v))


class Rows:
    def __init__(self, path):
        self.path = path
        self.f = open(path, "w", newline="")
        self.w = csv.writer(self.f)
        self.w.writerow(HEADER)
        self.rows = []

    def add(self, workload, variant, process, warmup, metric, value, unit):
        row = ["fs_merge", workload, variant, str(process), "0",
               "1" if warmup else "0", metric, num(value), unit]
        self.w.writerow(row)
        self.f.flush()
        self.rows.append(dict(zip(HEADER, row)))

    def close(self):
        self.f.close()


def paired(rows, workload, metric, variant, baseline):
    """Per-round ratios variant/baseline (rounds = the 'round' recorded in
    process numbers: both variants of a round share process // 2)."""
    by = {}
    for r in rows:
        if r["warmup"] == "1" or r["workload"] != workload or \
                r["metric"] != metric:
            continue
        by.setdefault(int(r["process"]) // 2, {})[r["variant"]] = \
            float(r["value"])
    ratios = [d[variant] / d[baseline] for d in by.values()
              if variant in d and baseline in d and d[baseline] > 0]
    return ratios


def print_paired(rows, workload, metrics, variant, baseline):
    for m in metrics:
        rs = paired(rows, workload, m, variant, baseline)
        if rs:
            print(f"  {workload} {m}: {variant}/{baseline} per round: "
                  f"median {statistics.median(rs):.3f}\u00d7 "
                  f"[{min(rs):.3f}\u2013{max(rs):.3f}] over {len(rs)} "
                  f"rounds")


# ---- the benchmarks ------------------------------------------------------------

def bench_merge(a, bins, work, inputs, nkeys, rows, workload):
    """Returns the segfs merge times (s) of the measured rounds."""
    segfs_times = []
    digests = {}
    rounds = a.warmups + a.processes
    for r in range(rounds):
        warm = r < a.warmups
        order = ["segfs-control", "kvseg-catalog"]
        if r % 2:
            order.reverse()
        for k, variant in enumerate(order):
            process = 2 * r + k
            d = fresh_dir(bins["kvseg"], inputs, work / "dir")
            if variant == "kvseg-catalog":
                argv = [bins["kvseg"], "catalog", str(d), "merge", "all",
                        "-q"]
                t0 = time.perf_counter_ns()
                p = subprocess.Popen(argv)
                _, status, ru = os.wait4(p.pid, 0)
                t1 = time.perf_counter_ns()
                p.returncode = os.waitstatus_to_exitcode(status)
                if p.returncode != 0:
                    die(f"{' '.join(argv)} failed ({p.returncode})")
                wall = (t1 - t0) / 1e9
                cpu = ru.ru_utime + ru.ru_stime
                elapsed = None
            else:
                m = Mount(bins["segfs"], d, work / "mnt", a.segfs_opts,
                          work / "segfs.log")
                try:
                    c0 = m.cpu_seconds()
                    t0 = time.perf_counter_ns()
                    request_merge(m.mnt)
                    st = wait_job(m.mnt)
                    t1 = time.perf_counter_ns()
                    c1 = m.cpu_seconds()
                finally:
                    m.close()
                if st.get("state") != "done":
                    die(f"segfs job: {st}")
                wall = (t1 - t0) / 1e9
                cpu = c1 - c0
                elapsed = st["elapsed"]
                if not warm:
                    segfs_times.append(wall)
            cat = catalog_list(bins["kvseg"], d)
            segs = cat.get("segments", [])
            out = d / segs[0]["name"] if len(segs) == 1 else None
            if not out or segs[0].get("records") != nkeys or \
                    not out.exists():
                die(f"{variant}: unexpected catalog after the merge: {cat}")
            if warm or r == a.warmups:  # the output, once per variant
                digests[variant] = runpy.sha256(out)
            rows.add(workload, variant, process, warm, "time", wall * 1e3,
                     "ms")
            rows.add(workload, variant, process, warm, "cpu", cpu * 1e3,
                     "ms")
            if elapsed is not None:
                rows.add(workload, variant, process, warm, "job-elapsed",
                         elapsed * 1e3, "ms")
            log(f"merge round {r}{' (warm-up)' if warm else ''} {variant}: "
                f"{wall * 1e3:.1f} ms wall, {cpu * 1e3:.0f} ms cpu"
                + (f", job {elapsed * 1e3:.1f} ms" if elapsed else ""))
    if len(set(digests.values())) > 1:
        log(f"WARNING: the two merges wrote different files: {digests}")
    return segfs_times, digests


class Reader:
    def __init__(self, prog, keyfile, viewdir, seed):
        self.proc = subprocess.Popen([prog, str(keyfile), str(viewdir),
                                      str(seed)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            self.proc.wait()
            die(f"bench_fs_readlat did not start: {line!r}")

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stop(self):
        self.proc.send_signal(signal.SIGUSR1)
        out = self.proc.stdout.read()
        self.proc.stdin.close()
        if self.proc.wait() != 0:
            die(f"bench_fs_readlat failed ({self.proc.returncode})")
        res = dict(kv.split("=", 1) for kv in out.split())
        return {k: float(v) for k, v in res.items()}

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def bench_read(a, bins, work, inputs, keyfile, rows, workload, idle_s):
    rounds = a.warmups + a.processes
    for r in range(rounds):
        warm = r < a.warmups
        order = ["idle", "merging"]
        if r % 2:
            order.reverse()
        seed = 0x5EED0000 + r
        for k, variant in enumerate(order):
            process = 2 * r + k
            d = fresh_dir(bins["kvseg"], inputs, work / "dir")
            m = Mount(bins["segfs"], d, work / "mnt", a.segfs_opts,
                      work / "segfs.log")
            reader = None
            try:
                reader = Reader(bins["readlat"], keyfile, m.mnt / "view",
                                seed)
                merge_s = None
                if variant == "idle":
                    reader.go()
                    time.sleep(idle_s)
                else:
                    t0 = time.perf_counter_ns()
                    request_merge(m.mnt)
                    reader.go()
                    st = wait_job(m.mnt)
                    merge_s = (time.perf_counter_ns() - t0) / 1e9
                res = reader.stop()
                reader = None
                if variant == "merging" and st.get("state") != "done":
                    die(f"segfs job: {st}")
            finally:
                if reader:
                    reader.kill()
                m.close()
            if res["errors"]:
                die(f"{variant}: {int(res['errors'])} reads failed or "
                    f"returned a wrong value (see stderr)")
            for metric in ("p50", "p90", "p99", "p999", "max", "mean"):
                rows.add(workload, variant, process, warm, metric,
                         res[f"{metric}_ns"], "ns/op")
            rows.add(workload, variant, process, warm, "ops", res["ops"],
                     "ops")
            rows.add(workload, variant, process, warm, "seconds",
                     res["seconds"], "s")
            rows.add(workload, variant, process, warm, "max-at",
                     res["max_at_s"], "s")
            if merge_s is not None:
                rows.add(workload, variant, process, warm, "merge-time",
                         merge_s * 1e3, "ms")
            log(f"read round {r}{' (warm-up)' if warm else ''} {variant}: "
                f"{int(res['ops'])} ops in {res['seconds']:.2f} s, p50 "
                f"{res['p50_ns'] / 1e3:.1f} us, p99 "
                f"{res['p99_ns'] / 1e3:.1f} us, max "
                f"{res['max_ns'] / 1e6:.1f} ms at {res['max_at_s']:.3f} s")


# ---- main ----------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(REPO / "build"),
                    help="meson build directory (default build/)")
    ap.add_argument("--segfs", help="segfs binary (default BUILD/fs/segfs)")
    ap.add_argument("--kvseg",
                    help="kvseg binary (default BUILD/tools/kvseg)")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"),
                    help="C compiler for bench_fs_readlat.c")
    ap.add_argument("--only", action="append", choices=["merge", "read"],
                    help="only this part (repeatable; default both)")
    ap.add_argument("--segments", type=int, default=4)
    ap.add_argument("--records", type=int, default=500000,
                    help="records per input segment (default 500000)")
    ap.add_argument("--overlap", type=float, default=0.25,
                    help="share of keys a segment has with the next "
                    "(default 0.25)")
    ap.add_argument("-p", "--processes", type=int, default=5,
                    help="measured rounds per part (default 5)")
    ap.add_argument("-w", "--warmups", type=int, default=1,
                    help="warm-up rounds per part (default 1)")
    ap.add_argument("--idle-seconds", type=float,
                    help="reader time when idle (default: the median segfs "
                    "merge time of the merge part, else 1.0)")
    ap.add_argument("-o", dest="segfs_opts", action="append", default=[],
                    help="segfs mount option, e.g. -o workers=1")
    ap.add_argument("--cpus", help="pin everything to these CPUs (e.g. 0 "
                    "or 0,1)")
    ap.add_argument("--tmp", default="/dev/shm",
                    help="where the temporary directory goes (default "
                    "/dev/shm; fsync is then free)")
    ap.add_argument("--csv", help="CSV path (default bench/results/"
                    "fs_merge-<UTC timestamp>.csv)")
    a = ap.parse_args()
    parts = a.only or ["merge", "read"]
    if a.cpus:
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})

    build = Path(a.build)
    src = {"segfs": Path(a.segfs or build / "fs" / "segfs"),
           "kvseg": Path(a.kvseg or build / "tools" / "kvseg")}
    for p in src.values():
        if not os.access(p, os.X_OK):
            die(f"{p}: not an executable (ninja -C {build}?)")

    def on_signal(sig, frame):
        raise SystemExit(f"fs_merge_bench: signal {sig}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    stamp = datetime.datetime.now(datetime.timezone.utc) \
        .strftime("%Y%m%dT%H%M%SZ")
    csv_path = Path(a.csv) if a.csv else \
        BENCH_DIR / "results" / f"fs_merge-{stamp}.csv"
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    load_start = runpy.loadavg()

    work = Path(tempfile.mkdtemp(prefix="fs_merge_bench-", dir=a.tmp))
    try:
        bindir = work / "bin"
        bindir.mkdir()
        bins = {}
        for name, p in src.items():
            bins[name] = str(bindir / name)
            shutil.copy2(p, bins[name])
        bins["readlat"] = str(bindir / "bench_fs_readlat")
        subprocess.run([a.cc, "-O2", "-std=gnu11", "-Wall", "-o",
                        bins["readlat"],
                        str(BENCH_DIR / "bench_fs_readlat.c")], check=True)
        inputs_dir = work / "inputs"
        inputs_dir.mkdir()
        keyfile = work / "keys.tsv"
        log(f"building {a.segments} segments of {a.records} records in "
            f"{work}")
        inputs, nkeys = build_inputs(a, bins["kvseg"], inputs_dir, keyfile)
        workload = f"merge-{a.segments}x{a.records}"
        log(f"{nkeys} distinct keys after the merge")

        rows = Rows(csv_path)
        digests = {}
        try:
            segfs_times = []
            if "merge" in parts:
                segfs_times, digests = bench_merge(a, bins, work, inputs,
                                                   nkeys, rows, workload)
            idle_s = a.idle_seconds or (statistics.median(segfs_times)
                                        if segfs_times else 1.0)
            if "read" in parts:
                bench_read(a, bins, work, inputs, keyfile, rows,
                           f"cat-during-{workload}", idle_s)
        finally:
            rows.close()
        meta = {
            "csv": csv_path.name,
            "created_utc": stamp,
            "command": sys.argv,
            "args": vars(a),
            "cpu_affinity": sorted(os.sched_getaffinity(0)),
            "tmp_filesystem": a.tmp,
            "host": {"cpu_model": runpy.cpu_model(),
                     "cpu_count": os.cpu_count(),
                     "kernel": os.uname().release,
                     "loadavg_start": load_start,
                     "loadavg_end": runpy.loadavg()},
            "git": {"revision": runpy.git(REPO, "rev-parse", "HEAD"),
                    "dirty_files": (runpy.git(REPO, "status", "--porcelain")
                                    or "").splitlines()},
            "binaries": {n: {"source": str(src[n]),
                             "sha256": runpy.sha256(bins[n])}
                         for n in src},
            "inputs": {"segments": a.segments, "records": a.records,
                       "overlap": a.overlap, "distinct_keys": nkeys,
                       "bytes": sum(p.stat().st_size for p in inputs)},
            "merge_outputs_sha256": digests,
            "idle_seconds": idle_s if "read" in parts else None,
        }
        csv_path.with_suffix(".json").write_text(json.dumps(meta, indent=2)
                                                 + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"load average {load_start} at the start, {runpy.loadavg()} at "
          f"the end; CSV {csv_path}")
    merge_rows = [r for r in rows.rows if r["workload"] == workload]
    read_rows = [r for r in rows.rows if r["workload"] != workload]
    if merge_rows:
        print()
        runpy.summarize(merge_rows, baseline="kvseg-catalog")
        print_paired(merge_rows, workload, ["time", "cpu"], "segfs-control",
                     "kvseg-catalog")
        if len(set(digests.values())) == 1:
            print("  both merges wrote byte-identical files")
        else:
            print(f"  WARNING: the merges wrote different files: {digests}")
        print("  target (issue 6): segfs-control time <= 1.05x "
              "kvseg-catalog")
    if read_rows:
        print()
        runpy.summarize(read_rows, baseline="idle")
        print_paired(read_rows, f"cat-during-{workload}",
                     ["p50", "p99", "p999", "mean"], "merging", "idle")


if __name__ == "__main__":
    main()
