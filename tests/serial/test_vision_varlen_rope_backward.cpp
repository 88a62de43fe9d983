// Tests of the serial oracle for vision_varlen_rope_backward (spec §5, Qwen3-VL 017). The reference
// recomputes its whole forward, so every output is the true gradient of L = <dY, out> with
// out = AO·Wpᵀ + bp for any inputs; the oracle is validated on its own terms:
//   * finite differences of a float64 forward on a tiny varlen shape with an empty sequence;
//   * the quirks: proj_bias and attention_dropout unused, no attention across sequence boundaries,
//     sequences independent and additive, empty sequences contributing nothing;
//   * the float entry point against the double variant;
//   * a real workload shape (S=211, two sequences) against direct double formulas on sampled
//   elements.
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
using Cu = std::vector<std::int32_t>;
using serial::exact::VisionVarlenGrads;

// ---- Inputs, outputs, running the oracle

struct Inputs {
  VisionVarlenShape s;
  Floats grad_output, hidden_states, qkv_weight, qkv_bias, proj_weight, proj_bias, cos, sin;
  Cu cu_seqlens;
  double attention_dropout = 0.0, scaling = 0.08838834764831845;
};

// The reference's get_inputs distributions (spec §5), except that `weight_std` replaces the 0.02 of
// the weights (tiny shapes need larger weights for a non-trivial softmax).
Inputs random_inputs(const Cu& cu, std::int64_t C, std::int64_t H, std::int64_t D, Rng& rng,
                     double weight_std = 0.02) {
  Inputs in;
  const std::int64_t S = cu.back();
  in.s = VisionVarlenShape{S, std::int64_t(cu.size()) - 1, C, H, D};
  in.grad_output = normals(rng, S * C);
  in.hidden_states = normals(rng, S * C);
  in.qkv_weight = normals(rng, 3 * C * C, weight_std);
  in.qkv_bias = normals(rng, 3 * C, 0.01);
  in.proj_weight = normals(rng, C * C, weight_std);
  in.proj_bias = normals(rng, C, 0.01);
  in.cos = normals(rng, S * D);
  in.sin = normals(rng, S * D);
  in.cu_seqlens = cu;
  return in;
}

struct Outputs {
  Floats grad_hidden_states, grad_qkv_weight, grad_qkv_bias, grad_proj_weight, grad_proj_bias;
};

VisionVarlenArgs make_args(const Inputs& in, Outputs* out) {
  const std::int64_t S = in.s.total_seq_len, C = in.s.hidden_size, D = in.s.head_dim;
  VisionVarlenArgs a;
  a.grad_output = make_tensor<const float>(in.grad_output.data(), S, C);
  a.hidden_states = make_tensor<const float>(in.hidden_states.data(), S, C);
  a.qkv_weight = make_tensor<const float>(in.qkv_weight.data(), 3 * C, C);
  a.qkv_bias = make_tensor<const float>(in.qkv_bias.data(), 3 * C);
  a.proj_weight = make_tensor<const float>(in.proj_weight.data(), C, C);
  a.proj_bias = make_tensor<const float>(in.proj_bias.data(), C);
  a.cos = make_tensor<const float>(in.cos.data(), S, D);
  a.sin = make_tensor<const float>(in.sin.data(), S, D);
  a.cu_seqlens =
      make_tensor<const std::int32_t>(in.cu_seqlens.data(), std::int64_t(in.cu_seqlens.size()));
  a.cu_seqlens_host = in.cu_seqlens.data();
  a.attention_dropout = in.attention_dropout;
  a.scaling = in.scaling;
  if (out) {
    a.grad_hidden_states = make_tensor(out->grad_hidden_states.data(), S, C);
    a.grad_qkv_weight = make_tensor(out->grad_qkv_weight.data(), 3 * C, C);
    a.grad_qkv_bias = make_tensor(out->grad_qkv_bias.data(), 3 * C);
    a.grad_proj_weight = make_tensor(out->grad_proj_weight.data(), C, C);
    a.grad_proj_bias = make_tensor(out->grad_proj_bias.data(), C);
  }
  return a;
}

