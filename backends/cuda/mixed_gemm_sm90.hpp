// A mixed-input GEMM on sm_90a (mixed_gemm_sm90.cu): C = A·fp16(W)ᵀ with A in fp16 and W read in fp32, each
// element of W rounded to fp16 (round to nearest even) inside the kernel, fp32 accumulation and results. It is
// the fp16 GEMM of a separately converted W (convert_to_half) without the converted copy's round trip through
// DRAM: W is read once, as fp32. Used by vision_varlen_rope_backward's QKV projection at small S, where the
// 154 MB fp32 weight dominates the traffic (perf/NOTES.md, seventeenth session).
// Host-side interface, free of Kokkos and of the Context.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace attnbwd::cuda::sm90 {

// C[M, N] = A[M, K]·W[N, K]ᵀ (row-major, row strides lda, ldw, ldc in elements). With w16 set, the kernel also
// writes fp16(W) to w16 [N, K] (row stride K): the copy a later fp16 GEMM on W reads, for the price of writing it.
struct MixedGemm {
  std::int64_t M = 0, N = 0, K = 0, lda = 0, ldw = 0, ldc = 0;
  const __half* a = nullptr;
  const float* w = nullptr;
  float* c = nullptr;
  __half* w16 = nullptr;  // optional
};

// Why the kernel cannot take the problem ("" when it can): 1 ≤ M ≤ 512; N a multiple of 96 and K of 64 (ragged
// edges are not tested); lda a multiple of 8
// and ldw of 4 (TMA row strides are multiples of 16 bytes); a, w 16-byte aligned; c 8-byte aligned with ldc even;
// w16 (if set) 8-byte aligned with K a multiple of 4.
std::string mixed_gemm_unsupported(const MixedGemm& g);

// Launches the kernel on `stream` (an sm_90 device; the caller checks). Throws attnbwd::Error where
// mixed_gemm_unsupported says no or the driver refuses a tensor map.
void mixed_gemm_launch(const MixedGemm& g, cudaStream_t stream);

}  // namespace attnbwd::cuda::sm90
