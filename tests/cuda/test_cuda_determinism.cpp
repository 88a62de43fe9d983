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

#include <cuda_runtime_api.h>

#include <cmath>
#include <exception>
#include <thread>
#include <vector>

#include "common/rng.hpp"
#include "cuda/context.hpp"
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

// A GEMM that accumulates into its output (beta = 1, as gqa's dXk and dXv GEMMs add into grad_hidden_states, DXSUM=acc)
// is never timed (ATTNBWD_CUDA_LT_TUNE's timing runs write C, an input there): under tuning on, the process's count of
// timed descriptions stays 0 and C comes out as C0 + A·B, added once, against a float64 sum of the same bf16 inputs (a
// timing run in place would have added A·B once per run); the next call adds once more. The tolerance allows two
// roundings: cuBLASLt's bf16 epilogue rounds the product to bf16 before it adds C (measured on an H100 in the
// forty-first session: every result a sum of two bf16 grids), as the reference's bf16(dXq + bf16(dXk)) does.
TEST(CudaDeterminism, AccumulatingGemmIsNotTimedAndAddsOnce) {
  ATTNBWD_SEED_TRACE();
  constexpr std::int64_t M = 301, N = 640, K = 384;  // a description no other test uses
  Rng rng(fresh_seed(912));
  std::vector<bf16> a(M * K), b(K * N), c0(M * N);
  for (auto& x : a) x = bf16(static_cast<float>(rng.normal()));
  for (auto& x : b) x = bf16(static_cast<float>(rng.normal()));
  for (auto& x : c0) x = bf16(static_cast<float>(4.0 * rng.normal()));
  void *da = nullptr, *db = nullptr, *dc = nullptr;
  ASSERT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, c0.size() * 2), cudaSuccess);
  struct Free {
    void *a, *b, *c;
    ~Free() { cudaFree(a), cudaFree(b), cudaFree(c); }
  } guard{da, db, dc};
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dc, c0.data(), c0.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  cuda::Gemm g;
  g.M = M, g.N = N, g.K = K, g.lda = K, g.ldb = N, g.ldc = N;
  std::vector<double> ab(M * N, 0.0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t k = 0; k < K; ++k) {
      const double x = static_cast<double>(a[i * K + k].to_float());
      for (std::int64_t j = 0; j < N; ++j) ab[i * N + j] += x * static_cast<double>(b[k * N + j].to_float());
    }
  cuda::lt_forget_timed_choices();
  std::vector<bf16> c(M * N), prev = c0;
  const ScopedEnv tune("ATTNBWD_CUDA_LT_TUNE", "on");
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::string err;
    // A thread of its own: a fresh Context, whose algorithm cache has not seen the description (also under
    // --gtest_repeat).
    std::thread([&] {
      try {
        cuda::Context& ctx = cuda::Context::current();
        ctx.claim(nullptr);
        cuda::gemm(ctx, 0, nullptr, g, da, db, dc, 1.0f, 1.0f);
        ctx.release(nullptr);
      } catch (const std::exception& e) {
        err = e.what();
      }
    }).join();
    ASSERT_EQ(err, "");
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cuda::lt_timed_descriptions(), 0) << "an accumulating GEMM was timed";
    ASSERT_EQ(cudaMemcpy(c.data(), dc, c.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    std::int64_t bad = 0;
    for (std::int64_t e = 0; e < M * N; ++e) {
      // fp32 accumulation of K products, A·B rounded to bf16, the sum rounded to bf16: each rounding at most 2^-9 of
      // its value (allowed 2^-8), plus the fp32 accumulation error (allowed 1e-3)
      const double ref = static_cast<double>(prev[e].to_float()) + ab[e];
      const double got = static_cast<double>(c[e].to_float());
      if (!(std::fabs(got - ref) <= 0.0039 * (std::fabs(ab[e]) + std::fabs(ref)) + 1e-3) && bad++ < 5)
        ADD_FAILURE() << "C[" << e / N << "][" << e % N << "] = " << got << ", expected " << ref;
    }
    EXPECT_EQ(bad, 0) << "elements off";
    prev = c;
  }
}

}  // namespace
}  // namespace attnbwd::test

#endif
