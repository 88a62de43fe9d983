#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "tests/common/scoped_env.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"
#include "tools/safetensors.hpp"

using attnbwd::Error;
using namespace attnbwd::tools;

namespace {

std::vector<double> values(const HostTensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype) {
      case DType::BF16: v[i] = t.data<attnbwd::bf16>()[i].to_float(); break;
      case DType::F32: v[i] = t.data<float>()[i]; break;
      case DType::F64: v[i] = t.data<double>()[i]; break;
      case DType::I32: v[i] = t.data<std::int32_t>()[i]; break;
    }
  }
  return v;
}

struct Moments {
  double mean = 0, std = 0, min = INFINITY, max = -INFINITY;
};

Moments moments(const HostTensor& t) {
  const auto v = values(t);
  Moments m;
  double s = 0, s2 = 0;
  for (double x : v) s += x, s2 += x * x, m.min = std::min(m.min, x), m.max = std::max(m.max, x);
  m.mean = s / v.size();
  m.std = std::sqrt(s2 / v.size() - m.mean * m.mean);
  return m;
}

// Mean and std of N(0, std^2) samples, each within 6 standard errors (seeds are fresh every run,
// so the bounds must not flake), and the std within 2 % besides.
void expect_normal(const HostTensor& t, double std, const std::string& name) {
  SCOPED_TRACE(name);
  const Moments m = moments(t);
  const double n = static_cast<double>(t.numel());
  EXPECT_NEAR(m.mean, 0.0, 6 * std / std::sqrt(n));
  EXPECT_NEAR(m.std, std, std::max(6 / std::sqrt(2 * n), 0.02) * std);
}

// The smallest workload of an op (fewest elements over its variable axes).
Workload smallest_workload(const std::string& op) {
  const auto ws = load_workloads(op);
  auto size = [](const Workload& w) {
    std::int64_t n = 1;
    for (const auto& kv : w.axes) n *= kv.second;
    return n;
  };
  const Workload* best = &ws[0];
  for (const Workload& w : ws)
    if (size(w) < size(*best)) best = &w;
  return *best;
}

Axes smallest_axes(const std::string& op) { return smallest_workload(op).axes; }

// The inputs of each op's smallest workload, generated once for all tests of this file.
const TensorSet& inputs_of(const std::string& op) {
  static std::map<std::string, TensorSet> cache;
  auto it = cache.find(op);
  if (it != cache.end()) return it->second;
  const Workload w = smallest_workload(op);
  return cache[op] = generate_inputs(op, w.axes, attnbwd::test::fresh_seed(), w.scalars);
}

// Every input is present, in definition order, with the definition's dtype and shape.
void expect_matches_definition(const std::string& op, const TensorSet& set, const Axes& given) {
  const Definition def = load_definition(op);
  const Axes axes = def.resolve_axes(given);
  ASSERT_EQ(set.size(), def.inputs.size());
  auto it = set.begin();
  for (const TensorDef& in : def.inputs) {
    SCOPED_TRACE(in.name);
    EXPECT_EQ(it->first, in.name);
    if (in.is_scalar) {
      EXPECT_EQ(it->second.dtype, DType::F64);
      EXPECT_TRUE(it->second.shape.empty());
    } else {
      const DType want = in.dtype == "bfloat16" ? DType::BF16 : in.dtype == "int32" ? DType::I32 : DType::F32;
      EXPECT_EQ(it->second.dtype, want);
      EXPECT_EQ(it->second.shape, def.shape_of(in, axes));
    }
    ++it;
  }
}

void expect_softmax_rows(const HostTensor& t, double tol) {
  const auto v = values(t);
  const std::int64_t n = t.shape.back();
  double worst = 0;
  for (std::size_t r = 0; r < v.size() / n; ++r) {
    double sum = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_GT(v[r * n + i], 0.0);
      sum += v[r * n + i];
    }
    worst = std::max(worst, std::fabs(sum - 1.0));
  }
  EXPECT_LT(worst, tol);
}

}  // namespace

