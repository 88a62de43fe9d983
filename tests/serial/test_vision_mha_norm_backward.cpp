// Tests of the serial oracle for vision_mha_norm_backward (spec §4, Molmo 001). Every other backend
// is judged against this oracle, so it is validated on its own terms:
//   * finite differences of a float64 forward, on saved tensors made consistent with each other,
//   where
//     the op is a true gradient (grad_x up to the reference's σ² quirk, pinned by a formula);
//   * hand-computed cases for the quirks, and which input feeds which output;
//   * the float entry point against the double variant;
//   * the B=1 workload shape against direct double formulas on sampled elements.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attnbwd/args.hpp"
#include "common/rng.hpp"
#include "serial/exact_fp32.hpp"
#include "serial/loops.hpp"
#include "serial/serial.hpp"
#include "tests/common/fd_check.hpp"
#include "tests/common/seed.hpp"

namespace attnbwd {
namespace {

using namespace test;  // fd_check.hpp: Floats, Vec, sz, normals, all_close, max_abs, dot, central_differences
using serial::exact::VisionMhaGrads;

Vec to_vec(const Floats& f) { return Vec(f.begin(), f.end()); }

// ---- Inputs, outputs, running the oracle

struct Inputs {
  VisionMhaShape s;
  Floats grad_output, x, x_mean, x_var, x_norm, ln_weight, qkv_weight, q, k, v, attn_weights,
      attn_output, out_weight;
  double scale = 0.125, norm_eps = 1e-5;
};

// All inputs zero, sized for `s`.
Inputs zero_inputs(const VisionMhaShape& s) {
  const std::int64_t N = s.tokens(), E = s.embed_dim, BH = s.batch * s.num_heads;
  Inputs in;
  in.s = s;
  for (Floats* t : {&in.grad_output, &in.x, &in.x_norm, &in.attn_output, &in.q, &in.k, &in.v})
    t->assign(sz(N * E), 0.f);
  in.x_mean.assign(sz(N), 0.f);
  in.x_var.assign(sz(N), 0.f);
  in.ln_weight.assign(sz(E), 0.f);
  in.qkv_weight.assign(sz(3 * E * E), 0.f);
  in.attn_weights.assign(sz(BH * s.seq_len * s.seq_len), 0.f);
  in.out_weight.assign(sz(E * E), 0.f);
  return in;
}

// The benchmark's distributions (spec §1.1): independent tensors, saved ones inconsistent.
Inputs random_inputs(const VisionMhaShape& s, Rng& rng) {
  Inputs in = zero_inputs(s);
  const double w = 1.0 / std::sqrt(double(s.embed_dim));
  for (Floats* t : {&in.grad_output, &in.x, &in.x_mean, &in.x_norm, &in.ln_weight, &in.q, &in.k,
                    &in.v, &in.attn_output})
    *t = normals(rng, std::int64_t(t->size()));
  for (float& x : in.x_var) x = static_cast<float>(std::abs(rng.normal()) + 0.1);
  in.qkv_weight = normals(rng, std::int64_t(in.qkv_weight.size()), w);
  in.out_weight = normals(rng, std::int64_t(in.out_weight.size()), w);
  const std::int64_t S = s.seq_len;
  for (std::size_t row = 0; row < in.attn_weights.size(); row += sz(S)) {  // softmax of normals
    double sum = 0.0;
    Vec e(sz(S));
    for (double& x : e) sum += (x = std::exp(rng.normal()));
    for (std::int64_t j = 0; j < S; ++j) in.attn_weights[row + sz(j)] = float(e[sz(j)] / sum);
  }
  return in;
}

struct Outputs {
  Floats grad_x, grad_qkv_weight, grad_qkv_bias, grad_out_weight, grad_out_bias, grad_ln_weight,
      grad_ln_bias;
};

VisionMhaArgs make_args(const Inputs& in, Outputs* out) {
  const std::int64_t B = in.s.batch, S = in.s.seq_len, E = in.s.embed_dim, H = in.s.num_heads,
                     D = in.s.head_dim;
  VisionMhaArgs a;
  a.grad_output = make_tensor<const float>(in.grad_output.data(), B, S, E);
  a.x = make_tensor<const float>(in.x.data(), B, S, E);
  a.x_mean = make_tensor<const float>(in.x_mean.data(), B, S, 1);
  a.x_var = make_tensor<const float>(in.x_var.data(), B, S, 1);
  a.x_norm = make_tensor<const float>(in.x_norm.data(), B, S, E);
  a.ln_weight = make_tensor<const float>(in.ln_weight.data(), E);
  a.qkv_weight = make_tensor<const float>(in.qkv_weight.data(), 3 * E, E);
  a.q = make_tensor<const float>(in.q.data(), B, H, S, D);
  a.k = make_tensor<const float>(in.k.data(), B, H, S, D);
  a.v = make_tensor<const float>(in.v.data(), B, H, S, D);
  a.attn_weights = make_tensor<const float>(in.attn_weights.data(), B, H, S, S);
  a.attn_output = make_tensor<const float>(in.attn_output.data(), B, S, E);
  a.out_weight = make_tensor<const float>(in.out_weight.data(), E, E);
  a.scale = in.scale;
  a.norm_eps = in.norm_eps;
  if (out) {
    a.grad_x = make_tensor(out->grad_x.data(), B, S, E);
    a.grad_qkv_weight = make_tensor(out->grad_qkv_weight.data(), 3 * E, E);
    a.grad_qkv_bias = make_tensor(out->grad_qkv_bias.data(), 3 * E);
    a.grad_out_weight = make_tensor(out->grad_out_weight.data(), E, E);
    a.grad_out_bias = make_tensor(out->grad_out_bias.data(), E);
    a.grad_ln_weight = make_tensor(out->grad_ln_weight.data(), E);
    a.grad_ln_bias = make_tensor(out->grad_ln_bias.data(), E);
  }
  return a;
}

// The float entry point, on outputs poisoned with NaN so an unwritten element fails every check.
Outputs run_oracle(const Inputs& in) {
  const std::int64_t N = in.s.tokens(), E = in.s.embed_dim;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Outputs o{Floats(sz(N * E), nan), Floats(sz(3 * E * E), nan), Floats(sz(3 * E), nan),
            Floats(sz(E * E), nan), Floats(sz(E), nan),         Floats(sz(E), nan),
            Floats(sz(E), nan)};
  serial::vision_mha_norm_backward(in.s, make_args(in, &o));
  return o;
}

VisionMhaGrads run_exact(const Inputs& in) {
  return serial::exact::vision_mha_norm_backward(in.s, make_args(in, nullptr));
}

const char* const kNames[7] = {"grad_x",          "grad_qkv_weight", "grad_qkv_bias",
                               "grad_out_weight", "grad_out_bias",   "grad_ln_weight",
                               "grad_ln_bias"};
std::vector<const Floats*> outputs_of(const Outputs& o) {
  return {&o.grad_x,        &o.grad_qkv_weight, &o.grad_qkv_bias, &o.grad_out_weight,
          &o.grad_out_bias, &o.grad_ln_weight,  &o.grad_ln_bias};
}
std::vector<const Vec*> outputs_of(const VisionMhaGrads& g) {
  return {&g.grad_x,        &g.grad_qkv_weight, &g.grad_qkv_bias, &g.grad_out_weight,
          &g.grad_out_bias, &g.grad_ln_weight,  &g.grad_ln_bias};
}

// ---- The forward being differentiated, in double

// Parameters the finite-difference test perturbs: LN input and affine, QKV and output projections
// (the biases are zero; their gradients are the op's bias gradients).
struct Params {
  Vec x, gamma, beta, wqkv, bqkv, wo, bo;
};

struct LayerNorm {
  Vec mean, var, xn;  // true (biased) statistics; xn = x̂⊙γ + β
};

LayerNorm layer_norm(const VisionMhaShape& s, const Params& p, double eps) {
  const std::int64_t N = s.tokens(), E = s.embed_dim;
  LayerNorm ln{Vec(sz(N)), Vec(sz(N)), Vec(sz(N * E))};
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = p.x.data() + n * E;
    double m = 0.0, var = 0.0;
    for (std::int64_t e = 0; e < E; ++e) m += x[e] / double(E);
    for (std::int64_t e = 0; e < E; ++e) var += (x[e] - m) * (x[e] - m) / double(E);
    ln.mean[sz(n)] = m;
    ln.var[sz(n)] = var;
    for (std::int64_t e = 0; e < E; ++e)
      ln.xn[sz(n * E + e)] = (x[e] - m) / std::sqrt(var + eps) * p.gamma[sz(e)] + p.beta[sz(e)];
  }
  return ln;
}

struct Attention {
  Vec q, k, v, P, A, out;  // q, k, v [B,H,S,D] (q unscaled); P [B,H,S,S]; A, out [N,E]
};

// From the LN output on: [q|k|v] = xn·Wqkvᵀ + b, P = softmax((q·scale)·kᵀ), A = P·v merged,
// out = A·Woᵀ + bo + x.
Attention attention(const VisionMhaShape& s, const Params& p, const Vec& xn, double scale) {
  const std::int64_t S = s.seq_len, E = s.embed_dim, H = s.num_heads, D = s.head_dim,
                     N = s.tokens();
  Attention at{Vec(sz(N * E)),     Vec(sz(N * E)), Vec(sz(N * E)),
               Vec(sz(N * H * S)), Vec(sz(N * E)), Vec(sz(N * E))};
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t r = 0; r < 3 * E; ++r) {
      double acc = p.bqkv[sz(r)];
      for (std::int64_t e = 0; e < E; ++e) acc += xn[sz(n * E + e)] * p.wqkv[sz(r * E + e)];
      const std::int64_t part = r / E, h = (r % E) / D, d = r % D, b = n / S, t = n % S;
      Vec& dst = part == 0 ? at.q : part == 1 ? at.k : at.v;
      dst[sz(((b * H + h) * S + t) * D + d)] = acc;
    }
  for (std::int64_t bh = 0; bh < s.batch * H; ++bh) {
    const std::int64_t b = bh / H, h = bh % H;
    for (std::int64_t i = 0; i < S; ++i) {
      double* P = at.P.data() + (bh * S + i) * S;
      double mx = -INFINITY, sum = 0.0;
      for (std::int64_t j = 0; j < S; ++j) {
        P[j] = 0.0;
        for (std::int64_t d = 0; d < D; ++d)
          P[j] += at.q[sz((bh * S + i) * D + d)] * scale * at.k[sz((bh * S + j) * D + d)];
        mx = std::max(mx, P[j]);
      }
      for (std::int64_t j = 0; j < S; ++j) sum += (P[j] = std::exp(P[j] - mx));
      for (std::int64_t j = 0; j < S; ++j) P[j] /= sum;
      for (std::int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < S; ++j) acc += P[j] * at.v[sz((bh * S + j) * D + d)];
        at.A[sz((b * S + i) * E + h * D + d)] = acc;
      }
    }
  }
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < E; ++o) {
      double acc = p.bo[sz(o)] + p.x[sz(n * E + o)];
      for (std::int64_t i = 0; i < E; ++i) acc += at.A[sz(n * E + i)] * p.wo[sz(o * E + i)];
      at.out[sz(n * E + o)] = acc;
    }
  return at;
}

