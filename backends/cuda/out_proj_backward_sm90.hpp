// out_proj_backward on sm_90a: both GEMMs of the op in one persistent, warp-specialised TMA + wgmma
// kernel (out_proj_backward_sm90.cu). Host-side interface, free of Kokkos and of the Context so that
// a stand-alone probe can drive it too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnbwd::cuda::sm90 {

struct OutProjProblem {
  const void* grad_output = nullptr;  // dY [T, Hd] bf16
  const void* reshaped = nullptr;     // X  [T, Hd] bf16
  const void* weight = nullptr;       // W  [Hd(out), Hd(in)] bf16
  void* grad_attn_output = nullptr;   // [B, H, S, D] bf16
  void* grad_weight = nullptr;        // [Hd, Hd] bf16
  std::int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0;
};

// How the two GEMMs are cut into work units (tiles of 128x256, K split into `splits` ranges).
struct OutProjPlan {
  int splits_dx = 1, splits_dw = 1;
  int grid = 0;                       // persistent CTAs (at most one per SM)
  int ctas_dx = 0;                    // of which the first ctas_dx work on dX, the others on dW
  std::size_t workspace_bytes = 0;    // split-K partial sums (fp32)
  std::size_t counters = 0;           // per-tile arrival counters (unsigned)
};

// Why this kernel cannot take the problem (empty: it can). Alignment, sizes the TMA descriptors
// can express, an even head_dim (results are stored as bf16 pairs).
std::string out_proj_unsupported(const OutProjProblem& p);

// The work split for this problem on a GPU with `sms` multiprocessors.
OutProjPlan out_proj_plan(const OutProjProblem& p, int sms);

// Enqueues the kernel on `stream`. `workspace` holds plan.workspace_bytes; `counters` holds
// plan.counters zeros (the kernel leaves them zero again for the next call).
void out_proj_launch(const OutProjProblem& p, const OutProjPlan& plan, void* workspace, unsigned* counters,
                     cudaStream_t stream);

}  // namespace attnbwd::cuda::sm90
