#!/usr/bin/env python3
"""fs_bench.py - the segfs benchmarks: cat latency, listing 1,000,000 keys,
daemon memory (bench/README.md, "segfs").

Builds the fixtures in a temporary directory on tmpfs (segment directories
through kvseg, the same records as plain files), mounts segfs, segfs -o mt
and the minimal FUSE filesystem (bench_fs_min), runs

  cat     bench_fs_cat through run.py: segfs, segfs-mt, tmpfs, minfuse as
          fresh processes, alternating (workloads warm and cold)
  list    ls -f, find, ls -l over 1,000,000 keys: segfs view/ beside a tmpfs
          directory of the same 1,000,000 files, each run a fresh command,
          the two variants alternating; "cold" remounts segfs before every
          run (the kernel's dentries, inodes and readdir cache start empty),
          "warm" lists the same mount again (cache_readdir and the dentries
          of the previous listing warm); tmpfs has no cold state
  mem     VmHWM, VmRSS, RssAnon and RssFile of the segfs process after
          mounting and after ls -f, find and ls -l, on 10,000 and on
          1,000,000 keys (fresh mounts)

writes bench/results/fs_{cat,list,mem}-<UTC timestamp>.csv (the run.py
format, with a .json of metadata each), prints the summaries, and always
unmounts and removes the temporary directory. Needs root (cold cat writes
/proc/sys/vm/drop_caches) and /dev/fuse.

The binaries are copied into the temporary directory first, so a rebuild
during the run does not change what is measured; their SHA-256 go in the
metadata.

Python 3 standard library only.
"""

import argparse
import csv
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import run as runpy  # noqa: E402  (bench/run.py: summary and metadata)

MASK64 = (1 << 64) - 1


def log(msg):
    print(f"fs_bench: {msg}", file=sys.stderr, flush=True)


def die(msg):
    raise SystemExit(f"fs_bench: {msg}")


# ---- fixtures ----------------------------------------------------------------

def splitmix(i):
    z = (i * 0x9E3779B97F4A7C15 + 0x5E6F5000000000B1) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def record(i):
    """Key i (16 bytes, path-like, its own segfs name: no byte segfs
    escapes) and its FF16 value. Distinct for i < 2^32: the hex part is a
    bijection of i."""
    return (f"u{i % 1000:03d}-doc{(i * 2654435761) & 0xFFFFFFFF:08x}",
            f"{splitmix(i):016x}")


def write_keys(path, n):
    with open(path, "w") as f:
        for i in range(n):
            k, v = record(i)
            f.write(f"{k}\t{v}\n")


def make_segdir(kvseg, segdir, keys):
    segdir.mkdir()
    subprocess.run([kvseg, "catalog", str(segdir), "init", "-q"], check=True)
    with open(keys, "rb") as f:
        subprocess.run([kvseg, "build", "--sequence", "1",
                        str(segdir / "seg-1.kvs")], stdin=f, check=True)
    subprocess.run([kvseg, "catalog", str(segdir), "add", "-q", "seg-1.kvs"],
                   check=True)


def make_tmpfs_dir(d, keys):
    d.mkdir()
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with open(keys) as f:
            for line in f:
                k, v = line.rstrip("\n").split("\t")
                wfd = os.open(k, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444,
                              dir_fd=fd)
                os.write(wfd, v.encode())
                os.close(wfd)
    finally:
        os.close(fd)


# ---- mounts ------------------------------------------------------------------

class Mounts:
    """FUSE daemons started here (in the foreground, so their pids are
    known), always unmounted."""

    def __init__(self):
        self.live = {}  # mountpoint -> Popen

    @staticmethod
    def mounted(mnt):
        m = os.path.realpath(mnt)
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == m for line in f)

    def mount(self, argv, mnt):
        mnt = str(mnt)
        os.makedirs(mnt, exist_ok=True)
        p = subprocess.Popen([*argv, "-f", mnt])
        deadline = time.monotonic() + 120
        while not self.mounted(mnt):
            if p.poll() is not None:
                die(f"{' '.join(argv)} {mnt} exited with {p.returncode}")
            if time.monotonic() > deadline:
                p.terminate()
                die(f"{mnt} not mounted after 120 s")
            time.sleep(0.01)
        self.live[mnt] = p
        return p

    def umount(self, mnt):
        mnt = str(mnt)
        p = self.live.pop(mnt, None)
        if self.mounted(mnt):
            r = subprocess.run(["fusermount3", "-u", mnt],
                               capture_output=True)
            if r.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", mnt])
        if p is not None:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()  # only the daemon this script started
                p.wait()

    def umount_all(self):
        for mnt in list(self.live):
            self.umount(mnt)


