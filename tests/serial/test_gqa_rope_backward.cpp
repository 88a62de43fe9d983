// The serial oracle for gqa_rope_backward (spec §3).
//  * The no-rounding oracle against finite differences of a float64 forward (consistent inputs).
//  * The bf16 oracle against an element-by-element emulation written here from the spec, bitwise.
//  * Hand-made cases, one per rounding point, where the rounding changes the output.
//  * The bf16 oracle's distance to exact math; a real workload shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnbwd/args.hpp"
#include "common/rng.hpp"
#include "serial/exact.hpp"
#include "serial/rounding.hpp"
#include "serial/serial.hpp"
#include "tests/common/seed.hpp"

namespace attnbwd::serial {
namespace {

using std::int64_t;
using Vec = std::vector<double>;
const bf16 kNaN = bf16::from_bits(0x7FC0);

double rb(double x) { return round_bf16(x).to_float(); }
std::vector<double> as_double(const std::vector<bf16>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i].to_float();
  return out;
}
std::vector<float> as_float(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i].to_float();
  return out;
}

// One problem's bf16 tensors; run() poisons the outputs with NaN, then calls the oracle.
struct Problem {
  GqaRopeShape s;
  double scaling = 1.0;
  std::vector<bf16> dY, Xh, cos, sin, Wq, Wk, Wv, Wo, Q, K, V, P, A;  // inputs
  std::vector<bf16> g_hidden, g_q, g_k, g_v, g_o;                     // outputs

  explicit Problem(GqaRopeShape shape) : s(shape) {
    const int64_t T = s.tokens(), HS = s.hidden_size, D = s.head_dim, QP = s.q_proj_size(),
                  KP = s.kv_proj_size(), heads = s.batch * s.num_heads;
    const auto zero = bf16(0.0f);
    for (auto* v : {&dY, &Xh, &g_hidden}) v->assign(T * HS, zero);
    for (auto* v : {&cos, &sin}) v->assign(T * D, zero);
    for (auto* v : {&Wq, &Wo, &g_q, &g_o}) v->assign(QP * HS, zero);
    for (auto* v : {&Wk, &Wv, &g_k, &g_v}) v->assign(KP * HS, zero);
    for (auto* v : {&Q, &K, &V}) v->assign(heads * s.seq_len * D, zero);
    P.assign(heads * s.seq_len * s.seq_len, zero);
    A.assign(T * QP, zero);
  }

  // The benchmark's inputs (spec §1.1).
  void randomize(Rng& rng) {
    auto normal = [&] { return static_cast<float>(rng.normal()); };
    for (auto* v : {&dY, &Xh, &Q, &K, &V, &A})
      for (auto& x : *v) x = bf16(normal());
    const float pi = 3.14159265358979f;
    for (auto& x : cos) x = bf16(std::cos(std::clamp(normal(), -pi, pi)));
    for (auto& x : sin) x = bf16(std::sin(std::clamp(normal(), -pi, pi)));
    auto weight = [&](std::vector<bf16>& w, int64_t fan_in) {
      const float root = std::sqrt(static_cast<float>(fan_in));
      for (auto& x : w) x = bf16(bf16(normal()).to_float() / root);
    };
    weight(Wq, s.hidden_size);
    weight(Wk, s.hidden_size);
    weight(Wv, s.hidden_size);
    weight(Wo, s.q_proj_size());
    const int64_t S = s.seq_len;
    std::vector<float> row(S);
    for (int64_t r = 0; r < s.batch * s.num_heads * S; ++r) {  // softmax of fp32 normals
      float mx = -1e30f, sum = 0.0f;
      for (auto& x : row) mx = std::max(mx, x = normal());
      for (auto& x : row) sum += x = std::exp(x - mx);
      for (int64_t j = 0; j < S; ++j) P[r * S + j] = bf16(row[j] / sum);
    }
    scaling = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  }

