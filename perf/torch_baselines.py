#!/usr/bin/env python3
"""PyTorch baselines for the perf suite, timed as the suite times attnbwd (spec §7): inputs drawn
once per workload on the GPU with the spec §1.1/§5 distributions (torch, seeded), 2 x L2 zero-filled
before every call (not timed), CUDA events around the call, median of --iters after --warmup calls.

Variants, each checked once against tests/torch/reference.py's float64 with the workload's
tolerance (spec §6: atol + rtol|ref| on >= 99 % of elements, finite, not all-zero):
  eager      tests/torch/reference.py emulated(): the reference's own precision flow on whole tensors
             (fp32 without TF32 for 001/017, bf16 rounding points for 003/004)
  best       bf16 ops: bf16 cuBLAS GEMMs (fp32 accumulation), fused softmax backward, the GQA sum
             folded into one GEMM over the 4 query heads of a group, scaling folded into RoPE tables
  best-tf32  fp32 ops: the same composition with TF32 GEMMs
  best-fp16  fp32 ops: fp16 GEMM operands with fp32 results (torch.mm/bmm out_dtype where available)
Variable-length attention (017) batches the sequences of equal length together (no Python loop
over sequences or heads); like the reference it reads cu_seqlens back to the host inside the call.

    python3 perf/torch_baselines.py [--ops 004,003] [--workloads all|smallest|0,8] [-o out.json]
Writes JSON (default perf/results/torch-<gpu>-<date>.json) for perf/report.py --torch.
"""
import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "torch"))
import reference  # noqa: E402  (emulated: the eager baseline; float64: the check)

PROBLEMS = {
    "out_proj_backward": "004_attention_output_projection_with_reshape_backward",
    "gqa_rope_backward": "003_grouped_query_attention_with_rope_backward",
    "vision_mha_norm_backward": "001_fused_vision_multihead_attention_with_norms_backward",
    "vision_varlen_rope_backward": "017_fused_vision_cu_seqlens_attention_with_2d_rope_backward",
}
ALIASES = {folder[:3]: op for op, folder in PROBLEMS.items()}
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "int32": torch.int32}
MATCH_RATIO = 0.99


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- workloads (read from the files, as the C++ suite does) ------------------------------------

def find_solexec(arg):
    for c in (arg, os.environ.get("ATTNBWD_SOLEXEC"), os.path.join(REPO, "..", "shared", "solexec"),
              os.path.join(REPO, "shared", "solexec")):
        if c and os.path.isdir(os.path.join(c, PROBLEMS["out_proj_backward"])):
            return os.path.abspath(c)
    sys.exit("torch_baselines: no solexec folder; pass --solexec or set ATTNBWD_SOLEXEC")


def load_problem(solexec, op):
    folder = os.path.join(solexec, PROBLEMS[op])
    with open(os.path.join(folder, "definition.json")) as f:
        definition = json.load(f)
    with open(os.path.join(folder, "workload.jsonl")) as f:
        workloads = [json.loads(line) for line in f if line.strip()]
    return definition, workloads


def resolve_axes(definition, given):
    axes = {k: v["value"] for k, v in definition["axes"].items() if v["type"] == "const"}
    axes.update(given)
    pending = {k: v["expression"] for k, v in definition["axes"].items() if v["type"] == "expr"}
    while pending:  # expressions may use each other: evaluate those whose names are known
        progress = False
        for k, e in list(pending.items()):
            try:
                axes[k] = int(eval(e, {"__builtins__": {}}, dict(axes)))  # noqa: S307 (axis arithmetic)
            except NameError:
                continue
            del pending[k]
            progress = True
        if not progress:
            raise ValueError(f"cannot resolve axes {sorted(pending)}")
    return axes