def vm_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[k] = int(v.split()[0])  # kB
    return out


# ---- CSV ---------------------------------------------------------------------

class Csv:
    def __init__(self, path, bench):
        self.path, self.bench = path, bench
        self.f = open(path, "w", newline="")
        self.w = csv.writer(self.f, lineterminator="\n")
        self.w.writerow(runpy.HEADER)
        self.process = 0

    def row(self, workload, variant, process, iteration, warmup, metric,
            value, unit):
        self.w.writerow([self.bench, workload, variant, process, iteration,
                         int(warmup), metric, f"{value:.6g}", unit])
        self.f.flush()

    def close(self):
        self.f.close()


def write_meta(csv_path, extra):
    meta = {
        "csv": csv_path.name,
        "created_utc": datetime.datetime.now(datetime.timezone.utc)
        .isoformat(timespec="seconds"),
        "command": sys.argv,
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "host": {"cpu_model": runpy.cpu_model(),
                 "cpu_count": os.cpu_count(),
                 "kernel": os.uname().release,
                 "loadavg": runpy.loadavg()},
        "git": {"revision": runpy.git(BENCH_DIR, "rev-parse", "HEAD"),
                "dirty_files": (runpy.git(BENCH_DIR, "status", "--porcelain")
                                or "").splitlines()},
    }
    meta.update(extra)
    csv_path.with_suffix(".json").write_text(json.dumps(meta, indent=2)
                                             + "\n")


def timed(argv):
    """Runs argv with stdout to /dev/null; returns the wall time in ms."""
    t0 = time.perf_counter_ns()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL)
    t1 = time.perf_counter_ns()
    if r.returncode != 0:
        die(f"{' '.join(argv)} failed ({r.returncode})")
    return (t1 - t0) / 1e6


LIST_COMMANDS = {
    "ls-f": lambda d: ["ls", "-f", d],
    "find": lambda d: ["find", d],
    "ls-l": lambda d: ["ls", "-l", d],
}


# ---- the benchmarks ------------------------------------------------------------

def bench_cat(a, bins, work, mounts, stamp):
    keys = work / "keys-cat.tsv"
    env = dict(os.environ)
    env.update({
        "BENCH_FS_KEYS": str(keys),
        "BENCH_FS_DIR_SEGFS": str(work / "mnt-cat" / "view"),
        "BENCH_FS_DIR_SEGFS_MT": str(work / "mnt-cat-mt" / "view"),
        "BENCH_FS_DIR_TMPFS": str(work / "tmpfs-cat"),
        "BENCH_FS_DIR_MINFUSE": str(work / "mnt-min"),
    })
    mounts.mount([bins["segfs"], str(work / "seg-cat")], work / "mnt-cat")
    mounts.mount([bins["segfs"], "-o", "mt", str(work / "seg-cat")],
                 work / "mnt-cat-mt")
    mounts.mount([bins["bench_fs_min"]], work / "mnt-min")
    out = BENCH_DIR / "results" / f"fs_cat-{stamp}{a.tag}.csv"
    cmd = [sys.executable, str(BENCH_DIR / "run.py"),
           "-p", str(a.processes), "-w", "1", "-n", str(a.iterations),
           "--csv", str(out), "--baseline", "tmpfs"]
    for v in ("segfs", "segfs-mt", "tmpfs", "minfuse"):
        cmd += ["--variant", f"{v}={bins['bench_fs_cat']}"]
    for w in a.cat_workload:
        cmd += ["--workload", w]
    log("cat: " + " ".join(cmd))
    subprocess.run(cmd, env=env, check=True)
    meta_path = out.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["fs_bench"] = {"cpu_affinity": sorted(os.sched_getaffinity(0)),
                        "keys": a.cat_keys,
                        "programs": {k: runpy.sha256(p)
                                     for k, p in bins.items()}}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    print()
    runpy.summarize(runpy.read_csv(out), "minfuse")
    print()
    for m in ("mnt-cat", "mnt-cat-mt", "mnt-min"):
        mounts.umount(work / m)
    return out


