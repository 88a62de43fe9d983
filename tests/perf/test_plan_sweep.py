#!/usr/bin/env python3
"""Test of perf/scripts/plan_sweep.py without a GPU: a fake attnbwd_perf (a small Python script) writes Google
Benchmark JSON whose times depend on the switch's value, fails for one value as the library does for a plan it
refuses, and logs every call. Checks the ranking, the speedups, the failure report, the JSON file, that --env
reaches the value runs only, and that each pass runs the default first.

    python3 tests/perf/test_plan_sweep.py        (plain unittest)
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
SWEEP = ROOT / "perf" / "scripts" / "plan_sweep.py"

# Time per workload: 100 µs by default, per value below, plus 1 µs in the second pass (a spread); value "bad"
# fails like an Error; EXTRA=1 in the environment adds 1000 µs (to see where --env applies).
FAKE = r'''#!/usr/bin/env python3
import json, os, sys
args = dict(a.split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
plan = os.environ.get("ATTNBWD_SM90_LINEAR_PLAN", "")
log = os.environ["FAKE_LOG"]
with open(log, "a") as f:
    f.write(json.dumps({"plan": plan, "extra": os.environ.get("EXTRA", ""), "args": args}) + "\n")
if plan == "bad":
    print("attnbwd::Error ATTNBWD_SM90_LINEAR_PLAN: a split without k-blocks for this shape")
    sys.exit(1)
calls = sum(1 for _ in open(log))
base = {"": 100.0, "1,1,40": 90.0, "4,1,56": 120.0}[plan]
extra = 1000.0 if os.environ.get("EXTRA") == "1" else 0.0
second = 1.0 if calls > 4 else 0.0
benches = []
for w in args["--workloads"].split(","):
    benches.append({"name": "op/w%02d/cuda/iterations:1/manual_time" % int(w), "real_time": base + extra + second + int(w),
                    "time_unit": "us"})
with open(args["--benchmark_out"], "w") as f:
    json.dump({"context": {}, "benchmarks": benches}, f)
'''


class PlanSweep(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = pathlib.Path(self.tmp.name)
        self.perf = d / "attnbwd_perf"
        self.perf.write_text(FAKE)
        self.perf.chmod(self.perf.stat().st_mode | stat.S_IXUSR)
        self.log = d / "calls.jsonl"
        self.out = d / "sweep.json"

    def tearDown(self):
        self.tmp.cleanup()

    def sweep(self, *extra):
        env = dict(os.environ, FAKE_LOG=str(self.log))
        env.pop("ATTNBWD_SM90_LINEAR_PLAN", None)
        cmd = [sys.executable, str(SWEEP), "--perf", str(self.perf), "--op", "gqa_rope_backward", "--workloads",
               "5,13", "--values", "1,1,40", "4,1,56", "bad", "--passes", "2", "--out", str(self.out), *extra]
        return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)

    def test_ranks_variants_and_reports_failures(self):
        r = self.sweep()
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        # w05: default 105 (fastest pass), 1,1,40 → 95 (x1.105), 4,1,56 → 125 (x0.840); ranked fastest first
        block = out.split("== w05")[1].split("==")[0]
        lines = [l.split() for l in block.strip().splitlines()[1:]]
        self.assertEqual([l[0] for l in lines], ["1,1,40", "default", "4,1,56", "bad"])
        self.assertEqual(lines[0][1], "95.0")
        self.assertEqual(lines[0][-1], "x1.105")
        self.assertEqual(lines[2][-1], "x0.840")
        self.assertIn("failed: rc=1 attnbwd::Error ATTNBWD_SM90_LINEAR_PLAN", block)
        self.assertIn("±    1.0", block)  # the two passes differ by 1 µs
        data = json.loads(self.out.read_text())
        self.assertEqual(data["us"]["w13"]["1,1,40"], [103.0, 104.0])
        self.assertEqual(data["us"]["w13"]["bad"], [None, None])
        self.assertIn("bad", data["errors"])

    def test_env_applies_to_value_runs_only_and_default_runs_first(self):
        r = self.sweep("--env", "EXTRA=1")
        self.assertEqual(r.returncode, 0, r.stderr)
        calls = [json.loads(l) for l in self.log.read_text().splitlines()]
        self.assertEqual([c["plan"] for c in calls], ["", "1,1,40", "4,1,56", "bad"] * 2)
        self.assertEqual([c["extra"] for c in calls], ["", "1", "1", "1"] * 2)
        self.assertEqual(calls[0]["args"]["--ops"], "gqa_rope_backward")
        data = json.loads(self.out.read_text())
        self.assertEqual(data["us"]["w05"]["default"], [105.0, 106.0])
        self.assertEqual(data["us"]["w05"]["1,1,40"], [1095.0, 1096.0])

    def test_every_default_failing_is_an_error(self):
        self.perf.write_text("#!/usr/bin/env python3\nimport sys\nprint('no device')\nsys.exit(2)\n")
        r = self.sweep()
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("every default run failed", r.stderr)


if __name__ == "__main__":
    unittest.main()
