#!/usr/bin/env python3
"""Test of perf/scripts/ab.py without a GPU: fake attnbwd_perf binaries (small Python scripts) write Google Benchmark
JSON with times and E that depend on the binary and on an environment variable, one of them fails, and every call is
logged. Checks the interleaved order of the runs, that a variant's settings reach its runs only, the per-round
geomean E, the medians and ratios, --isolate's one process per workload, the failure report and the JSON file.

    python3 tests/perf/test_ab.py        (plain unittest)
"""
import json
import os
import pathlib
import stat
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "perf" / "scripts" / "ab.py"

# Per workload w: time = BASE + w (+ 10 where SLOW=1 is set; + the call's round index, 0, 1, 2, ... per binary, so
# that rounds differ), E = 100 / time. BASE comes from the script's own name: fast_* 50, slow_* 100; fail_* exits 1.
FAKE = r'''#!/usr/bin/env python3
import json, os, sys
name = os.path.basename(sys.argv[0])
args = dict(a.split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
log = os.environ["FAKE_LOG"]
with open(log, "a") as f:
    f.write(json.dumps({"bin": name, "slow": os.environ.get("SLOW", ""), "workloads": args["--workloads"]}) + "\n")
if name.startswith("fail"):
    print("attnbwd::Error something refused")
    sys.exit(1)
calls = sum(1 for l in open(log) if json.loads(l)["bin"] == name and json.loads(l)["slow"] == os.environ.get("SLOW", ""))
wl = ["0", "1", "2"] if args["--workloads"] == "all" else args["--workloads"].split(",")
base = 50.0 if name.startswith("fast") else 100.0
benches = []
for w in wl:
    t = base + int(w) + (10.0 if os.environ.get("SLOW") == "1" else 0.0) + (calls - 1) // int(os.environ.get("PER_ROUND", "1"))
    benches.append({"name": "op/w%02d/cuda/iterations:1/manual_time" % int(w), "run_type": "iteration",
                    "real_time": t, "time_unit": "us", "E": 100.0 / t})
with open(args["--benchmark_out"], "w") as f:
    json.dump({"context": {"attnbwd_gpu": "Fake GPU", "attnbwd_binary_commit": name, "date": "2026-12-04T00:00:00",
                           "num_cpus": 2}, "benchmarks": benches}, f)
'''


class AB(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = pathlib.Path(self.tmp.name)
        for n in ("fast_perf", "slow_perf", "fail_perf"):
            p = self.d / n
            p.write_text(FAKE)
            p.chmod(p.stat().st_mode | stat.S_IXUSR)
        self.log = self.d / "calls.jsonl"
        self.out = self.d / "ab.json"

    def tearDown(self):
        self.tmp.cleanup()

    def ab(self, *args, per_round="1"):
        env = dict(os.environ, FAKE_LOG=str(self.log), PER_ROUND=per_round)
        env.pop("SLOW", None)
        cmd = [sys.executable, str(SCRIPT), "--op", "out_proj_backward", "--out", str(self.out), *args]
        return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)

    def calls(self):
        return [json.loads(l) for l in self.log.read_text().splitlines()]

    def test_interleaves_variants_and_reports_ratios(self):
        r = self.ab("--workloads", "all", "--rounds", "2", "--variant", f"old={self.d / 'slow_perf'}",
                    "--variant", f"new={self.d / 'fast_perf'}", "--variant", f"off={self.d / 'fast_perf'},SLOW=1")
        self.assertEqual(r.returncode, 0, r.stderr)
        calls = self.calls()
        # A B C, A B C; SLOW only in the third variant's runs
        self.assertEqual([(c["bin"], c["slow"]) for c in calls],
                         [("slow_perf", ""), ("fast_perf", ""), ("fast_perf", "1")] * 2)
        data = json.loads(self.out.read_text())
        # round 1: old 100, 101, 102; round 2: +1
        self.assertEqual(data["us"]["w01"]["old"], [101.0, 102.0])
        self.assertEqual(data["us"]["w01"]["new"], [51.0, 52.0])
        self.assertEqual(data["us"]["w01"]["off"], [61.0, 62.0])
        e1 = (100 / 100.0 * 100 / 101.0 * 100 / 102.0) ** (1 / 3)
        self.assertAlmostEqual(data["geomean_E"]["old"][0], e1, places=9)
        # medians 101.5 and 51.5: x = 101.5 / 51.5
        self.assertIn(f"x{101.5 / 51.5:.3f}", r.stdout)
        self.assertIn(f"x{101.5 / 61.5:.3f}", r.stdout)
        # each variant's run context, the identifying keys only
        self.assertEqual(data["variants"]["old"]["context"],
                         {"attnbwd_gpu": "Fake GPU", "attnbwd_binary_commit": "slow_perf", "date": "2026-12-04T00:00:00"})
        self.assertEqual(data["variants"]["off"]["context"]["attnbwd_binary_commit"], "fast_perf")

    def test_isolate_runs_one_process_per_workload(self):
        r = self.ab("--workloads", "0,2", "--rounds", "1", "--isolate", "--variant", f"a={self.d / 'slow_perf'}",
                    "--variant", f"b={self.d / 'fast_perf'}", per_round="2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([(c["bin"], c["workloads"]) for c in self.calls()],
                         [("slow_perf", "0"), ("slow_perf", "2"), ("fast_perf", "0"), ("fast_perf", "2")])
        data = json.loads(self.out.read_text())
        self.assertEqual(sorted(data["us"]), ["w00", "w02"])
        self.assertTrue(data["isolate"])

    def test_isolate_refuses_all(self):
        r = self.ab("--workloads", "all", "--isolate", "--variant", f"a={self.d / 'slow_perf'}")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--isolate needs the workloads listed", r.stderr)

    def test_a_failing_variant_is_reported_not_fatal(self):
        r = self.ab("--workloads", "0,1", "--rounds", "1", "--variant", f"a={self.d / 'slow_perf'}",
                    "--variant", f"b={self.d / 'fail_perf'}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("FAILED rc=1 attnbwd::Error something refused", r.stderr)
        data = json.loads(self.out.read_text())
        self.assertEqual(data["geomean_E"]["b"], [None])
        self.assertEqual(data["variants"]["b"]["context"], {})  # no run of it succeeded
        self.assertIn("failed", r.stdout)

    def test_the_first_variant_failing_is_fatal(self):
        r = self.ab("--workloads", "0", "--rounds", "1", "--variant", f"a={self.d / 'fail_perf'}",
                    "--variant", f"b={self.d / 'slow_perf'}")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("every run of the first variant (a) failed", r.stderr)

    def test_bad_variant_syntax_is_an_error(self):
        for bad in ("noequals", "a=bin,NOVALUE", "=bin"):
            r = self.ab("--workloads", "0", "--variant", bad)
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertIn("ab:", r.stderr)


if __name__ == "__main__":
    unittest.main()