// The float entry point, on outputs poisoned with NaN so an unwritten element fails every check.
Outputs run_oracle(const Inputs& in) {
  const std::int64_t S = in.s.total_seq_len, C = in.s.hidden_size;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Outputs o{Floats(sz(S * C), nan), Floats(sz(3 * C * C), nan), Floats(sz(3 * C), nan),
            Floats(sz(C * C), nan), Floats(sz(C), nan)};
  serial::vision_varlen_rope_backward(in.s, make_args(in, &o));
  return o;
}

VisionVarlenGrads run_exact(const Inputs& in) {
  return serial::exact::vision_varlen_rope_backward(in.s, make_args(in, nullptr));
}

const char* const kNames[5] = {"grad_hidden_states", "grad_qkv_weight", "grad_qkv_bias",
                               "grad_proj_weight", "grad_proj_bias"};
std::vector<const Floats*> outputs_of(const Outputs& o) {
  return {&o.grad_hidden_states, &o.grad_qkv_weight, &o.grad_qkv_bias, &o.grad_proj_weight,
          &o.grad_proj_bias};
}
template <class Grads>  // VisionVarlenGrads, const or not
auto outputs_of(Grads& g) {
  return std::vector<decltype(&g.grad_hidden_states)>{&g.grad_hidden_states, &g.grad_qkv_weight,
                                                      &g.grad_qkv_bias, &g.grad_proj_weight,
                                                      &g.grad_proj_bias};
}

// ---- The forward being differentiated, and its backward, in double

struct Params {
  Vec x, wqkv, bqkv, wp, bp;
};

Params params_of(const Inputs& in) {
  auto d = [](const Floats& f) { return Vec(f.begin(), f.end()); };
  return {d(in.hidden_states), d(in.qkv_weight), d(in.qkv_bias), d(in.proj_weight),
          d(in.proj_bias)};
}

// Spec §5 steps 1-4: qkv holds rotated q', k' and v ([S,3C], columns [3][H][D]); P one softmax
// block per (sequence, head), in that order; ao [S,C]; out = ao·Wpᵀ + bp when asked.
struct Forward {
  Vec qkv;
  std::vector<Vec> P;
  Vec ao, out;
};

Forward forward(const Inputs& in, const Params& p, bool with_out) {
  const std::int64_t S = in.s.total_seq_len, C = in.s.hidden_size, H = in.s.num_heads,
                     D = in.s.head_dim, half = D / 2;
  const double scaling = float(in.scaling);
  Forward f{Vec(sz(S * 3 * C)), {}, Vec(sz(S * C), 0.0), {}};
  serial::gemm(S, 3 * C, C, p.x.data(), C, false, p.wqkv.data(), C, true, f.qkv.data(), 3 * C);
  Vec head(sz(D));
  for (std::int64_t t = 0; t < S; ++t) {
    double* row = f.qkv.data() + t * 3 * C;
    for (std::int64_t r = 0; r < 3 * C; ++r) row[r] += p.bqkv[sz(r)];
    for (std::int64_t h = 0; h < 2 * H; ++h) {  // q' = q⊙cos + rot(q)⊙sin, rot(q) = [−q_hi, q_lo]
      double* x = row + h * D;
      for (std::int64_t i = 0; i < D; ++i)
        head[sz(i)] = x[i] * in.cos[sz(t * D + i)] +
                      (i < half ? -x[i + half] : x[i - half]) * in.sin[sz(t * D + i)];
      std::copy(head.begin(), head.end(), x);
    }
  }
  for (std::size_t seq = 0; seq + 1 < in.cu_seqlens.size(); ++seq) {
    const std::int64_t t0 = in.cu_seqlens[seq], L = in.cu_seqlens[seq + 1] - t0;
    for (std::int64_t h = 0; h < H; ++h) {
      Vec P(sz(L * L));
      auto at = [&](std::int64_t part, std::int64_t t, std::int64_t d) {
        return f.qkv[sz((t0 + t) * 3 * C + part * C + h * D + d)];
      };
      for (std::int64_t i = 0; i < L; ++i) {
        double mx = -INFINITY, sum = 0.0;
        for (std::int64_t j = 0; j < L; ++j) {
          double score = 0.0;
          for (std::int64_t d = 0; d < D; ++d) score += at(0, i, d) * at(1, j, d);
          P[sz(i * L + j)] = score * scaling;
          mx = std::max(mx, P[sz(i * L + j)]);
        }
        for (std::int64_t j = 0; j < L; ++j)
          sum += (P[sz(i * L + j)] = std::exp(P[sz(i * L + j)] - mx));
        for (std::int64_t j = 0; j < L; ++j) P[sz(i * L + j)] /= sum;
        for (std::int64_t d = 0; d < D; ++d)
          for (std::int64_t j = 0; j < L; ++j)
            f.ao[sz((t0 + i) * C + h * D + d)] += P[sz(i * L + j)] * at(2, j, d);
      }
      f.P.push_back(std::move(P));
    }
  }
  if (with_out) {
    f.out.resize(sz(S * C));
    serial::gemm(S, C, C, f.ao.data(), C, false, p.wp.data(), C, true, f.out.data(), C);
    for (std::int64_t t = 0; t < S; ++t)
      for (std::int64_t c = 0; c < C; ++c) f.out[sz(t * C + c)] += p.bp[sz(c)];
  }
  return f;
}

