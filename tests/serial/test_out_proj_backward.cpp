// The serial oracle for out_proj_backward (spec §2).
#include <gtest/gtest.h>

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
const bf16 kNaN = bf16::from_bits(0x7FC0);

// One problem's bf16 tensors; run() poisons the outputs with NaN, then calls the oracle.
struct Problem {
  OutProjShape s;
  std::vector<bf16> dY, X, W, grad_attn_output, grad_weight;

  explicit Problem(OutProjShape shape) : s(shape) {
    const int64_t TF = s.tokens() * s.hidden(), FF = s.hidden() * s.hidden();
    for (auto* v : {&dY, &X, &grad_attn_output}) v->assign(TF, bf16(0.0f));
    for (auto* v : {&W, &grad_weight}) v->assign(FF, bf16(0.0f));
  }
  // The benchmark's inputs (spec §1.1): N(0,1), and a weight N(0,1)/√in divided in bf16.
  void randomize(Rng& rng) {
    for (auto& v : dY) v = bf16(static_cast<float>(rng.normal()));
    for (auto& v : X) v = bf16(static_cast<float>(rng.normal()));
    const float root = std::sqrt(static_cast<float>(s.hidden()));
    for (auto& v : W) v = bf16(bf16(static_cast<float>(rng.normal())).to_float() / root);
  }
  void run() {
    std::fill(grad_attn_output.begin(), grad_attn_output.end(), kNaN);
    std::fill(grad_weight.begin(), grad_weight.end(), kNaN);
    const int64_t B = s.batch, S = s.seq_len, F = s.hidden();
    OutProjArgs a;
    a.grad_output = make_tensor<const bf16>(dY.data(), B, S, F);
    a.reshaped = make_tensor<const bf16>(X.data(), B, S, F);
    a.weight = make_tensor<const bf16>(W.data(), F, F);
    a.grad_attn_output = make_tensor(grad_attn_output.data(), B, s.num_heads, S, s.head_dim);
    a.grad_weight = make_tensor(grad_weight.data(), F, F);
    out_proj_backward(s, a);
  }
  // grad_attn_output[b,h,s,d] and grad_weight[n,m] by their defining sums, in double.
  double exact_grad_attn_output(int64_t b, int64_t h, int64_t t, int64_t d) const {
    const int64_t F = s.hidden(), row = b * s.seq_len + t, col = h * s.head_dim + d;
    double sum = 0.0;
    for (int64_t n = 0; n < F; ++n) sum += to_double(dY[row * F + n]) * to_double(W[n * F + col]);
    return sum;
  }
  double exact_grad_weight(int64_t n, int64_t m) const {
    const int64_t F = s.hidden();
    double sum = 0.0;
    for (int64_t t = 0; t < s.tokens(); ++t)
      sum += to_double(dY[t * F + n]) * to_double(X[t * F + m]);
    return sum;
  }
  int64_t gao_index(int64_t b, int64_t h, int64_t t, int64_t d) const {
    return ((b * s.num_heads + h) * s.seq_len + t) * s.head_dim + d;
  }
};

std::vector<double> as_double(const std::vector<bf16>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i].to_float();
  return out;
}

// With W = I, G = dY: grad_attn_output[b,h,s,d] must be dY[b·S+s, h·D+d]. dY holds distinct
// integers (exact in bf16), so any misplaced element shows.
TEST(OutProjBackward, HeadSplitLayout) {
  Problem p({2, 3, 2, 4});
  const int64_t F = p.s.hidden();
  for (int64_t e = 0; e < p.s.tokens() * F; ++e) p.dY[e] = bf16(static_cast<float>(e));
  for (int64_t f = 0; f < F; ++f) p.W[f * F + f] = bf16(1.0f);  // X and the rest of W stay 0
  p.run();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t t = 0; t < 3; ++t)
        for (int64_t d = 0; d < 4; ++d)
          EXPECT_EQ(p.grad_attn_output[p.gao_index(b, h, t, d)].to_float(),
                    static_cast<float>((b * 3 + t) * F + h * 4 + d))
              << b << "," << h << "," << t << "," << d;
  for (const bf16 v : p.grad_weight) EXPECT_EQ(v.to_float(), 0.0f);
}