def bench_list(a, bins, work, mounts, stamp):
    out = BENCH_DIR / "results" / f"fs_list-{stamp}{a.tag}.csv"
    c = Csv(out, "fs_list")
    seg, mnt = str(work / "seg-list"), work / "mnt-list"
    dirs = {"segfs": str(mnt / "view"), "tmpfs": str(work / "tmpfs-list")}
    variants = ["segfs", "tmpfs"]
    proc = 0
    for cmd in a.list_command:
        # cold: a fresh mount before every segfs run
        for r in range(a.list_runs + 1):
            for v in runpy.rotate(variants, r):
                if v == "segfs":
                    mounts.mount([bins["segfs"], seg], mnt)
                proc += 1
                ms = timed(LIST_COMMANDS[cmd](dirs[v]))
                c.row(f"{cmd}-cold", v, proc, 0, r == 0, "time", ms, "ms")
                if v == "segfs":
                    for k, kb in vm_status(mounts.live[str(mnt)].pid).items():
                        c.row(f"{cmd}-cold", v, proc, 0, r == 0,
                              k, kb / 1024, "MiB")
                    mounts.umount(mnt)
        # warm: one mount, listed once before the measured runs
        mounts.mount([bins["segfs"], seg], mnt)
        for r in range(a.list_runs + 1):
            for v in runpy.rotate(variants, r):
                proc += 1
                ms = timed(LIST_COMMANDS[cmd](dirs[v]))
                c.row(f"{cmd}-warm", v, proc, 0, r == 0, "time", ms, "ms")
        mounts.umount(mnt)
        log(f"list: {cmd} done")
    c.close()
    write_meta(out, {"bench": "fs_list", "keys": a.list_keys,
                     "runs": a.list_runs, "warmup_runs": 1,
                     "programs": {k: runpy.sha256(p)
                                  for k, p in bins.items()},
                     "note": "each row one fresh command; cold remounts "
                             "segfs before every run; the first round "
                             "(warmup=1) is excluded"})
    print()
    runpy.summarize(runpy.read_csv(out), "tmpfs")
    print()
    return out