// ---- Tests

// With saved tensors consistent with x and the weights, every output but grad_x is the true
// gradient of L = <dY, out>. grad_x is the true gradient plus the quirk: the reference's last LN
// term is xc·m/σ² where the true one is xc·m/σ³ (m = mean(g⊙xc), g = dXn⊙γ, means over E), so
//     grad_x_quirk − grad_x_true = xc · m · (1/σ³ − 1/σ²).
TEST(VisionMhaNormBackwardSerial, MatchesFiniteDifferencesOnConsistentSavedTensors) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(1));
  const VisionMhaShape s{2, 5, 8, 2, 4};
  const std::int64_t N = s.tokens(), E = s.embed_dim;
  const double scale = 0.5, eps = double(float(1e-5));
  const double w = 1.0 / std::sqrt(double(E));

  Params p;
  p.x.resize(sz(N * E));
  for (std::int64_t n = 0; n < N; ++n) {  // per-token spread in [0.3, 2.5]: σ far from 1
    const double mu = rng.normal(), spread = 0.3 + 2.2 * rng.uniform();
    for (std::int64_t e = 0; e < E; ++e) p.x[sz(n * E + e)] = float(mu + spread * rng.normal());
  }
  p.gamma = to_vec(normals(rng, E));
  p.beta = to_vec(normals(rng, E));
  p.wqkv = to_vec(normals(rng, 3 * E * E, w));
  p.bqkv.assign(sz(3 * E), 0.0);
  p.wo = to_vec(normals(rng, E * E, w));
  p.bo.assign(sz(E), 0.0);
  const Floats dY = normals(rng, N * E);
  const Vec dYd = to_vec(dY);

  const LayerNorm ln = layer_norm(s, p, eps);
  const Attention at = attention(s, p, ln.xn, scale);
  Inputs in = zero_inputs(s);
  in.scale = scale;
  in.norm_eps = 1e-5;
  in.grad_output = dY;
  auto to_floats = [](const Vec& v) { return Floats(v.begin(), v.end()); };
  in.x = to_floats(p.x);
  in.x_mean = to_floats(ln.mean);
  in.x_var = to_floats(ln.var);
  in.x_norm = to_floats(ln.xn);
  in.ln_weight = to_floats(p.gamma);
  in.qkv_weight = to_floats(p.wqkv);
  in.q = to_floats(at.q);
  in.k = to_floats(at.k);
  in.v = to_floats(at.v);
  in.attn_weights = to_floats(at.P);
  in.attn_output = to_floats(at.A);
  in.out_weight = to_floats(p.wo);
  const Outputs got = run_oracle(in);

  auto loss = [&] { return dot(dYd, attention(s, p, layer_norm(s, p, eps).xn, scale).out); };
  const Vec fd_wo = central_differences(p.wo, loss), fd_bo = central_differences(p.bo, loss);
  const Vec fd_wqkv = central_differences(p.wqkv, loss),
            fd_bqkv = central_differences(p.bqkv, loss);
  const Vec fd_gamma = central_differences(p.gamma, loss),
            fd_beta = central_differences(p.beta, loss);
  const Vec fd_x = central_differences(p.x, loss);

  // The quirk term needs dXn = ∂L/∂xn: differences of the forward from xn on (x fixed in the
  // residual).
  Vec xn = ln.xn;
  const Vec dxn = central_differences(xn, [&] { return dot(dYd, attention(s, p, xn, scale).out); });
  Vec want_x = fd_x;
  for (std::int64_t n = 0; n < N; ++n) {
    const double sigma = std::sqrt(ln.var[sz(n)] + eps);
    double m = 0.0;
    for (std::int64_t e = 0; e < E; ++e)
      m += dxn[sz(n * E + e)] * p.gamma[sz(e)] * (p.x[sz(n * E + e)] - ln.mean[sz(n)]) / double(E);
    for (std::int64_t e = 0; e < E; ++e)
      want_x[sz(n * E + e)] += (p.x[sz(n * E + e)] - ln.mean[sz(n)]) * m *
                               (1 / (sigma * sigma * sigma) - 1 / (sigma * sigma));
  }

  // FD truncation error ~1e-8; float rounding of the saved tensors ~1e-7 relative.
  const std::vector<const Floats*> outs = outputs_of(got);
  const Vec* want[7] = {&want_x, &fd_wqkv, &fd_bqkv, &fd_wo, &fd_bo, &fd_gamma, &fd_beta};
  for (int i = 0; i < 7; ++i)
    EXPECT_TRUE(all_close(*outs[sz(i)], *want[i], 1e-5, 1e-5 * max_abs(*want[i]))) << kNames[i];

  // The check has teeth: the quirk is far above the tolerance.
  Vec quirk(want_x.size());
  for (std::size_t i = 0; i < quirk.size(); ++i) quirk[i] = want_x[i] - fd_x[i];
  EXPECT_GT(max_abs(quirk), 1e-2 * max_abs(want_x));
}

