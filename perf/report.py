#!/usr/bin/env python3
"""Joins a perf suite JSON with torch_baselines.py's JSON (by workload uuid) and prints
  1. geomean E = T_SOL / T per op and backend, with the PyTorch eager / best columns;
  2. one line per workload: T and E per backend, "x faster than PyTorch (eager / best)".
Writes the suite JSON again with every benchmark row extended by torch_eager_s, torch_best_s,
torch_best_variant, speedup_vs_torch_eager and speedup_vs_torch_best (null where unknown).

    python3 perf/report.py SUITE.json [--torch TORCH.json] [-o MERGED.json]
Without --torch it reports E alone. Standard library only.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_io  # noqa: E402


def fmt(v, spec=".3g", none="-"):
    return none if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite_json")
    ap.add_argument("--torch", help="torch_baselines.py JSON")
    ap.add_argument("-o", "--output", help="merged JSON (default: SUITE.report.json)")
    args = ap.parse_args()

    context, rows = results_io.load_suite(args.suite_json)
    times = results_io.torch_times(results_io.load_torch(args.torch)[1]) if args.torch else {}
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    ops = list(dict.fromkeys(r["op"] for r in rows))

    # Per-row speedups, attached to the rows of the merged JSON.
    for r in rows:
        t = times.get(r["uuid"], {})
        raw = r["raw"]
        raw["torch_eager_s"] = t.get("eager")
        raw["torch_best_s"] = t.get("best")
        raw["torch_best_variant"] = t.get("best_variant")
        for variant in ("eager", "best"):
            ref = t.get(variant)
            r[variant] = ref / r["seconds"] if ref and r["seconds"] else None
            raw[f"speedup_vs_torch_{variant}"] = r[variant]

    print(f"GPU: {context.get('attnbwd_gpu', '?')}; {context.get('attnbwd_sol_model', '')}")
    if context.get("attnbwd_sol_note"):
        print(f"note: {context['attnbwd_sol_note']}")
    clock = context.get("attnbwd_cuda_clock")
    if clock:
        print(f"CUDA clock: {clock}" + (" (the CUPTI span of each call's GPU work, spec 7)" if clock == "cupti" else ""))
    if times and clock == "cupti":
        print("note: the PyTorch baselines are timed with CUDA events, this run with the CUPTI span; "
              "run the suite with --clock=events to compare like with like")
    print("E = T_SOL / T, T = median time; 'x eager/best' = T_torch / T (> 1: attnbwd is faster)\n")

    # 1. geomean E per op and backend (+ torch).
    head = ["op"] + [f"E {b}" for b in backends] + (["E torch eager", "E torch best"] if times else [])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for op in ops:
        op_rows = [r for r in rows if r["op"] == op]
        cells = [op]
        for b in backends:
            rs = [r for r in op_rows if r["backend"] == b]
            ran = [r for r in rs if r["E"]]
            g = results_io.geomean([r["E"] for r in ran])
            cells.append(f"{fmt(g, '.3g')} ({len(ran)}/{len(rs)})")
        if times:
            uuids = {r["uuid"]: r["t_sol"] for r in op_rows}
            for variant in ("eager", "best"):
                es = [ts / times[u][variant] for u, ts in uuids.items() if ts and times.get(u, {}).get(variant)]
                cells.append(f"{fmt(results_io.geomean(es), '.3g')} ({len(es)}/{len(uuids)})")
        print("| " + " | ".join(cells) + " |")

    # 2. per workload.
    print()
    head = ["workload", "axes", "T_SOL us"]
    for b in backends:
        head += [f"{b} us", f"{b} E"] + ([f"{b} x eager/best"] if times else [])
    if times:
        head += ["torch eager us", "torch best us (variant)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    seen = []
    for r in rows:
        if (r["op"], r["workload"]) in seen:
            continue
        seen.append((r["op"], r["workload"]))
        cells = [results_io.short(r["op"], r["workload"]), r["axes"], fmt(r["t_sol"] and r["t_sol"] * 1e6, ".4g")]
        for b in backends:
            rb = next((x for x in rows if x["op"] == r["op"] and x["workload"] == r["workload"]
                       and x["backend"] == b), None)
            if rb is None or rb["seconds"] is None:
                cells += ["skipped" if rb else "-", "-"] + (["-"] if times else [])
                continue
            cells += [fmt(rb["seconds"] * 1e6, ".4g"), fmt(rb["E"], ".3g")]
            if times:
                cells.append(f"{fmt(rb['eager'], '.2f')} / {fmt(rb['best'], '.2f')}")
        if times:
            t = times.get(r["uuid"], {})
            cells.append(fmt(t.get("eager") and t["eager"] * 1e6, ".4g"))
            cells.append(f"{fmt(t.get('best') and t['best'] * 1e6, '.4g')} ({t.get('best_variant', '-')})")
        print("| " + " | ".join(cells) + " |")

    skipped = {(r["backend"], r["error"]) for r in rows if r["error"]}
    for backend, error in sorted(skipped):
        print(f"\nskipped ({backend}): {error}")

    with open(args.suite_json) as f:
        doc = json.load(f)
    raw_by_name = {r["raw"]["name"]: r["raw"] for r in rows}
    doc["benchmarks"] = [raw_by_name.get(b["name"], b) for b in doc.get("benchmarks", [])]
    if args.torch:
        doc.setdefault("context", {})["torch_baselines"] = os.path.basename(args.torch)
    out = args.output or os.path.splitext(args.suite_json)[0] + ".report.json"
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"\nmerged JSON: {out}")


if __name__ == "__main__":
    main()
