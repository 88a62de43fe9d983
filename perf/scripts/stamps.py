#!/usr/bin/env python3
"""Summarises the per-CTA stamp lines of perf/probes/smallk_corun_stamps.patch's probe build.

Each of gqa's small-path first attention kernel's CTAs prints `DP cta smid t0_ns t1_ns cycles` (device printf; the
fiftieth session's build adds the cycles at its first tile, at the end of sweep 1 and after the tile loop); the
lines of one call are its grid's CTAs (64 at gqa #11). Prints, per file, the median over calls (the first `--skip`
left out: warm-up, tuning) of each call's median CTA duration in ns and in cycles, the spread of the CTAs' end times
(ns), and the intermediate stamps' medians where present.
    python3 perf/scripts/stamps.py FILE... [--ctas 64] [--skip 10]
"""
import argparse
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ctas", type=int, default=64)
    ap.add_argument("--skip", type=int, default=10)
    a = ap.parse_args()
    for f in a.files:
        dp = []
        for line in open(f, errors="replace"):
            p = line.split()
            if len(p) >= 6 and p[0] == "DP":
                dp.append(tuple(int(x) for x in p[1:]))
        dp.sort(key=lambda x: x[2])
        calls = [dp[i:i + a.ctas] for i in range(0, len(dp) - a.ctas + 1, a.ctas)][a.skip:]
        if not calls:
            print(f"{f}: no complete call of {a.ctas} stamps")
            continue
        ns = statistics.median(statistics.median(x[3] - x[2] for x in c) for c in calls)
        cy = statistics.median(statistics.median(x[4] for x in c) for c in calls)
        spread = statistics.median(max(x[3] for x in c) - min(x[3] for x in c) for c in calls)
        mid = ""
        if all(len(x) >= 8 for c in calls for x in c):
            m = [statistics.median(statistics.median(x[k] for x in c) for c in calls) for k in (5, 6, 7)]
            mid = f"; cycles at first tile {m[0]:.0f}, sweep 1 done {m[1]:.0f}, loop done {m[2]:.0f}"
        print(f"{f}: {len(calls)} calls, CTA {ns:.0f} ns, {cy:.0f} cycles ({cy / ns:.3f} GHz), ends within "
              f"{spread:.0f} ns{mid}")


if __name__ == "__main__":
    main()
