#!/usr/bin/env python3
"""Plots E = T_SOL / T per workload from a perf suite JSON: one series per backend (skipped
benchmarks leave gaps), optionally the PyTorch baselines of torch_baselines.py, and the SOL line at
E = 1. Log scale, since host runs sit many decades below it.

    python3 perf/plot.py perf/results/h200-2026-12-01-abc1234.json [--torch torch.json] [-o out.png]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_io  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite_json")
    ap.add_argument("--torch", help="torch_baselines.py JSON to add as series")
    ap.add_argument("-o", "--output", help="PNG path (default: the JSON's path with .png)")
    args = ap.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    context, rows = results_io.load_suite(args.suite_json)
    workloads = []  # (op, index, uuid, t_sol) in run order
    for r in rows:
        key = (r["op"], r["workload"], r["uuid"], r["t_sol"])
        if key not in workloads:
            workloads.append(key)
    x_of = {(op, i): x for x, (op, i, _, _) in enumerate(workloads)}

    series = {}  # name -> ([x], [E])
    for r in rows:
        if r["E"]:
            xs, ys = series.setdefault(r["backend"], ([], []))
            xs.append(x_of[(r["op"], r["workload"])])
            ys.append(r["E"])
    if args.torch:
        times = results_io.torch_times(results_io.load_torch(args.torch)[1])
        for op, i, uuid, t_sol in workloads:
            for variant in ("eager", "best"):
                t = times.get(uuid, {}).get(variant)
                if t and t_sol:
                    xs, ys = series.setdefault(f"torch {variant}", ([], []))
                    xs.append(x_of[(op, i)])
                    ys.append(t_sol / t)

    fig, ax = plt.subplots(figsize=(max(8, 0.22 * len(workloads) + 3), 5))
    markers = "osD^v<>"
    for k, (name, (xs, ys)) in enumerate(sorted(series.items())):
        ax.plot(xs, ys, linestyle="none", marker=markers[k % len(markers)], label=name)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="SOL (E = 1)")
    # Separators and labels per op.
    for x, (op, i, _, _) in enumerate(workloads):
        if x > 0 and workloads[x - 1][0] != op:
            ax.axvline(x - 0.5, color="grey", linewidth=0.5)
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([results_io.short(op, i) for op, i, _, _ in workloads], rotation=90, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("E = T_SOL / T (median)")
    gpu = context.get("attnbwd_gpu", "?")
    gpu = "no GPU (host run)" if gpu == "none" else gpu
    title = f"attnbwd perf: {gpu}, {context.get('attnbwd_sol_model', '')}"
    if context.get("attnbwd_sol_note"):
        title += f"\n{context['attnbwd_sol_note']}"
    ax.set_title(title, fontsize=9)
    if not series:
        ax.text(0.5, 0.5, "no benchmark ran (all skipped)", transform=ax.transAxes, ha="center")
    ax.legend(fontsize=8, loc="best")
    ax.grid(True, which="major", axis="y", alpha=0.3)
    fig.tight_layout()
    out = args.output or os.path.splitext(args.suite_json)[0] + ".png"
    fig.savefig(out, dpi=120)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