// The LN quirk on one token, by hand. With P = [[1]], dS = 0, so dQ = dK = 0 and dV = dO = dY·Wo;
// with Wo = I and Wv = I, dXn = dY = [1, 2]. x = [3, 1], x_mean = 1 → xc = [2, 0]; x_var + eps
// = 3.75 + 0.25 → σ = 2; γ = [3, 1] → g = [3, 2], g/σ = [1.5, 1], mean 1.25; mean(g⊙xc) = 3, so the
// σ² term is xc·3/4 = [1.5, 0] and grad_x = dY + [1.5 − 1.25 − 1.5, 1 − 1.25] = [−0.25, 1.75] (σ³
// would give [0.5, 1.75]). x̂ = xc/σ = [1, 0] (not x_norm = [5, 7]): grad_ln_weight = [1, 0],
// grad_ln_bias = [1, 2].
TEST(VisionMhaNormBackwardSerial, LayerNormSigmaSquaredTermByHand) {
  ATTNBWD_SEED_TRACE();
  Inputs in = zero_inputs(VisionMhaShape{1, 1, 2, 1, 2});
  in.grad_output = {1, 2};
  in.x = {3, 1};
  in.x_mean = {1};
  in.x_var = {3.75f};
  in.norm_eps = 0.25;
  in.x_norm = {5, 7};
  in.ln_weight = {3, 1};
  in.qkv_weight = {9, 9, 9, 9, 9, 9, 9, 9, 1, 0, 0, 1};  // q, k rows irrelevant (dQ = dK = 0)
  in.attn_weights = {1};
  in.attn_output = {1, -1};
  in.out_weight = {1, 0, 0, 1};
  in.q = {4, 4};
  in.k = {4, 4};
  in.v = {4, 4};
  const Outputs o = run_oracle(in);
  EXPECT_TRUE(all_close(o.grad_x, {-0.25, 1.75}, 0, 1e-6));
  EXPECT_TRUE(all_close(o.grad_ln_weight, {1, 0}, 0, 1e-6));
  EXPECT_TRUE(all_close(o.grad_ln_bias, {1, 2}, 0, 1e-6));
  EXPECT_TRUE(all_close(o.grad_qkv_weight, {0, 0, 0, 0, 0, 0, 0, 0, 5, 7, 10, 14}, 0, 1e-6));
  EXPECT_TRUE(all_close(o.grad_qkv_bias, {0, 0, 0, 0, 1, 2}, 0, 1e-6));
  EXPECT_TRUE(all_close(o.grad_out_weight, {1, -1, 2, -2}, 0, 1e-6));
  EXPECT_TRUE(all_close(o.grad_out_bias, {1, 2}, 0, 1e-6));

  // norm_eps enters as float: σ² = x_var + float(0.1), not + 0.1 (a ~1e-9 relative difference).
  in.x_var = {3.9f};
  in.norm_eps = 0.1;
  auto grad_x0 = [](double var_eps) {  // the formula above for element 0, with σ² = var_eps
    const double sigma = std::sqrt(var_eps), mean_gs = (3 / sigma + 2 / sigma) / 2;
    return 1 + 3 / sigma - mean_gs - 2 * 3 / var_eps;
  };
  const double as_float = grad_x0(double(3.9f) + double(0.1f)),
               as_double = grad_x0(double(3.9f) + 0.1);
  const double got = run_exact(in).grad_x[0];
  EXPECT_NEAR(got, as_float, 1e-14);
  EXPECT_GT(std::abs(got - as_double), 1e-11);
}

