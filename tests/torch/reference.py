"""Independent PyTorch references for the four attnbwd ops, written from spec/problems.md §2-§5 only.

    float64(op, inputs)   the exact math in float64: inputs upcast, no intermediate rounding.
                          The independent reference for correctness checks.
    emulated(op, inputs)  the benchmark reference's own precision flow: bf16 rounding points for
                          003/004, fp32 without TF32 for 001/017. Written as the eager reference runs
                          on a GPU (whole-tensor torch ops), so it doubles as the eager baseline.

`inputs` maps the spec's input names to tensors on one device (CPU or CUDA); scalars may be 0-d
tensors or Python numbers. Both functions return a dict of the spec's output names. Dimensions
(heads, head_dim, KV heads) are read from the shapes, so tiny cases work too.

Each op is one function parametrised by dtypes, so float64 and emulated share every formula and
differ only in where values are rounded.
"""
import contextlib

import torch
import torch.nn.functional as F

OPS = ("out_proj_backward", "gqa_rope_backward", "vision_mha_norm_backward", "vision_varlen_rope_backward")


def _scalar(v):
    return float(v.item()) if torch.is_tensor(v) else float(v)


def _rot(x):
    """Forward rotate-half (NeoX/Llama, not interleaved): [-x2, x1] over the last dim."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rot_t(y):
    """Transpose of _rot: [y2, -y1]."""
    h = y.shape[-1] // 2
    return torch.cat((y[..., h:], -y[..., :h]), dim=-1)


def _rope_backward(g, c, s):
    """Gradient through x' = x*c + rot(x)*s. In bf16 each product and the sum round (spec §3.7)."""
    return g * c + _rot_t(g * s)


