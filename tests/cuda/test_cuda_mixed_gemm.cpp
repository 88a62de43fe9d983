// The fp32-weight GEMM kernel of the fast path (backends/cuda/mixed_gemm.hpp: Y = A·Wᵀ with A fp16 and W fp32
// converted to fp16 in the kernel) against a float64 reference on the same fp16-rounded operands, called
// directly: every shape edge of its work split (1 to 12 column tiles per CTA, more CTAs than SMs, M = 1 to 224
// with the 4- and 3-stage rings, K = 64 to 3584, a strided A), with and without the fp16 copy Wh (checked bit for
// bit against the host's round-to-nearest-even), Y and Wh poisoned with NaN before each call. Fresh random
// inputs; bound per element: the fp32 sum's error bound K·2⁻²⁴·Σ|a·w| (plus a tiny absolute floor).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuda/mixed_gemm.hpp"
#include "tests/common/seed.hpp"

namespace attnbwd::test {
namespace {

using attnbwd::cuda::MixedGemm;

int sm_count() {
  int dev = 0, n = 0;
  EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  return n;
}

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(std::size_t n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(T) + 16), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// One call of the kernel on fresh N(0, 1) inputs, every element of Y (and Wh) checked.
void check_shape(std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t lda, bool with_wh, int sms,
                 std::uint64_t seed) {
  const std::string label = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                            " lda=" + std::to_string(lda) + (with_wh ? " with Wh" : " no Wh") +
                            " sms=" + std::to_string(sms);
  SCOPED_TRACE(label);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<__half> a(static_cast<std::size_t>(M * lda));
  for (auto& x : a) x = __float2half_rn(dist(rng));
  std::vector<float> w(static_cast<std::size_t>(N * K));
  for (auto& x : w) x = dist(rng);
  const std::int64_t ldy = N + 2;  // a row stride past the columns: the gap must stay untouched (poison)

  DeviceBuffer<__half> da(a.size()), dwh(w.size());
  DeviceBuffer<float> dw(w.size()), dy(static_cast<std::size_t>(M * ldy));
  ASSERT_EQ(cudaMemcpy(da.p, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dw.p, w.data(), w.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dy.p, 0xff, static_cast<std::size_t>(M * ldy) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(dwh.p, 0xff, w.size() * 2), cudaSuccess);

  MixedGemm g;
  g.A = da.p, g.lda = lda, g.W = dw.p, g.Wh = with_wh ? dwh.p : nullptr, g.Y = dy.p, g.ldy = ldy;
  g.M = M, g.N = N, g.K = K;
  ASSERT_TRUE(cuda::mixed_gemm_ok(g));
  cuda::mixed_gemm(g, sms, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> y(static_cast<std::size_t>(M * ldy));
  std::vector<__half> wh(w.size());
  ASSERT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(wh.data(), dwh.p, wh.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);

  std::vector<double> wr(w.size());  // the fp16 weight the kernel multiplies by
  for (std::size_t i = 0; i < w.size(); ++i) wr[i] = static_cast<double>(__half2float(__float2half_rn(w[i])));
  std::int64_t bad = 0, gap_written = 0;
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t n = 0; n < N; ++n) {
      double sum = 0.0, mag = 0.0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(__half2float(a[m * lda + k])) * wr[n * K + k];
        sum += p;
        mag += p < 0 ? -p : p;
      }
      const double got = y[m * ldy + n], bound = static_cast<double>(K) * 0x1p-24 * mag + 1e-30;
      if (!(got - sum <= bound && sum - got <= bound) && bad++ < 5)
        ADD_FAILURE() << "Y[" << m << "][" << n << "] = " << got << ", float64 reference " << sum << " (bound "
                      << bound << ")";
    }
    for (std::int64_t n = N; n < ldy; ++n) {
      std::uint32_t bits;
      std::memcpy(&bits, &y[m * ldy + n], 4);
      gap_written += bits != 0xffffffffu;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(gap_written, 0) << "elements between rows of Y were written";
  std::int64_t wh_bad = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const __half want = with_wh ? __float2half_rn(w[i]) : __ushort_as_half(0xffff);
    wh_bad += __half_as_ushort(wh[i]) != __half_as_ushort(want);
  }
  EXPECT_EQ(wh_bad, 0) << (with_wh ? "Wh is not fp16(W)" : "Wh written although none was asked for");
}

TEST(CudaMixedGemm, MatchesFloat64OnEveryShapeEdge) {
  ATTNBWD_SEED_TRACE();
  const int sms = sm_count();
  std::uint64_t tag = 0;
  struct Shape {
    std::int64_t M, N, K, lda;
    bool wh;
  };
  const std::int64_t tiles12 = 12 * sms;  // 12 column tiles on every CTA
  const std::vector<Shape> shapes = {
      {1, 8, 64, 64, true},                        // one CTA, one tile, one k-step
      {17, 24, 128, 136, false},                   // fewer tiles than SMs; strided A
      {131, 768, 256, 256, true},                  // varlen at 2 heads
      {224, 1056, 192, 200, true},                 // M at the limit (three stages)
      {208, 8 * (sms + 5), 64, 64, false},         // the largest M with four stages; 1-2 tiles per CTA
      {16, 8 * tiles12, 64, 64, true},             // 12 tiles on every CTA
      {5, 8 * (tiles12 + 5), 128, 128, true},      // more tiles than 12 per SM: more CTAs than SMs
      {3, 8 * (11 * sms - 7), 3584, 3584, true},   // 10-11 tiles per CTA, varlen's K (hidden 3584)
      {177, 8 * (6 * sms + 1), 320, 320, false},   // 6-7 tiles: the second column half of the warps idle or not
  };
  for (const Shape& s : shapes) check_shape(s.M, s.N, s.K, s.lda, s.wh, sms, fresh_seed(tag++));
  // The same problem on fewer SMs than the device has (the split is the caller's to choose).
  check_shape(64, 8 * 40, 128, 128, true, 7, fresh_seed(tag++));
}

TEST(CudaMixedGemm, RefusesWhatItCannotTake) {
  DeviceBuffer<__half> a(256 * 128), wh(64 * 128);
  DeviceBuffer<float> w(64 * 128), y(256 * 64);
  MixedGemm g;
  g.A = a.p, g.lda = 128, g.W = w.p, g.Wh = wh.p, g.Y = y.p, g.ldy = 64, g.M = 100, g.N = 64, g.K = 128;
  EXPECT_TRUE(cuda::mixed_gemm_ok(g));
  auto refused = [&](auto&& change, const char* what) {
    MixedGemm h = g;
    change(h);
    EXPECT_FALSE(cuda::mixed_gemm_ok(h)) << what;
  };
  refused([](MixedGemm& h) { h.M = cuda::kMixedGemmMaxM + 1; }, "M past the limit");
  refused([](MixedGemm& h) { h.M = 0; }, "M = 0");
  refused([](MixedGemm& h) { h.N = 60; }, "N % 8 != 0");
  refused([](MixedGemm& h) { h.K = 96; }, "K % 64 != 0");
  refused([](MixedGemm& h) { h.lda = 132; }, "lda % 8 != 0");
  refused([](MixedGemm& h) { h.ldy = 63; }, "ldy < N");
  refused([&](MixedGemm& h) { h.W = w.p + 1; }, "W not 16-byte aligned");
  refused([&](MixedGemm& h) { h.A = a.p + 4; }, "A not 16-byte aligned");
  refused([&](MixedGemm& h) { h.Wh = wh.p + 2; }, "Wh not 16-byte aligned");
  refused([&](MixedGemm& h) { h.Y = y.p + 1; }, "Y not 8-byte aligned");
  refused([&](MixedGemm& h) { h.Y = reinterpret_cast<float*>(a.p); }, "Y overlapping A");
  refused([&](MixedGemm& h) { h.Wh = reinterpret_cast<__half*>(w.p); }, "Wh overlapping W");
}

}  // namespace
}  // namespace attnbwd::test

#endif