def bench_mem(a, bins, work, mounts, stamp):
    out = BENCH_DIR / "results" / f"fs_mem-{stamp}{a.tag}.csv"
    c = Csv(out, "fs_mem")
    sizes = [("segfs-%d" % a.small_keys, "seg-small"),
             ("segfs-%d" % a.list_keys, "seg-list")]
    proc = 0
    mnt = work / "mnt-mem"
    for r in range(a.mem_runs):
        for variant, seg in runpy.rotate(sizes, r):
            p = mounts.mount([bins["segfs"], str(work / seg)], mnt)
            proc += 1
            for k, kb in vm_status(p.pid).items():
                c.row("after-mount", variant, proc, 0, False, k, kb / 1024,
                      "MiB")
            for cmd in ("ls-f", "find", "ls-l"):
                timed(LIST_COMMANDS[cmd](str(mnt / "view")))
                for k, kb in vm_status(p.pid).items():
                    c.row(f"after-{cmd}", variant, proc, 0, False, k,
                          kb / 1024, "MiB")
            mounts.umount(mnt)
    c.close()
    write_meta(out, {"bench": "fs_mem", "runs": a.mem_runs,
                     "programs": {k: runpy.sha256(p)
                                  for k, p in bins.items()},
                     "note": "/proc/PID/status of the segfs process after "
                             "mounting and after each listing in turn "
                             "(ls -f, find, ls -l of view/) on one fresh "
                             "mount per process"})
    print()
    runpy.summarize(runpy.read_csv(out), "segfs-%d" % a.small_keys)
    print()
    return out


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(BENCH_DIR.parent / "build"),
                    help="meson build directory (default build/)")
    ap.add_argument("--tmp", default="/dev/shm",
                    help="where the temporary directory goes; must be "
                         "tmpfs (default /dev/shm)")
    ap.add_argument("--only", action="append",
                    choices=["cat", "list", "mem"],
                    help="run only this part (repeatable; default all)")
    ap.add_argument("--cat-keys", type=int, default=262144)
    ap.add_argument("--cat-workload", action="append",
                    choices=["warm", "cold"])
    ap.add_argument("-p", "--processes", type=int, default=3,
                    help="cat: fresh processes per variant (default 3)")
    ap.add_argument("-n", "--iterations", type=int, default=5,
                    help="cat: measured passes per process (default 5)")
    ap.add_argument("--list-keys", type=int, default=1000000)
    ap.add_argument("--small-keys", type=int, default=10000)
    ap.add_argument("--list-runs", type=int, default=5,
                    help="list: measured runs per command and variant, "
                         "after one warm-up round (default 5)")
    ap.add_argument("--list-command", action="append",
                    choices=list(LIST_COMMANDS))
    ap.add_argument("--mem-runs", type=int, default=2)
    ap.add_argument("--segfs", help="the segfs binary to measure "
                    "(default BUILD/fs/segfs)")
    ap.add_argument("--cpus", help="pin this script and everything it "
                    "starts (daemons, clients) to these CPUs, e.g. 0 or "
                    "0,1 (default: not pinned)")
    a = ap.parse_args()
    a.tag = ""
    if a.cpus:
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})
        a.tag = "-cpus" + a.cpus.replace(",", "_")
    a.only = a.only or ["cat", "list", "mem"]
    a.cat_workload = a.cat_workload or ["warm", "cold"]
    a.list_command = a.list_command or list(LIST_COMMANDS)
    if os.geteuid() != 0:
        die("run as root (cold cat drops the kernel's dentries)")

    build = Path(a.build)
    bins = {"segfs": Path(a.segfs) if a.segfs else build / "fs" / "segfs",
            "kvseg": build / "tools" / "kvseg",
            "bench_fs_cat": build / "bench" / "bench_fs_cat",
            "bench_fs_min": build / "bench" / "bench_fs_min"}
    for p in bins.values():
        if not os.access(p, os.X_OK):
            die(f"{p} missing: build first (ninja -C {build})")

    def on_signal(sig, frame):
        raise SystemExit(f"fs_bench: signal {sig}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    stamp = datetime.datetime.now(datetime.timezone.utc) \
        .strftime("%Y%m%dT%H%M%SZ")
    (BENCH_DIR / "results").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="segfs-bench-", dir=a.tmp))
    mounts = Mounts()
    try:
        (work / "bin").mkdir()
        for name in ("segfs", "kvseg", "bench_fs_min"):  # frozen copies
            dst = work / "bin" / name
            shutil.copy2(bins[name], dst)
            bins[name] = str(dst)
        log(f"fixtures in {work}")
        kvseg = bins["kvseg"]
        if "cat" in a.only:
            write_keys(work / "keys-cat.tsv", a.cat_keys)
            make_segdir(kvseg, work / "seg-cat", work / "keys-cat.tsv")
            make_tmpfs_dir(work / "tmpfs-cat", work / "keys-cat.tsv")
        if "list" in a.only or "mem" in a.only:
            write_keys(work / "keys-list.tsv", a.list_keys)
            make_segdir(kvseg, work / "seg-list", work / "keys-list.tsv")
        if "list" in a.only:
            make_tmpfs_dir(work / "tmpfs-list", work / "keys-list.tsv")
        if "mem" in a.only:
            write_keys(work / "keys-small.tsv", a.small_keys)
            make_segdir(kvseg, work / "seg-small", work / "keys-small.tsv")
        log("fixtures ready")
        outs = []
        if "cat" in a.only:
            outs.append(bench_cat(a, bins, work, mounts, stamp))
        if "list" in a.only:
            outs.append(bench_list(a, bins, work, mounts, stamp))
        if "mem" in a.only:
            outs.append(bench_mem(a, bins, work, mounts, stamp))
        for o in outs:
            print(f"CSV: {o}")
    finally:
        mounts.umount_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
