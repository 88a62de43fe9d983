#!/usr/bin/env python3
"""Summarises ATTNBWD_CUDA_STAGES=1's stage lines (backends/cuda/stages.cu) into one line per call shape.

Each call of gqa_rope, vision_mha_norm or vision_varlen_rope under the switch prints
`WHAT stages (ms): NAME MS NAME MS ... | total MS` to stderr, its stages serialised on the caller's stream (so they add
up to the serialised time, not the overlapped call's). Prints, per WHAT in order of first appearance, the median over
its calls (the first `--skip` left out: warm-up, cuBLASLt tuning) of each stage in µs, then the median total and each
stage's share of it. A stage named twice in one call is summed within the call.
    python3 perf/scripts/stage_split.py FILE... [--skip 10]
"""
import argparse
import statistics


def parse(line):
    if " stages (ms):" not in line or " | total " not in line:
        return None
    what, rest = line.split(" stages (ms):", 1)
    body, total = rest.rsplit(" | total ", 1)
    p = body.split()
    if len(p) % 2:
        return None
    stages = {}
    for name, ms in zip(p[0::2], p[1::2]):
        stages[name] = stages.get(name, 0.0) + float(ms)
    return what.strip(), stages, float(total)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--skip", type=int, default=10)
    a = ap.parse_args()
    calls = {}
    for f in a.files:
        for line in open(f, errors="replace"):
            r = parse(line.rstrip("\n"))
            if r:
                calls.setdefault(r[0], []).append(r[1:])
    if not calls:
        print("no stage lines (was ATTNBWD_CUDA_STAGES=1 set?)")
        return 1
    for what, cs in calls.items():
        kept = cs[a.skip:] if len(cs) > a.skip else cs
        names = []
        for stages, _ in kept:
            names += [n for n in stages if n not in names]
        total = statistics.median(t for _, t in kept) * 1e3
        parts = []
        for n in names:
            us = statistics.median(s.get(n, 0.0) for s, _ in kept) * 1e3
            parts.append(f"{n} {us:.1f} ({100 * us / total:.0f} %)")
        print(f"{what} [{len(kept)} calls]: " + ", ".join(parts) + f", total {total:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