// Scores backward on 2 tokens, 1 head, E = D = 1, by hand. dO = dY = [1, 3] (Wo = 1), v = [2, 4],
// P = [[.5, .5], [.25, .75]] → dP = dO·vᵀ = [[2, 4], [6, 12]], row sums of dP⊙P = [3, 10.5],
// dS = [[−.5, .5], [−1.125, 1.125]]. With K = [1, 5], Q = [7, −3] (unrelated to P on purpose):
//   dQ = (dS·K)·scale = [2, 4.5]·scale        (uses K)
//   dK = dSᵀ·(Q·scale) = [−.125, .125]·scale  (uses Q)
//   dV = Pᵀ·dO = [1.25, 2.75]
// x_norm = [1, 0] makes grad_qkv_weight token 0's [dQ, dK, dV]; grad_qkv_bias sums both tokens.
// The scale multiplies each of dQ and dK exactly once, as float(scale); the order (after the dQ
// GEMM, before the dK GEMM) only moves double rounding and is not observable here.
TEST(VisionMhaNormBackwardSerial, ScoreGradientsAndScaleByHand) {
  ATTNBWD_SEED_TRACE();
  Inputs in = zero_inputs(VisionMhaShape{1, 2, 1, 1, 1});
  in.grad_output = {1, 3};
  in.out_weight = {1};
  in.v = {2, 4};
  in.attn_weights = {0.5f, 0.5f, 0.25f, 0.75f};
  in.k = {1, 5};
  in.q = {7, -3};
  in.x_norm = {1, 0};
  in.x = {0, 0};
  in.x_var = {1, 1};
  in.qkv_weight = {1, 1, 1};
  for (const double scale : {0.125, 0.1}) {
    in.scale = scale;
    const double s = float(scale);
    const Vec token0 = {2 * s, -0.125 * s, 1.25}, both = {6.5 * s, 0, 4};
    const VisionMhaGrads g = run_exact(in);
    EXPECT_TRUE(all_close(g.grad_qkv_weight, token0, 1e-15, 1e-17)) << "scale " << scale;
    EXPECT_TRUE(all_close(g.grad_qkv_bias, both, 1e-15, 1e-15)) << "scale " << scale;
    const Outputs o = run_oracle(in);
    EXPECT_TRUE(all_close(o.grad_qkv_weight, token0, 1e-7, 0)) << "scale " << scale;
  }
  // float(0.1) differs from 0.1 by ~1.5e-9 relative: visible in the double variant.
  EXPECT_GT(std::abs(run_exact(in).grad_qkv_weight[0] - 2 * 0.1), 1e-11);
}

