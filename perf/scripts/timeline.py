#!/usr/bin/env python3
"""The timeline of one timed call, from the file attnbwd_perf writes under ATTNBWD_PERF_TIMELINE=<file> (CUPTI
activity records of every timed call: kernels, memsets, memcpys with their GPU start and end and stream).

Picks the call whose span is the median of the file's calls (run one workload per file), and prints its activities
in start order: start, end, duration (µs from the call's first start), stream, name (demangled by c++filt where it is
on the PATH, shortened); then per stream the busy time and the gaps where no activity of the call ran on any stream.

  ATTNBWD_PERF_TIMELINE=t.txt attnbwd_perf --backend=cuda --ops=gqa_rope_backward --workloads=13
  python3 perf/scripts/timeline.py t.txt [--call N] [--width 60]
"""
import argparse
import re
import shutil
import statistics
import subprocess
import sys


def read(path):
    calls, cur = [], None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            p = line.split()
            if not p:
                continue
            if p[0] == "call":
                cur = {"n": int(p[1]), "span": float(p[3]), "events": float(p[5]), "acts": []}
                calls.append(cur)
            elif cur is not None and len(p) >= 5:
                extra = f" grid {p[5]} cl {p[6]} smem {int(p[7]) // 1024}K" if len(p) >= 8 and p[3] == "kernel" else ""
                cur["acts"].append((float(p[0]), float(p[1]), p[2], p[3], p[4], extra))
    return calls


def demangle(names):
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return {n: short(d) for n, d in zip(names, out)}


def short(name):
    # Drop template arguments and parameter lists: "ns::kernel<...>(...)" -> "kernel<>".
    depth, s = 0, []
    for ch in name:
        if ch in "<(":
            if depth == 0:
                s.append("<>" if ch == "<" else "")
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            s.append(ch)
    n = "".join(s)
    n = re.sub(r"^(void |attnbwd::cuda::(\(anonymous namespace\)::)?)", "", n)
    return n.split("::")[-1] if "::" in n else n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--call", type=int, default=-1, help="the call's index (default: the median span's)")
    ap.add_argument("--width", type=int, default=60, help="columns of the bar chart")
    a = ap.parse_args()
    calls = read(a.file)
    if not calls:
        sys.exit(f"timeline: no calls in {a.file}")
    if a.call >= 0:
        c = next(c for c in calls if c["n"] == a.call)
    else:
        med = statistics.median_low([c["span"] for c in calls])
        c = next(c for c in calls if c["span"] == med)
    names = demangle(sorted({x[4] for x in c["acts"] if x[4] != "-"}))
    spans = [x["span"] for x in calls]
    print(f"{a.file}: {len(calls)} calls, span median {statistics.median(spans):.1f} µs (min {min(spans):.1f}, "
          f"max {max(spans):.1f}); call {c['n']}: span {c['span']:.1f} µs, events {c['events']:.1f} µs")
    end = max(x[1] for x in c["acts"])
    streams = sorted({x[2] for x in c["acts"]}, key=lambda s: min(x[0] for x in c["acts"] if x[2] == s))
    scale = a.width / end if end > 0 else 1
    for s0, s1, st, kind, name, extra in c["acts"]:
        label = names.get(name, kind) if name != "-" else kind
        bar = [" "] * a.width
        for i in range(int(s0 * scale), min(a.width, max(int(s0 * scale) + 1, int(s1 * scale + 0.5)))):
            bar[i] = "#"
        print(f"{s0:8.1f} {s1:8.1f} {s1 - s0:7.1f}  s{streams.index(st)} |{''.join(bar)}| {label[:48]}{extra}")
    for i, st in enumerate(streams):
        busy = sum(x[1] - x[0] for x in c["acts"] if x[2] == st)
        print(f"stream s{i} (id {st}): busy {busy:.1f} µs of {end:.1f}")
    # Gaps: times covered by no activity of the call.
    iv = sorted((x[0], x[1]) for x in c["acts"])
    gaps, reach = [], iv[0][1]
    for s0, s1 in iv[1:]:
        if s0 > reach:
            gaps.append((reach, s0))
        reach = max(reach, s1)
    print(f"idle (no activity on any stream): {sum(g1 - g0 for g0, g1 in gaps):.1f} µs in {len(gaps)} gaps"
          + (": " + ", ".join(f"{g0:.1f}-{g1:.1f}" for g0, g1 in gaps[:12]) if gaps else ""))


if __name__ == "__main__":
    main()