// L = <dY, X·Wᵀ> is bilinear; its central differences in X and W are the exact gradients up to
// float64 roundoff, and the no-rounding oracle must reproduce them.
TEST(OutProjBackward, ExactOracleMatchesFiniteDifferences) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(10));
  const OutProjShape s{2, 3, 2, 4};
  const int64_t T = s.tokens(), F = s.hidden();
  std::vector<double> dY(T * F), X(T * F), W(F * F);
  for (auto* v : {&dY, &X, &W})
    for (auto& x : *v) x = rng.normal();
  auto loss = [&] {
    double L = 0.0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < F; ++o) {
        double y = 0.0;
        for (int64_t i = 0; i < F; ++i) y += X[t * F + i] * W[o * F + i];
        L += dY[t * F + o] * y;
      }
    return L;
  };
  auto central_difference = [&](double& x) {
    const double h = 1e-4, x0 = x;
    x = x0 + h;
    const double up = loss();
    x = x0 - h;
    const double down = loss();
    x = x0;
    return (up - down) / (2 * h);
  };
  const exact::OutProjGrads g = exact::out_proj_backward(s, {dY.data(), X.data(), W.data()});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = 0; f < F; ++f) {
      const int64_t b = t / s.seq_len, q = t % s.seq_len, h = f / s.head_dim, d = f % s.head_dim;
      const double an =
          g.grad_attn_output[((b * s.num_heads + h) * s.seq_len + q) * s.head_dim + d];
      EXPECT_NEAR(an, central_difference(X[t * F + f]), 1e-6 * (1 + std::fabs(an)))
          << t << "," << f;
    }
  for (int64_t e = 0; e < F * F; ++e)
    EXPECT_NEAR(g.grad_weight[e], central_difference(W[e]),
                1e-6 * (1 + std::fabs(g.grad_weight[e])))
        << e;
}

// The reference runs fp32 GEMMs and rounds once: every bf16 output must be the exact result
// rounded once, checked against the no-rounding oracle and against the defining sums.
TEST(OutProjBackward, Bf16OutputIsExactResultRoundedOnce) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(11));
  Problem p({2, 5, 4, 8});
  p.randomize(rng);
  p.run();
  const std::vector<double> dY = as_double(p.dY), X = as_double(p.X), W = as_double(p.W);
  const exact::OutProjGrads g = exact::out_proj_backward(p.s, {dY.data(), X.data(), W.data()});
  for (int64_t b = 0; b < p.s.batch; ++b)
    for (int64_t h = 0; h < p.s.num_heads; ++h)
      for (int64_t t = 0; t < p.s.seq_len; ++t)
        for (int64_t d = 0; d < p.s.head_dim; ++d) {
          const int64_t e = p.gao_index(b, h, t, d);
          const double direct = p.exact_grad_attn_output(b, h, t, d);
          EXPECT_NEAR(g.grad_attn_output[e], direct, 1e-12 * (1 + std::fabs(direct))) << e;
          EXPECT_EQ(p.grad_attn_output[e].bits, round_bf16(direct).bits) << e;
        }
  const int64_t F = p.s.hidden();
  for (int64_t n = 0; n < F; ++n)
    for (int64_t m = 0; m < F; ++m) {
      const double direct = p.exact_grad_weight(n, m);
      EXPECT_NEAR(g.grad_weight[n * F + m], direct, 1e-12 * (1 + std::fabs(direct)));
      EXPECT_EQ(p.grad_weight[n * F + m].bits, round_bf16(direct).bits) << n << "," << m;
    }
}

// Workload 8 (B=1, S=256, 32 heads of 64): every element written, 600 random elements of each
// output equal to its defining sum rounded once.
TEST(OutProjBackward, WorkloadShapeSpotCheck) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(12));
  Problem p({1, 256, 32, 64});
  p.randomize(rng);
  p.run();
  for (const auto* out : {&p.grad_attn_output, &p.grad_weight})
    for (std::size_t e = 0; e < out->size(); ++e)
      ASSERT_TRUE(std::isfinite((*out)[e].to_float())) << "element " << e << " not written";
  auto pick = [&](int64_t n) {
    return static_cast<int64_t>(rng.next() % static_cast<std::uint64_t>(n));
  };
  for (int i = 0; i < 600; ++i) {
    const int64_t h = pick(32), t = pick(256), d = pick(64);
    EXPECT_EQ(p.grad_attn_output[p.gao_index(0, h, t, d)].bits,
              round_bf16(p.exact_grad_attn_output(0, h, t, d)).bits)
        << h << "," << t << "," << d;
    const int64_t n = pick(2048), m = pick(2048);
    EXPECT_EQ(p.grad_weight[n * 2048 + m].bits, round_bf16(p.exact_grad_weight(n, m)).bits)
        << n << "," << m;
  }
}

}  // namespace
}  // namespace attnbwd::serial