// Each input feeds exactly the outputs the reference feeds it (spec §4): e.g. x_norm only
// grad_qkv_weight; x, x_mean, x_var only the LN part; attn_output only grad_out_weight. A changed
// input must leave the other outputs bit-identical and change these.
TEST(VisionMhaNormBackwardSerial, EachInputFeedsExactlyItsOutputs) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(2));
  const Inputs base = random_inputs(VisionMhaShape{2, 5, 8, 2, 4}, rng);
  const VisionMhaGrads g0 = run_exact(base);
  enum : unsigned { X = 1, W = 2, BQ = 4, WO = 8, BO = 16, LW = 32, LB = 64, ALL = 127 };
  const unsigned attention_path = X | W | BQ | LW | LB;  // everything downstream of dQKV
  struct Case {
    const char* name;
    Floats Inputs::*input;
    unsigned feeds;
  };
  const Case cases[] = {{"grad_output", &Inputs::grad_output, ALL},
                        {"x", &Inputs::x, X | LW},
                        {"x_mean", &Inputs::x_mean, X | LW},
                        {"x_var", &Inputs::x_var, X | LW},
                        {"x_norm", &Inputs::x_norm, W},
                        {"ln_weight", &Inputs::ln_weight, X},
                        {"qkv_weight", &Inputs::qkv_weight, X | LW | LB},
                        {"q", &Inputs::q, attention_path},
                        {"k", &Inputs::k, attention_path},
                        {"v", &Inputs::v, attention_path},
                        {"attn_weights", &Inputs::attn_weights, attention_path},
                        {"attn_output", &Inputs::attn_output, WO},
                        {"out_weight", &Inputs::out_weight, attention_path}};
  for (const Case& c : cases) {
    Inputs in = base;
    for (float& x : in.*c.input) x = float(x * 1.5 + 0.25);  // keeps x_var positive
    const std::vector<const Vec*> before = outputs_of(g0);
    const VisionMhaGrads g = run_exact(in);
    const std::vector<const Vec*> after = outputs_of(g);
    for (int i = 0; i < 7; ++i) {
      const bool changed = *before[sz(i)] != *after[sz(i)];
      EXPECT_EQ(changed, bool(c.feeds & (1u << i))) << c.name << " -> " << kNames[i];
    }
  }
}

