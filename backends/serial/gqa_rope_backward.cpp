// Serial oracle for gqa_rope_backward (spec §3), one function per step of the spec, every listed
// bf16 rounding point applied through the policy R (rounding.hpp). Intermediates are doubles; under
// RoundLikeReference they hold bf16 values.
//
// Layouts: token t = b·S+s; merged features n = h·D+d; per-head tensors [B,Hq,S,D]; P [B,Hq,S,S].
// Query head h uses KV head h / group. RoPE pairs (i, i+D/2) (rotate-half; D is even).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "serial/exact.hpp"
#include "serial/rounding.hpp"
#include "serial/serial.hpp"

namespace attnbwd::serial {
namespace {

using std::int64_t;

template <class In>
struct Operands {
  const In *dY, *Xh, *cos, *sin, *Wq, *Wk, *Wv, *Wo, *Q, *K, *V, *P, *A;
  double scaling;
};

std::vector<double> zeros(int64_t n) { return std::vector<double>(static_cast<std::size_t>(n)); }

// Step 4: dS = P⊙(dP − r) with r = row-sum(dP⊙P), rounded; then dS·scaling, rounded again.
// The exact products P·dP are summed in double; R decides how r enters the element-wise part.
template <class R, class In>
void softmax_backward(int64_t S, const In* P, const double* dP, double scaling, double* dS) {
  for (int64_t i = 0; i < S; ++i) {
    double r = 0.0;
    for (int64_t j = 0; j < S; ++j) r += to_double(P[i * S + j]) * dP[i * S + j];
    for (int64_t j = 0; j < S; ++j) {
      const double ds = R::softmax_grad(to_double(P[i * S + j]), dP[i * S + j], r);
      dS[i * S + j] = R::mul(ds, scaling);
    }
  }
}

// Step 7: g_pre = g⊙c + [w_{D/2..D-1}, −w_{0..D/2-1}] with w = g⊙s; both products rounded, then the
// sum. g is [S,D]; c, s are this batch element's [S,D] tables; out has row stride ldo.
template <class R, class In>
void rope_backward(int64_t S, int64_t D, const double* g, const In* c, const In* s, double* out,
                   int64_t ldo) {
  const int64_t half = D / 2;
  std::vector<double> u(static_cast<std::size_t>(D)), w(static_cast<std::size_t>(D));
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t d = 0; d < D; ++d) {
      u[d] = R::mul(g[t * D + d], to_double(c[t * D + d]));
      w[d] = R::mul(g[t * D + d], to_double(s[t * D + d]));
    }
    for (int64_t d = 0; d < half; ++d) out[t * ldo + d] = R::add(u[d], w[d + half]);
    for (int64_t d = half; d < D; ++d) out[t * ldo + d] = R::add(u[d], -w[d - half]);
  }
}

// Steps 2-8 for every (batch element, KV head): the query heads of the group one by one, their
// dK₃₂ and dV₃₂ summed exactly and rounded once (step 6). Writes the merged, RoPE'd gradients
// dQp [T, Hq·D], dKp and dVp [T, Hkv·D].
template <class R, class In>
void attention_backward(const GqaRopeShape& sh, const Operands<In>& in,
                        const std::vector<double>& dA, std::vector<double>& dQp,
                        std::vector<double>& dKp, std::vector<double>& dVp) {
  const int64_t S = sh.seq_len, D = sh.head_dim, Hq = sh.num_heads, G = sh.group();
  const int64_t QP = sh.q_proj_size(), KP = sh.kv_proj_size();
  std::vector<double> dP = zeros(S * S), dS = zeros(S * S), dQ = zeros(S * D), dK32 = zeros(S * D),
                      dV32 = zeros(S * D), dK = zeros(S * D), dV = zeros(S * D);
  for (int64_t b = 0; b < sh.batch; ++b) {
    const In* cos_b = in.cos + b * S * D;
    const In* sin_b = in.sin + b * S * D;
    for (int64_t j = 0; j < sh.num_kv_heads; ++j) {
      std::fill(dK.begin(), dK.end(), 0.0);
      std::fill(dV.begin(), dV.end(), 0.0);
      for (int64_t h = j * G; h < (j + 1) * G; ++h) {
        const double* dO = dA.data() + b * S * QP + h * D;  // [S,D], row stride QP (step 2)
        const int64_t head = (b * Hq + h) * S * D;
        const In* P = in.P + (b * Hq + h) * S * S;
        rounded_gemm<R>(S, S, D, dO, QP, false, in.V + head, D, true, dP.data(), S);  // dO·Vᵀ
        rounded_gemm<R>(S, D, S, P, S, true, dO, QP, false, dV32.data(), D);          // Pᵀ·dO
        softmax_backward<R>(S, P, dP.data(), in.scaling, dS.data());
        rounded_gemm<R>(S, D, S, dS.data(), S, false, in.K + head, D, false, dQ.data(), D);
        rounded_gemm<R>(S, D, S, dS.data(), S, true, in.Q + head, D, false, dK32.data(), D);
        rope_backward<R>(S, D, dQ.data(), cos_b, sin_b, dQp.data() + b * S * QP + h * D, QP);
        for (int64_t e = 0; e < S * D; ++e) {
          dK[e] += dK32[e];
          dV[e] += dV32[e];
        }
      }
      for (int64_t e = 0; e < S * D; ++e) {
        dK[e] = R::result(dK[e]);
        dV[e] = R::result(dV[e]);
      }
      rope_backward<R>(S, D, dK.data(), cos_b, sin_b, dKp.data() + b * S * KP + j * D, KP);
      for (int64_t t = 0; t < S; ++t)
        for (int64_t d = 0; d < D; ++d) dVp[(b * S + t) * KP + j * D + d] = dV[t * D + d];
    }
  }
}

