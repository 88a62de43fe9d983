// Serial oracle for vision_mha_norm_backward (spec §4, Molmo 001): the reference's fp32 math
// evaluated in double, every output rounded to float once at the end. The saved tensors are
// independent random data, so each one is used exactly where the reference uses it, quirks
// included:
//   * the LayerNorm term xc·mean(g⊙xc)/σ² (σ², not the textbook σ³);
//   * x̂ recomputed from x, x_mean, x_var; x_norm feeds only grad_qkv_weight;
//   * scale applied to dQ after its GEMM and to Q before the dK GEMM;
//   * scale and norm_eps rounded to float first (the reference's Python floats enter fp32 tensor
//   ops).
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

// dQKV [N, 3E] = [dQ | dK | dV], col = h·D + d within each third, from dA = dY·Wo [N, E].
Vec attention_backward(const VisionMhaShape& s, const VisionMhaArgs& a, const Vec& dA) {
  const std::int64_t S = s.seq_len, E = s.embed_dim, H = s.num_heads, D = s.head_dim;
  const std::int64_t ld = 3 * E;
  const double scale = static_cast<float>(a.scale);
  Vec dqkv(static_cast<std::size_t>(s.tokens() * ld));
  Vec dS(static_cast<std::size_t>(S * S));
  Vec q_scaled(static_cast<std::size_t>(S * D));
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t head = (b * H + h) * S;  // first row of this (b, h) in q/k/v/attn_weights
      const float* P = a.attn_weights.data + head * S;
      const float* Q = a.q.data + head * D;
      const float* K = a.k.data + head * D;
      const float* V = a.v.data + head * D;
      const double* dO = dA.data() + b * S * E + h * D;  // split heads in place: row stride E
      double* dq = dqkv.data() + b * S * ld + h * D;
      double* dk = dq + E;
      double* dv = dq + 2 * E;

      gemm(S, D, S, P, S, true, dO, E, false, dv, ld);        // dV = Pᵀ·dO
      gemm(S, S, D, dO, E, false, V, D, true, dS.data(), S);  // dP = dO·Vᵀ
      for (std::int64_t i = 0; i < S; ++i) {                  // dS = P⊙(dP − rowsum(dP⊙P))
        double* row = dS.data() + i * S;
        const float* p = P + i * S;
        double r = 0.0;
        for (std::int64_t j = 0; j < S; ++j) r += row[j] * p[j];
        for (std::int64_t j = 0; j < S; ++j) row[j] = p[j] * (row[j] - r);
      }
      gemm(S, D, S, dS.data(), S, false, K, D, false, dq, ld);  // dQ = (dS·K)·scale
      for (std::int64_t i = 0; i < S; ++i)
        for (std::int64_t d = 0; d < D; ++d) dq[i * ld + d] *= scale;
      for (std::int64_t i = 0; i < S * D; ++i) q_scaled[i] = Q[i] * scale;
      gemm(S, D, S, dS.data(), S, true, q_scaled.data(), D, false, dk, ld);  // dK = dSᵀ·(Q·scale)
    }
  }
  return dqkv;
}

