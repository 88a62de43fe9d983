#!/usr/bin/env python3
"""A/B timing of builds or switches: interleaved rounds of attnbwd_perf runs, one table of the variants.

Each variant is a binary plus optional environment settings, NAME=BINARY[,VAR=VALUE...]. Every round runs every
variant once, in the order given (A B C, A B C, ...), so that a drift of the machine over the call falls on all
variants alike. The summary gives, per variant, the geomean E of each round (E as attnbwd_perf reports it: T_SOL/T)
and, per workload, the median time over the rounds and its ratio to the first variant's median (x > 1: faster).

    python3 perf/scripts/ab.py --op out_proj_backward --workloads all --rounds 3 \\
        --variant old=/tmp/attnbwd_perf_old --variant new=build/cuda/perf/attnbwd_perf \\
        --variant off=build/cuda/perf/attnbwd_perf,ATTNBWD_SM90_LINEAR_LEAD=0 --out ab.json

The JSON (--out) also records, per variant, what its first run's benchmark JSON says of itself (GPU, driver, the
binary's commit, the clock, the date), so that a file copied under perf/results names them.

--isolate runs each workload in a process of its own (one attnbwd_perf run per workload and variant) instead of
all workloads in one process, as the suite does. Use both: a change of one kernel can move the times of other
workloads of the same process (perf/NOTES.md, twenty-eighth session: a second kernel launched at one workload made
the later workloads of the process slower), which only the suite's way shows, while --isolate shows each
workload's own difference.
"""
import argparse
import json
import math
import os
import statistics
import sys
import tempfile

from perf_run import parse_env, run_perf


def parse_variant(text):
    """NAME=BINARY[,VAR=VALUE...] -> (name, binary, {VAR: VALUE})."""
    if "=" not in text:
        raise SystemExit(f"ab: --variant expects NAME=BINARY[,VAR=VALUE...], got {text!r}")
    name, rest = text.split("=", 1)
    parts = rest.split(",")
    binary, env = parts[0], parse_env(parts[1:], f"ab: variant {name!r}")
    if not name or not binary:
        raise SystemExit(f"ab: --variant expects NAME=BINARY[,VAR=VALUE...], got {text!r}")
    return name, binary, env


# The keys of attnbwd_perf's JSON context that identify a run: the GPU, its driver, the binary's commit, the clock
# and the date (perf/results files must name them).
CONTEXT_KEYS = ("attnbwd_gpu", "attnbwd_gpu_driver", "attnbwd_binary_commit", "attnbwd_cuda_clock", "date")


def run_context(path):
    """CONTEXT_KEYS of the benchmark JSON at `path` (those present)."""
    with open(path, encoding="utf-8") as f:
        ctx = json.load(f).get("context", {})
    return {k: ctx[k] for k in CONTEXT_KEYS if k in ctx}


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", required=True)
    ap.add_argument("--workloads", required=True, help="as attnbwd_perf takes them: 7,12 or all")
    ap.add_argument("--variant", action="append", required=True, help="NAME=BINARY[,VAR=VALUE...] (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--isolate", action="store_true", help="one process per workload (needs explicit --workloads)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per attnbwd_perf run")
    ap.add_argument("--out", help="write every time to this JSON file")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        raise SystemExit("ab: --rounds must be at least 1")
    variants = [parse_variant(v) for v in a.variant]
    names = [v[0] for v in variants]
    if len(set(names)) != len(names):
        raise SystemExit("ab: variant names must differ")
    if a.isolate and a.workloads == "all":
        raise SystemExit("ab: --isolate needs the workloads listed (e.g. 0,1,2), not 'all'")
    groups = a.workloads.split(",") if a.isolate else [a.workloads]
    runs = {n: [] for n in names}  # per variant: per round {workload: (µs, E)}, or None where every run failed
    errors = {}
    contexts = {}  # per variant: what its first successful run says of itself (GPU, driver, binary's commit, date)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for i, (name, binary, env) in enumerate(variants):
                merged = {}
                for j, wl in enumerate(groups):
                    path = os.path.join(tmp, f"r{r}-v{i}-g{j}.json")
                    res, why = run_perf(binary, a.op, wl, env, path, a.timeout, "ab")
                    if res is None:
                        errors.setdefault(name, why)
                        print(f"round {r + 1} {name} [{wl}]: FAILED {why}", file=sys.stderr)
                        continue
                    merged.update(res)
                    if name not in contexts:
                        contexts[name] = run_context(path)
                runs[name].append(merged or None)
                print(f"round {r + 1} {name}: {len(merged)} workloads", file=sys.stderr)
    base = names[0]
    base_ok = [x for x in runs[base] if x]
    if not base_ok:
        raise SystemExit(f"ab: every run of the first variant ({base}) failed: {errors.get(base, '')}")
    workloads = sorted(set().union(*[set(x) for n in names for x in runs[n] if x]))
    mode = "one process per workload" if a.isolate else "all workloads in one process"
    print(f"{a.op}: {len(names)} variants, {a.rounds} rounds, {mode}")
    print("geomean E per round:")
    summary = {"op": a.op, "rounds": a.rounds, "isolate": a.isolate,
               "variants": {n: {"binary": b, "env": e, "context": contexts.get(n, {})} for n, b, e in variants},
               "geomean_E": {}, "us": {}, "errors": errors}
    for n in names:
        per_round = []
        for x in runs[n]:
            es = [x[w][1] for w in workloads if x and w in x and x[w][1]]
            per_round.append(geomean(es) if x and len(es) == len(workloads) else None)
        summary["geomean_E"][n] = per_round
        shown = " ".join("   -   " if g is None else f"{g:.4f}" for g in per_round)
        print(f"  {n:>12s}  {shown}")
    med = {n: {} for n in names}
    for n in names:
        for w in workloads:
            ts = [x[w][0] for x in runs[n] if x and w in x and x[w][0] > 0]  # 0: the run reported an error
            if ts:
                med[n][w] = statistics.median(ts)
    print("median µs per workload (x = first variant / this one):")
    print("  " + "workload".ljust(10) + "".join(f"{n:>22s}" for n in names))
    for w in workloads:
        cells = []
        for n in names:
            if w not in med[n]:
                cells.append(f"{'failed':>22s}")
            elif n == base or w not in med[base]:
                cells.append(f"{med[n][w]:>22.2f}")
            else:
                cells.append(f"{med[n][w]:>13.2f} x{med[base][w] / med[n][w]:.3f}")
        print("  " + w.ljust(10) + "".join(cells))
        summary["us"][w] = {n: [x[w][0] if x and w in x else None for x in runs[n]] for n in names}
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
