// A GEMM with an fp32 weight operand converted to fp16 inside the kernel, for few rows (mixed_gemm.cu):
//   Y[M, N] = A[M, K] · W[N, K]ᵀ,   A fp16, W fp32 (rounded to fp16 to nearest even, as convert_to_half does),
//   fp32 accumulation and result (row stride ldy); where Wh is not null also Wh = fp16(W) [N, K] (contiguous).
// At a few hundred rows the weight's bytes are the cost of this product (varlen's QKV GEMM at S = 131: 154 MB of
// fp32 weight, 10 GFLOP): the kernel reads W once, where convert-then-GEMM reads it, writes the fp16 copy and
// reads that again. mma.sync m16n8k16 (sm_80 and later: the sm_90a and sm_100a builds alike).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnbwd::cuda {

struct MixedGemm {
  const __half* A = nullptr;  // [M, K], row stride lda
  std::int64_t lda = 0;
  const float* W = nullptr;   // [N, K], contiguous
  __half* Wh = nullptr;       // [N, K], contiguous, or null
  float* Y = nullptr;         // [M, N], row stride ldy
  std::int64_t ldy = 0;
  std::int64_t M = 0, N = 0, K = 0;
};

// The most rows the kernel takes (all of them are held by one CTA).
constexpr std::int64_t kMixedGemmMaxM = 224;

// Whether mixed_gemm takes the problem: 1 ≤ M ≤ kMixedGemmMaxM, N ≥ 8 and N % 8 == 0, K ≥ 64 and K % 64 == 0,
// A, W and Wh 16-byte aligned with lda % 8 == 0, Y 8-byte aligned with ldy even and ≥ N, and no overlap of
// Y or Wh with A or W.
bool mixed_gemm_ok(const MixedGemm& g);

// Enqueues the kernel on `stream` (the current device, `sms` multiprocessors). The caller checks mixed_gemm_ok
// first.
void mixed_gemm(const MixedGemm& g, int sms, cudaStream_t stream);

}  // namespace attnbwd::cuda
