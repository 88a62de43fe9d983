// Serial oracle for vision_varlen_rope_backward (spec §5, Qwen3-VL 017): the reference recomputes
// the whole forward (QKV projection, rotate-half RoPE on q and k, block-diagonal attention per
// sequence) and then differentiates it. Everything is evaluated in double from the fp32 inputs,
// each output rounded to float once at the end. proj_bias and attention_dropout are accepted and
// unused, as in the reference.
//
// Memory stays O(S·C) plus one L×L score matrix: attention runs one (sequence, head) at a time,
// forward and backward together, so P is never stored for more than one block (S = 8192: ~2 GB of
// scratch).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "serial/exact_fp32.hpp"
#include "serial/loops.hpp"
#include "serial/serial.hpp"

namespace attnbwd::serial {
namespace {

using fp32_detail::gemm_tiled;
using Vec = std::vector<double>;

// Rotate-half RoPE on one head vector, in place: x' = x⊙c + rot(x)⊙s, rot(x) = [−x_hi, x_lo].
void rope_forward(double* x, const float* c, const float* s, std::int64_t D) {
  const std::int64_t half = D / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const double lo = x[i], hi = x[i + half];
    x[i] = lo * c[i] - hi * s[i];
    x[i + half] = hi * c[i + half] + lo * s[i + half];
  }
}

// Its transpose, on a gradient: g ← g⊙c + rotᵀ(g⊙s), rotᵀ(y) = [y_hi, −y_lo].
void rope_backward(double* g, const float* c, const float* s, std::int64_t D) {
  const std::int64_t half = D / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const double lo = g[i], hi = g[i + half];
    g[i] = lo * c[i] + hi * s[i + half];
    g[i + half] = hi * c[i + half] - lo * s[i];
  }
}

// One (sequence, head) block of L tokens. `qkv` points at the block's rotated q' inside the [S, 3C]
// QKV matrix (k' and v follow at +C and +2C, row stride 3C); `dqkv` likewise into dQKV, which gets
// dQ', dK', dV (before the RoPE backward). dO is read from dAO and O written to AO (stride C).
// P and dS are L×L scratch.
void attention_block(std::int64_t L, std::int64_t D, std::int64_t C, const double* qkv,
                     const double* dO, double* o, double* dqkv, double scaling, Vec& P, Vec& dS) {
  const std::int64_t ld3 = 3 * C;
  const double *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
  double *dq = dqkv, *dk = dqkv + C, *dv = dqkv + 2 * C;
  gemm(L, L, D, q, ld3, false, k, ld3, true, P.data(), L);  // q'·k'ᵀ
  for (std::int64_t i = 0; i < L; ++i) {                    // softmax over keys of (·)·scaling
    double* row = P.data() + i * L;
    double mx = -INFINITY;
    for (std::int64_t j = 0; j < L; ++j) mx = std::max(mx, row[j] * scaling);
    double sum = 0.0;
    for (std::int64_t j = 0; j < L; ++j) sum += (row[j] = std::exp(row[j] * scaling - mx));
    for (std::int64_t j = 0; j < L; ++j) row[j] /= sum;
  }
  gemm(L, D, L, P.data(), L, false, v, ld3, false, o, C);  // O = P·v

  gemm(L, D, L, P.data(), L, true, dO, C, false, dv, ld3);  // dV = Pᵀ·dO
  gemm(L, L, D, dO, C, false, v, ld3, true, dS.data(), L);  // dP = dO·vᵀ
  for (std::int64_t i = 0; i < L; ++i) {  // dS = P⊙(dP − rowsum(dP⊙P))·scaling
    const double* p = P.data() + i * L;
    double* row = dS.data() + i * L;
    double r = 0.0;
    for (std::int64_t j = 0; j < L; ++j) r += row[j] * p[j];
    for (std::int64_t j = 0; j < L; ++j) row[j] = p[j] * (row[j] - r) * scaling;
  }
  gemm(L, D, L, dS.data(), L, false, k, ld3, false, dq, ld3);  // dQ' = dS·k'
  gemm(L, D, L, dS.data(), L, true, q, ld3, false, dk, ld3);   // dK' = dSᵀ·q'
}

}  // namespace

