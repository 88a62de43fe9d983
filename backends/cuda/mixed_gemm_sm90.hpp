// A mixed-input GEMM on sm_90a (mixed_gemm_sm90.cu): C = A·fp16(B) with A in fp16 and the weight W (B = Wᵀ or W)
// read in fp32, each element of W rounded to fp16 (round to nearest even) inside the kernel, fp32 accumulation. It is
// the fp16 GEMM of a separately converted W (convert_to_half) without the converted copy's round trip through DRAM:
// W is read once, as fp32. Used by vision_varlen_rope_backward at small S, where the fp32 weights dominate the
// traffic (perf/NOTES.md, seventeenth session): the QKV projection (W = Wqkv [3C][C], K-major, C in fp32) and dAO =
// dY·Wp (W = Wp [C][C] used as [K][N], N-major, C in fp16 for the attention kernels).
// Host-side interface, free of Kokkos and of the Context.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace attnbwd::cuda::sm90 {

// K-major (w_nmajor false): C[M, N] = A[M, K]·W[N, K]ᵀ into c (fp32). With w16 set, the kernel also writes fp16(W)
// to w16 [N, K] (row stride K): the copy a later fp16 GEMM on W reads, for the price of writing it.
// N-major (w_nmajor true): C[M, N] = A[M, K]·W[K, N] into c16 (fp16, rounded once from the fp32 sum).
// Row-major, row strides lda, ldw, ldc in elements.
struct MixedGemm {
  std::int64_t M = 0, N = 0, K = 0, lda = 0, ldw = 0, ldc = 0;
  bool w_nmajor = false;
  const __half* a = nullptr;
  const float* w = nullptr;
  float* c = nullptr;     // K-major W
  __half* c16 = nullptr;  // N-major W
  __half* w16 = nullptr;  // optional, K-major W only
};

// Why the kernel cannot take the problem ("" when it can): 1 ≤ M ≤ 512; N a multiple of 96 (K-major W) or 32
// (N-major W) and K of 64 (ragged edges are not tested); lda a multiple of 8 and ldw of 4 (TMA row strides are
// multiples of 16 bytes); a, w 16-byte aligned; c 8-byte or c16 4-byte aligned with ldc even; w16 (if set) 8-byte
// aligned with K a multiple of 4.
std::string mixed_gemm_unsupported(const MixedGemm& g);

// Launches the kernel on `stream` (an sm_90 device; the caller checks). Throws attnbwd::Error where
// mixed_gemm_unsupported says no or the driver refuses a tensor map.
void mixed_gemm_launch(const MixedGemm& g, cudaStream_t stream);

}  // namespace attnbwd::cuda::sm90