// Spec §5 steps 5-8 with plain loops: dQKV [S,3C] = (dq, dk, dv) after the RoPE backward.
Vec reference_dqkv(const Inputs& in, const Forward& f) {
  const std::int64_t S = in.s.total_seq_len, C = in.s.hidden_size, H = in.s.num_heads,
                     D = in.s.head_dim, half = D / 2;
  const double scaling = float(in.scaling);
  Vec dAO(sz(S * C)), dqkv(sz(S * 3 * C), 0.0);
  serial::gemm(S, C, C, in.grad_output.data(), C, false, in.proj_weight.data(), C, false,
               dAO.data(), C);
  std::size_t block = 0;
  for (std::size_t seq = 0; seq + 1 < in.cu_seqlens.size(); ++seq) {
    const std::int64_t t0 = in.cu_seqlens[seq], L = in.cu_seqlens[seq + 1] - t0;
    for (std::int64_t h = 0; h < H; ++h) {
      const Vec& P = f.P[block++];
      auto fwd = [&](std::int64_t part, std::int64_t t, std::int64_t d) {
        return f.qkv[sz((t0 + t) * 3 * C + part * C + h * D + d)];
      };
      auto grad = [&](std::int64_t part, std::int64_t t, std::int64_t d) -> double& {
        return dqkv[sz((t0 + t) * 3 * C + part * C + h * D + d)];
      };
      auto dO = [&](std::int64_t t, std::int64_t d) { return dAO[sz((t0 + t) * C + h * D + d)]; };
      Vec dS(sz(L * L));
      for (std::int64_t i = 0; i < L; ++i) {
        double r = 0.0;
        for (std::int64_t j = 0; j < L; ++j) {
          double dp = 0.0;
          for (std::int64_t d = 0; d < D; ++d) dp += dO(i, d) * fwd(2, j, d);
          dS[sz(i * L + j)] = dp;
          r += dp * P[sz(i * L + j)];
        }
        for (std::int64_t j = 0; j < L; ++j)
          dS[sz(i * L + j)] = P[sz(i * L + j)] * (dS[sz(i * L + j)] - r) * scaling;
      }
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t j = 0; j < L; ++j)
          for (std::int64_t d = 0; d < D; ++d) {
            grad(0, i, d) += dS[sz(i * L + j)] * fwd(1, j, d);  // dQ' = dS·k'
            grad(1, j, d) += dS[sz(i * L + j)] * fwd(0, i, d);  // dK' = dSᵀ·q'
            grad(2, j, d) += P[sz(i * L + j)] * dO(i, d);       // dV = Pᵀ·dO
          }
    }
  }
  Vec head(sz(D));
  for (std::int64_t t = 0; t < S; ++t)
    for (std::int64_t h = 0; h < 2 * H; ++h) {  // dq = g⊙cos + rotᵀ(g⊙sin), rotᵀ(y) = [y_hi, −y_lo]
      double* g = dqkv.data() + t * 3 * C + h * D;
      for (std::int64_t j = 0; j < D; ++j) {
        const double y = j < half ? g[j + half] * in.sin[sz(t * D + j + half)]
                                  : -g[j - half] * in.sin[sz(t * D + j - half)];
        head[sz(j)] = g[j] * in.cos[sz(t * D + j)] + y;
      }
      std::copy(head.begin(), head.end(), g);
    }
  return dqkv;
}

