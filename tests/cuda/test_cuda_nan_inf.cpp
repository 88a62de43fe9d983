// NaN and Inf inputs on the CUDA fast path (issue 10; README "Reliability"): every call returns
// (no crash, no hang, no error), and a NaN in grad_output reaches exactly the output elements it
// reaches on the serial oracle. The same scenarios as the host test
// (tests/reliability/test_backend_invariants.cpp), on small shapes of all four ops.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "common/rng.hpp"
#include "tests/common/nan_inf.hpp"
#include "tests/common/scoped_env.hpp"
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
void check_nan_inf(const char* op, const tools::Axes& axes, std::uint64_t seed) {
  const tools::TensorSet clean = tools::generate_inputs(op, axes, seed, tools::default_scalars(op));
  const auto inputs = float_tensors(clean);
  ASSERT_FALSE(inputs.empty());
  Rng pick(seed + 1);
  const std::int64_t go_size = clean.find("grad_output")->numel();
  const std::int64_t nan_at = static_cast<std::int64_t>(pick.next() % static_cast<std::uint64_t>(go_size));
  const std::vector<NanInfScenario> scenarios = nan_inf_scenarios(inputs, nan_at);
  for (std::size_t s = 0; s < scenarios.size(); ++s) {
    SCOPED_TRACE(std::string(op) + ": " + scenarios[s].name);
    tools::TensorSet in = clean;
    Rng r(seed + 10 + s);
    scenarios[s].apply([&](const std::string& n, std::int64_t i, float v) { set_elem(*in.find(n), i, v); }, r);
    for (const Precision p : {Precision::Default, Precision::Strict}) {
      SCOPED_TRACE(p == Precision::Strict ? "strict" : "default");
      Options o;
      o.precision = p;
      CudaCase<Args> got(in, axes);
      EXPECT_NO_THROW(got.run(o));
      if (s == 0) {
        const Oracle<Args> want(in, axes);
        const std::vector<bool> g = nan_mask(got.result().args), w = nan_mask(want.host.args);
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
  check_nan_inf<OutProjArgs>("out_proj_backward", {{"batch_size", 1}, {"seq_len", 256}}, fresh_seed(950));
  check_nan_inf<OutProjArgs>("out_proj_backward", {{"batch_size", 2}, {"seq_len", 512}}, fresh_seed(951));
}

TEST(CudaNanInf, GqaRope) {
  ATTNBWD_SEED_TRACE();
  // B = 2, S = 131 (T = 262) takes the padded GEMM attention path (and on sm_90 the grouped q/k/v launch), B = 1 the
  // small attention kernels (S ≤ 160, T ≤ 256); T = 262 once more with the separate cuBLASLt q/k/v pairs and their
  // three-way add (auto's path above 384 tokens, and everywhere off sm_90).
  check_nan_inf<GqaRopeArgs>("gqa_rope_backward", small_gqa_axes(), fresh_seed(952));
  tools::Axes one = small_gqa_axes();
  one["batch_size"] = 1;
  check_nan_inf<GqaRopeArgs>("gqa_rope_backward", one, fresh_seed(955));
  const ScopedEnv separate("ATTNBWD_CUDA_GQA_QKV", "separate");
  check_nan_inf<GqaRopeArgs>("gqa_rope_backward", small_gqa_axes(), fresh_seed(956));
}

TEST(CudaNanInf, VisionMhaNorm) {
  ATTNBWD_SEED_TRACE();
  check_nan_inf<VisionMhaArgs>("vision_mha_norm_backward", small_mha_axes(), fresh_seed(953));
}

TEST(CudaNanInf, VisionVarlenRope) {
  ATTNBWD_SEED_TRACE();
  check_nan_inf<VisionVarlenArgs>("vision_varlen_rope_backward", small_varlen_axes(), fresh_seed(954));
}

}  // namespace
}  // namespace attnbwd::test

#endif
