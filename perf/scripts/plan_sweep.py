#!/usr/bin/env python3
"""Times variants of one environment switch against the default, workload by workload, in interleaved passes.

Written for ATTNBWD_SM90_LINEAR_PLAN=sx,sw,cx (the sm_90a linear-backward kernel's work split: dX split sx ways,
dW sw ways, cx CTAs on dX), which is how the grouped q/k/v launch's plan was chosen (perf/NOTES.md, tenth session
of 2026-12-01); any switch works (--switch). Each pass runs attnbwd_perf once with no switch set ("default") and
once per value, in that order; --env VAR=VAL settings apply to the value runs only. A value that the op refuses
(an Error: the perf run fails) is reported as such. The summary ranks, per workload, every variant by its
fastest pass against the default's fastest pass.

  python3 perf/scripts/plan_sweep.py --perf build/cuda/perf/attnbwd_perf --op gqa_rope_backward \\
      --workloads 7,12 --values 1,1,40 2,1,40 4,1,56 --env ATTNBWD_CUDA_GQA_QKV=grouped --passes 2 --out sweep.json

Timing follows the perf suite's own method (median of its calls, L2 flushed); the spread between passes is
printed so a difference smaller than it is not read as a result.
"""
import argparse
import json
import os
import sys
import tempfile

from perf_run import parse_env, run_perf


def run_times(perf, op, workloads, extra_env, out_path, timeout):
    """Runs one perf invocation; returns ({workload: µs}, "") or (None, why) when it failed."""
    res, why = run_perf(perf, op, workloads, extra_env, out_path, timeout, "plan_sweep")
    return ({w: us for w, (us, _) in res.items()}, "") if res else (None, why)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--perf", required=True, help="the attnbwd_perf binary")
    ap.add_argument("--op", required=True)
    ap.add_argument("--workloads", required=True, help="as attnbwd_perf takes them, e.g. 7,12 or all")
    ap.add_argument("--switch", default="ATTNBWD_SM90_LINEAR_PLAN", help="the variable the values are given to")
    ap.add_argument("--values", nargs="+", required=True)
    ap.add_argument("--env", action="append", default=[], help="VAR=VALUE for the value runs (repeatable)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per perf run")
    ap.add_argument("--out", help="write every time to this JSON file")
    a = ap.parse_args(argv)
    if a.passes < 1:
        raise SystemExit("plan_sweep: --passes must be at least 1")
    extra = parse_env(a.env, "plan_sweep: --env")
    variants = ["default"] + a.values
    times = {v: [] for v in variants}  # per variant: one {workload: µs} or None per pass
    errors = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in range(a.passes):
            for i, v in enumerate(variants):
                env = {} if v == "default" else dict(extra, **{a.switch: v})
                t, why = run_times(a.perf, a.op, a.workloads, env, os.path.join(tmp, f"p{p}-{i}.json"), a.timeout)
                times[v].append(t)
                if t is None:
                    errors[v] = why
                print(f"pass {p + 1} {v}: {'ok' if t else 'FAILED ' + why}", file=sys.stderr)
    base_runs = [t for t in times["default"] if t]
    if not base_runs:
        raise SystemExit("plan_sweep: every default run failed: " + errors.get("default", ""))
    workloads = sorted(base_runs[0])
    print(f"{a.op}: {a.switch} over {len(a.values)} values, {a.passes} passes (µs: fastest pass, spread; x = default/variant)")
    summary = {}
    for w in workloads:
        base = min(r[w] for r in base_runs if w in r)
        rows = []
        for v in variants:
            ok = [r[w] for r in times[v] if r and w in r]
            if not ok:
                rows.append((float("inf"), v, None, None))
                continue
            rows.append((min(ok), v, max(ok) - min(ok), base / min(ok)))
        rows.sort(key=lambda r: r[0])
        print(f"== {w} (default {base:.1f} µs)")
        for best, v, spread, x in rows:
            if x is None:
                print(f"   {v:>14s}  failed: {errors.get(v, '')}")
            else:
                print(f"   {v:>14s}  {best:9.1f}  ±{spread:7.1f}  x{x:.3f}")
        summary[w] = {v: [r[w] if r and w in r else None for r in times[v]] for v in variants}
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"op": a.op, "switch": a.switch, "env": extra, "passes": a.passes, "us": summary,
                       "errors": errors}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
