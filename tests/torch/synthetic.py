#!/usr/bin/env python3
"""Benchmark-distributed inputs made in torch (spec §1.1, §5), and a timing/memory probe of the
references on them: no attnbwd tool needed.

    python3 tests/torch/synthetic.py --ops 001 --workloads 13 [--repeat 5] [--float64-only]

Prints per workload: median time and peak device memory of reference.float64 and
reference.emulated (the eager baseline; CUDA-synchronised wall time, not the harness' CUPTI span),
and how emulated fares against float64 under the workload's tolerance (the benchmark reference
itself should pass, or the float64 check would be unfair).
"""
import argparse
import math
import statistics
import time

import torch

import check_workloads as cw
import reference


def make_inputs(op, axes, device, gen=None):
    """Inputs of `op` for a workload's axes, drawn as the benchmark draws them."""
    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, dtype=dtype, device=device, generator=gen)

    def weight(rows, cols, dtype):  # randn / sqrt(in), computed in the target dtype
        return randn(rows, cols, dtype=dtype) / math.sqrt(cols)

    def probs(*shape, dtype):
        return torch.softmax(randn(*shape), dim=-1).to(dtype)

    if op == "out_proj_backward":
        B, S, C, bf = axes["batch_size"], axes["seq_len"], 2048, torch.bfloat16
        return {"grad_output": randn(B, S, C, dtype=bf), "reshaped": randn(B, S, C, dtype=bf),
                "weight": weight(C, C, bf)}
    if op == "gqa_rope_backward":
        B, S, C, Hq, Hkv, D, bf = axes["batch_size"], axes["seq_len"], 5120, 32, 8, 128, torch.bfloat16
        trig = lambda f: f(randn(B, S, D).clamp(-math.pi, math.pi)).to(bf)  # noqa: E731
        return {"grad_output": randn(B, S, C, dtype=bf), "hidden_states": randn(B, S, C, dtype=bf),
                "cos": trig(torch.cos), "sin": trig(torch.sin), "q_weight": weight(Hq * D, C, bf),
                "k_weight": weight(Hkv * D, C, bf), "v_weight": weight(Hkv * D, C, bf),
                "o_weight": weight(C, Hq * D, bf), "query_states": randn(B, Hq, S, D, dtype=bf),
                "key_states": randn(B, Hq, S, D, dtype=bf), "value_states": randn(B, Hq, S, D, dtype=bf),
                "attn_weights": probs(B, Hq, S, S, dtype=bf), "attn_output": randn(B, S, Hq * D, dtype=bf),
                "scaling": 0.08838834764831845}
    if op == "vision_mha_norm_backward":
        B, S, E, H, D, f = axes["batch_size"], 577, 1024, 16, 64, torch.float32
        return {"grad_output": randn(B, S, E), "x": randn(B, S, E), "x_mean": randn(B, S, 1),
                "x_var": randn(B, S, 1).abs() + 0.1, "x_norm": randn(B, S, E), "ln_weight": randn(E),
                "qkv_weight": weight(3 * E, E, f), "q": randn(B, H, S, D), "k": randn(B, H, S, D),
                "v": randn(B, H, S, D), "attn_weights": probs(B, H, S, S, dtype=f), "attn_output": randn(B, S, E),
                "out_weight": weight(E, E, f), "scale": 0.125, "norm_eps": 1e-5}
    if op == "vision_varlen_rope_backward":
        S, n, C, D = axes["total_seq_len"], axes["num_sequences"], 3584, 128
        lengths = [S // n + (i < S % n) for i in range(n)]  # even split, the first S mod n get one more
        cu = torch.tensor([0] + lengths, dtype=torch.int64).cumsum(0).to(torch.int32).to(device)
        return {"grad_output": randn(S, C), "hidden_states": randn(S, C), "qkv_weight": 0.02 * randn(3 * C, C),
                "qkv_bias": 0.01 * randn(3 * C), "proj_weight": 0.02 * randn(C, C), "proj_bias": 0.01 * randn(C),
                "cos": randn(S, D), "sin": randn(S, D), "cu_seqlens": cu, "attention_dropout": 0.0,
                "scaling": 128**-0.5}
    raise ValueError(op)


def probe(fn, device, repeat):
    """Median seconds and peak bytes (CUDA) of fn()."""
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del out
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else float("nan")
    return statistics.median(times), peak


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="all")
    p.add_argument("--workloads", default="all")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--float64-only", action="store_true")
    p.add_argument("--solexec", default=None)
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ops = list(cw.PROBLEMS) if args.ops == "all" else [cw.ALIASES.get(o, o) for o in args.ops.split(",")]
    solexec = cw.find_solexec(args.solexec)
    gen = torch.Generator(device=device).manual_seed(200)
    print(f"synthetic: torch {torch.__version__} on {device}", flush=True)
    for op in ops:
        for w in cw.load_workloads(solexec, op):
            if args.workloads != "all" and w["index"] not in {int(i) for i in args.workloads.split(",")}:
                continue
            inputs = make_inputs(op, w["axes"], device, gen)
            in_bytes = sum(t.numel() * t.element_size() for t in inputs.values() if torch.is_tensor(t))
            line = f"{op} #{w['index']} {cw.axes_text(w['axes'])}: inputs {in_bytes / 1e9:.2f} GB"
            t, peak = probe(lambda: reference.float64(op, inputs), device, 1)
            line += f" | float64 {t * 1e3:.1f} ms peak {peak / 1e9:.2f} GB"
            if not args.float64_only:
                ref = reference.float64(op, inputs)
                emu = reference.emulated(op, inputs)  # also the warm-up
                # Would the benchmark's own reference pass against float64? (is the check fair)
                stats = {n: cw.compare(emu[n], ref[n], w["atol"], w["rtol"]) for n in ref}
                worst = min(stats, key=lambda n: stats[n]["matched_ratio"])
                del ref, emu
                t, peak = probe(lambda: reference.emulated(op, inputs), device, args.repeat)
                line += (f" | emulated {t * 1e3:.3f} ms peak {peak / 1e9:.2f} GB | emulated vs float64: worst "
                         f"{worst} matched {stats[worst]['matched_ratio']:.6f} relL2 "
                         f"{max(st['rel_l2'] for st in stats.values()):.2e}")
            print(line, flush=True)
            inputs = None  # free before the next workload
            if device.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