// Rows [r0, r1) of an [S, C] output.
Vec rows(const Vec& m, std::int64_t C, std::int64_t r0, std::int64_t r1) {
  return Vec(m.begin() + r0 * C, m.begin() + r1 * C);
}

// ---- Tests

const Cu kTinyCu = {0, 3, 3, 7};  // three sequences, the middle one empty
constexpr std::int64_t kC = 8, kH = 2, kD = 4;

TEST(VisionVarlenRopeBackwardSerial, MatchesFiniteDifferences) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(11));
  Inputs in = random_inputs(kTinyCu, kC, kH, kD, rng, 0.5);
  in.scaling = 0.5;
  const Outputs got = run_oracle(in);

  Params p = params_of(in);
  auto loss = [&] { return dot(forward(in, p, true).out, in.grad_output); };
  const Vec want[5] = {central_differences(p.x, loss), central_differences(p.wqkv, loss),
                       central_differences(p.bqkv, loss), central_differences(p.wp, loss),
                       central_differences(p.bp, loss)};
  const std::vector<const Floats*> outs = outputs_of(got);
  for (int i = 0; i < 5; ++i)  // FD truncation ~1e-8, float rounding of the outputs ~6e-8 relative
    EXPECT_TRUE(all_close(*outs[sz(i)], want[i], 1e-5, 1e-5 * max_abs(want[i]))) << kNames[i];
}

// The reference accepts both and uses neither: a NaN proj_bias and a non-zero dropout change
// nothing.
TEST(VisionVarlenRopeBackwardSerial, ProjBiasAndDropoutAreUnused) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(12));
  Inputs in = random_inputs(kTinyCu, kC, kH, kD, rng, 0.5);
  const VisionVarlenGrads base = run_exact(in);
  in.proj_bias.assign(in.proj_bias.size(), std::numeric_limits<float>::quiet_NaN());
  in.attention_dropout = 0.9;
  const VisionVarlenGrads g = run_exact(in);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(*outputs_of(base)[sz(i)], *outputs_of(g)[sz(i)]) << kNames[i];
}

// Changing every input row of one token (hidden state, dY, cos, sin) changes the grad_hidden_states
// rows of its own sequence and leaves the other sequences' rows bit-identical.
TEST(VisionVarlenRopeBackwardSerial, TokensNeverAttendAcrossSequences) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(13));
  const Inputs base = random_inputs(kTinyCu, kC, kH, kD, rng, 0.5);
  const Vec g0 = run_exact(base).grad_hidden_states;
  struct Case {
    std::int64_t token, own0, own1, other0, other1;  // sequence 0 is [0,3), sequence 2 is [3,7)
  };
  for (const Case c : {Case{5, 3, 7, 0, 3}, Case{1, 0, 3, 3, 7}}) {
    Inputs in = base;
    for (Floats* t : {&in.hidden_states, &in.grad_output})
      for (std::int64_t i = 0; i < kC; ++i) (*t)[sz(c.token * kC + i)] += 1.0f;
    for (Floats* t : {&in.cos, &in.sin})
      for (std::int64_t i = 0; i < kD; ++i) (*t)[sz(c.token * kD + i)] += 1.0f;
    const Vec g = run_exact(in).grad_hidden_states;
    EXPECT_EQ(rows(g, kC, c.other0, c.other1), rows(g0, kC, c.other0, c.other1))
        << "token " << c.token;
    for (std::int64_t t = c.own0; t < c.own1; ++t)
      EXPECT_NE(rows(g, kC, t, t + 1), rows(g0, kC, t, t + 1))
          << "token " << c.token << " row " << t;
  }
}