// The float entry point is the double variant rounded once.
TEST(VisionMhaNormBackwardSerial, FloatOutputsAreTheDoubleVariantRounded) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(3));
  const Inputs in = random_inputs(VisionMhaShape{2, 9, 16, 4, 4}, rng);
  const Outputs f = run_oracle(in);
  const VisionMhaGrads d = run_exact(in);
  for (int i = 0; i < 7; ++i)
    EXPECT_TRUE(all_close(*outputs_of(f)[sz(i)], *outputs_of(d)[sz(i)], 1e-6, 1e-30)) << kNames[i];
}

// Workload shape B = 1 (N = 577, E = 1024, 16 heads of 64): sampled elements of every output
// against direct double formulas written here; dQKV is recomputed for all tokens with plain loops.
TEST(VisionMhaNormBackwardSerial, WorkloadShapeMatchesDirectFormulas) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(4));
  const VisionMhaShape s{1, 577, 1024, 16, 64};
  const std::int64_t S = s.seq_len, N = s.tokens(), E = s.embed_dim, H = s.num_heads,
                     D = s.head_dim;
  const Inputs in = random_inputs(s, rng);
  const Outputs got = run_oracle(in);

  // dQKV [N, 3E] from the spec's formulas.
  Vec dA(sz(N * E));  // dY·Wo with the untiled helper (the oracle tiles)
  serial::gemm(N, E, E, in.grad_output.data(), E, false, in.out_weight.data(), E, false, dA.data(),
               E);
  const double scale = float(in.scale);
  Vec dqkv(sz(N * 3 * E), 0.0), dS(sz(S * S));
  for (std::int64_t h = 0; h < H; ++h) {
    const float* P = in.attn_weights.data() + h * S * S;
    auto at = [&](const Floats& t, std::int64_t i, std::int64_t d) {
      return double(t[sz((h * S + i) * D + d)]);
    };
    for (std::int64_t i = 0; i < S; ++i) {
      double r = 0.0;
      for (std::int64_t j = 0; j < S; ++j) {
        double dp = 0.0;
        for (std::int64_t d = 0; d < D; ++d) dp += dA[sz(i * E + h * D + d)] * at(in.v, j, d);
        dS[sz(i * S + j)] = dp;
        r += dp * P[i * S + j];
      }
      for (std::int64_t j = 0; j < S; ++j)
        dS[sz(i * S + j)] = P[i * S + j] * (dS[sz(i * S + j)] - r);
    }
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t j = 0; j < S; ++j)
        for (std::int64_t d = 0; d < D; ++d) {
          double* row_i = dqkv.data() + i * 3 * E + h * D;
          double* row_j = dqkv.data() + j * 3 * E + h * D;
          row_i[d] += dS[sz(i * S + j)] * at(in.k, j, d) * scale;
          row_j[E + d] += dS[sz(i * S + j)] * at(in.q, i, d) * scale;
          row_j[2 * E + d] += P[i * S + j] * dA[sz(i * E + h * D + d)];
        }
  }
  auto dxn = [&](std::int64_t n, std::int64_t e) {
    double acc = 0.0;
    for (std::int64_t r = 0; r < 3 * E; ++r)
      acc += dqkv[sz(n * 3 * E + r)] * in.qkv_weight[sz(r * E + e)];
    return acc;
  };
  auto sigma = [&](std::int64_t n) {
    return std::sqrt(double(in.x_var[sz(n)]) + double(float(in.norm_eps)));
  };
  auto xc = [&](std::int64_t n, std::int64_t e) {
    return double(in.x[sz(n * E + e)]) - in.x_mean[sz(n)];
  };
  auto pick = [&](std::int64_t n) { return std::int64_t(rng.uniform() * double(n)); };
  auto sum_over_tokens = [&](auto f) {
    double acc = 0.0;
    for (std::int64_t n = 0; n < N; ++n) acc += f(n);
    return acc;
  };
  auto check = [&](const char* name, const Floats& out, const std::vector<std::int64_t>& idx,
                   const Vec& want) {
    Floats g;
    for (std::int64_t i : idx) g.push_back(out[sz(i)]);
    EXPECT_TRUE(all_close(g, want, 1e-6, 1e-9 * max_abs(want))) << name;
  };

  std::vector<std::int64_t> idx;
  Vec want;
  for (int t = 0; t < 256; ++t) {  // grad_out_weight = dYᵀ·A
    const std::int64_t o = pick(E), i = pick(E);
    idx.push_back(o * E + i);
    want.push_back(sum_over_tokens([&](std::int64_t n) {
      return double(in.grad_output[sz(n * E + o)]) * in.attn_output[sz(n * E + i)];
    }));
  }
  check("grad_out_weight", got.grad_out_weight, idx, want);
  idx.clear(), want.clear();
  for (std::int64_t o = 0; o < E; ++o) {
    idx.push_back(o);
    want.push_back(
        sum_over_tokens([&](std::int64_t n) { return double(in.grad_output[sz(n * E + o)]); }));
  }
  check("grad_out_bias", got.grad_out_bias, idx, want);
  idx.clear(), want.clear();
  for (int t = 0; t < 256; ++t) {  // grad_qkv_weight = dQKVᵀ·x_norm
    const std::int64_t r = pick(3 * E), c = pick(E);
    idx.push_back(r * E + c);
    want.push_back(sum_over_tokens(
        [&](std::int64_t n) { return dqkv[sz(n * 3 * E + r)] * in.x_norm[sz(n * E + c)]; }));
  }
  check("grad_qkv_weight", got.grad_qkv_weight, idx, want);
  idx.clear(), want.clear();
  for (std::int64_t r = 0; r < 3 * E; ++r) {
    idx.push_back(r);
    want.push_back(sum_over_tokens([&](std::int64_t n) { return dqkv[sz(n * 3 * E + r)]; }));
  }
  check("grad_qkv_bias", got.grad_qkv_bias, idx, want);
  idx.clear(), want.clear();
  for (int t = 0; t < 8; ++t) {  // grad_x on whole rows (the LN means need the row)
    const std::int64_t n = pick(N);
    Vec row(sz(E));
    double mean_gs = 0.0, mean_gxc = 0.0;
    for (std::int64_t e = 0; e < E; ++e) {
      row[sz(e)] = dxn(n, e) * in.ln_weight[sz(e)];
      mean_gs += row[sz(e)] / sigma(n) / double(E);
      mean_gxc += row[sz(e)] * xc(n, e) / double(E);
    }
    for (std::int64_t e = 0; e < E; ++e) {
      idx.push_back(n * E + e);
      want.push_back(in.grad_output[sz(n * E + e)] + row[sz(e)] / sigma(n) - mean_gs -
                     xc(n, e) * mean_gxc / (sigma(n) * sigma(n)));
    }
  }
  check("grad_x", got.grad_x, idx, want);
  idx.clear(), want.clear();
  Vec want_bias;
  for (int t = 0; t < 32; ++t) {  // grad_ln_weight / grad_ln_bias on sampled features
    const std::int64_t e = pick(E);
    double w = 0.0, b = 0.0;
    for (std::int64_t n = 0; n < N; ++n) {
      const double g = dxn(n, e);
      w += g * xc(n, e) / sigma(n);
      b += g;
    }
    idx.push_back(e);
    want.push_back(w);
    want_bias.push_back(b);
  }
  check("grad_ln_weight", got.grad_ln_weight, idx, want);
  check("grad_ln_bias", got.grad_ln_bias, idx, want_bias);
}

}  // namespace
}  // namespace attnbwd