  void run() {
    for (auto* v : {&g_hidden, &g_q, &g_k, &g_v, &g_o}) std::fill(v->begin(), v->end(), kNaN);
    const int64_t B = s.batch, S = s.seq_len, HS = s.hidden_size, D = s.head_dim, H = s.num_heads,
                  QP = s.q_proj_size(), KP = s.kv_proj_size();
    GqaRopeArgs a;
    a.grad_output = make_tensor<const bf16>(dY.data(), B, S, HS);
    a.hidden_states = make_tensor<const bf16>(Xh.data(), B, S, HS);
    a.cos = make_tensor<const bf16>(cos.data(), B, S, D);
    a.sin = make_tensor<const bf16>(sin.data(), B, S, D);
    a.q_weight = make_tensor<const bf16>(Wq.data(), QP, HS);
    a.k_weight = make_tensor<const bf16>(Wk.data(), KP, HS);
    a.v_weight = make_tensor<const bf16>(Wv.data(), KP, HS);
    a.o_weight = make_tensor<const bf16>(Wo.data(), HS, QP);
    a.query_states = make_tensor<const bf16>(Q.data(), B, H, S, D);
    a.key_states = make_tensor<const bf16>(K.data(), B, H, S, D);
    a.value_states = make_tensor<const bf16>(V.data(), B, H, S, D);
    a.attn_weights = make_tensor<const bf16>(P.data(), B, H, S, S);
    a.attn_output = make_tensor<const bf16>(A.data(), B, S, QP);
    a.scaling = scaling;
    a.grad_hidden_states = make_tensor(g_hidden.data(), B, S, HS);
    a.grad_q_weight = make_tensor(g_q.data(), QP, HS);
    a.grad_k_weight = make_tensor(g_k.data(), KP, HS);
    a.grad_v_weight = make_tensor(g_v.data(), KP, HS);
    a.grad_o_weight = make_tensor(g_o.data(), HS, QP);
    gqa_rope_backward(s, a);
  }

  int64_t head_index(int64_t b, int64_t h, int64_t i, int64_t d) const {
    return ((b * s.num_heads + h) * s.seq_len + i) * s.head_dim + d;
  }
  int64_t p_index(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return ((b * s.num_heads + h) * s.seq_len + i) * s.seq_len + j;
  }
};