// Empty sequences anywhere in cu_seqlens contribute nothing; each sequence's rows equal a run on
// that sequence alone, and the weight and bias gradients are the sums of the per-sequence ones.
TEST(VisionVarlenRopeBackwardSerial, SequencesAreIndependentAndEmptyOnesContributeNothing) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(14));
  Inputs in = random_inputs({0, 0, 3, 3, 7, 7}, kC, kH, kD, rng, 0.5);
  const Outputs padded = run_oracle(in);
  const VisionVarlenGrads full = run_exact(in);
  in.cu_seqlens = {0, 3, 7};
  in.s.num_sequences = 2;
  const VisionVarlenGrads plain = run_exact(in);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(*outputs_of(full)[sz(i)], *outputs_of(plain)[sz(i)]) << kNames[i];
    EXPECT_TRUE(all_close(*outputs_of(padded)[sz(i)], *outputs_of(full)[sz(i)], 1e-6, 1e-30))
        << kNames[i];
  }

  VisionVarlenGrads sum;  // of the weight and bias gradients (outputs 1..4)
  for (int i = 1; i < 5; ++i) outputs_of(sum)[sz(i)]->assign(outputs_of(full)[sz(i)]->size(), 0.0);
  const std::int64_t sequences[2][2] = {{0, 3}, {3, 7}};
  for (const auto& [t0, t1] : sequences) {
    Inputs one = in;
    one.cu_seqlens = {0, std::int32_t(t1 - t0)};
    one.s.total_seq_len = t1 - t0;
    one.s.num_sequences = 1;
    one.hidden_states.assign(in.hidden_states.begin() + t0 * kC,
                             in.hidden_states.begin() + t1 * kC);
    one.grad_output.assign(in.grad_output.begin() + t0 * kC, in.grad_output.begin() + t1 * kC);
    one.cos.assign(in.cos.begin() + t0 * kD, in.cos.begin() + t1 * kD);
    one.sin.assign(in.sin.begin() + t0 * kD, in.sin.begin() + t1 * kD);
    const VisionVarlenGrads g = run_exact(one);
    EXPECT_TRUE(
        all_close(g.grad_hidden_states, rows(full.grad_hidden_states, kC, t0, t1), 1e-12, 0));
    for (int i = 1; i < 5; ++i) {
      Vec& acc = *outputs_of(sum)[sz(i)];
      for (std::size_t e = 0; e < acc.size(); ++e) acc[e] += (*outputs_of(g)[sz(i)])[e];
    }
  }
  for (int i = 1; i < 5; ++i)
    EXPECT_TRUE(all_close(*outputs_of(sum)[sz(i)], *outputs_of(full)[sz(i)], 1e-12,
                          1e-12 * max_abs(*outputs_of(full)[sz(i)])))
        << kNames[i];
}

// scaling enters as float (the reference's Python float meets fp32 tensors): 0.1 and float(0.1)
// give bit-identical results, the next float up does not.
TEST(VisionVarlenRopeBackwardSerial, ScalingEntersAsFloat) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(17));
  Inputs in = random_inputs(kTinyCu, kC, kH, kD, rng, 0.5);
  in.scaling = 0.1;
  const VisionVarlenGrads g = run_exact(in);
  in.scaling = double(0.1f);
  const VisionVarlenGrads same = run_exact(in);
  in.scaling = double(std::nextafter(0.1f, 1.f));
  const VisionVarlenGrads next = run_exact(in);
  for (int i = 0; i < 4; ++i) {  // grad_proj_bias does not depend on scaling
    EXPECT_EQ(*outputs_of(g)[sz(i)], *outputs_of(same)[sz(i)]) << kNames[i];
    EXPECT_NE(*outputs_of(g)[sz(i)], *outputs_of(next)[sz(i)]) << kNames[i];
  }
}