TEST(Gen, OutProjBackward) {
  ATTNBWD_SEED_TRACE();
  const std::string op = "out_proj_backward";
  const TensorSet& s = inputs_of(op);
  expect_matches_definition(op, s, smallest_axes(op));
  EXPECT_EQ(s.find("weight")->shape, (std::vector<std::int64_t>{2048, 2048}));
  expect_normal(*s.find("grad_output"), 1.0, "grad_output");
  expect_normal(*s.find("reshaped"), 1.0, "reshaped");
  expect_normal(*s.find("weight"), 1.0 / std::sqrt(2048.0), "weight");
}

TEST(Gen, GqaRopeBackward) {
  ATTNBWD_SEED_TRACE();
  const std::string op = "gqa_rope_backward";
  const TensorSet& s = inputs_of(op);
  expect_matches_definition(op, s, smallest_axes(op));
  EXPECT_EQ(s.find("o_weight")->shape, (std::vector<std::int64_t>{5120, 4096}));
  for (const char* n :
       {"grad_output", "hidden_states", "query_states", "key_states", "value_states", "attn_output"})
    expect_normal(*s.find(n), 1.0, n);
  expect_normal(*s.find("q_weight"), 1.0 / std::sqrt(5120.0), "q_weight");
  expect_normal(*s.find("k_weight"), 1.0 / std::sqrt(5120.0), "k_weight");
  expect_normal(*s.find("v_weight"), 1.0 / std::sqrt(5120.0), "v_weight");
  expect_normal(*s.find("o_weight"), 1.0 / std::sqrt(4096.0), "o_weight");
  expect_softmax_rows(*s.find("attn_weights"), 1e-2);  // bf16 rounding of each probability

  // cos/sin of clamped normals: bounded, E[cos Z] = e^-1/2, and from separate draws.
  const auto c = values(*s.find("cos")), sn = values(*s.find("sin"));
  double mean_c = 0, mean_s = 0;
  std::size_t far_from_circle = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    ASSERT_LE(std::fabs(c[i]), 1.0);
    ASSERT_LE(std::fabs(sn[i]), 1.0);
    mean_c += c[i] / c.size();
    mean_s += sn[i] / c.size();
    far_from_circle += std::fabs(c[i] * c[i] + sn[i] * sn[i] - 1.0) > 0.1;
  }
  const double se = 1 / std::sqrt(static_cast<double>(c.size()));  // both have std < 1
  EXPECT_NEAR(mean_c, std::exp(-0.5), 6 * se + 0.003);             // + the clamp's bias
  EXPECT_NEAR(mean_s, 0.0, 6 * se);
  EXPECT_GT(far_from_circle, c.size() / 4);
  EXPECT_EQ(scalar(s, "scaling"), 0.08838834764831845);
}

TEST(Gen, VisionMhaNormBackward) {
  ATTNBWD_SEED_TRACE();
  const std::string op = "vision_mha_norm_backward";
  const TensorSet& s = inputs_of(op);
  expect_matches_definition(op, s, smallest_axes(op));
  EXPECT_EQ(s.find("x_mean")->shape, (std::vector<std::int64_t>{1, 577, 1}));
  for (const char* n : {"grad_output", "x", "x_norm", "q", "k", "v", "attn_output"})
    expect_normal(*s.find(n), 1.0, n);
  expect_normal(*s.find("qkv_weight"), 1.0 / 32, "qkv_weight");
  expect_normal(*s.find("out_weight"), 1.0 / 32, "out_weight");
  expect_softmax_rows(*s.find("attn_weights"), 1e-4);

  const Moments var = moments(*s.find("x_var"));  // |N| + 0.1
  EXPECT_GE(var.min, 0.1);
  const double n_var = static_cast<double>(s.find("x_var")->numel());
  EXPECT_NEAR(var.mean, 0.1 + std::sqrt(2.0 / 3.141592653589793),
              6 * 0.61 / std::sqrt(n_var));         // std |N| = 0.60
  const Moments mean = moments(*s.find("x_mean"));  // plain N(0,1): not the "_var" rule
  EXPECT_LT(mean.min, 0.0);

  // ln_weight is plain N(0,1), not ones (spec §1.1).
  const Moments ln = moments(*s.find("ln_weight"));
  EXPECT_NEAR(ln.std, 1.0, 0.15);
  EXPECT_LT(ln.min, 0.0);
  EXPECT_EQ(scalar(s, "scale"), 0.125);
  EXPECT_EQ(scalar(s, "norm_eps"), 1e-5);
}