// ---------------------------------------------------------------------------------------------
// The bf16 reference re-derived element by element from the spec: direct index formulas and the
// rounding helpers, none of the oracle's loop structure, GEMM helper or policies. Sums run in
// ascending index order from 0.0, as in the oracle, so the results agree bit for bit. Holds the
// merged gradients dQp, dKp, dVp; projection outputs are computed per element on demand.
class Emulation {
 public:
  explicit Emulation(const Problem& p)
      : p_(p), Wq_(as_float(p.Wq)), Wk_(as_float(p.Wk)), Wv_(as_float(p.Wv)) {
    const GqaRopeShape& s = p.s;
    const int64_t S = s.seq_len, D = s.head_dim, QP = s.q_proj_size(), KP = s.kv_proj_size();
    dQp_.assign(s.tokens() * QP, 0.0);
    dKp_.assign(s.tokens() * KP, 0.0);
    dVp_.assign(s.tokens() * KP, 0.0);
    const Vec dA = output_projection_grad();
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t j = 0; j < s.num_kv_heads; ++j) {
        Vec dK(S * D, 0.0), dV(S * D, 0.0);  // sums over the group, rounded once below
        for (int64_t g = 0; g < s.group(); ++g) {
          const int64_t h = j * s.group() + g;
          auto dO = [&](int64_t i, int64_t d) { return dA[(b * S + i) * QP + h * D + d]; };
          auto P = [&](int64_t i, int64_t k) { return to_double(p.P[p.p_index(b, h, i, k)]); };
          auto head = [&](const std::vector<bf16>& x, int64_t i, int64_t d) {
            return to_double(x[p.head_index(b, h, i, d)]);
          };
          Vec dP(S * S), dSs(S * S), dQ(S * D);
          for (int64_t i = 0; i < S; ++i)
            for (int64_t k = 0; k < S; ++k) {
              double sum = 0.0;
              for (int64_t d = 0; d < D; ++d) sum += dO(i, d) * head(p.V, k, d);
              dP[i * S + k] = rb(sum);
            }
          for (int64_t i = 0; i < S; ++i) {
            double r = 0.0;
            for (int64_t k = 0; k < S; ++k) r += P(i, k) * dP[i * S + k];
            for (int64_t k = 0; k < S; ++k) {
              const bf16 ds =
                  softmax_grad_bf16(bf16(static_cast<float>(P(i, k))),
                                    bf16(static_cast<float>(dP[i * S + k])), static_cast<float>(r));
              dSs[i * S + k] = mul_bf16(ds, static_cast<float>(p.scaling)).to_float();
            }
          }
          for (int64_t i = 0; i < S; ++i)
            for (int64_t d = 0; d < D; ++d) {
              double q = 0.0, k32 = 0.0, v32 = 0.0;
              for (int64_t k = 0; k < S; ++k) {
                q += dSs[i * S + k] * head(p.K, k, d);    // dQ = dS·K
                k32 += dSs[k * S + i] * head(p.Q, k, d);  // dK₃₂ = dSᵀ·Q
                v32 += P(k, i) * dO(k, d);                // dV₃₂ = Pᵀ·dO
              }
              dQ[i * D + d] = rb(q);
              dK[i * D + d] += rb(k32);
              dV[i * D + d] += rb(v32);
            }
          rope_backward(b, dQ, dQp_, QP, h * D);
        }
        for (auto& x : dK) x = rb(x);
        rope_backward(b, dK, dKp_, KP, j * D);
        for (int64_t i = 0; i < S; ++i)
          for (int64_t d = 0; d < D; ++d) dVp_[(b * S + i) * KP + j * D + d] = rb(dV[i * D + d]);
      }
  }

  double grad_o_weight(int64_t n, int64_t m) const {
    const int64_t HS = p_.s.hidden_size, QP = p_.s.q_proj_size();
    double sum = 0.0;
    for (int64_t t = 0; t < p_.s.tokens(); ++t)
      sum += to_double(p_.dY[t * HS + n]) * to_double(p_.A[t * QP + m]);
    return rb(sum);
  }
  double grad_q_weight(int64_t n, int64_t c) const {
    return weight_grad(dQp_, p_.s.q_proj_size(), n, c);
  }
  double grad_k_weight(int64_t n, int64_t c) const {
    return weight_grad(dKp_, p_.s.kv_proj_size(), n, c);
  }
  double grad_v_weight(int64_t n, int64_t c) const {
    return weight_grad(dVp_, p_.s.kv_proj_size(), n, c);
  }
  // (dXq + dXk) + dXv, each a rounded GEMM result, each addition rounded.
  double grad_hidden_states(int64_t t, int64_t c) const {
    const bf16 dXq = round_bf16(input_grad(dQp_, Wq_, p_.s.q_proj_size(), t, c));
    const bf16 dXk = round_bf16(input_grad(dKp_, Wk_, p_.s.kv_proj_size(), t, c));
    const bf16 dXv = round_bf16(input_grad(dVp_, Wv_, p_.s.kv_proj_size(), t, c));
    return add_bf16(add_bf16(dXq, dXk), dXv).to_float();
  }

 private:
  // dA = dY·Wo, rounded, [T, Hq·D]; one row of dY times Wo at a time.
  Vec output_projection_grad() const {
    const int64_t HS = p_.s.hidden_size, QP = p_.s.q_proj_size();
    const std::vector<float> Wo = as_float(p_.Wo);
    Vec dA(p_.s.tokens() * QP), acc(QP);
    for (int64_t t = 0; t < p_.s.tokens(); ++t) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t m = 0; m < HS; ++m) {
        const double y = to_double(p_.dY[t * HS + m]);
        if (y == 0.0) continue;
        for (int64_t n = 0; n < QP; ++n) acc[n] += y * Wo[m * QP + n];
      }
      for (int64_t n = 0; n < QP; ++n) dA[t * QP + n] = rb(acc[n]);
    }
    return dA;
  }
  // g_pre[d] = u[d] + (d < D/2 ? w[d + D/2] : −w[d − D/2]), u = g·cos, w = g·sin, all rounded.
  void rope_backward(int64_t b, const Vec& g, Vec& out, int64_t ld, int64_t col) const {
    const int64_t S = p_.s.seq_len, D = p_.s.head_dim, half = D / 2;
    for (int64_t i = 0; i < S; ++i) {
      const int64_t t = b * S + i;
      auto u = [&](int64_t d) {
        return mul_bf16(round_bf16(g[i * D + d]), p_.cos[t * D + d].to_float());
      };
      auto w = [&](int64_t d) {
        return mul_bf16(round_bf16(g[i * D + d]), p_.sin[t * D + d].to_float());
      };
      for (int64_t d = 0; d < D; ++d) {
        const bf16 rot = d < half ? w(d + half) : bf16(-w(d - half).to_float());
        out[t * ld + col + d] = add_bf16(u(d), rot).to_float();
      }
    }
  }
  double weight_grad(const Vec& dXp, int64_t width, int64_t n, int64_t c) const {
    const int64_t HS = p_.s.hidden_size;
    double sum = 0.0;
    for (int64_t t = 0; t < p_.s.tokens(); ++t)
      sum += dXp[t * width + n] * to_double(p_.Xh[t * HS + c]);
    return rb(sum);
  }
  double input_grad(const Vec& dXp, const std::vector<float>& W, int64_t width, int64_t t,
                    int64_t c) const {
    const int64_t HS = p_.s.hidden_size;
    double sum = 0.0;
    for (int64_t n = 0; n < width; ++n) sum += dXp[t * width + n] * W[n * HS + c];
    return sum;
  }

  const Problem& p_;
  std::vector<float> Wq_, Wk_, Wv_;
  Vec dQp_, dKp_, dVp_;
};