template <class R, class In>
exact::GqaRopeGrads backward(const GqaRopeShape& sh, const Operands<In>& in) {
  const int64_t T = sh.tokens(), HS = sh.hidden_size, QP = sh.q_proj_size(), KP = sh.kv_proj_size();
  exact::GqaRopeGrads out;

  // Step 1: output projection.
  std::vector<double> dA = zeros(T * QP);
  rounded_gemm<R>(T, QP, HS, in.dY, HS, false, in.Wo, QP, false, dA.data(), QP);
  out.grad_o_weight = zeros(HS * QP);
  rounded_gemm<R>(HS, QP, T, in.dY, HS, true, in.A, QP, false, out.grad_o_weight.data(), QP);

  // Steps 2-8.
  std::vector<double> dQp = zeros(T * QP), dKp = zeros(T * KP), dVp = zeros(T * KP);
  attention_backward<R>(sh, in, dA, dQp, dKp, dVp);
  dA = {};

  // Steps 9-10: grad_W = dXpᵀ·Xh and dX = dXp·W per projection; (dXq + dXk) + dXv, two roundings.
  out.grad_q_weight = zeros(QP * HS);
  out.grad_k_weight = zeros(KP * HS);
  out.grad_v_weight = zeros(KP * HS);
  rounded_gemm<R>(QP, HS, T, dQp.data(), QP, true, in.Xh, HS, false, out.grad_q_weight.data(), HS);
  rounded_gemm<R>(KP, HS, T, dKp.data(), KP, true, in.Xh, HS, false, out.grad_k_weight.data(), HS);
  rounded_gemm<R>(KP, HS, T, dVp.data(), KP, true, in.Xh, HS, false, out.grad_v_weight.data(), HS);

  std::vector<double>& dX = out.grad_hidden_states;
  dX = zeros(T * HS);
  std::vector<double> dXp = zeros(T * HS);
  rounded_gemm<R>(T, HS, QP, dQp.data(), QP, false, in.Wq, HS, false, dX.data(), HS);
  rounded_gemm<R>(T, HS, KP, dKp.data(), KP, false, in.Wk, HS, false, dXp.data(), HS);
  for (int64_t e = 0; e < T * HS; ++e) dX[e] = R::add(dX[e], dXp[e]);
  rounded_gemm<R>(T, HS, KP, dVp.data(), KP, false, in.Wv, HS, false, dXp.data(), HS);
  for (int64_t e = 0; e < T * HS; ++e) dX[e] = R::add(dX[e], dXp[e]);
  return out;
}

// Values are bf16-exact doubles, so the conversion is exact.
void store(const std::vector<double>& src, const Tensor<bf16>& dst) {
  for (std::size_t i = 0; i < src.size(); ++i) dst.data[i] = bf16(static_cast<float>(src[i]));
}

}  // namespace

void gqa_rope_backward(const GqaRopeShape& s, const GqaRopeArgs& a) {
  const Operands<bf16> in{a.grad_output.data,  a.hidden_states.data,
                          a.cos.data,          a.sin.data,
                          a.q_weight.data,     a.k_weight.data,
                          a.v_weight.data,     a.o_weight.data,
                          a.query_states.data, a.key_states.data,
                          a.value_states.data, a.attn_weights.data,
                          a.attn_output.data,  a.scaling};
  const exact::GqaRopeGrads g = backward<RoundLikeReference>(s, in);
  store(g.grad_hidden_states, a.grad_hidden_states);
  store(g.grad_q_weight, a.grad_q_weight);
  store(g.grad_k_weight, a.grad_k_weight);
  store(g.grad_v_weight, a.grad_v_weight);
  store(g.grad_o_weight, a.grad_o_weight);
}

namespace exact {
GqaRopeGrads gqa_rope_backward(const GqaRopeShape& s, const GqaRopeInputs& in) {
  const Operands<double> ops{in.grad_output,  in.hidden_states, in.cos,          in.sin,
                             in.q_weight,     in.k_weight,      in.v_weight,     in.o_weight,
                             in.query_states, in.key_states,    in.value_states, in.attn_weights,
                             in.attn_output,  in.scaling};
  return backward<NoRounding>(s, ops);
}
}  // namespace exact

}  // namespace attnbwd::serial
