// NaN and Inf inputs on the CUDA fast path (issue 10; README "Reliability"): every call returns
// (no crash, no hang, no error), and a NaN in grad_output reaches exactly the output elements it
// reaches on the serial oracle. The same scenarios as the host test
// (tests/reliability/test_backend_invariants.cpp), on small shapes of all four ops.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "common/rng.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include "tests/common/cuda_case.hpp"

namespace attnbwd::test {
namespace {

// Element i of a bf16 or fp32 tensor set to v.
void set_elem(tools::HostTensor& t, std::int64_t i, float v) {
  if (t.dtype == tools::DType::BF16) t.data<bf16>()[i] = bf16(v);
  if (t.dtype == tools::DType::F32) t.data<float>()[i] = v;
}

// The tensor (not scalar) inputs of bf16 or fp32 type: name and element count, grad_output first.
std::vector<std::pair<std::string, std::int64_t>> float_tensors(const tools::TensorSet& in) {
  std::vector<std::pair<std::string, std::int64_t>> v;
  for (const auto& [name, t] : in)
    if (!t.shape.empty() && (t.dtype == tools::DType::BF16 || t.dtype == tools::DType::F32))
      v.push_back({name, t.numel()});
  return v;
}

template <class Args>
std::vector<bool> nan_mask(const HostCase<Args>& c) {
  std::vector<bool> m;
  for (const auto& o : outputs_of(c.args))
    for (std::int64_t i = 0; i < o.size; ++i) m.push_back(std::isnan(static_cast<float>(o.data[i])));
  return m;
}

template <class Args>
void nan_inf_scenarios(const char* op, const tools::Axes& axes, std::uint64_t seed) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const tools::TensorSet clean = tools::generate_inputs(op, axes, seed, tools::default_scalars(op));
  const auto inputs = float_tensors(clean);
  ASSERT_FALSE(inputs.empty());
  Rng pick(seed + 1);
  const std::int64_t go_size = clean.find("grad_output")->numel();
  const std::int64_t nan_at = static_cast<std::int64_t>(pick.next() % static_cast<std::uint64_t>(go_size));
  const auto at_random = [](Rng& r, std::int64_t size) {
    return static_cast<std::int64_t>(r.next() % static_cast<std::uint64_t>(size));
  };

  using Poison = std::function<void(tools::TensorSet&, Rng&)>;
  const std::vector<std::pair<std::string, Poison>> scenarios = {
      {"one NaN in grad_output", [&](tools::TensorSet& in, Rng&) { set_elem(*in.find("grad_output"), nan_at, nan); }},
      {"+Inf in grad_output, -Inf in every other input",
       [&](tools::TensorSet& in, Rng& r) {
         set_elem(*in.find("grad_output"), nan_at, inf);
         for (const auto& [n, size] : inputs)
           if (n != "grad_output") set_elem(*in.find(n), at_random(r, size), -inf);
       }},
      {"every input element NaN",
       [&](tools::TensorSet& in, Rng&) {
         for (const auto& [n, size] : inputs)
           for (std::int64_t i = 0; i < size; ++i) set_elem(*in.find(n), i, nan);
       }},
      {"NaN, +Inf, -Inf sprinkled over 5% of every input",
       [&](tools::TensorSet& in, Rng& r) {
         for (const auto& [n, size] : inputs)
           for (std::int64_t i = 0; i < size; ++i)
             if (r.uniform() < 0.05) set_elem(*in.find(n), i, r.uniform() < 0.34 ? nan : r.uniform() < 0.5 ? inf : -inf);
       }},
      {"huge finite inputs (±3e38)",
       [&](tools::TensorSet& in, Rng& r) {
         for (const auto& [n, size] : inputs)
           for (std::int64_t i = 0; i < size; ++i) set_elem(*in.find(n), i, r.uniform() < 0.5 ? 3e38f : -3e38f);
       }},
  };
  for (std::size_t s = 0; s < scenarios.size(); ++s) {
    SCOPED_TRACE(std::string(op) + ": " + scenarios[s].first);
    tools::TensorSet in = clean;
    Rng r(seed + 10 + s);
    scenarios[s].second(in, r);
    for (const Precision p : {Precision::Default, Precision::Strict}) {
      SCOPED_TRACE(p == Precision::Strict ? "strict" : "default");
      Options o;
      o.precision = p;
      CudaCase<Args> got(in, axes);
      EXPECT_NO_THROW(got.run(o));
      if (s == 0) {
        const Oracle<Args> want(in, axes);
        const std::vector<bool> g = nan_mask(got.result()), w = nan_mask(want.host);
        std::int64_t nans = 0;
        for (bool b : w) nans += b;
        EXPECT_GT(nans, 0) << "a NaN in grad_output vanished on the oracle";
        EXPECT_TRUE(g == w) << "the fast path puts NaN in other output elements than the oracle";
      }
    }
  }
}

TEST(CudaNanInf, OutProj) {
  ATTNBWD_SEED_TRACE();
  // T = 256 takes the split-K / cuBLASLt path on sm_90, T = 1024 the TMA/wgmma kernel.
  nan_inf_scenarios<OutProjArgs>("out_proj_backward", {{"batch_size", 1}, {"seq_len", 256}}, fresh_seed(950));
  nan_inf_scenarios<OutProjArgs>("out_proj_backward", {{"batch_size", 2}, {"seq_len", 512}}, fresh_seed(951));
}

TEST(CudaNanInf, GqaRope) {
  ATTNBWD_SEED_TRACE();
  nan_inf_scenarios<GqaRopeArgs>("gqa_rope_backward", small_gqa_axes(), fresh_seed(952));
}

TEST(CudaNanInf, VisionMhaNorm) {
  ATTNBWD_SEED_TRACE();
  nan_inf_scenarios<VisionMhaArgs>("vision_mha_norm_backward", small_mha_axes(), fresh_seed(953));
}

TEST(CudaNanInf, VisionVarlenRope) {
  ATTNBWD_SEED_TRACE();
  nan_inf_scenarios<VisionVarlenArgs>("vision_varlen_rope_backward", small_varlen_axes(), fresh_seed(954));
}

}  // namespace
}  // namespace attnbwd::test

#endif