// Every element of every output against the emulation, bitwise (ASSERT: stop at the first).
void expect_matches_emulation(const Problem& p) {
  const Emulation e(p);
  const GqaRopeShape& s = p.s;
  const int64_t HS = s.hidden_size, QP = s.q_proj_size(), KP = s.kv_proj_size();
  for (int64_t n = 0; n < HS; ++n)
    for (int64_t m = 0; m < QP; ++m)
      ASSERT_EQ(p.g_o[n * QP + m].to_float(), e.grad_o_weight(n, m))
          << "grad_o_weight " << n << "," << m;
  for (int64_t c = 0; c < HS; ++c) {
    for (int64_t n = 0; n < QP; ++n)
      ASSERT_EQ(p.g_q[n * HS + c].to_float(), e.grad_q_weight(n, c))
          << "grad_q_weight " << n << "," << c;
    for (int64_t n = 0; n < KP; ++n) {
      ASSERT_EQ(p.g_k[n * HS + c].to_float(), e.grad_k_weight(n, c))
          << "grad_k_weight " << n << "," << c;
      ASSERT_EQ(p.g_v[n * HS + c].to_float(), e.grad_v_weight(n, c))
          << "grad_v_weight " << n << "," << c;
    }
    for (int64_t t = 0; t < s.tokens(); ++t)
      ASSERT_EQ(p.g_hidden[t * HS + c].to_float(), e.grad_hidden_states(t, c))
          << "grad_hidden " << t << "," << c;
  }
}

// The bf16 inputs of a problem as doubles, for the no-rounding oracle.
struct ExactCopy {
  Vec dY, Xh, cos, sin, Wq, Wk, Wv, Wo, Q, K, V, P, A;
  explicit ExactCopy(const Problem& p)
      : dY(as_double(p.dY)),
        Xh(as_double(p.Xh)),
        cos(as_double(p.cos)),
        sin(as_double(p.sin)),
        Wq(as_double(p.Wq)),
        Wk(as_double(p.Wk)),
        Wv(as_double(p.Wv)),
        Wo(as_double(p.Wo)),
        Q(as_double(p.Q)),
        K(as_double(p.K)),
        V(as_double(p.V)),
        P(as_double(p.P)),
        A(as_double(p.A)) {}
  exact::GqaRopeInputs inputs(double scaling) const {
    return {dY.data(), Xh.data(), cos.data(), sin.data(), Wq.data(), Wk.data(), Wv.data(),
            Wo.data(), Q.data(),  K.data(),   V.data(),   P.data(),  A.data(),  scaling};
  }
};

// ---------------------------------------------------------------------------------------------
// A float64 forward (spec §3, "Forward being differentiated") producing the saved tensors and
// Y. With these consistent inputs the op is the gradient of L = <dY, Y>.
struct Weights {
  Vec Xh, Wq, Wk, Wv, Wo;
};
struct Saved {
  Vec Q, K, V, P, A, Y;
};
Saved forward(const GqaRopeShape& s, const Weights& w, const Vec& cos, const Vec& sin,
              double scaling) {
  const int64_t B = s.batch, S = s.seq_len, T = s.tokens(), HS = s.hidden_size, D = s.head_dim,
                H = s.num_heads, QP = s.q_proj_size(), KP = s.kv_proj_size(), half = D / 2;
  auto project = [&](const Vec& W, int64_t rows) {  // X·Wᵀ
    Vec out(T * rows, 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < rows; ++n)
        for (int64_t c = 0; c < HS; ++c) out[t * rows + n] += w.Xh[t * HS + c] * W[n * HS + c];
    return out;
  };
  const Vec q = project(w.Wq, QP), k = project(w.Wk, KP), v = project(w.Wv, KP);
  auto rope = [&](const Vec& x, int64_t width, int64_t t, int64_t col, int64_t d) {
    const double rot = d < half ? -x[t * width + col + d + half] : x[t * width + col + d - half];
    return x[t * width + col + d] * cos[t * D + d] + rot * sin[t * D + d];
  };
  Saved o;
  o.Q.assign(B * H * S * D, 0.0);
  o.K = o.V = o.Q;
  o.P.assign(B * H * S * S, 0.0);
  o.A.assign(T * QP, 0.0);
  o.Y.assign(T * HS, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = h / s.group(), base = (b * H + h) * S;
      for (int64_t i = 0; i < S; ++i)
        for (int64_t d = 0; d < D; ++d) {
          o.Q[(base + i) * D + d] = rope(q, QP, b * S + i, h * D, d);
          o.K[(base + i) * D + d] = rope(k, KP, b * S + i, kv * D, d);  // repeat_kv
          o.V[(base + i) * D + d] = v[(b * S + i) * KP + kv * D + d];
        }
      for (int64_t i = 0; i < S; ++i) {
        double* p = &o.P[(base + i) * S];
        double mx = -1e300, sum = 0.0;
        for (int64_t j = 0; j < S; ++j) {
          p[j] = 0.0;
          for (int64_t d = 0; d < D; ++d) p[j] += o.Q[(base + i) * D + d] * o.K[(base + j) * D + d];
          mx = std::max(mx, p[j] *= scaling);
        }
        for (int64_t j = 0; j < S; ++j) sum += p[j] = std::exp(p[j] - mx);
        for (int64_t j = 0; j < S; ++j) p[j] /= sum;
        for (int64_t d = 0; d < D; ++d)
          for (int64_t j = 0; j < S; ++j)
            o.A[(b * S + i) * QP + h * D + d] += p[j] * o.V[(base + j) * D + d];
      }
    }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t m = 0; m < HS; ++m)
      for (int64_t n = 0; n < QP; ++n) o.Y[t * HS + m] += o.A[t * QP + n] * w.Wo[m * QP + n];
  return o;
}