@contextlib.contextmanager
def _fp32_gemms():
    """fp32 GEMMs without TF32, as the reference runs them; restores the caller's setting."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def _round_bf16(x):
    """float64 -> bf16 rounded once to nearest even. torch converts through fp32, which double-rounds
    values just off a bf16 tie; nudge such fp32 ties one fp32 ulp back towards x first."""
    y = x.to(torch.float32)
    bits = y.view(torch.int32)
    tie = (bits & 0xFFFF) == 0x8000
    away = torch.sign(x - y.to(x.dtype)) * torch.sign(y)  # +1: |x| > |y|
    return torch.where(tie, bits + away.to(torch.int32), bits).view(torch.float32).to(torch.bfloat16)


def _exact_bf16_mm(a, b):
    """A bf16 GEMM whose sum is exact (float64), rounded once: no accumulation-order noise."""
    return _round_bf16(a.double() @ b.double())


# ---- 004 out_proj_backward (§2) ---------------------------------------------------------------

def _out_proj(inp, gemm, down):
    """gemm: dtype of both GEMMs (inputs upcast to it); down: the single final rounding."""
    dy, x, w = (inp[n].to(gemm) for n in ("grad_output", "reshaped", "weight"))
    B, S, C = dy.shape
    dy2 = dy.reshape(B * S, C)
    grad_weight = down(dy2.T @ x.reshape(B * S, C))
    g = down(dy2 @ w)  # dY·W (the docstring's "dY·Wᵀ" is wrong; this is the true gradient)
    head_dim = 64  # hard-coded in the reference; heads = C / 64 (32 for the benchmark)
    grad_attn_output = g.view(B, S, C // head_dim, head_dim).transpose(1, 2).contiguous()
    return {"grad_attn_output": grad_attn_output, "grad_weight": grad_weight}


# ---- 003 gqa_rope_backward (§3) ---------------------------------------------------------------

def _gqa_rope(inp, work, acc, chunk, exact=False):
    """work: dtype of GEMMs and saved intermediates (bf16: bf16 GEMMs, each result rounded);
    acc: dtype of the softmax backward and the GQA sum; chunk: batch elements per attention step
    (memory); exact: GEMMs and the softmax row-sum summed in float64 and rounded once (else torch's
    bf16 GEMM, which accumulates in fp32 in its own order)."""
    mm = _exact_bf16_mm if exact else torch.matmul
    down = _round_bf16 if exact else (lambda t: t.to(work))

    def row_sum(t):
        return t.double().sum(-1, keepdim=True).to(t.dtype) if exact else t.sum(-1, keepdim=True)

    dy = inp["grad_output"].to(work)
    xh = inp["hidden_states"].to(work)
    wq, wk, wv, wo = (inp[n].to(work) for n in ("q_weight", "k_weight", "v_weight", "o_weight"))
    B, S, hidden = dy.shape
    Hq, D = inp["query_states"].shape[1], inp["query_states"].shape[3]
    Hkv = wk.shape[0] // D
    group = Hq // Hkv  # query head h uses KV head h // group
    scaling = _scalar(inp["scaling"])
    T = B * S

    # 1-2. output projection, split heads
    dy2 = dy.reshape(T, hidden)
    grad_o_weight = mm(dy2.T, inp["attn_output"].to(work).reshape(T, Hq * D))
    d_o = mm(dy2, wo).view(B, S, Hq, D).transpose(1, 2)  # [B,Hq,S,D]

    dqp, dkp, dvp = [], [], []
    for b0 in range(0, B, chunk):
        sl = slice(b0, b0 + chunk)
        p = inp["attn_weights"][sl].to(work)
        do = d_o[sl]
        n = p.shape[0]
        # 3. P·V backward (per head, 32 heads)
        dp = mm(do, inp["value_states"][sl].to(work).transpose(-1, -2))
        dv32 = mm(p.transpose(-1, -2), do)
        # 4. softmax backward in acc precision, rounded to `work` BEFORE scaling
        pa, dpa = p.to(acc), dp.to(acc)
        ds = down(pa * (dpa - row_sum(dpa * pa))) * scaling
        del dp, pa, dpa, p
        # 5. Q·Kᵀ backward with the saved (rotated, repeated) states
        dq = mm(ds, inp["key_states"][sl].to(work))
        dk32 = mm(ds.transpose(-1, -2), inp["query_states"][sl].to(work))
        del ds
        # 6. GQA reduction over the 4 consecutive query heads: accumulate in acc, round once
        # (4 bf16 values: their fp32 sum is exact unless exponents differ by > 16)
        dk = down(dk32.view(n, Hkv, group, S, D).to(acc).sum(2))
        dv = down(dv32.view(n, Hkv, group, S, D).to(acc).sum(2))
        # 7. RoPE backward on dQ and the REDUCED dK; cos/sin per (batch, token), shared by heads
        c = inp["cos"][sl].to(work).unsqueeze(1)
        s = inp["sin"][sl].to(work).unsqueeze(1)
        dq = _rope_backward(dq, c, s)
        dk = _rope_backward(dk, c, s)
        # 8. merge heads (head-major columns)
        dqp.append(dq.transpose(1, 2).reshape(n * S, Hq * D))
        dkp.append(dk.transpose(1, 2).reshape(n * S, Hkv * D))
        dvp.append(dv.transpose(1, 2).reshape(n * S, Hkv * D))
    dqp, dkp, dvp = torch.cat(dqp), torch.cat(dkp), torch.cat(dvp)

    # 9-10. input projections; two rounded additions
    x2 = xh.reshape(T, hidden)
    grad_hidden = (mm(dqp, wq) + mm(dkp, wk)) + mm(dvp, wv)
    return {
        "grad_hidden_states": grad_hidden.view(B, S, hidden),
        "grad_q_weight": mm(dqp.T, x2),
        "grad_k_weight": mm(dkp.T, x2),
        "grad_v_weight": mm(dvp.T, x2),
        "grad_o_weight": grad_o_weight,
    }


# ---- 001 vision_mha_norm_backward (§4) --------------------------------------------------------

def _vision_mha(inp, dt, chunk):
    """dt: dtype of everything; chunk: batch elements per attention step (memory)."""
    t = lambda name: inp[name].to(dt)  # noqa: E731
    dy = t("grad_output")
    B, S, E = dy.shape
    H, D = inp["q"].shape[1], inp["q"].shape[3]
    N = B * S
    scale, eps = _scalar(inp["scale"]), _scalar(inp["norm_eps"])

    # 1-2. output projection (+ bias grad), split heads
    dy2 = dy.reshape(N, E)
    grad_out_weight = dy2.T @ t("attn_output").reshape(N, E)
    grad_out_bias = dy2.sum(0)
    d_o = (dy2 @ t("out_weight")).view(B, S, H, D).transpose(1, 2)  # [B,H,S,D]

    # 3-6. attention backward per chunk into dQKV laid out [B,S,3,H,D] = [dQ | dK | dV]
    dqkv = torch.empty(B, S, 3, H, D, dtype=dt, device=dy.device)
    for b0 in range(0, B, chunk):
        sl = slice(b0, b0 + chunk)
        p, do = inp["attn_weights"][sl].to(dt), d_o[sl]
        dp = do @ inp["v"][sl].to(dt).transpose(-1, -2)
        dqkv[sl, :, 2] = (p.transpose(-1, -2) @ do).transpose(1, 2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        del dp, p
        dqkv[sl, :, 0] = ((ds @ inp["k"][sl].to(dt)) * scale).transpose(1, 2)  # GEMM, then scale
        dqkv[sl, :, 1] = (ds.transpose(-1, -2) @ (inp["q"][sl].to(dt) * scale)).transpose(1, 2)  # scale Q first
        del ds
    dqkv = dqkv.view(N, 3 * E)

    # 7. QKV projection: dXn from the weight, grad_qkv_weight from the x_norm INPUT
    dxn = dqkv @ t("qkv_weight")
    grad_qkv_weight = dqkv.T @ t("x_norm").reshape(N, E)
    grad_qkv_bias = dqkv.sum(0)
    del dqkv

    # 8. LayerNorm with x̂ recomputed from x, x_mean, x_var (x_norm unused here); σ² quirk
    x = t("x").reshape(N, E)
    sigma = torch.sqrt(t("x_var").reshape(N, 1) + eps)
    xc = x - t("x_mean").reshape(N, 1)
    grad_ln_weight = (dxn * (xc / sigma)).sum(0)
    grad_ln_bias = dxn.sum(0)
    g = dxn * t("ln_weight")
    gs = g / sigma
    # The textbook last term divides by σ³; the reference divides by σ² (quirk a).
    dx = gs - gs.mean(-1, keepdim=True) - xc * ((g * xc).mean(-1, keepdim=True) / sigma**2)
    grad_x = (dy2 + dx).view(B, S, E)  # residual passes dY through
    return {
        "grad_x": grad_x,
        "grad_qkv_weight": grad_qkv_weight,
        "grad_qkv_bias": grad_qkv_bias,
        "grad_out_weight": grad_out_weight,
        "grad_out_bias": grad_out_bias,
        "grad_ln_weight": grad_ln_weight,
        "grad_ln_bias": grad_ln_bias,
    }


# ---- 017 vision_varlen_rope_backward (§5) -----------------------------------------------------

def _varlen_rope(inp, dt):
    """dt: dtype of everything. proj_bias and attention_dropout are unused, as in the reference."""
    t = lambda name: inp[name].to(dt)  # noqa: E731
    x, dy = t("hidden_states"), t("grad_output")
    S, C = x.shape
    wqkv, wp = t("qkv_weight"), t("proj_weight")
    c, s = t("cos").unsqueeze(1), t("sin").unsqueeze(1)  # [S,1,D]: a token's row, shared by heads
    D = c.shape[-1]
    H = C // D
    scaling = _scalar(inp["scaling"])
    cu = [int(v) for v in inp["cu_seqlens"].tolist()]  # the reference syncs this to the host too

    # 1-2. forward recompute: QKV (with bias), RoPE on q and k
    qkv = F.linear(x, wqkv, t("qkv_bias")).view(S, 3, H, D)
    q = qkv[:, 0] * c + _rot(qkv[:, 0]) * s
    k = qkv[:, 1] * c + _rot(qkv[:, 1]) * s
    v = qkv[:, 2]
    del qkv

    d_ao = dy @ wp
    ao = torch.empty(S, H, D, dtype=dt, device=x.device)
    dqkv = torch.empty(S, 3, H, D, dtype=dt, device=x.device)
    # 3 + 6. per sequence: forward attention (for AO and P), then its backward
    for a, b in zip(cu[:-1], cu[1:]):
        if b <= a:
            continue
        qi, ki, vi = (z[a:b].transpose(0, 1) for z in (q, k, v))  # [H,L,D]
        p = torch.softmax((qi @ ki.transpose(-1, -2)) * scaling, dim=-1)
        ao[a:b] = (p @ vi).transpose(0, 1)
        do = d_ao[a:b].view(b - a, H, D).transpose(0, 1)
        dp = do @ vi.transpose(-1, -2)
        dqkv[a:b, 2] = (p.transpose(-1, -2) @ do).transpose(0, 1)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True)) * scaling
        dqkv[a:b, 0] = (ds @ ki).transpose(0, 1)  # rotated k
        dqkv[a:b, 1] = (ds.transpose(-1, -2) @ qi).transpose(0, 1)  # rotated q
    del q, k, v, d_ao

    # 7. RoPE backward on dq and dk; V has none
    dqkv[:, 0] = _rope_backward(dqkv[:, 0], c, s)
    dqkv[:, 1] = _rope_backward(dqkv[:, 1], c, s)
    dqkv = dqkv.view(S, 3 * C)

    # 5 + 9. projections
    return {
        "grad_hidden_states": dqkv @ wqkv,
        "grad_qkv_weight": dqkv.T @ x,
        "grad_qkv_bias": dqkv.sum(0),
        "grad_proj_weight": dy.T @ ao.view(S, C),
        "grad_proj_bias": dy.sum(0),
    }


# ---- entry points -----------------------------------------------------------------------------

def float64(op, inputs):
    """Exact math in float64; attention one batch element at a time to bound memory."""
    f64 = torch.float64
    with torch.no_grad():
        if op == "out_proj_backward":
            return _out_proj(inputs, f64, lambda t: t)
        if op == "gqa_rope_backward":
            return _gqa_rope(inputs, f64, f64, chunk=1)
        if op == "vision_mha_norm_backward":
            return _vision_mha(inputs, f64, chunk=1)
        if op == "vision_varlen_rope_backward":
            return _varlen_rope(inputs, f64)
    raise ValueError(f"unknown op {op!r}; expected one of {OPS}")


def emulated(op, inputs, exact_sums=False):
    """The reference's precision flow on whole tensors (the eager baseline).

    exact_sums (bf16 ops only): GEMMs and softmax row-sums summed in float64 and rounded once
    (element-wise fp32 steps stay fp32). Same rounding points without fp32/cuBLAS accumulation-order
    noise: for checking bit for bit that an implementation rounds where the reference does.
    """
    bf16, f32, f64 = torch.bfloat16, torch.float32, torch.float64
    with torch.no_grad(), _fp32_gemms():
        if op == "out_proj_backward":  # fp32 GEMMs on upcast operands, one rounding
            if exact_sums:
                return _out_proj(inputs, f64, _round_bf16)
            return _out_proj(inputs, f32, lambda t: t.to(bf16))
        if op == "gqa_rope_backward":  # bf16 GEMMs, fp32 softmax backward
            batch = inputs["grad_output"].shape[0]
            if exact_sums:
                return _gqa_rope(inputs, bf16, f32, chunk=batch, exact=True)
            return _gqa_rope(inputs, bf16, f32, chunk=batch)
        if op == "vision_mha_norm_backward":
            return _vision_mha(inputs, f32, chunk=inputs["grad_output"].shape[0])
        if op == "vision_varlen_rope_backward":
            return _varlen_rope(inputs, f32)
    raise ValueError(f"unknown op {op!r}; expected one of {OPS}")
