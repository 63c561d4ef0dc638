#!/usr/bin/env python3
"""Tests of run.py's summaries against hand-computed answers: the paired
ratio and the targets report (--targets), on CSVs made here."""
import csv
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


def rows_of(bench, metric, unit, table):
    """table: (workload, variant, [process medians in round order]).
    Processes are numbered as run.py numbers them: round by round, each
    round one process of every variant. Each process gets two measured
    rows around its median and one warm-up row far off, which must be
    ignored."""
    rounds = max(len(v) for _, _, v in table)
    out, process = [], 0
    workloads = list(dict.fromkeys(w for w, _, _ in table))
    for w in workloads:
        for rnd in range(rounds):
            for tw, variant, medians in table:
                if tw != w:
                    continue
                m = medians[rnd]
                for it, (warm, value) in enumerate(
                        ((1, 1000 * m), (0, m * 0.9), (0, m * 1.1))):
                    out.append({"bench": bench, "workload": w,
                                "variant": variant, "process": str(process),
                                "iteration": str(it), "warmup": str(warm),
                                "metric": metric, "value": repr(value),
                                "unit": unit})
                process += 1
    return out


class Targets(unittest.TestCase):
    def check(self, rows):
        out = io.StringIO()
        missed = run.targets(rows, out)
        return missed, out.getvalue()

    def test_merge(self):
        # round 2 is round 1 twice as slow: paired ratios are exact
        base = {"leveldb": 10, "typed-byte": 1, "raw-byte": 1.6,
                "typed-bit": 2.5, "raw-bit": 1.92, "floor": 0.5}
        table = []
        for w in ("grid-structured-ff16-4096", "grid-hash-fv-4096"):
            for v, t in base.items():
                table.append((w, v, [t, 2 * t]))
        missed, text = self.check(rows_of("merge", "time", "ms/merge", table))
        lines = text.splitlines()
        ff16 = lines[1].split()
        fv = lines[2].split()
        # leveldb/MODE: 10, 6.25, 4 (missed), 5.21
        self.assertEqual(ff16[1:5], ["10.00", "6.25", "4.00*", "5.21"])
        # BYTE/floor on FF16: 2 (met), 3.2 (missed); not judged on FV
        self.assertEqual(ff16[5:7], ["2.00", "3.20*"])
        self.assertEqual(fv[5:7], ["n/a", "n/a"])
        # BIT/byte: 2.5 (missed), 1.2 (met)
        self.assertEqual(ff16[7:9], ["2.50*", "1.20"])
        self.assertEqual(fv[1:5], ["10.00", "6.25", "4.00*", "5.21"])
        self.assertEqual(fv[7:9], ["2.50*", "1.20"])
        self.assertEqual(missed, 3 + 2)
        self.assertIn("* missed: 5; - not checked (a variant did not run): "
                      "0.", lines[-1])

    def test_merge_paired_cancels_a_slow_round(self):
        # per round LevelDB takes 6, 6 and 4 times as long (paired median
        # 6: met); the ratio of the medians would be 8 / 2 = 4 (missed)
        table = [("grid-hash-ff16-4096", "leveldb", [6, 30, 8]),
                 ("grid-hash-ff16-4096", "typed-byte", [1, 5, 2])]
        missed, text = self.check(rows_of("merge", "time", "ms/merge", table))
        line = text.splitlines()[1].split()
        self.assertEqual(line[1], "6.00")
        # the three other modes did not run: their cells and the floor's
        # and bit/byte ones cannot be checked, and count as not met
        self.assertEqual(line[2:], ["-"] * 7)
        self.assertIn("* missed: 0; - not checked (a variant did not run): "
                      "7.", text)
        self.assertEqual(missed, 7)

    def test_codes(self):
        table = [("eg0-small", "kvseg-mv", [2.0, 2.9, 3.5]),   # median 2.9
                 ("eg0-wide", "kvseg-mv", [3.2, 2.8, 3.1]),    # median 3.1
                 ("g7-computed", "kvseg-mv", [5.0, 5.0, 5.0])]  # not judged
        missed, text = self.check(rows_of("codes", "decode", "ns/count",
                                          table))
        lines = text.splitlines()
        self.assertEqual(lines[1].split(), ["eg0-small", "2.900"])
        self.assertEqual(lines[2].split(), ["eg0-wide", "3.100*"])
        self.assertEqual(lines[3].split(), ["g7-computed", "5.000"])
        self.assertEqual(lines[4].split(), ["eg3", "-"])
        self.assertEqual(lines[5].split(), ["g7", "-"])
        # eg3 and g7 did not run: not checked, counted with the miss
        self.assertIn("* missed: 1; - not checked (a variant did not run): "
                      "2.", lines[-1])
        self.assertEqual(missed, 3)

    def test_cli_reads_a_csv_and_exits_1_on_a_miss(self):
        rows = rows_of("codes", "decode", "ns/count",
                       [("eg3", "kvseg", [4.0])])
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False,
                                         newline="") as f:
            w = csv.DictWriter(f, fieldnames=run.HEADER,
                               lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        try:
            sys.argv = ["run.py", "--targets", f.name]
            with self.assertRaises(SystemExit) as e:
                run.main()
            self.assertEqual(e.exception.code, 1)
        finally:
            os.unlink(f.name)


# A benchmark program for run.py: lists one workload and one variant, and
# as its one measured value prints how many CPUs it may run on.
FAKE = """#!/usr/bin/env python3
import os, sys
a = sys.argv[1:]
if a == ["--list"]:
    print("bench fake"); print("workload w"); print("variant v")
    sys.exit(0)
p = a[a.index("--process") + 1]
print("bench,workload,variant,process,iteration,warmup,metric,value,unit")
print("fake,w,v,%s,0,0,cpus,%d,count" % (p, len(os.sched_getaffinity(0))))
"""


class Cpu(unittest.TestCase):
    def run_fake(self, *extra):
        with tempfile.TemporaryDirectory() as d:
            prog = os.path.join(d, "fake")
            with open(prog, "w") as f:
                f.write(FAKE)
            os.chmod(prog, 0o755)
            out = os.path.join(d, "out.csv")
            sys.argv = ["run.py", "-p", "2", "-w", "0", "-n", "1",
                        "--csv", out, *extra, prog]
            run.main()
            return [r["value"] for r in run.read_csv(out)]

    def test_cpu_pins_every_process(self):
        if len(os.sched_getaffinity(0)) < 2:
            self.skipTest("one CPU: a pinned process cannot be told from "
                          "one that is not")
        cpu = min(os.sched_getaffinity(0))
        self.assertEqual(self.run_fake("--cpu", str(cpu)), ["1", "1"])
        free = str(len(os.sched_getaffinity(0)))
        self.assertEqual(self.run_fake(), [free, free])

    def test_tagged_variants_of_two_programs_run_paired(self):
        with tempfile.TemporaryDirectory() as d:
            progs = []
            for tag in ("old", "new"):
                prog = os.path.join(d, tag, "fake")
                os.mkdir(os.path.dirname(prog))
                with open(prog, "w") as f:
                    f.write(FAKE)
                os.chmod(prog, 0o755)
                progs.append(prog)
            out = os.path.join(d, "out.csv")
            sys.argv = ["run.py", "-p", "2", "-w", "0", "-n", "1",
                        "--csv", out, "--variant", "v@old=" + progs[0],
                        "--variant", "v@new=" + progs[1],
                        "--baseline", "v@old"]
            run.main()
            rows = run.read_csv(out)
            # rounds rotate: old/new, then new/old; processes 1..4
            self.assertEqual([(r["variant"], r["process"]) for r in rows],
                             [("v@old", "1"), ("v@new", "2"),
                              ("v@new", "3"), ("v@old", "4")])
        with self.assertRaises(SystemExit):
            self.run_fake("--variant", "w@old")

    def test_cpu_not_allowed_is_an_error(self):
        with self.assertRaises(SystemExit) as e:
            self.run_fake("--cpu", str(max(os.sched_getaffinity(0)) + 1))
        self.assertEqual(e.exception.code, 1)


if __name__ == "__main__":
    unittest.main()
