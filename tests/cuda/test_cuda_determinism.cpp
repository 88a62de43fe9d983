// The CUDA fast path is deterministic (issue 10; README "Backends"): 100 reruns of each op with a
// fast path give the same bits, in Default and Strict, also where split-K partial sums arrive in a
// different order on every run (out_proj at T = 256 and 512 on sm_90, both split-K reductions) and
// with deterministic requested.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "attnbwd/attnbwd.hpp"
#include "tests/common/scoped_env.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include "cuda/lt_gemm.hpp"
#include "tests/common/cuda_case.hpp"

namespace attnbwd::test {
namespace {

constexpr int kReruns = 100;

template <class Args>
void reruns_match(const char* op, const tools::Axes& axes, std::uint64_t seed) {
  const tools::TensorSet in = tools::generate_inputs(op, axes, seed, tools::default_scalars(op));
  for (const Precision p : {Precision::Default, Precision::Strict}) {
    for (const bool det : {false, true}) {
      Options o;
      o.precision = p;
      o.deterministic = det;
      const std::string what = std::string(op) + " " + tools::axes_to_string(axes) +
                               (p == Precision::Strict ? " strict" : " default") + (det ? " deterministic" : "");
      SCOPED_TRACE(what);
      CudaCase<Args> first(in, axes), again(in, axes);
      first.run(o);
      for (int r = 0; r < kReruns; ++r) {
        again.run(o);
        expect_same_bits(again.result(), first.result(), "rerun " + std::to_string(r));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(CudaDeterminism, OutProjHundredRerunsAreBitIdentical) {
  ATTNBWD_SEED_TRACE();
  reruns_match<OutProjArgs>("out_proj_backward", {{"batch_size", 1}, {"seq_len", 256}}, fresh_seed(900));
  reruns_match<OutProjArgs>("out_proj_backward", {{"batch_size", 2}, {"seq_len", 512}}, fresh_seed(901));
  if (is_sm90()) {  // the sm_90a kernel with split-K summed by the last CTA to arrive, and by a cooperative launch
    const ScopedEnv path("ATTNBWD_CUDA_OUT_PROJ", "sm90");
    for (const char* reduce : {"last", "coop"}) {
      const ScopedEnv split("ATTNBWD_CUDA_OUT_PROJ_SPLITK", reduce);
      reruns_match<OutProjArgs>("out_proj_backward", {{"batch_size", 1}, {"seq_len", 256}}, fresh_seed(904));
    }
    const ScopedEnv tile("ATTNBWD_CUDA_OUT_PROJ_DX_TILE", "256");  // auto takes 128-column dX tiles at T = 256
    reruns_match<OutProjArgs>("out_proj_backward", {{"batch_size", 1}, {"seq_len", 256}}, fresh_seed(905));
  }
}

TEST(CudaDeterminism, GqaRopeHundredRerunsAreBitIdentical) {
  ATTNBWD_SEED_TRACE();
  reruns_match<GqaRopeArgs>("gqa_rope_backward", small_gqa_axes(), fresh_seed(902));
  // T = 262 takes the grouped q/k/v launch on sm_90 by default; the separate cuBLASLt pairs (auto above 384 tokens)
  // as well, with dW on the side stream.
  const ScopedEnv separate("ATTNBWD_CUDA_GQA_QKV", "separate");
  reruns_match<GqaRopeArgs>("gqa_rope_backward", small_gqa_axes(), fresh_seed(910));
}

TEST(CudaDeterminism, VisionMhaNormHundredRerunsAreBitIdentical) {
  ATTNBWD_SEED_TRACE();
  reruns_match<VisionMhaArgs>("vision_mha_norm_backward", small_mha_axes(), fresh_seed(903));
}

TEST(CudaDeterminism, VisionVarlenRopeHundredRerunsAreBitIdentical) {
  ATTNBWD_SEED_TRACE();
  reruns_match<VisionVarlenArgs>("vision_varlen_rope_backward", small_varlen_axes(), fresh_seed(905));
}

// ATTNBWD_CUDA_STAGES=1 (the diagnostic stage split) moves the side-stream work onto the caller's
// stream: the same kernels in another order, so the same bits.
template <class Args>
void stage_timer_same_bits(const char* op, const tools::Axes& axes, std::uint64_t seed) {
  SCOPED_TRACE(op);
  const tools::TensorSet in = tools::generate_inputs(op, axes, seed, tools::default_scalars(op));
  CudaCase<Args> plain(in, axes), timed(in, axes);
  plain.run();
  setenv("ATTNBWD_CUDA_STAGES", "1", 1);
  timed.run();
  unsetenv("ATTNBWD_CUDA_STAGES");
  expect_same_bits(timed.result(), plain.result(), "with ATTNBWD_CUDA_STAGES=1");
}

TEST(CudaDeterminism, StageTimerGivesTheSameBits) {
  ATTNBWD_SEED_TRACE();
  stage_timer_same_bits<GqaRopeArgs>("gqa_rope_backward", small_gqa_axes(), fresh_seed(906));
  {  // the separate q/k/v pairs, whose weight gradients run on the side stream (the grouped launch has none there)
    const ScopedEnv separate("ATTNBWD_CUDA_GQA_QKV", "separate");
    stage_timer_same_bits<GqaRopeArgs>("gqa_rope_backward", small_gqa_axes(), fresh_seed(911));
  }
  stage_timer_same_bits<VisionMhaArgs>("vision_mha_norm_backward", small_mha_axes(), fresh_seed(907));
  stage_timer_same_bits<VisionVarlenArgs>("vision_varlen_rope_backward", small_varlen_axes(), fresh_seed(908));
}

// cuBLASLt tuning (ATTNBWD_CUDA_LT_TUNE=auto, the default) times candidates at a GEMM's first call, so which
// algorithm a call uses may differ between processes; a call with Options::deterministic never times: its bits are
// those of the first heuristic answers (=off). On gqa at B = 1, S = 301 (model widths; descriptions no other test
// uses) after the process's timed choices are forgotten: deterministic and =off calls time nothing (the process's
// count of timed descriptions stays 0) and give the same bits; a default call then times (the count grows); a
// deterministic call after it still gives the first answers' bits.
TEST(CudaDeterminism, DeterministicCallsTakeTheUntunedGemms) {
  ATTNBWD_SEED_TRACE();
  const tools::Axes axes = {{"batch_size", 1}, {"seq_len", 301}};
  const tools::TensorSet in =
      tools::generate_inputs("gqa_rope_backward", axes, fresh_seed(909), tools::default_scalars("gqa_rope_backward"));
  CudaCase<GqaRopeArgs> det(in, axes), off(in, axes), tuned(in, axes), det2(in, axes);
  cuda::lt_forget_timed_choices();
  Options d;
  d.deterministic = true;
  det.run(d);
  EXPECT_EQ(cuda::lt_timed_descriptions(), 0) << "a deterministic call timed cuBLASLt candidates";
  {
    const ScopedEnv env("ATTNBWD_CUDA_LT_TUNE", "off");
    off.run();
  }
  EXPECT_EQ(cuda::lt_timed_descriptions(), 0) << "ATTNBWD_CUDA_LT_TUNE=off timed cuBLASLt candidates";
  tuned.run();
  EXPECT_GT(cuda::lt_timed_descriptions(), 0) << "a default call timed no cuBLASLt candidates";
  det2.run(d);
  expect_same_bits(det.result(), off.result(), "deterministic against ATTNBWD_CUDA_LT_TUNE=off");
  expect_same_bits(det2.result(), det.result(), "deterministic after a default call");
}

}  // namespace
}  // namespace attnbwd::test

#endif
