// The backward of a bias-free linear layer (the problem of linear_backward_sm90.hpp: dX = dY·W, dW = dYᵀ·X, bf16,
// fp32 accumulation, one rounding per output) for few tokens (T ≤ 256) on sm_90a, in one launch that streams W
// in and dW out together (linear_thin_sm90.cu).
//
// Why a second kernel: at small T both GEMMs are memory-bound (W read, dW written: 4·out·in bytes against
// 4·T·out·in FLOPs), and the general kernel pads T to 128-row tiles (at T = 131 half of dX's products are on
// zero rows, and W is read once per 128-row tile) and gives dX and dW to separate CTAs, whose dW epilogues are
// not overlapped with products (gqa #5, H200: 69 µs for 131 MB, 1.9 TB/s). Here every CTA owns a 128-column
// slice of `in` and a range of 64-row k-blocks of `out`, and per k-block uses the same dY tile [T][64] twice:
// as dX's A (accumulated over the range) and as dW's Aᵀ (one finished 64 × 128 block of dW, stored while the
// next products run). dX's partial sums over the ranges of a slice are added in range order (deterministic): by the
// slice's cluster, each CTA a share, or by a second launch of many small CTAs.
// A dX-only form (ThinPlan::dx_only) skips X and dW and gives their shared memory to a deeper W ring (gqa's dA by
// name, ATTNBWD_CUDA_GQA_DA=thin; measured slower than cuBLASLt there, perf/NOTES.md, twenty-third session).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "linear_backward_sm90.hpp"

namespace attnbwd::cuda::sm90 {

struct ThinPlan {
  int mb = 0;        // 64-row blocks of T (1..4)
  int slices = 0;    // 128-column slices of in
  int ranges = 0;    // k-ranges of out per slice (1..8)
  bool cluster = false;  // the ranges of a slice are one cluster (else a second launch sums the partials)
  bool dx_only = false;  // dX alone: X and dW are not touched (may be null); W's ring takes their shared memory
  int kb_per_range = 0;
  int grid = 0;      // slices × ranges CTAs
  std::size_t workspace_bytes = 0;  // dX partials (fp32) when ranges > 1
};

// Why this kernel cannot take the problem (empty: it can): linear_backward_unsupported's conditions and T ≤ 256.
std::string linear_thin_unsupported(const LinearBackward& p);

// The work split on a GPU with `sms` multiprocessors: as many k-ranges per slice (at most 8) as fill the SMs once.
// dx_only: the launch computes dX = dY·W alone (a streaming GEMM that reads W once: gqa's dA at T ≤ 256).
ThinPlan linear_thin_plan(const LinearBackward& p, int sms, bool dx_only = false);

// Enqueues the kernel on `stream` (and, where the ranges are not a cluster, the partials' sum after it, a programmatic
// dependent launch). `workspace` holds plan.workspace_bytes. `after_own_kernel`: the kernel is launched as a
// programmatic dependent of the stream's previous kernel, which must be the caller's own and must not write the input
// X or the weights: the kernel loads those before it waits for that grid (it waits before loading dY).
void linear_thin_launch(const LinearBackward& p, const ThinPlan& plan, void* workspace, cudaStream_t stream,
                        bool after_own_kernel = false);

}  // namespace attnbwd::cuda::sm90