// The float entry point is the double variant rounded once.
TEST(VisionVarlenRopeBackwardSerial, FloatOutputsAreTheDoubleVariantRounded) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(15));
  const Inputs in = random_inputs({0, 5, 6, 6, 13}, 32, 4, 8, rng, 0.2);
  const Outputs f = run_oracle(in);
  const VisionVarlenGrads d = run_exact(in);
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(all_close(*outputs_of(f)[sz(i)], *outputs_of(d)[sz(i)], 1e-6, 1e-30)) << kNames[i];
}

// Workload #1 (S = 211 as 106 + 105 tokens, C = 3584, 28 heads of 128): sampled elements of every
// output against direct double formulas; dQKV recomputed here for all tokens with plain loops.
TEST(VisionVarlenRopeBackwardSerial, WorkloadShapeMatchesDirectFormulas) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(16));
  const Inputs in = random_inputs({0, 106, 211}, 3584, 28, 128, rng);
  const std::int64_t S = in.s.total_seq_len, C = in.s.hidden_size;
  const Outputs got = run_oracle(in);

  const Forward f = forward(in, params_of(in), false);
  const Vec dqkv = reference_dqkv(in, f);
  auto pick = [&](std::int64_t n) { return std::int64_t(rng.uniform() * double(n)); };
  auto check = [&](const char* name, const Floats& out, const std::vector<std::int64_t>& idx,
                   const Vec& want) {
    Floats g;
    for (std::int64_t i : idx) g.push_back(out[sz(i)]);
    EXPECT_TRUE(all_close(g, want, 1e-6, 1e-9 * max_abs(want))) << name;
  };
  std::vector<std::int64_t> idx;
  Vec want;
  for (int n = 0; n < 256; ++n) {  // grad_hidden_states = dQKV·Wqkv
    const std::int64_t t = pick(S), c = pick(C);
    double acc = 0.0;
    for (std::int64_t r = 0; r < 3 * C; ++r)
      acc += dqkv[sz(t * 3 * C + r)] * in.qkv_weight[sz(r * C + c)];
    idx.push_back(t * C + c), want.push_back(acc);
  }
  check("grad_hidden_states", got.grad_hidden_states, idx, want);
  idx.clear(), want.clear();
  for (int n = 0; n < 256; ++n) {  // grad_qkv_weight = dQKVᵀ·X
    const std::int64_t r = pick(3 * C), c = pick(C);
    double acc = 0.0;
    for (std::int64_t t = 0; t < S; ++t)
      acc += dqkv[sz(t * 3 * C + r)] * in.hidden_states[sz(t * C + c)];
    idx.push_back(r * C + c), want.push_back(acc);
  }
  check("grad_qkv_weight", got.grad_qkv_weight, idx, want);
  idx.clear(), want.clear();
  for (std::int64_t r = 0; r < 3 * C; ++r) {
    double acc = 0.0;
    for (std::int64_t t = 0; t < S; ++t) acc += dqkv[sz(t * 3 * C + r)];
    idx.push_back(r), want.push_back(acc);
  }
  check("grad_qkv_bias", got.grad_qkv_bias, idx, want);
  idx.clear(), want.clear();
  for (int n = 0; n < 256; ++n) {  // grad_proj_weight = dYᵀ·AO
    const std::int64_t o = pick(C), i = pick(C);
    double acc = 0.0;
    for (std::int64_t t = 0; t < S; ++t)
      acc += double(in.grad_output[sz(t * C + o)]) * f.ao[sz(t * C + i)];
    idx.push_back(o * C + i), want.push_back(acc);
  }
  check("grad_proj_weight", got.grad_proj_weight, idx, want);
  idx.clear(), want.clear();
  for (std::int64_t o = 0; o < C; ++o) {
    double acc = 0.0;
    for (std::int64_t t = 0; t < S; ++t) acc += in.grad_output[sz(t * C + o)];
    idx.push_back(o), want.push_back(acc);
  }
  check("grad_proj_bias", got.grad_proj_bias, idx, want);
}

}  // namespace
}  // namespace attnbwd