TEST(GqaRopeBackward, ExactOracleMatchesFiniteDifferences) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(20));
  const GqaRopeShape s{2, 5, 12, 4, 2, 8};
  const int64_t T = s.tokens(), HS = s.hidden_size, QP = s.q_proj_size(), KP = s.kv_proj_size();
  auto normals = [&](int64_t n, double scale) {
    Vec v(n);
    for (auto& x : v) x = scale * rng.normal();
    return v;
  };
  Weights w{normals(T * HS, 1), normals(QP * HS, 1 / std::sqrt(12.0)),
            normals(KP * HS, 1 / std::sqrt(12.0)), normals(KP * HS, 1 / std::sqrt(12.0)),
            normals(HS * QP, 1 / std::sqrt(32.0))};
  // cos and sin unrelated to each other, as in the benchmark: the math must not assume c² + s² = 1.
  Vec cos = normals(T * s.head_dim, 1), sin = normals(T * s.head_dim, 1);
  const Vec dY = normals(T * HS, 1);
  const double scaling = 0.37;

  const Saved f = forward(s, w, cos, sin, scaling);
  const exact::GqaRopeGrads g = exact::gqa_rope_backward(
      s, {dY.data(), w.Xh.data(), cos.data(), sin.data(), w.Wq.data(), w.Wk.data(), w.Wv.data(),
          w.Wo.data(), f.Q.data(), f.K.data(), f.V.data(), f.P.data(), f.A.data(), scaling});

  auto loss = [&] {
    const Vec Y = forward(s, w, cos, sin, scaling).Y;
    double L = 0.0;
    for (int64_t e = 0; e < T * HS; ++e) L += dY[e] * Y[e];
    return L;
  };
  auto check = [&](Vec& param, const Vec& grad, const char* name) {
    ASSERT_EQ(param.size(), grad.size()) << name;
    double max_grad = 0.0;
    for (double x : grad) max_grad = std::max(max_grad, std::fabs(x));
    for (std::size_t e = 0; e < param.size(); ++e) {
      const double x0 = param[e], h = 1e-5;
      param[e] = x0 + h;
      const double up = loss();
      param[e] = x0 - h;
      const double down = loss();
      param[e] = x0;
      EXPECT_NEAR(grad[e], (up - down) / (2 * h), 1e-6 * (std::fabs(grad[e]) + max_grad))
          << name << "[" << e << "]";
    }
  };
  check(w.Xh, g.grad_hidden_states, "grad_hidden_states");
  check(w.Wq, g.grad_q_weight, "grad_q_weight");
  check(w.Wk, g.grad_k_weight, "grad_k_weight");
  check(w.Wv, g.grad_v_weight, "grad_v_weight");
  check(w.Wo, g.grad_o_weight, "grad_o_weight");
}

// Random benchmark-like inputs, every output element equal to the emulation's. Two shapes: group
// 2 with D=8, and group 4 (the benchmark's) with D=4 and S not a multiple of anything.
TEST(GqaRopeBackward, Bf16OracleMatchesEmulation) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(21));
  for (const GqaRopeShape& s : {GqaRopeShape{2, 5, 12, 4, 2, 8}, GqaRopeShape{1, 7, 6, 8, 2, 4}}) {
    Problem p(s);
    p.randomize(rng);
    p.run();
    expect_matches_emulation(p);
  }
}