// LayerNorm backward as the reference writes it, per token (means over the E features):
//   σ = √(x_var + eps), xc = x − x_mean, x̂ = xc/σ, g = dXn⊙γ,
//   grad_x = dY + g/σ − mean(g/σ) − xc·mean(g⊙xc)/σ²;  γ/β grads are token sums of dXn⊙x̂ and dXn.
void layer_norm_backward(const VisionMhaShape& s, const VisionMhaArgs& a, const Vec& dXn,
                         exact::VisionMhaGrads& g) {
  const std::int64_t E = s.embed_dim;
  const double eps = static_cast<float>(a.norm_eps);
  g.grad_x.assign(static_cast<std::size_t>(s.tokens() * E), 0.0);
  g.grad_ln_weight.assign(static_cast<std::size_t>(E), 0.0);
  g.grad_ln_bias.assign(static_cast<std::size_t>(E), 0.0);
  Vec gs(static_cast<std::size_t>(E)), xc(static_cast<std::size_t>(E));
  for (std::int64_t n = 0; n < s.tokens(); ++n) {
    const double sigma = std::sqrt(double(a.x_var.data[n]) + eps);
    const double* dxn = dXn.data() + n * E;
    const float* x = a.x.data + n * E;
    double mean_gs = 0.0, mean_gxc = 0.0;
    for (std::int64_t e = 0; e < E; ++e) {
      xc[e] = double(x[e]) - a.x_mean.data[n];
      const double ge = dxn[e] * a.ln_weight.data[e];
      gs[e] = ge / sigma;
      mean_gs += gs[e];
      mean_gxc += ge * xc[e];
      g.grad_ln_weight[e] += dxn[e] * (xc[e] / sigma);
      g.grad_ln_bias[e] += dxn[e];
    }
    mean_gs /= double(E);
    mean_gxc /= double(E);
    const double quirk = mean_gxc / (sigma * sigma);  // σ², where the true gradient has σ³
    double* gx = g.grad_x.data() + n * E;
    const float* dy = a.grad_output.data + n * E;
    for (std::int64_t e = 0; e < E; ++e) gx[e] = dy[e] + (gs[e] - mean_gs - xc[e] * quirk);
  }
}

}  // namespace

namespace exact {

VisionMhaGrads vision_mha_norm_backward(const VisionMhaShape& s, const VisionMhaArgs& a) {
  const std::int64_t N = s.tokens(), E = s.embed_dim, E3 = s.qkv_dim();
  VisionMhaGrads g;
  const float* dY = a.grad_output.data;

  // 1. Output projection.
  Vec dA(static_cast<std::size_t>(N * E));
  gemm_tiled(N, E, E, dY, E, false, a.out_weight.data, E, false, dA.data(), E);  // dA = dY·Wo
  g.grad_out_weight.resize(static_cast<std::size_t>(E * E));
  gemm_tiled(E, E, N, dY, E, true, a.attn_output.data, E, false, g.grad_out_weight.data(), E);
  g.grad_out_bias = fp32_detail::column_sums(dY, N, E);

  // 2-6. Attention backward, heads merged into dQKV.
  const Vec dqkv = attention_backward(s, a, dA);

  // 7. QKV projection: the weight gradient is the only use of x_norm.
  Vec dXn(static_cast<std::size_t>(N * E));
  gemm_tiled(N, E, E3, dqkv.data(), E3, false, a.qkv_weight.data, E, false, dXn.data(), E);
  g.grad_qkv_weight.resize(static_cast<std::size_t>(E3 * E));
  gemm_tiled(E3, E, N, dqkv.data(), E3, true, a.x_norm.data, E, false, g.grad_qkv_weight.data(), E);
  g.grad_qkv_bias = fp32_detail::column_sums(dqkv.data(), N, E3);

  // 8. LayerNorm and residual.
  layer_norm_backward(s, a, dXn, g);
  return g;
}

}  // namespace exact

void vision_mha_norm_backward(const VisionMhaShape& s, const VisionMhaArgs& a) {
  const exact::VisionMhaGrads g = exact::vision_mha_norm_backward(s, a);
  using fp32_detail::store_rounded;
  store_rounded(g.grad_x, a.grad_x);
  store_rounded(g.grad_qkv_weight, a.grad_qkv_weight);
  store_rounded(g.grad_qkv_bias, a.grad_qkv_bias);
  store_rounded(g.grad_out_weight, a.grad_out_weight);
  store_rounded(g.grad_out_bias, a.grad_out_bias);
  store_rounded(g.grad_ln_weight, a.grad_ln_weight);
  store_rounded(g.grad_ln_bias, a.grad_ln_bias);
}

}  // namespace attnbwd::serial
