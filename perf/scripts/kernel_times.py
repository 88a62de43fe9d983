#!/usr/bin/env python3
"""Per-kernel GPU durations of one call, from `ncu --metrics gpu__time_duration.sum --csv` output
(cmake/device-check.sh --kernel-times writes it): one line per launch in launch order (µs, stream, grid,
block, name), then the sum over the op's kernels and per stream. Launches of the command-line tool's own
set-up (Kokkos' lock arrays and view initialisation, its architecture query) are listed but not summed.
ncu serialises the launches and flushes the caches before each one, so the durations are each kernel alone
(no overlap with the other stream), at ncu's clock settings.

  python3 perf/scripts/kernel_times.py kernels-OP-W.csv [more.csv ...]
"""
import csv
import io
import sys

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
SETUP = ("Kokkos::", "Impl::", "ViewValueFunctor")


def rows(text):
    at = text.find('"ID"')
    if at < 0:
        return []
    out = []
    for r in csv.DictReader(io.StringIO(text[at:])):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = UNITS.get(r.get("Metric Unit", ""), None)
        if scale is None:
            raise SystemExit(f"kernel_times: unknown unit {r.get('Metric Unit')!r}")
        us = float(r["Metric Value"].replace(",", "")) * scale
        out.append((us, r.get("Stream", "?"), r.get("Grid Size", "?"), r.get("Block Size", "?"), r.get("Kernel Name", "?")))
    return out


def report(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        launches = rows(f.read())
    print(f"== {path}")
    if not launches:
        print("   no kernel rows (ncu printed no gpu__time_duration.sum)")
        return
    total, per_stream = 0.0, {}
    for us, stream, grid, block, name in launches:
        setup = any(name.startswith(p) or p in name for p in SETUP)
        print(f"{us:9.1f} µs  stream {stream:>3}  grid {grid:<14} block {block:<12} {'(set-up) ' if setup else ''}{name[:100]}")
        if not setup:
            total += us
            per_stream[stream] = per_stream.get(stream, 0.0) + us
    print(f"   sum of the op's kernels {total:.1f} µs; per stream: " +
          ", ".join(f"{s}: {v:.1f} µs" for s, v in sorted(per_stream.items())))


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    for p in argv[1:]:
        report(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
