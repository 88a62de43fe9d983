// A weight gradient over few tokens on sm_90a: C[M, N] = Aᵀ·B = Σ_t A[t, m]·B[t, n] for K = T ≤ 256 tokens, bf16
// operands, fp32 accumulation, one rounding to bf16 per output (wgrad_small_k_sm90.cu).
//
// Why a kernel of its own: gqa's grad_o_weight at T ≤ 256 (K = T, M = hidden 5120, N = 4096) runs on the side stream
// beside the attention chain; cuBLASLt's kernels for it load both operands per 128 × 256 tile and pay a whole epilogue
// per two to four k-blocks, and with ~208 KB of shared memory per CTA they hold SMs the chain's next kernels need.
// Here each CTA keeps a BN-column slice of B resident, streams A's 64-row blocks through a ring, and two consumer
// warpgroups take the blocks in turn, so one warpgroup's epilogue (a TMA store) runs under the other's products; the
// grid is sized to a CTA target (a part of the SMs), every CTA running to the end of its range of blocks
// (perf/NOTES.md, forty-ninth session).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace attnbwd::cuda::sm90 {

struct SmallKWgrad {
  const void* a = nullptr;  // A [K, M] bf16, row stride lda elements (C's rows are A's columns)
  const void* b = nullptr;  // B [K, N] bf16, row stride ldb elements
  void* c = nullptr;        // C [M, N] bf16, contiguous
  std::int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0;
};

// Why the kernel cannot take the problem (empty: it can): 1 ≤ K ≤ 256, M a multiple of 64, N of 128, row strides
// multiples of 8 elements, every pointer 16-byte aligned, no operand aliasing C.
std::string small_k_wgrad_unsupported(const SmallKWgrad& p);

// The grid the launch uses for a CTA target: BN-column slices of N (BN = 256 for K ≤ 128, else 128) times as many
// ranges of A's 64-row blocks as fit the target (at least one range: the grid is at least the slice count).
int small_k_wgrad_grid(const SmallKWgrad& p, int ctas_target);

// Enqueues the kernel on `stream` with small_k_wgrad_grid(p, ctas_target) CTAs. An Error where
// small_k_wgrad_unsupported says why, or where the device is not sm_90.
void small_k_wgrad_launch(const SmallKWgrad& p, int ctas_target, cudaStream_t stream);

}  // namespace attnbwd::cuda::sm90