// The bf16 oracle stays within bf16-level error of exact math on the same bf16 inputs:
// |err| ≤ atol + 2^-7·|ref|, atol = 2^-4·RMS(output). The softmax backward's cancellation (dP − r,
// then dS·K) magnifies the bf16 roundings: over 300 seeds the worst (|err| − 2^-7·|ref|) was
// 0.027·RMS, in grad_q_weight. A missing or doubled scaling, or a wrong index, errs by O(RMS).
TEST(GqaRopeBackward, Bf16OracleIsCloseToExact) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(22));
  Problem p({2, 16, 32, 4, 2, 16});
  p.randomize(rng);
  p.run();
  const ExactCopy x(p);
  const exact::GqaRopeGrads g = exact::gqa_rope_backward(p.s, x.inputs(p.scaling));
  auto check = [](const std::vector<bf16>& out, const Vec& ref, const char* name) {
    ASSERT_EQ(out.size(), ref.size());
    double sq = 0.0;
    for (double r : ref) sq += r * r;
    const double atol = std::ldexp(std::sqrt(sq / ref.size()), -4);
    for (std::size_t e = 0; e < ref.size(); ++e)
      EXPECT_NEAR(out[e].to_float(), ref[e], atol + std::ldexp(std::fabs(ref[e]), -7))
          << name << "[" << e << "]";
  };
  check(p.g_hidden, g.grad_hidden_states, "grad_hidden_states");
  check(p.g_q, g.grad_q_weight, "grad_q_weight");
  check(p.g_k, g.grad_k_weight, "grad_k_weight");
  check(p.g_v, g.grad_v_weight, "grad_v_weight");
  check(p.g_o, g.grad_o_weight, "grad_o_weight");
}

// ---------------------------------------------------------------------------------------------
// Hand-made cases. B=1, S=2, D=2, hidden=1, so every intermediate is a short formula. Defaults:
// dY = (1, 1); hidden_states = (1, 0), so grad_{q,k,v}_weight[n] is the merged gradient of token 0
// at feature n; cos = 1 and sin = 0 make RoPE the identity; P = 1/2 everywhere; scaling = 1.
// With o_weight = (1, 0) per head, V = [(1,0),(0,0)] and K = [(1,0),(0,0)]:
// dO = (1, 0), dP = (1, 0), r = 1/2, dS = (1/4, −1/4) in each row, dQ = (1/4, 0), dV = (1, 0).
Problem tiny(int64_t heads, int64_t kv_heads) {
  Problem p({1, 2, 1, heads, kv_heads, 2});
  std::fill(p.dY.begin(), p.dY.end(), bf16(1.0f));
  p.Xh[0] = bf16(1.0f);
  std::fill(p.cos.begin(), p.cos.end(), bf16(1.0f));
  std::fill(p.P.begin(), p.P.end(), bf16(0.5f));
  for (int64_t h = 0; h < heads; ++h) {
    p.Wo[h * 2] = bf16(1.0f);
    p.V[p.head_index(0, h, 0, 0)] = bf16(1.0f);
    p.K[p.head_index(0, h, 0, 0)] = bf16(1.0f);
  }
  return p;
}
// Sets a bf16 input from a value that must be exact in bf16.
void set(bf16& x, double v) {
  x = round_bf16(v);
  ASSERT_EQ(x.to_float(), v) << "not a bf16 value: " << v;
}
const double k8 = std::ldexp(1.0, -8), k7 = std::ldexp(1.0, -7);

// dA = dY·Wo is rounded before dV = Pᵀ·dO cancels it: dO = (1+2^-6, −(1+2^-6+2^-7)).
TEST(GqaRopeRoundingPoints, OutputProjectionGradRoundedBeforeUse) {
  Problem p = tiny(1, 1);
  set(p.dY[0], 1 + k7);
  set(p.dY[1], -(1 + 2 * k7));
  set(p.Wo[0], 1 + k7);
  p.run();
  const double dO0 = rb((1 + k7) * (1 + k7)), dO1 = rb(-(1 + 2 * k7) * (1 + k7));
  const double expected = rb(0.5 * dO0 + 0.5 * dO1);
  const double unrounded = rb(0.5 * (1 + k7) * (1 + k7) - 0.5 * (1 + 2 * k7) * (1 + k7));
  ASSERT_NE(expected, unrounded);
  EXPECT_EQ(p.g_v[0].to_float(), expected);  // dV[token 0, 0]
}

// dP = dO·Vᵀ is rounded before the softmax backward cancels it:
// dP = (1 + 2^-8 + 2^-10 → 1 + 2^-7, 1).
TEST(GqaRopeRoundingPoints, DpRoundedBeforeSoftmaxBackward) {
  Problem p = tiny(1, 1);
  set(p.Wo[1], 1.0);  // dO = (1, 1)
  set(p.V[p.head_index(0, 0, 0, 1)], k8 + k8 / 4);
  set(p.V[p.head_index(0, 0, 1, 0)], 1.0);
  p.run();
  const double dp0 = rb(1 + k8 + k8 / 4), exact_dp0 = 1 + k8 + k8 / 4;
  const double expected =
      softmax_grad_bf16(bf16(0.5f), round_bf16(dp0), static_cast<float>(0.5 * dp0 + 0.5))
          .to_float();
  const double unrounded = rb(0.5 * (exact_dp0 - (0.5 * exact_dp0 + 0.5)));
  ASSERT_NE(expected, unrounded);
  EXPECT_EQ(p.g_q[0].to_float(), expected);  // dQ[token 0, 0] = dS[0,0]
}