TEST(Gen, VisionVarlenRopeBackward) {
  ATTNBWD_SEED_TRACE();
  const std::string op = "vision_varlen_rope_backward";
  const TensorSet& s = inputs_of(op);
  const Axes axes = smallest_axes(op);
  expect_matches_definition(op, s, axes);
  EXPECT_EQ(s.find("qkv_weight")->shape, (std::vector<std::int64_t>{10752, 3584}));
  for (const char* n : {"grad_output", "hidden_states", "cos", "sin"}) expect_normal(*s.find(n), 1.0, n);
  EXPECT_GT(moments(*s.find("cos")).max, 1.0);  // not real cosines
  expect_normal(*s.find("qkv_weight"), 0.02, "qkv_weight");
  expect_normal(*s.find("proj_weight"), 0.02, "proj_weight");
  expect_normal(*s.find("qkv_bias"), 0.01, "qkv_bias");
  expect_normal(*s.find("proj_bias"), 0.01, "proj_bias");
  const auto cu = values(expect(s, "cu_seqlens", DType::I32, {axes.at("num_sequences") + 1}));
  EXPECT_EQ(cu.front(), 0);
  EXPECT_EQ(cu.back(), axes.at("total_seq_len"));
  EXPECT_EQ(scalar(s, "attention_dropout"), 0.0);
  EXPECT_EQ(scalar(s, "scaling"), 0.08838834764831845);
}

TEST(Gen, EvenCuSeqlens) {
  EXPECT_EQ(even_cu_seqlens(773, 5), (std::vector<std::int32_t>{0, 155, 310, 465, 619, 773}));
  EXPECT_EQ(even_cu_seqlens(613, 4), (std::vector<std::int32_t>{0, 154, 307, 460, 613}));
  EXPECT_EQ(even_cu_seqlens(211, 2), (std::vector<std::int32_t>{0, 106, 211}));
  EXPECT_EQ(even_cu_seqlens(131, 1), (std::vector<std::int32_t>{0, 131}));
  EXPECT_EQ(even_cu_seqlens(1176, 6), (std::vector<std::int32_t>{0, 196, 392, 588, 784, 980, 1176}));
  EXPECT_THROW(even_cu_seqlens(10, 0), Error);
}

TEST(Gen, DefaultScalarsMatchEveryWorkload) {
  for (const std::string& op : op_names()) {
    const auto defaults = default_scalars(op);
    for (const Workload& w : load_workloads(op)) EXPECT_EQ(w.scalars, defaults) << op << " #" << w.index;
  }
}

// Small shapes (constants overridden) keep these fast; the rules are the same.
TEST(Gen, SameSeedSameBytesDifferentSeedDifferentBytes) {
  ATTNBWD_SEED_TRACE();
  const std::map<std::string, Axes> small = {
      {"out_proj_backward", {{"batch_size", 2}, {"seq_len", 5}, {"hidden_size", 64}}},
      {"gqa_rope_backward", {{"batch_size", 1}, {"seq_len", 7}, {"hidden_size", 32}, {"head_dim", 8}}},
      {"vision_mha_norm_backward", {{"batch_size", 2}, {"seq_len", 9}, {"embed_dim", 48}}},
      {"vision_varlen_rope_backward", {{"total_seq_len", 13}, {"num_sequences", 3}, {"hidden_size", 56}}},
  };
  const std::uint64_t seed = attnbwd::test::fresh_seed(1);
  for (const auto& [op, axes] : small) {
    SCOPED_TRACE(op);
    const TensorSet a = generate_inputs(op, axes, seed);
    const TensorSet b = generate_inputs(op, axes, seed);
    const TensorSet c = generate_inputs(op, axes, seed + 1);
    expect_matches_definition(op, a, axes);
    bool any_differs = false;
    auto ib = b.begin(), ic = c.begin();
    for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib, ++ic) {
      EXPECT_EQ(ia->second.bytes, ib->second.bytes) << ia->first;
      if (ia->second.dtype != DType::I32 && !ia->second.shape.empty())
        any_differs |= ia->second.bytes != ic->second.bytes;
    }
    EXPECT_TRUE(any_differs);
  }
}

