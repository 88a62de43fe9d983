#!/usr/bin/env python3
"""Test of perf/scripts/stage_split.py without a GPU: stage lines in backends/cuda/stages.cu's format (with other
output between them) for two call shapes. Checks the medians after --skip, a stage named twice summed within its
call, a stage missing from some calls counted as 0 there, the shares of the median total, the order of first
appearance, and the exit status 1 when a file has no stage line.

    python3 tests/perf/test_stage_split.py        (plain unittest)
"""
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPLIT = ROOT / "perf" / "scripts" / "stage_split.py"


def line(what, stages):
    body = "".join(f" {n} {ms:.4f}" for n, ms in stages)
    return f"{what} stages (ms):{body} | total {sum(ms for _, ms in stages):.4f}\n"


class StageSplit(unittest.TestCase):
    def run_split(self, text, *args):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        r = subprocess.run([sys.executable, str(SPLIT), f.name, *args], capture_output=True, text=True)
        pathlib.Path(f.name).unlink()
        return r

    def test_medians_sums_and_shares(self):
        a, b = "gqa_rope_backward B=1 S=131", "gqa_rope_backward B=2 S=128"
        text = line(a, [("o_proj", 9.0), ("dS", 9.0)]) + "2024-01-01 benchmark noise\n"  # the skipped warm-up call
        for k, ms in enumerate([0.020, 0.022, 0.021]):
            stages = [("o_proj", ms), ("dS", 0.001), ("dS", 0.002)]
            if k == 1:
                stages.append(("pad", 0.006))
            text += line(a, stages) + line(b, [("small_attn", 0.010 + k * 0.001)])
        r = self.run_split(text, "--skip", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.splitlines()
        self.assertEqual(len(out), 2, r.stdout)
        self.assertTrue(out[0].startswith(a + " [3 calls]: "), out[0])
        self.assertIn("o_proj 21.0", out[0])  # median of 20, 22, 21 µs (the 9 ms call skipped)
        self.assertIn("dS 3.0", out[0])  # 1 + 2 µs in each call
        self.assertIn("pad 0.0", out[0])  # in one call of three: median 0
        self.assertTrue(out[0].endswith("total 24.0"), out[0])  # totals 23, 31, 24 µs
        self.assertIn("dS 3.0 (12 %)", out[0])
        self.assertTrue(out[1].startswith(b + " [2 calls]: small_attn 11.5 (100 %)"), out[1])  # 10 skipped: 11, 12

    def test_no_stage_lines(self):
        r = self.run_split("nothing here\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("ATTNBWD_CUDA_STAGES", r.stdout)


if __name__ == "__main__":
    unittest.main()