// dS is computed in fp32 from an fp32 row-sum: P = (1, 2^-24), dP = (1, 3/4) give
// r = 1 + 0.75·2^-24, which is 1.0f, so dS[0,0] = 0; exact math gives −0.75·2^-24.
TEST(GqaRopeRoundingPoints, SoftmaxBackwardInFp32) {
  Problem p = tiny(1, 1);
  set(p.P[p.p_index(0, 0, 0, 0)], 1.0);
  set(p.P[p.p_index(0, 0, 0, 1)], std::ldexp(1.0, -24));
  set(p.V[p.head_index(0, 0, 1, 0)], 0.75);
  p.run();
  ASSERT_NE(rb(1.0 * (1.0 - (1.0 + 0.75 * std::ldexp(1.0, -24)))), 0.0);
  EXPECT_EQ(p.g_q[0].to_float(), 0.0f);
}

// dS is rounded to bf16, then multiplied by scaling and rounded again:
// dS[0,0] = 1/4·(1 + 2^-8 + 2^-10) → 1/4·(1 + 2^-7), then × 0.75.
TEST(GqaRopeRoundingPoints, DsRoundedBeforeScaling) {
  Problem p = tiny(1, 1);
  set(p.V[p.head_index(0, 0, 1, 0)], -(k8 + k8 / 4));  // dP = (1, −2^-8 − 2^-10)
  p.scaling = 0.75;
  p.run();
  const double ds = 0.25 * (1 + k8 + k8 / 4);
  const double expected = mul_bf16(round_bf16(ds), 0.75f).to_float();
  ASSERT_NE(expected, rb(ds * 0.75));
  EXPECT_EQ(p.g_q[0].to_float(), expected);
}

// Each head's dK₃₂ and dV₃₂ is rounded before the GQA sum: head 0 gives 1/2 + 2^-8 + 2^-10
// (→ 1/2 + 2^-8), head 1 gives −1/2.
TEST(GqaRopeRoundingPoints, HeadGradsRoundedBeforeGqaSum) {
  {
    Problem p = tiny(2, 1);  // dS = (1/4, −1/4) in every row of both heads
    set(p.Q[p.head_index(0, 0, 0, 0)], 2.0);
    set(p.Q[p.head_index(0, 0, 1, 0)], 4 * k8 + k8);
    set(p.Q[p.head_index(0, 1, 0, 0)], -2.0);
    p.run();
    const double expected = rb(rb(0.25 * (2 + 4 * k8 + k8)) - 0.5);
    ASSERT_NE(expected, rb(0.25 * (2 + 4 * k8 + k8) - 0.5));
    EXPECT_EQ(p.g_k[0].to_float(), expected);  // dK[token 0, 0]
  }
  {
    Problem p = tiny(2, 1);
    set(p.Wo[2], -1.0);                            // dO of head 1 = (−1, 0)
    set(p.P[p.p_index(0, 0, 1, 0)], k8 + k8 / 4);  // head 0: dV₃₂[0,0] = 1/2 + 2^-8 + 2^-10
    set(p.P[p.p_index(0, 1, 1, 0)], 0.0);          // head 1: dV₃₂[0,0] = −1/2
    p.run();
    const double expected = rb(rb(0.5 + k8 + k8 / 4) - 0.5);
    ASSERT_NE(expected, rb(0.5 + k8 + k8 / 4 - 0.5));
    EXPECT_EQ(p.g_v[0].to_float(), expected);  // dV[token 0, 0]
  }
}

// The GQA sum over the group rounds once: heads give 1, 2^-8, 2^-8, 0 for dK₃₂ and dV₃₂; their
// sum 1 + 2^-7 is exact, while rounding after each add would give 1.
TEST(GqaRopeRoundingPoints, GqaSumRoundedOnce) {
  Problem p = tiny(4, 1);
  const double w[4] = {1, k8, k8, 0};  // scales head h's dO, hence its dS, dK₃₂ and dV₃₂
  for (int64_t h = 0; h < 4; ++h) {
    set(p.Wo[h * 2], w[h]);
    set(p.Q[p.head_index(0, h, 0, 0)], 2.0);
    set(p.Q[p.head_index(0, h, 1, 0)], 2.0);
  }
  p.run();
  ASSERT_NE(rb(rb(rb(1 + k8) + k8) + 0), 1 + k7);
  EXPECT_EQ(p.g_k[0].to_float(), 1 + k7);
  EXPECT_EQ(p.g_v[0].to_float(), 1 + k7);
}