// Inputs are drawn in chunks of rows on several threads; each chunk has its own stream, so the thread
// count (ATTNBWD_GEN_THREADS) never changes the bytes. P here is 2·16·300² floats: 44 chunks.
TEST(Gen, BytesDoNotDependOnTheThreadCount) {
  ATTNBWD_SEED_TRACE();
  const Axes axes{{"batch_size", 2}, {"seq_len", 300}};
  const std::uint64_t seed = attnbwd::test::fresh_seed(2);
  TensorSet one, three;
  {
    const attnbwd::test::ScopedEnv env("ATTNBWD_GEN_THREADS", "1");
    one = generate_inputs("vision_mha_norm_backward", axes, seed);
  }
  {
    const attnbwd::test::ScopedEnv env("ATTNBWD_GEN_THREADS", "3");
    three = generate_inputs("vision_mha_norm_backward", axes, seed);
  }
  ASSERT_EQ(one.size(), three.size());
  auto it = three.begin();
  for (const auto& [name, t] : one) EXPECT_EQ(t.bytes, (it++)->second.bytes) << name;
  // Rows of the softmax input stay rows: every row of P sums to 1.
  const HostTensor& p = *one.find("attn_weights");
  const std::int64_t len = p.shape.back();
  for (std::int64_t r = 0; r < p.numel() / len; r += 97) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < len; ++i) sum += p.data<float>()[r * len + i];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
}

TEST(Gen, ThreadCountErrorNamesTheVariable) {
  const attnbwd::test::ScopedEnv env("ATTNBWD_GEN_THREADS", "zero");
  try {
    generate_inputs("out_proj_backward", {{"batch_size", 1}, {"seq_len", 2}}, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "ATTNBWD_GEN_THREADS");
  }
}

TEST(Gen, BuiltInDefinitionGivesTheSameTensors) {
  const Axes axes{{"total_seq_len", 11}, {"num_sequences", 2}, {"hidden_size", 32}};
  const TensorSet from_file = generate_inputs("vision_varlen_rope_backward", axes, 7);
  const std::string dir = solexec_dir();
  ::setenv("ATTNBWD_SOLEXEC", "/nonexistent", 1);
  const TensorSet builtin = generate_inputs("vision_varlen_rope_backward", axes, 7);
  ::setenv("ATTNBWD_SOLEXEC", dir.c_str(), 1);
  ASSERT_EQ(from_file.size(), builtin.size());
  auto it = builtin.begin();
  for (const auto& [name, t] : from_file) EXPECT_EQ(t.bytes, (it++)->second.bytes) << name;
}

TEST(Gen, AxisErrorsNameTheAxis) {
  auto error_of = [](const std::string& op, const Axes& axes) {
    try {
      generate_inputs(op, axes, 1);
    } catch (const Error& e) {
      return e.argument();
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(error_of("out_proj_backward", {{"batch_size", 1}}), "seq_len");
  EXPECT_EQ(error_of("vision_varlen_rope_backward", {{"total_seq_len", 4}}), "num_sequences");
  EXPECT_EQ(error_of("vision_mha_norm_backward", {{"batch_size", 1}, {"bogus", 2}}), "bogus");
  EXPECT_EQ(error_of("no_such_op", {{"batch_size", 1}}), "op");
}