namespace exact {

VisionVarlenGrads vision_varlen_rope_backward(const VisionVarlenShape& s,
                                              const VisionVarlenArgs& a) {
  const std::int64_t S = s.total_seq_len, C = s.hidden_size, C3 = s.qkv_out_size();
  const std::int64_t H = s.num_heads, D = s.head_dim;
  const double scaling = static_cast<float>(a.scaling);
  const float* X = a.hidden_states.data;
  const float* dY = a.grad_output.data;
  const float* cos = a.cos.data;
  const float* sin = a.sin.data;
  const std::int32_t* cu = a.cu_seqlens.data;
  VisionVarlenGrads g;

  // Forward: QKV = X·Wqkvᵀ + b, columns [3][H][D]; RoPE on the q and k thirds.
  Vec qkv(static_cast<std::size_t>(S * C3));
  gemm_tiled(S, C3, C, X, C, false, a.qkv_weight.data, C, true, qkv.data(), C3);
  for (std::int64_t t = 0; t < S; ++t) {
    double* row = qkv.data() + t * C3;
    for (std::int64_t c = 0; c < C3; ++c) row[c] += a.qkv_bias.data[c];
    for (std::int64_t h = 0; h < 2 * H; ++h) rope_forward(row + h * D, cos + t * D, sin + t * D, D);
  }

  // Output projection backward, part 1: dAO = dY·Wp (needs no forward).
  Vec dAO(static_cast<std::size_t>(S * C));
  gemm_tiled(S, C, C, dY, C, false, a.proj_weight.data, C, false, dAO.data(), C);

  // Attention forward and backward, one (sequence, head) block at a time.
  Vec AO(static_cast<std::size_t>(S * C)), dqkv(static_cast<std::size_t>(S * C3));
  std::int64_t max_len = 0;
  for (std::int64_t i = 0; i < s.num_sequences; ++i)
    max_len = std::max<std::int64_t>(max_len, cu[i + 1] - cu[i]);
  Vec P(static_cast<std::size_t>(max_len * max_len)), dS(P.size());
  for (std::int64_t i = 0; i < s.num_sequences; ++i) {
    const std::int64_t t0 = cu[i], L = cu[i + 1] - cu[i];
    if (L == 0) continue;  // an empty sequence contributes nothing
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t qcol = t0 * C3 + h * D;
      attention_block(L, D, C, qkv.data() + qcol, dAO.data() + t0 * C + h * D,
                      AO.data() + t0 * C + h * D, dqkv.data() + qcol, scaling, P, dS);
    }
  }
  qkv = Vec();  // release scratch before the large weight-gradient GEMMs
  dAO = Vec();

  // Output projection backward, part 2 (needs AO).
  g.grad_proj_weight.resize(static_cast<std::size_t>(C * C));
  gemm_tiled(C, C, S, dY, C, true, AO.data(), C, false, g.grad_proj_weight.data(), C);
  AO = Vec();
  g.grad_proj_bias = fp32_detail::column_sums(dY, S, C);

  // RoPE backward on the dq and dk thirds; dV is not rotated.
  for (std::int64_t t = 0; t < S; ++t)
    for (std::int64_t h = 0; h < 2 * H; ++h)
      rope_backward(dqkv.data() + t * C3 + h * D, cos + t * D, sin + t * D, D);

  // QKV projection backward.
  g.grad_hidden_states.resize(static_cast<std::size_t>(S * C));
  gemm_tiled(S, C, C3, dqkv.data(), C3, false, a.qkv_weight.data, C, false,
             g.grad_hidden_states.data(), C);
  g.grad_qkv_weight.resize(static_cast<std::size_t>(C3 * C));
  gemm_tiled(C3, C, S, dqkv.data(), C3, true, X, C, false, g.grad_qkv_weight.data(), C);
  g.grad_qkv_bias = fp32_detail::column_sums(dqkv.data(), S, C3);
  return g;
}

}  // namespace exact

void vision_varlen_rope_backward(const VisionVarlenShape& s, const VisionVarlenArgs& a) {
  const exact::VisionVarlenGrads g = exact::vision_varlen_rope_backward(s, a);
  using fp32_detail::store_rounded;
  store_rounded(g.grad_hidden_states, a.grad_hidden_states);
  store_rounded(g.grad_qkv_weight, a.grad_qkv_weight);
  store_rounded(g.grad_qkv_bias, a.grad_qkv_bias);
  store_rounded(g.grad_proj_weight, a.grad_proj_weight);
  store_rounded(g.grad_proj_bias, a.grad_proj_bias);
}

}  // namespace attnbwd::serial