// RoPE backward rounds u = g·c and w = g·s before adding them, and the second half gets −w:
// g = (1/4, 2^-10·(1+2^-7)), c = (1, 1−2^-8), s = (−1, 1−2^-8) for token 0.
TEST(GqaRopeRoundingPoints, RopeProductsRoundedBeforeAdd) {
  Problem p = tiny(1, 1);
  set(p.K[p.head_index(0, 0, 0, 1)], k8 * (1 + k7));  // dQ = (1/4, 2^-10·(1+2^-7))
  set(p.cos[1], 1 - k8);
  set(p.sin[0], -1.0);
  set(p.sin[1], 1 - k8);
  p.run();
  const bf16 g0 = round_bf16(0.25), g1 = round_bf16(k8 / 4 * (1 + k7));
  const double expected0 = add_bf16(mul_bf16(g0, 1.0f), mul_bf16(g1, 1 - k8)).to_float();
  const double expected1 =
      add_bf16(mul_bf16(g1, 1 - k8), bf16(-mul_bf16(g0, -1.0f).to_float())).to_float();
  const double unrounded = rb(0.25 + k8 / 4 * (1 + k7) * (1 - k8));
  ASSERT_NE(expected0, unrounded);
  ASSERT_NE(expected1, unrounded);
  EXPECT_EQ(p.g_q[0].to_float(), expected0);
  EXPECT_EQ(p.g_q[1].to_float(), expected1);
}

// grad_hidden_states = (dXq + dXk) + dXv with two roundings. Token 0: dXq = 1, dXk = 2^-8,
// dXv = −2^-8 give 1 − 2^-8; one rounding of the sum, or another order, gives 1.
TEST(GqaRopeRoundingPoints, HiddenGradIsTwoRoundedAdds) {
  Problem p = tiny(1, 1);
  set(p.Q[p.head_index(0, 0, 0, 0)], 1.0);  // dK = (1/2, −1/2) at tokens 0, 1
  set(p.Q[p.head_index(0, 0, 1, 0)], 1.0);
  set(p.Wq[0], 4.0);  // dXq = 4·dQ[t,0] = 1
  set(p.Wk[0], k7);   // dXk = (2^-8, −2^-8)
  set(p.Wv[0], -k8);  // dXv = −2^-8·dV[t,0] = −2^-8
  p.run();
  const bf16 q(1.0f), k0 = round_bf16(k8), k1 = round_bf16(-k8), v = round_bf16(-k8);
  const double expected0 = add_bf16(add_bf16(q, k0), v).to_float();
  ASSERT_NE(expected0, rb(1 + k8 - k8));
  ASSERT_NE(expected0, add_bf16(add_bf16(q, v), k0).to_float());
  ASSERT_NE(expected0, add_bf16(q, add_bf16(k0, v)).to_float());
  EXPECT_EQ(p.g_hidden[0].to_float(), expected0);
  EXPECT_EQ(p.g_hidden[1].to_float(), add_bf16(add_bf16(q, k1), v).to_float());
}

// ---------------------------------------------------------------------------------------------
// Workload 5 (B=1, S=131): every element written; 300 random elements of each output equal to
// the emulation's (which computes dA and the attention part in full, the projections per element).
TEST(GqaRopeBackward, WorkloadShapeSpotCheck) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(23));
  Problem p({1, 131, 5120, 32, 8, 128});
  p.randomize(rng);
  p.run();
  for (const auto* out : {&p.g_hidden, &p.g_q, &p.g_k, &p.g_v, &p.g_o})
    for (std::size_t e = 0; e < out->size(); ++e)
      ASSERT_TRUE(std::isfinite((*out)[e].to_float())) << "element " << e << " not written";
  const Emulation e(p);
  auto pick = [&](int64_t n) {
    return static_cast<int64_t>(rng.next() % static_cast<std::uint64_t>(n));
  };
  for (int i = 0; i < 300; ++i) {
    const int64_t c = pick(5120), nq = pick(4096), nk = pick(1024), t = pick(131);
    EXPECT_EQ(p.g_o[c * 4096 + nq].to_float(), e.grad_o_weight(c, nq)) << c << "," << nq;
    EXPECT_EQ(p.g_q[nq * 5120 + c].to_float(), e.grad_q_weight(nq, c)) << nq << "," << c;
    EXPECT_EQ(p.g_k[nk * 5120 + c].to_float(), e.grad_k_weight(nk, c)) << nk << "," << c;
    EXPECT_EQ(p.g_v[nk * 5120 + c].to_float(), e.grad_v_weight(nk, c)) << nk << "," << c;
    EXPECT_EQ(p.g_hidden[t * 5120 + c].to_float(), e.grad_hidden_states(t, c)) << t << "," << c;
  }
}

}  // namespace
}  // namespace attnbwd::serial