def select(workloads, how):
    if how == "all":
        return list(range(len(workloads)))
    if how == "smallest":  # least product of the variable axes: the C++ suite's choice too
        return [min(range(len(workloads)), key=lambda i: math.prod(workloads[i]["axes"].values()))]
    picked = []
    for item in how.split(","):
        picked.append(int(item) if item.isdigit() else
                      next(i for i, w in enumerate(workloads) if w["uuid"] == item))
    return picked


# ---- inputs (spec §1.1 rules; §5 for 017's custom inputs) ----------------------------------------

def _is_positive(name):
    bare = ("var", "std", "rstd", "variance")
    return name in bare or any(name.endswith("_" + b) for b in bare)


def make_inputs(definition, workload, axes, gen, device="cuda"):
    custom = bool(definition.get("custom_inputs_entrypoint"))
    scalars = {k: v["value"] for k, v in workload["inputs"].items() if v.get("type") == "scalar"}
    inp = {}

    def randn(shape, dtype=torch.float32):
        return torch.randn(shape, dtype=dtype, device=device, generator=gen)

    for name, spec in definition["inputs"].items():  # definition order
        dtype = DTYPES[spec["dtype"]]
        if spec["shape"] is None:  # a scalar
            if name in scalars:
                inp[name] = float(scalars[name])
            elif name == "scaling":
                inp[name] = float(axes["head_dim"]) ** -0.5
            elif name == "attention_dropout":
                inp[name] = 0.0
            else:
                raise ValueError(f"no value for scalar {name}")
            continue
        shape = [int(d) if str(d).isdigit() else axes[d] for d in spec["shape"]]
        if custom:  # 017's get_inputs
            if name == "cu_seqlens":
                S, n = axes["total_seq_len"], axes["num_sequences"]
                lengths = [S // n + (1 if i < S % n else 0) for i in range(n)]
                cu = [0]
                for L in lengths:
                    cu.append(cu[-1] + L)
                inp[name] = torch.tensor(cu, dtype=torch.int32, device=device)
            elif name.endswith("_weight"):
                inp[name] = 0.02 * randn(shape, dtype)
            elif name.endswith("_bias"):
                inp[name] = 0.01 * randn(shape, dtype)
            else:  # grad_output, hidden_states, cos, sin: plain normals
                inp[name] = randn(shape, dtype)
        elif name in ("cos", "sin"):
            f = torch.cos if name == "cos" else torch.sin
            inp[name] = f(randn(shape).clamp_(-math.pi, math.pi)).to(dtype)
        elif _is_positive(name):
            inp[name] = randn(shape, dtype).abs_() + 0.1
        elif name in ("attn_weights", "attention_weights", "routing_weights"):
            inp[name] = torch.softmax(randn(shape), dim=-1).to(dtype)
        elif len(shape) >= 2 and (name == "weight" or name.endswith("_weight") or name.endswith("_proj")):
            inp[name] = randn(shape, dtype) / math.sqrt(shape[-1])
        else:
            inp[name] = randn(shape, dtype)
    return inp


# ---- the "best" compositions ---------------------------------------------------------------------

@contextlib.contextmanager
def tf32(enabled):
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _probe_out_dtype():
    """torch.mm/bmm(a, b, out_dtype): fp16 operands with an fp32 result (PyTorch >= 2.8)."""
    a = torch.ones(16, 16, device="cuda", dtype=torch.float16)
    try:
        return (torch.mm(a, a, torch.float32).dtype == torch.float32
                and torch.bmm(a[None], a[None], torch.float32).dtype == torch.float32)
    except (TypeError, RuntimeError):
        return False


OUT_DTYPE = None  # set in main()


def gemms(half):
    """(cast, mm, bmm) for an fp32 op: identity + TF32/fp32 GEMMs, or fp16 operands -> fp32."""
    if not half:
        return (lambda t: t), torch.mm, torch.bmm
    cast = lambda t: t.to(torch.float16, memory_format=torch.contiguous_format)  # noqa: E731
    if OUT_DTYPE:
        return cast, (lambda a, b: torch.mm(a, b, torch.float32)), (lambda a, b: torch.bmm(a, b, torch.float32))
    return cast, (lambda a, b: torch.mm(a, b).float()), (lambda a, b: torch.bmm(a, b).float())


def rope_fwd(x, c, s):
    """x*c + rot(x)*s with rot(x) = [-x2, x1] (rotate-half)."""
    h = x.shape[-1] // 2
    out = x * c
    out[..., :h].addcmul_(x[..., h:], s[..., :h], value=-1)
    out[..., h:].addcmul_(x[..., :h], s[..., h:])
    return out


def rope_bwd_into(g, c, s, out):
    """out = g*c + rotT(g*s) with rotT(y) = [y2, -y1]; `out` may be a strided view."""
    h = g.shape[-1] // 2
    torch.mul(g, c, out=out)
    out[..., :h].addcmul_(g[..., h:], s[..., h:])
    out[..., h:].addcmul_(g[..., :h], s[..., :h], value=-1)


def best_out_proj(inp, axes):
    dy, x, w = inp["grad_output"], inp["reshaped"], inp["weight"]
    B, S, C = dy.shape
    dy2 = dy.view(B * S, C)
    g = dy2 @ w  # bf16 GEMM, fp32 accumulation, one rounding: the reference's fp32 GEMM + round
    return {"grad_attn_output": g.view(B, S, axes["num_heads"], axes["head_dim"]).transpose(1, 2).contiguous(),
            "grad_weight": dy2.t() @ x.view(B * S, C)}


def best_gqa_rope(inp, axes):
    dy, xh = inp["grad_output"], inp["hidden_states"]
    wq, wk, wv, wo = (inp[n] for n in ("q_weight", "k_weight", "v_weight", "o_weight"))
    Q, K, V, P = inp["query_states"], inp["key_states"], inp["value_states"], inp["attn_weights"]
    B, S, hid = dy.shape
    Hq, D = Q.shape[1], Q.shape[3]
    kvp = wk.shape[0]
    Hkv = kvp // D
    grp = Hq // Hkv
    T = B * S
    dy2, x2 = dy.view(T, hid), xh.view(T, hid)
    grad_o_weight = dy2.t() @ inp["attn_output"].view(T, Hq * D)
    d_o = (dy2 @ wo).view(B, S, Hq, D).transpose(1, 2).contiguous()
    dp = d_o @ V.transpose(-1, -2)
    ds = torch._softmax_backward_data(dp, P, -1, P.dtype)  # P*(dP - rowsum(dP*P)), fp32 inside
    del dp
    # A KV group's query heads are consecutive: one GEMM over their 4·S rows sums them.
    dv = P.view(B, Hkv, grp * S, S).transpose(-1, -2) @ d_o.view(B, Hkv, grp * S, D)
    dk = ds.view(B, Hkv, grp * S, S).transpose(-1, -2) @ Q.view(B, Hkv, grp * S, D)
    dq = ds @ K
    del ds
    # RoPE backward is linear: the softmax scaling rides on the (small) cos/sin tables.
    scaling = float(inp["scaling"])
    c, s = (inp["cos"] * scaling).unsqueeze(2), (inp["sin"] * scaling).unsqueeze(2)  # [B,S,1,D]
    dqp = torch.empty(B, S, Hq, D, dtype=dy.dtype, device=dy.device)
    dkvp = torch.empty(B, S, 2, Hkv, D, dtype=dy.dtype, device=dy.device)
    rope_bwd_into(dq.transpose(1, 2), c, s, dqp)
    rope_bwd_into(dk.transpose(1, 2), c, s, dkvp[:, :, 0])
    dkvp[:, :, 1].copy_(dv.transpose(1, 2))
    dq2, dkv2 = dqp.view(T, Hq * D), dkvp.view(T, 2 * kvp)
    gx = dq2 @ wq
    gx.addmm_(dkv2[:, :kvp], wk).addmm_(dkv2[:, kvp:], wv)
    gkv = dkv2.t() @ x2
    return {"grad_hidden_states": gx.view(B, S, hid), "grad_q_weight": dq2.t() @ x2,
            "grad_k_weight": gkv[:kvp], "grad_v_weight": gkv[kvp:], "grad_o_weight": grad_o_weight}


def best_vision_mha(inp, axes, half):
    cast, mm, bmm = gemms(half)
    dy = inp["grad_output"]
    B, S, E = dy.shape
    H, D = inp["q"].shape[1], inp["q"].shape[3]
    N, BH = B * S, B * H
    scale, eps = float(inp["scale"]), float(inp["norm_eps"])
    dy2 = dy.view(N, E)
    dy2c = cast(dy2)
    grad_out_weight = mm(dy2c.t(), cast(inp["attn_output"].view(N, E)))
    d_o = cast(mm(dy2c, cast(inp["out_weight"])).view(B, S, H, D).transpose(1, 2)).reshape(BH, S, D)
    P = inp["attn_weights"].view(BH, S, S)
    Pc = cast(P)
    Qc, Kc, Vc = (cast(inp[n]).view(BH, S, D) for n in ("q", "k", "v"))
    dp = bmm(d_o, Vc.transpose(1, 2))
    ds = torch._softmax_backward_data(dp, P, -1, torch.float32)
    del dp
    dsc = cast(ds)
    dqkv = torch.empty(B, S, 3, H, D, dtype=dy.dtype, device=dy.device)
    for j, part in enumerate((bmm(dsc, Kc).mul_(scale), bmm(dsc.transpose(1, 2), Qc).mul_(scale),
                              bmm(Pc.transpose(1, 2), d_o))):
        dqkv[:, :, j].copy_(part.view(B, H, S, D).transpose(1, 2))
    del ds, dsc, Pc
    dqkv2 = dqkv.view(N, 3 * E)
    dqkv2c = cast(dqkv2)
    dxn = mm(dqkv2c, cast(inp["qkv_weight"]))
    grad_qkv_weight = mm(dqkv2c.t(), cast(inp["x_norm"].view(N, E)))
    # LayerNorm part (fp32 element-wise, the σ² quirk as the reference).
    x = inp["x"].view(N, E)
    sigma = torch.sqrt(inp["x_var"].view(N, 1) + eps)
    xc = x - inp["x_mean"].view(N, 1)
    g = dxn * inp["ln_weight"]
    gs = g / sigma
    dx = gs - gs.mean(-1, keepdim=True) - xc * ((g * xc).mean(-1, keepdim=True) / (sigma * sigma))
    return {"grad_x": (dy2 + dx).view(B, S, E), "grad_qkv_weight": grad_qkv_weight,
            "grad_qkv_bias": dqkv2.sum(0), "grad_out_weight": grad_out_weight, "grad_out_bias": dy2.sum(0),
            "grad_ln_weight": (dxn * (xc / sigma)).sum(0), "grad_ln_bias": dxn.sum(0)}


def equal_length_runs(cu):
    """[(first token, length, count)] for consecutive sequences of equal length."""
    runs = []
    for a, b in zip(cu[:-1], cu[1:]):
        if b <= a:
            continue
        if runs and runs[-1][1] == b - a:
            runs[-1][2] += 1
        else:
            runs.append([a, b - a, 1])
    return runs


def best_varlen(inp, axes, half):
    cast, mm, bmm = gemms(half)
    x, dy = inp["hidden_states"], inp["grad_output"]
    S, C = x.shape
    D = inp["cos"].shape[-1]
    H = C // D
    scaling = float(inp["scaling"])
    runs = equal_length_runs(inp["cu_seqlens"].tolist())  # device->host, as the reference does
    c, s = inp["cos"].unsqueeze(1), inp["sin"].unsqueeze(1)  # [S,1,D]
    xc, wqkvc, dyc = cast(x), cast(inp["qkv_weight"]), cast(dy)
    qkv = mm(xc, wqkvc.t()).add_(inp["qkv_bias"]).view(S, 3, H, D)
    q, k, v = rope_fwd(qkv[:, 0], c, s), rope_fwd(qkv[:, 1], c, s), qkv[:, 2]
    d_ao = mm(dyc, cast(inp["proj_weight"])).view(S, H, D)
    ao = torch.empty(S, H, D, dtype=x.dtype, device=x.device)
    dqkv = torch.empty(S, 3, H, D, dtype=x.dtype, device=x.device)
    for a, L, n in runs:  # at most two runs for the benchmark's even splits
        sl = slice(a, a + n * L)

        def heads(t):  # token-major [n·L,H,D] -> [n·H,L,D], cast on the way
            t = t[sl].view(n, L, H, D).transpose(1, 2)
            return (cast(t) if half else t.contiguous()).view(n * H, L, D)

        def back(t, out):  # [n·H,L,D] -> token-major slice
            out.copy_(t.view(n, H, L, D).transpose(1, 2))

        qr, kr, vr, dor = heads(q), heads(k), heads(v), heads(d_ao)
        p = torch.softmax(bmm(qr, kr.transpose(1, 2)).mul_(scaling), dim=-1)
        pc = cast(p)
        back(bmm(pc, vr), ao[sl].view(n, L, H, D))
        dp = bmm(dor, vr.transpose(1, 2))
        ds = torch._softmax_backward_data(dp, p, -1, torch.float32).mul_(scaling)
        del dp
        dsc = cast(ds)
        out = dqkv[sl].view(n, L, 3, H, D)
        back(bmm(dsc, kr), out[:, :, 0])
        back(bmm(dsc.transpose(1, 2), qr), out[:, :, 1])
        back(bmm(pc.transpose(1, 2), dor), out[:, :, 2])
    for j in (0, 1):  # RoPE backward on dq, dk
        g = dqkv[:, j].clone()
        rope_bwd_into(g, c, s, dqkv[:, j])
    dqkv2 = dqkv.view(S, 3 * C)
    dqkv2c = cast(dqkv2)
    return {"grad_hidden_states": mm(dqkv2c, wqkvc), "grad_qkv_weight": mm(dqkv2c.t(), xc),
            "grad_qkv_bias": dqkv2.sum(0), "grad_proj_weight": mm(dyc.t(), cast(ao.view(S, C))),
            "grad_proj_bias": dy.sum(0)}


def variants(op):
    """name -> fn(inputs, axes) for each baseline of `op`."""
    eager = {"eager": lambda inp, axes: reference.emulated(op, inp)}
    if op == "out_proj_backward":
        return {**eager, "best": best_out_proj}
    if op == "gqa_rope_backward":
        return {**eager, "best": best_gqa_rope}
    best = best_vision_mha if op == "vision_mha_norm_backward" else best_varlen

    def with_tf32(inp, axes):
        with tf32(True):
            return best(inp, axes, half=False)
    return {**eager, "best-tf32": with_tf32, "best-fp16": lambda inp, axes: best(inp, axes, half=True)}


# ---- timing and checking -------------------------------------------------------------------------

def time_call(fn, iters, warmup, flush):
    """Median seconds of `iters` calls after `warmup` ones; `flush` zero-filled before each."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        flush.zero_()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush.zero_()  # queued ahead of the call: the GPU is busy while the host launches it
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    return times


def check(outs, ref, atol, rtol):
    """The benchmark's rule (spec §6) on every output; returns a summary dict."""
    worst, failed = 1.0, []
    for name, r in ref.items():
        o = outs[name]
        if tuple(o.shape) != tuple(r.shape):
            failed.append(f"{name}: shape {tuple(o.shape)}")
            continue
        o64 = o.double()
        if not torch.isfinite(o64).all():
            failed.append(f"{name}: non-finite")
            continue
        if not o64.any() and r.any():
            failed.append(f"{name}: all zero")
            continue
        ratio = ((o64 - r).abs() <= atol + rtol * r.abs()).double().mean().item()
        worst = min(worst, ratio)
        if ratio < MATCH_RATIO:
            failed.append(f"{name}: matched {ratio:.5f}")
    return {"passed": not failed, "worst_matched_ratio": worst, "failed": failed}


def main():
    global OUT_DTYPE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="all", help="ops or problem numbers, e.g. 004,gqa_rope_backward")
    ap.add_argument("--workloads", default="all", help="all | smallest | indices/uuids, e.g. 0,8")
    ap.add_argument("--variants", default="", help="subset, e.g. eager,best-tf32 (default: all)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=200)
    ap.add_argument("--no-check", action="store_true", help="skip the float64 check")
    ap.add_argument("--solexec")
    ap.add_argument("-o", "--output")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_baselines: needs a CUDA GPU")

    solexec = find_solexec(args.solexec)
    ops = list(PROBLEMS) if args.ops == "all" else [ALIASES.get(o, o) for o in args.ops.split(",")]
    wanted = set(filter(None, args.variants.split(",")))
    props = torch.cuda.get_device_properties(0)
    OUT_DTYPE = _probe_out_dtype()
    flush = torch.empty(2 * props.L2_cache_size // 4, dtype=torch.float32, device="cuda")
    context = {
        "gpu": props.name, "l2_bytes": props.L2_cache_size, "torch": torch.__version__,
        "cuda": torch.version.cuda, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "seed": args.seed, "iters": args.iters, "warmup": args.warmup,
        "time": "seconds = median of the timed calls; each after a zero-fill of 2x L2 (not timed); "
                "CUDA events on the current stream around the call",
        "eager": "tests/torch/reference.py emulated()",
        "fp16_gemm_fp32_out": OUT_DTYPE,
    }
    out = args.output or os.path.join(
        REPO, "perf", "results",
        f"torch-{props.name.replace('NVIDIA ', '').lower().replace(' ', '-')}-{datetime.date.today()}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    results = []

    def save():  # after every workload, so a cut-short run keeps what it measured
        with open(out, "w") as f:
            json.dump({"context": context, "results": results}, f, indent=1)

    for op in ops:
        definition, workloads = load_problem(solexec, op)
        for index in select(workloads, args.workloads):
            w = workloads[index]
            axes = resolve_axes(definition, w["axes"])
            gen = torch.Generator(device="cuda")
            gen.manual_seed(args.seed + 1000 * list(PROBLEMS).index(op) + index)
            inp = make_inputs(definition, w, axes, gen)
            ref = None if args.no_check else reference.float64(op, inp)
            tol = w["tolerance"]
            for name, fn in variants(op).items():
                if wanted and name not in wanted:
                    continue
                row = {"op": op, "workload": index, "uuid": w["uuid"], "axes": w["axes"], "variant": name,
                       "seconds": None}
                label = f"{PROBLEMS[op][:3]} #{index} {name}"
                try:
                    with torch.no_grad():
                        if ref is not None:
                            row["check"] = check(fn(inp, axes), ref, tol["max_atol"], tol["max_rtol"])
                        times = time_call(lambda: fn(inp, axes), args.iters, args.warmup, flush)
                    row.update(seconds=statistics.median(times), mean_s=statistics.fmean(times),
                               min_s=min(times), iters=len(times))
                    verdict = "" if ref is None else ("  check ok" if row["check"]["passed"] else
                                                      f"  CHECK FAILED {row['check']['failed']}")
                    log(f"{label}: median {row['seconds'] * 1e3:.4f} ms{verdict}")
                except Exception as e:  # noqa: BLE001 (report and go on: OOM, unsupported op...)
                    row["error"] = f"{type(e).__name__}: {e}"
                    log(f"{label}: error: {row['error']}")
                results.append(row)
                torch.cuda.empty_cache()
            inp = ref = None  # free this workload before drawing the next
            torch.cuda.empty_cache()
            save()
    save()
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
